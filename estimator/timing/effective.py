"""A training run as it really goes: interruptions, checkpoints and restarts in the wall-clock.

The ideal time to train (``timing.rates``) assumes every GPU-hour does useful work. A
synchronous job on ``N`` GPUs stops whenever any of them fails, so it sees interruptions at
``N`` times the per-GPU rate; each costs the restart (detect, reschedule, reload the last
checkpoint) and the work done since that checkpoint; and every checkpoint blocks training for
its save, or for the copy to host memory only when the save is asynchronous (Megatron-Core's
``async_save`` of distributed checkpoints, PyTorch DCP's ``async_save``: the device-to-host copy
blocks, the write to storage runs behind the next steps).

First-order model (Young 1974, "A first order approximation to the optimum checkpoint
interval", CACM 17(9); Daly 2006, "A higher order estimate of the optimum checkpoint interval
for restart dumps", FGCS 22(3)): with job mean time between interruptions ``M = 1 / (rate N)``,
blocking save ``d``, restart ``R`` and checkpoint interval ``t`` (of useful work), the wall-clock
of ``U`` seconds of useful work is

    W = U (1 + d / t) / (1 - (R + (t + d) / 2) / M)

(each failure loses on average half an interval and its save); the interval that minimizes it,
``t = sqrt(d^2 + 2 d M A) - d`` with ``A = 1 - (R + d / 2) / M``, is Daly's first-order
``sqrt(2 d M) - d`` (Young's ``sqrt(2 d M)`` less the save) when ``d`` and ``R`` are small
against ``M``; at most ``M``. The effective time fraction is ``U / W``. A job whose restart and
lost work take as long as its time between failures never finishes: refused with the reason.

Defaults, each settable:

- ``INTERRUPTIONS_PER_GPU_HOUR``: Llama 3 405B pre-training, 419 unexpected interruptions in a
  54-day snapshot on 16,384 H100 GPUs (Llama Team, "The Llama 3 Herd of Models", 2024,
  arXiv:2407.21783, section 3.3.4 and table 5): 1.97e-5 per GPU-hour (one every 3.1 h for the
  job). Older clusters failed more often: OPT-175B's two months on 992 A100s saw 35 manual and
  more than 70 automatic restarts (Zhang et al. 2022, arXiv:2205.01068, and its logbook),
  about 3.7x this rate.
- ``RESTART_S``: 600 s. Llama 3 reports more than 90% effective training time over its 466
  interruptions (planned ones included) in 54 days, which bounds a whole interruption (restart
  plus lost work) at 54 d x 10% / 466 = 16.7 minutes; 10 minutes of restart leaves the rest to
  the lost work of a short interval.
- ``STORAGE_GB_PER_S_PER_GPU``: 0.122 GB/s of checkpoint write bandwidth per GPU of the job:
  Llama 3's Tectonic file system sustains 2 TB/s for its 16,384 GPUs (same paper, section
  3.3.1). A team's own file system is faster or slower; set it.
- Asynchronous saves by default (both stacks above offer them); the blocking part is each
  GPU's share of the checkpoint over its host link (``catalog/hosts.json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.counts.params import count_params
from estimator.errors import SpecError
from estimator.finetune import FULL, adapters
from estimator.memory.training_tables import memory_tables
from estimator.timing.rates import SECONDS_PER_HOUR
from estimator.xp import Num, maximum, minimum, where

if TYPE_CHECKING:
    from estimator.inputs.model import ModelSpec
    from estimator.inputs.precision import Precision
    from estimator.memory.training import TrainingSetup

__all__ = [
    "INTERRUPTIONS_PER_GPU_HOUR",
    "RESTART_S",
    "STORAGE_GB_PER_S_PER_GPU",
    "EffectiveRun",
    "Reliability",
    "checkpoint_bytes",
    "checkpoint_of",
    "effective_fraction",
    "effective_run",
    "optimal_interval_s",
]

INTERRUPTIONS_PER_GPU_HOUR = 419 / (16_384 * 54 * 24)
RESTART_S = 600.0
STORAGE_GB_PER_S_PER_GPU = 2_000 / 16_384


@dataclass(frozen=True)
class Reliability:
    """How a training run is interrupted and recovers (see the module docstring for sources)."""

    interruptions_per_gpu_hour: float = INTERRUPTIONS_PER_GPU_HOUR
    restart_s: float = RESTART_S  # detect, reschedule onto a healthy node, reload, warm up
    checkpoint_interval_s: float | None = None  # of useful work; None: Daly's optimum
    storage_gb_per_s_per_gpu: float = STORAGE_GB_PER_S_PER_GPU  # write bandwidth per job GPU
    async_checkpoint: bool = True  # only the copy to host memory blocks training
    spare_gpus: int = 0  # hot spares held idle beside the job (paid, never interrupting)
    checkpoints_kept: int = 2  # on storage at once (the last good one while the next is written)


@dataclass(frozen=True)
class EffectiveRun:
    """A run's effective wall-clock beside the ideal one; times in seconds, sizes in bytes."""

    effective_time_fraction: float  # useful time over wall-clock
    ideal_time_s: float
    effective_time_s: float
    gpus: int  # the job's GPUs plus the spares
    effective_gpu_hours: float
    effective_cost_usd: float | None
    expected_interruptions: float
    job_mtbf_s: float  # mean time between the job's interruptions
    checkpoint_bytes: float  # one checkpoint of the whole model
    checkpoint_bytes_per_gpu: float  # each rank's share (distributed checkpoints shard it)
    checkpoint_storage_bytes: float  # what storage holds (``checkpoints_kept`` of them)
    checkpoint_write_s: float  # the write to storage
    checkpoint_blocking_s: float  # what training waits for, per checkpoint
    checkpoint_interval_s: float
    checkpoint_overhead_fraction: float  # the blocking saves' share of the wall-clock
    failure_overhead_fraction: float  # restarts' and lost work's share of the wall-clock
    notes: tuple[str, ...]


def checkpoint_bytes(
    total_params: float, trainable_params: float, weight_bytes: float, state_bytes: float
) -> float:
    """One checkpoint of the whole model: every parameter in its weight format and, for the
    parameters trained, the fp32 master weights and optimizer states (``state_bytes`` a
    parameter, e.g. 4 + 8 for AdamW with master weights), as Megatron-Core's distributed
    checkpoint and PyTorch DCP save them; RNG and data-loader states are negligible."""
    return total_params * weight_bytes + trainable_params * state_bytes


def checkpoint_of(model: ModelSpec, precision: Precision, setup: TrainingSetup) -> float:
    """``checkpoint_bytes`` of a training plan: the model's parameters in the precision's weight
    format; its trained ones' (a LoRA's adapters, else every parameter) fp32 master weights and
    optimizer states as the memory model counts them per parameter (``BytesPerParam``)."""
    ft = setup.finetune
    tables = memory_tables(
        model, precision, setup.optimizer, setup.flash_attention, setup.activation_convention,
        None if ft is FULL else ft,
    )  # fmt: skip
    b = tables.bytes_per_param
    total = count_params(model).total
    if tables.adapters is None:
        return checkpoint_bytes(
            total, total, b.linear_weights, b.master_weights + b.optimizer_states
        )
    trained = adapters(model, ft).trainable_params
    state = b.master_weights + tables.adapters.state_bytes
    return checkpoint_bytes(total, 0, b.linear_weights, 0) + trained * (
        tables.adapters.weight_bytes + state
    )


def optimal_interval_s(blocking_s: Num, mtbf_s: Num, restart_s: float = 0.0) -> Num:
    """The checkpoint interval that minimizes the module's wall-clock: ``sqrt(d^2 + 2 d M A) - d``
    with ``A = 1 - (R + d / 2) / M`` (setting its derivative to zero), Daly's first-order
    ``sqrt(2 d M) - d`` for small ``d`` and ``R``; at most ``M``. A save that blocks nothing
    leaves the interval to the write itself (0 here). Numbers or arrays of them."""
    slack = maximum(1 - (restart_s + blocking_s / 2) / mtbf_s, 0.0)
    best = (blocking_s**2 + 2 * blocking_s * mtbf_s * slack) ** 0.5 - blocking_s
    return where(blocking_s > 0, minimum(best, mtbf_s), 0.0)


def _cadence(
    gpus: Num, state_bytes: Num, host_link_gb_per_s: float, r: Reliability, step_s: Num
) -> tuple[Num, Num, Num, Num, Num, Num]:
    """The job's mean time between interruptions, a checkpoint's write and blocking time, the
    interval between checkpoints (``r``'s, or the optimum: at least the floor, a step and for an
    asynchronous save its write, which must end before the next starts), what an interruption
    loses (the restart, half an interval and its save) and that floor."""
    mtbf = SECONDS_PER_HOUR / (r.interruptions_per_gpu_hour * gpus)
    write = state_bytes / (r.storage_gb_per_s_per_gpu * 1e9 * gpus)
    blocking = state_bytes / gpus / (host_link_gb_per_s * 1e9) if r.async_checkpoint else write
    floor = maximum(write, step_s) if r.async_checkpoint else step_s
    interval: Num = (
        r.checkpoint_interval_s
        if r.checkpoint_interval_s is not None
        else maximum(optimal_interval_s(blocking, mtbf, r.restart_s), floor)
    )
    return mtbf, write, blocking, interval, r.restart_s + (interval + blocking) / 2, floor


def effective_fraction(
    gpus: Num, state_bytes: Num, host_link_gb_per_s: float, r: Reliability, step_s: Num
) -> Num:
    """``effective_run``'s effective time fraction, for numbers or arrays of layouts (the
    sweep's): 0 for a run that never finishes."""
    mtbf, _, blocking, interval, lost, _ = _cadence(
        gpus, state_bytes, host_link_gb_per_s, r, step_s
    )
    checkpointing = 1 + where(interval > 0, blocking / maximum(interval, 1e-30), 0.0)
    return maximum(1 - lost / mtbf, 0.0) / checkpointing


def effective_run(
    ideal_time_s: float,
    gpus: int,
    state_bytes: float,
    host_link_gb_per_s: float,
    reliability: Reliability = Reliability(),
    usd_per_gpu_hour: float | None = None,
    step_s: float = 0.0,
) -> EffectiveRun:
    """The effective wall-clock, GPU-hours and cost of ``ideal_time_s`` of useful training on
    ``gpus`` GPUs whose checkpoint is ``state_bytes`` (``checkpoint_bytes``), each GPU copying its
    share to the host over ``host_link_gb_per_s`` when saves are asynchronous. Checkpoints are
    taken between steps of ``step_s``: at most one a step."""
    r = reliability
    mtbf, write, blocking, interval, lost, floor = (
        float(v) for v in _cadence(gpus, state_bytes, host_link_gb_per_s, r, step_s)
    )
    why = "as stated"
    if r.checkpoint_interval_s is None:
        why = "the optimum" if interval > floor else "a step, or the write, where longer"
    if lost >= mtbf:
        raise SpecError(
            "reliability",
            f"the job fails every {mtbf / 60:,.1f} minutes on average ({gpus:,} GPUs at"
            f" {r.interruptions_per_gpu_hour:.3g} interruptions per GPU-hour), but a restart"
            f" and the work lost since the last checkpoint take {lost / 60:,.1f}: it never"
            " finishes. Use fewer GPUs, faster restarts or more frequent checkpoints.",
        )
    checkpointing = 1 + (blocking / interval if interval > 0 else 0.0)
    wall = ideal_time_s * checkpointing / (1 - lost / mtbf)
    total_gpus = gpus + r.spare_gpus
    gpu_hours = wall * total_gpus / SECONDS_PER_HOUR
    return EffectiveRun(
        effective_time_fraction=ideal_time_s / wall,
        ideal_time_s=ideal_time_s,
        effective_time_s=wall,
        gpus=total_gpus,
        effective_gpu_hours=gpu_hours,
        effective_cost_usd=None if usd_per_gpu_hour is None else gpu_hours * usd_per_gpu_hour,
        expected_interruptions=wall / mtbf,
        job_mtbf_s=mtbf,
        checkpoint_bytes=state_bytes,
        checkpoint_bytes_per_gpu=state_bytes / gpus,
        checkpoint_storage_bytes=state_bytes * r.checkpoints_kept,
        checkpoint_write_s=write,
        checkpoint_blocking_s=blocking,
        checkpoint_interval_s=interval,
        checkpoint_overhead_fraction=(ideal_time_s * (checkpointing - 1)) / wall,
        failure_overhead_fraction=lost / mtbf,
        notes=_notes(r, mtbf, interval, why),
    )


def _notes(r: Reliability, mtbf_s: float, interval_s: float, why: str) -> tuple[str, ...]:
    rate = r.interruptions_per_gpu_hour
    notes = [
        f"Interruptions at {rate:.3g} per GPU-hour"
        + (
            " (Llama 3 405B's 419 unexpected interruptions in 54 days on 16,384 H100s; OPT-175B"
            " on A100s saw about 3.7x as many): "
            if rate == INTERRUPTIONS_PER_GPU_HOUR
            else " (as stated): "
        )
        + f"one every {mtbf_s / 3600:,.2f} h for this job; {r.restart_s / 60:,.1f} minutes a"
        " restart, a healthy replacement node assumed available.",
        f"Checkpoint every {interval_s / 60:,.1f} minutes of training ({why})"
        + (
            ", saved asynchronously: training waits for the copy to host memory only."
            if r.async_checkpoint
            else ", saved synchronously: training waits for the write to storage."
        ),
    ]
    if r.spare_gpus:
        notes.append(f"{r.spare_gpus:,} hot-spare GPUs are paid for the whole run.")
    return tuple(notes)
