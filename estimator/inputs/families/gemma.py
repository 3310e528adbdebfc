"""Gemma 2 and Gemma 3: four RMSNorms a layer (before and after attention and the MLP),
sliding-window and global attention layers, head_dim x heads != hidden, GeGLU
(``hidden_activation``), a tied head. The embedding is scaled by sqrt(hidden) (a buffer, no
parameter) and the scores by ``query_pre_attn_scalar`` (no parameter either).

Gemma 2 alternates local and global layers (``layer_types``, or every other layer from the
first when the config predates it).

Gemma 3 (``modeling_gemma3.py``, transformers 5.23) normalizes each query and key head
(``self_attn.q_norm``, ``self_attn.k_norm``, ``head_dim`` wide) and attends globally on every
``sliding_window_pattern``-th layer (6: five layers in a ``sliding_window`` of 4,096 tokens,
then one global) unless ``layer_types`` lists the layers (the window is never null:
Gemma3TextModel builds its mask whatever the layers are); its MLP has no biases whatever the
config says. The multimodal checkpoints (``gemma3``: Gemma3ForConditionalGeneration, 4B, 12B and
27B) are read from their ``text_config``; their SigLIP vision tower and projector are not
counted. Refused: ``use_bidirectional_attention`` (the encoder variant, whose windows
transformers halves and whose attention is not causal) and a ``hidden_size`` that
``num_attention_heads`` does not divide, which Gemma3TextConfig refuses too.
"""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.inputs.architecture import Norm
from estimator.inputs.families.blocks import (
    every_nth_global,
    gated_mlp,
    rms,
    span,
    typed_windows,
)
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    prelude,
    qk_norms,
    read_dims,
    standard_layer_norms,
)
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("gemma2", "gemma3_text", "gemma3")
DEFAULT_WINDOW = 4096  # Gemma2Config.sliding_window
ACTIVATION = "gelu_pytorch_tanh"  # Gemma2Config's and Gemma3TextConfig's hidden_activation


def read(c: ConfigReader, ident: str) -> ModelSpec:
    return _gemma2(c, ident) if c.model_type == "gemma2" else _gemma3(c, ident)


def _gemma2(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    p = prelude(c, defaults, default_sliding=False)
    d = p.dims
    windows = p.windows
    if c.raw.get("layer_types") is None:
        w = c.opt_integer("sliding_window") or DEFAULT_WINDOW
        windows = tuple(w if (i + 1) % 2 else None for i in range(d.layers))
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    mlp = gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp")
    bias = p.attention_bias
    norms = _sandwich_norms(d.hidden)
    layers = [attention_layer(d, w, mlp, qkv_bias=bias, o_bias=bias, norms=norms) for w in windows]
    activation = c.text("hidden_activation", default=ACTIVATION)
    return decoder(c, ident, d, layers, moe=None, activation=activation)


def _gemma3(c: ConfigReader, ident: str) -> ModelSpec:
    if "vision_config" in c.raw:  # a Gemma3Config without the text model it wraps
        raise SpecError("config.text_config", "is required to read a 'gemma3' checkpoint")
    defaults = config_defaults("gemma3_text")  # a text_config without model_type included
    d = read_dims(c, defaults)
    if d.hidden % d.heads:
        raise SpecError(
            "config.num_attention_heads", f"must divide hidden_size={d.hidden} (Gemma 3)", d.heads
        )
    if c.flag("use_bidirectional_attention", False):
        raise SpecError(
            "config.use_bidirectional_attention",
            "bidirectional Gemma 3 (an encoder: halved windows, no causal mask) is not modelled",
            True,
        )
    span(c, "sliding_window", defaults["sliding_window"])  # Gemma3TextModel masks one always
    types = every_nth_global(
        c,
        d.layers,
        lambda: c.integer("sliding_window_pattern", default=defaults["sliding_window_pattern"]),
    )
    windows = typed_windows(c, types, defaults["sliding_window"])
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    mlp = gated_mlp("mlp", d.hidden, inter, False, "mlp")
    bias = c.flag("attention_bias", False)
    norms = (*_sandwich_norms(d.hidden), *qk_norms(d.head_dim, d.head_dim))
    layers = [attention_layer(d, w, mlp, qkv_bias=bias, o_bias=bias, norms=norms) for w in windows]
    activation = c.text("hidden_activation", default=ACTIVATION)
    return decoder(c, ident, d, layers, moe=None, activation=activation)


def _sandwich_norms(h: int) -> tuple[Norm, ...]:
    """Gemma's four RMSNorms: before and after the attention, before and after the MLP."""
    return (
        *standard_layer_norms(h),
        rms("pre_feedforward_layernorm", h),
        rms("post_feedforward_layernorm", h),
    )
