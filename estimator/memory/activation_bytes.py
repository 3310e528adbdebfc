"""Activation bytes: what the saved tensors of ``activations`` (each layer kind's items, by
convention and recompute policy) take on one GPU for one micro-batch of a layout, and what the
embedding and the output head save on the first and last pipeline stages.

An item's bytes are its elements per token times its format's bytes (``act``: the activation
dtype, ``gemm``: the GEMM-input dtype, fp8 copies under fp8 recipes, ``mask``: one byte,
``fp32``: statistics) times its region's share on this GPU (``region_scales``: split over TP,
with sequence parallelism, over the expert-parallel ranks, per key for eager score matrices).
The item lists do not depend on the layout: each kind's are summed by region once per model and
dtypes (``layer_regions``), so a layout's bytes are a handful of multiplications
(``saved_bytes``). Korthikanti et al. 2022 (Sec. 4, eq. 1-2) for the Megatron convention; the
PyTorch-module conventions as measured in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from estimator.inputs.architecture import LayerKind
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.memo import per_model
from estimator.memory.activations import (
    HF_STYLE,
    MASK_BYTES,
    STATS_BYTES,
    TOKEN_ID_BYTES,
    ActivationItem,
    Region,
    clamps_experts,
    compiled_layer_items,
    frozen_items,
    hf_layer_items,
    hf_norm_items,
    layer_items,
    op_saved_items,
    recomputed_items,
)
from estimator.xp import Num, where

__all__ = [
    "ActivationShard",
    "embedding_activation_bytes",
    "head_activation_bytes",
    "hf_checkpoint_shared_bytes",
    "item_bytes",
    "layer_activation_bytes",
    "layer_regions",
    "loss_backward_bytes",
    "recomputed_layer_input_bytes",
    "region_scales",
    "saved_bytes",
]


def _fmt_bytes(fmt: str, precision: Precision) -> float:
    return _fmt_table(precision.activations, precision.gemm_inputs)[fmt]


@cache
def _fmt_table(activations: str, gemm_inputs: str) -> dict[str, float]:
    """Bytes per element of each item format, for a precision's activation and GEMM-input
    dtypes."""
    act = DTYPES[activations].bytes
    return {
        "act": act,
        "gemm": DTYPES[gemm_inputs].bytes,
        "mask": MASK_BYTES,
        "fp32": STATS_BYTES,
        "act_if_not_fp32": 0.0 if activations == "fp32" else act,
    }


@dataclass(frozen=True, slots=True)
class ActivationShard:
    """What of one micro-batch's activations one GPU keeps: ``tokens`` on it (``s * b / cp``),
    ``keys`` each query attends over in the score matrices (``s``, eager attention only), the
    layout's ``tp``, sequence parallelism ``sp`` and expert TP ``etp`` (ints, or a sweep's
    arrays), and the ``recompute`` policy."""

    tokens: Num
    keys: Num
    tp: Num
    sp: Num
    etp: Num
    recompute: str


def layer_activation_bytes(
    model: ModelSpec,
    kind: LayerKind,
    precision: Precision,
    shard: ActivationShard,
    *,
    flash: bool,
    convention: str = "megatron",
) -> Num:
    """Bytes one layer keeps for one micro-batch on one GPU, as ``shard`` splits them. Full
    recompute keeps only the layer input; selective recompute drops the score matrices."""
    tokens, tp, sp = shard.tokens, shard.tp, shard.sp
    if shard.recompute == "full":
        return recomputed_layer_input_bytes(model, precision, tokens, tp, sp)
    scales = region_scales(keys=shard.keys, tp=tp, sp=sp, etp=shard.etp, recompute=shard.recompute)
    return saved_bytes(_region_bytes(model, kind, flash, convention, precision), scales, tokens)


def recomputed_layer_input_bytes(
    model: ModelSpec, precision: Precision, tokens: Num, tp: Num, sp: Num
) -> Num:
    """What a fully recomputed layer keeps: its input, the residual (``ModelSpec.residual_width``;
    split over TP with sequence parallelism)."""
    return tokens * model.residual_width * DTYPES[precision.activations].bytes / where(sp, tp, 1)


def saved_bytes(
    regions: Sequence[tuple[Region, float]], scales: dict[Region, Num], tokens: Num
) -> Num:
    """A layer's saved bytes from its unsplit bytes per token by region (``layer_regions``) and
    the layout's ``region_scales``."""
    per_token: Num = 0
    for region, unsplit in regions:
        per_token = per_token + unsplit * scales[region]
    return tokens * per_token


def region_scales(
    *, keys: Num, tp: Num, sp: Num, etp: Num, recompute: str, expert_load: Num = 1.0
) -> dict[Region, Num]:
    """What one GPU keeps of an item's per-token bytes, by region: ``seq`` items split over TP
    only with sequence parallelism, ``tp`` and ``expert_i`` items always, ``full`` items never,
    routed tokens (``expert_h``) as all-gathered over ETP, score matrices per key unless selective
    recompute drops them; the routed-token regions at ``expert_load`` times the balanced share
    (the busiest expert-parallel rank's); reduce-scatter outputs (``scatter``) a shard each under
    sequence parallelism over more than one rank, none without."""
    per_rank = 1 / tp
    split = where(sp, tp, 1)
    return {
        "seq": 1 / split,
        "tp": per_rank,
        "expert_i": per_rank * expert_load,
        "full": 1,
        "expert_h": etp / tp * expert_load,
        "scores": 0 if recompute == "selective" else keys / tp,
        "scatter": (split != 1) / split,
    }


def item_bytes(
    item: ActivationItem,
    precision: Precision,
    *,
    tokens: Num,
    keys: Num,
    tp: Num,
    sp: Num,
    etp: Num,
    recompute: str,
) -> Num:
    """Bytes one saved tensor takes on one GPU for one micro-batch (the per-item view of
    ``layer_activation_bytes``, which sums these)."""
    fmt_bytes = _fmt_table(precision.activations, precision.gemm_inputs)
    scales = region_scales(keys=keys, tp=tp, sp=sp, etp=etp, recompute=recompute)
    return tokens * item.elems * fmt_bytes[item.fmt] * scales[item.region]


@per_model
def _coefficients(
    model: ModelSpec,
    kind_index: int,
    flash: bool,
    convention: str,
    adapted: tuple[str, ...] | None = None,
    modules: tuple[str, ...] = (),
) -> tuple[tuple[Region, str, int], ...]:
    """The kind's saved items summed by (region, format): what ``layer_activation_bytes`` needs
    (the item lists do not depend on the layout); ``adapted``: a frozen base's adapted modules
    (``frozen_items``), None for full training; ``modules``: Megatron-Core's selective recompute
    modules (``recomputed_items``)."""
    kind = model.kinds[kind_index]
    items = _ITEMS.get(convention, layer_items)(model, kind, flash)
    if adapted is not None and convention in HF_STYLE:
        items = frozen_items(items, adapted, convention)
    if modules:
        dropped = recomputed_items(kind, modules, clamps_experts(model))
        items = tuple(it for it in items if it.name not in dropped)
    acc: dict[tuple[Region, str], int] = {}
    for it in items:
        acc[it.region, it.fmt] = acc.get((it.region, it.fmt), 0) + it.elems
    return tuple((r, f, n) for (r, f), n in acc.items())


# Item lists by convention; ``op`` is what the per-op checkpointing policy keeps of a layer.
_ITEMS = {"hf": hf_layer_items, "compiled": compiled_layer_items, "op": op_saved_items}


def _region_bytes(
    model: ModelSpec, kind: LayerKind, flash: bool, convention: str, precision: Precision
) -> tuple[tuple[Region, float], ...]:
    """The kind's saved bytes per token before any split, summed by region (at most six, so
    ``saved_bytes`` scales each region once), computed once per model and dtypes."""
    return layer_regions(model, precision, flash, convention)[model.kinds.index(kind)]


@per_model
def layer_regions(
    model: ModelSpec,
    precision: Precision,
    flash: bool,
    convention: str,
    adapted: tuple[str, ...] | None = None,
    modules: tuple[str, ...] = (),
) -> tuple[tuple[tuple[Region, float], ...], ...]:
    """``_region_bytes`` of every layer kind, in ``model.kinds`` order (one look-up per
    estimate, computed once per model, attention kernel, convention, precision and, for a
    frozen base, adapted modules, or Megatron-Core's recompute ``modules``)."""
    return tuple(
        _sum_by_region(model, i, flash, convention, precision, adapted, modules)
        for i in range(len(model.kinds))
    )


def _sum_by_region(
    model: ModelSpec,
    kind_index: int,
    flash: bool,
    convention: str,
    precision: Precision,
    adapted: tuple[str, ...] | None = None,
    modules: tuple[str, ...] = (),
) -> tuple[tuple[Region, float], ...]:
    fmt_bytes = _fmt_table(precision.activations, precision.gemm_inputs)
    acc: dict[Region, float] = {}
    for region, fmt, elems in _coefficients(model, kind_index, flash, convention, adapted, modules):
        acc[region] = acc.get(region, 0) + elems * fmt_bytes[fmt]
    return tuple(acc.items())


def embedding_activation_bytes(
    model: ModelSpec,
    precision: Precision,
    tokens: Num,
    tp: Num,
    sp: Num,
    convention: str = "megatron",
    seq_len: Num = 0,
) -> Num:
    """First stage, per micro-batch: token ids, and the embedding dropout output if any.

    The ``hf`` convention adds the rotary cos/sin tables every layer's rotation saves (shared,
    ``[1, s, head_dim]`` each).
    """
    drop = model.hidden_size * DTYPES[precision.activations].bytes if model.hidden_dropout else 0
    extra: Num = 0
    if convention in HF_STYLE:
        extra = 2 * seq_len * model.head_dim * DTYPES[precision.activations].bytes
    return tokens * (TOKEN_ID_BYTES + drop / where(sp, tp, 1)) + extra


def hf_checkpoint_shared_bytes(
    model: ModelSpec, precision: Precision, seq_len: Num, micro_batch: Num, flash: bool
) -> Num:
    """With HF gradient checkpointing each layer saves its inputs; besides the hidden states
    those are shared by all layers: cos/sin, the position ids and, for eager attention, the
    materialized ``[b, 1, s, s]`` causal mask."""
    act = DTYPES[precision.activations].bytes
    mask = 0 if flash else micro_batch * seq_len * seq_len * act
    return 2 * seq_len * model.head_dim * act + seq_len * TOKEN_ID_BYTES + mask


def head_activation_bytes(
    model: ModelSpec,
    precision: Precision,
    tokens: Num,
    tp: Num,
    sp: Num,
    vocab_per_rank: Num,
    convention: str = "megatron",
) -> Num:
    """Last stage, one micro-batch: final-norm input, head input, and the logits the
    cross-entropy keeps in fp32 (the fp32 upcast of the vocabulary-parallel loss). The ``hf``
    convention's RMSNorm keeps its fp32 copy and rsqrt, and the loss its int64 labels; the
    ``compiled`` convention's loss (``torch.compile``'d, as torchtune and TorchTitan compile it
    with the layers; the final norm and head stay eager) keeps the logits in the model dtype and
    two fp32 statistics per token instead of the fp32 log-softmax (measured in the tests)."""
    h = model.hidden_size
    act, gemm = DTYPES[precision.activations].bytes, DTYPES[precision.gemm_inputs].bytes
    if convention in HF_STYLE:
        norm = sum(
            it.elems * _fmt_bytes(it.fmt, precision) for it in hf_norm_items("norm", h, 1, "seq")
        )
        loss = vocab_per_rank * STATS_BYTES  # eager: the fp32 log-softmax output
        if convention == "compiled":
            loss = vocab_per_rank * act + 2 * STATS_BYTES
        return tokens * ((norm + h * gemm) / where(sp, tp, 1) + loss + TOKEN_ID_BYTES) + STATS_BYTES
    return tokens * ((h * act + h * gemm) / where(sp, tp, 1) + vocab_per_rank * STATS_BYTES)


def loss_backward_bytes(
    tokens: Num, vocab_per_rank: Num, convention: str, precision: Precision
) -> Num:
    """What the loss's backward adds to the saved logits at the first backward, the step's
    peak. Eager (``hf``): ``log_softmax``'s backward holds its saved fp32 output (counted in
    ``head_activation_bytes``), the dense fp32 gradient ``nll_loss``'s backward hands it, and
    the fp32 gradient it returns, ``[tokens, vocab]`` each (aten ``_log_softmax_backward_data``).
    Compiled: one fused kernel writes the logits' gradient in the model dtype. Megatron's fused
    vocabulary-parallel cross-entropy computes its gradient in place: nothing is added."""
    if convention == "hf":
        return 2 * tokens * vocab_per_rank * STATS_BYTES
    if convention == "compiled":
        return tokens * vocab_per_rank * DTYPES[precision.activations].bytes
    return 0
