"""OLMo 3 (Ai2, 2025): OLMo 2's reordered norms, and three sliding-window layers to one global.

As transformers 5.23 builds it (``modeling_olmo3.py``): no norm on a layer's input; an RMSNorm on
the attention's output and one on the MLP's, each before its residual add
(``post_attention_layernorm``, ``post_feedforward_layernorm``); q and k normalized over their
whole projections (``self_attn.q_norm`` of heads x head_dim, ``self_attn.k_norm`` of kv_heads x
head_dim) before RoPE; biases on q, k, v and o where ``attention_bias`` (false by default), none
in the SwiGLU MLP; ``layer_types``, or, when the config does not list them, every fourth layer
global and the others in a ``sliding_window`` (4,096 tokens; never null, since Olmo3Model builds
the window's mask whatever the layers are); an untied head. YaRN
``rope_scaling`` changes no parameter and no matmul.
"""

from __future__ import annotations

from collections.abc import Sequence

from estimator.inputs.architecture import Norm
from estimator.inputs.families.blocks import every_nth_global, gated_mlp, span, typed_windows
from estimator.inputs.families.decoder import (
    Dims,
    attention_layer,
    config_defaults,
    decoder,
    post_norms,
    qk_norms,
    read_dims,
)
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read", "reordered_norms_decoder"]

MODEL_TYPES = ("olmo3",)
GLOBAL_EVERY = 4  # Olmo3Config's layer_types: layers 4, 8, 12 ... attend globally


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    span(c, "sliding_window", defaults["sliding_window"])  # Olmo3Model masks a window always
    types = every_nth_global(c, d.layers, lambda: GLOBAL_EVERY)
    windows = typed_windows(c, types, defaults["sliding_window"])
    qk = qk_norms(d.heads * d.head_dim, d.kv_heads * d.head_dim)
    return reordered_norms_decoder(c, ident, d, windows, qk, c.flag("attention_bias", False))


def reordered_norms_decoder(
    c: ConfigReader,
    ident: str,
    d: Dims,
    windows: Sequence[int | None],
    qk: Sequence[Norm],
    bias: bool,
) -> ModelSpec:
    """A decoder of OLMo 2's reordered norms (OLMo 3, EXAONE 4): each layer attends in its
    window (None: globally) through q/k/v/o (biased where ``bias``) normalized by ``qk``, a
    SwiGLU MLP without biases, RMSNorms on the two outputs."""
    inter = c.integer(
        "intermediate_size", default=config_defaults(c.model_type)["intermediate_size"]
    )
    mlp = gated_mlp("mlp", d.hidden, inter, False, "mlp")
    norms = (*post_norms(d.hidden), *qk)
    layers = [attention_layer(d, w, mlp, qkv_bias=bias, o_bias=bias, norms=norms) for w in windows]
    return decoder(c, ident, d, layers, moe=None, activation=c.text("hidden_act", default="silu"))
