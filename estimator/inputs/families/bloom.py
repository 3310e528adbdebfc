"""BLOOM: ALiBi (no position parameters), LayerNorm after the word embedding, fused q/k/v,
4h GELU MLP, biases everywhere, tied head."""

from __future__ import annotations

from estimator.inputs.families.blocks import ln
from estimator.inputs.families.decoder import Stack, classic_linears, uniform_stack
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("bloom",)
NAMES = "self_attention"  # query_key_value, dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", "n_embed", default=64)
    layers = c.integer("n_layer", "num_hidden_layers", default=2)
    heads = c.integer("n_head", "num_attention_heads", default=8)
    stack = Stack(
        hidden=h,
        layers=layers,
        heads=heads,
        linears=classic_linears(h, heads, heads, 4 * h, NAMES, bias=True),
        norms=(ln("input_layernorm", h), ln("post_attention_layernorm", h)),
        positions=0,
        max_len=c.opt_integer("seq_length", "max_position_embeddings"),
        final=ln("ln_f", h),
        activation="bloom_gelu",
        tie=c.flag("tie_word_embeddings", True),
        attention_dropout=c.number("attention_dropout", default=0.0),
        hidden_dropout=c.number("hidden_dropout", default=0.0),
        embedding_norm=ln("word_embeddings_layernorm", h),
    )
    return uniform_stack(c, ident, stack)
