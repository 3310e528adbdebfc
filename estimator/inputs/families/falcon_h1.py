"""Falcon-H1 (TII; ``FalconH1ForCausalLM``): every layer runs grouped-query attention
(``self_attn``, biased by ``attention_bias``) and a Mamba-2 mixer (``mamba``) side by side on
the same normed input and adds their outputs, then a SwiGLU ``feed_forward`` (biased by
``mlp_bias``); norms ``input_layernorm``, ``pre_ff_layernorm``, final ``final_layernorm``. Each
layer is one kind with an attention core and a recurrent core: it keeps a KV cache and a state.

The mixer (``ssm.mamba_prefixed_mixer``) is ``mamba_d_ssm`` channels wide (1024 by default;
``mamba_expand x hidden_size`` where the config sets it to null), biased by ``mamba_proj_bias``
on its input projection and by ``projectors_bias`` on its output projection, and has its gated
RMSNorm only where ``mamba_rms_norm`` is set (off by default: the gate alone, no weight). The
muP multipliers (``ssm_multipliers``, ``mlp_multipliers``, the attention's and the head's)
scale activations; the per-channel ``mup_vector`` is a buffer, not a parameter.
"""

from __future__ import annotations

from estimator.inputs.families.blocks import gated_mlp, rms
from estimator.inputs.families.hybrid import (
    attention_block,
    attention_shape,
    hybrid_layer,
    hybrid_model,
)
from estimator.inputs.families.ssm import mamba_prefixed_mixer
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("falcon_h1",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=4096)
    layers = c.integer("num_hidden_layers", default=32)
    a = attention_shape(c, h, heads=32, kv=8)
    if "mamba_d_ssm" in c.raw and c.raw["mamba_d_ssm"] is None:
        inner = c.integer("mamba_expand", default=2) * h
    else:
        inner = c.integer("mamba_d_ssm", default=1024)
    mamba = mamba_prefixed_mixer(
        c,
        h,
        inner,
        out_bias=c.flag("projectors_bias", False),
        gated_norm=c.flag("mamba_rms_norm", False),
    )
    attention, core = attention_block(h, a, c.flag("attention_bias", False))
    inter = c.integer("intermediate_size", default=14336)
    ffn = gated_mlp("feed_forward", h, inter, c.flag("mlp_bias", False), "mlp")
    norms = (rms("input_layernorm", h), rms("pre_ff_layernorm", h))
    layer = hybrid_layer("hybrid", norms, ffn, mixer=mamba, attention=attention, core=core)
    vocab = c.integer("vocab_size", default=128000)
    tie = c.flag("tie_word_embeddings", False)
    return hybrid_model(
        c, ident, h, [layer] * layers, vocab=vocab, tie=tie, final_norm="final_layernorm"
    )
