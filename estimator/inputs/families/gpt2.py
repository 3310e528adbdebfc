"""GPT-2: learned positions, pre-LN LayerNorm, fused Conv1D q/k/v, GELU MLP, tied head."""

from __future__ import annotations

from estimator.inputs.families.blocks import ln
from estimator.inputs.families.decoder import Stack, classic_linears, uniform_stack
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("gpt2",)
NAMES = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("n_embd", "hidden_size", default=768)
    layers = c.integer("n_layer", "num_hidden_layers", default=12)
    heads = c.integer("n_head", "num_attention_heads", default=12)
    inter = c.integer("n_inner", default=4 * h)
    positions = c.integer("n_positions", "max_position_embeddings", default=1024)
    stack = Stack(
        hidden=h,
        layers=layers,
        heads=heads,
        linears=classic_linears(h, heads, heads, inter, NAMES, bias=True),
        norms=(ln("ln_1", h), ln("ln_2", h)),
        positions=positions,
        max_len=c.integer("n_positions", "max_position_embeddings", default=1024),
        final=ln("ln_f", h),
        activation=c.text("activation_function", default="gelu_new"),
        tie=c.flag("tie_word_embeddings", True),
        attention_dropout=c.number("attn_pdrop", default=0.1),
        hidden_dropout=c.number("resid_pdrop", default=0.1),
    )
    return uniform_stack(c, ident, stack)
