"""One layer's forward on one rank for one micro-batch, operator by operator (``layer_time``):
the record (``LayerTime``) the training step (``timing.training``) and the serving steps
(``serving.steps``) assemble into their passes. Each operator is timed by ``kernels.py``
(roofline with fitted efficiency curves):

- GEMMs of every linear with the TP-sharded shape, routed experts over the tokens the router
  sends them (``timing.gemms``).
- Flash attention over the causal pairs (``s (s + 1) / 2``, windows, sparse selections and
  compressed keys applied: ``flops.core_pairs_flops``), heads split by TP,
  queries by CP; backward does 2.5x the forward FLOPs (FlashAttention-2, Dao 2023, Sec. 3.1:
  five matmuls against two) at 63/73 of the forward's FLOP/s (same paper). The kernel family is
  an option: the vendor's fused kernel the curves were fitted on (cuDNN / FlashAttention-3 class,
  Megatron-Core's default) or FlashAttention-2 (PyTorch stacks before FA3; 35% of peak on
  Hopper). Without flash attention, the full ``s x s`` scores are computed by two batched GEMMs
  and masked and softmaxed in memory; backward is twice that.
- Memory-bound elementwise work (norms, residual adds, the MLP activation, rotary; with
  hyper-connections their streams, ``ModelSpec.stream_traffic_per_block``) as bytes read
  and written at the measured elementwise streaming rate, 3 kernels per layer forward; with
  low-precision recipes the cast of every GEMM input and in MoE layers the token dispatcher's
  copies of every routed token (one kernel per pass) as contiguous copies at the streaming rate
  of a weight-bound GEMM (``kernels.copy_time``; on a serving profile's measured GEMM curve the
  casts are part of the GEMM's time: aiconfigurator times the engine's linear layer from a bf16
  input, its quantization included, ai-dynamo/aiconfigurator collector/trtllm/collect_gemm.py):
  the all-to-all dispatcher's permute, chunk sort,
  unsort and unpermute, the flex dispatcher's (DeepEP / HybridEP) permute and unpermute. In
  training, the eager ops Megatron-Core runs around its fused kernels (``timing.eager_ops``).
- Communication inside the layer: its TP exchanges (all-reduce, or all-gather + reduce-scatter
  with sequence parallelism; ``LayerKind.tp_exchanges``, two for a transformer layer), the EP
  all-to-all of an MoE layer (dispatch and combine; the flex dispatcher sends a token once to
  each other scale-up domain holding one of its experts, ``collectives.domain_dedup``), and the
  CP ring exchange of K/V blocks, hidden behind attention compute up to its length. How many
  passes of each a step runs, and what overlaps them, is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.context import Context
from estimator.counts.flops import attended_keys, attention_terms, core_pairs_flops
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.architecture import AttentionCore, LayerKind
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.ranks import group_shapes
from estimator.memo import per_model
from estimator.timing import collectives as rules
from estimator.timing.eager_ops import eager_expert_kinds, expert_eager_ops, unfused_rope_time
from estimator.timing.gemms import linear_gemm_time, linear_gemms
from estimator.timing.kernels import (
    AttentionKernel,
    KernelProfile,
    attention_prefill_time,
    collective_time,
    copy_time,
    gemm_time,
    memory_time,
    mixer_time,
)
from estimator.xp import Num, logical_and, maximum, where

__all__ = [
    "ELEMENTWISE_KERNELS_FORWARD",
    "FLASH_BACKWARD_FACTOR",
    "PLAIN_RUN",
    "LayerRun",
    "LayerTime",
    "flash_backward_time",
    "layer_time",
    "training_attention_format",
]

# FlashAttention-2's backward over its forward in FLOPs (Dao 2023, Sec. 3.1: five matmuls
# against two), at the backward kernels' share of the forward's rate (``flash_backward_time``).
FLASH_BACKWARD_FACTOR = 2.5
# Kernels of a layer's memory-bound elementwise work forward (norms, residual adds, the MLP
# activation, rotary), each paying the launch floor (``KernelProfile.floor_s``).
ELEMENTWISE_KERNELS_FORWARD = 3


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Forward seconds of one layer on one rank for one micro-batch (``layer_time``), by
    operator, and the backward of its attention (whose ratio to the forward depends on the
    kernel); ints or arrays of layouts."""

    gemm: Num
    attention: Num
    attention_backward: Num
    elementwise: Num
    tp_comm: Num
    ep_comm: Num
    cp_comm: Num
    mixer: Num = 0.0  # a recurrent mixer's core (its backward is charged at twice this)
    dispatch: Num = 0.0  # the token dispatcher's copies, part of ``elementwise``
    norm_bytes: Num = 0.0  # one hidden-size norm's reads and writes, part of ``elementwise``
    expert_act_bytes: Num = 0.0  # the routed experts' activation's, part of ``elementwise``
    # eager PyTorch ops Megatron-Core runs around its fused kernels, outside ``elementwise``
    # (the routed experts' clamp and bias, ``expert_eager_ops``; an unfused rotary embedding,
    # ``unfused_rope_time``): forward and backward; the experts' forward again under ``moe``,
    # their clamp's under ``moe_act``
    eager_forward: Num = 0.0
    eager_backward: Num = 0.0
    eager_experts: Num = 0.0
    eager_clamp: Num = 0.0


def training_attention_format(precision: Precision) -> str:
    """The tensor-core rate of the attention core (QK^T, softmax, PV) in training: the
    activations' format, whatever format the linears' GEMMs run in. Low-precision training
    recipes quantize the inputs of the linear layers only; Megatron-Core's
    ``fp8_dot_product_attention`` (Transformer Engine's FP8 attention) defaults to False
    (megatron/core/model_parallel_config.py), and the NVFP4 recipe has no FP4 attention, so
    an fp8 or NVFP4 run does its attention in bf16 at the bf16 rate."""
    return DTYPES[precision.activations].compute or "bf16"


@per_model
def _routed_inter(model: ModelSpec, k: int) -> int:
    """The routed experts' intermediate width a token passes through in layer kind ``k`` (each
    active expert's down-projection input), before expert tensor parallelism."""
    return sum(
        m.in_features * m.active
        for m in model.kinds[k].linears
        if m.tp == "row" and m.component == "experts"
    )


@dataclass(frozen=True, slots=True)
class LayerRun:
    """How a layer's kernels run (``layer_time``'s options).

    ``flash``: flash attention (else the unfused ``s x s`` scores); ``kernel``: its family;
    ``attention_format``: the tensor-core rate the attention core runs at (default: the GEMMs'
    rate; training passes ``training_attention_format``); ``expert_load``: the busiest
    expert-parallel rank's routed share over the balanced one; ``grouped_experts``: the routed
    experts as one fused kernel (``linear_gemm_time``), as the serving engines run them;
    ``expert_tokens``: the tokens the expert-parallel group routes (``linear_gemms``);
    ``dedup_domains``: the flex token dispatcher (DeepEP / HybridEP), which sends a token once
    to each other scale-up domain holding one of its experts (``collectives.domain_dedup``) and
    permutes the tokens it received without the all-to-all dispatcher's chunk sort."""

    flash: bool = True
    kernel: AttentionKernel = "fused"
    attention_format: str | None = None
    expert_load: Num = 1.0
    grouped_experts: bool = False
    expert_tokens: Num | None = None
    dedup_domains: bool = False


PLAIN_RUN = LayerRun()


@dataclass(frozen=True, slots=True)
class _Attention:
    """A layer's attention core on one rank: forward and backward seconds, and the local heads
    and head width the elementwise work (rotary) reads."""

    forward: Num = 0.0
    backward: Num = 0.0
    heads_local: Num = 0
    kv_local: Num = 0
    head_dim: int = 0


def layer_time(
    c: Context, kind_index: int, seq_len: Num, micro_batch: Num, run: LayerRun = PLAIN_RUN
) -> LayerTime:
    """Forward time of one layer of kind ``kind_index`` for one micro-batch on one rank (and
    the backward time of its attention, whose ratio to the forward depends on the kernel), the
    kernels run as ``run`` says."""
    model, p = c.model, c.p
    kind = model.kinds[kind_index]
    tokens = seq_len * micro_batch / p.cp
    gemm = linear_gemm_time(
        c, kind, tokens, run.expert_load, run.grouped_experts, run.expert_tokens
    )
    att = _attention(c, kind_index, seq_len, micro_batch, run)
    mixer: Num = 0.0
    if kind.mixer is not None:
        compute = c.precision.compute
        mixer = mixer_time(
            kind.mixer, c.acc, c.prof, p.tp, c.precision, seq_len, micro_batch, compute
        )
    rope = 2 * (att.heads_local + att.kv_local) * att.head_dim
    elementwise, dispatch, norm_bytes, expert_act_bytes = _elementwise(
        c, kind_index, tokens, rope, run
    )
    eager = _eager(c, kind_index, tokens, rope, run)
    tp_comm, ep_comm, cp_comm = _exchanges(c, kind, tokens, att.forward, run.dedup_domains)
    return LayerTime(
        gemm,
        att.forward,
        att.backward,
        elementwise,
        tp_comm,
        ep_comm,
        cp_comm,
        mixer,
        dispatch,
        norm_bytes,
        expert_act_bytes,
        *eager,
    )


def _attention(
    c: Context, kind_index: int, seq_len: Num, micro_batch: Num, run: LayerRun
) -> _Attention:
    """The attention core's forward and backward on one rank: heads split by TP, queries by
    CP; flash attention over the causal pairs (backward ``flash_backward_time``), or the
    unfused scores (backward twice the forward)."""
    model, p, precision = c.model, c.p, c.precision
    term = attention_terms(model)[kind_index]
    a = model.kinds[kind_index].attention
    if term is None or a is None:
        return _Attention()
    att_compute = run.attention_format or precision.compute
    act_b = DTYPES[precision.activations].bytes
    tokens = seq_len * micro_batch / p.cp
    heads_local = a.num_heads / p.tp
    kv_local = maximum(a.num_kv_heads // p.tp, 1)
    head_dim = a.qk_head_dim
    if not run.flash:
        eager = _eager_attention_time(
            c.acc, c.prof, a, heads_local, micro_batch, seq_len, precision, att_compute
        )
        return _Attention(eager, 2 * eager, heads_local, kv_local, head_dim)
    att_flops = micro_batch * core_pairs_flops(term, seq_len) / p.cp / p.tp
    att_bytes = (
        tokens * (heads_local * (a.qk_head_dim + a.v_head_dim) * 2) * act_b
        + tokens * kv_local * (a.qk_head_dim + a.v_head_dim) * act_b
    )
    keys = attended_keys(term, seq_len) / p.cp
    forward = attention_prefill_time(
        c.acc, c.prof, att_flops, att_bytes, keys, att_compute, run.kernel, head_dim
    )
    backward = flash_backward_time(c.prof, forward, run.kernel, head_dim)
    return _Attention(forward, backward, heads_local, kv_local, head_dim)


def _elementwise(
    c: Context, kind_index: int, tokens: Num, rope: Num, run: LayerRun
) -> tuple[Num, Num, Num, Num]:
    """A layer's memory-bound work forward: norms, residual adds, the MLP activation and rotary
    (``rope`` elements a token), the casts of low-precision GEMM inputs and the token
    dispatcher's copies. Seconds, the dispatcher's share of them, one hidden-size norm's bytes
    and the routed experts' activation's bytes."""
    model, acc, prof, p, precision = c.model, c.acc, c.prof, c.p, c.precision
    kind = model.kinds[kind_index]
    gemm_b = DTYPES[precision.gemm_inputs].bytes
    act_b = DTYPES[precision.activations].bytes
    sp_tokens = tokens / where(p.sequence_parallel, p.tp, 1)
    h = model.hidden_size
    hidden_norms = sum(1 for nm in kind.norms if nm.size == h)
    inter = sum(
        m.in_features * m.active / (p.expert_tp if m.copies > 1 else p.tp)
        for m in kind.linears
        if m.tp == "row" and m.component in ("mlp", "experts", "shared_experts")
    )
    act_elems = (3 if model.gated_mlp else 2) * inter  # read gate/up, write product
    residual = 2 * 3 * h + kind.blocks * model.stream_traffic_per_block
    elem_bytes = (
        sp_tokens * (hidden_norms * 2 * h + residual) + tokens * (act_elems + rope)
    ) * act_b
    norm_bytes = sp_tokens * 2 * h * act_b
    expert_act_bytes: Num = 0.0
    if model.moe is not None:
        act = (3 if model.gated_mlp else 2) * _routed_inter(model, kind_index) / p.expert_tp
        expert_act_bytes = tokens * act * act_b
    copy_bytes: Num = 0.0
    copies: Num = 0
    dispatch: Num = 0.0
    if (
        precision.gemm_inputs != precision.activations
        and prof.gemm_curve(precision.compute) is None
    ):
        # Transformer Engine casts every GEMM input to the low-precision format (read the
        # activation, write the cast copy); the backward pass casts the output gradients too.
        cast_elems = sum(
            count * m_rows * k
            for m_rows, k, _, count, _ in linear_gemms(
                kind, p.tp, p.ep, p.expert_tp, tokens, expert_tokens=run.expert_tokens
            )
        )
        copy_bytes = cast_elems * (act_b + gemm_b)
    if model.moe is not None and kind.routed:
        # Megatron's token dispatchers copy every routed token (top-k copies of h values) in
        # permute and unpermute; the all-to-all dispatcher also sorts the received chunks by
        # local expert around the all-to-all when a rank holds several of the experts it splits
        # (token_dispatcher.py: sort_chunks_by_idxs where num_local_experts > 1), while the
        # flex dispatcher's kernels deliver them by rank and its one permute orders them by
        # expert (_DeepepManager, _HybridEPManager): each pass reads and writes them.
        passes: Num = 2
        if not run.dedup_domains:
            local = model.moe.num_experts / p.ep
            passes = where(logical_and(p.ep > 1, local > 1), 4, 2)
        routed = passes * 2 * tokens / p.tp * model.moe.top_k * h * act_b
        copy_bytes = copy_bytes + routed
        copies = passes
        dispatch = copy_time(acc, prof, routed, passes)
    elementwise = memory_time(acc, prof, elem_bytes, ELEMENTWISE_KERNELS_FORWARD) + copy_time(
        acc, prof, copy_bytes, copies
    )
    return elementwise, dispatch, norm_bytes, expert_act_bytes


def _eager(
    c: Context, kind_index: int, tokens: Num, rope: Num, run: LayerRun
) -> tuple[Num, Num, Num, Num]:
    """The eager PyTorch ops Megatron-Core runs around its fused kernels (training only: the
    serving engines fuse the experts' clamp and bias into their MoE kernels and the attention
    factor into their rotary kernels' cos and sin): forward, backward, the experts' forward
    and their clamp's."""
    model, acc, prof = c.model, c.acc, c.prof
    kind = model.kinds[kind_index]
    act_b = DTYPES[c.precision.activations].bytes
    eager_f: Num = 0.0
    eager_b: Num = 0.0
    experts_f: Num = 0.0
    clamp_f: Num = 0.0
    if kind_index in eager_expert_kinds(model) and not run.grouped_experts:
        ops = expert_eager_ops(model, kind, c.p, tokens, act_b, run.expert_load)
        experts_f, experts_b, clamp_f = ops.times(acc, prof)
        eager_f, eager_b = experts_f, experts_b
    if kind.attention is not None and not run.grouped_experts:
        rope_f, rope_b = unfused_rope_time(acc, prof, model, tokens * rope / 2, act_b)
        eager_f, eager_b = eager_f + rope_f, eager_b + rope_b
    return eager_f, eager_b, experts_f, clamp_f


def _exchanges(
    c: Context, kind: LayerKind, tokens: Num, attention: Num, dedup_domains: bool
) -> tuple[Num, Num, Num]:
    """The layer's exchanges forward: its TP exchanges (``rules.tp_collectives``), the EP
    dispatch and combine of an MoE layer, and the CP ring of K/V blocks hidden behind the
    ``attention`` seconds up to its length."""
    model, acc, prof, p, precision, domain = c.model, c.acc, c.prof, c.p, c.precision, c.domain
    ranks = group_shapes(p)
    activation_bytes = rules.tp_message_bytes(model, p, tokens, precision)
    tp_size, tp_stride = ranks["tp"]
    sp_on = logical_and(p.sequence_parallel, p.tp > 1)
    one: Num = 0.0

    def exchange(sequence_parallel: bool) -> Num:  # one TP exchange (``rules.tp_collectives``)
        return sum(
            collective_time(acc, prof, name, activation_bytes, tp_size, tp_stride, domain)
            for name in rules.tp_collectives(sequence_parallel)
        )

    if sp_on is not False:
        one = exchange(True)
    if sp_on is not True:
        one = where(sp_on, one, exchange(False))
    tp_comm = kind.tp_exchanges * one

    ep_comm: Num = 0.0
    if model.moe is not None and kind.routed:
        ep_size, ep_stride = ranks["ep"]
        routed_bytes = rules.ep_message_bytes(model, p, tokens, precision)
        share: Num = 1.0
        if dedup_domains:
            share = rules.domain_dedup(model.moe.top_k, ep_size, ep_stride, domain.scale_up_domain)
        ep_comm = rules.EP_CALLS_PER_MOE_LAYER * collective_time(
            acc, prof, "all_to_all", routed_bytes, ep_size, ep_stride, domain, share
        )

    cp_comm: Num = 0.0
    if kind.attention is not None and (type(p.cp) is not int or p.cp > 1):
        cp_stride = ranks["cp"][1]
        kv_bytes = rules.cp_message_bytes(kind, p, tokens, precision)
        ring = (p.cp - 1) * collective_time(acc, prof, "send_recv", kv_bytes, 2, cp_stride, domain)
        cp_comm = maximum(ring - attention, 0.0)  # hidden behind the blockwise attention
    return tp_comm, ep_comm, cp_comm


def flash_backward_time(
    prof: KernelProfile, forward: Num, kernel: AttentionKernel, head_dim: int
) -> Num:
    """The backward of flash attention whose forward takes ``forward``: 2.5x its FLOPs
    (``FLASH_BACKWARD_FACTOR``) at the backward kernels' share of the forward's rate, and at
    ``head_dim``'s backward rate rather than its forward's (``KernelProfile.head_dim_time``)."""
    fwd_dim, bwd_dim = prof.head_dim_time(kernel, head_dim)
    return forward * FLASH_BACKWARD_FACTOR / prof.attention_backward_ratio * bwd_dim / fwd_dim


def _eager_attention_time(
    acc: Accelerator,
    prof: KernelProfile,
    a: AttentionCore,
    heads: Num,
    micro_batch: Num,
    seq_len: Num,
    precision: Precision,
    compute: str,
) -> Num:
    """Unfused attention: the full ``s x s`` score matrix per head (the causal mask and any
    window are applied to it, not skipped) from a batched QK^T GEMM, masked and softmaxed in
    memory-bound passes, then multiplied by V. The scores are written by the first GEMM, read and
    written by the mask and by the softmax, and read by the second GEMM."""
    act_b = DTYPES[precision.activations].bytes
    batch = micro_batch * heads
    scores = batch * seq_len * seq_len
    qk = 2 * scores * a.qk_head_dim
    pv = 2 * scores * a.v_head_dim
    qk_bytes = batch * seq_len * 2 * a.qk_head_dim * act_b + scores * act_b
    pv_bytes = scores * act_b + batch * seq_len * 2 * a.v_head_dim * act_b
    return (
        gemm_time(acc, prof, qk, qk_bytes, compute)
        + gemm_time(acc, prof, pv, pv_bytes, compute)
        + memory_time(acc, prof, 4 * scores * act_b, 2)
    )
