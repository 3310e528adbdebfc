"""Gemma 2: four RMSNorms a layer (before and after attention and the MLP), sliding-window and
global attention alternating (``layer_types``, or every other layer from the first when the
config predates it), head_dim x heads != hidden, GeGLU (``hidden_activation``), a tied head."""

from __future__ import annotations

from estimator.spec.families.blocks import gated_mlp, rms
from estimator.spec.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    prelude,
    standard_layer_norms,
)
from estimator.spec.model import ModelSpec
from estimator.spec.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("gemma2",)
DEFAULT_WINDOW = 4096  # Gemma2Config.sliding_window


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    p = prelude(c, defaults, default_sliding=False)
    d = p.dims
    windows = p.windows
    if c.raw.get("layer_types") is None:
        w = c.opt_integer("sliding_window") or DEFAULT_WINDOW
        windows = tuple(w if (i + 1) % 2 else None for i in range(d.layers))
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    mlp = gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp")
    norms = (
        *standard_layer_norms(d.hidden),
        rms("pre_feedforward_layernorm", d.hidden),
        rms("post_feedforward_layernorm", d.hidden),
    )
    bias = p.attention_bias
    layers = [attention_layer(d, w, mlp, qkv_bias=bias, o_bias=bias, norms=norms) for w in windows]
    activation = c.text("hidden_activation", default="gelu_pytorch_tanh")
    return decoder(c, ident, d, layers, moe=None, activation=activation)
