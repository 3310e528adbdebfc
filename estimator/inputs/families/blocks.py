"""The pieces families build their layers from, named as ``transformers`` names the modules:
attention projections (separate or fused q/k/v), gated MLPs, routed experts and their router,
norms, the attention core, and the per-layer sliding windows. A family module picks and
parameterizes them; nothing here knows a family."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from estimator.errors import SpecError
from estimator.inputs.architecture import (
    AttentionCore,
    Component,
    LayerKind,
    Linear,
    Norm,
    Param,
    RecurrentCore,
)
from estimator.inputs.reader import ConfigReader

__all__ = [
    "PLAIN_LAYER_TYPES",
    "Layer",
    "attention_linears",
    "every_nth_global",
    "fused_qkv",
    "gated_mlp",
    "kinds_from_layers",
    "kv_heads",
    "layer_types",
    "ln",
    "rms",
    "routed_experts",
    "router",
    "sliding_windows",
    "span",
    "standard_core",
    "typed_windows",
]


class Layer(NamedTuple):
    """One decoder layer as a family describes it; identical layers share a kind. ``core`` is
    its attention (None for a recurrent or MLP-only layer), ``mixer`` its recurrent core."""

    name: str
    linears: tuple[Linear, ...]
    norms: tuple[Norm, ...]
    core: AttentionCore | None
    parallel: bool = False
    mixer: RecurrentCore | None = None
    extras: tuple[Param, ...] = ()


def attention_linears(
    h: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool, o_bias: bool
) -> list[Linear]:
    """``self_attn.{q,k,v,o}_proj``: q and o split by query heads, k and v by KV heads."""
    return [
        Linear("self_attn.q_proj", h, heads * head_dim, qkv_bias, "attention", "column", heads),
        Linear(
            "self_attn.k_proj", h, kv_heads * head_dim, qkv_bias, "attention", "column", kv_heads
        ),
        Linear(
            "self_attn.v_proj", h, kv_heads * head_dim, qkv_bias, "attention", "column", kv_heads
        ),
        Linear("self_attn.o_proj", heads * head_dim, h, o_bias, "attention", "row", heads),
    ]


def fused_qkv(
    name: str, h: int, heads: int, kv_heads: int, head_dim: int, bias: bool
) -> list[Linear]:
    """One fused q/k/v module, kept as three parts so TP can shard q and kv heads differently."""
    return [
        Linear(f"{name}#q", h, heads * head_dim, bias, "attention", "column", heads),
        Linear(f"{name}#k", h, kv_heads * head_dim, bias, "attention", "column", kv_heads),
        Linear(f"{name}#v", h, kv_heads * head_dim, bias, "attention", "column", kv_heads),
    ]


def gated_mlp(prefix: str, h: int, inter: int, bias: bool, component: Component) -> list[Linear]:
    """``{gate,up,down}_proj`` of a gated (SwiGLU/GeGLU) MLP."""
    return [
        Linear(f"{prefix}.gate_proj", h, inter, bias, component, "column"),
        Linear(f"{prefix}.up_proj", h, inter, bias, component, "column"),
        Linear(f"{prefix}.down_proj", inter, h, bias, component, "row"),
    ]


def routed_experts(
    prefix: str, h: int, inter: int, experts: int, top_k: int, bias: bool = False
) -> list[Linear]:
    """transformers 5 stores experts fused: ``gate_up_proj`` [E, 2I, h], ``down_proj`` [E, h, I]
    (and, where ``bias``, ``gate_up_proj_bias`` [E, 2I] and ``down_proj_bias`` [E, h])."""
    return [
        Linear(
            f"{prefix}.gate_up_proj",
            h,
            2 * inter,
            bias,
            "experts",
            "column",
            2 * inter,
            experts,
            top_k,
        ),
        Linear(f"{prefix}.down_proj", inter, h, bias, "experts", "row", inter, experts, top_k),
    ]


def router(name: str, h: int, experts: int, bias: bool = False) -> Linear:
    """The gate scoring each token against every expert (replicated on every TP rank)."""
    return Linear(name, h, experts, bias, "router", "replicated")


def standard_core(heads: int, kv_heads: int, head_dim: int, window: int | None) -> AttentionCore:
    """Softmax attention over ``heads`` query heads sharing ``kv_heads`` K/V heads (GQA), a KV
    cache of K and V per KV head."""
    return AttentionCore(heads, kv_heads, head_dim, head_dim, window, 2 * kv_heads * head_dim)


def kv_heads(c: ConfigReader, heads: int, default: int) -> int:
    """KV heads (grouped-query attention): each KV head serves a whole group of query heads."""
    kv = c.integer("num_key_value_heads", default=default)
    if heads % kv:
        raise SpecError(
            "config.num_key_value_heads", f"must divide num_attention_heads={heads}", kv
        )
    return kv


def sliding_windows(c: ConfigReader, layers: int, default_sliding: bool) -> tuple[int | None, ...]:
    """Per-layer sliding window, from ``layer_types`` when present (transformers 5 convention)."""
    window = c.opt_integer("sliding_window")
    types = c.raw.get("layer_types")
    if isinstance(types, list):
        odd = sorted({str(t) for t in types} - {"full_attention", "sliding_attention"})
        if odd:
            raise SpecError(
                "config.layer_types",
                f"layer types {', '.join(odd)} are not modelled for {c.model_type!r} (only full"
                " and sliding-window attention layers)",
                odd[0],
            )
    if isinstance(types, list) and len(types) == layers and window:
        return tuple(window if t == "sliding_attention" else None for t in types)
    if c.raw.get("use_sliding_window") is False or not window:
        return (None,) * layers
    if "use_sliding_window" in c.raw:  # Qwen2/Qwen3: windows on layers >= max_window_layers
        first = c.integer("max_window_layers", default=layers, minimum=0)
        return tuple(window if i >= first else None for i in range(layers))
    return (window,) * layers if default_sliding else (None,) * layers


def layer_types(
    c: ConfigReader, layers: int, allowed: tuple[str, ...], default: Sequence[str]
) -> tuple[str, ...]:
    """Each layer's attention type: the config's ``layer_types`` (one per layer, as transformers
    5 requires), else ``default``, the config class's pattern; a type outside ``allowed`` is
    refused by name."""
    types = c.raw.get("layer_types")
    if types is None:
        return tuple(default)
    if not isinstance(types, list) or len(types) != layers:
        raise SpecError("config.layer_types", f"must list one type per layer ({layers})", types)
    odd = sorted({str(t) for t in types} - set(allowed))
    if odd:
        raise SpecError(
            "config.layer_types",
            f"layer types {', '.join(odd)} are not modelled for {c.model_type!r} (only"
            f" {', '.join(allowed)})",
            odd[0],
        )
    return tuple(str(t) for t in types)


def span(c: ConfigReader, name: str, default: int) -> int:
    """A sliding window's or an attention chunk's length in tokens: the config class's
    ``default`` where the config leaves it out; refused where the config sets it to null, which
    transformers' masks and caches cannot run the layers that use it with."""
    if name in c.raw and c.raw[name] is None:
        raise SpecError(f"config.{name}", "must be a number of tokens for the layers that use it")
    return c.integer(name, default=default)


PLAIN_LAYER_TYPES = ("full_attention", "sliding_attention")


def every_nth_global(c: ConfigReader, layers: int, every: Callable[[], int]) -> tuple[str, ...]:
    """Each layer's attention type where a config class fills ``layer_types`` by a period
    (Gemma 3, OLMo 3, EXAONE 4): the config's list when it gives one, else every ``every()``-th
    layer global and the others sliding; ``every`` reads the period, only where it is used."""
    if c.raw.get("layer_types") is not None:
        return layer_types(c, layers, PLAIN_LAYER_TYPES, ())
    n = every()
    return tuple(
        "full_attention" if (i + 1) % n == 0 else "sliding_attention" for i in range(layers)
    )


def typed_windows(
    c: ConfigReader, types: Sequence[str], default: int | None
) -> tuple[int | None, ...]:
    """Each layer's sliding window from its type: ``sliding_window`` tokens on the
    ``sliding_attention`` layers (``default``, the config class's, where the config leaves it
    out; required where the class has none), the whole context on the others."""
    if "sliding_attention" not in types:
        return (None,) * len(types)
    if default is None:
        default = c.opt_integer("sliding_window")
    if default is None:
        raise SpecError(
            "config.sliding_window", "must be a number of tokens for the sliding_attention layers"
        )
    window = span(c, "sliding_window", default)
    return tuple(window if t == "sliding_attention" else None for t in types)


def kinds_from_layers(layers: Sequence[Layer]) -> tuple[tuple[LayerKind, ...], tuple[int, ...]]:
    """Deduplicate per-layer descriptions into kinds plus a per-layer kind index."""
    kinds: list[LayerKind] = []
    index: list[int] = []
    for layer in layers:
        kind = LayerKind(
            layer.name,
            layer.linears,
            layer.norms,
            layer.core,
            layer.parallel,
            layer.mixer,
            layer.extras,
        )
        if kind not in kinds:
            kinds.append(kind)
        index.append(kinds.index(kind))
    return tuple(kinds), tuple(index)


def rms(name: str, size: int) -> Norm:
    """RMSNorm: a scale, no bias."""
    return Norm(name, size, False)


def ln(name: str, size: int, affine: bool = True) -> Norm:
    """LayerNorm: scale and bias, or neither (``elementwise_affine=False``)."""
    return Norm(name, size, True) if affine else Norm(name, 0, False)
