"""The energy, TCO and token-price blocks of an answer (issue 48): the request's energy fields
read into the core's specs (``estimator.energy``), and the core's results as the JSON the API,
the pages and the CLI show. An accelerator with no published power figure answers with its
energy empty and the reason (``energy_refused``); an answer that cannot be had without it (a
sweep ranked by energy, a purchase price to cost) is refused with a 422 naming
``gpu_power_w``."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from app.schemas.energy import EnergyFields, FacilityFields, SweepPowerFields
from estimator.energy import (
    NoPowerFigure,
    Ownership,
    PowerSetup,
    cached_token_cost,
    energy_of,
    power_per_gpu,
    tco,
    token_prices,
)
from estimator.inputs.accelerator import Accelerator

if TYPE_CHECKING:
    from estimator.serving.estimate import InferenceEstimate

__all__ = [
    "energy_answer",
    "ownership_of",
    "power_setup",
    "token_prices_answer",
]


def power_setup(req: FacilityFields, accelerators: tuple[str, ...]) -> PowerSetup:
    """The request's power: its one ``gpu_power_w`` for each of ``accelerators``, a sweep's
    ``gpu_powers_w`` by id over it, and the overheads."""
    watts = dict.fromkeys(accelerators, req.gpu_power_w) if req.gpu_power_w is not None else {}
    if isinstance(req, SweepPowerFields) and req.gpu_powers_w:
        watts |= req.gpu_powers_w
    return PowerSetup(gpu_w=watts, node_overhead=req.node_overhead, pue=req.pue)


def ownership_of(req: EnergyFields) -> Ownership:
    return Ownership(
        capex_usd_per_gpu=req.capex_usd_per_gpu,
        life_years=req.life_years,
        cost_of_money=req.cost_of_money,
        usd_per_kwh=req.usd_per_kwh,
    )


def energy_answer(
    acc: Accelerator,
    setup: tuple[PowerSetup, Ownership],
    gpus: int,
    tokens_per_s: float,
    seconds: float | None,
    rental_usd_per_gpu_hour: float | None,
) -> dict[str, Any]:
    """The ``energy``, ``energy_refused`` and ``tco`` blocks of a plan of ``gpus`` GPUs at
    ``tokens_per_s`` (serving: output tokens), over a run of ``seconds`` where known. Without
    a power figure: both empty and the reason, unless a purchase price asks for owning's cost
    (refused: ``NoPowerFigure``)."""
    power, own = setup
    try:
        p = power_per_gpu(acc, power)
    except NoPowerFigure as exc:
        if own.capex_usd_per_gpu is not None:
            raise
        return {"energy": None, "energy_refused": exc.reason, "tco": None}
    e = energy_of(p.facility_w, gpus, tokens_per_s, seconds) if tokens_per_s > 0 else None
    energy = None
    if e is not None:
        energy = {
            "gpu_w": p.gpu_w,
            "basis": p.basis,
            "node_w_per_gpu": p.node_w,
            "facility_w_per_gpu": p.facility_w,
            **{k: float(v) if v is not None else None for k, v in asdict(e).items()},
        }
    return {
        "energy": energy,
        "energy_refused": None if energy else "no tokens flow",
        "tco": asdict(tco(p, own, rental_usd_per_gpu_hour)),
    }


def token_prices_answer(e: InferenceEstimate, input_per_output: float) -> dict[str, Any]:
    """The serving estimate's token prices as providers state them: input and output by
    prefill's and decode's share of the replica's time (``estimate.prefill_time_share``),
    cached input priced from a lone request's prefill with and without the prefix cache."""
    cache = (0.0, 0.0)
    pc = e.prefix_cache
    if pc is not None and pc.hit_rate and pc.ttft_speedup:
        k = cached_token_cost(pc.ttft_without_s / pc.ttft_speedup, pc.ttft_without_s, pc.hit_rate)
        cache = (pc.hit_rate, k)
    p = token_prices(
        e.usd_per_hour,
        (e.input_tokens_per_s, e.output_tokens_per_s),
        e.prefill_time_share,
        cache,
        input_per_output,
    )
    return {
        "usd_per_1m_input_tokens": p.input,
        "usd_per_1m_cached_input_tokens": p.cached_input,
        "usd_per_1m_output_tokens": p.output,
        "usd_per_1m_blended_tokens": p.blended,
        "input_per_output": p.input_per_output,
        "cached_share": p.cached_share,
    }
