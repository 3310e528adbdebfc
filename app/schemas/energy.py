"""Energy and total-cost request fields (issue 48), declared once and mixed into the training,
serving and sweep requests: the GPU's power, the node's and the facility's overheads, the
electricity price, the purchase that owning is costed from, and the traffic mix a blended
token price is quoted at. Defaults are the catalog's (``estimator/catalog/power.json``, each
with its source); the responses' energy and TCO blocks are described here too."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from app.schemas.common import Request
from app.schemas.fields import form
from estimator.energy import default

__all__ = [
    "EnergyFields",
    "EnergyOut",
    "FacilityFields",
    "PriceMixFields",
    "SweepPowerFields",
    "TcoOut",
    "TokenPricesOut",
]

GROUP = "Energy"
Watts = Annotated[float, Field(ge=1, le=1e5)]


class FacilityFields(Request):
    """What a GPU draws and the overheads around it."""

    gpu_power_w: Watts | None = Field(
        None,
        description="Each GPU's draw in watts (e.g. a measured average). Default: the"
        " catalog's TDP, the bound; an accelerator without a published figure has no energy"
        " until one is given",
        json_schema_extra=form("GPU power (W)", GROUP, "TDP"),
    )
    node_overhead: Annotated[float, Field(ge=0, le=10)] = Field(
        default("node_overhead"),
        description="The host's power (CPUs, memory, NICs, fans, supplies) as a share of the"
        " GPUs' on top (0.82: DGX H100's 10.2 kW maximum over its eight 700 W GPUs)",
        json_schema_extra=form("Node overhead", GROUP, str(default("node_overhead"))),
    )
    pue: Annotated[float, Field(ge=1, le=5)] = Field(
        default("pue"),
        description="Power Usage Effectiveness: the facility's power over the IT power (1.1:"
        " Google's fleet; 1.57: the average large data centre, Uptime Institute 2021)",
        json_schema_extra=form("PUE", GROUP, str(default("pue"))),
    )


class EnergyFields(FacilityFields):
    """A single plan's power and what power and owning cost."""

    usd_per_kwh: Annotated[float, Field(ge=0, le=10)] = Field(
        default("usd_per_kwh"),
        description="Electricity price, USD per kWh (0.0806: the U.S. industrial average in"
        " 2023, EIA)",
        json_schema_extra=form("Power $/kWh", GROUP, str(default("usd_per_kwh"))),
    )
    capex_usd_per_gpu: Annotated[float, Field(ge=0, le=1e7)] | None = Field(
        None,
        description="Purchase price per GPU, its share of server and network included: costs"
        " owning beside renting (no default: list prices are not public)",
        json_schema_extra=form("Purchase $ per GPU", GROUP, "none", flag="--capex"),
    )
    life_years: Annotated[float, Field(gt=0, le=30)] = Field(
        default("life_years"),
        description="Years a purchase is paid off over (5: the servers' useful life in"
        " Meta's and Amazon's filings)",
        json_schema_extra=form("Life (years)", GROUP, str(default("life_years"))),
    )
    cost_of_money: Annotated[float, Field(ge=0, le=1)] = Field(
        default("cost_of_money"),
        description="Annual cost of capital (0: straight-line depreciation, as the filings"
        " book servers)",
        json_schema_extra=form("Cost of money (per year)", GROUP, "0"),
    )


class PriceMixFields(Request):
    """The traffic mix a blended token price is stated at."""

    input_per_output: Annotated[float, Field(ge=0, le=1e4)] = Field(
        default("input_per_output"),
        description="Input tokens per output token of the blended price (3: Artificial"
        " Analysis's 3:1 blend); the input at the prefix cache's hit rate",
        json_schema_extra=form("Blend: input per output", GROUP, "3"),
    )


class SweepPowerFields(FacilityFields):
    """A sweep's power: one figure for every GPU or one by accelerator id."""

    gpu_powers_w: dict[Annotated[str, Field(max_length=128)], Watts] | None = Field(
        None, description="Watts per GPU by accelerator id, over the catalog's TDPs"
    )


class EnergyOut(BaseModel):
    """Energy of the plan at the facility (GPUs, their node's host share and the PUE)."""

    gpu_w: float = Field(description="One GPU's power (TDP, or the request's)")
    basis: str = Field(description="tdp (the catalog's rated power: a bound) or given")
    node_w_per_gpu: float = Field(description="With the host's share")
    facility_w_per_gpu: float = Field(description="With the facility's (PUE)")
    facility_w: float = Field(description="All the plan's GPUs at the facility")
    j_per_token: float = Field(description="Joules per token (serving: per output token)")
    kwh_per_1m_tokens: float
    tokens_per_s_per_mw: float = Field(description="Tokens/s per provisioned megawatt")
    mwh: float | None = Field(None, description="The run's energy (training, with tokens)")


class TcoOut(BaseModel):
    """$ per GPU-hour rented (today's price) beside owned (purchase + power)."""

    rental_usd_per_gpu_hour: float | None
    power_usd_per_gpu_hour: float = Field(description="The facility's power at $ per kWh")
    capital_usd_per_gpu_hour: float | None = Field(description="The purchase over its life")
    owned_usd_per_gpu_hour: float | None = Field(description="Capital + power")


class TokenPricesOut(BaseModel):
    """$ per 1M tokens as providers state them, from the replica's $ per hour."""

    usd_per_1m_input_tokens: float | None = Field(description="Computed prompt tokens")
    usd_per_1m_cached_input_tokens: float | None = Field(
        description="Prompt tokens read from the prefix cache (None without one)"
    )
    usd_per_1m_output_tokens: float | None = Field(description="Decode's share of the time")
    usd_per_1m_blended_tokens: float | None = Field(description="At input_per_output")
    input_per_output: float
    cached_share: float = Field(description="The share of input tokens cached")
