"""What a training memory estimate reads of a model that no layout changes, once per model: the
bytes each parameter takes in each role (weights, fp8 weight cache, gradients, master weights,
optimizer states), each layer kind's placement and saved-activation regions, and the adapters a
LoRA or QLoRA setting adds (``estimator.finetune``).

Optimizer states follow the optimizers' own layouts: AdamW keeps two moments (Loshchilov &
Hutter 2019), 8-bit Adam two blockwise 8-bit ones (Dettmers et al. 2022), SGD with momentum
one, Adafactor factored second moments (Shazeer & Stern 2018).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from estimator.finetune import (
    FULL,
    Adapter,
    Adapters,
    FineTune,
    adapters,
    linear_weight_bytes,
)
from estimator.finetune import check_precision as check_finetune_precision
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision, trained_weight_bytes
from estimator.layout.sharding import (
    Placement,
    embedding_extras,
    place_layer,
    placements,
)
from estimator.memo import per_model
from estimator.memory.activation_bytes import layer_regions
from estimator.memory.activations import HF_STYLE, Region
from estimator.xp import Num

__all__ = [
    "OPTIMIZERS",
    "AdapterTables",
    "BytesPerParam",
    "MemoryTables",
    "Optimizer",
    "memory_tables",
    "optimizer_state_bytes_per_param",
    "placed_layers",
]

Optimizer = Literal["adamw", "adam8bit", "sgd", "adafactor"]
# Optimizer-state elements per parameter and their format; adafactor keeps factored second
# moments (row + column statistics) instead, see ``_optimizer_state_bytes``.
OPTIMIZERS: dict[str, tuple[int, str]] = {
    "adamw": (2, "fp32"),
    "adam8bit": (2, "fp8-adam"),
    "sgd": (1, "fp32"),
    "adafactor": (0, "fp32"),
}


def optimizer_state_bytes_per_param(
    model: ModelSpec, optimizer: str, precision: Precision | None = None
) -> float:
    """Optimizer-state bytes per parameter the optimizer holds (AdamW: two moments in the
    precision's ``optimizer_states`` format, fp32 by default)."""
    return float(_optimizer_state_bytes(model, optimizer, 1, _state_dtype(optimizer, precision)))


def _state_dtype(optimizer: str, precision: Precision | None) -> str:
    """The moments' format: the optimizer's own (8-bit Adam's blockwise 8 bits), else the
    precision's ``optimizer_states`` (bf16 for torchtune's and LitGPT's pure-bf16 runs)."""
    own = OPTIMIZERS[optimizer][1]
    if own != "fp32" or precision is None:
        return own
    return precision.optimizer_states or own


def _optimizer_state_bytes(model: ModelSpec, optimizer: str, params: Num, dtype: str) -> Num:
    count = OPTIMIZERS[optimizer][0]
    if optimizer == "adafactor":
        return params * _adafactor_ratio(model) * DTYPES[dtype].bytes
    return params * count * DTYPES[dtype].bytes


def _adafactor_ratio(model: ModelSpec) -> float:
    """Factored second-moment elements per parameter: a (rows x cols) matrix keeps rows + cols
    statistics, vectors keep themselves (Shazeer & Stern 2018). Applied as a model-wide ratio."""
    stats = params = 0
    for kind, n in zip(model.kinds, model.kind_counts, strict=True):
        for m in kind.linears:
            stats += n * m.copies * (m.in_features + m.out_features) + n * m.bias_params
            params += n * m.params
        stats += n * sum(x.params for x in kind.norms)
        params += n * sum(x.params for x in kind.norms)
    return stats / params if params else 1.0


@dataclass(frozen=True, slots=True)
class BytesPerParam:
    """Bytes a parameter takes in each role: the weights of the linear layers and of everything
    else (norms, embeddings: the activation dtype), the fp8 weight cache, the gradients, the fp32
    master weights, the optimizer states, and the routed experts' weights. (Slots: the terms
    read these on every stage.)"""

    linear_weights: float
    other_weights: float
    weight_cache: float
    gradients: float
    master_weights: float
    optimizer_states: float
    expert_weights: float


class AdapterTables(NamedTuple):
    """What a LoRA or QLoRA estimate adds (``estimator.finetune``): each layer kind's adapter
    placement and the bytes per token its adapters save for backward (the ``r``-wide output of
    ``A`` that ``B``'s weight gradient reads, whole on every TP rank: ``A x`` of a row-parallel
    base is all-reduced), the adapters' bytes per parameter of weights (the precision's weight
    format) and optimizer states, and whether the base is NF4 (a dequantization buffer)."""

    placements: tuple[Placement, ...]
    saved_per_token: tuple[float, ...]
    weight_bytes: float
    state_bytes: float
    quantized: bool


class MemoryTables(NamedTuple):
    """What a memory estimate reads of a model that no layout changes, for one set of dtypes,
    optimizer, attention kernel, activation convention and fine-tuning setting: bytes per
    parameter in each role; each layer kind's placement and saved-activation regions; the
    embedding's extra parameters; the adapters (None for full fine-tuning)."""

    bytes_per_param: BytesPerParam
    placements: tuple[Placement, ...]
    regions: tuple[tuple[tuple[Region, float], ...], ...]
    embedding_extras: tuple[int, int]
    adapters: AdapterTables | None


@per_model
def placed_layers(
    model: ModelSpec, tp: int, ep: int, etp: int
) -> tuple[tuple[Num, Num, Num, Num, Num], ...]:
    """``place_layer`` of each layer kind's placement for one layout's sizes (the single
    estimate's: a layout's arrays in a sweep are placed each time)."""
    return tuple(place_layer(placement, tp, ep, etp) for placement in placements(model))


@per_model
def memory_tables(
    model: ModelSpec,
    precision: Precision,
    optimizer: str,
    flash: bool,
    convention: str,
    finetune: FineTune | None,
    modules: tuple[str, ...] = (),
    any_layout: bool = False,
) -> MemoryTables:
    """``MemoryTables`` of a model for one precision, optimizer, attention kernel, activation
    convention and fine-tuning setting (which is resolved and checked here, so every estimate
    refuses a bad one). QLoRA stores the linear weights in NF4 and keeps the routed experts,
    fused parameters that bitsandbytes does not quantize, in the compute dtype. ``modules``:
    the selective recompute modules whose tensors are not kept (``recomputed_items``). A
    quantized weight or weight cache holds the copies the backward reads
    (``trained_weight_bytes``; ``any_layout``: the GPU runs fp8 GEMMs in every layout)."""
    finetune = finetune or FULL  # None: full fine-tuning (a cheaper memo key than the record)
    lora = adapters(model, finetune)  # validates the setting against the model
    check_finetune_precision(finetune, precision)
    act_b = DTYPES[precision.activations].bytes
    quantized = finetune.method == "qlora"
    return MemoryTables(
        BytesPerParam(
            linear_weights=(
                linear_weight_bytes(finetune, precision)
                if quantized
                else trained_weight_bytes(precision.weights, any_layout)
            ),
            other_weights=act_b,
            weight_cache=trained_weight_bytes(precision.weight_cache, any_layout),
            gradients=precision.bytes("gradients"),
            master_weights=precision.bytes("master_weights"),
            optimizer_states=float(
                _optimizer_state_bytes(model, optimizer, 1, _state_dtype(optimizer, precision))
            ),
            expert_weights=(
                act_b if quantized else trained_weight_bytes(precision.expert_format, any_layout)
            ),
        ),
        placements(model),
        layer_regions(model, precision, flash, convention, _adapted(lora, convention), modules),
        embedding_extras(model),
        _adapter_tables(lora, precision, optimizer, act_b, convention) if finetune.frozen else None,
    )


def _adapted(lora: Adapters, convention: str) -> tuple[str, ...] | None:
    """The adapted module names (``q_proj`` ...) of a frozen base, for the PyTorch-module
    conventions' ``frozen_items``; None for full training or the Megatron convention."""
    if not lora.finetune.frozen or convention not in HF_STYLE:
        return None
    names = {a.module.rpartition(".")[2] for kind in lora.per_kind for a in kind}
    return tuple(sorted(names))


def _adapter_tables(
    lora: Adapters, precision: Precision, optimizer: str, act_b: float, convention: str
) -> AdapterTables:
    count, fmt = OPTIMIZERS[optimizer][0], _state_dtype(optimizer, precision)
    # An adapter's input dropout (PEFT's nn.Dropout before lora_A) keeps the dropped-out input
    # lora_A saves and, eager, its bool mask (a compiled graph regenerates the mask from its
    # seed); measured on PEFT-wrapped layers in the tests.
    mask = 0.0 if convention == "compiled" else 1.0
    dropped = (act_b + mask) if lora.finetune.dropout > 0 else 0.0
    if optimizer == "adafactor":  # each of A and B keeps its row and column statistics
        every = [a for kind in lora.per_kind for a in kind]
        stats = sum(a.in_features + 2 * a.rank + a.out_features for a in every)
        state = stats / sum(a.params for a in every) * DTYPES[fmt].bytes
    else:
        state = count * DTYPES[fmt].bytes
    return AdapterTables(
        tuple(_adapter_placement(kind) for kind in lora.per_kind),
        tuple(
            sum(a.rank for a in kind) * act_b + dropped * sum(a.in_features for a in kind)
            for kind in lora.per_kind
        ),
        DTYPES[precision.weights].bytes,
        float(state),
        lora.finetune.method == "qlora",
    )


def _adapter_placement(kind: tuple[Adapter, ...]) -> Placement:
    """A layer kind's adapters' ``Placement``s merged into one."""
    split: list[tuple[int, int, int]] = []
    whole = 0
    for a in kind:
        one = a.placement()
        split += one.split
        whole += one.whole_linear
    return Placement(tuple(split), whole, 0, None)
