"""Gemma 2: four RMSNorms a layer (before and after attention and the MLP), sliding-window and
global attention alternating (``layer_types``, or every other layer from the first when the
config predates it), head_dim x heads != hidden, GeGLU (``hidden_activation``), a tied head."""

from __future__ import annotations

from estimator.spec.families.blocks import (
    Layer,
    attention_linears,
    gated_mlp,
    rms,
    standard_core,
)
from estimator.spec.families.decoder import decoder, layer_name, prelude, standard_layer_norms
from estimator.spec.model import ModelSpec
from estimator.spec.reader import ConfigReader

__all__ = ["DEFAULTS", "MODEL_TYPES", "read"]

DEFAULTS = {
    "gemma2": dict(
        vocab_size=256000,
        hidden_size=2304,
        intermediate_size=9216,
        num_hidden_layers=26,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        tie_word_embeddings=True,
    ),
}
MODEL_TYPES = tuple(DEFAULTS)
DEFAULT_WINDOW = 4096  # Gemma2Config.sliding_window


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = DEFAULTS[c.model_type]
    p = prelude(c, defaults, default_sliding=False)
    d = p.dims
    windows = p.windows
    if c.raw.get("layer_types") is None:
        w = c.opt_integer("sliding_window") or DEFAULT_WINDOW
        windows = tuple(w if (i + 1) % 2 else None for i in range(d.layers))
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    norms = (
        *standard_layer_norms(d.hidden),
        rms("pre_feedforward_layernorm", d.hidden),
        rms("post_feedforward_layernorm", d.hidden),
    )
    layers = [
        Layer(
            layer_name(False, window),
            (
                *attention_linears(
                    d.hidden, d.heads, d.kv_heads, d.head_dim, p.attention_bias, p.attention_bias
                ),
                *gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp"),
            ),
            norms,
            standard_core(d.heads, d.kv_heads, d.head_dim, window),
        )
        for window in windows
    ]
    activation = c.text("hidden_activation", default="gelu_pytorch_tanh")
    return decoder(c, ident, d, layers, moe=None, activation=activation)
