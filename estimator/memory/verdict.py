"""Whether a training plan fits, said with how sure the planner can be.

A point estimate against capacity reads as certain when it is not: the estimate has an error,
and a plan within that error of the capacity may go either way. ``fit_verdict`` says "fits",
"tight" or "does_not_fit", with a sentence:

- where the caller has a likely range of the peak (the planner's error on similar published
  peak-memory measurements of the plan's stack, ``estimator.accuracy``), the range decides:
  "fits" where even its top is within capacity, "does_not_fit" where even its bottom is over,
  "tight" where it straddles the capacity;
- elsewhere the named overheads do, which are estimates, not measurements (allocator
  fragmentation, CUDA context, NCCL buffers): "tight" where the tensors alone fit but not with
  the overheads on top.

Published runs that ran are the check (``validation/report.py``: every compared training run's
verdict; a run that ran must never read "does_not_fit" without a stated reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from estimator.inputs.accelerator import GIB
from estimator.xp import Num, logical_and, where

# The share of a GPU's memory a feasible layout leaves free by default (the training sweep's
# ``min_headroom``): a plan that fills a GPU to its last few percent fails on the first
# allocator hiccup or a longer batch, and the CLI calls one under it tight.
MIN_HEADROOM = 0.05

if TYPE_CHECKING:
    from estimator.memory.training import TrainingMemory

__all__ = ["FIT_VERDICTS", "MIN_HEADROOM", "FitVerdict", "fit_index", "fit_verdict", "training_fit"]

FitVerdict = Literal["fits", "tight", "does_not_fit"]
FIT_VERDICTS: tuple[FitVerdict, ...] = ("fits", "tight", "does_not_fit")

_LEAVE = (
    " Leave headroom (more recomputation, a higher ZeRO stage, a smaller micro-batch) or confirm"
    " with a short run."
)


def fit_index(
    total: Num, capacity: Num, overheads: Num, likely: tuple[Num, Num] | None = None
) -> Num:
    """The verdict's index in ``FIT_VERDICTS`` for a peak of ``total`` (of which ``overheads``
    are the named overheads) against ``capacity``, all in one unit; ``likely``: the peak's
    likely range, where measurements give one. Plain numbers for one plan, arrays for a sweep's
    layouts (one rule for both)."""
    fits: Num
    out: Num
    if likely is None:
        fits, out = total <= capacity, total - overheads > capacity
    else:
        low, high = likely
        fits = logical_and(high <= capacity, total <= capacity)
        out = logical_and(low > capacity, total > capacity)
    return where(fits, 0, where(out, 2, 1))


def fit_verdict(
    total_gib: float,
    capacity_gib: float,
    overheads_gib: float,
    likely: tuple[float, float] | None = None,
) -> tuple[FitVerdict, str]:
    """The verdict and its sentence for a peak of ``total_gib`` (of which ``overheads_gib`` are
    the named overheads) on a GPU of ``capacity_gib``; ``likely``: the peak's likely range,
    where measurements give one."""
    cap = f"{capacity_gib:.1f} GiB"
    index = fit_index(total_gib, capacity_gib, overheads_gib, likely)
    if likely is not None:
        low, high = likely
        peak = f"likely {low:.1f} - {high:.1f} GiB (the planner's {total_gib:.1f} GiB)"
        if index == 0:
            return "fits", f"Fits even at the top of its likely peak, {peak}, of {cap}."
        if index == 2:
            return "does_not_fit", (
                f"Does not fit even at the bottom of its likely peak, {peak}, of {cap}."
            )
        return "tight", (
            f"Tight: its peak is {peak} against {cap}; the planner's error on similar published"
            " measurements cannot settle whether it fits." + _LEAVE
        )
    tensors = total_gib - overheads_gib
    unknown = (
        "no published peak-memory measurements of this stack near the plan bound the estimate's"
        " error"
    )
    if index == 0:
        return "fits", f"Fits: {total_gib:.1f} GiB of {cap} per GPU ({unknown})."
    if index == 2:
        return "does_not_fit", (
            f"Does not fit: its tensors alone take {tensors:.1f} GiB of {cap} per GPU,"
            f" {total_gib:.1f} GiB with the overheads ({unknown})."
        )
    return "tight", (
        f"Tight: its tensors take {tensors:.1f} GiB of {cap} per GPU, and the estimated overheads"
        f" (allocator fragmentation, CUDA context, NCCL buffers) bring it to {total_gib:.1f} GiB;"
        f" whether it fits turns on how large those really are ({unknown})." + _LEAVE
    )


def training_fit(
    memory: TrainingMemory, likely: tuple[float, float] | None = None
) -> tuple[FitVerdict, str]:
    """``fit_verdict`` of a training estimate's memory (``likely`` in GiB); a plan whose
    offloaded bytes overflow its host's memory does not fit, whatever the GPU holds."""
    if memory.host_capacity_bytes and memory.host_bytes > memory.host_capacity_bytes:
        return "does_not_fit", (
            f"Does not fit: what it offloads takes {memory.host_bytes / GIB:.1f} GiB of host"
            f" memory per GPU, over the {memory.host_capacity_bytes / GIB:.1f} GiB there."
        )
    return fit_verdict(
        memory.total_bytes / GIB,
        memory.capacity_bytes / GIB,
        memory.overhead_bytes / GIB,
        likely,
    )
