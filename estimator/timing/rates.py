"""What a step time is worth: throughput, model and hardware FLOP utilization, time to train,
GPU-hours and cost. One formula for the single estimate and the sweep (whose arguments are
arrays of layouts); nothing here validates, the callers do.

MFU counts the model's FLOPs (3x the causal forward) and HFU the FLOPs actually run (with the
recomputation), both over step time x GPUs x the dense peak of the format the GEMMs run in
(Chowdhery et al. 2022, PaLM, appendix B; Korthikanti et al. 2022 for HFU).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.xp import Num

__all__ = ["SECONDS_PER_HOUR", "Rates", "derive_rates"]

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Rates:
    """Throughput and utilization of a step; the time to train, GPU-hours and cost where a
    token count and a price are given (None otherwise)."""

    tokens_per_s: Num
    tokens_per_s_per_gpu: Num
    mfu: Num
    hfu: Num
    usd_per_1m_tokens: Num | None
    time_to_train_s: Num | None
    gpu_hours: Num | None
    cost_usd: Num | None


def derive_rates(
    *,
    step_s: Num,
    tokens_per_step: Num,
    gpus: Num,
    model_flops: Num,
    hardware_flops: Num,
    peak_flop_per_s: float,
    usd_per_gpu_hour: Num | None = None,
    tokens: float | None = None,
) -> Rates:
    """The rates of ``step_s`` seconds a step of ``tokens_per_step`` tokens on ``gpus`` GPUs."""
    tokens_per_s = tokens_per_step / step_s
    per_1m = ttt = gpu_hours = cost = None
    if usd_per_gpu_hour is not None:
        per_1m = usd_per_gpu_hour * gpus * 1e6 / (tokens_per_s * SECONDS_PER_HOUR)
    if tokens is not None:
        ttt = tokens / tokens_per_s
        gpu_hours = ttt * gpus / SECONDS_PER_HOUR
        if usd_per_gpu_hour is not None:
            cost = gpu_hours * usd_per_gpu_hour
    return Rates(
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / gpus,
        mfu=model_flops / (step_s * gpus * peak_flop_per_s),
        hfu=hardware_flops / (step_s * gpus * peak_flop_per_s),
        usd_per_1m_tokens=per_1m,
        time_to_train_s=ttt,
        gpu_hours=gpu_hours,
        cost_usd=cost,
    )
