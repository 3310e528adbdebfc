"""Mixtral: Mistral's attention (sliding window by default) with every MLP replaced by
``num_local_experts`` SwiGLU experts of ``intermediate_size``, ``num_experts_per_tok`` per token."""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.spec.families.blocks import (
    Layer,
    attention_linears,
    routed_experts,
    router,
    standard_core,
)
from estimator.spec.families.decoder import decoder, layer_name, prelude, standard_layer_norms
from estimator.spec.model import ModelSpec, MoESpec
from estimator.spec.reader import ConfigReader

__all__ = ["DEFAULTS", "MODEL_TYPES", "read"]

DEFAULTS = {
    "mixtral": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
    ),
}
MODEL_TYPES = tuple(DEFAULTS)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = DEFAULTS[c.model_type]
    p = prelude(c, defaults, default_sliding=True)
    d = p.dims
    experts = c.integer("num_local_experts", "num_experts", default=8)
    top_k = c.integer("num_experts_per_tok", default=2)
    moe_inter = c.integer("intermediate_size", default=14336)
    if top_k > experts:
        raise SpecError(
            "config.num_experts_per_tok", f"must be <= the number of experts ({experts})", top_k
        )
    layers = [
        Layer(
            layer_name(True, window),
            (
                *attention_linears(
                    d.hidden, d.heads, d.kv_heads, d.head_dim, p.attention_bias, p.attention_bias
                ),
                router("mlp.gate", d.hidden, experts),
                *routed_experts("mlp.experts", d.hidden, moe_inter, experts, top_k),
            ),
            tuple(standard_layer_norms(d.hidden)),
            standard_core(d.heads, d.kv_heads, d.head_dim, window),
        )
        for window in p.windows
    ]
    moe = MoESpec(experts, top_k, moe_inter, 0, d.layers)
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=moe, activation=activation)
