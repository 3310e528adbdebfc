"""The run blocks of a training answer (issue 46): the effective wall-clock, GPU-hours and cost
with interruptions, restarts and checkpoints (``estimator.timing.effective``), the jobs of the
stacks that run the layout (``estimator.layout.jobs``) and the pipeline schedule a PP plan's
chart draws (``estimator.timing.schedule``)."""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from app.schemas.run import ReliabilityFields
from estimator.errors import SpecError
from estimator.layout.jobs import JobPlan, training_jobs
from estimator.offload import host_of
from estimator.timing.effective import Reliability, checkpoint_of, effective_run
from estimator.timing.schedule import Schedule, pipeline_schedule

if TYPE_CHECKING:
    from app.resolve import TrainingPlan
    from estimator.timing.training import TrainingEstimate

__all__ = [
    "SCHEDULE_MICROBATCHES",
    "effective_answer",
    "jobs_answer",
    "reliability_of",
    "schedule_of",
]

# A chart's schedule shows at most this many micro-batches per stage (rounded to whole groups
# of pp): the pattern, warm-up and drain; the step's bubble is the time model's, over all.
SCHEDULE_MICROBATCHES = 8


def reliability_of(req: ReliabilityFields) -> Reliability:
    """The request's reliability fields, named as the core's ``Reliability`` names them."""
    return Reliability(**{f.name: getattr(req, f.name) for f in fields(Reliability)})


def effective_answer(plan: TrainingPlan, e: TrainingEstimate) -> dict[str, Any]:
    """The ``effective`` and ``effective_refused`` blocks: null with the reason where the plan
    has no token count (no run to time) or cannot progress."""
    if e.time_to_train_s is None:
        return {"effective": None, "effective_refused": "no token count: give tokens for a run"}
    link = host_of(plan.accelerator.id, plan.setup.offload).link_bytes_per_s / 1e9
    state = checkpoint_of(plan.model, plan.precision, plan.setup)
    try:
        run = effective_run(
            e.time_to_train_s,
            e.num_gpus,
            state,
            link,
            plan.reliability,
            e.price_usd_per_gpu_hour,
            e.time.step_s,
        )
    except SpecError as exc:
        return {"effective": None, "effective_refused": exc.rule}
    out = asdict(run)
    out["effective_time_to_train_s"] = out.pop("effective_time_s")
    out["spare_gpus"] = plan.reliability.spare_gpus
    out["checkpoint_every_steps"] = max(1, math.ceil(run.checkpoint_interval_s / e.time.step_s))
    for drop in ("ideal_time_s", "gpus"):
        out.pop(drop)
    out["notes"] = list(run.notes)
    return {"effective": out, "effective_refused": None}


def jobs_answer(
    plan: TrainingPlan, e: TrainingEstimate, effective: dict[str, Any] | None
) -> dict[str, Any]:
    """The ``jobs`` of the stacks that run the plan's layout and ``jobs_refused`` (why the
    others do not), checkpointing at the effective run's interval."""
    steps = None if e.tokens is None else math.ceil(e.tokens / e.tokens_per_step)
    job = JobPlan(
        seq_len=plan.setup.seq_len,
        micro_batch_size=plan.setup.micro_batch_size,
        global_batch_size=e.tokens_per_step // plan.setup.seq_len,
        recompute=plan.setup.recompute,
        train_steps=steps,
        gpus_per_node=plan.cluster.gpus_per_node,
        checkpoint_every_steps=None if effective is None else effective["checkpoint_every_steps"],
        async_checkpoint=plan.reliability.async_checkpoint,
    )
    jobs, refused = training_jobs(plan.model, plan.parallel, plan.precision, job)
    return {
        "jobs": [
            {"stack": j.stack, "version": j.version, "files": dict(j.files), "notes": list(j.notes)}
            for j in jobs
        ],
        "jobs_refused": list(refused),
    }


def schedule_of(plan: TrainingPlan, e: TrainingEstimate) -> Schedule | None:
    """The pipeline schedule of a PP plan's first micro-batches (``SCHEDULE_MICROBATCHES``), at
    its slowest stage's forward and backward (recomputation with the backward); None without a
    pipeline or where the interleaved schedule cannot take the count."""
    p, t = plan.parallel, e.time
    if p.pp <= 1:
        return None
    m = min(t.microbatches, max(SCHEDULE_MICROBATCHES // p.pp, 1) * p.pp)
    try:
        return pipeline_schedule(p.pp, m, t.forward_s, t.backward_s + t.recompute_s, p.vp)
    except SpecError:
        return None
