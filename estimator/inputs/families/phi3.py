"""Phi-3: fused ``qkv_proj`` and fused ``gate_up_proj`` (kept as parts so TP shards them like the
separate projections), no biases, a sliding window by default."""

from __future__ import annotations

from estimator.inputs.architecture import Linear
from estimator.inputs.families.blocks import Layer, fused_qkv, standard_core
from estimator.inputs.families.decoder import (
    config_defaults,
    decoder,
    layer_name,
    prelude,
    standard_layer_norms,
)
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("phi3",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    p = prelude(c, defaults, default_sliding=True)
    d = p.dims
    h, heads, hd = d.hidden, d.heads, d.head_dim
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    linears = (
        *fused_qkv("self_attn.qkv_proj", h, heads, d.kv_heads, hd, False),
        Linear("self_attn.o_proj", heads * hd, h, False, "attention", "row", heads),
        Linear("mlp.gate_up_proj#gate", h, inter, False, "mlp", "column"),
        Linear("mlp.gate_up_proj#up", h, inter, False, "mlp", "column"),
        Linear("mlp.down_proj", inter, h, False, "mlp", "row"),
    )
    norms = tuple(standard_layer_norms(h))
    layers = [
        Layer(layer_name(False, w), linears, norms, standard_core(heads, d.kv_heads, hd, w))
        for w in p.windows
    ]
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=None, activation=activation)
