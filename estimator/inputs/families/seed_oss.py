"""Seed-OSS (ByteDance Seed, 2025; Seed-OSS-36B): a Llama-style decoder with biases on q, k and v
(``attention_bias``, true by default) but on o only where ``attention_out_bias`` (false by
default), a SwiGLU MLP (biased where ``mlp_bias``), ``head_dim`` 128 whatever hidden / heads (the
quotient only where the config sets it to null), two RMSNorms a layer, an untied head.

As transformers 5.23 builds it (``modeling_seed_oss.py``), with SeedOssConfig's defaults: its
dropouts default to 0.1, ``attention_dropout`` on the attention probabilities and
``residual_dropout`` after the attention's and the MLP's output projections (the training
activations keep their masks).
"""

from __future__ import annotations

from estimator.inputs.families.blocks import gated_mlp
from estimator.inputs.families.decoder import attention_layer, config_defaults, decoder, read_dims
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("seed_oss",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    if "head_dim" in c.raw and c.raw["head_dim"] is None:  # SeedOssConfig: hidden // heads
        defaults = {k: v for k, v in defaults.items() if k != "head_dim"}
    d = read_dims(c, defaults)
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    mlp = gated_mlp("mlp", d.hidden, inter, c.flag("mlp_bias", False), "mlp")
    qkv_bias = c.flag("attention_bias", defaults["attention_bias"])
    o_bias = c.flag("attention_out_bias", defaults["attention_out_bias"])
    layers = [attention_layer(d, None, mlp, qkv_bias=qkv_bias, o_bias=o_bias)] * d.layers
    dropouts = (
        c.number("attention_dropout", default=defaults["attention_dropout"]),
        c.number("residual_dropout", default=defaults["residual_dropout"]),
    )
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=None, activation=activation, dropouts=dropouts)
