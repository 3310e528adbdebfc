"""Serving latency, throughput and cost of one plan: a lone request and the concurrency curve
(``estimate_inference``) and the steady state under load (``estimate_load``).

- A lone request's TTFT, the decode step's TPOT and the throughput-vs-concurrency curve (the
  steady-state cycle of continuous batching at each batch size) are ``serving.curve``'s.
- Under load (an ``engine`` preset or a ``request_rate``): the steady state of the engine's
  scheduler, counted in steps (``serving.load``) and timed (``serving.steady``); the throughput
  and cost are then the load model's, at the load the latencies are.
- With latency targets: the best concurrency, the rate within them and the replicas a rate
  needs (``serving.targets``).
- Cost per token splits the GPU-hours between prefill (input tokens) and decode (output tokens)
  by their share of the time.

This module re-exports the names of ``serving.curve`` and ``serving.targets`` it always held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

from estimator.context import Context
from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster, cluster_of
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.inputs.support import check_support
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceMemory, InferenceSetup, inference_memory
from estimator.serving.calibration import Calibration
from estimator.serving.curve import (
    ConcurrencyPoint,
    PrefixCacheEffect,
    SpeculationEffect,
    batch_times,
    concurrency_curve,
    curve_sizes,
    prefix_cache_effect,
    speculation_effect,
)
from estimator.serving.engine_step import engine_step_time, scaled_step
from estimator.serving.load import EnginePreset, LoadPoint, engine_preset
from estimator.serving.steady import (
    MAX_REQUEST_RATE,
    check_finite_run,
    finite_run,
    group_scheduler,
    steady_state,
)
from estimator.serving.steps import serving_layout
from estimator.serving.targets import (
    NEAR_CAPACITY,
    FleetNeed,
    concurrency_within_targets,
    fleet_need,
    fleet_replicas,
    meets_targets,
    rate_within_targets,
)
from estimator.timing.kernels import KernelProfile, kernel_profile
from estimator.timing.measured import serving_profile, step_grid_notes
from estimator.timing.rates import SECONDS_PER_HOUR
from estimator.timing.vendor import serving_notes, serving_scale

__all__ = [
    "DEFAULT_MAX_BATCH",
    "ConcurrencyPoint",
    "FleetNeed",
    "InferenceEstimate",
    "PrefixCacheEffect",
    "SpeculationEffect",
    "concurrency_within_targets",
    "estimate_inference",
    "estimate_load",
    "fleet_need",
    "fleet_replicas",
    "meets_targets",
    "rate_within_targets",
]

DEFAULT_MAX_BATCH = 2048
LOAD_NOTE = (
    "Under load (load.*): a steady-state model of the scheduler of {label} (chunked prefill"
    " within its token budget, its sequence cap and the KV cache's), {lengths}; the percentiles"
    " are approximate (an exponential tail on the prefill queue's wait). Steps are timed as the"
    " engines run them by default, decodes replayed from CUDA graphs: eager launches"
    " (--enforce-eager, --disable-cuda-graph) are not modelled and run slower at small batches."
)
NEAR_CAPACITY_NOTE = (
    "At {share:.0%} of the replica's capacity the latencies under load are approximate to a"
    " factor, not a percentage: near capacity TTFT and TPOT change several-fold with a few"
    " percent of it, and the planner's capacity is itself ~10-30% optimistic on published runs"
    " (validation/report.md: MLPerf server runs, TTFT -72% and TPOT -68% median near their"
    " limits, while their throughput is within 2%). Plan on the rate within the targets"
    " (the serving sweep's request_rate mode) with headroom."
)
THROUGHPUT_AT_LOAD_NOTE = (
    "Throughput and cost are the load model's, at the load the latencies are (under load,"
    " load.*); the concurrency curve (curve) is a simpler cycle at {which} lengths, a batched"
    " prefill of the prompts beside decode steps at the mean context, which reads a different"
    " figure at the same concurrency: it orders batch sizes, the load model answers."
)
LENGTHS_NOTE = (
    "Request lengths: {label}, mean {isl:.1f} prompt and {osl:.1f} output tokens (prompt p50"
    " {p50:.0f}, p90 {p90:.0f}). The load model reads the distribution; a lone request, the"
    " concurrency curve and the memory model take the rounded means ({i} / {o})."
)


@dataclass(frozen=True, slots=True)
class InferenceEstimate:
    """Memory, latency, throughput and cost of one serving plan at its concurrency."""

    memory: InferenceMemory
    concurrency: int
    ttft_s: float
    tpot_s: float
    ttft_breakdown: dict[str, float]
    tpot_breakdown: dict[str, float]
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    input_tokens_per_s: float
    num_gpus: int
    max_concurrency: int
    curve: tuple[ConcurrencyPoint, ...]
    best_concurrency: int | None
    price_usd_per_gpu_hour: float | None
    usd_per_1m_output_tokens: float | None  # all-in: every GPU-second over the output tokens
    usd_per_1m_input_tokens: float | None  # prefill's share of the GPU time over input tokens
    usd_per_1m_output_tokens_decode: float | None = None  # decode's share over output tokens
    usd_per_hour: float | None = None  # the replica's GPUs
    # Under load: the most the replica completes at these lengths, and the all-in cost per
    # token there (the figures above are at the load asked for: a partly idle replica's)
    capacity_output_tokens_per_s: float | None = None
    usd_per_1m_output_tokens_at_capacity: float | None = None
    fleet: FleetNeed | None = None  # with a request rate: the replicas it needs
    load: LoadPoint | None = None  # steady state under load (``estimate_load``)
    speculative: SpeculationEffect | None = None
    prefix_cache: PrefixCacheEffect | None = None
    notes: tuple[str, ...] = field(default=())
    # on a measured run (``serving.calibration``): the scales the load model's steps carry
    calibration: Calibration | None = None
    # prefill's share of the GPU time at the load the throughput is (the cost split's; the
    # token prices' in ``estimator.energy.token_prices``)
    prefill_time_share: float = 0.0

    @property
    def usd_per_1k_output_tokens(self) -> float | None:
        return (
            None if self.usd_per_1m_output_tokens is None else self.usd_per_1m_output_tokens / 1e3
        )

    @property
    def usd_per_1k_input_tokens(self) -> float | None:
        return None if self.usd_per_1m_input_tokens is None else self.usd_per_1m_input_tokens / 1e3


class Cost(NamedTuple):
    """A replica's cost: per hour, and per 1M tokens all-in (every GPU-second over the output
    tokens), by phase (decode's share of the time over output tokens, prefill's over input
    tokens) and all-in at the replica's capacity; None where unpriced or nothing flows."""

    hour: float | None = None
    output: float | None = None
    decode: float | None = None
    input: float | None = None
    at_capacity: float | None = None


def _cost(
    price_usd_per_gpu_hour: float | None,
    gpus: int,
    output_tokens_per_s: float,
    input_tokens_per_s: float,
    prefill_share: float,
    capacity_output_tokens_per_s: float | None,
) -> Cost:
    """The replica's ``Cost`` at its throughput, the GPU time split by ``prefill_share`` (the
    time prefill takes; the rest, idle steps included, is decode's)."""
    if price_usd_per_gpu_hour is None:
        return Cost()
    hour = price_usd_per_gpu_hour * gpus
    per_s = hour / SECONDS_PER_HOUR

    def per_1m(usd_per_s: float, tokens_per_s: float | None) -> float | None:
        return usd_per_s / tokens_per_s * 1e6 if tokens_per_s else None

    return Cost(
        hour=hour,
        output=per_1m(per_s, output_tokens_per_s),
        decode=per_1m(per_s * (1 - prefill_share), output_tokens_per_s),
        input=per_1m(per_s * prefill_share, input_tokens_per_s),
        at_capacity=per_1m(per_s, capacity_output_tokens_per_s),
    )


def _plan_notes(
    model: ModelSpec,
    setup: InferenceSetup,
    memory: InferenceMemory,
    prof: KernelProfile,
    dp: int,
    speculation: SpeculationEffect | None,
    under_load: bool,
) -> list[str]:
    """The plan's notes before any load: the memory model's and the kernel profile's, how the
    throughput is read (without a load, the curve's cycle), what the KV cache holds, what
    speculation, attention data parallel, the MoE router's imbalance and the prefix cache
    change, the model's own, and the length distribution's means."""
    notes = list(memory.notes) + list(prof.notes)
    conc, spec = setup.concurrency, setup.speculative
    which = "fixed" if setup.lengths is None else "the mean"
    if not under_load:
        notes.append(
            f"Throughput is steady-state continuous batching at {which} lengths: a batched"
            f" prefill of the {conc} prompts plus {setup.output_len} decode steps at the mean"
            " context."
        )
    if conc > memory.max_concurrency:
        notes.append(
            f"Concurrency {conc} exceeds what the KV cache holds ({memory.max_concurrency})."
        )
    if spec is not None and speculation is not None:
        notes.append(
            f"Speculative decoding ({spec.method}, {spec.num_tokens} draft tokens, acceptance"
            f" length {spec.acceptance_length:g}): each step verifies {spec.queries} tokens per"
            f" sequence and drafts {spec.num_tokens}; TPOT is the step over the"
            f" {spec.acceptance_length:g} tokens it emits ({speculation.tpot_speedup:.2f}x the"
            " TPOT without speculation at this concurrency). The acceptance length is an input,"
            " measured on your data and sampling settings."
        )
    if dp > 1:
        notes.append(
            f"Attention data parallel ({dp} groups): a step is one group's, its experts routing"
            " every busy group's tokens; the groups are taken alike (a real step ends with the"
            " slowest group's, which the engines' balancing only approaches: not modelled)."
        )
    if setup.moe_imbalance != 1:
        notes.append(
            f"MoE router imbalance {setup.moe_imbalance:g}: the busiest expert-parallel rank's"
            f" routed tokens at {setup.moe_imbalance:g}x the balanced share (its expert GEMMs and"
            " all-to-all), which every step waits for; a drafter's passes are timed balanced."
        )
    if setup.prefix_cache_hit_rate:
        cached = setup.cached_prompt_tokens
        notes.append(
            f"Prefix cache: {cached} of each prompt's {setup.input_len} tokens are read from it"
            f" and {setup.input_len - cached} computed (their attention still reads the cached"
            " keys); the KV cache still counts every request's whole prompt, shared prefix"
            " included (the conservative reading)."
        )
    notes += model.notes
    if setup.lengths is not None:
        d = setup.lengths
        notes.append(
            LENGTHS_NOTE.format(
                label=d.label, isl=d.mean_input, osl=d.mean_output, p50=d.input_quantile(0.5),
                p90=d.input_quantile(0.9), i=setup.input_len, o=setup.output_len,
            )
        )  # fmt: skip
    return notes


class UnderLoad(NamedTuple):
    """The steady state under the load asked for, the fleet a request rate needs (None without
    a rate), and what they say."""

    load: LoadPoint
    fleet: FleetNeed | None
    notes: list[str]


def _under_load(
    load_of: Callable[..., LoadPoint],
    setup: InferenceSetup,
    label: str,
    request_rate: float | None,
    targets: tuple[float | None, float | None],
    rate_headroom: float,
) -> UnderLoad:
    """The steady state at ``setup``'s concurrency or at ``request_rate`` (``load_of``: the
    plan's ``estimate_load`` on its engine) with the share of requests within ``targets``;
    with a rate, the replicas it needs (``fleet_need``: steady states of the open loop, a
    finite run's steady state in its place)."""
    ttft_target_s, tpot_target_s = targets
    load = load_of(
        setup, request_rate=request_rate, ttft_target_s=ttft_target_s, tpot_target_s=tpot_target_s
    )
    lengths = "fixed lengths" if setup.lengths is None else f"{setup.lengths.name} lengths"
    notes = [LOAD_NOTE.format(label=label, lengths=lengths)]
    fleet = None
    if request_rate is not None:
        steady = replace(setup, num_prompts=None)
        fleet = fleet_need(
            lambda rate: load_of(steady, request_rate=rate),
            load, request_rate, ttft_target_s, tpot_target_s, rate_headroom,
        )  # fmt: skip
    return UnderLoad(load, fleet, notes + _fleet_notes(load, fleet, request_rate))


def _fleet_notes(load: LoadPoint, fleet: FleetNeed | None, request_rate: float | None) -> list[str]:
    """What the load says of the fleet: an overloaded replica and the replicas that carry the
    rate, a rate no replica count carries, one that needs several replicas, and a rate near
    the replica's capacity (``NEAR_CAPACITY``), where the latencies are approximate to a
    factor."""
    notes = []
    if load.regime == "overloaded":
        assert fleet is not None  # an overloaded steady state is an open loop's
        notes.append(
            f"Arrivals at {request_rate:g} requests/s exceed what the replica completes"
            f" ({load.capacity_requests_per_s:.3g} requests/s at these lengths): the queue"
            " grows without bound and TTFT has no steady state. "
            + (
                f"{fleet.replicas} replicas carry it ({fleet.basis}); or lower the rate."
                if fleet.replicas
                else f"No replica count carries it: {fleet.basis}."
            )
        )
    elif fleet is not None and fleet.replicas is None:
        notes.append(f"No replica count carries {request_rate:g} requests/s: {fleet.basis}.")
    elif fleet is not None and fleet.replicas is not None and fleet.replicas > 1:
        notes.append(
            f"{request_rate:g} requests/s needs {fleet.replicas} replicas ({fleet.basis});"
            " the figures here are one replica's at the whole rate."
        )
    if load.regime != "overloaded" and request_rate and load.capacity_requests_per_s > 0:
        # open loop only: a closed loop's clients wait for their own requests, and its
        # queue for slots grows with them, not without bound
        share = request_rate / load.capacity_requests_per_s
        if share >= NEAR_CAPACITY:
            notes.append(NEAR_CAPACITY_NOTE.format(share=share))
    return notes


def _best_in_flight(
    load_of: Callable[..., LoadPoint],
    setup: InferenceSetup,
    cap: int,
    targets: tuple[float | None, float | None],
) -> int | None:
    """The best concurrency on the same footing as the latencies answered under load: the most
    requests in flight, up to ``cap``, whose closed-loop steady state on the engine meets the
    targets (``concurrency_within_targets``); None where not even one alone does."""
    steady = replace(setup, num_prompts=None)

    def in_flight(c: int) -> LoadPoint:
        return load_of(replace(steady, concurrency=c))

    return concurrency_within_targets(in_flight, cap, *targets)[0] or None


def _at_load(load: LoadPoint, setup: InferenceSetup) -> tuple[float, float, float, float]:
    """(output tokens/s, input tokens/s, prefill's share of the time, output tokens/s at
    capacity) at the load the latencies are: one load per answer, throughput and cost at it,
    input and capacity at the lengths' means."""
    spread = setup.lengths
    mean_input, mean_output = (
        (setup.input_len, setup.output_len)
        if spread is None
        else (spread.mean_input, spread.mean_output)
    )
    return (
        load.output_tokens_per_s,
        load.requests_per_s * mean_input,
        load.prefill_time_share,
        load.capacity_requests_per_s * mean_output,
    )


def _kernels(
    accelerator: Accelerator, engine: str | EnginePreset | None, kernels: str, under_load: bool
) -> KernelProfile:
    """The kernel curves of a plan: the fitted ones (the default, which the load model's engine
    step reads too), or with ``kernels="measured"`` those fitted on aiconfigurator's measured
    operator tables of the accelerator's system and the engine (``timing.measured``), for a plan
    without load only: the load model keeps the fitted curves, and one answer reads one set."""
    if kernels == "fitted":
        return kernel_profile(accelerator.id)
    if kernels != "measured":
        raise SpecError("kernels", "must be fitted or measured", kernels)
    if under_load:
        raise SpecError(
            "kernels",
            "measured kernels time a plan without load only (no engine, no request rate): the"
            " load model's engine step reads the fitted curves",
            kernels,
        )
    return serving_profile(accelerator.id, _engine_name(engine))


def _engine_name(engine: str | EnginePreset | None) -> str | None:
    """The engine whose measured kernel tables the plan reads (``timing.measured``; none named:
    TensorRT-LLM's)."""
    return engine.name if isinstance(engine, EnginePreset) else engine


def _check_limits(
    max_batch_size: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
    price_usd_per_gpu_hour: float | None,
) -> None:
    """Refuse a batch limit under one, a latency target not above zero and a negative price."""
    if max_batch_size < 1:
        raise SpecError("max_batch_size", "must be >= 1", max_batch_size)
    for name, target in (("ttft_target_s", ttft_target_s), ("tpot_target_s", tpot_target_s)):
        if target is not None and target <= 0:
            raise SpecError(name, "must be > 0", target)
    if price_usd_per_gpu_hour is not None and price_usd_per_gpu_hour < 0:
        raise SpecError("price_usd_per_gpu_hour", "must be >= 0", price_usd_per_gpu_hour)


def estimate_inference(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
    *,
    price_usd_per_gpu_hour: float | None = None,
    max_batch_size: int = DEFAULT_MAX_BATCH,
    ttft_target_s: float | None = None,
    tpot_target_s: float | None = None,
    cluster: Cluster | None = None,
    engine: str | EnginePreset | None = None,
    request_rate: float | None = None,
    rate_headroom: float = 0.0,
    kernels: str = "fitted",
) -> InferenceEstimate:
    """Serving memory, TTFT/TPOT with breakdowns, throughput at ``setup.concurrency`` (``0``
    would be refused by the memory model; use ``max_concurrency`` from the result), the
    throughput-vs-concurrency curve and the best concurrency under the optional targets; with
    an ``engine`` preset (or a ``request_rate``), the steady state under that load as ``load``
    (``estimate_load``), throughput and cost at it; with a ``request_rate``, the replicas that
    rate needs (``fleet_need``), each planned at its rate within the targets over ``1 +
    rate_headroom``."""
    check_support(accelerator, precision, _engine_name(engine))
    memory = inference_memory(model, accelerator, parallel, setup, precision)
    _check_limits(max_batch_size, ttft_target_s, tpot_target_s, price_usd_per_gpu_hour)
    prof = _kernels(accelerator, engine, kernels, engine is not None or request_rate is not None)
    domain = cluster or cluster_of(accelerator)
    p = serving_layout(model, parallel)
    replica = Context(model, accelerator, prof, p, precision, domain)
    conc, spec, targets = setup.concurrency, setup.speculative, (ttft_target_s, tpot_target_s)
    cap = max(min(memory.max_concurrency, max_batch_size), 1)
    points = curve_sizes(cap)
    times = batch_times(replica, setup, sorted({*points, conc}))
    curve, best = concurrency_curve(times, points, memory.max_concurrency, *targets)
    out_tps, pre_s, dec_s = times.throughput(conc)
    in_tps = out_tps * setup.input_len / max(setup.output_len, 1)
    prefill_share = pre_s / (pre_s + dec_s) if pre_s + dec_s else 0.0
    speculation = prefix = None
    if spec is not None and times.step is not None:
        speculation = speculation_effect(spec, times.step, times, memory, conc)
    if setup.prefix_cache_hit_rate:
        prefix = prefix_cache_effect(replica, setup, times)
    under_load = engine is not None or request_rate is not None
    notes = _plan_notes(model, setup, memory, prof, p.dp, speculation, under_load)
    notes += serving_notes(accelerator, under_load)  # the vendor's fitted factor (timing.vendor)
    notes += step_grid_notes(model, prof, p, max(setup.input_len, cap)) if prof.gemm_curves else []
    load = fleet = capacity_tps = None
    best_concurrency = best.concurrency if best else None
    if under_load:
        preset = engine_preset(engine or "vllm")
        load_of = partial(
            estimate_load, model, accelerator, parallel, precision=precision, engine=preset,
            cluster=cluster, memory=memory,
        )  # fmt: skip
        load, fleet, load_notes = _under_load(
            load_of, setup, preset.label, request_rate, targets, rate_headroom
        )
        notes += load_notes
        if ttft_target_s is not None or tpot_target_s is not None:
            best_concurrency = _best_in_flight(load_of, setup, cap, targets)
        out_tps, in_tps, prefill_share, capacity_tps = _at_load(load, setup)
        which = "fixed" if setup.lengths is None else "the mean"
        notes.append(THROUGHPUT_AT_LOAD_NOTE.format(which=which, conc=conc))
    gpus = p.num_gpus
    cost = _cost(price_usd_per_gpu_hour, gpus, out_tps, in_tps, prefill_share, capacity_tps)
    tpot_parts = times.parts(conc)
    return InferenceEstimate(
        memory=memory, concurrency=conc, ttft_s=sum(times.lone.values()),
        tpot_s=sum(tpot_parts.values()), ttft_breakdown=times.lone, tpot_breakdown=tpot_parts,
        output_tokens_per_s=out_tps, output_tokens_per_s_per_gpu=out_tps / gpus,
        input_tokens_per_s=in_tps, num_gpus=gpus, max_concurrency=memory.max_concurrency,
        curve=tuple(curve), best_concurrency=best_concurrency, prefill_time_share=prefill_share,
        price_usd_per_gpu_hour=price_usd_per_gpu_hour, usd_per_1m_output_tokens=cost.output,
        usd_per_1m_input_tokens=cost.input, usd_per_1m_output_tokens_decode=cost.decode,
        usd_per_hour=cost.hour, capacity_output_tokens_per_s=capacity_tps,
        usd_per_1m_output_tokens_at_capacity=cost.at_capacity, fleet=fleet, load=load,
        speculative=speculation, prefix_cache=prefix, notes=tuple(notes),
    )  # fmt: skip


def estimate_load(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
    *,
    engine: str | EnginePreset = "vllm",
    request_rate: float | None = None,
    cluster: Cluster | None = None,
    memory: InferenceMemory | None = None,
    ttft_target_s: float | None = None,
    tpot_target_s: float | None = None,
) -> LoadPoint:
    """TTFT, TPOT and throughput of a replica in steady state under load (``serving.load``):
    ``setup.concurrency`` requests kept in flight (closed loop), or Poisson arrivals at
    ``request_rate`` requests/s (open loop), on ``engine``'s scheduler preset (a name of
    ``ENGINES``, or a preset with a deployment's limits: ``load.engine_preset``). With latency
    targets, the share of requests within both and the goodput (the requests/s that are).
    With ``setup.num_prompts``, a finite run of that many requests (``serving.run``) in place
    of the steady state's latencies and throughput. One attention data-parallel group's
    scheduler is solved on its share of the load (``steady.group_scheduler``) and timed by its
    engine step (``engine_step.engine_step_time``, the other busy groups' tokens routed too)."""
    replica_preset = engine_preset(engine)
    check_support(accelerator, precision, replica_preset.name)
    if request_rate is not None and not 0 < request_rate <= MAX_REQUEST_RATE:
        raise SpecError("request_rate", "must be > 0 and <= 1,000,000 requests/s", request_rate)
    layout = serving_layout(model, parallel)
    if setup.num_prompts is not None:  # a finite run (serving.run): refused before any work
        check_finite_run(request_rate, layout)
    memory = memory or inference_memory(model, accelerator, parallel, setup, precision)
    groups = layout.dp
    preset = replica_preset.per_group(groups)
    busy = float(min(setup.concurrency, groups)) if request_rate is None else float(groups)
    step_s = engine_step_time(
        model, accelerator, parallel, setup, precision, mixed=preset.mixed,
        cluster=cluster or cluster_of(accelerator), busy_groups=busy,
    )  # fmt: skip
    vendor = serving_scale(accelerator)  # the vendor's fitted step factor (timing.vendor)
    k = 1.0 if vendor is None else vendor.scale
    prefill_scale, decode_scale = preset.step_scales  # a deployment's calibration, if any
    step_s = scaled_step(step_s, (k * prefill_scale, k * decode_scale))
    scheduler = group_scheduler(setup, layout, preset, busy, memory, step_s, request_rate)
    steady = steady_state(scheduler, ttft_target_s, tpot_target_s)
    if setup.num_prompts is None:
        return steady
    return finite_run(scheduler, steady, setup.num_prompts, ttft_target_s, tpot_target_s)
