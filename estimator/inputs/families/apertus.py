"""Apertus (Swiss AI, 2025; Apertus-8B and -70B): a Llama-style decoder whose MLP is not gated
and whose activation learns its shape (xIELU), with each query and key head normalized.

As transformers 5.23 builds it (``modeling_apertus.py``): ``mlp.up_proj`` then ``mlp.down_proj``,
no biases; the xIELU activation (``hidden_act`` "xielu", the default) holds two learned scalars a
layer (``mlp.act_fn.alpha_p``, ``mlp.act_fn.alpha_n``: Params, no matmul), a PReLU one
(``mlp.act_fn.weight``), the others none; pre-norm RMSNorms named ``attention_layernorm`` and
``feedforward_layernorm``; ``self_attn.q_norm`` and ``self_attn.k_norm`` over each head; biases on
q, k, v and o where ``attention_bias``; no sliding window; an untied head by default. The
``qk_norm``, ``post_norm`` and ``mlp_bias`` keys some checkpoints carry are read by nothing in
transformers, nor here; the llama3 ``rope_parameters`` change no parameter.
"""

from __future__ import annotations

from estimator.inputs.architecture import Linear, Param
from estimator.inputs.families.blocks import rms
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    qk_norms,
    read_dims,
)
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("apertus",)
# The learned scalars of transformers' activations (ACT2CLS): xIELU's alpha_p and alpha_n,
# nn.PReLU's weight (one, its default num_parameters)
ACTIVATION_PARAMS = {"xielu": ("alpha_p", "alpha_n"), "prelu": ("weight",)}


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    h = d.hidden
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    activation = c.text("hidden_act", default=defaults["hidden_act"])
    mlp = (
        Linear("mlp.up_proj", h, inter, False, "mlp", "column"),
        Linear("mlp.down_proj", inter, h, False, "mlp", "row"),
    )
    scalars = tuple(
        Param(f"mlp.act_fn.{name}", 1, "mlp") for name in ACTIVATION_PARAMS.get(activation, ())
    )
    norms = (
        rms("attention_layernorm", h),
        rms("feedforward_layernorm", h),
        *qk_norms(d.head_dim, d.head_dim),
    )
    bias = c.flag("attention_bias", False)
    layer = attention_layer(d, None, mlp, qkv_bias=bias, o_bias=bias, norms=norms)
    layers = [layer._replace(extras=scalars)] * d.layers
    return decoder(c, ident, d, layers, moe=None, activation=activation, gated=False)
