"""Training step time, throughput, MFU and cost, operator by operator.

One micro-batch on one GPU of a pipeline stage is built from its layers' forward times
(``timing.layer``: each layer's GEMMs, attention, memory-bound elementwise work, Megatron-Core's
eager ops and its TP, EP and CP exchanges, each operator timed by ``kernels.py``):

- Backward: two GEMMs of the same size per forward GEMM (input and weight gradients), the
  attention's backward (``timing.layer.flash_backward_time``; twice the forward unfused), twice
  the elementwise work and a recurrent mixer's core, the eager ops' own backward; recomputation
  repeats what the recompute setting drops. The output head GEMM and the cross-entropy over fp32
  logits on the last stage, the embedding gather on the first.
- Communication per micro-batch: TP all-reduce (or all-gather + reduce-scatter with sequence
  parallelism) twice per layer forward and twice backward, exposed, or with ``tp_comm_overlap``
  behind the layer's GEMMs as Transformer Engine's userbuffers overlap it (``tp_overlap``: a
  chunk of it exposed, the GEMMs slowed by the SMs its kernels take); EP all-to-all (dispatch
  and combine) twice forward and twice backward per MoE layer; CP ring exchange of K/V blocks,
  hidden behind attention compute up to its length; PP send/recv of the activations (``1/tp``
  of them with sequence parallelism) per micro-batch and direction, exposed under 1F1B and
  overlapped under the interleaved schedule
  (Megatron's ``--overlap-p2p-communication``).

Per step: ``m = global_batch / (micro_batch * dp)`` micro-batches; 1F1B or interleaved 1F1B takes
``(m + (pp - 1) / vp) * t_microbatch`` on the slowest stage (Narayanan et al. 2021, Sec. 2.2);
then the data-parallel gradient reduction (reduce-scatter with ZeRO >= 1 / the distributed
optimizer, all-reduce otherwise) overlapped with the last micro-batch's backward, the parameter
all-gather (ZeRO 1-2) overlapped with the next step's first forward, ZeRO-3's per-layer gathers
overlapped with each layer's compute, and the optimizer step (memory-bound over the sharded
states). Group placement is Megatron's rank order (TP innermost, then CP, DP, PP; experts
ETP, then EP): a group whose ranks fit in one scale-up domain runs over NVLink/xGMI, otherwise
hierarchically over the scale-out network.

LoRA and QLoRA (``estimator.finetune``): each layer adds its adapters' GEMMs and, under QLoRA,
the dequantization of its NF4 weights (``timing.gemms.finetune_layer_time``), forward; backward
the adapters' GEMMs twice and the dequantization again, the frozen base GEMMs once (input
gradients only), the output head too. Gradient reduction, the parameter all-gather and the
optimizer step move the adapters only; ZeRO-3 still gathers the frozen weights (NF4 under
QLoRA, as FSDP-QLoRA shards the quantized storage).

MFU and HFU follow one convention: model FLOPs are those the step needs (``flops.py``: 3x the
causal forward for full training; LoRA's without frozen weight gradients), hardware FLOPs add
recomputation; both over ``step_s * num_gpus * peak`` with the dense peak of the format the GEMMs
run in (fp8 recipes against the fp8 peak).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from estimator.counts.flops import TrainingFlops, op_recomputed_share, training_flops
from estimator.errors import SpecError
from estimator.finetune import linear_weight_bytes
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import padded_vocab, stage_kind_counts, with_mtp
from estimator.memory.activations import DEFAULT_RECOMPUTE_MODULES
from estimator.memory.training import (
    TrainingMemory,
    TrainingSetup,
    candidate_stages,
    in_flight_microbatches,
    training_memory,
)
from estimator.offload import CPU_ADAM_BYTES_PER_PARAM, host_of
from estimator.spec.accelerator import Accelerator
from estimator.spec.cluster import Cluster, cluster_of
from estimator.spec.model import ModelSpec
from estimator.spec.precision import DTYPES, Precision
from estimator.terms import STEP
from estimator.timing import collectives as rules
from estimator.timing.eager_ops import eager_expert_kinds, expert_eager_ops
from estimator.timing.gemms import finetune_layer_time
from estimator.timing.kernels import (
    AttentionKernel,
    KernelProfile,
    collective_time,
    gemm_time,
    kernel_profile,
    memory_time,
)
from estimator.timing.layer import LayerTime, layer_time, training_attention_format
from estimator.timing.rates import derive_rates
from estimator.timing.stacks import (
    DEFAULT_STACK,
    MOE_EAGER_HOST_S,
    STACK_NOTES,
    CudaGraphs,
    stack_profile,
)
from estimator.timing.tp_overlap import overlapped_tp
from estimator.xp import Num, logical_and, maximum, take, where

__all__ = [
    "BREAKDOWN",
    "TimingOptions",
    "TrainingEstimate",
    "TrainingTime",
    "ep_overlap_runs",
    "estimate_training",
    "training_time",
    "training_time_terms",
]


# The default stack's profile: every framework behaviour's one default (``TimingOptions``').
_DEFAULT = stack_profile(DEFAULT_STACK)


@dataclass(frozen=True, slots=True)
class TimingOptions:
    """Framework behaviour the step time depends on. Defaults are the default stack's profile
    (``timing.stacks``: Megatron-Core's recommended flags, gradient reduction and parameter
    gather overlapped with compute, TP communication not overlapped: ``--tp-comm-overlap`` needs
    Transformer Engine userbuffers), declared there once. ``stack`` names the software stack
    profile these came from (``of_stack`` fills them); ``compute_scale`` multiplies the compute
    time (the profile's fitted factor)."""

    cluster: Cluster | None = None  # nodes, scale-up domain, scale-out; default: the accelerator's
    attention_kernel: AttentionKernel = _DEFAULT.attention_kernel
    tp_comm_overlap: bool = _DEFAULT.tp_comm_overlap
    ep_comm_overlap: bool = _DEFAULT.ep_comm_overlap
    overlap_grad_reduce: bool = _DEFAULT.overlap_grad_reduce
    overlap_param_gather: bool = _DEFAULT.overlap_param_gather
    stack: str = DEFAULT_STACK
    compute_scale: float = _DEFAULT.compute_scale
    moe_dispatcher: Literal["flex", "alltoall"] = _DEFAULT.moe_dispatcher
    # the profile's factor fitted on one generation's runs, where it has one (else compute_scale)
    compute_scale_by_generation: tuple[tuple[str, float], ...] = (
        _DEFAULT.compute_scale_by_generation
    )
    # what CUDA graphs capture: "none" exposes each MoE layer's host time, ``moe_host_s`` per
    # micro-batch (the fitted MOE_EAGER_HOST_S)
    cuda_graphs: CudaGraphs = _DEFAULT.cuda_graphs
    moe_host_s: float = MOE_EAGER_HOST_S

    def scale_for(self, generation: str | None) -> float:
        """The compute factor on an accelerator of ``generation``."""
        for fitted_on, scale in self.compute_scale_by_generation:  # a pair or two at most
            if fitted_on == generation:
                return scale
        return self.compute_scale

    @classmethod
    def of_stack(cls, name: str, **fields: Any) -> TimingOptions:
        """The behaviours of software stack ``name`` (``timing.stacks``), then ``fields``; a
        field given as None (a request that leaves it to the stack) takes the profile's."""
        profile = stack_profile(name)
        given = {k: v for k, v in fields.items() if v is not None}
        return cls(
            **{
                "stack": name,
                "attention_kernel": profile.attention_kernel,
                "tp_comm_overlap": profile.tp_comm_overlap,
                "ep_comm_overlap": profile.ep_comm_overlap,
                "overlap_grad_reduce": profile.overlap_grad_reduce,
                "overlap_param_gather": profile.overlap_param_gather,
                "compute_scale": profile.compute_scale,
                "compute_scale_by_generation": profile.compute_scale_by_generation,
                "moe_dispatcher": profile.moe_dispatcher,
                "cuda_graphs": profile.cuda_graphs,
                **given,
            }
        )


# What each MoE token dispatcher (``TimingOptions.moe_dispatcher``) is taken to do, as an
# estimate with expert parallelism says it.
DISPATCHER_NOTES = {
    "flex": "MoE token dispatcher: flex (DeepEP / HybridEP): a token crosses to each other"
    " scale-up domain holding one of its experts once and fans out there, and the routed tokens"
    " are copied twice each way (permute, unpermute).",
    "alltoall": "MoE token dispatcher: alltoall (NCCL all-to-all): every routed copy of a token"
    " crosses to its expert's rank, and the routed tokens are copied four times each way"
    " (permute, sort by local expert where a rank holds several, and both reversed).",
}


# The host's part of an MoE step: kernel launches and the MoE layer's device-to-host syncs (the
# dispatcher reads its token counts). Without CUDA graphs each MoE layer exposes
# ``MOE_EAGER_HOST_S`` per micro-batch (fitted on the Megatron-Core runs whose recipes set no
# graphs); with partial or full-iteration graphs it counts as hidden. What full-iteration graphs
# gain over partial ones, from NVIDIA's Megatron-LM MoE recipes (examples/moe_recipes/README.md
# @ d48bd6be: the same model, GPUs, layout and batch with partial CUDA graphs and with
# full-iteration graphs and paged stash).
MOE_HOST_NOTE = (
    "MoE host overhead (kernel launches, the dispatcher's device-to-host syncs) counted as"
    " hidden, as CUDA graphs around the layer hide it (cuda_graphs partial or full; 'none' adds"
    f" {MOE_EAGER_HOST_S * 1e3:.2f} ms per MoE layer and micro-batch): NVIDIA's Megatron-LM MoE"
    " recipes ran 12% (Qwen3-235B, 128 GB200) and 21% (Qwen3-30B-A3B, 16 GB200) slower with"
    " partial CUDA graphs than with full-iteration ones."
)
MOE_EAGER_NOTE = (
    "MoE host overhead without CUDA graphs: each MoE layer exposes"
    f" {MOE_EAGER_HOST_S * 1e3:.2f} ms of kernel launches and device-to-host syncs per"
    " micro-batch (breakdown 'host'), fitted on the 30 Megatron-Core MoE runs whose recipes"
    " set no CUDA graphs (their median error +14.5% without it; a per-run spread of about -50%"
    " to +100% remains)."
)


@dataclass(frozen=True, slots=True)
class TrainingTime:
    """One optimizer step on the slowest pipeline stage, in seconds, with its breakdown.

    ``breakdown`` sums to ``step_s``: ``compute`` (forward, backward and recompute of every
    micro-batch, exposed communication excluded), ``bubble`` (pipeline fill and drain), exposed
    ``tp_comm``, ``ep_comm``, ``cp_comm``, ``pp_comm``, ``dp_comm``, ``zero3_comm`` and
    ``optimizer``.
    """

    step_s: float
    breakdown: dict[str, float]
    microbatches: int
    forward_s: float  # one micro-batch, slowest stage
    backward_s: float
    recompute_s: float
    stage: int


@dataclass(frozen=True, slots=True)
class TrainingEstimate:
    """Memory, time, throughput and cost of one training plan."""

    memory: TrainingMemory
    time: TrainingTime
    tokens_per_step: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    model_tflops_per_gpu: float
    mfu: float
    hfu: float
    peak_format: str
    num_gpus: int
    tokens: float | None
    time_to_train_s: float | None
    gpu_hours: float | None
    price_usd_per_gpu_hour: float | None
    cost_usd: float | None
    usd_per_1m_tokens: float | None
    calibrated: dict[str, float] | None = None
    notes: tuple[str, ...] = field(default=())


def eager_ops_notes(
    model: ModelSpec, acc: Accelerator, p: Parallelism, setup: TrainingSetup, precision: Precision
) -> list[str]:
    """What the eager ops Megatron-Core runs for the model add: its routed experts' clamp and
    bias (``expert_eager_ops``) and an unfused rotary embedding (``unfused_rope_time``)."""
    notes = []
    if model.rope_mscale != 1.0:
        notes.append(
            f"YaRN rotary embedding scaled by {model.rope_mscale:.3f}: Megatron-Core runs its"
            " unfused RoPE (Megatron-Bridge turns the fusion off for YaRN, and the fused kernel"
            " takes no such factor), 12 reads and writes of each query and key element forward"
            " and 13 backward, counted in compute."
        )
    eager = eager_expert_kinds(model)
    if not eager:
        return notes
    kind = model.kinds[min(eager)]
    tokens = setup.seq_len * setup.micro_batch_size / p.cp
    act_b = DTYPES[precision.activations].bytes
    ops = expert_eager_ops(model, kind, p, tokens, act_b, setup.expert_load)
    fwd, bwd, _ = ops.times(acc, kernel_profile(acc.id))
    what = " and ".join(
        text
        for on, text in (
            (ops.clamp_kernels, "the clamp of the activation's input (two clamps and a cat)"),
            (ops.bias, "the down-projection bias added per local expert, then a cat"),
        )
        if on
    )
    return [
        *notes,
        "Routed experts: the eager PyTorch kernels Megatron-Core runs around its fused ones"
        f" (TEGroupedMLP), {what}, take {fwd * 1e3:.2f} ms forward and {bwd * 1e3:.2f} ms"
        " backward per MoE layer and micro-batch, counted in compute (under every stack).",
    ]


def mtp_notes(
    model: ModelSpec, setup: TrainingSetup, flops: TrainingFlops, batch: int
) -> list[str]:
    """What the plan's multi-token-prediction depths add to its ``flops`` (over ``batch``
    sequences), or that the checkpoint's are left untrained."""
    if setup.mtp_layers:
        share = flops.model / training_flops(model, setup.seq_len, batch).model - 1
        kinds = " + ".join(model.kinds[k].name for k in model.mtp_module)
        repeated = ", one module's weights run for each" if setup.mtp_repeated else ""
        return [
            f"Multi-token prediction: {setup.mtp_layers} depth(s) trained on the last pipeline"
            f" stage (Megatron-Core's --mtp-num-layers{repeated}), each one more {kinds} layer,"
            " a 2h x h projection and another pass through the head and loss: +"
            f"{share:.1%} model FLOPs; the stage also holds a second copy of an untied embedding"
            " where the pipeline has more than one stage."
        ]
    if model.mtp_depth:
        return [
            f"The checkpoint's {model.mtp_depth} multi-token-prediction module(s) are not trained"
            " in this plan (mtp_layers 0): Megatron-Core trains them with --mtp-num-layers"
            " (Megatron-Bridge's recipes train 1 for DeepSeek-V3, 2 of one repeated module for"
            " Nemotron 3 Super and Ultra); set mtp_layers to count them."
        ]
    return []


def _stage_times(
    model: ModelSpec,
    acc: Accelerator,
    prof: KernelProfile,
    p: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    stage: Num,
    options: TimingOptions,
    domain: Cluster,
    layer_times: Sequence[LayerTime],
    tuned: Sequence[tuple[Num, Num]] | None = None,
) -> dict[str, Num]:
    """Forward / backward / recompute seconds of one micro-batch on ``stage``, from each layer
    kind's ``layer_times`` (the same on every stage) and, for a frozen base, its
    ``finetune_layer_time`` (``tuned``)."""
    mtp = setup.mtp_layers
    counts = stage_kind_counts(model, p.pp, p.vp, stage, p.stage_layers)
    counts = with_mtp(model, counts, stage == p.pp - 1, mtp)
    fwd: Num = 0.0
    bwd: Num = 0.0
    rec: Num = 0.0
    comm: dict[str, Num] = {"tp_comm": 0.0, "ep_comm": 0.0, "cp_comm": 0.0}
    modules = setup.selective_modules
    for k, (lt, n) in enumerate(zip(layer_times, counts, strict=True)):
        if type(n) is int and not n:
            continue
        if tuned is None:
            compute_f = lt.gemm + lt.attention + lt.elementwise + lt.mixer + lt.eager_forward
            compute_b = (
                2 * lt.gemm
                + lt.attention_backward
                + 2 * lt.elementwise
                + 2 * lt.mixer
                + lt.eager_backward
            )
        else:  # frozen base GEMMs: input gradients only; adapters: input and weight gradients
            adapter, dequant = tuned[k]
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
        fwd = fwd + n * compute_f
        bwd = bwd + n * compute_b
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
                    rec = rec + n * memory_time(acc, prof, moved, kernels)
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
        if options.tp_comm_overlap:  # forward-like passes, then the backward (tp_overlap)
            tp_fwd, tp_bwd = overlapped_tp(
                model, k, acc, precision.compute, p.tp, lt.tp_comm, lt.gemm
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

    tokens = setup.seq_len * setup.micro_batch_size / p.cp
    act_b = DTYPES[precision.activations].bytes
    gemm_b = DTYPES[precision.gemm_inputs].bytes
    h = model.hidden_size
    first, last = stage == 0, stage == p.pp - 1
    # the embedding's lookup: on the first stage, and again for each multi-token-prediction depth
    gather = memory_time(acc, prof, tokens * model.embed_dim * act_b * 2, 1)
    if first is not False:
        fwd, bwd = fwd + first * gather, bwd + first * (2 * gather)
    if last is not False:
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
    scale = options.scale_for(acc.generation)
    if scale != 1.0:
        fwd, bwd, rec = fwd * scale, bwd * scale, rec * scale
    pp_comm: Num = 0.0
    exposed = logical_and(p.pp > 1, p.vp == 1)  # interleaving overlaps send/recv with compute
    if exposed is not False:
        msg = rules.pp_message_bytes(model, p, tokens, precision)
        size, stride = group_shapes(p)["pp"]
        hop = collective_time(acc, prof, "send_recv", msg, size, stride, domain)
        pp_comm = exposed * (rules.pp_sends_per_microbatch(p.vp) * hop)
    return {
        "forward": fwd, "backward": bwd, "recompute": rec, "pp_comm": pp_comm, "host": host,
        **comm,
    }  # fmt: skip


def _offload_time(
    setup: TrainingSetup,
    accelerator_id: str,
    worst: dict[str, Num],
    m: Num,
    sharded: Num,
    grad_b: float,
    w_b: float,
    host_weights: Num,
    host_activations: Num,
) -> Num:
    """Exposed seconds of CPU offload per step (``estimator.offload``): the optimizer's
    gradient / weight transfers and CPU step after the backward; weight fetches and activation
    round trips behind each micro-batch's compute, exposed where the link is slower."""
    off = setup.offload
    host = host_of(accelerator_id, off)
    link = host.link_bytes_per_s
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


def training_time_terms(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    *,
    params_on_gpu: Num,
    optimizer_states_bytes: Num,
    stages: Sequence[Num],
    options: TimingOptions,
    trainable_params_on_gpu: Num | None = None,
    expert_params_on_gpu: Num = 0.0,
    host_weights_bytes: Num = 0.0,
    host_activations_bytes: Num = 0.0,
) -> dict[str, Num]:
    """The step-time breakdown for ints or arrays of layouts: the ``TrainingTime`` breakdown
    keys plus ``step_s``, ``microbatches``, ``forward_s``, ``backward_s``, ``recompute_s`` and
    ``stage`` (the slowest of ``stages``). ``parallel`` and ``setup.micro_batch_size`` may hold
    numpy arrays; this is the one formula the single estimate and the sweep share.
    ``trainable_params_on_gpu`` (default: every parameter) are what gradients, the optimizer
    and the parameter all-gather move, ``expert_params_on_gpu`` the routed experts' share of
    ``params_on_gpu`` (synchronized over the expert data-parallel ranks); ``host_weights_bytes``
    and ``host_activations_bytes`` what CPU offload keeps on the host (``setup.offload``)."""
    prof = kernel_profile(accelerator.id)
    domain = options.cluster or cluster_of(accelerator)
    p = parallel
    m = setup.microbatches(p.dp)
    # A layer's time does not depend on its stage: each kind's is computed once.
    layer_times = [
        layer_time(
            model,
            kind,
            k,
            accelerator,
            prof,
            p,
            precision,
            setup.seq_len,
            setup.micro_batch_size,
            domain,
            setup.flash_attention,
            options.attention_kernel,
            training_attention_format(precision),
            setup.expert_load,
            dedup_domains=options.moe_dispatcher == "flex",
        )
        for k, kind in enumerate(model.kinds)
    ]
    tuned = None
    if setup.finetune.frozen:
        tokens = setup.seq_len * setup.micro_batch_size / p.cp
        tuned = [
            finetune_layer_time(model, k, setup.finetune, accelerator, prof, p, precision, tokens)
            for k in range(len(model.kinds))
        ]
    worst: dict[str, Num] = {}
    t_mb: Num = 0.0
    stage: Num = 0
    stage_sum: Num = 0.0
    for s in stages:
        t = _stage_times(
            model, accelerator, prof, p, setup, precision, s, options, domain, layer_times, tuned
        )
        total = sum(t.values())
        stage_sum = stage_sum + total
        if not worst:
            worst, t_mb, stage = t, total, s
            continue
        slower = total > t_mb
        worst = {k: where(slower, t[k], worst[k]) for k in t}
        stage = where(slower, s, stage)
        t_mb = maximum(total, t_mb)
    # Fill and drain: every other stage's micro-batch once while the slowest sets the pace
    # (pp - 1 stages alike for an even split).
    even = p.stage_layers is None
    bubble = (p.pp - 1) / p.vp * t_mb if even else (stage_sum - t_mb) / p.vp

    ranks = group_shapes(p)
    params = params_on_gpu
    trainable = params if trainable_params_on_gpu is None else trainable_params_on_gpu
    grad_b = precision.bytes("gradients")
    w_b = DTYPES[precision.weights].bytes
    zero = p.optimizer_shard_stage
    # Gradients reduce, and weights and optimizer states shard, over dp x cp for the dense
    # parameters and over the expert data-parallel ranks for the routed experts (Megatron-Core's
    # expert_data_parallel group, ``tp cp dp / (ep etp)`` GPUs ``ep etp`` apart): with EP inside
    # a node and DP across nodes that group has one GPU a node, and the experts' whole gradient
    # crosses the NICs, where the dense one's is first reduced over NVLink.
    experts = expert_params_on_gpu
    trained_experts = 0.0 if setup.finetune.frozen else experts  # LoRA: adapters, with the dense
    syncs = [(params - experts, trainable - trained_experts, ranks["dense_dp"])]
    if model.moe is not None:
        syncs.append((experts, trained_experts, ranks["edp"]))
    zero3: Num = 0.0
    dp_comm: Num = 0.0
    if type(zero) is not int or zero >= 3:
        # Per layer and micro-batch: gather weights for forward and for backward, reduce-scatter
        # the gradients; prefetch hides each behind the layer's compute.
        if p.stage_layers is None:
            layers_on_stage = model.num_layers / p.pp
        else:  # the slowest stage's layers (per layout, in a sweep)
            sizes = [
                sum(stage_kind_counts(model, p.pp, p.vp, r, p.stage_layers)) for r in range(p.pp)
            ]
            layers_on_stage = take(sizes, stage)
        # A stage of the embedding or the loss alone (uneven splits) has no layer to gather:
        # its gathers count zero, and the per-layer divisions take one layer.
        per_layer_div = maximum(layers_on_stage, 1)
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
                accelerator, prof, "all_gather", layer_w, size, stride, domain
            )
            gathers = gathers + gather
            per_layer = (
                per_layer
                + gather
                + collective_time(
                    accelerator, prof, "reduce_scatter", layer_g, size, stride, domain
                )
            )
        layer_compute = (worst["forward"] + worst["backward"]) / per_layer_div
        exposed = m * layers_on_stage * maximum(per_layer - layer_compute, 0.0)
        if setup.no_sync_accumulation:  # FSDP's no_sync: the last micro-batch reduce-scatters
            exposed = layers_on_stage * (
                (m - 1) * maximum(gathers - layer_compute, 0.0)
                + maximum(per_layer - layer_compute, 0.0)
            )
        zero3 = where(zero >= 3, exposed, 0.0)
    if type(zero) is not int or zero < 3:
        sync: Num = 0.0
        gather_all: Num = 0.0
        for _, trained, (size, stride) in syncs:
            sync = sync + _dense_collective(
                accelerator, prof, zero >= 1, trained * grad_b, size, stride, domain
            )
            if type(zero) is not int or zero >= 1:
                gather_all = gather_all + collective_time(
                    accelerator, prof, "all_gather", trained * w_b, size, stride, domain
                )
        window = worst["backward"] if options.overlap_grad_reduce else 0.0
        dp_comm = maximum(sync - window, 0.0)
        window = worst["forward"] if options.overlap_param_gather else 0.0
        dp_comm = dp_comm + (zero >= 1) * maximum(gather_all - window, 0.0)
        dp_comm = where(zero < 3, dp_comm, 0.0)

    # Optimizer: read gradients, read/write master weights and states, write the model weights.
    sharded: Num = 0.0
    for _, trained, (size, _stride) in syncs:
        sharded = sharded + trained / where(zero >= 1, size, 1)
    state_b = optimizer_states_bytes / maximum(sharded, 1.0)
    per_param = grad_b + 2 * precision.bytes("master_weights") + 2 * state_b + w_b
    optimizer = memory_time(accelerator, prof, sharded * per_param, 4)
    offload: Num = 0.0
    if setup.offload.any:
        offload = _offload_time(
            setup, accelerator.id, worst, m, sharded, grad_b, w_b,
            host_weights_bytes, host_activations_bytes,
        )  # fmt: skip
        if setup.offload.optimizer:
            optimizer = 0.0  # the CPU's step, in offload_time

    compute = m * (worst["forward"] + worst["backward"] + worst["recompute"])
    ep_comm = m * worst["ep_comm"]
    if options.ep_comm_overlap:
        # Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm): the
        # forward of one micro-batch and the backward of another run as one merged pass, each
        # one's all-to-all behind the other's compute; the warm-up forwards and the cool-down
        # backwards, a pipeline rank's in-flight count (one without a pipeline), have no
        # partner and keep theirs exposed.
        unpaired = in_flight_microbatches(p.pp, p.vp, stage, m)
        per_mb = worst["ep_comm"]
        behind = worst["forward"] + worst["backward"] + worst["recompute"]
        merged = unpaired * per_mb + (m - unpaired) * maximum(per_mb - behind, 0.0)
        # A sweep's layouts take it where Megatron-Core allows it (``check_ep_comm_overlap``
        # refuses a single plan that does not; without EP there is nothing to overlap).
        ep_comm = where(ep_overlap_runs(p.pp, p.vp, setup.recompute), merged, ep_comm)
    out = {
        "compute": compute,
        "bubble": bubble,
        "tp_comm": m * worst["tp_comm"],
        "ep_comm": ep_comm,
        "cp_comm": m * worst["cp_comm"],
        "pp_comm": m * worst["pp_comm"],
        "dp_comm": dp_comm,
        "zero3_comm": zero3,
        "offload": offload,
        "host": m * worst["host"],
        "optimizer": optimizer,
    }
    out["step_s"] = sum(out.values())
    out["microbatches"] = m
    out["forward_s"] = worst["forward"]
    out["backward_s"] = worst["backward"]
    out["recompute_s"] = worst["recompute"]
    out["stage"] = stage
    return out


BREAKDOWN = tuple(t.name for t in STEP)  # the registry's order (``estimator.terms``)


def _dense_collective(
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


def ep_overlap_runs(pp: Num, vp: Num, recompute: str) -> Num:
    """Whether Megatron-Core runs its EP all-to-all overlap in a layout (its
    ``TransformerConfig`` checks, ``check_ep_comm_overlap``): a virtual pipeline when there is a
    pipeline, no full recomputation. Plain values or a sweep's arrays."""
    return (recompute != "full") & ((pp == 1) | (vp > 1))


def check_ep_comm_overlap_stack(options: TimingOptions) -> None:
    """The EP all-to-all overlap is Megatron-Core's: refused under another stack profile."""
    if options.ep_comm_overlap and options.stack != DEFAULT_STACK:
        raise SpecError(
            "ep_comm_overlap",
            f"is Megatron-Core's (--overlap-moe-expert-parallel-comm), not {options.stack}'s",
            True,
        )


def check_ep_comm_overlap(
    model: ModelSpec, p: Parallelism, setup: TrainingSetup, options: TimingOptions
) -> None:
    """Megatron-Core's rules for its EP all-to-all overlap (``TransformerConfig``'s checks of
    ``overlap_moe_expert_parallel_comm``): expert parallelism, a virtual pipeline when there is a
    pipeline, no full recomputation; and it is Megatron-Core's."""
    check_ep_comm_overlap_stack(options)
    rule = ""
    if model.moe is None or p.ep == 1:
        rule = "needs expert parallelism (layout.ep > 1) on a mixture-of-experts model"
    elif p.pp > 1 and p.vp == 1:
        rule = "needs a virtual pipeline (layout.vp > 1) when pp > 1"
    elif setup.recompute == "full":
        rule = "cannot combine with full recomputation"
    if rule:
        raise SpecError("ep_comm_overlap", rule, True)


def training_time(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    memory: TrainingMemory,
    options: TimingOptions | None = None,
) -> TrainingTime:
    """Step time with its breakdown. ``memory`` is the plan's ``training_memory`` (its per-GPU
    parameter count sizes the data-parallel and optimizer traffic)."""
    if options is not None and options.ep_comm_overlap:
        check_ep_comm_overlap(model, parallel, setup, options)
    t = training_time_terms(
        model,
        accelerator,
        parallel,
        setup,
        precision,
        params_on_gpu=memory.params_on_gpu,
        optimizer_states_bytes=memory.optimizer_states_bytes,
        stages=candidate_stages(model, parallel.pp, parallel.stage_layers),
        options=options or TimingOptions(),
        trainable_params_on_gpu=memory.trainable_params_on_gpu,
        expert_params_on_gpu=memory.expert_params_on_gpu,
        host_weights_bytes=memory.host_weights_bytes,
        host_activations_bytes=memory.host_activations_bytes
        / max(memory.in_flight_microbatches, 1),
    )
    breakdown = {k: float(t[k]) for k in BREAKDOWN}
    return TrainingTime(
        step_s=float(t["step_s"]),
        breakdown=breakdown,
        microbatches=int(t["microbatches"]),
        forward_s=float(t["forward_s"]),
        backward_s=float(t["backward_s"]),
        recompute_s=float(t["recompute_s"]),
        stage=int(t["stage"]),
    )


def estimate_training(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    *,
    tokens: float | None = None,
    price_usd_per_gpu_hour: float | None = None,
    options: TimingOptions | None = None,
    measured_step_s: float | None = None,
    measured_mfu: float | None = None,
) -> TrainingEstimate:
    """Memory, step time, throughput, MFU/HFU and cost of a training plan.

    ``tokens`` (to train) gives the time to train, GPU-hours and, with a price, the cost. A
    ``measured_step_s`` or ``measured_mfu`` from the user's own runs calibrates the plan: the
    result keeps the model's figures and adds the calibrated ones under ``calibrated``.
    """
    memory = training_memory(model, accelerator, parallel, setup, precision)
    time = training_time(model, accelerator, parallel, setup, precision, memory, options)
    gbs = setup.global_batch_size or setup.micro_batch_size * parallel.dp
    tokens_per_step = gbs * setup.seq_len
    gpus = parallel.num_gpus
    flops = training_flops(
        model,
        setup.seq_len,
        gbs,
        setup.recompute,
        setup.finetune,
        setup.selective_modules,
        setup.mtp_layers,
    )
    peak_format = precision.compute
    peak = accelerator.peak(peak_format)
    step = time.step_s
    if price_usd_per_gpu_hour is not None and price_usd_per_gpu_hour < 0:
        raise SpecError("price_usd_per_gpu_hour", "must be >= 0", price_usd_per_gpu_hour)
    if tokens is not None and tokens <= 0:
        raise SpecError("tokens", "must be > 0", tokens)
    rates = derive_rates(
        step_s=step,
        tokens_per_step=tokens_per_step,
        gpus=gpus,
        model_flops=flops.model,
        hardware_flops=flops.hardware,
        peak_flop_per_s=peak,
        usd_per_gpu_hour=price_usd_per_gpu_hour,
        tokens=tokens,
    )
    notes = list(memory.notes) + list(kernel_profile(accelerator.id).notes)
    stack = options.stack if options else DEFAULT_STACK
    notes.append(STACK_NOTES.get(stack) or stack_profile(stack).note())  # unknown: refused
    if options is not None and options.tp_comm_overlap and parallel.tp > 1:
        notes.append(
            "TP communication overlapped with the GEMMs as Transformer Engine's userbuffers run it"
            " (Megatron-Bridge's configs): a chunk of each exchange stays exposed (1/tp of it"
            " ring-exchanged; BF16's reduce-scatter pipelined in 4 splits) and the GEMMs that share"
            " their SMs with its kernels slow down, both counted as TP time."
        )
    if options is not None and options.ep_comm_overlap:
        notes.append(
            "Expert all-to-all overlapped with another micro-batch's compute (Megatron-Core's"
            " --overlap-moe-expert-parallel-comm): the dispatcher's kernels share the SMs with"
            " the GEMMs they overlap, which is not charged, so the saving is an upper bound."
        )
    if model.moe is not None and parallel.ep > 1:
        notes.append(DISPATCHER_NOTES[(options or TimingOptions()).moe_dispatcher])
    if model.moe is not None:
        eager = (options or TimingOptions()).cuda_graphs == "none"
        notes.append(MOE_EAGER_NOTE if eager else MOE_HOST_NOTE)
    notes += eager_ops_notes(model, accelerator, parallel, setup, precision)
    notes += mtp_notes(model, setup, flops, gbs)
    cluster = (options.cluster if options else None) or cluster_of(accelerator)
    if parallel.num_gpus > cluster.scale_up_domain:
        notes += cluster.notes()
    hfu_note = "" if setup.recompute == "none" else "; HFU adds the recomputation"
    counted = "3x causal forward"
    if setup.finetune.frozen:
        counted = "causal forward with the adapters, backward without the frozen weights' gradients"
    notes.append(
        f"MFU/HFU: model FLOPs ({counted}{hfu_note}) "
        f"over step time x {gpus} GPUs x the dense {peak_format} peak "
        f"({peak / 1e12:.0f} TFLOP/s)."
    )
    if not memory.fits:
        notes.append("The plan does not fit in memory; its time is what it would take if it did.")
    calibrated = None
    if measured_step_s is not None or measured_mfu is not None:
        if measured_step_s is not None and measured_step_s <= 0:
            raise SpecError("measured_step_s", "must be > 0", measured_step_s)
        if measured_mfu is not None and not 0 < measured_mfu <= 1:
            raise SpecError("measured_mfu", "must be in (0, 1]", measured_mfu)
        cal_step = measured_step_s or flops.model / (measured_mfu * gpus * peak)  # type: ignore[operator]
        calibrated = {
            "step_s": cal_step,
            "tokens_per_s": tokens_per_step / cal_step,
            "mfu": flops.model / (cal_step * gpus * peak),
            "scale": cal_step / step,
        }
    return TrainingEstimate(
        memory=memory,
        time=time,
        tokens_per_step=tokens_per_step,
        tokens_per_s=rates.tokens_per_s,
        tokens_per_s_per_gpu=rates.tokens_per_s_per_gpu,
        model_flops_per_step=float(flops.model),
        hardware_flops_per_step=float(flops.hardware),
        model_tflops_per_gpu=float(flops.model) / step / gpus / 1e12,
        mfu=rates.mfu,
        hfu=rates.hfu,
        peak_format=peak_format,
        num_gpus=gpus,
        tokens=tokens,
        time_to_train_s=rates.time_to_train_s,
        gpu_hours=rates.gpu_hours,
        price_usd_per_gpu_hour=price_usd_per_gpu_hour,
        cost_usd=rates.cost_usd,
        usd_per_1m_tokens=rates.usd_per_1m_tokens,
        calibrated=calibrated,
        notes=tuple(notes),
    )
