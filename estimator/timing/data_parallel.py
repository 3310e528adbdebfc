"""A training step's data-parallel side, after its micro-batches: the gradient
synchronizations (dense parameters over dp x cp, routed experts over the expert data-parallel
ranks), ZeRO-3's per-layer gathers and reduce-scatters, ZeRO 0-2's gradient reduction and
parameter all-gather, each exposed where the compute it overlaps is shorter, and the optimizer
step with CPU offload's exposed time. ``timing.training`` assembles the step from these
(``training_time_terms``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.finetune import linear_weight_bytes
from estimator.inputs.precision import DTYPES
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import stage_kind_counts
from estimator.memory.training import TrainingSetup
from estimator.timing import collectives as rules
from estimator.timing.kernels import collective_time, memory_time
from estimator.timing.stage_time import dense_collective, offload_time
from estimator.xp import Num, maximum, take, where

if TYPE_CHECKING:
    from estimator.context import Context
    from estimator.timing.training import TimingOptions

__all__ = ["Held", "Sync", "dp_exposed", "optimizer_step", "syncs_of", "zero3_exposed"]


@dataclass(frozen=True, slots=True)
class Held:
    """What one GPU holds that a step's traffic moves (``training_memory``'s figures, or a
    sweep block's arrays): ``params`` on the GPU, of them ``trainable`` (default: every one;
    what gradients, the optimizer and the parameter all-gather move) and ``experts`` (the routed
    experts' share, synchronized over the expert data-parallel ranks); the optimizer states'
    bytes; what CPU offload keeps on the host (``setup.offload``): weights, and one
    micro-batch's activations."""

    params: Num
    optimizer_states_bytes: Num
    trainable: Num | None = None
    experts: Num = 0.0
    host_weights_bytes: Num = 0.0
    host_activations_bytes: Num = 0.0


# One gradient synchronization: the parameters held, those trained, and the (size, stride) of
# the ranks they reduce over.
Sync = tuple[Num, Num, tuple[Num, Num]]


def syncs_of(c: Context, setup: TrainingSetup, held: Held) -> list[Sync]:
    """The step's gradient synchronizations. Gradients reduce, and weights and optimizer
    states shard, over dp x cp for the dense parameters and over the expert data-parallel
    ranks for the routed experts (Megatron-Core's expert_data_parallel group, ``tp cp dp /
    (ep etp)`` GPUs ``ep etp`` apart): with EP inside a node and DP across nodes that group has
    one GPU a node, and the experts' whole gradient crosses the NICs, where the dense one's is
    first reduced over NVLink."""
    ranks = group_shapes(c.p)
    params = held.params
    trainable = params if held.trainable is None else held.trainable
    experts = held.experts
    trained_experts = 0.0 if setup.finetune.frozen else experts  # LoRA: adapters, with the dense
    syncs: list[Sync] = [(params - experts, trainable - trained_experts, ranks["dense_dp"])]
    if c.model.moe is not None:
        syncs.append((experts, trained_experts, ranks["edp"]))
    return syncs


def zero3_exposed(
    c: Context, setup: TrainingSetup, syncs: list[Sync], worst: dict[str, Num], stage: Num, m: Num
) -> Num:
    """ZeRO-3's exposed traffic: per layer and micro-batch, gather the weights for the forward
    and for the backward and reduce-scatter the gradients; prefetch hides each behind the
    layer's compute (FSDP's no_sync: the last micro-batch alone reduce-scatters); ``m``: the
    step's micro-batches."""
    model, acc, prof, p, precision = c.model, c.acc, c.prof, c.p, c.precision
    if p.stage_layers is None:
        layers_on_stage: Num = model.num_layers / p.pp
    else:  # the slowest stage's layers (per layout, in a sweep)
        sizes = [sum(stage_kind_counts(model, p.pp, p.vp, r, p.stage_layers)) for r in range(p.pp)]
        layers_on_stage = take(sizes, stage)
    # A stage of the embedding or the loss alone (uneven splits) has no layer to gather:
    # its gathers count zero, and the per-layer divisions take one layer.
    per_layer_div = maximum(layers_on_stage, 1)
    grad_b = precision.bytes("gradients")
    gathers: Num = 0.0
    per_layer: Num = 0.0
    for held, trained, (size, stride) in syncs:
        layer_w, layer_g = rules.zero3_layer_payloads(
            held,
            trained,
            per_layer_div,
            linear_weight_bytes(setup.finetune, precision),
            grad_b,
            setup.finetune.frozen,
        )
        gather = rules.ZERO3_GATHERS_PER_LAYER * collective_time(
            acc, prof, "all_gather", layer_w, size, stride, c.domain
        )
        gathers = gathers + gather
        per_layer = (
            per_layer
            + gather
            + collective_time(acc, prof, "reduce_scatter", layer_g, size, stride, c.domain)
        )
    layer_compute = (worst["forward"] + worst["backward"]) / per_layer_div
    if setup.no_sync_accumulation:
        return layers_on_stage * (
            (m - 1) * maximum(gathers - layer_compute, 0.0)
            + maximum(per_layer - layer_compute, 0.0)
        )
    return m * layers_on_stage * maximum(per_layer - layer_compute, 0.0)


def dp_exposed(c: Context, options: TimingOptions, syncs: list[Sync], worst: dict[str, Num]) -> Num:
    """ZeRO 0-2's exposed data-parallel traffic: the gradient reduction (reduce-scatter with
    ZeRO >= 1, all-reduce otherwise) behind the last micro-batch's backward, and the parameter
    all-gather (ZeRO >= 1) behind the next step's first forward, where the stack overlaps
    them."""
    acc, prof, precision = c.acc, c.prof, c.precision
    zero = c.p.optimizer_shard_stage
    grad_b = precision.bytes("gradients")
    w_b = DTYPES[precision.weights].bytes
    sync: Num = 0.0
    gather_all: Num = 0.0
    for _, trained, (size, stride) in syncs:
        sync = sync + dense_collective(
            acc, prof, zero >= 1, trained * grad_b, size, stride, c.domain
        )
        if type(zero) is not int or zero >= 1:
            gather_all = gather_all + collective_time(
                acc, prof, "all_gather", trained * w_b, size, stride, c.domain
            )
    window = worst["backward"] if options.overlap_grad_reduce else 0.0
    dp_comm = maximum(sync - window, 0.0)
    window = worst["forward"] if options.overlap_param_gather else 0.0
    return dp_comm + (zero >= 1) * maximum(gather_all - window, 0.0)


def optimizer_step(
    c: Context, setup: TrainingSetup, held: Held, syncs: list[Sync], worst: dict[str, Num], m: Num
) -> tuple[Num, Num]:
    """The optimizer step (memory-bound over the sharded states: read the gradients,
    read/write the master weights and states, write the model weights) and CPU offload's
    exposed time (``offload_time``; an offloaded optimizer's step is the CPU's, in it)."""
    acc, prof, precision = c.acc, c.prof, c.precision
    zero = c.p.optimizer_shard_stage
    grad_b = precision.bytes("gradients")
    w_b = DTYPES[precision.weights].bytes
    sharded: Num = 0.0
    for _, trained, (size, _stride) in syncs:
        sharded = sharded + trained / where(zero >= 1, size, 1)
    state_b = held.optimizer_states_bytes / maximum(sharded, 1.0)
    per_param = grad_b + 2 * precision.bytes("master_weights") + 2 * state_b + w_b
    optimizer = memory_time(acc, prof, sharded * per_param, 4)
    offload: Num = 0.0
    if setup.offload.any:
        offload = offload_time(c, setup, held, worst, sharded, m)
        if setup.offload.optimizer:
            optimizer = 0.0  # the CPU's step, in offload_time
    return optimizer, offload
