"""A lone request and the throughput-vs-concurrency curve: prefill (TTFT), decode (TPOT) and the
steady-state cycle of continuous batching at each batch size (``estimate_inference``'s steps).

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
- Speculative decoding (``setup.speculative``): a decode step becomes a verification of ``k + 1``
  tokens per sequence plus the drafter's passes (``serving.speculative``), and TPOT is that step
  over the acceptance length; TTFT adds the drafter's pass over the prompt.
- A prefix-cache hit rate (``setup.prefix_cache_hit_rate``): prefill computes only the uncached
  prompt tokens (``serving.steps.prefill_kinds``), in the lone request and under load.

The per-layer step costs are in ``serving.steps``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from estimator.context import Context
from estimator.inputs.precision import DTYPES
from estimator.inputs.speculative import Speculative
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import StageShape, distinct_stages
from estimator.memory.inference import InferenceMemory, InferenceSetup
from estimator.serving.speculative import (
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
    stage_times,
    through_stages,
)
from estimator.timing.kernels import collective_time
from estimator.timing.vendor import serving_scale
from estimator.xp import Num

__all__ = [
    "BatchTimes",
    "ConcurrencyPoint",
    "PrefixCacheEffect",
    "SpeculationEffect",
    "batch_times",
    "concurrency_curve",
    "curve_sizes",
    "prefix_cache_effect",
    "speculation_effect",
]


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


def _prefill_stages(
    r: Context,
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
    kinds = prefill_kinds(r, prompt, own, cached, setup.moe_imbalance, expert_tokens=routed)
    out = stage_times(kinds, stages, head_time(r, own))
    spec = setup.speculative
    if spec is not None:
        drafted = draft_prefill(r, spec, prompt, own, cached, kinds)
        out = [{k: v + drafted[k] for k, v in out[0].items()}]
    scale = _step_scale(r)
    return out if scale == 1.0 else [{k: scale * v for k, v in t.items()} for t in out]


def _step_scale(r: Context) -> float:
    """The vendor's serving step factor on the plan's accelerator (``timing.vendor``), 1.0
    where it has none."""
    vendor = serving_scale(r.acc)
    return 1.0 if vendor is None else vendor.scale


def _group_batch(p: Parallelism, batch: Num, tokens: Num) -> tuple[Num, Num | None]:
    """(the busiest attention data-parallel group's sequences, the tokens the experts route:
    ``tokens`` per sequence of all of them) of ``batch`` sequences spread over ``p.dp`` groups;
    ``(batch, None)`` without attention data parallel."""
    if p.dp == 1:
        return batch, None
    return np.ceil(np.asarray(batch, dtype=float) / p.dp), batch * tokens


def _lone(
    r: Context, prefill: list[dict[str, Num]], stages: tuple[StageShape, ...], tokens: int
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


def curve_sizes(cap: int) -> list[int]:
    """The concurrency curve's batch sizes: 1, 2, 4 ... up to ``cap`` (what the KV cache and
    the engine's batch limit allow)."""
    points = [1]
    while points[-1] < cap:
        points.append(min(points[-1] * 2, cap))
    return points


class BatchTimes(NamedTuple):
    """The step times the estimate reads, per batch size it needs (``at``: a batch
    size's entry): a batched prefill's and a decode step's seconds (per token emitted, with
    speculation), the decode step by part, a lone prompt's TTFT by part and in all, the
    decode step without speculation by part (``plain``) and the speculative step."""

    at: dict[int, int]
    prefill_s: list[float]  # per batch size, Python floats
    decode_s: list[float]
    decode: dict[str, Any]
    lone: dict[str, float]
    lone_s: float
    plain: dict[str, Num]
    step: SpeculativeStep | None
    stages: tuple[StageShape, ...]
    output_len: int
    pp: int

    def parts(self, b: int) -> dict[str, float]:
        """The decode step at batch size ``b`` by part: TPOT's breakdown."""
        i = self.at[b]
        return {k: float(v[i]) for k, v in self.decode.items()}

    def throughput(self, b: int) -> tuple[float, float, float]:
        """(output tokens/s, prefill seconds, decode seconds) per steady-state cycle at batch
        size ``b``: the batch's prompts through all stages in turn, then its decode steps."""
        i, output_len = self.at[b], self.output_len
        pre = self.prefill_s[i] * self.pp  # prompts of the batch, all stages in turn
        dec = output_len * self.decode_s[i]
        cycle = pre + dec
        return b * output_len / cycle if cycle else 0.0, pre, dec


def batch_times(r: Context, setup: InferenceSetup, sizes: list[int]) -> BatchTimes:
    """Every batch size the estimate needs (the curve's, the requested concurrency's),
    evaluated at once: the stage formulas take an array of batch sizes. Stages alike take the
    same time: each distinct one is timed once (a 126-stage Llama-3.1-405B has three), from one
    layer of each kind timed once. A lone prompt (the TTFT at light load) is batch size 1, the
    first entry; decode steps run at the mean context over a sequence's decode, ``B / pp``
    sequences a micro-batch."""
    model, p, pp = r.model, r.p, r.p.pp
    context = setup.input_len + setup.output_len / 2  # the mean over a sequence's decode
    spec, cached = setup.speculative, setup.cached_prompt_tokens
    batch = np.array(sizes, dtype=np.int64)
    stages = distinct_stages(model, pp, p.stage_layers)
    prefill_stages = _prefill_stages(r, setup, batch, stages, cached)
    prefill = per_size(pipeline(prefill_stages, 1), len(sizes))
    lone = _lone(r, prefill_stages, stages, setup.input_len - cached)
    per_mb, routed = _group_batch(p, np.maximum(batch / pp, 1.0), 1)
    plain_kinds = decode_kinds(
        r, per_mb, context, expert_load=setup.moe_imbalance, expert_batch=routed
    )
    head, scale = head_time(r, per_mb), _step_scale(r)
    if scale != 1.0:  # the vendor's fitted factor on every decode part (prefill's: above)
        plain_kinds = [(a * scale, b * scale, c * scale, d * scale) for a, b, c, d in plain_kinds]
        head = head * scale
    plain = pipeline(stage_times(plain_kinds, stages, head), pp)
    step = None
    if spec is None:
        decode = per_size(plain, len(sizes))
    else:  # per token: the step over the tokens it emits
        step = speculative_step(r, spec, per_mb, context, plain_kinds)
        decode = per_size(step.per_token(spec), len(sizes))
    return BatchTimes(
        at={b: i for i, b in enumerate(sizes)},
        prefill_s=sum(prefill.values()).tolist(),
        decode_s=sum(decode.values()).tolist(),
        decode=decode,
        lone=lone,
        lone_s=sum(lone.values()),
        plain=plain,
        step=step,
        stages=stages,
        output_len=setup.output_len,
        pp=pp,
    )


def concurrency_curve(
    t: BatchTimes,
    points: list[int],
    max_concurrency: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
) -> tuple[list[ConcurrencyPoint], ConcurrencyPoint | None]:
    """The curve at ``points`` (TTFT a lone prompt's prefill plus one decode step at the batch,
    TPOT the decode step, throughput the steady-state cycle's) and its best point: the most
    output tokens/s among the batch sizes the KV cache holds within the optional targets."""
    at, decode_s, lone_s = t.at, t.decode_s, t.lone_s
    curve = [
        ConcurrencyPoint(
            concurrency=c,
            ttft_s=lone_s + decode_s[at[c]],
            tpot_s=decode_s[at[c]],
            output_tokens_per_s=t.throughput(c)[0],
            fits=c <= max_concurrency,
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
    return curve, best


def speculation_effect(
    spec: Speculative, step: SpeculativeStep, t: BatchTimes, memory: InferenceMemory, conc: int
) -> SpeculationEffect:
    """The speculative ``step`` at batch size ``conc``, against decoding one token a step
    (``t.plain``)."""
    i, n = t.at[conc], len(t.at)

    def total(parts: dict[str, Num]) -> float:
        return float(sum(per_size(parts, n)[k][i] for k in PARTS))

    verify, draft, without = total(step.verify), total(step.draft), total(t.plain)
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


def prefix_cache_effect(r: Context, setup: InferenceSetup, t: BatchTimes) -> PrefixCacheEffect:
    """A lone request's TTFT with the prefix cache (``t.lone_s``) against the same prompt
    computed whole."""
    whole = _prefill_stages(r, setup, 1, t.stages, 0)
    without = sum(_lone(r, whole, t.stages, setup.input_len).values())
    cached = setup.cached_prompt_tokens
    return PrefixCacheEffect(
        hit_rate=setup.prefix_cache_hit_rate,
        cached_tokens=cached,
        computed_tokens=setup.input_len - cached,
        ttft_without_s=without,
        ttft_speedup=without / t.lone_s if t.lone_s else 0.0,
    )
