"""Each training memory term, one function a term, computed from what its pipeline stage holds
(``training_stage.Stage``), for one layout or for arrays of layouts alike.

Bytes per parameter (Megatron-LM's accounting, ``theoretical_memory_usage.py``, generalized):
model weights in the precision's weight format (plus Transformer Engine's low-precision weight
cache for fp8 recipes), gradients in the gradient format (fp32 ``main_grad`` for bf16 training),
fp32 master weights, and optimizer states (AdamW: two fp32 moments). ZeRO stage 1 (and
Megatron's distributed optimizer) shards master weights and optimizer states over the
data-parallel ranks (``dp * cp`` for dense parameters, the expert data-parallel ranks for
experts); stage 2 also the gradients; stage 3 (FSDP FULL_SHARD) also the weights, which are then
all-gathered one layer at a time (two layers resident: the one computing and the one prefetched).

The terms are registered against their keys in the registry (``estimator.terms.TRAINING_MEMORY``):
``ALLOCATED``, the tensors the caching allocator hands out, each ``f(stage)``; then
``OVERHEADS``, named estimates on top of them, each ``f(stage, allocated)`` (allocator
fragmentation is a share of what is allocated). A new term is its registry line plus its
function here; ``stage_terms`` evaluates them, ``memory_total`` sums them (a stage's and a
plan's total, and what fragmentation is a share of), and the records, the API's response models,
the sweep's totals and the charts follow (``tests/test_terms.py``, ``tests/test_new_term.py``).
The overheads' defaults below are planning estimates and the estimate's notes say so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from functools import reduce
from operator import add

from estimator.inputs.accelerator import GIB
from estimator.memory.training_stage import Stage
from estimator.xp import Num, maximum, minimum, where

__all__ = [
    "ALLOCATED",
    "CUDA_CONTEXT_BYTES",
    "FRAGMENTATION_FRACTION",
    "HOST_TERMS",
    "NCCL_BUFFER_BYTES_PER_GROUP",
    "OVERHEADS",
    "OVERHEAD_TERMS",
    "host_terms",
    "memory_total",
    "stage_memory",
    "stage_terms",
    "term_keys",
]

# CUDA context, cuBLAS/cuDNN workspaces and loaded kernels of a PyTorch training process. Not in
# torch.cuda.max_memory_allocated, but it counts against the card's capacity.
CUDA_CONTEXT_BYTES = 0.75 * GIB
# NCCL communicator buffers, per parallel group of size > 1 the GPU belongs to (NCCL's default
# NCCL_BUFFSIZE of 4 MiB per channel and peer, over the channels a group opens).
NCCL_BUFFER_BYTES_PER_GROUP = 0.25 * GIB
# PyTorch caching-allocator overhead (reserved minus allocated) as a share of allocated bytes.
# 5% is a planning default; expandable segments bring it near zero, fragmented workloads see 10-15%.
FRAGMENTATION_FRACTION = 0.05


# The allocated tensors


def weights_bytes(s: Stage) -> Num:
    """Model weights in the weight format, as sharded (ZeRO-3 divides them over the
    data-parallel ranks); a frozen base's adapters in the precision's weight format. None on
    the GPU under parameter offload (DeepSpeed ZeRO-Infinity, FSDP's CPUOffload: the gather
    buffers hold what is in use)."""
    if s.layout.offload.params:
        return 0.0
    return _weight_shard_bytes(s)


def _weight_shard_bytes(s: Stage) -> Num:
    """The stage's weights as ZeRO-3 shards them, wherever they live: the dense ones (the
    stack's linear weights in the weight format, everything else in the activation dtype),
    the routed experts' (``Stack.expert_weight_bytes``), a frozen base's adapters."""
    layout = s.layout
    stack = s.stack
    dense = stack.linear_weight_bytes + s.other_params * layout.bytes_per_param.other_weights
    weights = dense / layout.dense_weights_div + stack.expert_weight_bytes
    if layout.adapters is not None:
        weights = weights + s.trainable_params * layout.adapters.weight_bytes / (
            layout.dense_weights_div
        )
    return weights


def weight_cache_bytes(s: Stage) -> Num:
    """Transformer Engine's low-precision copy of the linear weights, experts' included (fp8
    recipes: ``Precision.weight_cache``; the copies the backward reads, ``trained_weight_bytes``),
    never sharded."""
    stack = s.stack
    return (
        stack.linear_params + stack.expert_linear_params
    ) * s.layout.bytes_per_param.weight_cache


def gradients_bytes(s: Stage) -> Num:
    """Gradient buffers in the gradient format (Megatron's fp32 ``main_grad`` for bf16), as ZeRO
    >= 2 shards them (``_gradient_buffer_bytes``); optimizer offload keeps the shard on the host.
    Gradients freed between steps (PyTorch's ``zero_grad(set_to_none=True)``) come back as the
    backward frees the activations: with one micro-batch a step and no pipeline the peak holds
    the larger of the first backward's activations and the last one's gradients, and the term
    is what the gradients add beyond them."""
    grads = _gradient_buffer_bytes(s)
    per_step = s.layout.per_step_grads
    if per_step is False:
        return grads
    return where(per_step, maximum(grads - _first_backward_bytes(s), 0.0), grads)


def _gradient_buffer_bytes(s: Stage, on_gpu: bool = True) -> Num:
    """The stage's gradients as ZeRO shards them, before any are freed between steps, less what
    optimizer offload keeps on the host (``on_gpu``; all of them otherwise). A frozen base has
    its adapters' only. With the optimizer in the backward (torchtune's ``optimizer_in_bwd``)
    each parameter is stepped, and its gradient freed, as soon as the backward has it: one
    linear's gradient at a time, and a tied embedding's, whose head gradient waits from the
    loss's backward for the embedding's."""
    layout = s.layout
    grad_b = layout.bytes_per_param.gradients
    if layout.adapters is not None:
        grads = s.trainable_params / layout.adapter_grads_div * grad_b
    elif layout.in_backward:
        head = layout.head_rows_params
        one = maximum(layout.largest_linear_params, (1 - layout.tied) * head)
        grads = (layout.tied * head + one) / layout.grads_div * grad_b
    else:
        expert = s.stack.expert_gradient_params
        grads = (s.dense_params / layout.dense_grads_div + expert) * grad_b
    if on_gpu and layout.offload.optimizer:
        grads = grads - _offloaded_gradients(s, grads)
    return grads


def _offloaded_gradients(s: Stage, grads: Num) -> Num:
    """The gradients optimizer offload moves to the host: the shard, where ZeRO >= 2 shards it
    (DeepSpeed ZeRO-Offload and FSDP's CPU offload: the optimizer step reads it there);
    Megatron's distributed optimizer keeps its gradient buffer on the GPU."""
    return grads * s.layout.shard_grads


def master_weights_bytes(s: Stage) -> Num:
    """The optimizer's fp32 weight copy of the parameters it steps, as ZeRO >= 1 shards it (on
    the host under optimizer offload)."""
    if s.layout.offload.optimizer:
        return 0.0
    return s.optimizer_params * s.layout.bytes_per_param.master_weights


def optimizer_states_bytes(s: Stage) -> Num:
    """Optimizer moments of the parameters it steps (AdamW: two fp32; a frozen base's adapters'
    in the adapters' layout; ``training_tables``), as ZeRO >= 1 shards them (on the host under
    optimizer offload)."""
    if s.layout.offload.optimizer:
        return 0.0
    return s.optimizer_params * s.layout.state_bytes


def activations_bytes(s: Stage) -> Num:
    """Tensors saved for backward of the micro-batches in flight (1F1B, ``in_flight``; Korthikanti
    et al. 2022 per layer, ``activations.py``), and the recomputed layer's full activations under
    full or per-op recompute; less what activation offload keeps on the host, and the freed loss
    buffers the recomputed layer reuses (counted in ``logits_bytes``): the last stage's first
    backward frees the loss's buffers before it recomputes a layer, so allocated memory holds
    the larger of the two, not both."""
    acts = s.in_flight * s.microbatch_activations_bytes + s.stack.recomputed_layer_bytes
    layout = s.layout
    if layout.offload.activations:
        acts = acts - s.host_activations_bytes
    if layout.recomputing:
        acts = acts - s.loss_reuse_bytes
    return acts


def logits_bytes(s: Stage) -> Num:
    """The output head's logits and loss buffers of one micro-batch on the last stage, once more
    for each multi-token-prediction depth (``Stage.logits_bytes``, which the activations,
    gradients and fragmentation read too)."""
    return s.logits_bytes


def zero3_gather_bytes(s: Stage) -> Num:
    """ZeRO-3 / FSDP gather buffers: two of the stage's largest layer in the weight format (the
    one computing and the one prefetched). FSDP under a pipeline keeps the whole stage's weights
    gathered all step (TorchTitan: no reshard after forward)."""
    layout = s.layout
    b = layout.bytes_per_param
    gather = 2 * s.stack.largest_layer_params * b.linear_weights * layout.shard_weights
    if layout.fsdp_pp is not False:
        stage = s.stack.linear_weight_bytes + s.other_params * b.other_weights
        gather = where(layout.fsdp_pp, stage, gather)
    return gather


def dequant_buffer_bytes(s: Stage) -> Num:
    """QLoRA's dequantization buffer: the largest frozen weight dequantized from NF4 to the
    compute dtype at once (bitsandbytes dequantizes one linear at a time,
    ``finetune.dequant_buffer_elems``)."""
    adapters = s.layout.adapters
    if adapters is None or not adapters.quantized:
        return 0.0
    return s.layout.dequant_elems * s.layout.bytes_per_param.other_weights


# The named overheads: estimates on top of the tensors


def cuda_context_bytes(s: Stage, allocated: Num) -> Num:
    """CUDA context, library workspaces and kernels (``CUDA_CONTEXT_BYTES``)."""
    return CUDA_CONTEXT_BYTES


def comm_buffers_bytes(s: Stage, allocated: Num) -> Num:
    """NCCL communicator buffers, ``NCCL_BUFFER_BYTES_PER_GROUP`` per parallel group of size > 1
    the GPU belongs to (TP, PP, DP, CP, EP)."""
    return s.layout.parallel_groups * NCCL_BUFFER_BYTES_PER_GROUP


def fragmentation_bytes(s: Stage, allocated: Num) -> Num:
    """The caching allocator's overhead (reserved minus allocated): ``FRAGMENTATION_FRACTION``
    of what is allocated, and the freed loss blocks it keeps reserved after serving the
    recomputed layer from them. Gradients freed between steps are served from the blocks the
    backward has reserved, the cached loss blocks first: those they take are allocated again."""
    reused = s.loss_reuse_bytes
    per_step = s.layout.per_step_grads
    if per_step is not False:
        taken = _first_backward_bytes(s) + reused - _gradient_buffer_bytes(s)
        reused = where(per_step, maximum(minimum(reused, taken), 0.0), reused)
    return allocated * FRAGMENTATION_FRACTION + reused


def _first_backward_bytes(s: Stage) -> Num:
    """What the first backward holds besides the resident state: its activations and logits."""
    return activations_bytes(s) + logits_bytes(s)


TermFunction = Callable[[Stage], Num]
OverheadFunction = Callable[[Stage, Num], Num]

# Every term of ``TRAINING_MEMORY`` by its key, in the registry's order: the allocated tensors,
# then the overheads (``tests/test_terms.py`` checks both against the registry).
ALLOCATED: dict[str, TermFunction] = {
    "weights_bytes": weights_bytes,
    "weight_cache_bytes": weight_cache_bytes,
    "gradients_bytes": gradients_bytes,
    "master_weights_bytes": master_weights_bytes,
    "optimizer_states_bytes": optimizer_states_bytes,
    "activations_bytes": activations_bytes,
    "logits_bytes": logits_bytes,
    "zero3_gather_bytes": zero3_gather_bytes,
    "dequant_buffer_bytes": dequant_buffer_bytes,
}
OVERHEADS: dict[str, OverheadFunction] = {
    "cuda_context_bytes": cuda_context_bytes,
    "comm_buffers_bytes": comm_buffers_bytes,
    "fragmentation_bytes": fragmentation_bytes,
}
# The overheads' keys (a plan's ``overhead_bytes``, the fit verdict's band) and what CPU offload
# keeps on the host (not in the GPU's total).
OVERHEAD_TERMS = OVERHEADS.keys()
HOST_TERMS = ("host_optimizer_bytes", "host_weights_bytes", "host_activations_bytes")


def term_keys() -> tuple[str, ...]:
    """The terms' keys, in the registry's order."""
    return (*ALLOCATED, *OVERHEADS)


def memory_total(terms: Mapping[str, Num], start: Num | None = None) -> Num:
    """The sum of memory terms, in their order: the one sum behind a stage's and a plan's
    ``total_bytes`` and, over the allocated terms, what fragmentation is a share of; ``start``:
    the sum of the terms before these. Added left to right as ``+`` adds them (``_left_fold``)."""
    values = iter(terms.values())
    return _left_fold(values, next(values) if start is None else start)


def _reduce_add(values: Iterator[Num], start: Num) -> Num:
    return reduce(add, values, start)


# ``sum(values, start)`` adds floats left to right in C doubles on Python 3.11: the bits of ``+``
# without a float object per partial sum (a third of the instructions of a loop of ``+``). From
# 3.12 it compensates the rounding (other last bits), so there the sum is a reduce of ``+``.
_left_fold: Callable[[Iterator[Num], Num], Num] = sum if sys.version_info < (3, 12) else _reduce_add


def stage_terms(s: Stage) -> tuple[dict[str, Num], Num]:
    """Every term of a stage by its key, and their total: the allocated tensors, then the
    overheads on top of their sum. The total is added left to right as it is filled, the
    order ``memory_total`` adds the terms in."""
    terms = {}
    for key, term in ALLOCATED.items():  # a loop, not a comprehension: no extra frame
        terms[key] = term(s)
    total = allocated = memory_total(terms)
    for key, overhead in OVERHEADS.items():
        terms[key] = value = overhead(s, allocated)
        total = total + value
    return terms, total


def stage_memory(s: Stage, terms: Mapping[str, Num], total: Num) -> dict[str, Num]:
    """A stage's ``terms`` (its ``stage_terms``), their ``total`` (``total_bytes``), the
    parameters on the GPU, the micro-batches in flight, the parts of ``activations_bytes`` the
    timeline needs (one micro-batch's saved tensors, with the embedding's on stage 0, the layer
    being recomputed, the freed loss blocks it reuses) and what CPU offload keeps on the host
    (``HOST_TERMS``)."""
    reused, recomputed = s.loss_reuse_bytes, s.stack.recomputed_layer_bytes
    out = {
        **terms,
        "total_bytes": total,
        "params_on_gpu": s.params,
        "trainable_params_on_gpu": s.trainable_params,
        "expert_params_on_gpu": s.stack.expert_params,  # (gradients over the expert-DP ranks)
        "in_flight": s.in_flight,
        "microbatch_activations_bytes": s.microbatch_activations_bytes,
        "working_layer_bytes": recomputed - reused if s.layout.recomputing else recomputed,
        "loss_cache_bytes": reused,  # freed loss blocks the allocator keeps while recomputing
        "host_optimizer_bytes": 0.0,
        "host_weights_bytes": 0.0,
        "host_activations_bytes": s.host_activations_bytes,
    }
    if s.layout.offload.any:
        out |= host_terms(s)
    return out


def host_terms(s: Stage) -> dict[str, Num]:
    """What CPU offload keeps in host memory instead (``estimator.offload``): master weights and
    optimizer states (and the gradient shard, ZeRO >= 2), the GPU's weight shard (ZeRO-3
    parameter offload), the saved activations beyond what the GPU keeps."""
    layout = s.layout
    offload = layout.offload
    host_optimizer: Num = 0.0
    host_weights: Num = 0.0
    if offload.optimizer:
        held = s.optimizer_params
        master, states = held * layout.bytes_per_param.master_weights, held * layout.state_bytes
        host_optimizer = master + states + _offloaded_gradients(s, _gradient_buffer_bytes(s, False))
    if offload.params:
        host_weights = _weight_shard_bytes(s)
    return {
        "host_optimizer_bytes": host_optimizer,
        "host_weights_bytes": host_weights,
        "host_activations_bytes": s.host_activations_bytes,
    }
