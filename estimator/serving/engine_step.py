"""One engine step's time under load: ``D`` decoding sequences and ``P`` prompt tokens (chunks of
prompts being prefilled) in one step, from the same kernel-level costs as the single estimate
(``serving.steps``).

- A step's GEMMs run over the decodes' and the chunks' rows at once (weights read once: vLLM V1's
  and TensorRT-LLM's mixed batches), or as a decode batch and a prefill batch apart (SGLang's
  default, ``mixed=False``).
- Decode attention reads each sequence's KV cache at the mean context ``ISL + OSL / 2``; a prompt
  chunk's attention, elementwise work and TP communication are a whole prompt's, pro rata.
- With pipeline parallelism the step carries ``pp`` micro-batches (``steps.pipeline``).
- With speculative decoding each decoding sequence runs ``queries`` rows and the drafter's passes
  (``serving.speculative``), the first pass over the chunks too.
- A step with no decoding sequence (``D = 0``: a prefill-only replica of a disaggregated
  deployment) has no decode parts: its GEMMs, attention, elementwise work and communication are
  the chunks' alone, plus the output head.

- With attention data parallel (``parallel.dp > 1``) a step is one group's: ``D`` and ``P`` are
  its own, and its MoE layers' experts also route the other busy groups' tokens, each at the
  steady state's mean (``D`` decodes and ``D E[ISL] / decode steps`` prompt tokens: a group's
  step at the same decoding level), so a lone prompt's prefill is its own expert work and a
  loaded group's is ``dp`` times its tokens. A step ends when the slowest group's does; the
  model takes the groups alike (no imbalance between groups, stated in the answer).

``estimate_load`` (one replica serving prompts and decodes) and ``serving.disagg`` (prefill-only
and decode-only replicas) both time their steps here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from estimator.context import Context
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster
from estimator.inputs.lengths import LengthDistribution
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.layout.parallel import Parallelism
from estimator.layout.sharding import distinct_stages
from estimator.memory.inference import InferenceSetup
from estimator.serving.load import decode_steps
from estimator.serving.speculative import draft_prefill, draft_step
from estimator.serving.steps import (
    KindTimes,
    decode_kinds,
    head_time,
    pipeline,
    prefill_kinds,
    serving_layout,
    stage_times,
)
from estimator.timing.gemms import linear_gemm_time
from estimator.xp import Num

__all__ = ["StepTime", "engine_step_time", "scaled_step"]

StepTime = Callable[[Num, Num], np.ndarray]
"""Seconds per engine step carrying ``decoding`` sequences and ``prompt_tokens`` (either may be
an array: one step per entry)."""

# A decoding level this small is a step's decodes at the edge of zero (the open loop's grid
# starts above it); only an exact 0 removes the decode parts.
MIN_DECODING = 1e-9


@dataclass(frozen=True, slots=True)
class Workload:
    """What the load model reads off a workload's lengths (``serving.load``: length
    distributions): means for the flow, the prompt whose cost a chunk takes pro rata, the
    decode context, and each bin's computed prompt tokens for a request's own prefill."""

    name: str
    mean_new: float  # computed prompt tokens per request (the prefix cache's hit excluded)
    mean_output: float
    input_scv: float
    context: float
    prompt_len: int
    prompt_cached: int
    own_new: tuple[float, ...]
    lengths: LengthDistribution | None

    @property
    def prompt_new(self) -> int:
        return self.prompt_len - self.prompt_cached

    def quantile_new(self, p: float) -> float:
        if self.lengths is None:
            return self.own_new[0]
        return self.lengths.input_quantile(p) * self.mean_new / self.lengths.mean_input


def workload_of(setup: InferenceSetup) -> Workload:
    """Fixed lengths exactly as they are (one point), or the distribution's statistics with the
    prefix cache's hit rate taken off every prompt alike."""
    isl, osl, cached = setup.input_len, setup.output_len, setup.cached_prompt_tokens
    dist = setup.lengths
    if dist is None:
        new = isl - cached
        return Workload("fixed", new, osl, 0.0, isl + osl / 2, isl, cached, (float(new),), None)
    kept = (isl - cached) / isl  # the computed share of a prompt
    prompt = max(round(dist.token_weighted_input), 1)
    hit = setup.prefix_cache_hit_rate
    prompt_cached = min(int(hit * prompt), prompt - 1) if hit else 0
    return Workload(
        name=dist.name,
        mean_new=dist.mean_input * kept,
        mean_output=dist.mean_output,
        input_scv=dist.input_scv,
        context=dist.decode_context,
        prompt_len=prompt,
        prompt_cached=prompt_cached,
        own_new=tuple(x * kept for x in dist.input_lens),
        lengths=dist,
    )


def engine_step_time(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
    *,
    mixed: bool,
    cluster: Cluster,
    busy_groups: float | None = None,
) -> StepTime:
    """The step time of a replica of ``parallel`` serving ``setup``'s lengths (its prompt tokens
    computed: ``input_len`` less the prefix-cached ones), on an engine that mixes prompt chunks
    and decodes in one GEMM (``mixed``) or runs them apart. With attention data parallel, one
    group's step, ``busy_groups`` of the ``dp`` groups (default all) carrying load."""
    p = serving_layout(model, parallel)
    c = Context.of(model, accelerator, p, precision, cluster)
    stages = distinct_stages(model, p.pp, p.stage_layers)
    spec = setup.speculative
    q = setup.queries  # tokens a step runs per decoding sequence
    w = workload_of(setup)
    new = w.prompt_new
    context = w.context  # the mean context a decoding sequence reads
    # one prompt (a distribution's token-weighted mean length): chunks take its cost pro rata
    load = setup.moe_imbalance  # the busiest expert-parallel rank's routed share
    others = 0.0 if p.dp == 1 else (p.dp if busy_groups is None else busy_groups) - 1
    flow = w.mean_new / decode_steps(w.mean_output, 1.0 if spec is None else spec.acceptance_length)
    # a prompt chunk's experts: its own tokens (the other groups' are the decode parts')
    alone = None if p.dp == 1 else new
    prompt = prefill_kinds(c, w.prompt_len, 1, w.prompt_cached, load, expert_tokens=alone)
    drafted = None
    if spec is not None and spec.drafting:  # the drafter's pass over one prompt, pro rata too
        drafted = draft_prefill(c, spec, w.prompt_len, 1, w.prompt_cached, prompt)

    def step_s(decoding: Num, prompt_tokens: Num) -> np.ndarray:
        level = np.asarray(decoding, dtype=float)
        live = level > 0  # 0: a prefill-only step, without decode parts
        d = np.maximum(level / p.pp, MIN_DECODING)  # per micro-batch
        tok = np.asarray(prompt_tokens, dtype=float) / p.pp
        frac = tok / new
        kinds: list[KindTimes] = []
        rows = d if q == 1 else q * d  # decoding tokens in the step
        # the other busy groups' tokens, at the steady state's mean for this decoding level
        routed = None if p.dp == 1 else others * (rows + d * flow)
        decode = decode_kinds(
            c, d, context, queries=q, expert_load=load,
            expert_batch=None if routed is None else d * (1 + others),
        )  # fmt: skip
        for kind, dk, pk in zip(model.kinds, decode, prompt, strict=True):
            if mixed:  # one GEMM over the decodes' and the chunks' rows
                own = live * rows + tok
                gemm = linear_gemm_time(
                    c, kind, own, load, grouped_experts=True,
                    expert_tokens=None if routed is None else own + routed,
                )  # fmt: skip
            else:
                gemm = live * dk[0] + frac * pk[0]
            kinds.append(
                (
                    gemm,
                    live * dk[1] + frac * pk[1],
                    live * dk[2] + frac * pk[2],
                    live * dk[3] + frac * pk[3],
                )
            )
        times = pipeline(stage_times(kinds, stages, head_time(c, rows)), p.pp)
        if spec is not None and drafted is not None:  # k passes, the first over the chunks too
            plain = decode_kinds(c, d, context)
            draft = draft_step(c, spec, d, context, decode, plain)
            times = {k: v + live * draft[k] + frac * drafted[k] for k, v in times.items()}
        return np.asarray(sum(times.values()), dtype=float)

    return step_s


def scaled_step(step_s: StepTime, scales: tuple[float, float]) -> StepTime:
    """``step_s`` with its decode part times ``scales[1]`` and its prompt chunks' part times
    ``scales[0]`` (a deployment's calibration, ``serving.calibration``): the decode part is the
    step without its chunks, ``step_s(D, 0)``, the chunks' the rest (the split the load model's
    ``prefill_time_share`` reads)."""
    prefill, decode = scales
    if prefill == 1.0 and decode == 1.0:
        return step_s

    def scaled(decoding: Num, prompt_tokens: Num) -> np.ndarray:
        alone = step_s(decoding, 0.0)
        return np.asarray(decode * alone + prefill * (step_s(decoding, prompt_tokens) - alone))

    return scaled
