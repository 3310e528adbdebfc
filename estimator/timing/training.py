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
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from estimator.context import Context
from estimator.counts.flops import training_flops
from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.inputs.support import check_support
from estimator.layout.parallel import Parallelism
from estimator.memory.training import (
    TrainingMemory,
    TrainingSetup,
    candidate_stages,
    in_flight_microbatches,
    training_memory,
)
from estimator.terms import STEP
from estimator.timing.data_parallel import (
    Held,
    dp_exposed,
    optimizer_step,
    syncs_of,
    zero3_exposed,
)
from estimator.timing.gemms import finetune_layer_time
from estimator.timing.kernels import (
    AttentionKernel,
)
from estimator.timing.layer import LayerRun, layer_time, training_attention_format
from estimator.timing.rates import derive_rates
from estimator.timing.stacks import (
    DEFAULT_STACK,
    MOE_EAGER_HOST_S,
    CudaGraphs,
    stack_profile,
)
from estimator.timing.stage_time import stage_times
from estimator.timing.training_notes import plan_notes
from estimator.xp import Num, maximum, where

__all__ = [
    "BREAKDOWN",
    "Held",
    "TimingOptions",
    "TrainingEstimate",
    "TrainingTime",
    "calibrate",
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
    c: Context,
    setup: TrainingSetup,
    held: Held,
    stages: Sequence[Num],
    options: TimingOptions,
) -> dict[str, Num]:
    """The step-time breakdown for ints or arrays of layouts: the ``TrainingTime`` breakdown
    keys plus ``step_s``, ``microbatches``, ``forward_s``, ``backward_s``, ``recompute_s`` and
    ``stage`` (the slowest of ``stages``). ``c.p`` and ``setup.micro_batch_size`` may hold
    numpy arrays; this is the one formula the single estimate and the sweep share."""
    p = c.p
    m = setup.microbatches(p.dp)
    worst, stage, bubble = _slowest_stage(c, setup, stages, options)
    syncs = syncs_of(c, setup, held)
    zero = p.optimizer_shard_stage
    zero3: Num = 0.0
    dp_comm: Num = 0.0
    if type(zero) is not int or zero >= 3:
        zero3 = where(zero >= 3, zero3_exposed(c, setup, syncs, worst, stage, m), 0.0)
    if type(zero) is not int or zero < 3:
        dp_comm = where(zero < 3, dp_exposed(c, options, syncs, worst), 0.0)
    optimizer, offload = optimizer_step(c, setup, held, syncs, worst, m)
    out = {
        "compute": m * (worst["forward"] + worst["backward"] + worst["recompute"]),
        "bubble": bubble,
        "tp_comm": m * worst["tp_comm"],
        "ep_comm": _ep_comm(c, setup, options, worst, stage, m),
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


def _slowest_stage(
    c: Context, setup: TrainingSetup, stages: Sequence[Num], options: TimingOptions
) -> tuple[dict[str, Num], Num, Num]:
    """The slowest of ``stages``' micro-batch times by part, which stage it is, and the
    pipeline's fill and drain: every other stage's micro-batch once while the slowest sets the
    pace (pp - 1 stages alike for an even split). A layer's time does not depend on its stage:
    each kind's is computed once."""
    model, p, precision = c.model, c.p, c.precision
    run = LayerRun(
        setup.flash_attention,
        options.attention_kernel,
        training_attention_format(precision),
        setup.expert_load,
        dedup_domains=options.moe_dispatcher == "flex",
    )
    layer_times = [
        layer_time(c, k, setup.seq_len, setup.micro_batch_size, run)
        for k in range(len(model.kinds))
    ]
    tuned = None
    if setup.finetune.frozen:
        tokens = setup.seq_len * setup.micro_batch_size / p.cp
        tuned = [finetune_layer_time(c, k, setup.finetune, tokens) for k in range(len(model.kinds))]
    worst: dict[str, Num] = {}
    t_mb: Num = 0.0
    stage: Num = 0
    stage_sum: Num = 0.0
    for s in stages:
        t = stage_times(c, setup, s, options, layer_times, tuned)
        total = sum(t.values())
        stage_sum = stage_sum + total
        if not worst:
            worst, t_mb, stage = t, total, s
            continue
        slower = total > t_mb
        worst = {k: where(slower, t[k], worst[k]) for k in t}
        stage = where(slower, s, stage)
        t_mb = maximum(total, t_mb)
    even = p.stage_layers is None
    bubble = (p.pp - 1) / p.vp * t_mb if even else (stage_sum - t_mb) / p.vp
    return worst, stage, bubble


def _ep_comm(
    c: Context,
    setup: TrainingSetup,
    options: TimingOptions,
    worst: dict[str, Num],
    stage: Num,
    m: Num,
) -> Num:
    """The step's exposed EP all-to-all. With Megatron-Core's EP all-to-all overlap
    (--overlap-moe-expert-parallel-comm) the forward of one micro-batch and the backward of
    another run as one merged pass, each one's all-to-all behind the other's compute; the
    warm-up forwards and the cool-down backwards, a pipeline rank's in-flight count (one
    without a pipeline), have no partner and keep theirs exposed (``m``: the step's
    micro-batches)."""
    p = c.p
    ep_comm = m * worst["ep_comm"]
    if not options.ep_comm_overlap:
        return ep_comm
    unpaired = in_flight_microbatches(p.pp, p.vp, stage, m)
    per_mb = worst["ep_comm"]
    behind = worst["forward"] + worst["backward"] + worst["recompute"]
    merged = unpaired * per_mb + (m - unpaired) * maximum(per_mb - behind, 0.0)
    # A sweep's layouts take it where Megatron-Core allows it (``check_ep_comm_overlap``
    # refuses a single plan that does not; without EP there is nothing to overlap).
    return where(ep_overlap_runs(p.pp, p.vp, setup.recompute), merged, ep_comm)


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
    options = options or TimingOptions()
    held = Held(
        memory.params_on_gpu,
        memory.optimizer_states_bytes,
        memory.trainable_params_on_gpu,
        memory.expert_params_on_gpu,
        memory.host_weights_bytes,
        memory.host_activations_bytes / max(memory.in_flight_microbatches, 1),
    )
    c = Context.of(model, accelerator, parallel, precision, options.cluster)
    stages = candidate_stages(model, parallel.pp, parallel.stage_layers)
    t = training_time_terms(c, setup, held, stages, options)
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
) -> TrainingEstimate:
    """Memory, step time, throughput, MFU/HFU and cost of a training plan.

    ``tokens`` (to train) gives the time to train, GPU-hours and, with a price, the cost. A
    step time or MFU measured on the user's own runs calibrates the result (``calibrate``).
    """
    check_support(accelerator, precision, training=True)
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
    return TrainingEstimate(
        memory=memory,
        time=time,
        tokens_per_step=tokens_per_step,
        tokens_per_s=float(rates.tokens_per_s),
        tokens_per_s_per_gpu=float(rates.tokens_per_s_per_gpu),
        model_flops_per_step=float(flops.model),
        hardware_flops_per_step=float(flops.hardware),
        model_tflops_per_gpu=float(flops.model) / step / gpus / 1e12,
        mfu=float(rates.mfu),
        hfu=float(rates.hfu),
        peak_format=peak_format,
        num_gpus=gpus,
        tokens=tokens,
        time_to_train_s=_scalar(rates.time_to_train_s),
        gpu_hours=_scalar(rates.gpu_hours),
        price_usd_per_gpu_hour=price_usd_per_gpu_hour,
        cost_usd=_scalar(rates.cost_usd),
        usd_per_1m_tokens=_scalar(rates.usd_per_1m_tokens),
        notes=tuple(notes),
    )


def _scalar(value: Num | None) -> float | None:
    """One plan's rate as a float (None where there is none)."""
    return None if value is None else float(value)


def calibrate(
    estimate: TrainingEstimate,
    accelerator: Accelerator,
    *,
    measured_step_s: float | None = None,
    measured_mfu: float | None = None,
) -> TrainingEstimate:
    """``estimate`` calibrated on the user's own runs: a ``measured_step_s`` (or the step a
    ``measured_mfu`` implies, against the dense peak of the estimate's ``peak_format``) gives
    the calibrated step time, throughput, MFU and its ``scale`` over the model's step, under
    ``calibrated``; the model's own figures are kept. Neither given: ``estimate`` as it is."""
    if measured_step_s is None and measured_mfu is None:
        return estimate
    if measured_step_s is not None and measured_step_s <= 0:
        raise SpecError("measured_step_s", "must be > 0", measured_step_s)
    if measured_mfu is not None and not 0 < measured_mfu <= 1:
        raise SpecError("measured_mfu", "must be in (0, 1]", measured_mfu)
    gpus, flops = estimate.num_gpus, estimate.model_flops_per_step
    peak = accelerator.peak(estimate.peak_format)
    cal_step = measured_step_s or flops / (measured_mfu * gpus * peak)  # type: ignore[operator]
    calibrated = {
        "step_s": cal_step,
        "tokens_per_s": estimate.tokens_per_step / cal_step,
        "mfu": flops / (cal_step * gpus * peak),
        "scale": cal_step / estimate.time.step_s,
    }
    return replace(estimate, calibrated=calibrated)
