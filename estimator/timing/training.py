"""Training step time, throughput, MFU and cost, operator by operator.

One micro-batch on one GPU of a pipeline stage (``timing.stage_time``; the estimate's notes in
``timing.training_notes``) is built from its layers' forward times
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

from estimator.counts.flops import training_flops
from estimator.errors import SpecError
from estimator.finetune import linear_weight_bytes
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import stage_kind_counts
from estimator.memory.training import (
    TrainingMemory,
    TrainingSetup,
    candidate_stages,
    in_flight_microbatches,
    training_memory,
)
from estimator.spec.accelerator import Accelerator
from estimator.spec.cluster import Cluster, cluster_of
from estimator.spec.model import ModelSpec
from estimator.spec.precision import DTYPES, Precision
from estimator.terms import STEP
from estimator.timing import collectives as rules
from estimator.timing.gemms import finetune_layer_time
from estimator.timing.kernels import (
    AttentionKernel,
    collective_time,
    kernel_profile,
    memory_time,
)
from estimator.timing.layer import layer_time, training_attention_format
from estimator.timing.rates import derive_rates
from estimator.timing.stacks import (
    DEFAULT_STACK,
    MOE_EAGER_HOST_S,
    CudaGraphs,
    stack_profile,
)
from estimator.timing.stage_time import dense_collective, offload_time, stage_times
from estimator.timing.training_notes import plan_notes
from estimator.xp import Num, maximum, take, where

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
    (``timing.stacks``: Megatron-Core's recommended flags, gradient reduction and parameter gather
    overlapped with compute, TP communication not overlapped: ``--tp-comm-overlap`` needs
    Transformer Engine userbuffers). ``stack`` names the profile (``of_stack`` fills them), ``auto``
    whether stack auto picked it; ``compute_scale`` multiplies compute (the fitted factor)."""

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
    auto: bool = False  # picked by stack auto: a sweep times only the layouts auto gives it

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
        t = stage_times(
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
            sync = sync + dense_collective(
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
        offload = offload_time(
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
    notes = plan_notes(model, accelerator, parallel, setup, precision, options, memory, flops)
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
