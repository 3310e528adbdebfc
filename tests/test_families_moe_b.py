"""DeepSeek-style MoE families: DeepSeek-V2, DeepSeek-V3.2 (sparse attention and its indexer),
Kimi K2 (DeepSeek-V3's architecture), GLM-4.5 (``glm4_moe``) and dots.llm1 (``dots1``).
Parameters and forward FLOPs exact against transformers on the meta device for the catalog's
configs, transformers' default configs and tiny configs of every variant; the KV cache against
a real prefill; published totals and active counts within stated tolerances."""

from __future__ import annotations

from typing import Any

import pytest

from estimator import (
    SpecError,
    count_params,
    forward_flops,
    get_model,
    get_precision,
    model_entry,
    model_from_config,
)
from estimator.counts.flops import causal_pairs
from estimator.inputs.config import used_config
from estimator.memory.inference import kv_cache_bytes_per_sequence

FP32_KV = get_precision({"kv_cache": "fp32"})

CATALOG = {  # transformers 5.23's count of each catalog entry (meta device)
    "deepseek-v3.2": 671_877_929_216,
    "deepseek-v2-lite": 15_706_484_224,
    "kimi-k2-instruct": 1_026_408_209_408,
    "glm-4.5": 352_797_814_784,
    "glm-4.5-air": 106_852_245_504,
    "glm-4.6": 352_797_814_784,
    "glm-4.7": 352_797_814_784,
}

# Shrunk MLA and indexer dims (groundtruth.tiny_config shrinks MLA for deepseek_v3 only).
MLA_TINY = {"qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 16}
INDEXER_TINY = {"index_n_heads": 4, "index_head_dim": 16, "index_topk": 8}
# dots.llm1's config.json is not in the catalog: transformers' Dots1Config defaults stand for
# the family, with the three MoE sizes the class leaves unset (test values, not a checkpoint's).
DOTS1 = {
    "model_type": "dots1",
    "n_routed_experts": 128,
    "num_experts_per_tok": 6,
    "n_shared_experts": 2,
    "first_k_dense_replace": 1,
}


def _tiny(gt: Any, config: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """``gt.tiny_config`` with MLA (and the V3.2 indexer) shrunk too; the dimensions a config
    leaves out taken from transformers' config class first."""
    defaults = gt.hf_config(config)
    dims = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers")
    config = {**{k: getattr(defaults, k) for k in dims}, **config}
    extra: dict[str, Any] = {}
    if "kv_lora_rank" in config:
        extra.update(MLA_TINY)
        if config.get("q_lora_rank") is not None:
            extra["q_lora_rank"] = 32
    if "index_topk" in config:
        extra.update(INDEXER_TINY)
    return dict(gt.tiny_config(config, **{**extra, **overrides}))


def _base(name: str) -> dict[str, Any]:
    if name == "dots1":
        return dict(DOTS1)
    return dict(model_entry(name)["config"])


# Tiny configs exercising each family's variants: (base, overrides).
TINY = {
    "v2-lite": ("deepseek-v2-lite", {}),
    "v2-q-lora": ("deepseek-v2-lite", {"q_lora_rank": 32}),
    "v2-biases": ("deepseek-v2-lite", {"mlp_bias": True, "attention_bias": True}),
    "v2-group-limited": (
        "deepseek-v2-lite",
        {"topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2},
    ),
    "v2-all-moe-no-shared": (
        "deepseek-v2-lite",
        {"n_shared_experts": 0, "first_k_dense_replace": 0},
    ),
    "kimi-k2": ("kimi-k2-instruct", {}),
    "v32": ("deepseek-v3.2", {}),
    "v32-layer-types": ("deepseek-v3.2", {"mlp_layer_types": ["sparse", "dense"]}),
    "v32-biases": ("deepseek-v3.2", {"attention_bias": True, "mlp_bias": True}),
    "glm-4.5": ("glm-4.5", {}),
    "glm-4.5-air": ("glm-4.5-air", {}),
    "glm-no-bias-two-shared": ("glm-4.5", {"attention_bias": False, "n_shared_experts": 2}),
    "glm-tied": ("glm-4.5-air", {"tie_word_embeddings": True}),
    "dots1": ("dots1", {}),
    "dots1-biased": ("dots1", {"attention_bias": True}),
    "dots1-sliding": ("dots1", {"max_window_layers": 1, "sliding_window": 16}),
}


def _tiny_variant(gt: Any, name: str) -> dict[str, Any]:
    base, overrides = TINY[name]
    return _tiny(gt, _base(base), **overrides)


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_catalog_counts_equal_transformers(model_id: str, gt: Any) -> None:
    counts = count_params(get_model(model_id))
    assert counts.total == gt.param_count(model_entry(model_id)["config"]) == CATALOG[model_id]
    assert sum(counts.by_component().values()) == counts.total


# transformers' default config of each family (its config class's defaults; DeepSeek-V2 and
# dots.llm1 leave the routed experts a token unset, so the test gives them).
DEFAULTS = {
    "deepseek_v2": {"num_experts_per_tok": 6},
    "deepseek_v3": {},
    "deepseek_v32": {},
    "glm4_moe": {},
    "dots1": {k: v for k, v in DOTS1.items() if k != "model_type"},
}


@pytest.mark.parametrize("model_type", sorted(DEFAULTS))
def test_default_configs_equal_transformers(model_type: str, gt: Any) -> None:
    config = {"model_type": model_type, **DEFAULTS[model_type]}
    assert count_params(model_from_config(config)).total == gt.param_count(config)


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_params_equal_transformers(name: str, gt: Any) -> None:
    config = _tiny_variant(gt, name)
    counts = count_params(model_from_config(config))
    assert counts.total == gt.param_count(config)
    assert sum(counts.by_component().values()) == counts.total


@pytest.mark.parametrize("name", sorted(TINY))
@pytest.mark.parametrize("seq", [8, 37])
def test_tiny_forward_flops_equal_flop_counter(name: str, seq: int, gt: Any) -> None:
    config = _tiny_variant(gt, name)
    expected = gt.forward_flops(config, 2, seq)["total"]
    assert forward_flops(model_from_config(config), seq, 2).total == expected


@pytest.mark.parametrize("name", ["v2-lite", "v2-q-lora", "kimi-k2", "v32", "glm-4.5", "dots1"])
def test_kv_cache_equals_transformers_cache(name: str, gt: Any) -> None:
    # MLA caches the latent and the rope key; V3.2 adds the indexer's keys (indexer_keys)
    config = _tiny_variant(gt, name)
    batch, seq = 2, 40
    ours = batch * kv_cache_bytes_per_sequence(model_from_config(config), FP32_KV, seq)
    assert ours == gt.kv_cache_bytes(config, batch, seq)


def test_dots1_sliding_window_cache(gt: Any) -> None:
    # transformers keeps window - 1 tokens (test_inference.py's sliding-window rule)
    config = _tiny_variant(gt, "dots1-sliding")
    model = model_from_config(config)
    windows = [model.kinds[k].attention.window for k in model.layer_kinds]
    assert windows == [None, 16]
    batch, seq = 2, 40
    ours = batch * kv_cache_bytes_per_sequence(model, FP32_KV, seq)
    per_token_layer = 2 * model.num_kv_heads * model.head_dim * 4
    assert ours == gt.kv_cache_bytes(config, batch, seq) + batch * per_token_layer


def test_v32_cache_and_indexer_shape() -> None:
    model = get_model("deepseek-v3.2")
    core = model.kinds[0].attention
    assert core is not None
    assert (core.topk, core.index_heads, core.index_head_dim) == (2048, 64, 128)
    bf16 = get_precision("bf16")
    # latent 512 + rope key 64 + indexer key 128 per layer, whole on every TP rank
    assert kv_cache_bytes_per_sequence(model, bf16, 1) == 61 * 704 * 2
    assert kv_cache_bytes_per_sequence(model, bf16, 1, tp=8) == 61 * 704 * 2
    indexer = {m.name: m.params for m in model.kinds[0].linears if ".indexer." in m.name}
    assert indexer == {
        "self_attn.indexer.wq_b": 1536 * 64 * 128,
        "self_attn.indexer.wk": 7168 * 128,
        "self_attn.indexer.weights_proj": 7168 * 64,
    }


def test_v32_model_flops_attend_topk_and_index_every_key() -> None:
    # causal model FLOPs: MLA over min(i+1, topk) keys a query, the indexer over all i+1
    model = get_model("deepseek-v3.2")
    seq = 8192
    f = forward_flops(model, seq)
    mla = 2 * 128 * ((128 + 64) + 128)
    indexer = 2 * 64 * (128 + 1)
    expected = 61 * (mla * causal_pairs(seq, 2048) + indexer * causal_pairs(seq, None))
    assert f.attention_core_causal == expected
    assert f.attention_core == 61 * (mla + indexer) * seq * seq


def test_moe_layers_and_active_params() -> None:
    lite = get_model("deepseek-v2-lite")
    assert [lite.kinds[k].name for k in lite.layer_kinds] == ["dense"] + ["moe"] * 26
    assert lite.moe is not None
    assert (lite.moe.num_experts, lite.moe.top_k, lite.moe.shared_intermediate_size) == (
        64,
        6,
        2 * 1408,
    )
    counts = count_params(lite)
    assert counts.active == counts.total - counts.experts + counts.experts * 6 // 64
    glm = get_model("glm-4.5")
    assert [glm.kinds[k].name for k in glm.layer_kinds] == ["dense"] * 3 + ["moe"] * 89
    assert glm.kinds[1].linear("self_attn.o_proj").bias is False  # never biased in GLM
    assert glm.kinds[1].linear("self_attn.q_proj").bias is True


def test_published_counts() -> None:
    # DeepSeek-V2-Lite: "16B total params, 2.4B active params" (deepseek-ai/DeepSeek-V2-Lite-Chat
    # README at 4621eeb); 2.4B is the active count less the input embedding (a lookup)
    lite = count_params(get_model("deepseek-v2-lite"))
    assert round(lite.total / 1e9) == 16
    assert lite.active - 102400 * 2048 == pytest.approx(2.4e9, rel=0.03)
    # DeepSeek-V3.2 keeps DeepSeek-V3's 671B / 37B (V3 report, arXiv:2412.19437; transformers'
    # DeepSeek-V3.2 page: "the same ... backbone") and adds the indexer, all of it active
    v32 = get_model("deepseek-v3.2")
    indexer = 61 * sum(m.params for m in v32.kinds[0].linears if ".indexer." in m.name)
    indexer += 61 * 2 * 128  # k_norm, a LayerNorm
    counts = count_params(v32)
    assert counts.total - indexer == count_params(get_model("deepseek-v3")).total
    assert round((counts.total - indexer) / 1e9) == 671
    assert 37e9 <= counts.active - indexer < 38e9
    # Kimi K2: "32 billion activated parameters and 1 trillion total parameters" (model card of
    # moonshotai/Kimi-K2-Instruct): within 3% (1.026T, 32.9B counted)
    kimi = count_params(get_model("kimi-k2-instruct"))
    assert kimi.total == pytest.approx(1e12, rel=0.03)
    assert kimi.active == pytest.approx(32e9, rel=0.03)
    # GLM-4.5: "355 billion total parameters with 32 billion active parameters", GLM-4.5-Air:
    # "106 billion total parameters and 12 billion active parameters" (zai-org/GLM-4.5 README at
    # cbb2c7c). Totals within 1% (the MTP layer transformers does not build is not counted);
    # active counts are without the embedding and the head, within 2%
    for model_id, total, active in (("glm-4.5", 355e9, 32e9), ("glm-4.5-air", 106e9, 12e9)):
        c = count_params(get_model(model_id))
        assert c.total == pytest.approx(total, rel=0.01), model_id
        assert c.active - c.embeddings - c.output_head == pytest.approx(active, rel=0.02)


def test_kimi_k2_reads_as_deepseek_v3() -> None:
    kimi = model_entry("kimi-k2-instruct")["config"]
    as_v3 = count_params(model_from_config({**kimi, "model_type": "deepseek_v3"})).total
    assert count_params(get_model("kimi-k2-instruct")).total == as_v3
    assert get_model("kimi-k2-instruct").exact


def test_mla_defaults_follow_each_config_class() -> None:
    # q_lora_rank defaults to 1536 when absent and means none when null (DeepSeek-V2-Lite)
    lite = model_entry("deepseek-v2-lite")["config"]
    assert get_model("deepseek-v2-lite").kinds[0].linear("self_attn.q_proj") is not None
    absent = model_from_config({k: v for k, v in lite.items() if k != "q_lora_rank"})
    q_a = absent.kinds[0].linear("self_attn.q_a_proj")
    assert q_a is not None and q_a.out_features == 1536


@pytest.mark.parametrize(
    ("base", "change", "field"),
    [
        ("deepseek-v2-lite", {"moe_layer_freq": 2}, "config.moe_layer_freq"),
        ("kimi-k2-instruct", {"moe_layer_freq": 3}, "config.moe_layer_freq"),
        ("deepseek-v3.2", {"q_lora_rank": None}, "config.q_lora_rank"),
        ("deepseek-v3.2", {"mlp_layer_types": ["dense", "moe"]}, "config.mlp_layer_types"),
        ("deepseek-v3.2", {"layer_types": ["full_attention"] * 61}, "config.layer_types"),
        ("deepseek-v3.2", {"index_head_dim": 32}, "config.index_head_dim"),
        ("deepseek-v2-lite", {"num_experts_per_tok": None}, "config.num_experts_per_tok"),
        ("dots1", {"n_routed_experts": None}, "config.n_routed_experts"),
        ("dots1", {"n_shared_experts": None}, "config.n_shared_experts"),
        ("dots1", {"layer_types": ["full_attention"]}, "config.layer_types"),
    ],
)
def test_unmodelled_variants_are_refused(base: str, change: dict[str, Any], field: str) -> None:
    config = {**_base(base), **change}
    with pytest.raises(SpecError) as refused:
        model_from_config(config)
    assert refused.value.field == field


def test_dots1_windows_follow_its_config_class() -> None:
    layers = {"num_hidden_layers": 4, "max_window_layers": 2}
    windows = model_from_config({**DOTS1, **layers})
    assert [windows.kinds[k].attention.window for k in windows.layer_kinds] == [None] * 2 + [
        4096
    ] * 2
    none = model_from_config({**DOTS1, **layers, "sliding_window": None})
    assert all(none.kinds[k].attention.window is None for k in none.layer_kinds)


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_used_config_reads_the_same(model_id: str) -> None:
    config = model_entry(model_id)["config"]
    used = model_from_config(used_config(config))
    assert count_params(used) == count_params(get_model(model_id))
