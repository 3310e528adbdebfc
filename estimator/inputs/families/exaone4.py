"""EXAONE 4.0 (LG AI Research, 2025): OLMo 2's reordered norms ("QK-Reorder-Norm") and hybrid
attention, three sliding-window layers to one global.

As transformers 5.23 builds it (``modeling_exaone4.py``): no norm on a layer's input; RMSNorms
on the attention's and the MLP's outputs (``post_attention_layernorm``,
``post_feedforward_layernorm``); each query and key head normalized (``self_attn.q_norm``,
``self_attn.k_norm``, ``head_dim`` wide); no biases anywhere, whatever ``attention_bias`` says; a
SwiGLU MLP; an untied head by default. ``layer_types`` says which layers attend in the
``sliding_window`` (4,096 tokens); without it, Exaone4Config makes every
``sliding_window_pattern``-th layer (an integer, 4 by default) global. The global layers skip
RoPE (NoPE), which changes no parameter and no matmul. Refused: a config without
``layer_types`` whose ``sliding_window`` is null or whose ``sliding_window_pattern`` is not an
integer (``"LLLG"``), which transformers cannot build (it divides by the pattern).
"""

from __future__ import annotations

from typing import Any

from estimator.errors import SpecError
from estimator.inputs.families.blocks import every_nth_global, typed_windows
from estimator.inputs.families.decoder import config_defaults, qk_norms, read_dims
from estimator.inputs.families.olmo3 import reordered_norms_decoder
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("exaone4",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    types = every_nth_global(c, d.layers, lambda: _period(c, defaults))
    windows = typed_windows(c, types, defaults["sliding_window"])
    return reordered_norms_decoder(c, ident, d, windows, qk_norms(d.head_dim, d.head_dim), False)


def _period(c: ConfigReader, defaults: dict[str, Any]) -> int:
    """Exaone4Config's period of global layers, where the config lists no ``layer_types``."""
    if "sliding_window" in c.raw and c.raw["sliding_window"] is None:
        raise SpecError(
            "config.sliding_window",
            "may be null only with config.layer_types (Exaone4Config then divides by a zero"
            " period)",
        )
    pattern = c.raw.get("sliding_window_pattern", defaults["sliding_window_pattern"])
    if isinstance(pattern, bool) or not isinstance(pattern, int):
        raise SpecError(
            "config.sliding_window_pattern",
            "must be an integer period where config.layer_types is not given (transformers"
            " cannot build the layers from a string)",
            pattern,
        )
    return c.integer("sliding_window_pattern", default=defaults["sliding_window_pattern"])
