"""Nemotron-3 / Nemotron-4 (NVIDIA, 2023-24; Nemotron-4 15B and 340B, the 8B and 22B of NeMo's
performance tables, Minitron): a decoder with an ungated squared-ReLU MLP and LayerNorms whose
scale is stored zero-centred ("layernorm1p": weight + 1), rotary embeddings over half of each head.

As transformers 5.23 builds it (``modeling_nemotron.py``): ``self_attn.{q,k,v,o}_proj``, all four
biased where ``attention_bias``; ``mlp.up_proj`` then ``mlp.down_proj``, biased where
``mlp_bias``; ``input_layernorm``, ``post_attention_layernorm`` and the final ``norm`` are
LayerNorms with scale and bias; an untied head by default. The partial rotary factor (0.5)
rotates half of each head's dimensions: no parameter, and no matmul FLOP under the planner's
convention. ``num_key_value_heads`` left out is read as Megatron reads ``num_query_groups``
None (one KV head per query head: the 8B and 22B); transformers cannot build such a config.
"""

from __future__ import annotations

import dataclasses

from estimator.inputs.architecture import Linear
from estimator.inputs.families.blocks import ln
from estimator.inputs.families.decoder import attention_layer, config_defaults, decoder, read_dims
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("nemotron",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    h = d.hidden
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    mlp_bias = c.flag("mlp_bias", False)
    bias = c.flag("attention_bias", False)
    mlp = (
        Linear("mlp.up_proj", h, inter, mlp_bias, "mlp", "column"),
        Linear("mlp.down_proj", inter, h, mlp_bias, "mlp", "row"),
    )
    norms = (ln("input_layernorm", h), ln("post_attention_layernorm", h))
    layer = attention_layer(d, None, mlp, qkv_bias=bias, o_bias=bias, norms=norms)
    activation = c.text("hidden_act", default=defaults["hidden_act"])
    spec = decoder(c, ident, d, [layer] * d.layers, moe=None, activation=activation, gated=False)
    return dataclasses.replace(spec, final_norm=ln("norm", h), norm_type="layernorm")
