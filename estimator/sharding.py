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

from collections.abc import Sequence
from typing import NamedTuple

from .architecture import LayerKind
from .model import ModelSpec
from .xp import Num, ceil_div, maximum, take, where

__all__ = [
    "VOCAB_PAD_MULTIPLE",
    "StageParams",
    "layer_params",
    "padded_vocab",
    "rank_share",
    "stage_kind_counts",
    "stage_params",
]

VOCAB_PAD_MULTIPLE = 128


def padded_vocab(model: ModelSpec, tp: Num) -> Num:
    """Megatron's padded vocabulary size for a TP degree."""
    unit = VOCAB_PAD_MULTIPLE * tp
    return ceil_div(model.vocab_size, unit) * unit


class LayerParams(NamedTuple):
    """Per-GPU parameters of one layer: linear weights (what quantization and fp8 caches apply
    to), everything else (biases, norms, router), and the routed-expert part of both."""

    linear_weights: Num
    other: Num
    expert_weights: Num
    expert_other: Num
    total: Num  # the sum of the four


# (bucket, split, units, copies, weight elements, bias elements): one layer kind's linears summed
# over those that shard alike. Buckets: "dense" linear weights, "router" (replicated, counted with
# norms and biases), "expert" (routed experts).
_Group = tuple[str, str, int, int, int, int]


def _linear_groups(model: ModelSpec, kind: LayerKind) -> tuple[tuple[_Group, ...], int]:
    """The kind's linears grouped by how they shard, and its norm parameters (layout-independent,
    computed once per model)."""
    key = ("sharding.groups", id(kind))
    cached = model.memo.get(key)
    if cached is None:
        acc: dict[tuple[str, str, int, int], tuple[int, int]] = {}
        for m in kind.linears:
            bucket = "expert" if m.copies > 1 else "router" if m.component == "router" else "dense"
            k = (bucket, m.tp, m.units, m.copies)
            w, b = acc.get(k, (0, 0))
            acc[k] = (w + m.weight_params, b + m.bias_params)
        groups = tuple((*k, w, b) for k, (w, b) in acc.items())
        cached = model.memo[key] = (groups, sum(n.params for n in kind.norms))
    return cached


def layer_params(
    model: ModelSpec, kind: LayerKind, tp: Num, ep: Num = 1, etp: Num = 1
) -> LayerParams:
    """Per-GPU parameters of one layer of ``kind``: each group of linears as ``rank_share``
    places it."""
    groups, norms = _linear_groups(model, kind)
    lw: Num = 0
    other: Num = norms
    ew: Num = 0
    eo: Num = 0
    for bucket, split, units, copies, w, b in groups:
        w_rank, b_rank = rank_share(split, units, copies, w, b, tp, ep, etp)
        if bucket == "expert":
            ew, eo = ew + w_rank, eo + b_rank
        elif bucket == "router":
            other = other + w_rank + b_rank
        else:
            lw, other = lw + w_rank, other + b_rank
    return LayerParams(lw, other, ew, eo, lw + other + ew + eo)


def rank_share(
    split: str, units: int, copies: int, w: int, b: int, tp: Num, ep: Num, etp: Num
) -> tuple[Num, Num]:
    """What one GPU holds of ``w`` weight and ``b`` bias elements of linears that shard alike.
    Routed experts (``copies > 1``): ``copies // ep`` whole experts, each split over ETP (a
    row-parallel bias stays whole). Others split over TP by whole units (heads, KV heads,
    features), at least one per rank, so KV heads replicate when there are more ranks than
    heads; replicated linears (router, MLA down-projections) stay whole."""
    if copies > 1:
        experts = copies // ep
        w_rank = w // copies * experts / etp
        return w_rank, (b // copies * experts / etp if split == "column" else b // copies * experts)
    if split == "replicated":
        return w, b
    held = units // tp
    frac = (held if type(held) is int and held >= 1 else maximum(held, 1)) / units
    return w * frac, (b * frac if split == "column" else b)


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


class StageParams(NamedTuple):
    """Per-GPU parameters on one pipeline stage, split as ZeRO and precision need them.

    (A named tuple, like ``LayerParams``: internal, built several times per estimate.)"""

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
    model: ModelSpec,
    tp: Num,
    pp: Num,
    vp: Num,
    ep: Num,
    etp: Num,
    stage: Num,
    *,
    layers: Sequence[LayerParams] | None = None,
    counts: Sequence[Num] | None = None,
    vocab_rows: Num | None = None,
) -> StageParams:
    """Parameters on pipeline rank ``stage``. ``layers`` (``layer_params`` of each kind),
    ``counts`` (``stage_kind_counts``) and ``vocab_rows`` (padded vocabulary rows per TP rank)
    may be passed in when the caller already has them."""
    if counts is None:
        counts = stage_kind_counts(model, pp, vp, stage)
    if layers is None:
        layers = [layer_params(model, kind, tp, ep, etp) for kind in model.kinds]
    lw = other = ew = eo = 0
    largest: Num = 0
    for (lw_k, other_k, ew_k, eo_k, total_k), n in zip(layers, counts, strict=True):
        lw, other = lw + n * lw_k, other + n * other_k
        ew, eo = ew + n * ew_k, eo + n * eo_k
        if type(n) is int:  # one layout: a kind present on the stage, or not
            if n > 0:
                largest = maximum(largest, total_k)
        else:
            largest = maximum(largest, where(n > 0, total_k, 0))
    if vocab_rows is None:
        vocab_rows = padded_vocab(model, tp) // tp
    first_extra, last_extra = _embedding_extras(model)
    first = stage == 0
    last = stage == pp - 1
    # The head exists on the last stage unless it is the tied embedding already held there.
    head_rows = where(model.tie_embeddings & first, 0, vocab_rows)
    embedding = first * (vocab_rows * model.embed_dim + first_extra) + last * (
        head_rows * model.embed_dim + last_extra
    )
    return StageParams(lw, other + embedding, ew, eo, embedding, largest)


def _embedding_extras(model: ModelSpec) -> tuple[int, int]:
    """Parameters beside the vocabulary rows: on the first stage position embeddings, embedding
    projections and norm; on the last the final norm."""
    key = "sharding.embedding_extras"
    cached = model.memo.get(key)
    if cached is None:
        first = (
            model.position_embedding_params
            + sum(m.params for m in model.embedding_projections)
            + (model.embedding_norm.params if model.embedding_norm else 0)
        )
        last = model.final_norm.params if model.final_norm else 0
        cached = model.memo[key] = (first, last)
    return cached
