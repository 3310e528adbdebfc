"""A training run as it really goes (issue 46): the request fields of interruptions, restarts and
checkpoints, declared once and mixed into the training request, and the effective wall-clock and
job blocks of its answer. Defaults are the core's (``estimator.timing.effective``, each with its
source)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from app.schemas.common import Request
from app.schemas.fields import form
from estimator.timing.effective import (
    INTERRUPTIONS_PER_GPU_HOUR,
    RESTART_S,
    STORAGE_GB_PER_S_PER_GPU,
    Reliability,
)

__all__ = ["EffectiveOut", "JobOut", "ReliabilityFields"]

GROUP = "Run"
_DEFAULT = Reliability()  # each knob's one default: the core's


class ReliabilityFields(Request):
    """How the run is interrupted and recovers."""

    interruptions_per_gpu_hour: Annotated[float, Field(ge=0, le=1)] = Field(
        _DEFAULT.interruptions_per_gpu_hour,
        description="Unexpected job interruptions per GPU-hour (1.97e-5: Llama 3 405B's 419 in"
        " 54 days on 16,384 H100s; OPT-175B's A100s saw about 3.7x as many)",
        json_schema_extra=form(
            "Interruptions / GPU-hour", GROUP, f"{INTERRUPTIONS_PER_GPU_HOUR:.3g}"
        ),
    )
    restart_s: Annotated[float, Field(ge=0, le=86_400)] = Field(
        _DEFAULT.restart_s,
        description="Seconds from an interruption to training again: detect, reschedule onto a"
        " healthy node, reload the checkpoint (600: what Llama 3's >90% effective time over 466"
        " interruptions leaves)",
        json_schema_extra=form("Restart (s)", GROUP, f"{RESTART_S:g}"),
    )
    checkpoint_interval_s: Annotated[float, Field(gt=0, le=1e7)] | None = Field(
        _DEFAULT.checkpoint_interval_s,
        description="Seconds of training between checkpoints; default: the interval that"
        " minimizes the run's wall-clock (Young / Daly)",
        json_schema_extra=form("Checkpoint interval (s)", GROUP, "optimal"),
    )
    storage_gb_per_s_per_gpu: Annotated[float, Field(gt=0, le=1000)] = Field(
        _DEFAULT.storage_gb_per_s_per_gpu,
        description="Checkpoint write bandwidth per GPU of the job, GB/s (0.122: Llama 3's"
        " Tectonic, 2 TB/s sustained for 16,384 GPUs)",
        json_schema_extra=form("Storage GB/s per GPU", GROUP, f"{STORAGE_GB_PER_S_PER_GPU:.3g}"),
    )
    async_checkpoint: bool = Field(
        _DEFAULT.async_checkpoint,
        description="Save asynchronously (Megatron-Core async_save, PyTorch DCP async_save):"
        " training waits for the copy to host memory only",
        json_schema_extra=form("Asynchronous checkpoints", GROUP),
    )
    spare_gpus: Annotated[int, Field(ge=0, le=100_000)] = Field(
        _DEFAULT.spare_gpus,
        description="Hot-spare GPUs held beside the job, paid for the whole run",
        json_schema_extra=form("Hot-spare GPUs", GROUP, "0"),
    )
    checkpoints_kept: Annotated[int, Field(ge=1, le=1000)] = Field(
        _DEFAULT.checkpoints_kept,
        description="Checkpoints kept on storage at once (the storage footprint)",
        json_schema_extra=form("Checkpoints kept", GROUP, "2"),
    )


class EffectiveOut(BaseModel):
    """The run's effective wall-clock beside the ideal one (``cost.time_to_train_s``)."""

    effective_time_fraction: float = Field(description="Useful training time over wall-clock")
    effective_time_to_train_s: float
    effective_gpu_hours: float = Field(description="GPU-hours of the job and its hot spares")
    effective_cost_usd: float | None
    expected_interruptions: float
    job_mtbf_s: float = Field(description="Mean time between the job's interruptions")
    checkpoint_bytes: float = Field(description="One checkpoint: weights and trained state")
    checkpoint_bytes_per_gpu: float = Field(
        description="Each rank's share of it, as Megatron-Core's and PyTorch DCP's sharded"
        " checkpoints write it (RNG and data-loader states: negligible)"
    )
    checkpoint_storage_bytes: float
    checkpoint_write_s: float = Field(description="A checkpoint's write to storage")
    checkpoint_blocking_s: float = Field(description="What training waits for, per checkpoint")
    checkpoint_interval_s: float
    checkpoint_every_steps: int
    checkpoint_overhead_fraction: float
    failure_overhead_fraction: float = Field(description="Restarts' and lost work's share")
    spare_gpus: int
    notes: list[str]


class JobOut(BaseModel):
    """One stack's job for the plan's layout: its files, and what they cannot say."""

    stack: str
    version: str = Field(description="The stack version whose argument names these are")
    files: dict[str, str] = Field(description="File name -> content (launcher, config)")
    notes: list[str]
