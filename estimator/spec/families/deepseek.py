"""DeepSeek-V3: multi-head latent attention (MLA) and a mixture of experts after the first
``first_k_dense_replace`` dense layers: ``n_routed_experts`` routed experts (``top_k`` a token)
plus ``n_shared_experts`` shared ones, all of ``moe_intermediate_size``."""

from __future__ import annotations

from estimator.spec.architecture import AttentionCore, Linear, Norm
from estimator.spec.families.blocks import Layer, gated_mlp, rms, routed_experts, router
from estimator.spec.families.decoder import (
    config_defaults,
    decoder,
    layer_name,
    prelude,
    read_experts,
    standard_layer_norms,
)
from estimator.spec.model import ModelSpec, MoESpec
from estimator.spec.reader import ConfigReader

__all__ = ["MODEL_TYPES", "mla", "read"]

MODEL_TYPES = ("deepseek_v3",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    p = prelude(c, defaults, default_sliding=False)
    d = p.dims
    h = d.hidden
    experts, top_k, moe_inter = read_experts(
        c, ("n_routed_experts", "num_local_experts"), 256, 8, "moe_intermediate_size", 2048
    )
    shared_inter = moe_inter * c.integer("n_shared_experts", default=1, minimum=0)
    first_dense = c.integer("first_k_dense_replace", default=3, minimum=0)
    moe_layers = set(range(first_dense, d.layers))
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    routed = [router("mlp.gate", h, experts)]
    routed += routed_experts("mlp.experts", h, moe_inter, experts, top_k)
    if shared_inter:
        routed += gated_mlp("mlp.shared_experts", h, shared_inter, False, "shared_experts")
    dense = gated_mlp("mlp", h, inter, p.mlp_bias, "mlp")
    layers = []
    for i in range(d.layers):
        core, attention = mla(c, h, d.heads)
        norms: list[Norm] = standard_layer_norms(h)
        if c.opt_integer("q_lora_rank"):
            norms.append(rms("self_attn.q_a_layernorm", c.integer("q_lora_rank")))
        norms.append(rms("self_attn.kv_a_layernorm", c.integer("kv_lora_rank", default=512)))
        ffn = routed if i in moe_layers else dense
        linears = (*attention, *ffn)
        layers.append(Layer(layer_name(i in moe_layers, None), linears, tuple(norms), core))
    moe = MoESpec(experts, top_k, moe_inter, shared_inter, len(moe_layers)) if moe_layers else None
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=moe, activation=activation)


def mla(c: ConfigReader, h: int, heads: int) -> tuple[AttentionCore, list[Linear]]:
    """DeepSeek multi-head latent attention (DeepSeek-V2/V3 paper, transformers' DeepseekV3).

    Megatron keeps the down-projections (q_a, kv_a) whole on every TP rank and splits the
    up-projections by head; the KV cache keeps the latent plus the shared rope key.
    """
    q_lora = c.opt_integer("q_lora_rank")
    kv_lora = c.integer("kv_lora_rank", default=512)
    nope = c.integer("qk_nope_head_dim", default=128)
    rope = c.integer("qk_rope_head_dim", default=64)
    v_dim = c.integer("v_head_dim", default=128)
    bias = c.flag("attention_bias", False)
    qk = nope + rope
    linears = []
    if q_lora:
        linears += [
            Linear("self_attn.q_a_proj", h, q_lora, bias, "attention", "replicated"),
            Linear("self_attn.q_b_proj", q_lora, heads * qk, False, "attention", "column", heads),
        ]
    else:
        linears.append(
            Linear("self_attn.q_proj", h, heads * qk, False, "attention", "column", heads)
        )
    linears += [
        Linear("self_attn.kv_a_proj_with_mqa", h, kv_lora + rope, bias, "attention", "replicated"),
        Linear(
            "self_attn.kv_b_proj",
            kv_lora,
            heads * (nope + v_dim),
            False,
            "attention",
            "column",
            heads,
        ),
        Linear("self_attn.o_proj", heads * v_dim, h, bias, "attention", "row", heads),
    ]
    core = AttentionCore(heads, heads, qk, v_dim, None, kv_lora + rope, cache_shards_with_tp=False)
    return core, linears
