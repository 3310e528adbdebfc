"""Memory of the most-loaded GPU over one step: what is resident when, and what makes the peak.

Training (1F1B, Megatron-LM ``schedules.py``): weights, gradient buffers, master weights and
optimizer states are resident all step. Pipeline rank ``r`` runs its warm-up forwards, each
adding one micro-batch of saved activations, up to the ``in_flight`` count of the memory model;
the first backward then holds them all plus the logits (last stage) and, under full
recomputation, the recomputed layer's working activations: the peak. Steady 1F1B alternates a
forward (+1) and a backward (-1), the cool-down backwards free the rest, and the optimizer step
runs on the resident states. Interleaved schedules step in chunks of ``1/vp`` of a micro-batch.
Fragmentation is the memory model's share of what is allocated at each point, so the peak equals
``training_memory``'s total exactly.

Serving: the weights and runtime overhead, then the KV cache of the concurrent sequences growing
from the prompt to the full context, one decode step at a time, with the prefill and decode
activation peaks; the last point is a new prompt prefilled while the cache is full (continuous
batching), which is what ``inference_memory`` sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from estimator.inputs.accelerator import Accelerator
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceSetup, inference_memory
from estimator.memory.training import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_FRACTION,
    TrainingSetup,
    most_loaded_terms,
    validate_training,
)
from estimator.xp import Num

__all__ = ["MemoryPoint", "Timeline", "inference_timeline", "training_timeline"]

RESIDENT = (
    "weights_bytes",
    "weight_cache_bytes",
    "gradients_bytes",
    "master_weights_bytes",
    "optimizer_states_bytes",
    "zero3_gather_bytes",
    "dequant_buffer_bytes",
)
# Decode points drawn between the prefill and the full context.
DECODE_POINTS = 48


@dataclass(frozen=True)
class MemoryPoint:
    label: str
    phase: str
    parts: dict[str, float]

    @property
    def total_bytes(self) -> float:
        return sum(self.parts.values())


@dataclass(frozen=True)
class Timeline:
    points: tuple[MemoryPoint, ...]
    capacity_bytes: float
    notes: tuple[str, ...]

    @property
    def peak(self) -> MemoryPoint:
        return max(self.points, key=lambda p: p.total_bytes)


@dataclass(frozen=True, slots=True)
class _StepMemory:
    """What a training step's points are made of (the most loaded GPU's terms,
    ``most_loaded_terms``): the states resident all step, the fixed buffers, one chunk's saved
    activations (a micro-batch's over ``vp``) and the chunks in flight at the peak, what the
    backward holds besides (the logits, a recomputed layer's working activations), the loss
    blocks the allocator keeps from the first backward on, and how the gradients live (only
    inside the backward: ``in_backward``; freed between steps: ``per_step``, ``step_grads``
    bytes at the optimizer step)."""

    resident: dict[str, float]
    fixed: dict[str, float]
    chunk: float
    in_flight: int
    working: float
    logits: float
    cached: float
    in_backward: bool
    per_step: bool
    step_grads: float
    unit: str  # what the schedule steps in: "micro-batch", or "chunk" when interleaved

    def allocated_parts(self, phase: str, live: int, backward: bool) -> dict[str, float]:
        """What the step has allocated in ``phase`` with ``live`` chunks of activations saved
        (``backward``: while a backward runs), before fragmentation."""
        parts = {**self.resident, "activations_bytes": live * self.chunk}
        if self.in_backward and not backward:
            parts["gradients_bytes"] = 0.0
        elif self.per_step:
            done = phase in ("optimizer", "cool-down")  # one micro-batch: the backward is over
            parts["gradients_bytes"] = self.step_grads if done else 0.0
        parts["logits_bytes"] = self.logits if backward else 0.0
        parts["working_layer_bytes"] = self.working if backward else 0.0
        return parts

    def point(self, label: str, phase: str, live: int, backward: bool = False) -> MemoryPoint:
        """A point of the step: the allocated parts, the fixed buffers and the fragmentation
        (the memory model's share of what is allocated, plus the cached loss blocks not yet
        reused, from the first backward on)."""
        parts = self.allocated_parts(phase, live, backward)
        allocated = sum(parts.values())
        parts |= self.fixed
        held = 0.0
        if phase not in ("resident", "warm-up"):
            peak = self.allocated_parts("first backward", self.in_flight, True)
            first_backward = sum(peak.values())
            held = max(min(self.cached, first_backward + self.cached - allocated), 0.0)
        parts["fragmentation_bytes"] = allocated * FRAGMENTATION_FRACTION + held
        return MemoryPoint(label, phase, parts)

    def units(self, n: int) -> str:
        """``n`` of the schedule's units, in words."""
        unit = self.unit
        return f"{n} {unit}" + ("" if n == 1 else "es" if unit.endswith("h") else "s")


def training_timeline(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
) -> Timeline:
    """The most loaded GPU's memory over one training step (the module docstring's 1F1B walk):
    its peak is ``training_memory``'s total."""
    validate_training(model, parallel, setup)
    any_layout = accelerator.fp8_any_layout
    t = most_loaded_terms(model, parallel, setup, precision, any_layout)  # as training_memory
    step = _step_memory(model, parallel, setup, precision, any_layout, t)
    total_chunks = setup.microbatches(parallel.dp) * parallel.vp
    points = _step_points(step, total_chunks, parallel.pp)
    notes = _training_notes(step, parallel, setup, total_chunks, t["stage"])
    return Timeline(tuple(points), float(accelerator.memory_bytes), notes)


def _step_memory(
    model: ModelSpec,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    any_layout: bool,
    t: dict[str, Num],
) -> _StepMemory:
    """A step's parts from the most loaded GPU's terms ``t``; with gradients freed between
    steps, their size at the optimizer step is the kept buffers' (the same setup without
    ``gradients_per_step``), and where that is what the terms hold, nothing changes."""
    resident = {k: float(t[k]) for k in RESIDENT}
    vp = parallel.vp
    # Gradients freed between steps: none while the forward runs, what they add beyond the
    # activations at the first backward (the peak's share), all of them at the optimizer step.
    per_step = setup.gradients_per_step and not setup.optimizer_in_backward
    step_grads = 0.0
    if per_step:
        kept = replace(setup, gradients_per_step=False)
        kept_terms = most_loaded_terms(model, parallel, kept, precision, any_layout)
        step_grads = float(kept_terms["gradients_bytes"])
        per_step = step_grads != resident["gradients_bytes"]
    return _StepMemory(
        resident=resident,
        fixed={
            "cuda_context_bytes": CUDA_CONTEXT_BYTES,
            "comm_buffers_bytes": float(t["comm_buffers_bytes"]),
        },
        chunk=float(t["microbatch_activations_bytes"]) / vp,
        in_flight=round(float(t["in_flight"]) * vp),
        working=float(t["working_layer_bytes"]),
        logits=float(t["logits_bytes"]),
        # Loss blocks freed at the first backward stay reserved: from then on the allocator
        # serves new allocations from them first; what they do not cover shows as fragmentation.
        cached=float(t["loss_cache_bytes"]),
        in_backward=setup.optimizer_in_backward,  # gradients only while the backward runs
        per_step=per_step,
        step_grads=step_grads,
        unit="micro-batch" if vp == 1 else "chunk",
    )


def _step_points(step: _StepMemory, total_chunks: Num, pp: int) -> list[MemoryPoint]:
    """The step's points in 1F1B order (one stage: each forward, then its backward): the
    warm-up forwards, the first backward (the peak), the steady forwards and backwards, the
    cool-down backwards and the optimizer step."""
    unit, in_flight = step.unit, step.in_flight
    schedule = " (1F1B)" if pp > 1 else ""
    points = [step.point("step starts", "resident", 0)]
    for k in range(1, in_flight + 1):
        points.append(step.point(f"forward {unit} {k}", "warm-up", k))
    points.append(step.point(f"backward {unit} 1", "first backward", in_flight, True))
    steady = total_chunks - in_flight
    if steady > 0:
        more = f"forward ({step.units(int(steady))} more{schedule})"
        points.append(step.point(more, "steady", in_flight))
        points.append(step.point(f"backward{schedule}", "steady", in_flight, True))
    for k in range(in_flight - 1, -1, -1):
        points.append(step.point(f"backward, {step.units(k)} left", "cool-down", k, k > 0))
    points.append(step.point("gradient sync and optimizer step", "optimizer", 0))
    return points


def _training_notes(
    step: _StepMemory, parallel: Parallelism, setup: TrainingSetup, total_chunks: Num, stage: Num
) -> tuple[str, ...]:
    """Where the peak is (the stage and the chunks in flight), and what the optimizer step and
    the gradients' lifetime add to the step."""
    in_flight = step.units(step.in_flight)
    where = (
        f"Pipeline stage {stage} of {parallel.pp}: {in_flight} in flight of {total_chunks}"
        if parallel.pp > 1
        else f"No pipeline: {in_flight} in flight of {total_chunks} (each"
        " forward then its backward)"
    )
    return (
        f"{where}; memory peaks once all of them are held (at the first backward, "
        "which also holds the logits and any recomputed layer).",
        (
            "The optimizer steps each parameter inside the backward, as its gradient is ready,"
            " and frees the gradient: the backward holds one linear's gradient at a time (and"
            " a tied embedding's); the last point has no step left."
            if step.in_backward
            else "No transient beyond the memory model's terms is added at the optimizer step"
            " (fused optimizers update in place)."
        ),
        *(
            [
                "Gradients are freed between steps (zero_grad(set_to_none=True)) and allocated "
                "by the backward as it frees activations: none during the forward, all of them "
                "at the optimizer step; the peak holds what they add beyond the activations."
            ]
            if step.per_step
            else []
        ),
        *(
            [
                "Gradients accumulate unsharded (FSDP's no_sync) until the last micro-batch's"
                " backward reduce-scatters them: shown at that size all step, the size the peak"
                " holds (before the first backward they are smaller, after the sync a shard)."
            ]
            if setup.no_sync_accumulation
            and total_chunks > parallel.vp
            and parallel.zero_stage >= 2
            else []
        ),
    )


def inference_timeline(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
) -> Timeline:
    mem = inference_memory(model, accelerator, parallel, setup, precision)
    context = setup.input_len + setup.output_len
    per_token = mem.kv_cache_bytes_per_sequence / context
    draft_per_token = mem.draft_kv_cache_bytes_per_sequence / context
    base = {
        "weights_bytes": mem.weights_bytes,
        "runtime_overhead_bytes": mem.runtime_overhead_bytes,
    }
    if mem.draft_weights_bytes:  # a speculative drafter's weights and cache
        base["draft_weights_bytes"] = mem.draft_weights_bytes
    n = setup.concurrency

    def point(label: str, phase: str, tokens: float, activations: float) -> MemoryPoint:
        parts = {
            **base,
            "kv_cache_bytes": n * per_token * tokens,
            "activation_peak_bytes": activations,
        }
        if draft_per_token:
            parts["draft_kv_cache_bytes"] = n * draft_per_token * tokens
        return MemoryPoint(label, phase, parts)

    points = [
        point("weights loaded", "idle", 0, 0.0),
        point(
            f"prefill of {setup.input_len} prompt tokens",
            "prefill",
            setup.input_len,
            mem.prefill_peak_bytes,
        ),
    ]
    steps = setup.output_len
    for i in range(1, DECODE_POINTS + 1):
        j = round(steps * i / DECODE_POINTS)
        if j and (not points or points[-1].label != f"decode step {j}"):
            points.append(
                point(f"decode step {j}", "decode", setup.input_len + j, mem.decode_peak_bytes)
            )
    points.append(
        point(
            "a new prompt prefills with the cache full",
            "continuous batching",
            setup.input_len + setup.output_len,
            mem.activation_peak_bytes,
        )
    )
    notes = (f"{n} sequences; the KV cache grows {per_token * n / 2**20:.2f} MiB per decode step.",)
    return Timeline(tuple(points), float(accelerator.memory_bytes), notes)
