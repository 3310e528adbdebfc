"""GPT-NeoX / Pythia: fused q/k/v with bias, parallel residual (two LayerNorms), GELU MLP,
untied ``embed_out``."""

from __future__ import annotations

from estimator.inputs.families.blocks import ln
from estimator.inputs.families.decoder import Stack, classic_linears, uniform_stack
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("gpt_neox",)
NAMES = "attention"  # query_key_value, dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=6144)
    layers = c.integer("num_hidden_layers", default=44)
    heads = c.integer("num_attention_heads", default=64)
    inter = c.integer("intermediate_size", default=24576)
    bias = c.flag("attention_bias", True)
    stack = Stack(
        hidden=h,
        layers=layers,
        heads=heads,
        linears=classic_linears(h, heads, heads, inter, NAMES, bias, mlp_bias=True),
        norms=(ln("input_layernorm", h), ln("post_attention_layernorm", h)),
        positions=0,
        max_len=c.integer("max_position_embeddings", default=2048),
        final=ln("final_layer_norm", h),
        activation=c.text("hidden_act", default="gelu"),
        tie=c.flag("tie_word_embeddings", False),
        attention_dropout=c.number("attention_dropout", default=0.0),
        hidden_dropout=c.number("hidden_dropout", default=0.0),
        parallel=c.flag("use_parallel_residual", True),
    )
    return uniform_stack(c, ident, stack)
