"""Speculative decoding's step: the target's verification and the drafter's passes, by part.

A step for ``batch`` sequences at ``context`` tokens (``spec.speculative`` says what drafts):

- **Verification**: the target's decode step with ``k + 1`` query tokens per sequence
  (``steps.decode_kinds(queries=k + 1)``): ``k + 1`` times the GEMM rows, elementwise work and
  TP/EP traffic, the same weight reads, each sequence's KV cache read once, and the output head
  over all ``k + 1`` positions (the rejection sampler needs each one's logits).
- **Drafting**: ``k`` passes of the drafter, the first over the ``k + 1`` tokens the last
  verification scored (its KV cache and hidden states catch up), the others over one token per
  sequence (vLLM's ``EagleProposer.propose``), each ending in a head over one row per sequence.
  An MTP or EAGLE pass runs its layers as the target's layers of those kinds at the same
  context (each keeps its own KV cache), its fusing projection and its head; a draft model
  runs a whole decode step of its own, at the target's TP.
- The step emits ``acceptance_length`` tokens per sequence: TPOT = (verification + drafting) /
  acceptance length. In the memory-bound regime the verification costs about a decode step (the
  weights are read once whatever the rows), so TPOT falls by about the acceptance length over
  (1 + the drafter's share).

Pipeline parallelism is refused with speculation (``spec.speculative.validate_speculative``),
so a step is one stage's.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.context import Context
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES
from estimator.inputs.speculative import Speculative, draft_pass
from estimator.layout.parallel import Parallelism
from estimator.layout.sharding import distinct_stages
from estimator.serving.steps import (
    PARTS,
    KindTimes,
    decode_kinds,
    head_time,
    pipeline,
    prefill_kinds,
    serving_layout,
    stage_times,
)
from estimator.timing.gemms import gemm_coefficients
from estimator.timing.kernels import gemm_time
from estimator.xp import Num

__all__ = ["SpeculativeStep", "draft_prefill", "draft_step", "speculative_step"]

Parts = dict[str, Num]


def drafting_with(r: Context, draft: ModelSpec) -> Context:
    """A draft model on the same GPUs, at the target's TP (vLLM's default
    ``draft_tensor_parallel_size``)."""
    return r.with_model(draft, serving_layout(draft, Parallelism(tp=r.p.tp)))


def projection(r: Context, rows: Num, k: int, n: Num, weight_b: float) -> Num:
    """A (rows x k) @ (k x n) GEMM in the activations' format (the drafters' ``eh_proj`` and
    ``fc`` are unquantized linears in the model's dtype)."""
    act = DTYPES[r.precision.activations]
    per_row, row_bytes, fixed = gemm_coefficients(k, n, act.bytes, act.bytes, weight_b)
    compute = act.compute or "bf16"
    return gemm_time(r.acc, r.prof, per_row * rows, row_bytes * rows + fixed, compute)


@dataclass(frozen=True, slots=True)
class SpeculativeStep:
    """One speculative step's seconds by part (``PARTS``): the target's verification and the
    drafter's ``k`` passes (values may be arrays over batch sizes)."""

    verify: Parts
    draft: Parts

    def per_token(self, spec: Speculative) -> Parts:
        """The step's parts over the tokens it emits per sequence: TPOT's breakdown."""
        tau = spec.acceptance_length
        return {k: (self.verify[k] + self.draft[k]) / tau for k in PARTS}


def _none() -> Parts:
    return dict.fromkeys(PARTS, 0.0)


def _layers(kinds: list[KindTimes], counts: tuple[int, ...]) -> Parts:
    """Some layers of each kind, by part."""
    out = _none()
    for times, n in zip(kinds, counts, strict=True):
        if n:
            out = {k: out[k] + n * t for k, t in zip(PARTS, times, strict=True)}
    return out


def _pass(
    r: Context, spec: Speculative, batch: Num, context: Num, queries: int, kinds: list[KindTimes]
) -> Parts:
    """One drafting pass over ``queries`` tokens per sequence: an MTP or EAGLE head's layers
    (``kinds``: the target's layer times at those rows), projection and head, or a draft
    model's decode step (one stage: pp is refused)."""
    one = draft_pass(r.model, spec)
    if one is None:
        if spec.draft is None:
            return _none()
        d = drafting_with(r, spec.draft)
        own = decode_kinds(d, batch, context, queries=queries)
        return pipeline(stage_times(own, distinct_stages(d.model, 1), head_time(d, batch)), 1)
    h = r.model.hidden_size
    rows = batch * queries
    out = _layers(kinds, one.counts)
    gemm = head_time(r, batch, one.head_vocab)
    if one.fuse_every_pass:
        gemm = gemm + projection(r, rows, one.fuse_in, h, DTYPES[r.precision.activations].bytes)
    if one.wide_qkv:  # EAGLE-3's QKV reads h more features (the embedding)
        first = r.model.kinds[r.model.layer_kinds[0]]
        qkv = sum(
            m.out_features for m in first.linears if m.component == "attention" and m.tp == "column"
        )
        gemm = gemm + projection(r, rows, h, qkv / r.p.tp, DTYPES[r.precision.weights].bytes)
    out["gemm"] = out["gemm"] + gemm
    return out


def speculative_step(
    r: Context, spec: Speculative, batch: Num, context: Num, plain: list[KindTimes]
) -> SpeculativeStep:
    """The verification and drafting of a step for ``batch`` sequences at ``context`` tokens
    (``plain``: the target's decode kinds at one token per sequence, which the single-token
    drafting passes reuse)."""
    q = spec.queries
    wide = decode_kinds(r, batch, context, queries=q) if q > 1 else plain
    head = head_time(r, batch * q)
    verify = pipeline(stage_times(wide, distinct_stages(r.model, 1), head), 1)
    return SpeculativeStep(verify, draft_step(r, spec, batch, context, wide, plain))


def draft_step(
    r: Context,
    spec: Speculative,
    batch: Num,
    context: Num,
    wide: list[KindTimes],
    plain: list[KindTimes],
) -> Parts:
    """The drafter's ``k`` passes of a step for ``batch`` sequences (``wide``, ``plain``: the
    target's decode kinds at ``k + 1`` and at one token per sequence)."""
    if not spec.drafting:
        return _none()
    draft = _pass(r, spec, batch, context, spec.queries, wide)
    if spec.num_tokens > 1:
        rest = _pass(r, spec, batch, context, 1, plain)
        draft = {k: draft[k] + (spec.num_tokens - 1) * rest[k] for k in PARTS}
    one = draft_pass(r.model, spec)
    if one is not None and not one.fuse_every_pass:  # EAGLE-3's fusion, once a step
        rows = batch * spec.queries
        act_b = DTYPES[r.precision.activations].bytes
        draft["gemm"] = draft["gemm"] + projection(r, rows, one.fuse_in, r.model.hidden_size, act_b)
    return draft


def draft_prefill(
    r: Context,
    spec: Speculative,
    prompt: int,
    batch: Num,
    cached: int,
    kinds: list[KindTimes],
) -> Parts:
    """The drafter's pass over ``batch`` prompts before their first drafts (its KV cache fills;
    part of TTFT): an MTP or EAGLE head's layers as the target's over those prompts (``kinds``),
    its projection over the computed tokens and its head over the last, or a draft model's
    prefill."""
    if not spec.drafting:
        return _none()
    one = draft_pass(r.model, spec)
    if one is not None:
        out = _layers(kinds, one.counts)
        rows = batch * (prompt - cached)
        act_b = DTYPES[r.precision.activations].bytes
        fuse = projection(r, rows, one.fuse_in, r.model.hidden_size, act_b)
        out["gemm"] = out["gemm"] + fuse + head_time(r, batch, one.head_vocab)
        return out
    if spec.draft is None:
        return _none()
    d = drafting_with(r, spec.draft)
    own = prefill_kinds(d, prompt, batch, cached)
    return pipeline(stage_times(own, distinct_stages(d.model, 1), head_time(d, batch)), 1)
