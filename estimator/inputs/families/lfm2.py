"""LFM2 (Liquid AI; ``Lfm2ForCausalLM``): gated short-convolution layers (``conv``) with
grouped-query attention (``self_attn``: output projection ``out_proj``, q and k RMS-normed per
head by ``q_layernorm``/``k_layernorm``, no bias) on the layers ``layer_types`` names
``full_attention`` (without it, the layers in ``full_attn_idxs``; without either, every layer
attends, as the config class defaults). Every layer: ``operator_norm``, the mixer, then
``ffn_norm`` and a SwiGLU ``feed_forward`` (``w1``, ``w3``, ``w2``, no bias). The final norm is
named ``embedding_norm``; the head is tied to the embedding by default (``tie_embedding`` is
the older name and wins, as in ``Lfm2Config``).

The MLP width is ``block_ff_dim`` (or ``intermediate_size``), which ``block_auto_adjust_ff_dim``
(on by default) turns into ``int(multiplier x int(2 x width / 3))`` rounded up to a multiple of
``block_multiple_of``, the multiplier being ``block_ffn_dim_multiplier`` (1.0 by default; null
is refused, as Lfm2Config refuses it).

The short convolution (``Lfm2ShortConv``): ``in_proj`` to B, C and x (``hidden_size`` each),
``y = C * causal_conv(B * x)`` with a depthwise convolution of ``conv_L_cache`` taps, then
``out_proj``; ``conv_bias`` biases all three. No scan and no state beyond the convolution's
window. As a ``RecurrentCore``: ``hidden_size`` heads of width 1 (one B/C gate each),
``state_dim`` 0, ``conv_channels`` = ``hidden_size``.
"""

from __future__ import annotations

from dataclasses import replace

from estimator.errors import SpecError
from estimator.inputs.architecture import Linear, Param
from estimator.inputs.families.blocks import layer_types, rms
from estimator.inputs.families.hybrid import (
    attention_block,
    attention_shape,
    hybrid_layer,
    hybrid_model,
)
from estimator.inputs.families.ssm import Mixer, recurrent_core
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("lfm2",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=2560)
    layers = c.integer("num_hidden_layers", default=32)
    if c.get("layer_types") is None:
        given = c.raw.get("full_attn_idxs")
        attends = set(range(layers)) if given is None else set(c.int_list("full_attn_idxs"))
        types = tuple("full_attention" if i in attends else "conv" for i in range(layers))
    else:
        types = layer_types(c, layers, ("conv", "full_attention"), ())
    a = attention_shape(c, h, heads=32, kv=8)
    (*qkv, o), core = attention_block(h, a, False)
    attention = (*qkv, replace(o, name="self_attn.out_proj"))
    inter = _ff_dim(c)
    ffn = (
        Linear("feed_forward.w1", h, inter, False, "mlp", "column"),
        Linear("feed_forward.w3", h, inter, False, "mlp", "column"),
        Linear("feed_forward.w2", inter, h, False, "mlp", "row"),
    )
    norms = (rms("operator_norm", h), rms("ffn_norm", h))
    attention_norms = (
        *norms,
        rms("self_attn.q_layernorm", a.head_dim),
        rms("self_attn.k_layernorm", a.head_dim),
    )
    conv = hybrid_layer("conv", norms, ffn, mixer=_short_conv(c, h))
    attend = hybrid_layer("attention", attention_norms, ffn, attention=attention, core=core)
    stack = [conv if t == "conv" else attend for t in types]
    vocab = c.integer("vocab_size", default=65536)
    tie = c.flag("tie_embedding", c.flag("tie_word_embeddings", True))
    return hybrid_model(c, ident, h, stack, vocab=vocab, tie=tie, final_norm="embedding_norm")


def _ff_dim(c: ConfigReader) -> int:
    """The SwiGLU width ``Lfm2MLP`` builds (see the module docstring)."""
    width = c.integer("block_ff_dim", "intermediate_size", default=12288)
    if "block_ffn_dim_multiplier" in c.raw and c.raw["block_ffn_dim_multiplier"] is None:
        raise SpecError("config.block_ffn_dim_multiplier", "must be a number (Lfm2Config's rule)")
    if not c.flag("block_auto_adjust_ff_dim", True):
        return width
    width = int(c.number("block_ffn_dim_multiplier", default=1.0) * int(2 * width / 3))
    multiple = c.integer("block_multiple_of", default=256)
    return multiple * -(-width // multiple)


def _short_conv(c: ConfigReader, h: int) -> Mixer:
    """``conv`` (see the module docstring)."""
    kernel = c.integer("conv_L_cache", default=3)
    bias = c.flag("conv_bias", False)
    linears = (
        Linear("conv.in_proj", h, 3 * h, bias, "mixer", "column", h),
        Linear("conv.out_proj", h, h, bias, "mixer", "row", h),
    )
    extras = [Param("conv.conv.weight", h * kernel, "mixer", h)]
    if bias:
        extras.append(Param("conv.conv.bias", h, "mixer", h))
    core = recurrent_core("short_conv", h, 1, 0, h, h, kernel)  # channels as gated heads
    return Mixer(linears, tuple(extras), core)
