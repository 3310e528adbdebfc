"""Mixtral: Mistral's attention (sliding window by default) with every MLP replaced by
``num_local_experts`` SwiGLU experts of ``intermediate_size``, ``num_experts_per_tok`` per token."""

from __future__ import annotations

from estimator.inputs.families.blocks import routed_experts, router
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    prelude,
    read_experts,
)
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("mixtral",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    p = prelude(c, config_defaults(c.model_type), default_sliding=True)
    d = p.dims
    experts, top_k, inter = read_experts(
        c, ("num_local_experts", "num_experts"), 8, 2, "intermediate_size", 14336
    )
    moe = (
        router("mlp.gate", d.hidden, experts),
        *routed_experts("mlp.experts", d.hidden, inter, experts, top_k),
    )
    bias = p.attention_bias
    layers = [attention_layer(d, w, moe, qkv_bias=bias, o_bias=bias, moe=True) for w in p.windows]
    activation = c.text("hidden_act", default="silu")
    spec = MoESpec(experts, top_k, inter, 0, d.layers)
    return decoder(c, ident, d, layers, moe=spec, activation=activation)
