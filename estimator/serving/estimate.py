"""Serving latency, throughput and cost: prefill (TTFT), decode (TPOT) and concurrency.

- Prefill of a prompt is one forward over its tokens: the same per-layer operators as a training
  forward (``timing.py``: TP-sharded GEMMs, causal flash attention, elementwise work, TP
  all-reduces, EP all-to-all), then the output head for the last token of each sequence.
- A decode step for ``B`` sequences reads every weight once (quantized weights read fewer bytes,
  fp8/fp4 GEMMs run at their rates), reads each sequence's KV cache at its context length
  (sliding-window layers at most their window), runs GEMMs with ``M = B`` rows, two TP all-reduces
  per layer, and for MoE layers only the experts the batch's tokens select: ``E (1 - (1 - k/E)^B)``
  of them in expectation, as one fused kernel per linear (the engines' fused MoE GEMMs: one
  launch, not one per expert).
- With ``pp`` stages the engine keeps ``pp`` micro-batches of ``B / pp`` sequences in flight:
  a token's latency is ``pp`` stage steps, throughput ``B`` tokens per such latency.
- Steady state at concurrency ``C`` (continuous batching, fixed lengths): each sequence costs its
  share of a batched prefill of ``C`` prompts plus ``output_len`` decode steps at the mean context
  ``input_len + output_len / 2``; output tokens/s = ``C * output_len / (prefill(C) + output_len *
  TPOT(C))``. Concurrency is bounded by the KV cache (``inference_memory``) and by the engine's
  batch limit (``max_batch_size``, TensorRT-LLM's default 2048).
- Cost per token splits the GPU-hours between prefill (input tokens) and decode (output tokens)
  by their share of the time.
- Speculative decoding (``setup.speculative``): a decode step becomes a verification of ``k + 1``
  tokens per sequence plus the drafter's passes (``serving.speculative``), and TPOT is that step
  over the acceptance length; TTFT adds the drafter's pass over the prompt.
- A prefix-cache hit rate (``setup.prefix_cache_hit_rate``): prefill computes only the uncached
  prompt tokens (``serving.steps.prefill_kinds``), in the lone request and under load.

The per-layer step costs are in ``serving.steps``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from estimator.errors import SpecError
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import StageShape, distinct_stages
from estimator.memory.inference import InferenceMemory, InferenceSetup, inference_memory
from estimator.serving.engine_step import engine_step_time, workload_of
from estimator.serving.load import (
    BUDGET_BOUND_UTILIZATION,
    EnginePreset,
    LoadPoint,
    Regime,
    budget_cap,
    decode_steps,
    engine_preset,
    exceed_probability,
    md1_wait,
    prefill_wait,
    residual_step,
    steady_state_steps,
    sum_quantiles,
)
from estimator.serving.run import simulate_run
from estimator.serving.speculative import (
    Replica,
    SpeculativeStep,
    draft_prefill,
    speculative_step,
)
from estimator.serving.steps import (
    PARTS,
    decode_kinds,
    head_time,
    per_size,
    pipeline,
    prefill_kinds,
    serving_layout,
    stage_times,
    through_stages,
)
from estimator.spec.accelerator import Accelerator
from estimator.spec.cluster import Cluster, cluster_of
from estimator.spec.model import ModelSpec
from estimator.spec.precision import DTYPES, Precision
from estimator.spec.speculative import Speculative
from estimator.timing.kernels import collective_time, kernel_profile
from estimator.timing.rates import SECONDS_PER_HOUR
from estimator.xp import Num

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
# Poisson arrivals this close to the replica's capacity are ill-conditioned: TTFT and TPOT move
# several-fold with a few percent of capacity (docs/validation.md: the MLPerf server runs).
NEAR_CAPACITY = 0.85
MAX_REQUEST_RATE = 1e6  # requests/s a steady state is asked at, at most
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
class ConcurrencyPoint:
    concurrency: int
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    fits: bool


@dataclass(frozen=True, slots=True)
class SpeculationEffect:
    """What speculative decoding does to the plan at its concurrency: the step's verification
    and drafting seconds, the tokens it emits per sequence, TPOT against the same replica
    decoding one token a step, and the drafter's memory."""

    method: str
    num_speculative_tokens: int
    acceptance_length: float
    draft_model: str | None
    verify_s_per_step: float
    draft_s_per_step: float
    step_s: float
    tpot_without_s: float
    tpot_speedup: float
    draft_weights_bytes: float
    draft_kv_cache_bytes_per_sequence: float


@dataclass(frozen=True, slots=True)
class PrefixCacheEffect:
    """What the prefix cache does to a prompt: the tokens read from it and computed, and a lone
    request's TTFT against the same prompt computed whole."""

    hit_rate: float
    cached_tokens: int
    computed_tokens: int
    ttft_without_s: float
    ttft_speedup: float


@dataclass(frozen=True, slots=True)
class FleetNeed:
    """The replicas a request rate needs: each planned at ``planned_rate_per_replica``, its
    highest rate within the latency targets (``within_targets``; without targets,
    ``NEAR_CAPACITY`` of its capacity, where the latencies are still well conditioned) over
    ``1 + headroom``; ``rate_per_replica`` None where one replica meets the targets at the
    whole rate with the headroom (not searched further)."""

    request_rate: float
    replicas: int | None  # None: no replica count meets the targets (not even one at no load)
    headroom: float
    within_targets: bool
    rate_per_replica: float | None
    basis: str

    @property
    def planned_rate_per_replica(self) -> float | None:
        if not self.rate_per_replica:
            return None
        return self.rate_per_replica / (1 + self.headroom)


def fleet_need(
    at: Callable[[float], LoadPoint],
    load: LoadPoint,
    request_rate: float,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
    headroom: float,
) -> FleetNeed:
    """The ``FleetNeed`` of ``request_rate`` on the replica whose steady state at a rate is
    ``at(rate)`` (``load``: at the whole rate). With targets, one replica where it meets them
    at the rate times ``1 + headroom`` (one more steady state), else the rate within them
    (``rate_within_targets``, ten); without, ``NEAR_CAPACITY`` of the capacity."""
    if headroom < 0:
        raise SpecError("rate_headroom", "must be >= 0", headroom)
    targets = ttft_target_s is not None or tpot_target_s is not None
    kept = f"{headroom:.0%} headroom"
    if not targets:
        per = NEAR_CAPACITY * load.capacity_requests_per_s
        basis = f"each at {NEAR_CAPACITY:.0%} of its capacity, no latency targets given; {kept}"
        return FleetNeed(
            request_rate, fleet_replicas(request_rate, per, headroom), headroom, False, per, basis
        )
    padded = request_rate * (1 + headroom)
    basis = f"within the TTFT p99/TPOT targets, {kept}"
    if padded <= MAX_REQUEST_RATE and meets_targets(at(padded), ttft_target_s, tpot_target_s):
        return FleetNeed(request_rate, 1, headroom, True, None, basis)
    per = rate_within_targets(at, ttft_target_s, tpot_target_s)
    if per <= 0:
        basis = "no load meets the TTFT p99/TPOT targets on one replica of this layout"
        return FleetNeed(request_rate, None, headroom, True, 0.0, basis)
    return FleetNeed(
        request_rate, fleet_replicas(request_rate, per, headroom), headroom, True, per, basis
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


def _prefill_stages(
    r: Replica,
    setup: InferenceSetup,
    batch: Num,
    stages: tuple[StageShape, ...],
    cached: int,
) -> list[dict[str, Num]]:
    """Each distinct stage prefilling ``batch`` prompts (over the attention data-parallel
    groups: the busiest group's share, its experts serving all of them), ``cached`` tokens of
    each from the prefix cache; with speculation (one stage) the drafter's pass over them
    too."""
    prompt = setup.input_len
    own, routed = _group_batch(r.p, batch, prompt - cached)
    kinds = prefill_kinds(
        *r.args, prompt, own, r.domain, cached, setup.moe_imbalance, expert_tokens=routed
    )
    out = stage_times(kinds, stages, head_time(*r.args, own))
    spec = setup.speculative
    if spec is not None:
        drafted = draft_prefill(r, spec, prompt, own, cached, kinds)
        out = [{k: v + drafted[k] for k, v in out[0].items()}]
    return out


def _group_batch(p: Parallelism, batch: Num, tokens: Num) -> tuple[Num, Num | None]:
    """(the busiest attention data-parallel group's sequences, the tokens the experts route:
    ``tokens`` per sequence of all of them) of ``batch`` sequences spread over ``p.dp`` groups;
    ``(batch, None)`` without attention data parallel."""
    if p.dp == 1:
        return batch, None
    return np.ceil(np.asarray(batch, dtype=float) / p.dp), batch * tokens


def _lone(
    r: Replica, prefill: list[dict[str, Num]], stages: tuple[StageShape, ...], tokens: int
) -> dict[str, float]:
    """A lone prompt's TTFT by part (the first entry of ``prefill``'s batch sizes): it crosses
    every stage in turn and is handed from stage to stage, ``tokens`` computed tokens at each
    hop; pipeline parallelism adds hops to it, it divides nothing."""
    through = through_stages(prefill, stages)
    lone = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in through.items()}
    p = r.p
    if p.pp > 1:
        hop_bytes = tokens * r.model.hidden_size * DTYPES[r.precision.activations].bytes
        size, stride = group_shapes(p)["pp"]
        hop = collective_time(r.acc, r.prof, "send_recv", hop_bytes, size, stride, r.domain)
        lone["comm"] = lone["comm"] + (p.pp - 1) * float(hop)
    return lone


def _speculation_effect(
    spec: Speculative,
    step: SpeculativeStep,
    plain: dict[str, Num],
    memory: InferenceMemory,
    i: int,
    n: int,
) -> SpeculationEffect:
    """The speculative step at batch-size entry ``i`` of ``n``, against ``plain`` decoding."""

    def total(parts: dict[str, Num]) -> float:
        return float(sum(per_size(parts, n)[k][i] for k in PARTS))

    verify, draft, without = total(step.verify), total(step.draft), total(plain)
    tpot = (verify + draft) / spec.acceptance_length
    return SpeculationEffect(
        method=spec.method,
        num_speculative_tokens=spec.num_tokens,
        acceptance_length=spec.acceptance_length,
        draft_model=None if spec.draft is None else spec.draft.id,
        verify_s_per_step=verify,
        draft_s_per_step=draft,
        step_s=verify + draft,
        tpot_without_s=without,
        tpot_speedup=without / tpot if tpot else 0.0,
        draft_weights_bytes=memory.draft_weights_bytes,
        draft_kv_cache_bytes_per_sequence=memory.draft_kv_cache_bytes_per_sequence,
    )


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
) -> InferenceEstimate:
    """Serving memory, TTFT/TPOT with breakdowns, throughput at ``setup.concurrency`` (``0``
    would be refused by the memory model; use ``max_concurrency`` from the result), the
    throughput-vs-concurrency curve and the best concurrency under the optional targets; with
    an ``engine`` preset (or a ``request_rate``), the steady state under that load as ``load``
    (``estimate_load``), throughput and cost at it; with a ``request_rate``, the replicas that
    rate needs (``fleet_need``), each planned at its rate within the targets over ``1 +
    rate_headroom``."""
    memory = inference_memory(model, accelerator, parallel, setup, precision)
    if max_batch_size < 1:
        raise SpecError("max_batch_size", "must be >= 1", max_batch_size)
    for name, target in (("ttft_target_s", ttft_target_s), ("tpot_target_s", tpot_target_s)):
        if target is not None and target <= 0:
            raise SpecError(name, "must be > 0", target)
    prof = kernel_profile(accelerator.id)
    domain = cluster or cluster_of(accelerator)
    p = serving_layout(model, parallel)
    pp = p.pp
    context = setup.input_len + setup.output_len / 2  # the mean over a sequence's decode
    conc = setup.concurrency
    spec = setup.speculative
    cached = setup.cached_prompt_tokens

    # The concurrency curve: 1, 2, 4 ... up to what the KV cache and the engine's batch limit
    # allow. Every batch size the estimate needs (the curve's, the requested concurrency's) is
    # evaluated at once: the stage formulas take an array of batch sizes.
    cap = max(min(memory.max_concurrency, max_batch_size), 1)
    points = [1]
    while points[-1] < cap:
        points.append(min(points[-1] * 2, cap))
    sizes = sorted({*points, conc})
    at = {b: i for i, b in enumerate(sizes)}
    batch = np.array(sizes, dtype=np.int64)
    # Stages alike take the same time: each distinct one is timed once (a 126-stage
    # Llama-3.1-405B has three), from one layer of each kind timed once.
    stages = distinct_stages(model, pp, p.stage_layers)
    args = (model, accelerator, prof, p, precision)
    replica = Replica(*args, domain)
    prefill_stages = _prefill_stages(replica, setup, batch, stages, cached)
    prefill = per_size(pipeline(prefill_stages, 1), len(sizes))
    # A lone prompt (the TTFT at light load): batch size 1, the first entry.
    lone = _lone(replica, prefill_stages, stages, setup.input_len - cached)
    per_mb, routed = _group_batch(p, np.maximum(batch / pp, 1.0), 1)
    plain_kinds = decode_kinds(
        *args, per_mb, context, domain, expert_load=setup.moe_imbalance, expert_batch=routed
    )
    plain = pipeline(stage_times(plain_kinds, stages, head_time(*args, per_mb)), pp)
    step = None
    if spec is None:
        decode = per_size(plain, len(sizes))
    else:  # per token: the step over the tokens it emits
        step = speculative_step(replica, spec, per_mb, context, plain_kinds)
        decode = per_size(step.per_token(spec), len(sizes))
    prefill_s: list[float] = sum(prefill.values()).tolist()  # per batch size, Python floats
    lone_s = sum(lone.values())
    decode_s: list[float] = sum(decode.values()).tolist()

    def parts(times: dict[str, Any], b: int) -> dict[str, float]:
        i = at[b]
        return {k: float(v[i]) for k, v in times.items()}

    def throughput(b: int) -> tuple[float, float, float]:
        """(output tokens/s, prefill seconds, decode seconds) per steady-state cycle."""
        pre = prefill_s[at[b]] * pp  # prompts of the batch, all stages in turn
        dec = setup.output_len * decode_s[at[b]]
        cycle = pre + dec
        return b * setup.output_len / cycle if cycle else 0.0, pre, dec

    curve = [
        ConcurrencyPoint(
            concurrency=c,
            ttft_s=lone_s + decode_s[at[c]],
            tpot_s=decode_s[at[c]],
            output_tokens_per_s=throughput(c)[0],
            fits=c <= memory.max_concurrency,
        )
        for c in points
    ]
    best = None
    for point in curve:
        ok = point.fits
        ok = ok and (ttft_target_s is None or point.ttft_s <= ttft_target_s)
        ok = ok and (tpot_target_s is None or point.tpot_s <= tpot_target_s)
        if ok and (best is None or point.output_tokens_per_s > best.output_tokens_per_s):
            best = point

    ttft_parts = lone
    tpot_parts = parts(decode, conc)
    out_tps, pre_s, dec_s = throughput(conc)
    in_tps = out_tps * setup.input_len / max(setup.output_len, 1)
    prefill_share = pre_s / (pre_s + dec_s) if pre_s + dec_s else 0.0
    gpus = p.num_gpus
    if price_usd_per_gpu_hour is not None and price_usd_per_gpu_hour < 0:
        raise SpecError("price_usd_per_gpu_hour", "must be >= 0", price_usd_per_gpu_hour)
    notes = list(memory.notes) + list(prof.notes)
    which = "fixed" if setup.lengths is None else "the mean"
    if engine is None and request_rate is None:
        notes.append(
            f"Throughput is steady-state continuous batching at {which} lengths: a batched"
            f" prefill of the {conc} prompts plus {setup.output_len} decode steps at the mean"
            " context."
        )
    if conc > memory.max_concurrency:
        notes.append(
            f"Concurrency {conc} exceeds what the KV cache holds ({memory.max_concurrency})."
        )
    speculation = prefix = None
    if spec is not None and step is not None:
        speculation = _speculation_effect(spec, step, plain, memory, at[conc], len(sizes))
        notes.append(
            f"Speculative decoding ({spec.method}, {spec.num_tokens} draft tokens, acceptance"
            f" length {spec.acceptance_length:g}): each step verifies {spec.queries} tokens per"
            f" sequence and drafts {spec.num_tokens}; TPOT is the step over the"
            f" {spec.acceptance_length:g} tokens it emits ({speculation.tpot_speedup:.2f}x the"
            " TPOT without speculation at this concurrency). The acceptance length is an input,"
            " measured on your data and sampling settings."
        )
    if p.dp > 1:
        notes.append(
            f"Attention data parallel ({p.dp} groups): a step is one group's, its experts routing"
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
        whole = _prefill_stages(replica, setup, 1, stages, 0)
        without = sum(_lone(replica, whole, stages, setup.input_len).values())
        prefix = PrefixCacheEffect(
            hit_rate=setup.prefix_cache_hit_rate,
            cached_tokens=cached,
            computed_tokens=setup.input_len - cached,
            ttft_without_s=without,
            ttft_speedup=without / lone_s if lone_s else 0.0,
        )
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
    load = fleet = None
    best_concurrency = best.concurrency if best else None
    if engine is not None or request_rate is not None:
        preset = engine_preset(engine or "vllm")
        load = estimate_load(
            model, accelerator, parallel, setup, precision, engine=preset,
            request_rate=request_rate, cluster=cluster, memory=memory,
            ttft_target_s=ttft_target_s, tpot_target_s=tpot_target_s,
        )  # fmt: skip
        lengths = "fixed lengths" if setup.lengths is None else f"{setup.lengths.name} lengths"
        notes.append(LOAD_NOTE.format(label=preset.label, lengths=lengths))
        if request_rate is not None:
            fleet = fleet_need(
                lambda rate: estimate_load(
                    model, accelerator, parallel, replace(setup, num_prompts=None), precision,
                    engine=preset, request_rate=rate, cluster=cluster, memory=memory,
                ),
                load, request_rate, ttft_target_s, tpot_target_s, rate_headroom,
            )  # fmt: skip
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
        if ttft_target_s is not None or tpot_target_s is not None:
            # the best concurrency on the same footing as the latencies answered: the most
            # requests in flight whose steady state on this engine meets the targets
            steady = replace(setup, num_prompts=None)

            def in_flight(c: int) -> LoadPoint:
                return estimate_load(
                    model, accelerator, parallel, replace(steady, concurrency=c), precision,
                    engine=preset, cluster=cluster, memory=memory,
                )  # fmt: skip

            best_concurrency = (
                concurrency_within_targets(in_flight, cap, ttft_target_s, tpot_target_s)[0] or None
            )
    capacity_tps = None
    if load is not None:  # one load per answer: throughput and cost at the load the latencies are
        spread = setup.lengths
        mean_input, mean_output = (
            (setup.input_len, setup.output_len)
            if spread is None
            else (spread.mean_input, spread.mean_output)
        )
        out_tps = load.output_tokens_per_s
        in_tps = load.requests_per_s * mean_input
        prefill_share = load.prefill_time_share
        capacity_tps = load.capacity_requests_per_s * mean_output
        notes.append(THROUGHPUT_AT_LOAD_NOTE.format(which=which, conc=conc))
    cost = _cost(price_usd_per_gpu_hour, gpus, out_tps, in_tps, prefill_share, capacity_tps)
    return InferenceEstimate(
        memory=memory,
        concurrency=conc,
        ttft_s=sum(ttft_parts.values()),
        tpot_s=sum(tpot_parts.values()),
        ttft_breakdown=ttft_parts,
        tpot_breakdown=tpot_parts,
        output_tokens_per_s=out_tps,
        output_tokens_per_s_per_gpu=out_tps / gpus,
        input_tokens_per_s=in_tps,
        num_gpus=gpus,
        max_concurrency=memory.max_concurrency,
        curve=tuple(curve),
        best_concurrency=best_concurrency,
        price_usd_per_gpu_hour=price_usd_per_gpu_hour,
        usd_per_1m_output_tokens=cost.output,
        usd_per_1m_input_tokens=cost.input,
        usd_per_1m_output_tokens_decode=cost.decode,
        usd_per_hour=cost.hour,
        capacity_output_tokens_per_s=capacity_tps,
        usd_per_1m_output_tokens_at_capacity=cost.at_capacity,
        fleet=fleet,
        load=load,
        speculative=speculation,
        prefix_cache=prefix,
        notes=tuple(notes),
    )


TTFT_QUANTILES = (0.5, 0.9, 0.99)


def _within_targets(
    services: np.ndarray,
    wait_s: float,
    rho: float,
    queue_s: float,
    tpot_s: float,
    targets: tuple[float | None, float | None],
    overloaded: bool,
) -> float:
    """The share of requests whose TTFT (the queue for a slot, the request's own prefill, one
    of the equally likely ``services``, and the prefill queue's wait) and TPOT (every request's
    the replica's step) are within ``targets``; none when overloaded and a TTFT target is set."""
    ttft_target, tpot_target = targets
    within = 1.0
    if ttft_target is not None:
        over = exceed_probability(services, wait_s, rho, ttft_target - queue_s)
        within = 0.0 if overloaded else 1.0 - float(over)
    if tpot_target is not None and tpot_s > tpot_target:
        within = 0.0
    return within


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
    targets, the share of requests within both and the goodput (the requests/s that are)."""
    replica_preset = engine_preset(engine)
    if request_rate is not None and not 0 < request_rate <= MAX_REQUEST_RATE:
        raise SpecError("request_rate", "must be > 0 and <= 1,000,000 requests/s", request_rate)
    layout = serving_layout(model, parallel)
    if setup.num_prompts is not None:  # a finite run (serving.run): refused before any work
        if request_rate is not None:
            raise SpecError(
                "num_prompts", "a finite run is simulated in a closed loop (concurrency)", None
            )
        if layout.pp > 1:
            raise SpecError("num_prompts", "a finite run is simulated for pp = 1 only", layout.pp)
        if layout.dp > 1:
            raise SpecError(
                "num_prompts",
                "a finite run is simulated without attention data parallel (dp = 1)",
                layout.dp,
            )
    memory = memory or inference_memory(model, accelerator, parallel, setup, precision)
    # Attention data parallel: the load model runs one group's scheduler on its share of the
    # load (the closed loop's clients or the arrivals spread evenly); the replica's rates are
    # the busy groups' together.
    groups = layout.dp
    preset = replica_preset.per_group(groups)
    busy = float(min(setup.concurrency, groups)) if request_rate is None else float(groups)
    concurrency = max(setup.concurrency / groups, 1.0)
    rate = None if request_rate is None else request_rate / groups
    domain = cluster or cluster_of(accelerator)
    spec = setup.speculative
    accepted = 1.0 if spec is None else spec.acceptance_length  # tokens a step emits each
    q = setup.queries  # tokens a step runs per decoding sequence
    flow = (accepted, q)
    w = workload_of(setup)
    new, osl = w.mean_new, w.mean_output  # the means drive the flow balance
    dec = decode_steps(osl, accepted)  # steps a request decodes
    step_s = engine_step_time(
        model, accelerator, parallel, setup, precision, mixed=preset.mixed, cluster=domain,
        busy_groups=busy,
    )  # fmt: skip

    # an on-demand cache holds a sequence's live context on average (its mean while decoding)
    live = min(w.context / max(setup.input_len + setup.output_len, 1), 1.0)
    kv_slots = preset.kv_slots(memory, layout.tp * groups, live_share=live) // groups
    slots = preset.slots(kv_slots)
    budget = preset.token_budget
    if slots < 1:
        field_name = "concurrency" if request_rate is None else "request_rate"
        value = setup.concurrency if request_rate is None else request_rate
        raise SpecError(
            field_name,
            f"no request fits: the KV cache left beside the weights holds no sequence of"
            f" {setup.input_len} + {setup.output_len} tokens on this layout (more GPUs a"
            " replica, a lower precision or shorter requests)",
            value,
        )
    top = min(budget_cap(new, osl, budget, *flow), float(slots))
    top_tau = float(step_s(top, top * new / dec))
    capacity = top / (dec * top_tau)
    if rate is None:
        counts = steady_state_steps(
            isl=new, osl=osl, engine=preset, kv_slots=kv_slots, concurrency=concurrency,
            acceptance_length=accepted, queries=q, input_scv=w.input_scv,
        )  # fmt: skip
        overloaded = False
    else:  # open loop: decoding level where arrivals equal completions, D = rate dec tau(D)
        overloaded = rate >= capacity
        # D - rate dec tau(D) rises with D: its root from one array evaluation on a grid (the
        # step time is smooth in D), then refined by fixed-point steps from the bracket
        grid = top * np.linspace(0.0, 1.0, 65)[1:]
        gap = grid - rate * dec * step_s(grid, grid * new / dec)
        k = int(np.searchsorted(gap, 0.0))
        d = float(grid[min(k, len(grid) - 1)]) if k < len(grid) else top
        for _ in range(8):
            nxt = min(rate * dec * float(step_s(d, d * new / dec)), top)
            if abs(nxt - d) <= 1e-6 * max(d, 1.0):
                d = nxt
                break
            d = nxt
        s, rho, wait = prefill_wait(d, new, osl, budget, *flow, w.input_scv)
        counts = {
            "running": d + d * (s + wait) / dec if not overloaded else float(slots),
            "decoding": d,
            "queued": 0.0,
            "prompt_tokens": d * new / dec,
            "service_steps": s,
            "wait_steps": wait if not overloaded else math.inf,
            "rho": min(rho, 1.0),
            "budget_bound": float(d >= top * (1 - 1e-6)),
        }
    d = counts["decoding"]
    running = counts["running"]
    others = counts["prompt_tokens"] * max(running - 1, 0) / max(running, 1)
    # A request's own prefill: its prompt's service steps, each carrying a chunk of it; over the
    # distribution's bins (the mean TTFT) and at its TTFT quantiles' prompt lengths. With
    # pipeline parallelism a chunk rides in one micro-batch through every stage (an engine
    # schedules a request in one batch in flight at a time): its latency is a step whose
    # micro-batches each hold a whole chunk, pp stage times of it, not the step that spreads
    # the chunks' tokens over the pp micro-batches (the throughput's cycle).
    free = budget - q * d
    own = np.array(w.own_new + tuple(w.quantile_new(x) for x in TTFT_QUANTILES))
    pp = layout.pp
    chunk = pp * min(w.prompt_new, free)  # a step carrying one prompt's chunk
    chunks = np.concatenate(
        ([counts["prompt_tokens"], others, 0.0, chunk], pp * np.minimum(own, free))
    )
    times = step_s(np.full(len(chunks), d), chunks)
    tau, tau_decode = float(times[0]), float(times[1])
    services = np.maximum(1.0, own / free) * times[4:]
    # A request arrives while a step of the others runs and waits for its end. The steps carry
    # another request's prompt chunk (a fraction pi of them: the others' prompt tokens a step
    # carries on average, over a chunk) or only decodes. A Poisson arrival lands at a random
    # instant: the step's residual life, E[tau^2] / (2 E[tau]) (long prompt steps the likelier
    # hit). A closed loop's client sends its next request as its last one ends, at a step's
    # end: it waits for the whole step just launched (none when no other request runs).
    pi = min(others / (chunk / pp), 1.0) if chunk else 0.0
    bare, loaded = float(times[2]), float(times[3])
    if rate is not None:
        services = services + residual_step(bare, loaded, pi)
    else:
        busy_others = min(max(running - 1, 0.0), 1.0)
        services = services + busy_others * (pi * loaded + (1 - pi) * bare)
    per_step = d / dec  # requests finishing a step
    req_per_s = per_step / tau  # one group's
    wait_s = counts["wait_steps"] * tau
    rho = counts["rho"]
    # In time: each prompt adds its tokens' work to the steps it rides (a step's time with a
    # chunk over one without, per token: (tau(D, chunk) - tau(D, 0)) / chunk, times its mean
    # computed tokens), and prompts arriving at req_per_s queue behind each other's work
    # (M/G/1: the prompt length's spread in scv); the step count above sees only the token
    # budget's queue.
    work = max(loaded - bare, 0.0) / chunk * new if chunk else 0.0
    others_share = 1.0 if rate is not None else max(running - 1, 0.0) / max(running, 1.0)
    rho_time = req_per_s * work * others_share  # a closed loop's request never waits for itself
    if rho_time >= 1 and not overloaded:
        rho_time = BUDGET_BOUND_UTILIZATION
    time_wait = float(md1_wait(work, rho_time, w.input_scv))
    if time_wait > wait_s:
        wait_s, rho = time_wait, rho_time
    queue_s = counts["queued"] / req_per_s if counts["queued"] else 0.0
    bins = len(w.own_new)
    service_s = float(np.mean(services[:bins]))
    at_quantile = dict(zip(TTFT_QUANTILES, services[bins:].tolist(), strict=True))
    ttft = queue_s + wait_s + service_s
    if overloaded:
        regime: Regime = "overloaded"
    elif counts["queued"] > 0:
        regime = "slot-limited"
    elif counts["budget_bound"]:
        regime = "budget-limited"
    elif d <= 1.5:
        regime = "light"
    else:
        regime = "shared"

    # a request's own prefill and its wait are independent: the quantiles of their sum, never
    # below the prefill's own quantile (the bins resolve the tail coarsely)
    summed = sum_quantiles(services[:bins], wait_s, rho, TTFT_QUANTILES)
    both = dict(zip(TTFT_QUANTILES, summed, strict=True))

    def ttft_at(quantile: float) -> float:
        if overloaded:
            return math.inf
        return float(queue_s + max(at_quantile[quantile], both[quantile]))

    # End to end: the TTFT plus the request's own decode steps, its output length independent of
    # its prompt's and of its wait (every pair of the two distributions' bins, equally likely)
    outputs = (osl,) if w.lengths is None else w.lengths.output_lens
    decoding = np.array([decode_steps(o, accepted) for o in outputs]) * tau_decode
    e2e_bins = (services[:bins, None] + decoding[None, :]).ravel()
    e2e_q: tuple[float, ...] = (math.inf,) * 3
    if not overloaded:
        e2e_q = tuple(queue_s + x for x in sum_quantiles(e2e_bins, wait_s, rho, TTFT_QUANTILES))
    attainment = None
    if ttft_target_s is not None or tpot_target_s is not None:
        attainment = _within_targets(
            services[:bins], wait_s, rho, queue_s, tau_decode / accepted,
            (ttft_target_s, tpot_target_s), overloaded,
        )  # fmt: skip

    # an open loop below capacity completes what arrives: its rate exactly (the level the
    # latencies are read at balances it to the fixed point's tolerance)
    completed = busy * req_per_s if rate is None or overloaded else busy * rate
    steady = LoadPoint(  # the replica's: the busy groups' counts and rates together
        engine=preset.name,
        concurrency=None if request_rate is not None else float(setup.concurrency),
        request_rate=request_rate,
        regime=regime,
        running=busy * running,
        decoding=busy * d,
        queued=busy * counts["queued"],
        ttft_s=ttft,
        tpot_s=tau_decode / accepted,  # a step emits ``accepted`` tokens per sequence
        e2e_s=ttft + dec * tau_decode,
        ttft_p50_s=ttft_at(0.5),
        ttft_p90_s=ttft_at(0.9),
        ttft_p99_s=ttft_at(0.99),
        step_s=tau,
        prefill_steps=counts["service_steps"],
        requests_per_s=completed,
        output_tokens_per_s=completed * osl,
        capacity_requests_per_s=groups * capacity,
        lengths=w.name,
        tpot_p50_s=tau_decode / accepted,
        tpot_p99_s=tau_decode / accepted,
        e2e_p50_s=e2e_q[0],
        e2e_p90_s=e2e_q[1],
        e2e_p99_s=e2e_q[2],
        slo_attainment=attainment,
        goodput_requests_per_s=None if attainment is None else attainment * completed,
        prefill_time_share=max(tau - bare, 0.0) / tau if tau > 0 else 0.0,
    )
    if setup.num_prompts is None:
        return steady
    run = simulate_run(
        step_s,
        prompts=w.own_new,
        outputs=(osl,) if w.lengths is None else w.lengths.output_lens,
        concurrency=setup.concurrency,
        num_prompts=setup.num_prompts,
        budget=budget,
        slots=slots,
        acceptance_length=accepted,
        queries=q,
    )
    ttft_q = np.quantile(run.ttft_s, TTFT_QUANTILES)
    e2e_run = np.quantile(run.e2e_s, TTFT_QUANTILES)
    tpot_q = np.quantile(run.tpot_s, (0.5, 0.99)) if run.tpot_s.size else (steady.tpot_s,) * 2
    attained = None
    if attainment is not None:
        attained = run.slo_attainment(ttft_target_s, tpot_target_s)
    return replace(  # the run's own latencies and throughput; regime and capacity the steady's
        steady,
        running=run.mean_running,
        decoding=run.mean_decoding,
        queued=run.mean_queued,
        ttft_s=float(run.ttft_s.mean()),
        tpot_s=float(run.tpot_s.mean()) if run.tpot_s.size else steady.tpot_s,
        e2e_s=float(run.e2e_s.mean()),
        ttft_p50_s=float(ttft_q[0]),
        ttft_p90_s=float(ttft_q[1]),
        ttft_p99_s=float(ttft_q[2]),
        step_s=run.mean_step_s,
        requests_per_s=run.requests_per_s,
        output_tokens_per_s=run.output_tokens_per_s,
        tpot_p50_s=float(tpot_q[0]),
        tpot_p99_s=float(tpot_q[1]),
        num_prompts=run.num_prompts,
        duration_s=run.duration_s,
        e2e_p50_s=float(e2e_run[0]),
        e2e_p90_s=float(e2e_run[1]),
        e2e_p99_s=float(e2e_run[2]),
        slo_attainment=attained,
        goodput_requests_per_s=None if attained is None else attained * run.requests_per_s,
    )


def meets_targets(
    point: LoadPoint, ttft_target_s: float | None, tpot_target_s: float | None
) -> bool:
    """Whether a steady state meets the latency targets as a serving SLO reads them: TTFT at its
    99th percentile, TPOT (the same for every request in a steady state); an overloaded replica,
    whose queue grows without end, meets none."""
    if point.regime == "overloaded":
        return False
    return (ttft_target_s is None or point.ttft_p99_s <= ttft_target_s) and (
        tpot_target_s is None or point.tpot_s <= tpot_target_s
    )


def _slack(point: LoadPoint, ttft_target_s: float | None, tpot_target_s: float | None) -> float:
    """How far a steady state is inside its targets: 1 less the larger of its latencies over
    their targets (negative beyond them); -inf for an overloaded replica."""
    if point.regime == "overloaded":
        return -math.inf
    ratios = [
        value / target
        for value, target in ((point.ttft_p99_s, ttft_target_s), (point.tpot_s, tpot_target_s))
        if target is not None
    ]
    return 1.0 - max(ratios, default=0.0)


def concurrency_within_targets(
    at: Callable[[int], LoadPoint],
    cap: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
) -> tuple[int, LoadPoint | None]:
    """The most requests kept in flight, 1 to ``cap``, whose closed-loop steady state
    (``at(concurrency)``) meets the targets (``meets_targets``), with that steady state; (0,
    None) where not even one request alone does. The steady state's latencies grow with the
    requests in flight, so the answer is the edge of a bracket (``lo`` meets them, ``hi`` does
    not) narrowed until ``hi = lo + 1``: each probe at the concurrency where the latencies'
    slack (``_slack``), interpolated linearly between the bracket's ends, reaches zero, or at
    the bracket's middle where the last interpolation did not halve it (the safeguard that
    keeps bisection's worst case); a few steady states per layout instead of bisection's ~10."""
    point = at(1)
    if not meets_targets(point, ttft_target_s, tpot_target_s):
        return 0, None
    lo, hi = 1, max(cap, 1)
    top = at(hi)
    if meets_targets(top, ttft_target_s, tpot_target_s):
        return hi, top
    slack_lo = _slack(point, ttft_target_s, tpot_target_s)
    slack_hi = _slack(top, ttft_target_s, tpot_target_s)
    interpolate = True
    while hi - lo > 1:  # at(lo) meets them (``point``), at(hi) does not
        width = hi - lo
        if interpolate and math.isfinite(slack_hi) and slack_lo > slack_hi:
            guess = lo + width * slack_lo / (slack_lo - slack_hi)
            mid = min(max(round(guess), lo + 1), hi - 1)
        else:
            mid = (lo + hi) // 2
        probe = at(mid)
        if meets_targets(probe, ttft_target_s, tpot_target_s):
            lo, point, slack_lo = mid, probe, _slack(probe, ttft_target_s, tpot_target_s)
        else:
            hi, slack_hi = mid, _slack(probe, ttft_target_s, tpot_target_s)
        interpolate = 2 * (hi - lo) <= width
    return lo, point


RATE_STEPS = 10  # bisection steps on the rate per replica: within 0.1% of the capacity


def rate_within_targets(
    at: Callable[[float], LoadPoint],
    ttft_target_s: float | None,
    tpot_target_s: float | None,
    steps: int = RATE_STEPS,
) -> float:
    """The highest Poisson rate per replica whose steady state (``at(rate)``) meets TTFT p99 <=
    ``ttft_target_s`` and TPOT <= ``tpot_target_s``: bisection below the replica's capacity, to
    ``2^-steps`` of it (0: not even the lightest load meets them)."""
    lo, hi = 0.0, at(1e-6).capacity_requests_per_s
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets_targets(at(mid), ttft_target_s, tpot_target_s) else (lo, mid)
    return lo


def fleet_replicas(request_rate: float, rate_per_replica: float, headroom: float = 0.0) -> int:
    """The replicas that carry ``request_rate`` requests/s when each is planned at
    ``rate_per_replica / (1 + headroom)`` (the rate within the targets less the optimism kept
    in hand); at least one."""
    if rate_per_replica <= 0:
        raise SpecError("request_rate", "no load meets the latency targets on one replica", 0)
    if headroom < 0:
        raise SpecError("rate_headroom", "must be >= 0", headroom)
    need = request_rate * (1 + headroom) / rate_per_replica
    return max(math.ceil(need * (1 - 1e-12)), 1)
