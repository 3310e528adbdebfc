"""DeepSeek-V4 (``deepseek_v4``): Flash and Pro. Parameters (module by module) and forward FLOPs
exact against transformers 5.23 on the meta device for the catalog's configs, the config
class's defaults and tiny configs of every variant; the KV cache (the window and the
compressors' state) against a real prefill; model FLOPs of compressed attention against a
query-by-query count; the published totals; refusals of what transformers would not build."""

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
from estimator.counts.flops import compressed_pairs
from estimator.inputs.config import used_config
from estimator.memory.inference import kv_cache_bytes_per_sequence
from tests.conftest import by_name

FP32_KV = get_precision({"kv_cache": "fp32"})

CATALOG = {  # transformers 5.23's count of each catalog entry (meta device)
    "deepseek-v4-flash": 284_332_230_231,
    "deepseek-v4-pro": 1_572_997_179_491,
}

# Shrunk attention, indexer and grouped output (gt.tiny_config keeps head_dim's ratio to hidden,
# not these); the older compress_rate_hca brings the HCA ratio within a tiny prompt's reach.
V4_TINY = {
    "hidden_size": 64,
    "head_dim": 16,
    "qk_rope_head_dim": 8,
    "q_lora_rank": 32,
    "o_groups": 2,
    "o_lora_rank": 16,
    "index_n_heads": 4,
    "index_head_dim": 16,
    "index_topk": 3,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "num_hash_layers": 1,
    "compress_rate_hca": 8,
}
LAYER_TYPES = [
    "compressed_sparse_attention",
    "heavily_compressed_attention",
    "sliding_attention",
    "compressed_sparse_attention",
]

# Tiny configs exercising each variant: (catalog base, overrides; None removes a key).
TINY: dict[str, tuple[str, dict[str, Any]]] = {
    "flash": ("deepseek-v4-flash", {}),  # compress_ratios 0, 0, 4, 128: both sliding first
    "pro": ("deepseek-v4-pro", {}),  # 128, 128, 4, 128: no sliding-only layer
    "class-pattern": ("deepseek-v4-flash", {"compress_ratios": None}),
    "layer-types": ("deepseek-v4-flash", {"layer_types": LAYER_TYPES}),
    "rates": (
        "deepseek-v4-flash",
        {
            "compress_rate_hca": None,
            "compress_rates": {
                "compressed_sparse_attention": 2,
                "heavily_compressed_attention": 16,
            },
        },
    ),
    "one-stream": ("deepseek-v4-flash", {"hc_mult": 1}),
    "two-streams": ("deepseek-v4-flash", {"hc_mult": 2}),
    "all-hash": ("deepseek-v4-flash", {"num_hash_layers": 4}),
    "mlp-types": ("deepseek-v4-flash", {"mlp_layer_types": ["moe", "hash_moe", "moe", "moe"]}),
    "intermediate-alias": ("deepseek-v4-flash", {"intermediate_size": 48}),
    "experts-alias": ("deepseek-v4-flash", {"num_local_experts": 4}),
    "mlp-bias": ("deepseek-v4-flash", {"mlp_bias": True}),
    "tied": ("deepseek-v4-flash", {"tie_word_embeddings": True}),
    "wide-topk": ("deepseek-v4-flash", {"index_topk": 64}),
    "four-groups": ("deepseek-v4-flash", {"o_groups": 4, "o_lora_rank": 8}),
}


def _tiny(gt: Any, name: str) -> dict[str, Any]:
    base, overrides = TINY[name]
    config = dict(gt.tiny_config(model_entry(base)["config"], **V4_TINY))
    for key, value in overrides.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    gt.hf_config(config)  # transformers accepts it
    return config


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_catalog_counts_equal_transformers(model_id: str, gt: Any) -> None:
    model = get_model(model_id)
    config = model_entry(model_id)["config"]
    assert model.exact
    assert count_params(model).total == gt.param_count(config) == CATALOG[model_id]
    assert by_name(model) == gt.param_breakdown(config)
    assert sum(count_params(model).by_component().values()) == CATALOG[model_id]


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_catalog_forward_flops_cover_every_compressor(model_id: str, gt: Any) -> None:
    # 300 tokens: two entries of every HCA layer (ratio 128), 75 of every CSA layer (top-k)
    config = model_entry(model_id)["config"]
    expected = gt.forward_flops(config, 1, 300)["total"]
    assert forward_flops(get_model(model_id), 300).total == expected


def test_default_config_equals_transformers(gt: Any) -> None:
    config = {"model_type": "deepseek_v4"}  # the config class's defaults: V4-Flash's shapes
    model = model_from_config(config)
    assert count_params(model).total == gt.param_count(config)
    assert by_name(model) == gt.param_breakdown(config)
    short = {"compressed_sparse_attention": "csa", "heavily_compressed_attention": "hca"}
    expected = [f"moe-{short[t]}" for t in gt.hf_config(config).layer_types]
    assert [model.kinds[k].name for k in model.layer_kinds] == expected


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_params_equal_transformers(name: str, gt: Any) -> None:
    config = _tiny(gt, name)
    model = model_from_config(config)
    assert by_name(model) == gt.param_breakdown(config)
    counts = count_params(model)
    assert counts.total == gt.param_count(config)
    assert sum(counts.by_component().values()) == counts.total


@pytest.mark.parametrize("name", sorted(TINY))
@pytest.mark.parametrize("seq", [8, 37])
def test_tiny_forward_flops_equal_flop_counter(name: str, seq: int, gt: Any) -> None:
    config = _tiny(gt, name)
    expected = gt.forward_flops(config, 2, seq)["total"]
    assert forward_flops(model_from_config(config), seq, 2).total == expected


@pytest.mark.parametrize("name", ["flash", "pro", "rates", "one-stream"])
@pytest.mark.parametrize("seq", [3, 10, 40])
def test_kv_cache_equals_transformers_cache(name: str, seq: int, gt: Any) -> None:
    # Every compressor's entries, open window and overlap state exactly; the window's shared
    # key-and-value head as the planner keeps it (once, for the window a query attends over)
    # differs from transformers' cache in two stated ways: it keeps window - 1 tokens between
    # steps (test_inference.py's sliding-window rule), and its sliding-only layers (the generic
    # DynamicSlidingWindowLayer) keep that head twice, as keys and as values, where its
    # compressed layers' caches keep it once (values is keys).
    config = _tiny(gt, name)
    model = model_from_config(config)
    batch, window, width = 2, config["sliding_window"], model.head_dim * 4
    sliding = sum(model.kinds[k].attention.compressor is None for k in model.layer_kinds)
    kept = min(seq, window - 1)
    ours = kv_cache_bytes_per_sequence(model, FP32_KV, seq)
    theirs = ours - model.num_layers * (min(seq, window) - kept) * width + sliding * kept * width
    assert batch * theirs == gt.kv_cache_bytes(config, batch, seq)


def test_compressed_pairs_count_each_query() -> None:
    # query t sees the (t + 1) // ratio entries it has passed, at most cap of them
    for ratio in (1, 4, 128):
        for cap in (None, 1, 3, 512):
            for seq in (0, 1, 3, 4, 5, 127, 128, 129, 1000, 4096):
                seen = [(t + 1) // ratio for t in range(seq)]
                expected = sum(seen if cap is None else (min(s, cap) for s in seen))
                assert compressed_pairs(seq, ratio, cap) == expected, (ratio, cap, seq)


def test_model_flops_attend_window_and_compressed_entries() -> None:
    # causal model FLOPs: each query's window, its top-512 CSA entries and their indexer's
    # scores, every HCA entry; as an eager kernel: every key, every entry
    model = get_model("deepseek-v4-flash")
    seq = 4096
    f = forward_flops(model, seq)
    per_pair = 2 * 64 * (512 + 512)
    index = 2 * 64 * 128
    window = sum(min(t + 1, 128) for t in range(seq))
    csa = sum(min((t + 1) // 4, 512) for t in range(seq))
    csa_index = sum((t + 1) // 4 for t in range(seq))
    hca = sum((t + 1) // 128 for t in range(seq))
    expected = 43 * per_pair * window + 21 * (per_pair * csa + index * csa_index)
    assert f.attention_core_causal == expected + 20 * per_pair * hca
    square = 43 * per_pair * seq * seq + 21 * (per_pair + index) * seq * 1024
    assert f.attention_core == square + 20 * per_pair * seq * 32


def test_hyper_connections_and_grouped_output_shapes() -> None:
    model = get_model("deepseek-v4-flash")
    csa = model.kinds[model.layer_kinds[2]]
    assert csa.name == "moe-csa" and model.hyper_streams == 4
    fn = csa.linear("attn_hc.fn")
    assert fn is not None and (fn.in_features, fn.out_features) == (4 * 4096, (2 + 4) * 4)
    o_a = csa.linear("self_attn.o_a_proj")  # 8 groups of 8 heads x 512 -> 1024 each
    assert o_a is not None and o_a.params == 64 * 512 * 1024
    f = forward_flops(model, 1)
    mixes = 43 * 2 * 2 * 4 * 4 * 4096  # a 4 x 4 mix of the streams before each block
    fns = 43 * 2 * 2 * (4 * 4096) * 24
    assert f.hyper_connections == mixes + fns + 2 * 4 * 4 * 4096  # and the head's hc_fn
    assert count_params(model).hyper_connections == 43 * 2 * (16384 * 24 + 24 + 3) + 65541


def test_kv_cache_of_the_catalog_models() -> None:
    # bf16, one sequence of 1M tokens: a 128-token window of one 512-wide head a layer; a CSA
    # layer's entry every 4 tokens with its indexer key (512 + 128); an HCA layer's every 128
    bf16 = get_precision("bf16")
    context = 1 << 20
    for model_id, csa, hca in (("deepseek-v4-flash", 21, 20), ("deepseek-v4-pro", 30, 31)):
        model = get_model(model_id)
        elems = model.num_layers * 128 * 512 + csa * (context // 4) * 640
        elems += hca * (context // 128) * 512
        elems += csa * 2 * 4 * 640  # the last window's first series, projections and gates
        assert kv_cache_bytes_per_sequence(model, bf16, context) == 2 * elems, model_id
        # one shared head: the same on every TP rank
        assert kv_cache_bytes_per_sequence(model, bf16, context, tp=8) == 2 * elems


def test_published_counts() -> None:
    # "DeepSeek-V4-Pro with 1.6T parameters (49B activated) and DeepSeek-V4-Flash with 284B
    # parameters (13B activated)" (deepseek-ai's model cards); the MTP layer transformers does
    # not build is not counted; active counts without the input embedding (a lookup), within 3%
    flash = count_params(get_model("deepseek-v4-flash"))
    assert round(flash.total / 1e9) == 284
    assert flash.active - flash.embeddings == pytest.approx(13e9, rel=0.03)
    pro = count_params(get_model("deepseek-v4-pro"))
    assert round(pro.total / 1e11) == 16
    assert pro.active - pro.embeddings == pytest.approx(49e9, rel=0.03)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_key_value_heads": 8}, "config.num_key_value_heads"),
        ({"n_shared_experts": 2}, "config.n_shared_experts"),
        ({"n_shared_experts": 0}, "config.n_shared_experts"),
        ({"attention_bias": True}, "config.attention_bias"),
    ],
)
def test_fields_transformers_ignores_are_refused(
    change: dict[str, Any], field: str, gt: Any
) -> None:
    # transformers builds the same model with or without them: reading them would mislead
    config = _tiny(gt, "flash")
    assert gt.param_count({**config, **change}) == gt.param_count(config)
    with pytest.raises(SpecError) as refused:
        model_from_config({**config, **change})
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"q_lora_rank": None}, "config.q_lora_rank"),
        ({"sliding_window": None}, "config.sliding_window"),
        ({"compress_ratios": [0, 4, 8, 4]}, "config.compress_ratios"),
        ({"compress_ratios": [0, 4, 128]}, "config.compress_ratios"),
        ({"layer_types": ["full_attention"] * 4}, "config.layer_types"),
        ({"mlp_layer_types": ["dense"] * 4}, "config.mlp_layer_types"),
        (
            {"compress_rate_hca": None, "compress_rates": {"compressed_sparse_attention": 4}},
            "config.compress_rates",
        ),
    ],
)
def test_configs_transformers_refuses_are_refused(
    change: dict[str, Any], field: str, gt: Any
) -> None:
    config = {**_tiny(gt, "flash"), **change}
    with pytest.raises(Exception):  # noqa: B017 - its config class, model or forward refuses it
        gt.forward_flops(config, 1, 8)
    with pytest.raises(SpecError) as refused:
        model_from_config(config)
    assert refused.value.field == field


def test_a_residual_of_no_streams_is_refused(gt: Any) -> None:
    # transformers builds and runs hc_mult 0 on empty tensors: every block's output is dropped
    with pytest.raises(SpecError) as refused:
        model_from_config({**_tiny(gt, "flash"), "hc_mult": 0})
    assert refused.value.field == "config.hc_mult"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"o_groups": 3}, "config.o_groups"),  # 64 channels do not split into 3 groups
        ({"index_head_dim": 4}, "config.index_head_dim"),  # narrower than its 8 rotary dims
    ],
)
def test_shapes_the_forward_cannot_run_are_refused(
    change: dict[str, Any], field: str, gt: Any
) -> None:
    config = {**_tiny(gt, "flash"), **change}
    with pytest.raises(RuntimeError):
        gt.forward_flops(config, 1, 8)
    with pytest.raises(SpecError) as refused:
        model_from_config(config)
    assert refused.value.field == field


@pytest.mark.parametrize("model_id", sorted(CATALOG))
def test_used_config_reads_the_same(model_id: str) -> None:
    config = model_entry(model_id)["config"]
    used = model_from_config(used_config(config))
    assert count_params(used) == count_params(get_model(model_id))
    assert forward_flops(used, 512) == forward_flops(get_model(model_id), 512)
