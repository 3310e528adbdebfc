"""Which parameters a GPU holds under TP, PP, EP (before any ZeRO sharding).

One code path for a single layout (ints) and for a sweep (numpy arrays of tp, pp, ep ...): the
loops run over the model's structure, which is fixed, and the arithmetic over the layout.

Placement follows Megatron-LM: column-parallel linears split outputs, row-parallel linears split
inputs and keep their bias whole; norms and the router are replicated; routed experts are split
over EP (whole experts per rank) and each expert over ETP; the vocabulary is padded to a multiple
of ``128 * tp`` (``--make-vocab-size-divisible-by 128``) and split over TP. Stage ``r`` of ``pp``
holds the layers of its virtual chunks ``r, r + pp, r + 2pp ...``; the first stage holds the input
embedding and the last the final norm and output head, which with tied embeddings and ``pp > 1`` is
a second copy of the embedding (Megatron keeps it in sync with an all-reduce).
"""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import LayerKind, Linear
from .model import ModelSpec
from .xp import Num, ceil_div, maximum, take, where

__all__ = [
    "VOCAB_PAD_MULTIPLE",
    "StageParams",
    "layer_params",
    "padded_vocab",
    "stage_kind_counts",
    "stage_params",
]

VOCAB_PAD_MULTIPLE = 128


def padded_vocab(model: ModelSpec, tp: Num) -> Num:
    """Megatron's padded vocabulary size for a TP degree."""
    unit = VOCAB_PAD_MULTIPLE * tp
    return ceil_div(model.vocab_size, unit) * unit


def _rank_fraction(units: int, parts: Num) -> Num:
    """Share of ``units`` one of ``parts`` ranks holds; a unit is never split (KV heads are
    replicated when there are more ranks than heads)."""
    return maximum(units // parts, 1) / units


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Per-GPU parameters of one layer: linear weights (what quantization and fp8 caches apply
    to), everything else (biases, norms, router), and the routed-expert part of both."""

    linear_weights: Num
    other: Num
    expert_weights: Num
    expert_other: Num

    @property
    def total(self) -> Num:
        return self.linear_weights + self.other + self.expert_weights + self.expert_other


def _linear_rank(m: Linear, tp: Num, ep: Num, etp: Num) -> tuple[Num, Num]:
    """(weight, bias) elements of a linear on one rank."""
    if m.copies > 1:
        copies = m.copies // ep
        per_copy_w = m.in_features * m.out_features
        if m.tp == "column":
            return copies * per_copy_w / etp, copies * (m.out_features / etp if m.bias else 0)
        return copies * per_copy_w / etp, copies * (m.out_features if m.bias else 0)
    if m.tp == "replicated":
        return m.weight_params, m.bias_params
    frac = _rank_fraction(m.units, tp)
    if m.tp == "column":
        return m.weight_params * frac, m.bias_params * frac
    return m.weight_params * frac, m.bias_params


def layer_params(kind: LayerKind, tp: Num, ep: Num = 1, etp: Num = 1) -> LayerParams:
    lw = other = ew = eo = 0
    for m in kind.linears:
        w, b = _linear_rank(m, tp, ep, etp)
        if m.copies > 1:
            ew, eo = ew + w, eo + b
        elif m.component == "router":
            other = other + w + b
        else:
            lw, other = lw + w, other + b
    other = other + sum(n.params for n in kind.norms)
    return LayerParams(lw, other, ew, eo)


def stage_kind_counts(model: ModelSpec, pp: Num, vp: Num, stage: Num) -> list[Num]:
    """Layers of each kind on pipeline rank ``stage`` (all of its virtual chunks)."""
    if len(model.kinds) == 1:
        return [model.num_layers // pp + 0 * stage]
    chunk = model.num_layers // (pp * vp)
    max_vp = int(vp.max()) if hasattr(vp, "max") else int(vp)
    counts: list[Num] = []
    for prefix in model.kind_prefix_counts:
        total: Num = 0
        for j in range(max_vp):
            first = where(j < vp, (j * pp + stage) * chunk, 0)
            last = where(j < vp, first + chunk, 0)
            total = total + take(prefix, last) - take(prefix, first)
        counts.append(total)
    return counts


@dataclass(frozen=True, slots=True)
class StageParams:
    """Per-GPU parameters on one pipeline stage, split as ZeRO and precision need them."""

    linear_weights: Num  # decoder linear weights (dense part)
    other: Num  # biases, norms, router, embeddings, head
    expert_weights: Num
    expert_other: Num
    embedding: Num  # the part of ``other`` that is input embedding / output head
    largest_layer: Num  # parameters of the biggest layer on the stage (FSDP gather unit)

    @property
    def dense(self) -> Num:
        return self.linear_weights + self.other

    @property
    def experts(self) -> Num:
        return self.expert_weights + self.expert_other

    @property
    def total(self) -> Num:
        return self.dense + self.experts


def stage_params(
    model: ModelSpec, tp: Num, pp: Num, vp: Num, ep: Num, etp: Num, stage: Num
) -> StageParams:
    counts = stage_kind_counts(model, pp, vp, stage)
    lw = other = ew = eo = 0
    largest: Num = 0
    for kind, n in zip(model.kinds, counts, strict=True):
        lp = layer_params(kind, tp, ep, etp)
        lw, other = lw + n * lp.linear_weights, other + n * lp.other
        ew, eo = ew + n * lp.expert_weights, eo + n * lp.expert_other
        largest = maximum(largest, where(n > 0, lp.total, 0))
    vocab_rows = padded_vocab(model, tp) // tp
    first = stage == 0
    last = stage == pp - 1
    embed_first = (
        vocab_rows * model.embed_dim
        + model.position_embedding_params
        + sum(m.params for m in model.embedding_projections)
        + (model.embedding_norm.params if model.embedding_norm else 0)
    )
    # The head exists on the last stage unless it is the tied embedding already held there.
    head_rows = where(model.tie_embeddings & first, 0, vocab_rows)
    embed_last = head_rows * model.embed_dim + (model.final_norm.params if model.final_norm else 0)
    embedding = first * embed_first + last * embed_last
    return StageParams(lw, other + embedding, ew, eo, embedding, largest)
