"""Bamba (IBM; ``BambaForCausalLM``): Llama-style layers whose token mixer is a Mamba-2 mixer
(``mamba``, ``ssm.mamba_prefixed_mixer`` over ``mamba_expand x hidden_size`` channels), except
the layers listed in ``attn_layer_indices``, which hold grouped-query attention (``self_attn``,
biased by ``attention_bias``; rotary positions on half of each head, which count nothing).
Every layer has ``input_layernorm``, then its mixer, then ``pre_ff_layernorm`` and a SwiGLU
``feed_forward`` (biased by ``mlp_bias``); the final norm is ``final_layernorm``. Without
``attn_layer_indices`` (the class default) every layer is Mamba-2.
"""

from __future__ import annotations

from estimator.inputs.families.blocks import gated_mlp, rms
from estimator.inputs.families.hybrid import (
    attention_block,
    attention_shape,
    hybrid_layer,
    hybrid_model,
)
from estimator.inputs.families.ssm import mamba_prefixed_mixer
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("bamba",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=4096)
    layers = c.integer("num_hidden_layers", default=32)
    a = attention_shape(c, h, heads=32, kv=8)
    attention_at = set(c.int_list("attn_layer_indices"))
    mamba = mamba_prefixed_mixer(c, h, c.integer("mamba_expand", default=2) * h)
    attention, core = attention_block(h, a, c.flag("attention_bias", False))
    inter = c.integer("intermediate_size", default=14336)
    ffn = gated_mlp("feed_forward", h, inter, c.flag("mlp_bias", False), "mlp")
    norms = (rms("input_layernorm", h), rms("pre_ff_layernorm", h))
    mamba_layer = hybrid_layer("mamba", norms, ffn, mixer=mamba)
    attention_layer = hybrid_layer("attention", norms, ffn, attention=attention, core=core)
    stack = [attention_layer if i in attention_at else mamba_layer for i in range(layers)]
    vocab = c.integer("vocab_size", default=128000)
    tie = c.flag("tie_word_embeddings", False)
    return hybrid_model(c, ident, h, stack, vocab=vocab, tie=tie, final_norm="final_layernorm")
