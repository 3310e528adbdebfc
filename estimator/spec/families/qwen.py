"""Qwen2/2.5, Qwen3 and Qwen3-MoE. Qwen2's attention has biases on q/k/v and none on o
(hard-coded in ``Qwen2Attention``); Qwen3 normalizes q and k per head (``q_norm``, ``k_norm``);
sliding windows, where enabled, apply from ``max_window_layers`` on. Qwen3-MoE routes each token
to ``num_experts_per_tok`` of ``num_experts`` experts on every ``decoder_sparse_step``-th layer
not listed in ``mlp_only_layers``."""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.spec.architecture import Linear, Norm
from estimator.spec.families.blocks import (
    Layer,
    attention_linears,
    gated_mlp,
    rms,
    routed_experts,
    router,
    standard_core,
)
from estimator.spec.families.decoder import decoder, layer_name, prelude, standard_layer_norms
from estimator.spec.model import ModelSpec, MoESpec
from estimator.spec.reader import ConfigReader

__all__ = ["DEFAULTS", "MODEL_TYPES", "read", "read_qwen2_moe"]

DEFAULTS = {
    "qwen2": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=22016,
        num_hidden_layers=32,
        num_attention_heads=32,
    ),
    "qwen3": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=22016,
        num_hidden_layers=32,
        num_attention_heads=32,
        head_dim=128,
    ),
    "qwen3_moe": dict(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=24,
        num_attention_heads=32,
        num_key_value_heads=4,
    ),
}
MODEL_TYPES = tuple(DEFAULTS)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    return _read(c, ident, DEFAULTS[c.model_type])


def read_qwen2_moe(c: ConfigReader, ident: str) -> ModelSpec:
    """Qwen2-MoE, approximately: its shared expert's sigmoid gate (``shared_expert_gate``, one
    output) is not counted, so it is read with a note."""
    note = (
        f"model_type {c.model_type!r} is not a known family: read as a Llama-style decoder "
        "(RMSNorm, gated MLP, rotary positions); check the counts."
    )
    return _read(c, ident, {}, note)


def _read(c: ConfigReader, ident: str, defaults: dict[str, int], note: str = "") -> ModelSpec:
    mt = c.model_type
    p = prelude(c, defaults, default_sliding=False)
    d = p.dims
    qkv_bias, o_bias = (True, False) if mt == "qwen2" else (p.attention_bias, p.attention_bias)
    experts = top_k = moe_inter = shared_inter = 0
    moe_layers: set[int] = set()
    if mt in ("qwen3_moe", "qwen2_moe"):
        experts = c.integer("num_experts", default=128)
        top_k = c.integer("num_experts_per_tok", default=8)
        moe_inter = c.integer("moe_intermediate_size", default=768)
        step = c.integer("decoder_sparse_step", default=1)
        only_mlp = set(c.int_list("mlp_only_layers"))
        moe_layers = {i for i in range(d.layers) if i not in only_mlp and (i + 1) % step == 0}
        if mt == "qwen2_moe":
            shared_inter = c.integer("shared_expert_intermediate_size", default=0, minimum=0)
    if top_k > experts:
        raise SpecError(
            "config.num_experts_per_tok", f"must be <= the number of experts ({experts})", top_k
        )
    inter = c.integer("intermediate_size", default=defaults.get("intermediate_size"))
    layers = []
    for i, window in enumerate(p.windows):
        norms: list[Norm] = standard_layer_norms(d.hidden)
        if mt in ("qwen3", "qwen3_moe"):
            norms += [rms("self_attn.q_norm", d.head_dim), rms("self_attn.k_norm", d.head_dim)]
        linears: list[Linear] = attention_linears(
            d.hidden, d.heads, d.kv_heads, d.head_dim, qkv_bias, o_bias
        )
        if i in moe_layers:
            linears.append(router("mlp.gate", d.hidden, experts))
            linears += routed_experts("mlp.experts", d.hidden, moe_inter, experts, top_k)
            if shared_inter:
                linears += gated_mlp(
                    "mlp.shared_experts", d.hidden, shared_inter, False, "shared_experts"
                )
        else:
            linears += gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp")
        core = standard_core(d.heads, d.kv_heads, d.head_dim, window)
        layers.append(
            Layer(layer_name(i in moe_layers, window), tuple(linears), tuple(norms), core)
        )
    moe = MoESpec(experts, top_k, moe_inter, shared_inter, len(moe_layers)) if moe_layers else None
    activation = c.text("hidden_act", default="silu")
    return decoder(
        c, ident, d, layers, moe=moe, activation=activation, notes=[note] if note else []
    )
