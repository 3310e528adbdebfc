"""One serving step's time by part, per layer kind: a prompt's prefill, a decode step, and a
speculative verification step, from the same kernel-level costs (``timing.kernels``).

- A prefill of ``batch`` prompts of ``prompt`` tokens is a training forward of each layer
  (``timing.layer.layer_time``: TP-sharded GEMMs, causal flash attention, elementwise work,
  TP all-reduces), its routed experts one fused kernel per linear. With ``cached`` of the
  prompt's tokens found in the prefix cache the forward runs over the other ``prompt - cached``
  tokens only (GEMMs, elementwise, communication and recurrent scans as for a prompt that
  long), and their queries still attend to every earlier key: the attention core keeps the
  share of the whole prompt's causal work that the new queries do,
  ``(pairs(prompt) - pairs(cached)) / pairs(prompt)`` (``counts.flops.core_pairs_flops``;
  ``1 - (cached / prompt)^2`` for full attention).
- Expert parallelism inside the TP group moves no tokens: attention is tensor parallel, so
  every rank holds the whole batch after its all-reduce, runs its own experts on the rows routed
  to them, and the layer's all-reduce sums the experts' outputs (vLLM's ``FusedMoE`` reduces its
  output with the TP all-reduce and takes all-to-all kernels only with data-parallel attention).
  No all-to-all is charged; the busiest rank's expert share still times the GEMMs.
- **Attention data parallel** (``parallel.dp > 1``, mixture-of-experts models: SGLang's
  ``--enable-dp-attention``, vLLM's ``--data-parallel-size`` with ``--enable-expert-parallel``,
  TensorRT-LLM's ``enable_attention_dp``): ``dp`` groups of ``tp`` ranks, each with its own
  sequences, KV cache and attention (TP inside the group), and the routed experts over ``ep``
  ranks of all ``dp x tp`` (each split over ``dp tp / ep``). A step's functions here take one
  group's ``batch``; its experts serve ``expert_tokens`` (every group's: ``dp`` times the
  group's when the groups are alike, the default), and each MoE layer moves the group's routed
  copies to their experts and back, a dispatch and a combine all-to-all over the EP group
  (``expert_exchange``: tokens travel in the experts' GEMM input format, fp8 for an fp8 MoE as
  DeepEP's dispatch, and come back in the activations').
- A decode step for ``batch`` sequences reads every weight once, each sequence's KV cache at
  ``context`` tokens (sliding-window layers at most their window; MLA's latent cache, whose 128
  heads all attend over it in the absorbed form, at the longer of the read and its FLOPs:
  FlashMLA is compute-bound at long contexts, 660 TFLOPS against 3,000 GB/s on H800 by its
  README), runs GEMMs with one row per
  sequence, two TP all-reduces per layer and, for MoE layers, only the experts the rows select.
- A verification step (speculative decoding) is a decode step with ``queries`` rows per
  sequence (the last accepted token and the drafts): GEMMs, elementwise work and communication
  over ``batch x queries`` rows, the same weight reads, and attention that reads each
  sequence's KV cache once for its queries (``kernels.attention_verify_time``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from estimator.context import Context
from estimator.counts.flops import attention_terms, core_pairs_flops
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes
from estimator.layout.sharding import StageShape, padded_vocab
from estimator.memory.inference import cached_elems
from estimator.timing.gemms import gemm_coefficients, linear_gemm_time, weight_read_bytes
from estimator.timing.kernels import (
    attention_decode_time,
    attention_verify_time,
    collective_time,
    gemm_time,
    memory_time,
)
from estimator.timing.layer import LayerRun, layer_time
from estimator.xp import Num, minimum, where

__all__ = [
    "PARTS",
    "KindTimes",
    "decode_kinds",
    "expert_exchange",
    "head_time",
    "per_size",
    "pipeline",
    "prefill_kinds",
    "serving_attention_format",
    "serving_layout",
    "stage_times",
    "through_stages",
]

PARTS = ("gemm", "attention", "elementwise", "comm")
"""The parts of a stage's time, in the order the breakdowns list them."""

KindTimes = tuple[Num, Num, Num, Num]  # one layer of a kind: its PARTS


def serving_layout(model: ModelSpec, parallel: Parallelism) -> Parallelism:
    """Serving places experts over ``ep`` ranks of the replica's ``dp x tp`` (the TP group's
    without attention data parallel), each split over ``dp tp / ep``."""
    if model.moe is not None and parallel.etp is None:
        return replace(parallel, etp=parallel.dp * parallel.tp // parallel.ep)
    return parallel


def expert_exchange(c: Context, rows: Num) -> Num:
    """One MoE layer's token exchange on a rank of an attention data-parallel replica: its
    ``rows`` tokens' top-k copies (its ``1 / tp`` share of its group's) sent to the experts'
    ranks in the GEMM input format and their outputs returned in the activations' (a dispatch
    and a combine all-to-all over the EP group). Zero where the experts sit inside the TP
    group (``dp = 1``: the TP all-reduce combines them)."""
    model, p = c.model, c.p
    if model.moe is None or p.dp == 1:
        return 0.0
    size, stride = group_shapes(p)["ep"]
    copies = rows / p.tp * model.moe.top_k * model.hidden_size
    return sum(
        collective_time(
            c.acc, c.prof, "all_to_all", copies * DTYPES[fmt].bytes, size, stride, c.domain
        )
        for fmt in (c.precision.gemm_inputs, c.precision.activations)
    )


def serving_attention_format(acc: Accelerator, precision: Precision) -> str:
    """The tensor-core rate of prefill attention: fp8 where the KV cache is FP8 and the chip has
    an fp8 rate (TensorRT-LLM runs FP8 context FMHA with an FP8 KV cache,
    ``use_fp8_context_fmha``), else the activations'. Weight formats never reach attention: an
    NVFP4 checkpoint quantizes the linear layers, and there is no FP4 attention kernel."""
    act = DTYPES[precision.activations].compute or "bf16"
    if DTYPES[precision.kv_cache].compute == "fp8" and "fp8" in acc.peak_flop_per_s:
        return "fp8"
    return act


def prefill_kinds(
    c: Context,
    prompt: int,
    batch: Num,
    cached: int = 0,
    expert_load: float = 1.0,
    expert_tokens: Num | None = None,
) -> list[KindTimes]:
    """One layer of each kind prefilling ``batch`` prompts of ``prompt`` tokens, ``cached`` of
    them found in the prefix cache (computed: the rest); the routed experts at ``expert_load``
    times the balanced share (the busiest expert-parallel rank's, which the step waits for).
    With attention data parallel ``batch`` is one group's and ``expert_tokens`` the computed
    tokens every group routes (default: ``dp`` groups alike)."""
    model = c.model
    att = serving_attention_format(c.acc, c.precision)
    terms = attention_terms(model) if cached else ()
    exchange = [
        expert_exchange(c, (prompt - cached) * batch) if kind.routed else 0.0
        for kind in model.kinds
    ]
    run = LayerRun(attention_format=att, expert_load=expert_load, grouped_experts=True)
    whole_run = run if cached else replace(run, expert_tokens=expert_tokens)
    new_run = replace(run, expert_tokens=expert_tokens)
    out = []
    for k in range(len(model.kinds)):
        whole = layer_time(c, k, prompt, batch, whole_run)
        if not cached:
            out.append(
                (
                    whole.gemm,
                    whole.attention + whole.mixer,
                    whole.elementwise,
                    whole.tp_comm + exchange[k],
                )
            )
            continue
        new = layer_time(c, k, prompt - cached, batch, new_run)
        term = terms[k]
        share: Num = 0.0
        if term is not None:  # the new queries' share of the whole prompt's causal work
            share = 1 - core_pairs_flops(term, cached) / core_pairs_flops(term, prompt)
        out.append(
            (
                new.gemm,
                share * whole.attention + new.mixer,
                new.elementwise,
                new.tp_comm + exchange[k],
            )
        )
    return out


def decode_kinds(
    c: Context,
    batch: Num,
    context: Num,
    queries: int = 1,
    expert_load: float = 1.0,
    expert_batch: Num | None = None,
) -> list[KindTimes]:
    """One layer of each kind in a decode step of ``batch`` sequences at ``context`` tokens,
    ``queries`` tokens per sequence (a speculative verification step: more than one). With
    attention data parallel ``batch`` is one group's and ``expert_batch`` the sequences every
    group decodes (default: ``dp`` groups alike)."""
    model, acc, prof, p, precision = c.model, c.acc, c.prof, c.p, c.precision
    act_b = DTYPES[precision.activations].bytes
    kv_b = DTYPES[precision.kv_cache].bytes
    h = model.hidden_size
    rows = batch * queries if queries != 1 else batch
    expert_rows = None if expert_batch is None else expert_batch * queries
    exchange = expert_exchange(c, rows)
    allreduce = collective_time(acc, prof, "all_reduce", rows * h * act_b, p.tp, 1, c.domain)
    terms = attention_terms(model)
    att_format = serving_attention_format(acc, precision)
    streams = model.stream_traffic_per_block  # hyper-connections' extra traffic (0 without)
    out = []
    for k, kind in enumerate(model.kinds):
        # the cached keys and values a step reads (a compressor's entries too)
        kv_bytes: Num = batch * cached_elems(model, k, context, p.tp) * kv_b
        cached: Num = 0.0  # the tokens a query attends over (its window's at most)
        if kind.attention is not None:
            window = kind.attention.cache_window
            cached = context if window is None else minimum(context, window)
        if kind.mixer is not None:  # the state is read and written back each step
            r = kind.mixer
            kv_bytes = kv_bytes + 2 * batch * (r.state_elems + r.conv_state_elems) / p.tp * act_b
        term = terms[k]
        a = kind.attention
        if term is None or a is None or (queries == 1 and not a.latent_dims):
            attention = attention_decode_time(acc, prof, kv_bytes)
        else:  # each query against the cached keys (a window's, a sparse selection's at most)
            top = a.topk
            keys = cached if top is None else minimum(cached, top)
            flops = rows * (keys * a.decode_pair_flops + cached * term.index_per_pair) / p.tp
            attention = attention_verify_time(acc, prof, kv_bytes, flops, cached, att_format)
        out.append(
            (
                linear_gemm_time(
                    c, kind, rows, expert_load, grouped_experts=True, expert_tokens=expert_rows
                ),
                attention,
                memory_time(acc, prof, rows * (8 * h + streams * kind.blocks) * act_b, 3),
                kind.tp_exchanges * allreduce + (exchange if kind.routed else 0.0),
            )
        )
    return out


def stage_times(
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


def head_time(c: Context, rows: Num, vocab: int | None = None) -> Num:
    """The output head over ``rows`` rows on one TP rank: the model's vocabulary, or ``vocab``
    rows of a drafter's own head (EAGLE-3's draft vocabulary)."""
    model, p, precision = c.model, c.p, c.precision
    out = (padded_vocab(model, p.tp) if vocab is None else vocab) / p.tp
    gemm_b = DTYPES[precision.gemm_inputs].bytes
    # fp32 logits out: 4 bytes per output element.
    per_row, row_bytes, fixed = gemm_coefficients(
        model.embed_dim, out, gemm_b, 4, weight_read_bytes(precision)
    )
    return gemm_time(c.acc, c.prof, per_row * rows, row_bytes * rows + fixed, precision.compute)


def pipeline(stage_time: list[dict[str, Num]], pp: int) -> dict[str, Num]:
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


def through_stages(
    stage_time: list[dict[str, Num]], stages: tuple[StageShape, ...]
) -> dict[str, Num]:
    """One micro-batch's latency through every pipeline stage in turn: each distinct stage's
    time as many times as ranks are like it (a lone prompt crosses them one after another; the
    pipeline overlaps nothing for it)."""
    total = {k: v * stages[0].ranks for k, v in stage_time[0].items()}
    for times, stage in zip(stage_time[1:], stages[1:], strict=True):
        total = {k: v + stage.ranks * times[k] for k, v in total.items()}
    return total


def per_size(times: dict[str, Num], n: int) -> dict[str, Any]:
    """Each part as an array of ``n`` floats (parts that no batch size changes, such as the
    communication of a single GPU, come back from the formulas as one number)."""
    return {
        k: v if isinstance(v, np.ndarray) and v.shape == (n,) else np.full(n, float(v))
        for k, v in times.items()
    }
