"""MiniMax-M2 (MiniMax, 2025; M2.1, M2.5 and M2.7 share the architecture): every layer softmax
attention and a mixture of experts, as transformers 5 builds it (``modeling_minimax_m2.py``).

- Attention without biases; q and k are RMS-normalized over the whole projection
  (``self_attn.q_norm`` of heads x head_dim, ``self_attn.k_norm`` of KV heads x head_dim, the
  released ``qk_norm_type: per_layer``) before rotary positions, which turn only the first
  ``rotary_dim`` of each head (partial rotary: no parameters, no matmul).
- ``mlp.gate`` (no bias) scores ``num_local_experts`` fused experts of ``intermediate_size``
  with a sigmoid, ``num_experts_per_tok`` a token; the selection bias
  ``e_score_correction_bias`` is a buffer in transformers, not a parameter, and is not counted.
- transformers does not build the multi-token-prediction modules the checkpoints carry
  (``use_mtp``, ``num_mtp_modules``): they are not counted, and the spec says so.

Config fields transformers ignores but that describe a different model are refused rather than
read as if absent: lightning-attention layers in ``attn_type_list`` (MiniMax-01's), a shared
expert (``shared_intermediate_size``), q/k norms turned off or per head.
"""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.inputs.families.blocks import rms, routed_experts, router
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    read_dims,
    standard_layer_norms,
)
from estimator.inputs.families.gpt_oss import local_experts, quantization_notes
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("minimax_m2",)
SOFTMAX_ATTENTION = 1  # attn_type_list: 1 softmax attention, 0 lightning (linear) attention
PER_LAYER = "per_layer"  # qk_norm_type: one norm over all heads (transformers'), not per head


def read(c: ConfigReader, ident: str) -> ModelSpec:
    _refuse_what_transformers_ignores(c)
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    experts, top_k, inter = local_experts(c, defaults)
    moe = (
        router("mlp.gate", d.hidden, experts),
        *routed_experts("mlp.experts", d.hidden, inter, experts, top_k),
    )
    norms = (
        *standard_layer_norms(d.hidden),
        rms("self_attn.q_norm", d.heads * d.head_dim),
        rms("self_attn.k_norm", d.kv_heads * d.head_dim),
    )
    layers = [attention_layer(d, None, moe, norms=norms, moe=True)] * d.layers
    notes = quantization_notes(c)
    mtp = c.integer("num_mtp_modules", default=0, minimum=0) if c.flag("use_mtp", False) else 0
    if mtp:
        notes.append(
            f"The checkpoint's {mtp} multi-token-prediction modules (num_mtp_modules) are not"
            " counted: transformers does not build them."
        )
    spec = MoESpec(experts, top_k, inter, 0, d.layers)
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=spec, activation=activation, notes=notes)


def _refuse_what_transformers_ignores(c: ConfigReader) -> None:
    kinds = c.raw.get("attn_type_list")
    if isinstance(kinds, list) and any(k != SOFTMAX_ATTENTION for k in kinds):
        raise SpecError(
            "config.attn_type_list",
            "lists lightning-attention layers (0), which MiniMax-M2 as transformers builds it"
            " does not have: only softmax-attention layers (1) are modelled",
            kinds,
        )
    if c.integer("shared_intermediate_size", default=0, minimum=0):
        raise SpecError(
            "config.shared_intermediate_size",
            "describes a shared expert, which MiniMax-M2 as transformers builds it does not have",
            c.raw["shared_intermediate_size"],
        )
    if not c.flag("use_qk_norm", True):
        raise SpecError(
            "config.use_qk_norm",
            "only the q/k RMSNorms transformers builds (use_qk_norm: true) are modelled",
            False,
        )
    if c.text("qk_norm_type", default=PER_LAYER) != PER_LAYER:
        raise SpecError(
            "config.qk_norm_type",
            "only q/k norms over the whole projection (per_layer), as transformers builds them,"
            " are modelled",
            c.raw.get("qk_norm_type"),
        )
