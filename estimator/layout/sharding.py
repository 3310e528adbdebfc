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

from estimator.inputs.architecture import LayerKind
from estimator.inputs.model import ModelSpec
from estimator.memo import per_model
from estimator.xp import Num, ceil_div, maximum, numpy, take, where

__all__ = [
    "VOCAB_PAD_MULTIPLE",
    "LayerParams",
    "Placement",
    "StageParams",
    "StageShape",
    "distinct_stages",
    "embedding_extras",
    "layer_params",
    "padded_vocab",
    "place_layer",
    "placements",
    "rank_share",
    "serving_layer_split",
    "stage_kind_counts",
    "stage_params",
    "with_mtp",
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


class Placement(NamedTuple):
    """One layer kind's parameters condensed by how they are placed (layout-independent, computed
    once per model), so that ``layer_params`` does one step per distinct TP unit count instead of
    one per linear: ``split`` rows are (units, linear weights, other elements) split by whole
    units over TP; ``whole_linear`` and ``whole_other`` are what every rank holds whole
    (replicated linears such as MLA's down-projections; norms, row-parallel biases, the router);
    ``experts`` is (copies, then per expert: weights, column biases, row biases) or None."""

    split: tuple[tuple[int, int, int], ...]
    whole_linear: int
    whole_other: int
    experts: tuple[int, int, int, int] | None


@per_model
def placements(model: ModelSpec) -> tuple[Placement, ...]:
    """Each layer kind's ``Placement``, in ``model.kinds`` order (computed once per model)."""
    return tuple(_placement(k) for k in model.kinds)


def _linear_placement(split: str, units: int, copies: int, w: int, b: int) -> Placement:
    """Where ``w`` weight and ``b`` bias elements of linears that shard alike go: routed experts
    (``copies > 1``) whole over EP and split over ETP, replicated linears whole, the others by
    whole units over TP, a row-parallel bias whole."""
    column_bias = b if split == "column" else 0
    if copies > 1:
        per_expert = (w // copies, column_bias // copies, (b - column_bias) // copies)
        return Placement((), 0, 0, (copies, *per_expert))
    if split == "replicated":
        return Placement((), w, b, None)
    return Placement(((units, w, column_bias),), 0, b - column_bias, None)


def _placement(kind: LayerKind) -> Placement:
    """A layer kind's linears placed one by one and summed by TP unit count; router weights are
    counted with "other" (kept in the activation format, like norms and biases)."""
    split: dict[int, tuple[int, int]] = {}
    whole_linear, whole_other = 0, sum(n.params for n in kind.norms)
    experts = (0, 0, 0, 0)
    for m in kind.linears:
        one = _linear_placement(m.tp, m.units, m.copies, m.weight_params, m.bias_params)
        router = m.component == "router"
        whole_linear += 0 if router else one.whole_linear
        whole_other += one.whole_other + (one.whole_linear if router else 0)
        for units, w, o in one.split:
            lw, ot = split.get(units, (0, 0))
            split[units] = (lw, ot + w + o) if router else (lw + w, ot + o)
        if one.experts is not None:
            copies, w1, col1, row1 = one.experts
            experts = (copies, experts[1] + w1, experts[2] + col1, experts[3] + row1)
    return Placement(
        tuple((units, lw, ot) for units, (lw, ot) in split.items()),
        whole_linear,
        whole_other,
        experts if experts[0] else None,
    )


def layer_params(
    model: ModelSpec, kind: LayerKind, tp: Num, ep: Num = 1, etp: Num = 1
) -> LayerParams:
    """Per-GPU parameters of one layer of ``kind``, placed as ``rank_share`` places each linear
    (summed by TP unit count first)."""
    for known, placement in zip(model.kinds, placements(model), strict=True):
        if known is kind:
            return LayerParams(*place_layer(placement, tp, ep, etp))
    return LayerParams(*place_layer(_placement(kind), tp, ep, etp))


def place_layer(placement: Placement, tp: Num, ep: Num, etp: Num) -> tuple[Num, Num, Num, Num, Num]:
    """``layer_params`` of a kind's ``placements`` entry, as a plain tuple in ``LayerParams``
    order (the memory estimate's inner step: no named-tuple construction)."""
    split, whole_lw, whole_other, experts = placement
    lw: Num = whole_lw
    other: Num = whole_other
    for units, w, o in split:
        held: Num = units // tp
        if type(held) is not int or held < 1:  # at least one unit (KV heads replicate)
            held = maximum(held, 1)
        frac = held / units
        lw = lw + w * frac
        if o:  # split biases and router weights, which most layers lack
            other = other + o * frac
    ew: Num = 0
    eo: Num = 0
    if experts is not None:
        copies, w1, col1, row1 = experts
        held = copies // ep
        ew, eo = w1 * held / etp, col1 * held / etp + row1 * held
    return lw, other, ew, eo, lw + other + ew + eo


def rank_share(
    split: str, units: int, copies: int, w: int, b: int, tp: Num, ep: Num, etp: Num
) -> tuple[Num, Num]:
    """What one GPU holds of ``w`` weight and ``b`` bias elements of linears that shard alike,
    as (weights, biases): ``place_layer``'s rule for one group. Routed experts (``copies > 1``):
    ``copies // ep`` whole experts, each split over ETP (a row-parallel bias stays whole).
    Others split over TP by whole units (heads, KV heads, features), at least one per rank, so
    KV heads replicate when there are more ranks than heads; replicated linears (router, MLA
    down-projections) stay whole."""
    lw, other, ew, eo, _ = place_layer(_linear_placement(split, units, copies, w, b), tp, ep, etp)
    return lw + ew, other + eo


@per_model
def _linears(model: ModelSpec) -> tuple[tuple[str, int, int, int, int], ...]:
    """Every distinct linear shape of the model's layer kinds, as ``rank_share`` reads it."""
    return tuple(
        {
            (m.tp, m.units, m.copies, m.weight_params, m.bias_params): None
            for kind in model.kinds
            for m in kind.linears
        }
    )


def largest_linear(model: ModelSpec, tp: Num, ep: Num, etp: Num) -> Num:
    """The most elements one GPU holds of a single decoder-layer parameter: ``rank_share`` of
    each linear shape, the largest. Routed experts count as one parameter of all the local
    experts of a projection, as PyTorch MoE layers store them (one 3D weight, grouped GEMM)."""
    out: Num = 0
    for split, units, copies, w, b in _linears(model):
        weights, biases = rank_share(split, units, copies, w, b, tp, ep, etp)
        out = maximum(out, weights + biases)
    return out


def stage_kind_counts(
    model: ModelSpec,
    pp: Num,
    vp: Num,
    stage: Num,
    stage_layers: tuple[int, ...] | None = None,
) -> list[Num]:
    """Layers of each kind on pipeline rank ``stage`` (all of its virtual chunks ``stage``,
    ``stage + pp``, ... of ``num_layers / (pp vp)`` layers each, or of ``stage_layers``' counts
    for an uneven split)."""
    if stage_layers is not None:
        return _uneven_counts(model, int(pp), stage_layers, int(stage))
    if len(model.kinds) == 1:
        return [model.num_layers // pp + 0 * stage]
    if type(pp) is int and pp == 1:  # one stage holds every layer
        return list(model.kind_counts)
    chunk = model.num_layers // (pp * vp)
    one = type(vp) is int and type(pp) is int and type(stage) is int  # one layout: plain indexing
    counts: list[Num] = []
    for prefix in model.kind_prefix_counts:
        total: Num = 0
        for j in range(int(vp) if one else int(numpy().max(vp))):
            first = (j * pp + stage) * chunk
            if one:
                total += prefix[int(first + chunk)] - prefix[int(first)]
                continue
            # Layouts with fewer virtual stages than j take nothing from chunk j.
            first = where(j < vp, first, 0)
            last = where(j < vp, first + chunk, 0)
            total = total + take(prefix, last) - take(prefix, first)
        counts.append(total)
    return counts


def with_mtp(model: ModelSpec, counts: list[Num], last: Num, mtp: int) -> list[Num]:
    """``counts`` of a stage's decoder layers by kind, with the ``mtp`` multi-token-prediction
    depths' layers (``ModelSpec.mtp_module`` each) where ``last`` (the last pipeline stage,
    where Megatron-Core builds them without a layout that says otherwise)."""
    if not mtp:
        return counts
    out = list(counts)
    for k in model.mtp_module:
        out[k] = out[k] + last * mtp
    return out


def _uneven_counts(
    model: ModelSpec, pp: int, stage_layers: tuple[int, ...], stage: int
) -> list[Num]:
    """``stage_kind_counts`` of one rank under an explicit split (one layout)."""
    starts = [0]
    for n in stage_layers:
        starts.append(starts[-1] + n)
    counts: list[Num] = []
    for prefix in model.kind_prefix_counts:
        counts.append(
            sum(
                prefix[starts[v + 1]] - prefix[starts[v]]
                for v in range(stage, len(stage_layers), pp)
            )
        )
    return counts


class StageShape(NamedTuple):
    """Pipeline ranks alike (one virtual chunk each): the first of them, its layers of each
    kind, whether it holds the input embedding (the first) or the output head (the last), and
    how many ranks are like it."""

    stage: int
    counts: tuple[int, ...]
    first: bool
    last: bool
    ranks: int = 1


@per_model
def distinct_stages(
    model: ModelSpec, pp: int, stage_layers: tuple[int, ...] | None = None
) -> tuple[StageShape, ...]:
    """The pipeline ranks of a ``pp``-stage serving replica that differ, in stage order, with
    ``stage_layers`` decoder layers each (``Parallelism.stage_layers``: the serving engine's
    split, ``layout.pipeline.serving_split``). Without a split, ``num_layers / pp`` each where
    ``pp`` divides the layers, else vLLM's split (``vllm_stage_layers``, the default engine's).
    Ranks alike hold the same parameters and cache and take the same time, so an estimate
    evaluates each shape once; the most loaded rank is then the first of equals, as in a scan
    of every rank. A uniform model has at most three shapes (first, middle, last) per distinct
    layer count whatever ``pp``."""
    split = serving_layer_split(model, pp, stage_layers)
    shapes: dict[tuple[tuple[int, ...], bool, bool], list[int]] = {}
    for stage in range(pp):
        counts = tuple(int(n) for n in stage_kind_counts(model, pp, 1, stage, split))
        shapes.setdefault((counts, stage == 0, stage == pp - 1), []).append(stage)
    return tuple(
        StageShape(stages[0], *shape, ranks=len(stages)) for shape, stages in shapes.items()
    )


def serving_layer_split(
    model: ModelSpec, pp: int, stage_layers: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """The decoder layers on each rank of a ``pp``-stage serving replica: ``stage_layers``
    (``Parallelism.stage_layers``) where given, else ``num_layers / pp`` each where ``pp``
    divides the layers, else vLLM's split (``layout.pipeline.vllm_stage_layers``, the default
    engine's)."""
    if stage_layers is not None:
        return stage_layers
    if not model.num_layers % pp:
        return (model.num_layers // pp,) * pp
    # imported here: ``layout.pipeline`` imports this module
    from estimator.layout.pipeline import vllm_stage_layers

    return vllm_stage_layers(model.num_layers, pp)


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
    counts: Sequence[Num] | None = None,
) -> StageParams:
    """Parameters on pipeline rank ``stage``. ``counts`` (``stage_kind_counts``) may be passed
    in when the caller already has them."""
    if counts is None:
        counts = stage_kind_counts(model, pp, vp, stage)
    layers = [layer_params(model, kind, tp, ep, etp) for kind in model.kinds]
    zero: Num = 0
    lw = other = ew = eo = largest = zero
    for (lw_k, other_k, ew_k, eo_k, total_k), n in zip(layers, counts, strict=True):
        lw, other = lw + n * lw_k, other + n * other_k
        ew, eo = ew + n * ew_k, eo + n * eo_k
        if type(n) is int:  # one layout: a kind present on the stage, or not
            if n > 0:
                largest = maximum(largest, total_k)
        else:
            largest = maximum(largest, where(n > 0, total_k, 0))
    vocab_rows = padded_vocab(model, tp) // tp
    first_extra, last_extra = embedding_extras(model)
    first = stage == 0
    last = stage == pp - 1
    # The head exists on the last stage unless it is the tied embedding already held there.
    head_rows = where(model.tie_embeddings & first, 0, vocab_rows)
    embedding = first * (vocab_rows * model.embed_dim + first_extra) + last * (
        head_rows * model.embed_dim + last_extra
    )
    return StageParams(lw, other + embedding, ew, eo, embedding, largest)


@per_model
def embedding_extras(model: ModelSpec) -> tuple[int, int]:
    """Parameters beside the vocabulary rows: on the first stage position embeddings, embedding
    projections and norm; on the last the final norm and the hyper-connection head."""
    first = (
        model.position_embedding_params
        + sum(m.params for m in model.embedding_projections)
        + (model.embedding_norm.params if model.embedding_norm else 0)
    )
    last = (model.final_norm.params if model.final_norm else 0) + model.stream_head_params
    return first, last
