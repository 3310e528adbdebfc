"""What one pipeline stage spends on one micro-batch: the forward, backward and recompute
seconds of its layers (each layer kind's ``timing.layer.LayerTime``, the same on every stage),
the exposed TP, EP and CP exchanges, the embedding's lookup on the first stage, the output head,
its loss and multi-token prediction on the last, and the pipeline's send/recv; and what CPU
offload leaves exposed per step, and the data-parallel gradient synchronization's collective.
``timing.training`` assembles the step from these (``training_time_terms``).

Backward: two GEMMs of the same size per forward GEMM (input and weight gradients; a frozen
base's input gradients only), the attention's backward, twice the elementwise work and a
recurrent mixer's core, the eager ops' own backward; recomputation repeats what the recompute
setting drops (Megatron-Core's recompute modules, TorchTitan's per-op policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from estimator.context import Context
from estimator.counts.flops import op_recomputed_share
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster
from estimator.inputs.precision import DTYPES
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import padded_vocab, stage_kind_counts, with_mtp
from estimator.memory.activations import DEFAULT_RECOMPUTE_MODULES
from estimator.memory.training import TrainingSetup
from estimator.offload import CPU_ADAM_BYTES_PER_PARAM, host_of
from estimator.timing import collectives as rules
from estimator.timing.kernels import KernelProfile, collective_time, gemm_time, memory_time
from estimator.timing.layer import LayerTime
from estimator.timing.tp_overlap import overlapped_tp
from estimator.timing.vendor import training_scale
from estimator.xp import Num, logical_and, maximum, where

if TYPE_CHECKING:
    from estimator.timing.data_parallel import Held
    from estimator.timing.training import TimingOptions

__all__ = ["dense_collective", "offload_time", "stage_times"]


def stage_times(
    c: Context,
    setup: TrainingSetup,
    stage: Num,
    options: TimingOptions,
    layer_times: Sequence[LayerTime],
    tuned: Sequence[tuple[Num, Num]] | None = None,
) -> dict[str, Num]:
    """Forward / backward / recompute seconds of one micro-batch on ``stage``, from each layer
    kind's ``layer_times`` (the same on every stage) and, for a frozen base, its
    ``finetune_layer_time`` (``tuned``)."""
    model, p = c.model, c.p
    counts = stage_kind_counts(model, p.pp, p.vp, stage, p.stage_layers)
    counts = with_mtp(model, counts, stage == p.pp - 1, setup.mtp_layers)
    fwd: Num = 0.0
    bwd: Num = 0.0
    rec: Num = 0.0
    comm: dict[str, Num] = {"tp_comm": 0.0, "ep_comm": 0.0, "cp_comm": 0.0}
    for k, (lt, n) in enumerate(zip(layer_times, counts, strict=True)):
        if type(n) is int and not n:
            continue
        compute_f, compute_b = _layer_compute(lt, None if tuned is None else tuned[k])
        fwd = fwd + n * compute_f
        bwd = bwd + n * compute_b
        rec, ep_passes, tp_passes = _recompute(c, setup, k, lt, n, compute_f, rec)
        if options.tp_comm_overlap:  # forward-like passes, then the backward (tp_overlap)
            tp_fwd, tp_bwd = overlapped_tp(
                model, k, c.acc, c.precision.compute, p.tp, lt.tp_comm, lt.gemm
            )
            comm["tp_comm"] = comm["tp_comm"] + n * ((tp_passes - 1) * tp_fwd + tp_bwd)
        else:
            comm["tp_comm"] = comm["tp_comm"] + n * tp_passes * lt.tp_comm
        comm["ep_comm"] = comm["ep_comm"] + n * ep_passes * lt.ep_comm
        comm["cp_comm"] = comm["cp_comm"] + n * rules.CP_DIRECTIONS * lt.cp_comm

    host: Num = 0.0
    if options.cuda_graphs == "none":  # each MoE layer's launches and syncs, exposed
        moe_layers = sum(n for kind, n in zip(model.kinds, counts, strict=True) if kind.routed)
        host = moe_layers * options.moe_host_s
    fwd, bwd, rec = _ends(c, setup, stage, fwd, bwd, rec)
    scale = options.scale_for(c.acc.generation)
    vendor = training_scale(c.acc)  # the vendor's fitted factor (timing.vendor), if any
    if vendor is not None:
        scale = scale * vendor.scale
    if scale != 1.0:
        fwd, bwd, rec = fwd * scale, bwd * scale, rec * scale
    return {
        "forward": fwd, "backward": bwd, "recompute": rec, "pp_comm": _pp_comm(c, setup),
        "host": host, **comm,
    }  # fmt: skip


def _layer_compute(lt: LayerTime, tuned: tuple[Num, Num] | None) -> tuple[Num, Num]:
    """One layer's forward and backward compute: backward two GEMMs per forward GEMM, the
    attention's backward, twice the elementwise work and the mixer's core, the eager ops' own
    backward; with a frozen base (``tuned``: its adapters' GEMMs and dequantization) the base
    GEMMs' input gradients only and the adapters' input and weight gradients."""
    if tuned is None:
        compute_f = lt.gemm + lt.attention + lt.elementwise + lt.mixer + lt.eager_forward
        compute_b = (
            2 * lt.gemm
            + lt.attention_backward
            + 2 * lt.elementwise
            + 2 * lt.mixer
            + lt.eager_backward
        )
        return compute_f, compute_b
    adapter, dequant = tuned
    compute_f = (
        lt.gemm + adapter + dequant + lt.attention + lt.elementwise + lt.mixer
        + lt.eager_forward
    )  # fmt: skip
    compute_b = (
        lt.gemm
        + 2 * adapter
        + dequant
        + lt.attention_backward
        + 2 * lt.elementwise
        + 2 * lt.mixer
        + lt.eager_backward
    )
    return compute_f, compute_b


def _recompute(
    c: Context, setup: TrainingSetup, k: int, lt: LayerTime, n: Num, compute_f: Num, rec: Num
) -> tuple[Num, int, float]:
    """``rec`` plus what the recompute setting repeats of ``n`` layers of kind ``k`` (the whole
    forward under full recomputation; Megatron-Core's recompute modules; TorchTitan's per-op
    policy), and the passes of the layer's EP and TP exchanges a micro-batch then runs."""
    model, modules = c.model, setup.selective_modules
    passes = rules.collective_passes(setup.recompute)
    ep_passes: int = passes
    tp_passes: float = passes
    if setup.recompute == "full":
        rec = rec + n * compute_f
    elif setup.recompute == "selective":
        if "core_attn" in modules:
            rec = rec + n * lt.attention
        if modules != DEFAULT_RECOMPUTE_MODULES:  # Megatron-Core's recompute modules
            again = rules.recomputed_work(model, k, modules)
            rec = rec + n * (lt.gemm * again.gemm_share + again.moe * lt.dispatch)
            if again.norms or again.activation:  # memory-bound: norms, the activation
                moved = again.norms * lt.norm_bytes + again.activation * lt.expert_act_bytes
                kernels = again.norms + again.activation
                rec = rec + n * memory_time(c.acc, c.prof, moved, kernels)
            if again.moe:  # the whole MoE layer again: its experts' eager ops too
                rec = rec + n * lt.eager_experts
            elif again.activation:  # the clamp runs inside the recomputed activation
                rec = rec + n * lt.eager_clamp
            ep_passes = passes + again.moe  # the MoE layer's dispatch and combine again
            tp_passes = passes + again.tp_exchanges / max(model.kinds[k].tp_exchanges, 1)
    elif setup.recompute == "op":  # the unsaved projections and the pointwise work
        rec = rec + n * (
            lt.gemm * op_recomputed_share(model.kinds[k]) + lt.elementwise + lt.eager_forward
        )
    return rec, ep_passes, tp_passes


def _ends(
    c: Context, setup: TrainingSetup, stage: Num, fwd: Num, bwd: Num, rec: Num
) -> tuple[Num, Num, Num]:
    """``fwd``, ``bwd`` and ``rec`` plus the ends of the model on ``stage``: the embedding's
    lookup on the first stage (and again per multi-token-prediction depth), the output head,
    its cross-entropy and the MTP depths on the last."""
    model, acc, prof, p, precision = c.model, c.acc, c.prof, c.p, c.precision
    mtp = setup.mtp_layers
    tokens = setup.seq_len * setup.micro_batch_size / p.cp
    act_b = DTYPES[precision.activations].bytes
    gemm_b = DTYPES[precision.gemm_inputs].bytes
    h = model.hidden_size
    first, last = stage == 0, stage == p.pp - 1
    gather = memory_time(acc, prof, tokens * model.embed_dim * act_b * 2, 1)
    if first is not False:
        fwd, bwd = fwd + first * gather, bwd + first * (2 * gather)
    if last is False:
        return fwd, bwd, rec
    vocab = padded_vocab(model, p.tp) / p.tp
    flops = 2 * tokens * model.embed_dim * vocab
    moved = (tokens * model.embed_dim + model.embed_dim * vocab) * gemm_b
    head = gemm_time(acc, prof, flops, moved + tokens * vocab * act_b, precision.compute)
    # Cross-entropy: fp32 upcast of the logits, softmax, and its gradient (read/write twice).
    loss = memory_time(acc, prof, tokens * vocab * 4 * 4, 2)
    norm = memory_time(acc, prof, tokens * h * act_b * 2, 1)
    head_bwd = head if setup.finetune.frozen else 2 * head  # a frozen head: input grads
    fwd = fwd + last * (head + loss + norm)
    bwd = bwd + last * (head_bwd + loss + 2 * norm)
    if mtp:
        # Each multi-token-prediction depth (its decoder layers are in ``counts``): the
        # next token's embedding gathered, enorm and hnorm, the 2h x h projection of their
        # concatenation (column-parallel), then its final norm, the head and the loss again.
        eh_flops = 2 * tokens * 2 * h * h / p.tp
        eh_moved = (tokens * 2 * h + tokens * h / p.tp + 2 * h * h / p.tp) * gemm_b
        eh = gemm_time(acc, prof, eh_flops, eh_moved, precision.compute)
        norms = 3 * norm
        fwd = fwd + last * mtp * (gather + norms + eh + head + loss)
        bwd = bwd + last * mtp * (2 * gather + 2 * norms + 2 * eh + 2 * head + loss)
        if setup.recompute == "full":  # the checkpointed MTP layer: its projection too
            rec = rec + last * mtp * (norms + eh)
    return fwd, bwd, rec


def _pp_comm(c: Context, setup: TrainingSetup) -> Num:
    """The pipeline's exposed send/recv of one micro-batch's activations (1F1B; interleaving
    overlaps them with compute)."""
    p = c.p
    pp_comm: Num = 0.0
    exposed = logical_and(p.pp > 1, p.vp == 1)  # interleaving overlaps send/recv with compute
    if exposed is not False:
        tokens = setup.seq_len * setup.micro_batch_size / p.cp
        msg = rules.pp_message_bytes(c.model, p, tokens, c.precision)
        size, stride = group_shapes(p)["pp"]
        hop = collective_time(c.acc, c.prof, "send_recv", msg, size, stride, c.domain)
        pp_comm = exposed * (rules.pp_sends_per_microbatch(p.vp) * hop)
    return pp_comm


def offload_time(
    c: Context, setup: TrainingSetup, held: Held, worst: dict[str, Num], sharded: Num, m: Num
) -> Num:
    """Exposed seconds of CPU offload per step (``estimator.offload``): the optimizer's
    gradient / weight transfers and CPU step after the backward (``sharded``: the parameters
    this GPU's optimizer steps); the ``held`` weight fetches and activation round trips behind
    each of the ``m`` micro-batches' compute (the slowest stage's, ``worst``), exposed where the
    link is slower."""
    off = setup.offload
    host = host_of(c.acc.id, off)
    link = host.link_bytes_per_s
    grad_b = c.precision.bytes("gradients")
    w_b = DTYPES[c.precision.weights].bytes
    host_weights, host_activations = held.host_weights_bytes, held.host_activations_bytes
    out: Num = 0.0
    if off.optimizer:  # both directions at once: the larger of the two, then the CPU step
        transfer = maximum(sharded * grad_b, sharded * w_b) / link
        out = out + transfer + sharded * CPU_ADAM_BYTES_PER_PARAM / host.memory_bytes_per_s
    fwd, bwd, rec = worst["forward"], worst["backward"], worst["recompute"]
    if off.params:  # the shard comes up for the forward, the backward and a full recompute
        passes = 3 if setup.recompute == "full" else 2
        out = out + m * maximum(passes * host_weights / link - (fwd + bwd + rec), 0.0)
    if off.activations:  # down during the forward, back up during the backward
        per_mb = host_activations / link
        out = out + m * (maximum(per_mb - fwd, 0.0) + maximum(per_mb - bwd - rec, 0.0))
    return out


def dense_collective(
    acc: Accelerator,
    prof: KernelProfile,
    sharded: Num,
    payload: Num,
    size: Num,
    stride: Num,
    domain: Cluster,
) -> Num:
    """Gradient synchronization (``collectives.dp_sync_collective``), for one layout or arrays
    of them (both collectives timed, the right one kept)."""
    if sharded is True or sharded is False:
        kind = rules.dp_sync_collective(sharded)
        return collective_time(acc, prof, kind, payload, size, stride, domain)
    rs = collective_time(acc, prof, rules.dp_sync_collective(True), payload, size, stride, domain)
    ar = collective_time(acc, prof, rules.dp_sync_collective(False), payload, size, stride, domain)
    return where(sharded, rs, ar)
