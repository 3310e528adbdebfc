"""DeepSeek's decoders, as transformers 5.23 builds them: DeepSeek-V2 (and V2-Lite), DeepSeek-V3,
DeepSeek-V3.2 and Kimi K2.

- Multi-head latent attention (MLA, DeepSeek-V2 paper, arXiv:2405.04434): queries through a
  ``q_lora_rank`` bottleneck (``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``) or, where the config
  sets ``q_lora_rank`` to null (V2-Lite), one ``q_proj``; keys and values from a ``kv_lora_rank``
  latent plus one shared rope key (``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``).
  The KV cache keeps the latent and the rope key (transformers 5 caches them compressed).
- A mixture of experts after the first ``first_k_dense_replace`` dense layers (``deepseek_moe``,
  shared with GLM-4.5 and dots.llm1): the router ``mlp.gate`` (V3's ``e_score_correction_bias``
  is a buffer, not a parameter), ``n_routed_experts`` fused experts, ``num_experts_per_tok`` a
  token, and ``n_shared_experts`` shared ones folded into one MLP of ``n_shared_experts x
  moe_intermediate_size``. transformers makes every later layer MoE and ignores
  ``moe_layer_freq``, so a config whose ``moe_layer_freq`` is not 1 is refused.
- DeepSeek-V2's dense and shared MLPs take ``mlp_bias``; V3's and V3.2's never have biases.
- DeepSeek-V3.2 (DSA, DeepSeek Sparse Attention): MLA always through the q bottleneck, and a
  lightning indexer per layer (``self_attn.indexer``: ``wq_b`` from the q latent to
  ``index_n_heads x index_head_dim``, ``wk`` to one ``index_head_dim`` key, its LayerNorm
  ``k_norm`` with bias, ``weights_proj`` to one weight per index head) whose scores
  ``sum_h w_h relu(q_h . k)`` pick ``index_topk`` keys per query. Its key cache (``index_head_dim``
  per token, transformers' ``DynamicIndexedLayer.indexer_keys``) is part of the KV cache; its
  scores cost ``2 index_n_heads (index_head_dim + 1)`` FLOPs per (query, key) pair (q.k per head,
  then the weighted sum over heads: two matmuls torch counts), over every earlier key. Dense or
  MoE per layer from ``mlp_layer_types`` where the config gives it.
- Kimi K2 (``model_type`` ``kimi_k2``, not registered in transformers 5.23) ships DeepSeek-V3's
  architecture (``DeepseekV3ForCausalLM``); it is read as ``deepseek_v3``, as transformers' own
  Kimi-K2.5 config reads a ``kimi_k2`` text config.

The indexer's modules are whole on every TP rank (vLLM's ``ReplicatedLinear``), as are MLA's
down-projections and latent cache. transformers does not build the multi-token-prediction
layers (``num_nextn_predict_layers``): they are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from estimator.errors import SpecError
from estimator.inputs.architecture import AttentionCore, Linear, Norm
from estimator.inputs.families.blocks import Layer, gated_mlp, ln, rms, routed_experts, router
from estimator.inputs.families.decoder import (
    Dims,
    attention_layer,
    config_defaults,
    decoder,
    layer_name,
    qk_norms,
    read_dims,
    read_experts,
    standard_layer_norms,
)
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = [
    "MODEL_TYPES",
    "DeepseekMoE",
    "deepseek_moe",
    "first_dense_moe_layers",
    "gqa_moe_decoder",
    "mla",
    "read",
]

MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")
# model types transformers does not register, read as the architecture their checkpoint ships
READ_AS = {"kimi_k2": "deepseek_v3"}
# the names a config may give the routed experts under (each config class's attribute_map)
_EXPERT_NAMES = {
    "deepseek_v2": ("n_routed_experts", "num_experts"),
    "deepseek_v32": ("n_routed_experts", "num_local_experts", "num_experts"),
}


def read(c: ConfigReader, ident: str) -> ModelSpec:
    mt = READ_AS.get(c.model_type, c.model_type)
    defaults = config_defaults(mt)
    d = read_dims(c, defaults)
    freq = c.integer("moe_layer_freq", default=1)
    if freq != 1:
        raise SpecError(
            "config.moe_layer_freq",
            "must be 1: transformers makes every layer after first_k_dense_replace MoE (it "
            "ignores moe_layer_freq), so a sparser placement is not modelled",
            freq,
        )
    if mt == "deepseek_v32":
        moe_layers = _v32_moe_layers(c, d.layers, defaults)
    else:
        moe_layers = first_dense_moe_layers(c, d.layers, defaults)
    mlp_bias = mt == "deepseek_v2" and c.flag("mlp_bias", False)
    moe = deepseek_moe(c, d.hidden, defaults, moe_layers, mlp_bias, _EXPERT_NAMES.get(mt))
    q_lora = _q_lora_rank(c, defaults)
    core, attention = mla(c, d.hidden, d.heads, q_lora)
    norms: list[Norm] = standard_layer_norms(d.hidden)
    if q_lora:
        norms.append(rms("self_attn.q_a_layernorm", q_lora))
    norms.append(rms("self_attn.kv_a_layernorm", c.integer("kv_lora_rank", default=512)))
    if mt == "deepseek_v32":
        if q_lora is None:
            raise SpecError(
                "config.q_lora_rank",
                "must be set for 'deepseek_v32' (its attention and indexer read the q latent)",
            )
        core, indexer, k_norm = lightning_indexer(c, d.hidden, q_lora, defaults, core)
        attention += indexer
        norms.append(k_norm)
    layers = [
        Layer(layer_name(i in moe_layers, None), (*attention, *moe.ffn(i)), tuple(norms), core)
        for i in range(d.layers)
    ]
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=moe.spec, activation=activation)


def _q_lora_rank(c: ConfigReader, defaults: Mapping[str, Any]) -> int | None:
    """The query bottleneck: the config's, the class default where the key is absent, none
    where the config sets it to null (DeepSeek-V2-Lite: one ``q_proj``)."""
    if "q_lora_rank" in c.raw and c.raw["q_lora_rank"] is None:
        return None
    return c.integer("q_lora_rank", default=defaults.get("q_lora_rank"))


def mla(
    c: ConfigReader, h: int, heads: int, q_lora: int | None
) -> tuple[AttentionCore, list[Linear]]:
    """DeepSeek multi-head latent attention (DeepSeek-V2/V3 papers, transformers' DeepseekV3).

    Megatron keeps the down-projections (q_a, kv_a) whole on every TP rank and splits the
    up-projections by head; the KV cache keeps the latent plus the shared rope key.
    """
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
    core = AttentionCore(
        heads, heads, qk, v_dim, None, kv_lora + rope, cache_shards_with_tp=False,
        latent_dims=(kv_lora + rope, kv_lora),
    )  # fmt: skip
    return core, linears


def lightning_indexer(
    c: ConfigReader,
    h: int,
    q_lora: int,
    defaults: Mapping[str, Any],
    mla_core: AttentionCore,
) -> tuple[AttentionCore, list[Linear], Norm]:
    """DeepSeek-V3.2's DSA indexer (transformers' ``DeepseekV32Indexer``): its linears, its
    ``k_norm`` and the MLA core made sparse (``index_topk`` keys a query) with the indexer's key
    cache added to the latent's."""
    heads = c.integer("index_n_heads", default=defaults.get("index_n_heads"))
    dim = c.integer("index_head_dim", default=defaults.get("index_head_dim"))
    topk = c.integer("index_topk", default=defaults.get("index_topk"))
    rope = c.integer("qk_rope_head_dim", default=64)
    if dim < rope:
        raise SpecError(
            "config.index_head_dim", f"must be >= qk_rope_head_dim={rope} (its rotary part)", dim
        )
    linears = [
        Linear("self_attn.indexer.wq_b", q_lora, heads * dim, False, "attention", "replicated"),
        Linear("self_attn.indexer.wk", h, dim, False, "attention", "replicated"),
        Linear("self_attn.indexer.weights_proj", h, heads, False, "attention", "replicated"),
    ]
    core = AttentionCore(
        mla_core.num_heads,
        mla_core.num_kv_heads,
        mla_core.qk_head_dim,
        mla_core.v_head_dim,
        None,
        mla_core.cache_elems_per_token + dim,
        cache_shards_with_tp=False,
        topk=topk,
        index_heads=heads,
        index_head_dim=dim,
        latent_dims=mla_core.latent_dims,
    )
    return core, linears, ln("self_attn.indexer.k_norm", dim)


class DeepseekMoE(NamedTuple):
    """A DeepSeek-style feed-forward stack: which layers route (``moe_layers``), the modules of
    such a layer (``routed``) and of the others (``dense``), and the MoE's size (``spec``)."""

    routed: tuple[Linear, ...]
    dense: tuple[Linear, ...]
    moe_layers: frozenset[int]
    spec: MoESpec | None

    def ffn(self, layer: int) -> tuple[Linear, ...]:
        return self.routed if layer in self.moe_layers else self.dense


def first_dense_moe_layers(
    c: ConfigReader, layers: int, defaults: Mapping[str, Any]
) -> frozenset[int]:
    """Every layer from ``first_k_dense_replace`` on routes its tokens."""
    first = c.integer(
        "first_k_dense_replace", default=defaults.get("first_k_dense_replace"), minimum=0
    )
    return frozenset(range(first, layers))


def _v32_moe_layers(c: ConfigReader, layers: int, defaults: Mapping[str, Any]) -> frozenset[int]:
    """DeepSeek-V3.2: ``mlp_layer_types`` (``dense``/``sparse`` per layer) where given; every
    layer's attention is indexed (``layer_types``, where given, may say nothing else)."""
    attention = c.raw.get("layer_types")
    if attention is not None and (
        not isinstance(attention, list) or set(attention) - {"indexed_attention"}
    ):
        raise SpecError(
            "config.layer_types",
            "only 'indexed_attention' layers (DeepSeek Sparse Attention) are modelled",
            attention,
        )
    types = c.raw.get("mlp_layer_types")
    if types is None:
        return first_dense_moe_layers(c, layers, defaults)
    if not isinstance(types, list) or len(types) != layers or set(types) - {"dense", "sparse"}:
        raise SpecError(
            "config.mlp_layer_types",
            f"must list 'dense' or 'sparse' for each of the {layers} layers",
            types,
        )
    return frozenset(i for i, t in enumerate(types) if t == "sparse")


def deepseek_moe(
    c: ConfigReader,
    h: int,
    defaults: Mapping[str, Any],
    moe_layers: frozenset[int],
    mlp_bias: bool = False,
    expert_names: tuple[str, ...] | None = None,
) -> DeepseekMoE:
    """The feed-forward blocks of DeepSeek-V2/V3 and of the families built like them (GLM-4.5,
    dots.llm1): a dense ``mlp`` of ``intermediate_size`` before the MoE layers; in them the router
    ``mlp.gate``, the fused ``mlp.experts`` and ``mlp.shared_experts`` of ``n_shared_experts x
    moe_intermediate_size`` (built even when empty, then zero-sized), defaults from the config
    class (``defaults``; a field it leaves without a default is required)."""
    names = expert_names or ("n_routed_experts", "num_local_experts")
    experts, top_k, width = read_experts(
        c,
        names,
        defaults.get("n_routed_experts"),
        defaults.get("num_experts_per_tok"),
        "moe_intermediate_size",
        defaults.get("moe_intermediate_size"),
    )
    shared = width * c.integer(
        "n_shared_experts", default=defaults.get("n_shared_experts"), minimum=0
    )
    routed = [
        router("mlp.gate", h, experts),
        *routed_experts("mlp.experts", h, width, experts, top_k),
    ]
    if shared:
        routed += gated_mlp("mlp.shared_experts", h, shared, mlp_bias, "shared_experts")
    inter = c.integer("intermediate_size", default=defaults.get("intermediate_size"))
    dense = gated_mlp("mlp", h, inter, mlp_bias, "mlp")
    spec = MoESpec(experts, top_k, width, shared, len(moe_layers)) if moe_layers else None
    return DeepseekMoE(tuple(routed), tuple(dense), moe_layers, spec)


def gqa_moe_decoder(
    c: ConfigReader,
    ident: str,
    d: Dims,
    windows: tuple[int | None, ...],
    *,
    qkv_bias: bool,
    o_bias: bool,
    qk_norm: bool,
) -> ModelSpec:
    """A decoder of grouped-query attention (``self_attn.{q,k,v,o}_proj``, with per-head
    ``q_norm``/``k_norm`` RMSNorms where ``qk_norm``) over DeepSeek-V3's feed-forward stack
    (``deepseek_moe`` after ``first_k_dense_replace`` dense layers): GLM-4.5 and dots.llm1."""
    defaults = config_defaults(c.model_type)
    moe_layers = first_dense_moe_layers(c, d.layers, defaults)
    moe = deepseek_moe(c, d.hidden, defaults, moe_layers)
    norms = standard_layer_norms(d.hidden)
    if qk_norm:
        norms += qk_norms(d.head_dim, d.head_dim)
    layers = [
        attention_layer(
            d,
            window,
            moe.ffn(i),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            norms=norms,
            moe=i in moe_layers,
        )
        for i, window in enumerate(windows)
    ]
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=moe.spec, activation=activation)
