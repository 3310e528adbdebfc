"""Falcon: fused q/k/v (multi-query for 7B; grouped KV with the new decoder architecture of
40B/180B), parallel attention+MLP sharing one LayerNorm (7B) or two (``ln_attn``/``ln_mlp``),
GELU MLP of ``ffn_hidden_size`` (default 4h), tied head."""

from __future__ import annotations

from estimator.inputs.architecture import Norm
from estimator.inputs.families.blocks import ln
from estimator.inputs.families.decoder import Stack, classic_linears, uniform_stack
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("falcon",)
NAMES = "self_attention"  # query_key_value, dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=4544)
    layers = c.integer("num_hidden_layers", "n_layer", default=32)
    heads = c.integer("num_attention_heads", "n_head", default=71)
    new_arch = c.flag("new_decoder_architecture", False)
    multi_query = c.flag("multi_query", True)
    parallel = c.flag("parallel_attn", True)
    if new_arch:
        kv = c.integer("num_kv_heads", "n_head_kv", default=heads)
    elif multi_query:
        kv = 1
    else:
        kv = heads
    bias = c.flag("bias", False)
    inter = c.integer("ffn_hidden_size", default=4 * h)
    n_ln = c.opt_integer("num_ln_in_parallel_attn") or (2 if new_arch else 1)
    norms: tuple[Norm, ...]
    if not parallel:
        norms = (ln("input_layernorm", h), ln("post_attention_layernorm", h))
    elif n_ln == 2:
        norms = (ln("ln_attn", h), ln("ln_mlp", h))
    else:
        norms = (ln("input_layernorm", h),)
    stack = Stack(
        hidden=h,
        layers=layers,
        heads=heads,
        linears=classic_linears(h, heads, kv, inter, NAMES, bias),
        norms=norms,
        positions=0,
        max_len=c.opt_integer("max_position_embeddings"),
        final=ln("ln_f", h),
        activation=c.text("activation", default="gelu"),
        tie=c.flag("tie_word_embeddings", True),
        attention_dropout=c.number("attention_dropout", default=0.0),
        hidden_dropout=c.number("hidden_dropout", default=0.0),
        kv_heads=kv,
        parallel=parallel,
    )
    return uniform_stack(c, ident, stack)
