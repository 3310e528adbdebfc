"""gpt-oss, Llama 4, MiniMax-M2, Hunyuan-A13B (hunyuan_v1_moe) and ERNIE 4.5 MoE, read exactly
as transformers 5.23 builds them: parameters by module name, forward FLOPs and the KV cache of a
real prefill, on the catalog's configs, transformers' default configs and tiny configs that
exercise each variant; the counts their makers publish; the variants refused.

No verbatim config.json of Hunyuan-A13B or ERNIE 4.5 was found (estimator/catalog/models/
moe-2025.json says so): those two are checked on transformers' default configs and tiny configs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
    used_config,
)
from estimator.memory.inference import kv_cache_bytes_per_sequence
from tests.conftest import by_name

FP32_KV = get_precision({"kv_cache": "fp32"})
CATALOG = (
    "gpt-oss-20b",
    "gpt-oss-120b",
    "llama-4-scout-17b-16e-instruct",
    "llama-4-maverick-17b-128e-instruct",
    "minimax-m2.7",
)
GPT_OSS = model_entry("gpt-oss-20b")["config"]
SCOUT = model_entry("llama-4-scout-17b-16e-instruct")["config"]["text_config"]
MAVERICK = model_entry("llama-4-maverick-17b-128e-instruct")["config"]["text_config"]
MINIMAX = model_entry("minimax-m2.7")["config"]
# Hunyuan-A13B's published shape (Tencent-Hunyuan/Hunyuan-A13B README: 32 layers, 32 heads,
# hidden 4096, 64 experts of 3072 and one shared, top-8) in hunyuan_v1_moe's field names, with
# GQA heads of 128: only ever shrunk by tiny_config, never read as the real model.
HUNYUAN = {
    "model_type": "hunyuan_v1_moe",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 32,
    "intermediate_size": 3072,
    "num_experts": 64,
    "moe_topk": 8,
}
# Ernie4_5_MoeConfig's defaults ("ERNIE-4.5-21B-A3B style"), spelt out for tiny_config
ERNIE = {
    "model_type": "ernie4_5_moe",
    "hidden_size": 2560,
    "num_attention_heads": 20,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "moe_num_experts": 64,
    "moe_k": 6,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt_oss": {"model_type": "gpt_oss"},
    "llama4_text": {"model_type": "llama4_text"},
    "llama4": {"model_type": "llama4", "text_config": {"model_type": "llama4_text"}},
    "minimax_m2": {"model_type": "minimax_m2"},
    "hunyuan_v1_moe": {"model_type": "hunyuan_v1_moe", "head_dim": 128},  # required, see module
    "ernie4_5_moe": {"model_type": "ernie4_5_moe"},
}


def tiny(gt: Any, name: str) -> dict[str, Any]:
    """The tiny config of variant ``name``: windows and chunks of 16 tokens, shorter than the
    48-token prompt, so sliding and chunked layers hold less than the whole prompt."""
    t = gt.tiny_config
    llama4 = {"num_hidden_layers": 4, "intermediate_size_mlp": 512, "attention_chunk_size": 16}
    scout, maverick = t(SCOUT, **llama4), t(MAVERICK, **llama4)
    hunyuan = t(HUNYUAN, num_experts=8, moe_topk=2)
    ernie = {"moe_num_experts": 8, "moe_k": 2}
    variants: dict[str, Callable[[], dict[str, Any]]] = {
        "gpt-oss": lambda: t(GPT_OSS),
        "gpt-oss-default-pattern": lambda: {
            k: v for k, v in t(GPT_OSS, num_hidden_layers=3).items() if k != "layer_types"
        },
        "gpt-oss-unbiased-attention": lambda: t(GPT_OSS, attention_bias=False),
        "llama4-scout": lambda: scout,
        "llama4-maverick": lambda: maverick,
        "llama4-wrapper": lambda: {"model_type": "llama4", "text_config": maverick},
        "llama4-listed": lambda: {**maverick, "moe_layers": [0, 3], "no_rope_layers": [1, 0, 1, 1]},
        "llama4-layer-types": lambda: {
            **scout,
            "layer_types": ["full_attention", "chunked_attention"] * 2,
            "attention_bias": True,
            "tie_word_embeddings": True,
        },
        "minimax-m2": lambda: t(MINIMAX, rotary_dim=8),
        "hunyuan": lambda: hunyuan,
        "hunyuan-alias-wins": lambda: {**hunyuan, "moe_topk": 1, "num_experts_per_tok": 2},
        "hunyuan-listed-top-k-biased": lambda: {
            **{k: v for k, v in hunyuan.items() if k != "num_experts_per_tok"},
            "moe_topk": [2, 2],
            "attention_bias": True,
        },
        "ernie": lambda: t(ERNIE, **ernie),
        "ernie-every-other": lambda: t(
            ERNIE,
            **ernie,
            num_hidden_layers=4,
            moe_layer_start_index=0,
            moe_layer_interval=2,
            tie_word_embeddings=False,
        ),
        "ernie-unshared-ended": lambda: t(
            ERNIE, **ernie, num_hidden_layers=4, moe_num_shared_experts=0, moe_layer_end_index=2
        ),
    }
    return variants[name]()


VARIANTS = (
    "gpt-oss",
    "gpt-oss-default-pattern",
    "gpt-oss-unbiased-attention",
    "llama4-scout",
    "llama4-maverick",
    "llama4-wrapper",
    "llama4-listed",
    "llama4-layer-types",
    "minimax-m2",
    "hunyuan",
    "hunyuan-alias-wins",
    "hunyuan-listed-top-k-biased",
    "ernie",
    "ernie-every-other",
    "ernie-unshared-ended",
)


def config_of(gt: Any, case: str) -> dict[str, Any]:
    if case in CATALOG:
        config: dict[str, Any] = model_entry(case)["config"]
        return config
    if case in DEFAULTS:
        return DEFAULTS[case]
    return tiny(gt, case)


@pytest.mark.parametrize("case", CATALOG + tuple(DEFAULTS) + VARIANTS)
def test_parameters_by_module_equal_transformers(case: str, gt: Any) -> None:
    config = config_of(gt, case)
    model = model_from_config(config, case)
    assert model.exact
    assert by_name(model) == gt.param_breakdown(config)
    counts = count_params(model)
    assert counts.total == gt.param_count(config)
    assert sum(counts.by_component().values()) == counts.total


@pytest.mark.parametrize("case", CATALOG + tuple(DEFAULTS) + VARIANTS)
def test_active_parameters_route_top_k_of_the_experts(case: str, gt: Any) -> None:
    config = config_of(gt, case)
    model = model_from_config(config, case)
    assert model.moe is not None
    experts = sum(v for k, v in gt.param_breakdown(config).items() if ".experts." in k)
    routed = experts * model.moe.top_k // model.moe.num_experts
    assert count_params(model).active == gt.param_count(config) - experts + routed


@pytest.mark.parametrize("case", ("ernie4_5_moe", "hunyuan_v1_moe", *VARIANTS))
def test_forward_flops_equal_flop_counter(case: str, gt: Any) -> None:
    config = config_of(gt, case)
    batch, seq = 2, 48
    reference = gt.forward_flops(config, batch, seq)
    model = model_from_config(config, case)
    flops = forward_flops(model, seq, batch)
    if model.model_type not in ("llama4", "llama4_text"):
        assert flops.total == reference["total"]
        return
    # Llama4TextMoe runs every token through every expert (llama4.py): torch's experts count is
    # num_experts / top_k times the routed work counted here; everything else is equal.
    assert model.moe is not None
    experts = reference["by_module"]["model.layers.*.feed_forward.experts"]
    assert experts * model.moe.top_k == flops.experts * model.moe.num_experts
    assert flops.total - flops.experts == reference["total"] - experts


@pytest.mark.parametrize("case", VARIANTS)
def test_kv_cache_equals_transformers_cache(case: str, gt: Any) -> None:
    # transformers keeps window - 1 tokens on a sliding layer, and chunk - 1 on a chunked one,
    # between steps (the next query brings the last); the planner counts the window a query
    # attends over, one token more per such layer (as tests/test_inference.py).
    config = tiny(gt, case)
    batch, seq = 2, 48
    model = model_from_config(config)
    capped = 0
    for k in model.layer_kinds:
        core = model.kinds[k].attention
        assert core is not None
        capped += core.cache_window is not None and core.cache_window < seq
    per_token_layer = 2 * model.num_kv_heads * model.head_dim * 4
    expected = gt.kv_cache_bytes(config, batch, seq) + batch * capped * per_token_layer
    assert batch * kv_cache_bytes_per_sequence(model, FP32_KV, seq) == expected


def test_windows_chunks_and_moe_layers_per_layer(gt: Any) -> None:
    def shape(case: str) -> list[tuple[str, int | None, int | None]]:
        model = model_from_config(tiny(gt, case))
        kinds = [model.kinds[k] for k in model.layer_kinds]
        return [(k.name, k.attention.window, k.attention.chunk) for k in kinds if k.attention]

    assert shape("gpt-oss") == [("moe-local", 16, None), ("moe", None, None)]
    assert shape("gpt-oss-default-pattern") == [
        ("moe-local", 16, None),
        ("moe", None, None),
        ("moe-local", 16, None),
    ]
    # every 4th layer NoPE and global; Maverick's MoE on every 2nd layer, dense between
    chunked, dense = ("moe-chunked", None, 16), ("dense-chunked", None, 16)
    assert shape("llama4-scout") == [chunked] * 3 + [("moe", None, None)]
    assert shape("llama4-maverick") == [dense, chunked, dense, ("moe", None, None)]
    assert shape("llama4-listed") == [chunked, ("dense", None, None), dense, chunked]
    assert shape("ernie-every-other") == [("dense", None, None), ("moe", None, None)] * 2
    assert shape("ernie-unshared-ended") == [("dense", None, None)] + [("moe", None, None)] * 2 + [
        ("dense", None, None)
    ]


def test_llama4_wrapper_reads_its_text_config(gt: Any) -> None:
    wrapper = tiny(gt, "llama4-wrapper")
    model = model_from_config(wrapper)
    assert model.model_type == "llama4_text"
    assert any("vision encoder" in note for note in model.notes)
    assert count_params(model_from_config(used_config(wrapper))).total == gt.param_count(wrapper)
    unnamed = {**wrapper, "text_config": {**wrapper["text_config"], "model_type": None}}
    assert count_params(model_from_config(unnamed)).total == gt.param_count(wrapper)


def test_notes_say_what_is_not_counted() -> None:
    assert any("mxfp4" in n for n in get_model("gpt-oss-120b").notes)
    assert any("multi-token-prediction" in n for n in get_model("minimax-m2.7").notes)
    assert any("vision encoder" in n for n in get_model("llama-4-scout-17b-16e-instruct").notes)


# --- counts their makers publish -------------------------------------------------------------


def test_multi_token_prediction_modules_are_said_and_sized() -> None:
    """A config that declares multi-token-prediction modules gets a note sizing what they add:
    DeepSeek-V3's one module is one more layer of the average 35.7B / 61 active parameters, a
    2 x 7168 x 7168 input projection and the 0.93B output head again, over the 36.6B active
    parameters a token passes through (embedding excluded): 4.4%. Nemotron 3 Super's is an
    attention and an MoE layer; a config without modules says nothing."""
    notes = [n for n in get_model("deepseek-v3").notes if "multi-token" in n]
    assert notes == [
        "The checkpoint's 1 multi-token-prediction module (num_nextn_predict_layers) is not"
        " counted in its parameters (transformers does not build it); a training plan trains it"
        " with mtp_layers (Megatron-Core's --mtp-num-layers), about 4% more FLOPs per token."
    ]
    assert get_model("deepseek-v3").mtp_depth == 1
    assert get_model("deepseek-v3").mtp_module == (1,)  # the last layer's kind: MoE
    super_notes = get_model("nemotron-3-super-120b-a12b").notes
    assert any("num_nextn_predict_layers, 2 decoder layers each" in n for n in super_notes)
    # its module pattern *E: the kinds of the decoder's first attention and first MoE layers
    nemotron = get_model("nemotron-3-super-120b-a12b")
    pattern = nemotron.config["hybrid_override_pattern"]
    assert nemotron.mtp_module == tuple(nemotron.layer_kinds[pattern.index(c)] for c in "*E")
    assert nemotron.kinds[nemotron.mtp_module[0]].attention is not None
    assert nemotron.kinds[nemotron.mtp_module[1]].routed
    assert not any("multi-token" in n for n in get_model("kimi-k2-instruct").notes)
    config = {**model_entry("llama-3-8b")["config"], "num_nextn_predict_layers": 2}
    assert any("2 multi-token-prediction modules" in n for n in model_from_config(config).notes)


def test_gpt_oss_published_counts() -> None:
    # OpenAI, gpt-oss model card (arXiv:2508.10925): gpt-oss-120b 116.8B total, 5.1B active;
    # gpt-oss-20b 20.9B and 3.6B. The card's active count leaves out the embedding lookup (its
    # table: 5.13B / 3.61B active, 1.16B "embed + unembed" in the total).
    for model_id, total, active in (("gpt-oss-120b", 116.8, 5.1), ("gpt-oss-20b", 20.9, 3.6)):
        model = get_model(model_id)
        counts = count_params(model)
        assert round(counts.total / 1e9, 1) == total
        assert round((counts.active - model.token_embedding_params) / 1e9, 1) == active
    assert count_params(get_model("gpt-oss-120b")).total == 116_829_156_672


def test_gpt_oss_clamps_its_experts_activation() -> None:
    # transformers' GptOssConfig: swiglu_limit = 7.0, the bound GptOssExperts clamps the gate
    # and up projections to; a config may set another.
    assert get_model("gpt-oss-120b").moe.activation_clamp == 7.0  # type: ignore[union-attr]
    pasted = model_from_config({**GPT_OSS, "swiglu_limit": 5})
    assert pasted.moe is not None and pasted.moe.activation_clamp == 5.0
    assert get_model("qwen3-30b-a3b").moe.activation_clamp is None  # type: ignore[union-attr]


def test_gpt_oss_yarn_attention_factor() -> None:
    # transformers' _compute_yarn_parameters: attention_factor, else get_mscale(factor) =
    # 0.1 ln(factor) + 1 (gpt-oss: factor 32, no mscale), or the mscale / mscale_all_dim ratio.
    assert get_model("gpt-oss-120b").rope_mscale == pytest.approx(0.1 * math.log(32) + 1)
    yarn = GPT_OSS["rope_scaling"]
    given = {**GPT_OSS, "rope_scaling": {**yarn, "attention_factor": 1.0}}
    assert model_from_config(given).rope_mscale == 1.0
    ratio = {**GPT_OSS, "rope_scaling": {**yarn, "mscale": 1.0, "mscale_all_dim": 1.0}}
    assert model_from_config(ratio).rope_mscale == 1.0
    assert model_from_config({**GPT_OSS, "rope_scaling": None}).rope_mscale == 1.0
    assert get_model("qwen3-30b-a3b").rope_mscale == 1.0


def test_llama4_published_counts() -> None:
    # https://huggingface.co/blog/llama4-release: "17B active parameters out of ~109B total"
    # (Scout), "out of ~400B total" (Maverick), whole multimodal checkpoints; the language model
    # counted here leaves out Scout's vision encoder and projector (~1.7B).
    scout = count_params(get_model("llama-4-scout-17b-16e-instruct"))
    maverick = count_params(get_model("llama-4-maverick-17b-128e-instruct"))
    assert round(scout.active / 1e9) == round(maverick.active / 1e9) == 17
    assert 107e9 < scout.total < 109e9
    assert round(maverick.total / 1e10) == 40


def test_minimax_m2_published_counts() -> None:
    # https://www.minimax.io/news/minimax-m2 (via vercel.com/ai-gateway/models/minimax-m2):
    # "230B total parameters and 10B active per forward pass"; the 3 MTP modules transformers
    # does not build are not counted, nor is the embedding lookup among the active ones.
    model = get_model("minimax-m2.7")
    counts = count_params(model)
    assert round(counts.total / 1e10) == 23
    assert round((counts.active - model.token_embedding_params) / 1e9) == 10


def test_ernie_published_counts() -> None:
    # https://huggingface.co/docs/transformers/model_doc/ernie4_5_moe: ERNIE-4.5-21B-A3B, "21B
    # total, 3B active", names that truncate; Ernie4_5_MoeConfig's defaults are that model's.
    counts = count_params(model_from_config(DEFAULTS["ernie4_5_moe"]))
    assert int(counts.total // 1e9) == 21
    assert int(counts.active // 1e9) == 3


# --- refused --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"model_type": "llama4"}, "config.text_config"),
        (
            {
                "model_type": "llama4_text",
                "num_hidden_layers": 2,
                "layer_types": ["full_attention"],
            },
            "config.layer_types",
        ),
        (
            {
                "model_type": "llama4_text",
                "num_hidden_layers": 2,
                "layer_types": ["sliding_attention"] * 2,
            },
            "config.layer_types",
        ),
        (
            {"model_type": "llama4_text", "attention_chunk_size": None},
            "config.attention_chunk_size",
        ),
        ({"model_type": "llama4_text", "no_rope_layers": [1, 0]}, "config.no_rope_layers"),
        ({"model_type": "gpt_oss", "sliding_window": None}, "config.sliding_window"),
        ({"model_type": "gpt_oss", "num_experts_per_tok": 200}, "config.num_experts_per_tok"),
        ({"model_type": "gpt_oss", "swiglu_limit": 0}, "config.swiglu_limit"),
        ({"model_type": "gpt_oss", "swiglu_limit": "7"}, "config.swiglu_limit"),
        (
            {"model_type": "gpt_oss", "rope_scaling": {"rope_type": "yarn", "factor": -2}},
            "config.rope_scaling.factor",
        ),
        ({"model_type": "minimax_m2", "attn_type_list": [0, 1]}, "config.attn_type_list"),
        (
            {"model_type": "minimax_m2", "shared_intermediate_size": 512},
            "config.shared_intermediate_size",
        ),
        ({"model_type": "minimax_m2", "use_qk_norm": False}, "config.use_qk_norm"),
        ({"model_type": "minimax_m2", "qk_norm_type": "per_head"}, "config.qk_norm_type"),
        ({"model_type": "hunyuan_v1_moe"}, "config.head_dim"),
        (
            {
                "model_type": "hunyuan_v1_moe",
                "head_dim": 128,
                "num_hidden_layers": 2,
                "moe_topk": [1, 2],
            },
            "config.moe_topk",
        ),
        ({**HUNYUAN, "num_experts": [64] * 32}, "config.num_experts"),
        ({**HUNYUAN, "use_cla": True}, "config.use_cla"),
        ({**HUNYUAN, "moe_intermediate_size": [1536] * 32}, "config.moe_intermediate_size"),
        ({**HUNYUAN, "num_shared_expert": [2] * 32}, "config.num_shared_expert"),
        ({**HUNYUAN, "moe_topk": 65}, "config.moe_topk"),
        ({"model_type": "ernie4_5_moe", "moe_k": 65}, "config.moe_k"),
        ({"model_type": "ernie4_5_moe", "use_bias": True}, "config.use_bias"),
    ],
)
def test_unmodelled_variants_are_refused(config: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        model_from_config(config)
    assert err.value.field == field
