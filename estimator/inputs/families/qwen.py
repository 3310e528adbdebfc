"""Qwen2/2.5, Qwen3 and Qwen3-MoE. Qwen2's attention has biases on q/k/v and none on o
(hard-coded in ``Qwen2Attention``); Qwen3 normalizes q and k per head (``q_norm``, ``k_norm``);
sliding windows, where enabled, apply from ``max_window_layers`` on. Qwen3-MoE routes each token
to ``num_experts_per_tok`` of ``num_experts`` experts on every ``decoder_sparse_step``-th layer
not listed in ``mlp_only_layers``."""

from __future__ import annotations

from estimator.inputs.architecture import Linear
from estimator.inputs.families.blocks import gated_mlp, rms, routed_experts, router
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    prelude,
    read_experts,
    standard_layer_norms,
)
from estimator.inputs.families.llama import UNKNOWN_NOTE
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read", "read_qwen2_moe"]

MODEL_TYPES = ("qwen2", "qwen3", "qwen3_moe")


def read(c: ConfigReader, ident: str) -> ModelSpec:
    return _read(c, ident)


def read_qwen2_moe(c: ConfigReader, ident: str) -> ModelSpec:
    """Qwen2-MoE, approximately: its shared expert's sigmoid gate (``shared_expert_gate``, one
    output) is not counted, so it is read with a note."""
    return _read(c, ident, UNKNOWN_NOTE.format(c.model_type))


def _read(c: ConfigReader, ident: str, note: str = "") -> ModelSpec:
    mt = c.model_type
    defaults = config_defaults(mt)
    p = prelude(c, defaults, default_sliding=False)
    d = p.dims
    qkv_bias, o_bias = (True, False) if mt == "qwen2" else (p.attention_bias, p.attention_bias)
    moe: MoESpec | None = None
    moe_layers: set[int] = set()
    experts: tuple[Linear, ...] = ()
    if mt in ("qwen3_moe", "qwen2_moe"):
        count, top_k, width = read_experts(
            c, ("num_experts",), 128, 8, "moe_intermediate_size", 768
        )
        step = c.integer("decoder_sparse_step", default=1)
        only_mlp = set(c.int_list("mlp_only_layers"))
        moe_layers = {i for i in range(d.layers) if i not in only_mlp and (i + 1) % step == 0}
        shared = 0
        if mt == "qwen2_moe":
            shared = c.integer("shared_expert_intermediate_size", default=0, minimum=0)
        experts = (
            router("mlp.gate", d.hidden, count),
            *routed_experts("mlp.experts", d.hidden, width, count, top_k),
        )
        if shared:
            experts += tuple(
                gated_mlp("mlp.shared_experts", d.hidden, shared, False, "shared_experts")
            )
        if moe_layers:
            moe = MoESpec(count, top_k, width, shared, len(moe_layers))
    inter = c.integer("intermediate_size", default=defaults.get("intermediate_size"))
    mlp = gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp")
    norms = standard_layer_norms(d.hidden)
    if mt in ("qwen3", "qwen3_moe"):
        norms += [rms("self_attn.q_norm", d.head_dim), rms("self_attn.k_norm", d.head_dim)]
    layers = [
        attention_layer(
            d,
            window,
            experts if i in moe_layers else mlp,
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            norms=norms,
            moe=i in moe_layers,
        )
        for i, window in enumerate(p.windows)
    ]
    activation = c.text("hidden_act", default="silu")
    return decoder(
        c, ident, d, layers, moe=moe, activation=activation, notes=[note] if note else []
    )
