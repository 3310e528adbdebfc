"""What the hybrid families (Mamba-2, Bamba, GraniteMoeHybrid, FalconH1, Jamba, Qwen3-Next,
LFM2) share around their token mixers: the attention's shape as their config classes read it,
a layer made of a recurrent mixer and/or attention and a feed-forward block, and the model
around the layers (a Llama-style embedding and head, the final norm under its family's name).
Nothing here knows a family; the mixers themselves are in ``ssm.py`` and the family modules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from estimator.inputs.architecture import AttentionCore, Linear, Norm
from estimator.inputs.families.blocks import (
    Layer,
    attention_linears,
    kv_heads,
    rms,
    standard_core,
)
from estimator.inputs.families.decoder import Dims, decoder
from estimator.inputs.families.ssm import Mixer
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["AttentionShape", "attention_block", "attention_shape", "hybrid_layer", "hybrid_model"]


class AttentionShape(NamedTuple):
    """Query heads, KV heads and head width of a hybrid model's attention layers."""

    heads: int
    kv_heads: int
    head_dim: int


def attention_shape(
    c: ConfigReader, hidden: int, *, heads: int, kv: int | None, head_dim: int | None = None
) -> AttentionShape:
    """``num_attention_heads`` (class default ``heads``), ``num_key_value_heads`` (class default
    ``kv``, None for all the query heads; all of them too where the config sets it to null, the
    config classes' rule for older configs) and ``head_dim`` (``hidden // heads`` unless the
    class has a default: the attention modules read ``getattr(config, "head_dim", hidden //
    heads)``)."""
    n = c.integer("num_attention_heads", default=heads)
    unset = "num_key_value_heads" in c.raw and c.raw["num_key_value_heads"] is None
    kvh = kv_heads(c, n, n if unset or kv is None else kv)
    return AttentionShape(n, kvh, c.integer("head_dim", default=head_dim or hidden // n))


def attention_block(
    hidden: int, a: AttentionShape, bias: bool
) -> tuple[tuple[Linear, ...], AttentionCore]:
    """``self_attn.{q,k,v,o}_proj`` (all biased by ``bias``) and their core: grouped-query
    attention over the whole context."""
    linears = attention_linears(hidden, a.heads, a.kv_heads, a.head_dim, bias, bias)
    return tuple(linears), standard_core(a.heads, a.kv_heads, a.head_dim, None)


def hybrid_layer(
    name: str,
    norms: Sequence[Norm],
    ffn: Sequence[Linear],
    *,
    mixer: Mixer | None = None,
    attention: Sequence[Linear] = (),
    core: AttentionCore | None = None,
) -> Layer:
    """A decoder layer of a recurrent ``mixer``, an attention (its projections and ``core``),
    or both side by side (FalconH1), then the feed-forward block ``ffn``."""
    linears = (*attention, *(mixer.linears if mixer else ()), *ffn)
    if mixer is None:
        return Layer(name, linears, tuple(norms), core)
    return Layer(name, linears, tuple(norms), core, mixer=mixer.core, extras=mixer.extras)


def hybrid_model(
    c: ConfigReader,
    ident: str,
    hidden: int,
    layers: Sequence[Layer],
    *,
    vocab: int,
    tie: bool,
    final_norm: str,
    moe: MoESpec | None = None,
) -> ModelSpec:
    """The model around ``layers``: a ``vocab x hidden`` embedding, the head (tied to it or
    not) and the final RMSNorm named ``final_norm``, as the hybrid families' transformers
    classes build them; activation ``hidden_act`` (SiLU by default in every one of them)."""
    dims = Dims(hidden, len(layers), 0, vocab, 0, 0, tie)  # heads: read per layer kind
    spec = decoder(c, ident, dims, layers, moe=moe, activation=c.text("hidden_act", default="silu"))
    return replace(spec, final_norm=rms(final_norm, hidden))
