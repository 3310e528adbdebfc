"""The two shapes every family here is read into.

- ``decoder``: Llama and its descendants (pre-norm RMSNorm, rotary positions, gated MLP, an
  untied or tied head, no position table). A family reads its dimensions with ``read_dims``,
  describes each layer (``Layer``: attention, MLP or experts, norms) and hands them here.
- ``uniform_stack``: the classic LayerNorm families (GPT-2, OPT, Falcon, GPT-NeoX, BLOOM, MPT):
  one layer kind repeated, described by a ``Stack``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from estimator.catalog.files import load
from estimator.errors import SpecError
from estimator.inputs.architecture import LayerKind, Linear, Norm
from estimator.inputs.families.blocks import (
    Layer,
    attention_linears,
    fused_qkv,
    kinds_from_layers,
    kv_heads,
    rms,
    sliding_windows,
    standard_core,
)
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = [
    "Dims",
    "Prelude",
    "Stack",
    "attention_layer",
    "classic_linears",
    "config_defaults",
    "decoder",
    "layer_name",
    "post_norms",
    "prelude",
    "qk_norms",
    "read_dims",
    "read_experts",
    "standard_layer_norms",
    "uniform_stack",
    "yarn_attention_factor",
]


def config_defaults(model_type: str) -> dict[str, Any]:
    """transformers' config-class defaults of the fields a Llama-style family reads
    (``catalog/config_defaults.json``); empty for a family it does not list."""
    defaults: dict[str, Any] = load("config_defaults.json")["decoder"].get(model_type, {})
    return defaults


def default_vocab(model_type: str) -> int:
    """The vocabulary a classic family's config defaults to."""
    return int(load("config_defaults.json")["vocab"][model_type])


@dataclass(frozen=True)
class Dims:
    """What every Llama-style config gives first (in this order, so a config missing several
    is refused for the first)."""

    hidden: int
    layers: int
    heads: int
    vocab: int
    kv_heads: int
    head_dim: int
    tie: bool


def read_dims(c: ConfigReader, defaults: Mapping[str, Any]) -> Dims:
    """The dimensions, defaulting as the family's ``transformers`` config class does."""
    h = c.integer("hidden_size", default=defaults.get("hidden_size"))
    layers = c.integer("num_hidden_layers", default=defaults.get("num_hidden_layers"))
    heads = c.integer("num_attention_heads", default=defaults.get("num_attention_heads"))
    vocab = c.integer("vocab_size", default=defaults.get("vocab_size"))
    kv = kv_heads(c, heads, defaults.get("num_key_value_heads", heads))
    head_dim = c.integer("head_dim", default=defaults.get("head_dim", h // heads))
    tie = c.flag("tie_word_embeddings", bool(defaults.get("tie_word_embeddings", False)))
    return Dims(h, layers, heads, vocab, kv, head_dim, tie)


@dataclass(frozen=True)
class Prelude:
    """What every Llama-style reading starts with: the dimensions, the attention and MLP bias
    flags, and each layer's sliding window."""

    dims: Dims
    attention_bias: bool
    mlp_bias: bool
    windows: tuple[int | None, ...]


def prelude(c: ConfigReader, defaults: Mapping[str, Any], default_sliding: bool) -> Prelude:
    """``read_dims``, then ``attention_bias``, ``mlp_bias`` and the sliding windows."""
    dims = read_dims(c, defaults)
    attention_bias = c.flag("attention_bias", False)
    mlp_bias = c.flag("mlp_bias", False)
    windows = sliding_windows(c, dims.layers, default_sliding)
    return Prelude(dims, attention_bias, mlp_bias, windows)


def layer_name(moe: bool, window: int | None) -> str:
    """A layer kind's name: ``dense`` or ``moe``, ``-local`` where it attends in a window."""
    return ("moe" if moe else "dense") + ("-local" if window else "")


def standard_layer_norms(h: int) -> list[Norm]:
    return [rms("input_layernorm", h), rms("post_attention_layernorm", h)]


def post_norms(h: int) -> list[Norm]:
    """OLMo 2/3's and EXAONE 4's placement: an RMSNorm on the attention's output and one on the
    MLP's (``post_attention_layernorm``, ``post_feedforward_layernorm``), none on their inputs."""
    return [rms("post_attention_layernorm", h), rms("post_feedforward_layernorm", h)]


def qk_norms(q_size: int, k_size: int) -> list[Norm]:
    """``self_attn.q_norm`` and ``self_attn.k_norm``: RMSNorms over each head (``head_dim``)
    or, in OLMo 2/3, over the whole query and key projections."""
    return [rms("self_attn.q_norm", q_size), rms("self_attn.k_norm", k_size)]


def attention_layer(
    d: Dims,
    window: int | None,
    ffn: Sequence[Linear],
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    norms: Sequence[Norm] | None = None,
    moe: bool = False,
) -> Layer:
    """A layer of grouped-query attention (``self_attn.{q,k,v,o}_proj``) and ``ffn`` (an MLP,
    or a router and experts), with the two standard RMSNorms unless ``norms`` says otherwise."""
    attention = attention_linears(d.hidden, d.heads, d.kv_heads, d.head_dim, qkv_bias, o_bias)
    return Layer(
        layer_name(moe, window),
        (*attention, *ffn),
        tuple(standard_layer_norms(d.hidden) if norms is None else norms),
        standard_core(d.heads, d.kv_heads, d.head_dim, window),
    )


def read_experts(
    c: ConfigReader,
    experts: tuple[str, ...],
    default_experts: int | None,
    default_top_k: int | None,
    intermediate: str,
    default_intermediate: int | None,
    top_k_names: tuple[str, ...] = ("num_experts_per_tok",),
) -> tuple[int, int, int]:
    """A mixture of experts' size: routed experts (under the first of ``experts`` the config
    sets), ``num_experts_per_tok`` (or the first of ``top_k_names`` set) of them a token, each
    of ``intermediate`` width (a None default: the config must set it)."""
    count = c.integer(*experts, default=default_experts)
    top_k = c.integer(*top_k_names, default=default_top_k)
    inter = c.integer(intermediate, default=default_intermediate)
    if top_k > count:
        named = next((name for name in top_k_names if c.get(name) is not None), top_k_names[0])
        raise SpecError(f"config.{named}", f"must be <= the number of experts ({count})", top_k)
    return count, top_k, inter


def _dense_h_to_4h_names(attention: str) -> tuple[str, str, str, str]:
    """The module names BLOOM, Falcon and GPT-NeoX share: ``<attention>.query_key_value``,
    ``<attention>.dense``, ``mlp.dense_h_to_4h``, ``mlp.dense_4h_to_h``."""
    return (
        f"{attention}.query_key_value",
        f"{attention}.dense",
        "mlp.dense_h_to_4h",
        "mlp.dense_4h_to_h",
    )


def classic_linears(
    h: int,
    heads: int,
    kv_heads: int,
    inter: int,
    names: tuple[str, str, str, str] | str,
    bias: bool,
    mlp_bias: bool | None = None,
) -> tuple[Linear, ...]:
    """A classic layer's linears: fused q/k/v, the attention output, the MLP's up and down
    projections (``names`` in that order, or the attention module's name for BLOOM's, Falcon's
    and GPT-NeoX's ``query_key_value``/``dense``/``dense_h_to_4h``/``dense_4h_to_h``), biased by
    ``bias`` (the MLP's by ``mlp_bias``)."""
    qkv, out, up, down = _dense_h_to_4h_names(names) if isinstance(names, str) else names
    mlp_bias = bias if mlp_bias is None else mlp_bias
    return (
        *fused_qkv(qkv, h, heads, kv_heads, h // heads, bias),
        Linear(out, h, h, bias, "attention", "row", heads),
        Linear(up, h, inter, mlp_bias, "mlp", "column"),
        Linear(down, inter, h, mlp_bias, "mlp", "row"),
    )


def decoder(
    c: ConfigReader,
    ident: str,
    dims: Dims,
    layers: Sequence[Layer],
    *,
    moe: MoESpec | None,
    activation: str,
    notes: Sequence[str] = (),
    gated: bool = True,
    dropouts: tuple[float, float] | None = None,
    hyper_streams: int = 0,
    rope_mscale: float = 1.0,
) -> ModelSpec:
    """A Llama-style decoder: an embedding of ``vocab x hidden``, ``layers``, a final RMSNorm
    and the head (tied or not); max positions and dropouts from the config. ``gated``: the MLPs
    are gated (SwiGLU/GeGLU), not a plain up/down pair; ``dropouts``: the attention and
    residual dropout where the family reads them under its own names and defaults;
    ``hyper_streams``: the residual streams of hyper-connections and ``rope_mscale`` the rotary
    embedding's YaRN attention factor (``ModelSpec``)."""
    kinds, index = kinds_from_layers(layers)
    if dropouts is None:
        dropouts = (
            c.number("attention_dropout", default=0.0),
            c.number("resid_pdrop", "hidden_dropout", default=0.0),
        )
    return ModelSpec(
        id=ident,
        model_type=c.model_type,
        hidden_size=dims.hidden,
        num_layers=dims.layers,
        vocab_size=dims.vocab,
        max_seq_len=c.opt_integer("max_position_embeddings"),
        embed_dim=dims.hidden,
        position_embeddings=0,
        tie_embeddings=dims.tie,
        kinds=kinds,
        layer_kinds=index,
        embedding_norm=None,
        final_norm=rms("norm", dims.hidden),
        embedding_projections=(),
        mlp_activation=activation,
        gated_mlp=gated,
        norm_type="rmsnorm",
        attention_dropout=dropouts[0],
        hidden_dropout=dropouts[1],
        moe=moe,
        config=dict(c.plain),
        notes=tuple(notes),
        hyper_streams=hyper_streams,
        rope_mscale=rope_mscale,
    )


def yarn_attention_factor(c: ConfigReader) -> float:
    """The factor a YaRN rotary embedding scales its cos and sin by, as transformers computes it
    (``modeling_rope_utils._compute_yarn_parameters``): the config's ``attention_factor``, else
    ``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)`` where both are set, else
    ``get_mscale(factor)``, with ``get_mscale(s, m) = 0.1 m ln(s) + 1`` for ``s > 1`` (1
    otherwise); 1.0 without YaRN (``rope_scaling`` or ``rope_parameters``)."""
    rope = c.get("rope_scaling", "rope_parameters")
    if not isinstance(rope, Mapping) or (rope.get("rope_type") or rope.get("type")) != "yarn":
        return 1.0
    field = "rope_scaling" if c.get("rope_scaling") is not None else "rope_parameters"

    def number(key: str) -> float | None:
        value = rope.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise SpecError(f"config.{field}.{key}", "must be a number > 0", value)
        return float(value)

    given = number("attention_factor")
    if given is not None:
        return given
    factor = number("factor") or 1.0

    def mscale(m: float = 1.0) -> float:
        return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0

    m, m_all = number("mscale"), number("mscale_all_dim")
    if m is not None and m_all is not None:
        return mscale(m) / mscale(m_all)
    return mscale()


@dataclass(frozen=True)
class Stack:
    """One classic (LayerNorm, non-gated) layer repeated ``layers`` times, and what surrounds
    it: a position table of ``positions`` rows (0 for rotary or ALiBi), an optional final norm,
    embedding norm and in/out projections around a narrower word embedding."""

    hidden: int
    layers: int
    heads: int
    linears: tuple[Linear, ...]
    norms: tuple[Norm, ...]
    positions: int
    max_len: int | None
    final: Norm | None
    activation: str
    tie: bool
    attention_dropout: float
    hidden_dropout: float
    kv_heads: int | None = None
    parallel: bool = False
    embed_dim: int | None = None
    projections: tuple[Linear, ...] = ()
    embedding_norm: Norm | None = None


def uniform_stack(c: ConfigReader, ident: str, s: Stack) -> ModelSpec:
    """The classic families' spec: one uniform stack of layers."""
    h, heads = s.hidden, s.heads
    if h % heads:
        raise SpecError("config.num_attention_heads", f"must divide hidden_size={h}", heads)
    if s.kv_heads is not None and heads % s.kv_heads:
        raise SpecError(
            "config.num_kv_heads", f"must divide num_attention_heads={heads}", s.kv_heads
        )
    core = standard_core(heads, s.kv_heads or heads, h // heads, None)
    kind = LayerKind("dense", s.linears, tuple(n for n in s.norms if n.size), core, s.parallel)
    return ModelSpec(
        id=ident,
        model_type=c.model_type,
        hidden_size=h,
        num_layers=s.layers,
        vocab_size=c.integer("vocab_size", default=default_vocab(c.model_type)),
        max_seq_len=s.max_len,
        embed_dim=s.embed_dim or h,
        position_embeddings=s.positions,
        tie_embeddings=s.tie,
        kinds=(kind,),
        layer_kinds=(0,) * s.layers,
        embedding_norm=s.embedding_norm,
        final_norm=s.final if s.final and s.final.size else None,
        embedding_projections=s.projections,
        mlp_activation=s.activation,
        gated_mlp=False,
        norm_type="layernorm",
        attention_dropout=s.attention_dropout,
        hidden_dropout=s.hidden_dropout,
        moe=None,
        config=dict(c.plain),
    )
