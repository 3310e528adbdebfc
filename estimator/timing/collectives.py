"""The collectives of a training step, by parallel dimension: which ones run, how many times, on
what message. One set of rules: the step time (``timing.layer``, ``timing.training``) charges
them and the communication plan (``timing.comms``) lists them, so the two cannot disagree.

Per layer and micro-batch, on the most-loaded stage (Megatron-LM semantics):

- TP: with sequence parallelism an all-gather before and a reduce-scatter after attention and
  the MLP, without it an all-reduce after each (``TP_CALLS_PER_LAYER`` places in a classic layer,
  ``LayerKind.tp_exchanges`` in general: one in a hybrid model's mixer-only, attention-only or
  MLP-only layers); each repeated in
  backward and, under full recomputation, in the second forward (``collective_passes``).
  Message: the layer's activations, ``s b / cp x h``.
- EP: an all-to-all to dispatch and one to combine the routed tokens of each MoE layer,
  ``s b / (cp tp) x top_k x h``; again in every pass.
- CP: ring attention passes K/V blocks ``cp - 1`` times per layer, forward and backward.
- PP: one activation send forward and one gradient send backward per micro-batch and virtual
  stage, ``s b / cp x h`` (divided by ``tp`` with sequence parallelism).
- DP: once per iteration, the gradients (reduce-scatter with a sharded optimizer, else
  all-reduce) and, with a sharded optimizer, the updated parameters (all-gather); ZeRO-3
  instead gathers each layer's weights for forward and for backward and reduce-scatters its
  gradients, every micro-batch.

Bytes a GPU puts on the wire per call follow NCCL's ring algorithms (nccl-tests
``doc/PERFORMANCE.md`` bus-bandwidth factors): all-reduce ``2 (n-1)/n``, all-gather,
reduce-scatter and all-to-all ``(n-1)/n`` of the message, send/recv the message.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.counts.flops import module_recomputed_share
from estimator.inputs.architecture import LayerKind
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.parallel import Parallelism
from estimator.memo import per_model
from estimator.memory.activations import is_mla, is_moe
from estimator.timing.kernels import Collective
from estimator.xp import Num, maximum, minimum, where

__all__ = [
    "CP_DIRECTIONS",
    "EP_CALLS_PER_MOE_LAYER",
    "TP_CALLS_PER_LAYER",
    "ZERO3_GATHERS_PER_LAYER",
    "Recomputed",
    "collective_passes",
    "cp_message_bytes",
    "cp_width",
    "domain_dedup",
    "dp_sync_collective",
    "ep_message_bytes",
    "pp_message_bytes",
    "pp_sends_per_microbatch",
    "recomputed_work",
    "tp_collectives",
    "tp_message_bytes",
    "wire_factor",
    "zero3_layer_bytes",
]

TP_CALLS_PER_LAYER = 2  # after attention and after the MLP (``LayerKind.tp_exchanges``)
EP_CALLS_PER_MOE_LAYER = 2  # dispatch and combine
CP_DIRECTIONS = 2  # K/V blocks passed around the ring in forward and again in backward
ZERO3_GATHERS_PER_LAYER = 2  # the layer's weights for forward and again for backward


def collective_passes(recompute: str) -> int:
    """Passes that run a layer's TP and EP collectives: forward and backward, and the second
    forward of a fully recomputed layer; the per-op policy recomputes them too (of the
    collectives only reduce-scatter outputs are in its save list: the all-gathers, about half of
    a sequence-parallel layer's volume, repeat; counted as a whole pass)."""
    return 3 if recompute in ("full", "op") else 2


def tp_collectives(sequence_parallel: bool) -> tuple[Collective, ...]:
    """One TP exchange: sequence parallelism splits the all-reduce into an all-gather (before)
    and a reduce-scatter (after)."""
    return ("all_gather", "reduce_scatter") if sequence_parallel else ("all_reduce",)


def pp_sends_per_microbatch(vp: Num) -> Num:
    """Activations sent forward and gradients sent backward, once per virtual stage."""
    return 2 * vp


def dp_sync_collective(sharded: bool) -> Collective:
    """The gradient synchronisation: a reduce-scatter where the optimizer is sharded (each rank
    updates its shard, then gathers the parameters), else an all-reduce."""
    return "reduce_scatter" if sharded else "all_reduce"


def zero3_layer_bytes(params_on_gpu: Num, layers_on_stage: Num, bytes_per_param: float) -> Num:
    """One ZeRO-3 gather's buffer: a layer's parameters (the stage's share of them)."""
    return params_on_gpu / layers_on_stage * bytes_per_param


def zero3_layer_payloads(
    params_on_gpu: Num,
    trainable_on_gpu: Num,
    layers_on_stage: Num,
    weight_bytes: float,
    grad_bytes: float,
    frozen: bool,
) -> tuple[Num, Num]:
    """A layer's ZeRO-3 weight gather and gradient reduce-scatter: every parameter as stored
    (``weight_bytes``: NF4 for QLoRA's linears), and the gradients of the trainable ones (with
    a frozen base, the adapters' only)."""
    gather = zero3_layer_bytes(params_on_gpu, layers_on_stage, weight_bytes)
    if frozen:
        return gather, zero3_layer_bytes(trainable_on_gpu, layers_on_stage, grad_bytes)
    return gather, gather / weight_bytes * grad_bytes


def tp_message_bytes(model: ModelSpec, p: Parallelism, tokens: Num, precision: Precision) -> Num:
    """One TP collective's buffer: a layer's activations for the rank's ``tokens``."""
    return tokens * model.hidden_size * DTYPES[precision.activations].bytes


def domain_dedup(top_k: int, ep: Num, stride: Num, scale_up_domain: int) -> Num:
    """The share of an EP all-to-all's bytes a domain-deduplicating dispatcher sends (DeepEP's
    and HybridEP's normal kernels: a token crosses to each other scale-up domain holding one of
    its ``top_k`` experts once, then fans out over NVLink). With the experts spread evenly over
    ``R`` domains a token reaches a given domain with probability ``1 - (1 - 1/R)^k``: it
    sends ``(R - 1)`` times that instead of its ``k (R - 1) / R`` copies, a share ``R (1 - (1 -
    1/R)^k) / k`` (1 inside one domain)."""
    local = minimum(maximum(scale_up_domain // maximum(stride, 1), 1), ep)
    domains = maximum(ep // local, 1)
    share = domains * (1 - (1 - 1 / domains) ** top_k) / top_k
    return where(domains > 1, share, 1.0)


def ep_message_bytes(model: ModelSpec, p: Parallelism, tokens: Num, precision: Precision) -> Num:
    """What one rank sends in a dispatch (or combine) all-to-all: its routed token copies."""
    top_k = model.moe.top_k if model.moe is not None else 0
    return tokens / p.tp * top_k * model.hidden_size * DTYPES[precision.activations].bytes


def cp_message_bytes(kind: LayerKind, p: Parallelism, tokens: Num, precision: Precision) -> Num:
    """One ring-attention step's K/V block (a kind with attention)."""
    a = kind.attention
    assert a is not None
    kv_local = maximum(a.num_kv_heads // p.tp, 1)
    return tokens * kv_local * (a.qk_head_dim + a.v_head_dim) * DTYPES[precision.activations].bytes


def cp_width(kind: LayerKind, p: Parallelism) -> int:
    """Elements per token of one rank's K/V block (its KV heads, at least one)."""
    a = kind.attention
    assert a is not None
    return int(max(a.num_kv_heads // p.tp, 1) * (a.qk_head_dim + a.v_head_dim))


def pp_message_bytes(model: ModelSpec, p: Parallelism, tokens: Num, precision: Precision) -> Num:
    """The activation (or gradient) a stage sends its neighbour per micro-batch: the residual
    (``ModelSpec.residual_width``)."""
    act_b = DTYPES[precision.activations].bytes
    return tokens * model.residual_width * act_b / where(p.sequence_parallel, p.tp, 1)


def wire_factor(collective: str, n: int) -> float:
    """Bytes one GPU sends per byte of message (NCCL ring algorithms)."""
    if n <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective == "send_recv":
        return 1.0
    return (n - 1) / n


@dataclass(frozen=True, slots=True)
class Recomputed:
    """What Megatron-Core's selective recompute modules run again in one layer kind's
    backward (``recomputed_work``): ``gemm_share`` of its projection time
    (``module_recomputed_share``), its MoE layer whole (``moe``: 1, the token dispatcher's
    copies and all-to-alls with it), its TP exchanges (``tp_exchanges``: the dense MLP's, or
    the MoE layer's, one of the layer's), its norms and its experts' activation."""

    gemm_share: float
    moe: int
    tp_exchanges: int
    norms: int  # hidden-size norms recomputed (``layernorm``: those that are modules of their own)
    activation: int  # the routed experts' activation recomputed (``moe_act``, or in ``moe``)


@per_model
def recomputed_work(model: ModelSpec, k: int, modules: tuple[str, ...]) -> Recomputed:
    kind = model.kinds[k]
    routed = is_moe(kind)
    moe = int("moe" in modules and routed)
    mlp = "mlp" in modules and any(m.component == "mlp" for m in kind.linears) and not routed
    exchanges = int((mlp or moe == 1) and kind.tp_exchanges > 0)
    share = module_recomputed_share(kind, modules, model.hidden_size)
    norms = ("layernorm" in modules) * (int(routed) + int(is_mla(kind)))
    activation = int(routed and ("moe_act" in modules or moe == 1))
    return Recomputed(share, moe, exchanges, norms, activation)
