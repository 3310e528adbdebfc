"""Energy and total cost of a plan: the power a GPU draws with its share of the node and the
facility, the energy of a training run and of the tokens served, tokens per second per
provisioned megawatt, the $ per GPU-hour of owning a GPU against renting it, and token prices
as API providers state them.

Power is bounded, not measured: a GPU at its rated board power (``tdp_w``, the catalog's, or
the user's ``gpu_w``), its node's host at ``node_overhead`` of that on top, the facility at
``pue`` times the node's (``catalog/power.json`` has each default and its source). The bound
is what a provisioned megawatt feeds; measured draw under load runs below it (an MLPerf
Training node at 0.66 of the DGX H100 maximum, ``tests/test_energy.py``), so energy here is an
upper estimate unless a measured ``gpu_w`` is given. An accelerator with no published power
figure has none: its energy is refused (``NoPowerFigure``) until the user gives one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from estimator.catalog.files import load
from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator

if TYPE_CHECKING:  # numbers or numpy arrays; numpy is not imported by a single estimate
    from estimator.xp import Num

__all__ = [
    "HOURS_PER_YEAR",
    "J_PER_KWH",
    "Energy",
    "NoPowerFigure",
    "Ownership",
    "Power",
    "PowerSetup",
    "Tco",
    "TokenPrices",
    "cached_token_cost",
    "default",
    "energy_of",
    "measured",
    "missing_power",
    "power_per_gpu",
    "require_power",
    "tco",
    "token_prices",
]

J_PER_KWH = 3.6e6
HOURS_PER_YEAR = 8766.0  # 365.25 days: a purchase is spread over every hour of its life
POWER_FIELD = "gpu_power_w"  # the request field a missing figure is asked for under


@cache
def _catalog() -> dict[str, Any]:
    return load("power.json")


def default(name: str) -> float:
    """The catalog's default for ``name`` (``node_overhead``, ``pue``, ``usd_per_kwh``,
    ``life_years``, ``cost_of_money``, ``input_per_output``); each has its source there."""
    return float(_catalog()["defaults"][name]["value"])


def missing_power() -> dict[str, str]:
    """The accelerators with no published power figure, with why."""
    return {m["accelerator"]: m["reason"] for m in _catalog()["missing"]}


def measured() -> tuple[dict[str, Any], ...]:
    """Published measurements of power under load (``power.json``'s ``measured``)."""
    return tuple(_catalog()["measured"])


class NoPowerFigure(SpecError):
    """An accelerator with no published power figure and none given: its energy is refused
    with the reason, under the request field that would supply it."""

    def __init__(self, accelerator: str, reason: str) -> None:
        super().__init__(
            POWER_FIELD,
            f"no published power figure for {accelerator} ({reason}): give its draw in watts",
        )
        self.accelerator = accelerator
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PowerSetup:
    """What a GPU draws and what it takes around it: ``gpu_w`` by accelerator id (the user's
    figure, e.g. a measured draw; else the catalog's TDP), the host's share on top
    (``node_overhead``) and the facility's multiplier (``pue``)."""

    gpu_w: Mapping[str, float] = field(default_factory=dict)
    node_overhead: float = field(default_factory=lambda: default("node_overhead"))
    pue: float = field(default_factory=lambda: default("pue"))

    def __post_init__(self) -> None:
        for acc, w in self.gpu_w.items():
            if not w > 0:
                raise SpecError(f"{POWER_FIELD}.{acc}", "must be > 0 W", w)
        if not 0 <= self.node_overhead <= 10:
            raise SpecError("node_overhead", "must be within 0-10 (a share of GPU power)", None)
        if not 1 <= self.pue <= 5:
            raise SpecError("pue", "must be within 1-5", self.pue)


@dataclass(frozen=True, slots=True)
class Power:
    """One GPU's power: its own (``gpu_w``), with its node's host share (``node_w``) and with
    the facility's overhead (``facility_w``), and where the GPU's figure came from."""

    gpu_w: float
    node_w: float
    facility_w: float
    basis: str  # "tdp" (the catalog's rated power) or "given"


def power_per_gpu(acc: Accelerator, setup: PowerSetup) -> Power:
    """``acc``'s power per GPU under ``setup``; ``NoPowerFigure`` where neither the user nor
    the catalog has a figure (the reason from ``power.json``)."""
    given = setup.gpu_w.get(acc.id)
    if given is not None:
        gpu_w, basis = float(given), "given"
    elif acc.tdp_w is not None:
        gpu_w, basis = float(acc.tdp_w), "tdp"
    else:
        reason = missing_power().get(acc.id, "not in the catalog's power data")
        raise NoPowerFigure(acc.id, reason)
    node_w = gpu_w * (1 + setup.node_overhead)
    return Power(gpu_w=gpu_w, node_w=node_w, facility_w=node_w * setup.pue, basis=basis)


def require_power(accelerators: tuple[Accelerator, ...], setup: PowerSetup) -> None:
    """Refuse (``NoPowerFigure``) the first of ``accelerators`` with no power figure: for an
    answer that needs every one's energy (a sweep ranked by energy)."""
    for acc in accelerators:
        power_per_gpu(acc, setup)


@dataclass(frozen=True, slots=True)
class Energy:
    """Energy of ``gpus`` GPUs at ``power`` making ``tokens_per_s``: the facility's watts,
    joules and kWh per token, tokens/s per provisioned MW and, over a run of known length,
    its MWh (None without one)."""

    facility_w: Num
    j_per_token: Num
    kwh_per_1m_tokens: Num
    tokens_per_s_per_mw: Num
    mwh: Num | None


def energy_of(power: float, gpus: Num, tokens_per_s: Num, seconds: Num | None = None) -> Energy:
    """The ``Energy`` of ``gpus`` GPUs drawing ``power`` W each (facility included) at
    ``tokens_per_s``, over ``seconds`` of wall clock where given (a training run's time to
    train). Energy is power x time; a token's share is the power over the rate. Works on
    arrays of layouts (the training sweep's)."""
    facility_w = power * gpus
    j_per_token = facility_w / tokens_per_s
    return Energy(
        facility_w=facility_w,
        j_per_token=j_per_token,
        kwh_per_1m_tokens=j_per_token * 1e6 / J_PER_KWH,
        tokens_per_s_per_mw=tokens_per_s / (facility_w / 1e6),
        mwh=None if seconds is None else facility_w * seconds / J_PER_KWH / 1e3,
    )


@dataclass(frozen=True, slots=True)
class Ownership:
    """How owning a GPU is costed: its purchase price (``capex_usd_per_gpu``, the GPU's share
    of its server and network; None: not costed), the years it is paid off over, the annual
    cost of money, and the electricity price."""

    capex_usd_per_gpu: float | None = None
    life_years: float = field(default_factory=lambda: default("life_years"))
    cost_of_money: float = field(default_factory=lambda: default("cost_of_money"))
    usd_per_kwh: float = field(default_factory=lambda: default("usd_per_kwh"))

    def __post_init__(self) -> None:
        if self.capex_usd_per_gpu is not None and self.capex_usd_per_gpu < 0:
            raise SpecError("capex_usd_per_gpu", "must be >= 0", self.capex_usd_per_gpu)
        if not 0 < self.life_years <= 30:
            raise SpecError("life_years", "must be > 0 and <= 30", self.life_years)
        if not 0 <= self.cost_of_money <= 1:
            raise SpecError("cost_of_money", "must be within 0-1 (an annual rate)", None)
        if not 0 <= self.usd_per_kwh <= 10:
            raise SpecError("usd_per_kwh", "must be within 0-10", self.usd_per_kwh)


@dataclass(frozen=True, slots=True)
class Tco:
    """$ per GPU-hour: renting (today's price, power included) beside owning (the purchase
    spread over the life, plus the facility's power at the electricity price)."""

    rental_usd_per_gpu_hour: float | None
    power_usd_per_gpu_hour: float
    capital_usd_per_gpu_hour: float | None
    owned_usd_per_gpu_hour: float | None


def capital_recovery(rate: float, years: float) -> float:
    """The share of a purchase paid each year to repay it with interest at ``rate`` over
    ``years`` (the capital recovery factor, r / (1 - (1 + r)^-n)); 1/n at no interest
    (straight-line depreciation)."""
    if rate == 0:
        return 1 / years
    return rate / (1 - float((1 + rate) ** -years))


def tco(power: Power, own: Ownership, rental_usd_per_gpu_hour: float | None) -> Tco:
    """One GPU's cost per hour rented and owned (``Ownership``): a purchase is spread over
    every hour of its life (``HOURS_PER_YEAR``: used or idle), and the facility's power
    (``power.facility_w``) is paid at ``usd_per_kwh`` while it runs."""
    power_usd = power.facility_w / 1e3 * own.usd_per_kwh
    capital = None
    if own.capex_usd_per_gpu is not None:
        yearly = own.capex_usd_per_gpu * capital_recovery(own.cost_of_money, own.life_years)
        capital = yearly / HOURS_PER_YEAR
    return Tco(
        rental_usd_per_gpu_hour=rental_usd_per_gpu_hour,
        power_usd_per_gpu_hour=power_usd,
        capital_usd_per_gpu_hour=capital,
        owned_usd_per_gpu_hour=None if capital is None else capital + power_usd,
    )


@dataclass(frozen=True, slots=True)
class TokenPrices:
    """$ per 1M tokens as API providers state them: input (computed prompt tokens), cached
    input (read from the prefix cache; None without one), output, and the blend at
    ``input_per_output`` input tokens per output token (the input at its cached share)."""

    input: float | None
    cached_input: float | None
    output: float | None
    blended: float | None
    input_per_output: float
    cached_share: float


def cached_token_cost(ttft_cached_s: float, ttft_whole_s: float, hit_rate: float) -> float:
    """A cached prompt token's cost as a share of a computed one's, from a lone request's
    prefill with and without the prefix cache: the prefill with ``hit_rate`` of the prompt
    cached takes ``(1 - h) + h k`` of the whole one's time, so ``k`` is what is left of it over
    the cached share (clipped to 0-1; the attention reads of the cached keys, the fixed costs
    of a pass). Linear in the tokens: an approximation."""
    if not hit_rate or ttft_whole_s <= 0:
        return 0.0
    k = (ttft_cached_s / ttft_whole_s - (1 - hit_rate)) / hit_rate
    return min(max(k, 0.0), 1.0)


def token_prices(
    usd_per_hour: float | None,
    rates: tuple[float, float],
    prefill_share: float,
    cache: tuple[float, float] = (0.0, 0.0),
    input_per_output: float | None = None,
) -> TokenPrices:
    """Token prices of a replica costing ``usd_per_hour``, at ``rates`` (input, output tokens
    per second): the GPU time split by ``prefill_share`` (prefill's, over the input tokens;
    the rest, decode's, over the output tokens, as ``serving.estimate`` splits it), the input's
    share between computed and cached tokens by ``cache`` (the prefix cache's hit rate, a
    cached token's cost as a share of a computed one's: ``cached_token_cost``). The blend at
    the traffic's own mix equals the all-in cost per token."""
    mix = default("input_per_output") if input_per_output is None else input_per_output
    hit, k = cache
    if usd_per_hour is None:
        return TokenPrices(None, None, None, None, mix, hit)
    per_s = usd_per_hour / 3600
    in_tps, out_tps = rates
    all_input = per_s * prefill_share / in_tps * 1e6 if in_tps else None
    output = per_s * (1 - prefill_share) / out_tps * 1e6 if out_tps else None
    computed = cached = None
    if all_input is not None:
        computed = all_input / ((1 - hit) + hit * k) if (1 - hit) + hit * k else all_input
        cached = computed * k if hit else None
    blended = None
    if all_input is not None and output is not None:
        blended = (mix * all_input + output) / (mix + 1)
    return TokenPrices(computed, cached, output, blended, mix, hit)
