"""SmolLM3 (Hugging Face, 2025; SmolLM3-3B): a Llama decoder (grouped-query attention, SwiGLU,
two RMSNorms a layer) whose every fourth layer skips RoPE, and a tied head by default.

As transformers 5.23 builds it (``modeling_smollm3.py``): the NoPE layers (a 0 in
``no_rope_layers``, else one layer in every ``no_rope_layer_interval``) change no parameter and
no matmul; biases where ``attention_bias`` and ``mlp_bias``. Sliding windows (off in the released
checkpoint) follow ``layer_types``; without it SmolLM3Config puts them on the NoPE layers where
``use_sliding_window`` and ``sliding_window`` are both set (its ``max_window_layers`` is read by
nothing). Refused: ``no_rope_layers`` shorter than the stack (transformers reads one flag a
layer).
"""

from __future__ import annotations

from typing import Any

from estimator.errors import SpecError
from estimator.inputs.families.blocks import (
    PLAIN_LAYER_TYPES,
    gated_mlp,
    layer_types,
    typed_windows,
)
from estimator.inputs.families.decoder import attention_layer, config_defaults, decoder, read_dims
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("smollm3",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    rope = _rope_layers(c, d.layers, defaults)
    slides = c.flag("use_sliding_window", False) and c.get("sliding_window") is not None
    pattern = ["sliding_attention" if slides and not r else "full_attention" for r in rope]
    types = layer_types(c, d.layers, PLAIN_LAYER_TYPES, pattern)
    windows = typed_windows(c, types, None)
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    mlp = gated_mlp("mlp", d.hidden, inter, c.flag("mlp_bias", False), "mlp")
    bias = c.flag("attention_bias", False)
    layers = [attention_layer(d, w, mlp, qkv_bias=bias, o_bias=bias) for w in windows]
    return decoder(c, ident, d, layers, moe=None, activation=c.text("hidden_act", default="silu"))


def _rope_layers(c: ConfigReader, layers: int, defaults: dict[str, Any]) -> tuple[int, ...]:
    """One flag a layer, 1 where it applies RoPE (SmolLM3Config's ``no_rope_layers``)."""
    if c.raw.get("no_rope_layers") is None:
        every = c.integer("no_rope_layer_interval", default=defaults["no_rope_layer_interval"])
        return tuple(int((i + 1) % every != 0) for i in range(layers))
    flags = c.int_list("no_rope_layers")
    if len(flags) < layers:
        raise SpecError(
            "config.no_rope_layers", f"must hold a flag for each of the {layers} layers", flags
        )
    return flags[:layers]
