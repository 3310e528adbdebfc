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

from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceSetup, inference_memory
from estimator.memory.training import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_FRACTION,
    TrainingSetup,
    most_loaded_terms,
    validate_training,
)
from estimator.spec.accelerator import Accelerator
from estimator.spec.model import ModelSpec
from estimator.spec.precision import Precision

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


def training_timeline(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
) -> Timeline:
    validate_training(model, parallel, setup)
    any_layout = accelerator.fp8_any_layout
    t = most_loaded_terms(model, parallel, setup, precision, any_layout)  # as training_memory
    resident = {k: float(t[k]) for k in RESIDENT}
    fixed = {
        "cuda_context_bytes": CUDA_CONTEXT_BYTES,
        "comm_buffers_bytes": float(t["comm_buffers_bytes"]),
    }
    vp = parallel.vp
    chunk = float(t["microbatch_activations_bytes"]) / vp
    chunks_in_flight = round(float(t["in_flight"]) * vp)
    total_chunks = setup.microbatches(parallel.dp) * vp
    working, logits = float(t["working_layer_bytes"]), float(t["logits_bytes"])
    # Loss blocks freed at the first backward stay reserved: from then on the allocator serves
    # new allocations from them first, and what they do not cover shows as fragmentation.
    cached = float(t["loss_cache_bytes"])
    unit = "micro-batch" if vp == 1 else "chunk"
    # Gradients freed between steps: none while the forward runs, what they add beyond the
    # activations at the first backward (the peak's share), all of them at the optimizer step.
    per_step = setup.gradients_per_step and not setup.optimizer_in_backward
    if per_step:
        kept = replace(setup, gradients_per_step=False)
        kept_terms = most_loaded_terms(model, parallel, kept, precision, any_layout)
        step_grads = float(kept_terms["gradients_bytes"])
        per_step = step_grads != resident["gradients_bytes"]

    in_backward = setup.optimizer_in_backward  # gradients only while the backward runs

    def allocated_parts(phase: str, live: int, backward: bool) -> dict[str, float]:
        parts = {**resident, "activations_bytes": live * chunk}
        if in_backward and not backward:
            parts["gradients_bytes"] = 0.0
        elif per_step:
            done = phase in ("optimizer", "cool-down")  # one micro-batch: the backward is over
            parts["gradients_bytes"] = step_grads if done else 0.0
        parts["logits_bytes"] = logits if backward else 0.0
        parts["working_layer_bytes"] = working if backward else 0.0
        return parts

    first_backward = sum(allocated_parts("first backward", chunks_in_flight, True).values())

    def point(label: str, phase: str, live: int, backward: bool = False) -> MemoryPoint:
        parts = allocated_parts(phase, live, backward)
        allocated = sum(parts.values())
        parts |= fixed
        held = 0.0  # the cached loss blocks not yet reused, from the first backward on
        if phase not in ("resident", "warm-up"):
            held = max(min(cached, first_backward + cached - allocated), 0.0)
        parts["fragmentation_bytes"] = allocated * FRAGMENTATION_FRACTION + held
        return MemoryPoint(label, phase, parts)

    def units(n: int) -> str:
        return f"{n} {unit}" + ("" if n == 1 else "es" if unit.endswith("h") else "s")

    schedule = " (1F1B)" if parallel.pp > 1 else ""  # one stage: forward, backward in turn
    points = [point("step starts", "resident", 0)]
    for k in range(1, chunks_in_flight + 1):
        points.append(point(f"forward {unit} {k}", "warm-up", k))
    points.append(point(f"backward {unit} 1", "first backward", chunks_in_flight, True))
    steady = total_chunks - chunks_in_flight
    if steady > 0:
        points.append(
            point(f"forward ({units(steady)} more{schedule})", "steady", chunks_in_flight)
        )
        points.append(point(f"backward{schedule}", "steady", chunks_in_flight, True))
    for k in range(chunks_in_flight - 1, -1, -1):
        points.append(point(f"backward, {units(k)} left", "cool-down", k, k > 0))
    points.append(point("gradient sync and optimizer step", "optimizer", 0))
    where = (
        f"Pipeline stage {t['stage']} of {parallel.pp}: {units(chunks_in_flight)} in flight"
        f" of {total_chunks}"
        if parallel.pp > 1
        else f"No pipeline: {units(chunks_in_flight)} in flight of {total_chunks} (each"
        " forward then its backward)"
    )
    notes = (
        f"{where}; memory peaks once all of them are held (at the first backward, "
        "which also holds the logits and any recomputed layer).",
        (
            "The optimizer steps each parameter inside the backward, as its gradient is ready,"
            " and frees the gradient: the backward holds one linear's gradient at a time (and"
            " a tied embedding's); the last point has no step left."
            if in_backward
            else "No transient beyond the memory model's terms is added at the optimizer step"
            " (fused optimizers update in place)."
        ),
        *(
            [
                "Gradients are freed between steps (zero_grad(set_to_none=True)) and allocated "
                "by the backward as it frees activations: none during the forward, all of them "
                "at the optimizer step; the peak holds what they add beyond the activations."
            ]
            if per_step
            else []
        ),
        *(
            [
                "Gradients accumulate unsharded (FSDP's no_sync) until the last micro-batch's"
                " backward reduce-scatters them: shown at that size all step, the size the peak"
                " holds (before the first backward they are smaller, after the sync a shard)."
            ]
            if setup.no_sync_accumulation and total_chunks > vp and parallel.zero_stage >= 2
            else []
        ),
    )
    return Timeline(tuple(points), float(accelerator.memory_bytes), notes)


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
