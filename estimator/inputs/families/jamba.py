"""Jamba (AI21; ``JambaForCausalLM``): Mamba-1 layers with grouped-query attention (no rotary
positions, no bias) on every layer ``i`` with ``i % attn_layer_period == attn_layer_offset``
(8 and 4 by default), and a mixture of ``num_experts`` SwiGLU experts (``feed_forward.router``
and fused ``feed_forward.experts``, ``num_experts_per_tok`` per token, all of
``intermediate_size``) instead of the SwiGLU MLP on every layer with
``i % expert_layer_period == expert_layer_offset`` (2 and 1) when there is more than one
expert. Norms ``input_layernorm``, ``pre_ff_layernorm``, final ``final_layernorm``.

The Mamba-1 mixer (``JambaMambaMixer``; Gu and Dao 2023, "Mamba") is ``I = mamba_expand x
hidden_size`` channels wide: ``in_proj`` to x and the gate z (``mamba_proj_bias``), a
depthwise causal convolution of ``mamba_d_conv`` taps over x (``mamba_conv_bias``),
``x_proj`` to the step rank ``R = mamba_dt_rank`` ("auto": ceil(hidden / 16)) and the
``mamba_d_state``-wide B and C, RMSNorms over each of them (``dt_layernorm``,
``b_layernorm``, ``c_layernorm``: Jamba's addition), ``dt_proj`` from R back to I (always
biased), ``A_log`` per channel and state, ``D`` per channel, ``out_proj``. The scan keeps an
``I x mamba_d_state`` state (a ``RecurrentCore`` of I heads of width 1, one B/C group).

FLOPs: ``dt_proj`` is a ``Linear`` here; transformers applies its weight as a raw matmul
(``self.dt_proj.weight @ time_step``), so torch's counter books those ``2 R I`` FLOPs per token
to the mixer's own code, the planner to ``dt_proj``: the totals are the same. The mixer core
(``counts.flops.mixer_flops``) is the convolution and the scan's ``C . state`` product.
TP splits the channels, as vLLM's ``MambaMixer`` does (``x_proj`` row-parallel, so B, C and the
step rank are whole on every rank).
"""

from __future__ import annotations

import math

from estimator.errors import SpecError
from estimator.inputs.architecture import Linear, Param
from estimator.inputs.families.blocks import gated_mlp, rms, routed_experts, router
from estimator.inputs.families.hybrid import (
    attention_block,
    attention_shape,
    hybrid_layer,
    hybrid_model,
)
from estimator.inputs.families.ssm import Mixer, recurrent_core
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("jamba",)
# mamba_ssm's selective_scan_fwd runs the sequence in 2048-token chunks and keeps the state of
# each chunk's end (csrc/selective_scan/selective_scan.cpp: n_chunks = (seqlen + 2047) / 2048)
SELECTIVE_SCAN_CHUNK = 2048


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=4096)
    layers = c.integer("num_hidden_layers", default=32)
    attn_period, attn_offset = _period(c, "attn_layer", 8, 4)
    moe_period, moe_offset = _period(c, "expert_layer", 2, 1)
    a = attention_shape(c, h, heads=32, kv=8)
    attention, core = attention_block(h, a, False)
    mamba = _mamba1(c, h)
    experts = c.integer("num_experts", "num_local_experts", default=16)
    inter = c.integer("intermediate_size", default=14336)
    mlp = gated_mlp("feed_forward", h, inter, False, "mlp")
    moe_at = {i for i in range(layers) if i % moe_period == moe_offset} if experts > 1 else set()
    spec: MoESpec | None = None
    routed: tuple[Linear, ...] = ()
    if moe_at:
        top_k = c.integer("num_experts_per_tok", default=2)
        if top_k > experts:
            raise SpecError(
                "config.num_experts_per_tok", f"must be <= num_experts ({experts})", top_k
            )
        routed = (
            router("feed_forward.router", h, experts),
            *routed_experts("feed_forward.experts", h, inter, experts, top_k),
        )
        spec = MoESpec(experts, top_k, inter, 0, len(moe_at))
    norms = (rms("input_layernorm", h), rms("pre_ff_layernorm", h))
    stack = []
    for i in range(layers):
        ffn, suffix = (routed, "-moe") if i in moe_at else (mlp, "")
        if i % attn_period == attn_offset:
            stack.append(
                hybrid_layer("attention" + suffix, norms, ffn, attention=attention, core=core)
            )
        else:
            stack.append(hybrid_layer("mamba" + suffix, norms, ffn, mixer=mamba))
    vocab = c.integer("vocab_size", default=65536)
    tie = c.flag("tie_word_embeddings", False)
    return hybrid_model(
        c, ident, h, stack, vocab=vocab, tie=tie, final_norm="final_layernorm", moe=spec
    )


def _period(c: ConfigReader, name: str, period: int, offset: int) -> tuple[int, int]:
    """``<name>_period`` and ``<name>_offset``, the offset below the period (JambaConfig)."""
    p = c.integer(f"{name}_period", default=period)
    o = c.integer(f"{name}_offset", default=offset, minimum=0)
    if o >= p:
        raise SpecError(f"config.{name}_offset", f"must be smaller than {name}_period ({p})", o)
    return p, o


def _mamba1(c: ConfigReader, h: int) -> Mixer:
    """Jamba's Mamba-1 mixer ``mamba`` (see the module docstring)."""
    inner = c.integer("mamba_expand", default=2) * h
    state = c.integer("mamba_d_state", default=16)
    kernel = c.integer("mamba_d_conv", default=4)
    given = c.get("mamba_dt_rank")
    rank = math.ceil(h / 16) if given in (None, "auto") else c.integer("mamba_dt_rank")
    proj_bias = c.flag("mamba_proj_bias", False)
    linears = (
        Linear("mamba.in_proj", h, 2 * inner, proj_bias, "mixer", "column", inner),
        Linear("mamba.x_proj", inner, rank + 2 * state, False, "mixer", "row", inner),
        Linear("mamba.dt_proj", rank, inner, True, "mixer", "column", inner),
        Linear("mamba.out_proj", inner, h, proj_bias, "mixer", "row", inner),
    )
    extras = [Param("mamba.conv1d.weight", inner * kernel, "mixer", inner)]
    if c.flag("mamba_conv_bias", True):
        extras.append(Param("mamba.conv1d.bias", inner, "mixer", inner))
    extras += [
        Param("mamba.A_log", inner * state, "mixer", inner),
        Param("mamba.D", inner, "mixer", inner),
        Param("mamba.dt_layernorm.weight", rank, "norms"),
        Param("mamba.b_layernorm.weight", state, "norms"),
        Param("mamba.c_layernorm.weight", state, "norms"),
    ]
    # channels as heads of width 1, one B/C group, the convolution over the channels
    core = recurrent_core("mamba1", inner, 1, state, 1, inner, kernel, SELECTIVE_SCAN_CHUNK)
    return Mixer(linears, tuple(extras), core)
