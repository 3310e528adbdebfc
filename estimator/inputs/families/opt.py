"""OPT: learned positions with an offset of 2 rows, optional project_in/out around a narrower
word embedding, LayerNorm (affine unless disabled), ReLU MLP, biases everywhere by default."""

from __future__ import annotations

from estimator.inputs.architecture import Linear
from estimator.inputs.families.blocks import ln
from estimator.inputs.families.decoder import Stack, uniform_stack
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("opt",)
POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding keeps two extra rows


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=768)
    layers = c.integer("num_hidden_layers", default=12)
    heads = c.integer("num_attention_heads", default=12)
    inter = c.integer("ffn_dim", default=3072)
    wdim = c.integer("word_embed_proj_dim", default=h)
    bias = c.flag("enable_bias", True)
    affine = c.flag("layer_norm_elementwise_affine", True)
    linears = (
        Linear("self_attn.k_proj", h, h, bias, "attention", "column", heads),
        Linear("self_attn.v_proj", h, h, bias, "attention", "column", heads),
        Linear("self_attn.q_proj", h, h, bias, "attention", "column", heads),
        Linear("self_attn.out_proj", h, h, bias, "attention", "row", heads),
        Linear("fc1", h, inter, bias, "mlp", "column"),
        Linear("fc2", inter, h, bias, "mlp", "row"),
    )
    norms = (ln("self_attn_layer_norm", h, affine), ln("final_layer_norm", h, affine))
    final = None
    if c.flag("do_layer_norm_before", True) and not c.flag("_remove_final_layer_norm", False):
        final = ln("final_layer_norm", h, affine)
    projections: tuple[Linear, ...] = ()
    if wdim != h:
        projections = (
            Linear("project_out", h, wdim, False, "embeddings", "replicated"),
            Linear("project_in", wdim, h, False, "embeddings", "replicated"),
        )
    max_len = c.integer("max_position_embeddings", default=2048)
    stack = Stack(
        hidden=h,
        layers=layers,
        heads=heads,
        linears=linears,
        norms=norms,
        positions=max_len + POSITION_OFFSET,
        max_len=max_len,
        final=final,
        activation=c.text("activation_function", default="relu"),
        tie=c.flag("tie_word_embeddings", True),
        attention_dropout=c.number("attention_dropout", default=0.0),
        hidden_dropout=c.number("dropout", default=0.1),
        embed_dim=wdim,
        projections=projections,
    )
    return uniform_stack(c, ident, stack)
