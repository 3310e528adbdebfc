"""Phi-3: fused ``qkv_proj`` and fused ``gate_up_proj`` (kept as parts so TP shards them like the
separate projections), no biases, a sliding window by default."""

from __future__ import annotations

from estimator.spec.architecture import Linear
from estimator.spec.families.blocks import Layer, fused_qkv, standard_core
from estimator.spec.families.decoder import decoder, layer_name, prelude, standard_layer_norms
from estimator.spec.model import ModelSpec
from estimator.spec.reader import ConfigReader

__all__ = ["DEFAULTS", "MODEL_TYPES", "read"]

DEFAULTS = {
    "phi3": dict(
        vocab_size=32064,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=32,
        num_attention_heads=32,
    ),
}
MODEL_TYPES = tuple(DEFAULTS)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = DEFAULTS[c.model_type]
    p = prelude(c, defaults, default_sliding=True)
    d = p.dims
    h, heads, hd = d.hidden, d.heads, d.head_dim
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    layers = [
        Layer(
            layer_name(False, window),
            (
                *fused_qkv("self_attn.qkv_proj", h, heads, d.kv_heads, hd, False),
                Linear("self_attn.o_proj", heads * hd, h, False, "attention", "row", heads),
                Linear("mlp.gate_up_proj#gate", h, inter, False, "mlp", "column"),
                Linear("mlp.gate_up_proj#up", h, inter, False, "mlp", "column"),
                Linear("mlp.down_proj", inter, h, False, "mlp", "row"),
            ),
            tuple(standard_layer_norms(h)),
            standard_core(heads, d.kv_heads, hd, window),
        )
        for window in p.windows
    ]
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=None, activation=activation)
