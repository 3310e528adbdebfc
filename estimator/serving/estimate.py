"""Serving latency, throughput and cost: prefill (TTFT), decode (TPOT) and concurrency.

- Prefill of a prompt is one forward over its tokens: the same per-layer operators as a training
  forward (``timing.py``: TP-sharded GEMMs, causal flash attention, elementwise work, TP
  all-reduces, EP all-to-all), then the output head for the last token of each sequence.
- A decode step for ``B`` sequences reads every weight once (quantized weights read fewer bytes,
  fp8/fp4 GEMMs run at their rates), reads each sequence's KV cache at its context length
  (sliding-window layers at most their window), runs GEMMs with ``M = B`` rows, two TP all-reduces
  per layer, and for MoE layers only the experts the batch's tokens select: ``E (1 - (1 - k/E)^B)``
  of them in expectation.
- With ``pp`` stages the engine keeps ``pp`` micro-batches of ``B / pp`` sequences in flight:
  a token's latency is ``pp`` stage steps, throughput ``B`` tokens per such latency.
- Steady state at concurrency ``C`` (continuous batching, fixed lengths): each sequence costs its
  share of a batched prefill of ``C`` prompts plus ``output_len`` decode steps at the mean context
  ``input_len + output_len / 2``; output tokens/s = ``C * output_len / (prefill(C) + output_len *
  TPOT(C))``. Concurrency is bounded by the KV cache (``inference_memory``) and by the engine's
  batch limit (``max_batch_size``, TensorRT-LLM's default 2048).
- Cost per token splits the GPU-hours between prefill (input tokens) and decode (output tokens)
  by their share of the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from estimator.errors import SpecError
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import StageShape, distinct_stages, padded_vocab
from estimator.memory.inference import (
    InferenceMemory,
    InferenceSetup,
    cached_elems,
    inference_memory,
)
from estimator.serving.load import (
    ENGINES,
    LoadPoint,
    Regime,
    budget_cap,
    prefill_wait,
    quantile_wait,
    steady_state_steps,
)
from estimator.spec.accelerator import Accelerator
from estimator.spec.cluster import Cluster, cluster_of
from estimator.spec.model import ModelSpec
from estimator.spec.precision import DTYPES, Precision
from estimator.timing.kernels import (
    KernelProfile,
    attention_decode_time,
    collective_time,
    gemm_time,
    kernel_profile,
    memory_time,
)
from estimator.timing.rates import SECONDS_PER_HOUR
from estimator.timing.training import (
    gemm_coefficients,
    layer_time,
    linear_gemm_time,
    weight_read_bytes,
)
from estimator.xp import Num, where

__all__ = ["DEFAULT_MAX_BATCH", "ConcurrencyPoint", "InferenceEstimate", "estimate_inference"]

DEFAULT_MAX_BATCH = 2048
LOAD_NOTE = (
    "Under load (load.*): a steady-state model of {label}'s scheduler (chunked prefill within"
    " its token budget, its sequence cap and the KV cache's), fixed lengths; the percentiles"
    " are approximate (an exponential tail on the prefill queue's wait)."
)


@dataclass(frozen=True, slots=True)
class ConcurrencyPoint:
    concurrency: int
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    fits: bool


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
    load: LoadPoint | None = None  # steady state under load (``estimate_load``)
    notes: tuple[str, ...] = field(default=())

    @property
    def usd_per_1k_output_tokens(self) -> float | None:
        return (
            None if self.usd_per_1m_output_tokens is None else self.usd_per_1m_output_tokens / 1e3
        )

    @property
    def usd_per_1k_input_tokens(self) -> float | None:
        return None if self.usd_per_1m_input_tokens is None else self.usd_per_1m_input_tokens / 1e3


def _serving_layout(model: ModelSpec, parallel: Parallelism) -> Parallelism:
    """Serving places experts over ``ep`` ranks of the TP group, each split over ``tp / ep``."""
    if model.moe is not None and parallel.etp is None:
        return replace(parallel, etp=parallel.tp // parallel.ep)
    return parallel


def serving_attention_format(acc: Accelerator, precision: Precision) -> str:
    """The tensor-core rate of prefill attention: fp8 where the KV cache is FP8 and the chip has
    an fp8 rate (TensorRT-LLM runs FP8 context FMHA with an FP8 KV cache,
    ``use_fp8_context_fmha``), else the activations'. Weight formats never reach attention: an
    NVFP4 checkpoint quantizes the linear layers, and there is no FP4 attention kernel."""
    act = DTYPES[precision.activations].compute or "bf16"
    if DTYPES[precision.kv_cache].compute == "fp8" and "fp8" in acc.peak_flop_per_s:
        return "fp8"
    return act


PARTS = ("gemm", "attention", "elementwise", "comm")
"""The parts of a stage's time, in the order the breakdowns list them."""

KindTimes = tuple[Num, Num, Num, Num]  # one layer of a kind: its PARTS


def _prefill_kinds(
    model: ModelSpec,
    acc: Accelerator,
    prof: KernelProfile,
    p: Parallelism,
    precision: Precision,
    prompt: int,
    batch: Num,
    domain: Cluster,
) -> list[KindTimes]:
    """One layer of each kind prefilling ``batch`` prompts of ``prompt`` tokens."""
    att = serving_attention_format(acc, precision)
    out = []
    for k, kind in enumerate(model.kinds):
        shape = (model, kind, k, acc, prof, p, precision, prompt, batch, domain)
        lt = layer_time(*shape, attention_format=att)
        out.append((lt.gemm, lt.attention + lt.mixer, lt.elementwise, lt.tp_comm + lt.ep_comm))
    return out


def _decode_kinds(
    model: ModelSpec,
    acc: Accelerator,
    prof: KernelProfile,
    p: Parallelism,
    precision: Precision,
    batch: Num,
    context: Num,
    domain: Cluster,
) -> list[KindTimes]:
    """One layer of each kind in a decode step of ``batch`` sequences at ``context`` tokens."""
    act_b = DTYPES[precision.activations].bytes
    kv_b = DTYPES[precision.kv_cache].bytes
    h = model.hidden_size
    allreduce = collective_time(acc, prof, "all_reduce", batch * h * act_b, p.tp, 1, domain)
    streams = model.stream_traffic_per_block
    out = []
    for k, kind in enumerate(model.kinds):
        kv_bytes: Num = batch * cached_elems(model, k, context, p.tp) * kv_b
        if kind.mixer is not None:  # the state is read and written back each step
            r = kind.mixer
            kv_bytes = kv_bytes + 2 * batch * (r.state_elems + r.conv_state_elems) / p.tp * act_b
        moe = any(m.copies > 1 for m in kind.linears)
        a2a = 0.0
        if moe and p.ep > 1 and model.moe is not None:
            routed = batch * model.moe.top_k * h * act_b
            a2a = 2 * collective_time(acc, prof, "all_to_all", routed, p.ep, p.expert_tp, domain)
        out.append(
            (
                linear_gemm_time(model, kind, acc, prof, p, precision, batch),
                attention_decode_time(acc, prof, kv_bytes),
                memory_time(acc, prof, batch * (8 * h + streams * kind.blocks) * act_b, 3),
                kind.tp_exchanges * allreduce + a2a,
            )
        )
    return out


def _stage_times(
    kinds: list[KindTimes], stages: tuple[StageShape, ...], head: Num
) -> list[dict[str, Num]]:
    """Each distinct stage's time by part: its layers of each kind, and the output head on the
    last."""
    out = []
    for stage in stages:
        acc: list[Num] = [0.0, 0.0, 0.0, 0.0]
        for times, n in zip(kinds, stage.counts, strict=True):
            if n:
                acc = [a + n * t for a, t in zip(acc, times, strict=True)]
        if stage.last:
            acc[0] = acc[0] + head
        out.append(dict(zip(PARTS, acc, strict=True)))
    return out


def _head_time(
    model: ModelSpec,
    acc: Accelerator,
    prof: KernelProfile,
    p: Parallelism,
    precision: Precision,
    rows: Num,
) -> Num:
    vocab = padded_vocab(model, p.tp) / p.tp
    gemm_b = DTYPES[precision.gemm_inputs].bytes
    # fp32 logits out: 4 bytes per output element.
    per_row, row_bytes, fixed = gemm_coefficients(
        model.embed_dim, vocab, gemm_b, 4, weight_read_bytes(precision)
    )
    return gemm_time(acc, prof, per_row * rows, row_bytes * rows + fixed, precision.compute)


def _pipeline(stage_time: list[dict[str, Num]], pp: int) -> dict[str, Num]:
    """Per-token latency through ``pp`` stages: the slowest stage ``pp`` times (every stage
    holds one of the ``pp`` micro-batches in flight). Stage times may be arrays (one entry per
    batch size): the slowest stage is then chosen entry by entry (the first of equals)."""
    worst = stage_time[0]
    if len(stage_time) > 1:  # one stage: no totals to compare (each is an array operation)
        worst_total = sum(worst.values())
        for times in stage_time[1:]:
            total = sum(times.values())
            slower = total > worst_total
            worst = {k: where(slower, times[k], v) for k, v in worst.items()}
            worst_total = where(slower, total, worst_total)
    return worst if pp == 1 else {k: pp * v for k, v in worst.items()}


def _through_stages(
    stage_time: list[dict[str, Num]], stages: tuple[StageShape, ...]
) -> dict[str, Num]:
    """One micro-batch's latency through every pipeline stage in turn: each distinct stage's
    time as many times as ranks are like it (a lone prompt crosses them one after another; the
    pipeline overlaps nothing for it)."""
    total = {k: v * stages[0].ranks for k, v in stage_time[0].items()}
    for times, stage in zip(stage_time[1:], stages[1:], strict=True):
        total = {k: v + stage.ranks * times[k] for k, v in total.items()}
    return total


def _per_size(times: dict[str, Num], n: int) -> dict[str, Any]:
    """Each part as an array of ``n`` floats (parts that no batch size changes, such as the
    communication of a single GPU, come back from the formulas as one number)."""
    return {
        k: v if isinstance(v, np.ndarray) and v.shape == (n,) else np.full(n, float(v))
        for k, v in times.items()
    }


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
    engine: str | None = None,
    request_rate: float | None = None,
) -> InferenceEstimate:
    """Serving memory, TTFT/TPOT with breakdowns, throughput at ``setup.concurrency`` (``0``
    would be refused by the memory model; use ``max_concurrency`` from the result), the
    throughput-vs-concurrency curve and the best concurrency under the optional targets; with
    an ``engine`` preset (or a ``request_rate``), the steady state under that load as ``load``
    (``estimate_load``)."""
    memory = inference_memory(model, accelerator, parallel, setup, precision)
    if max_batch_size < 1:
        raise SpecError("max_batch_size", "must be >= 1", max_batch_size)
    for name, target in (("ttft_target_s", ttft_target_s), ("tpot_target_s", tpot_target_s)):
        if target is not None and target <= 0:
            raise SpecError(name, "must be > 0", target)
    prof = kernel_profile(accelerator.id)
    domain = cluster or cluster_of(accelerator)
    p = _serving_layout(model, parallel)
    pp = p.pp
    context = setup.input_len + setup.output_len / 2  # the mean over a sequence's decode
    conc = setup.concurrency

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
    prompt = setup.input_len
    # Stages alike take the same time: each distinct one is timed once (a 126-stage
    # Llama-3.1-405B has three), from one layer of each kind timed once.
    stages = distinct_stages(model, pp)
    args = (model, accelerator, prof, p, precision)
    prefill_kinds = _prefill_kinds(*args, prompt, batch, domain)
    prefill_stages = _stage_times(prefill_kinds, stages, _head_time(*args, batch))
    prefill = _per_size(_pipeline(prefill_stages, 1), len(sizes))
    # A lone prompt (the TTFT at light load) crosses every stage in turn, and is handed from
    # stage to stage: pipeline parallelism adds hops to it, it divides nothing.
    through = _through_stages(prefill_stages, stages)
    lone = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in through.items()}  # batch 1
    if pp > 1:
        hop_bytes = prompt * model.hidden_size * DTYPES[precision.activations].bytes
        size, stride = group_shapes(p)["pp"]
        hop = collective_time(accelerator, prof, "send_recv", hop_bytes, size, stride, domain)
        lone["comm"] = lone["comm"] + (pp - 1) * float(hop)
    per_mb = np.maximum(batch / pp, 1.0)
    decode_kinds = _decode_kinds(*args, per_mb, context, domain)
    decode = _per_size(
        _pipeline(_stage_times(decode_kinds, stages, _head_time(*args, per_mb)), pp), len(sizes)
    )
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
    gpus = p.tp * p.pp
    usd_out = usd_decode = usd_in = usd_hour = None
    if price_usd_per_gpu_hour is not None:
        if price_usd_per_gpu_hour < 0:
            raise SpecError("price_usd_per_gpu_hour", "must be >= 0", price_usd_per_gpu_hour)
        usd_hour = price_usd_per_gpu_hour * gpus
        per_s = usd_hour / SECONDS_PER_HOUR
        # All-in: every GPU-second, prefill's included, over the output tokens; beside it the
        # split by phase (decode's seconds over output tokens, prefill's over input tokens).
        share = dec_s / (pre_s + dec_s) if pre_s + dec_s else 1.0
        usd_out = per_s / out_tps * 1e6 if out_tps else None
        usd_decode = per_s * share / out_tps * 1e6 if out_tps else None
        usd_in = per_s * (1 - share) / in_tps * 1e6 if in_tps else None
    notes = list(memory.notes) + list(prof.notes)
    notes.append(
        "Throughput is steady-state continuous batching at fixed lengths: a batched prefill of "
        f"the {conc} prompts plus {setup.output_len} decode steps at the mean context."
    )
    if conc > memory.max_concurrency:
        notes.append(
            f"Concurrency {conc} exceeds what the KV cache holds ({memory.max_concurrency})."
        )
    notes += model.notes
    load = None
    if engine is not None or request_rate is not None:
        load = estimate_load(
            model, accelerator, parallel, setup, precision, engine=engine or "vllm",
            request_rate=request_rate, cluster=cluster, memory=memory,
        )  # fmt: skip
        notes.append(LOAD_NOTE.format(label=ENGINES[load.engine].label))
        if load.regime == "overloaded":
            notes.append(
                f"Arrivals at {request_rate:g} requests/s exceed what the replica completes"
                f" ({load.capacity_requests_per_s:.3g} requests/s at these lengths): the queue"
                " grows without bound and TTFT has no steady state. Add replicas or lower"
                " the rate."
            )
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
        best_concurrency=best.concurrency if best else None,
        price_usd_per_gpu_hour=price_usd_per_gpu_hour,
        usd_per_1m_output_tokens=usd_out,
        usd_per_1m_input_tokens=usd_in,
        usd_per_1m_output_tokens_decode=usd_decode,
        usd_per_hour=usd_hour,
        load=load,
        notes=tuple(notes),
    )


def estimate_load(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
    *,
    engine: str = "vllm",
    request_rate: float | None = None,
    cluster: Cluster | None = None,
    memory: InferenceMemory | None = None,
) -> LoadPoint:
    """TTFT, TPOT and throughput of a replica in steady state under load (``serving.load``):
    ``setup.concurrency`` requests kept in flight (closed loop), or Poisson arrivals at
    ``request_rate`` requests/s (open loop), on ``engine``'s scheduler preset."""
    preset = ENGINES.get(engine)
    if preset is None:
        raise SpecError("engine", f"must be one of {', '.join(ENGINES)}", engine)
    if request_rate is not None and not 0 < request_rate <= 1e6:
        raise SpecError("request_rate", "must be > 0 and <= 1,000,000 requests/s", request_rate)
    memory = memory or inference_memory(model, accelerator, parallel, setup, precision)
    prof = kernel_profile(accelerator.id)
    domain = cluster or cluster_of(accelerator)
    p = _serving_layout(model, parallel)
    stages = distinct_stages(model, p.pp)
    isl, osl, dec = setup.input_len, setup.output_len, max(setup.output_len - 1, 1)
    args = (model, accelerator, prof, p, precision)
    prompt = _prefill_kinds(*args, isl, 1, domain)  # one whole prompt: chunks take it pro rata

    def step_s(decoding: Num, prompt_tokens: Num) -> Num:
        """Seconds per engine step carrying ``decoding`` sequences and ``prompt_tokens``."""
        d = np.maximum(np.asarray(decoding, dtype=float) / p.pp, 1e-9)  # per micro-batch
        tok = np.asarray(prompt_tokens, dtype=float) / p.pp
        frac = tok / isl
        kinds = []
        decode = _decode_kinds(*args, d, isl + osl / 2, domain)
        for kind, dk, pk in zip(model.kinds, decode, prompt, strict=True):
            if preset.mixed:  # one GEMM over the decodes' and the chunks' rows
                gemm = linear_gemm_time(model, kind, accelerator, prof, p, precision, d + tok)
            else:
                gemm = dk[0] + frac * pk[0]
            kinds.append((gemm, dk[1] + frac * pk[1], dk[2] + frac * pk[2], dk[3] + frac * pk[3]))
        times = _pipeline(_stage_times(kinds, stages, _head_time(*args, d)), p.pp)
        return np.asarray(sum(times.values()), dtype=float)

    slots = preset.slots(memory.max_concurrency)
    budget = preset.token_budget
    if slots < 1:
        field_name = "concurrency" if request_rate is None else "request_rate"
        raise SpecError(field_name, "the KV cache holds no sequence of this length", 0)
    top = min(budget_cap(isl, osl, budget), float(slots))
    top_tau = float(step_s(top, top * isl / dec))
    capacity = top / (dec * top_tau)
    if request_rate is None:
        counts = steady_state_steps(
            isl=isl, osl=osl, engine=preset, kv_slots=memory.max_concurrency,
            concurrency=setup.concurrency,
        )  # fmt: skip
        overloaded = False
    else:  # open loop: decoding level where arrivals equal completions, D = rate dec tau(D)
        overloaded = request_rate >= capacity
        # D - rate dec tau(D) rises with D: its root from one array evaluation on a grid (the
        # step time is smooth in D), then refined by fixed-point steps from the bracket
        grid = top * np.linspace(0.0, 1.0, 65)[1:]
        gap = grid - request_rate * dec * step_s(grid, grid * isl / dec)
        k = int(np.searchsorted(gap, 0.0))
        d = float(grid[min(k, len(grid) - 1)]) if k < len(grid) else top
        for _ in range(8):
            nxt = min(request_rate * dec * float(step_s(d, d * isl / dec)), top)
            if abs(nxt - d) <= 1e-6 * max(d, 1.0):
                d = nxt
                break
            d = nxt
        s, rho, wait = prefill_wait(d, isl, osl, budget)
        counts = {
            "running": d + d * (s + wait) / dec if not overloaded else float(slots),
            "decoding": d,
            "queued": 0.0,
            "prompt_tokens": d * isl / dec,
            "service_steps": s,
            "wait_steps": wait if not overloaded else math.inf,
            "rho": min(rho, 1.0),
            "budget_bound": float(d >= top * (1 - 1e-6)),
        }
    d = counts["decoding"]
    running = counts["running"]
    chunk = min(isl, budget - d)
    others = counts["prompt_tokens"] * max(running - 1, 0) / max(running, 1)
    tau, tau_chunk, tau_decode = step_s(
        np.array([d, d, d]), np.array([counts["prompt_tokens"], chunk, others])
    ).tolist()
    per_step = d / dec  # requests finishing a step
    req_per_s = per_step / tau
    wait_s = counts["wait_steps"] * tau
    queue_s = counts["queued"] / req_per_s if counts["queued"] else 0.0
    service_s = counts["service_steps"] * tau_chunk
    if request_rate is not None:  # a Poisson arrival lands mid-step: it waits for the step's end
        service_s += tau / 2
    ttft = queue_s + wait_s + service_s
    rho = counts["rho"]
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

    def ttft_at(q: float) -> float:
        if overloaded:
            return math.inf
        return float(queue_s + service_s + quantile_wait(wait_s, rho, q))

    return LoadPoint(
        engine=preset.name,
        concurrency=None if request_rate is not None else float(setup.concurrency),
        request_rate=request_rate,
        regime=regime,
        running=running,
        decoding=d,
        queued=counts["queued"],
        ttft_s=ttft,
        tpot_s=tau_decode,
        e2e_s=ttft + dec * tau_decode,
        ttft_p50_s=ttft_at(0.5),
        ttft_p90_s=ttft_at(0.9),
        ttft_p99_s=ttft_at(0.99),
        step_s=tau,
        prefill_steps=counts["service_steps"],
        requests_per_s=req_per_s,
        output_tokens_per_s=req_per_s * osl,
        capacity_requests_per_s=capacity,
    )
