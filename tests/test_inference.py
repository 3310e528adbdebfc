"""Serving memory: KV cache against transformers' real cache, and the serving invariants."""

from __future__ import annotations

from typing import Any

import pytest

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    count_params,
    get_accelerator,
    get_model,
    get_precision,
    inference_memory,
    model_entry,
    model_from_config,
)
from estimator.memory.inference import kv_cache_bytes_per_sequence
from estimator.serving.estimate import estimate_inference

FP32_KV = get_precision({"kv_cache": "fp32"})
H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")


@pytest.mark.parametrize(
    "model_id", ["llama-3-8b", "qwen3-30b-a3b", "deepseek-v3", "gpt2", "falcon-7b", "phi-3-mini-4k"]
)
def test_kv_cache_equals_transformers_cache(model_id: str, gt: Any) -> None:
    config = gt.tiny_config(model_entry(model_id)["config"])
    if config.get("sliding_window"):
        config["sliding_window"] = None  # windows are checked separately below
    batch, seq = 2, 48
    ours = batch * kv_cache_bytes_per_sequence(model_from_config(config), FP32_KV, seq)
    assert ours == gt.kv_cache_bytes(config, batch, seq)


@pytest.mark.parametrize("model_id", ["mistral-7b-v0.1", "gemma-2-9b"])
def test_sliding_window_cache(model_id: str, gt: Any) -> None:
    # transformers keeps window - 1 tokens between steps (the next query brings the window's
    # last); the planner counts the window a query attends over, one token more per such layer.
    config = gt.tiny_config(model_entry(model_id)["config"])
    batch, seq = 2, 48
    model = model_from_config(config)
    ours = batch * kv_cache_bytes_per_sequence(model, FP32_KV, seq)
    sliding = [k for k in model.layer_kinds if model.kinds[k].attention.window]
    assert sliding, "the tiny config must keep a sliding window shorter than the sequence"
    per_token_layer = 2 * model.num_kv_heads * model.head_dim * 4
    assert ours == gt.kv_cache_bytes(config, batch, seq) + batch * len(sliding) * per_token_layer


def test_published_kv_bytes_per_token() -> None:
    # models.json: derived_kv_cache_bytes_per_token_bf16 = 2 * L * kv_heads * head_dim * 2 bytes.
    bf16 = get_precision("bf16")
    assert kv_cache_bytes_per_sequence(get_model("llama-2-7b"), bf16, 1) == 524288
    assert kv_cache_bytes_per_sequence(get_model("llama-3-70b"), bf16, 1) == 327680
    # MLA latent: 61 * (512 + 64) * 2 bytes
    assert kv_cache_bytes_per_sequence(get_model("deepseek-v3"), bf16, 1) == 61 * 576 * 2


def test_max_concurrency_fills_the_card() -> None:
    r = inference_memory(
        get_model("llama-3-8b"),
        H100,
        Parallelism(),
        InferenceSetup(input_len=1024, output_len=1024, concurrency=8),
        get_precision("bf16"),
    )
    free = r.capacity_bytes - r.weights_bytes - r.activation_peak_bytes - r.runtime_overhead_bytes
    assert r.max_concurrency == int(free // r.kv_cache_bytes_per_sequence)
    assert r.kv_cache_bytes_per_sequence == 2048 * 131072
    assert r.fits


def test_tp_beyond_kv_heads_replicates_them() -> None:
    model = get_model("llama-3-70b")  # 8 KV heads
    bf16 = get_precision("bf16")
    eight = kv_cache_bytes_per_sequence(model, bf16, 1, tp=8)
    sixteen = kv_cache_bytes_per_sequence(model, bf16, 1, tp=16)
    assert eight == sixteen == 327680 / 8


def test_mla_latent_is_replicated_over_tp() -> None:
    bf16 = get_precision("bf16")
    model = get_model("deepseek-v3")
    assert kv_cache_bytes_per_sequence(model, bf16, 1, tp=8) == kv_cache_bytes_per_sequence(
        model, bf16, 1
    )


def test_quantized_weights_shrink() -> None:
    model = get_model("llama-3-70b")
    setup = InferenceSetup(1024, 256)
    sizes = {
        p: inference_memory(
            model, get_accelerator("h200-sxm-141gb"), Parallelism(), setup, get_precision(p)
        ).weights_bytes
        for p in ("bf16", "fp8-serving", "int4-wo")
    }
    assert sizes["bf16"] > sizes["fp8-serving"] > sizes["int4-wo"]
    assert sizes["bf16"] == 70_553_706_496 * 2
    # int4 with per-128 FP16 scales and 4-bit zeros: 0.5195 bytes per linear weight
    linear = 70_553_706_496 - 2 * 128256 * 8192 - (80 * 2 + 1) * 8192
    assert sizes["int4-wo"] == pytest.approx(
        linear * 0.51953125 + (70_553_706_496 - linear) * 2, rel=1e-3
    )


def test_mxfp4_experts_shrink_the_experts_only() -> None:
    # gpt-oss ships MXFP4 routed experts (4-bit E2M1 + one E8M0 scale per 32: 4.25 bits) and
    # bf16 everything else; the mxfp4-experts preset stores a MoE model that way.
    model = get_model("qwen3-30b-a3b")
    setup = InferenceSetup(1024, 256)
    h200 = get_accelerator("h200-sxm-141gb")
    bf16, mxfp4 = (
        inference_memory(model, h200, Parallelism(), setup, get_precision(p)).weights_bytes
        for p in ("bf16", "mxfp4-experts")
    )
    experts = count_params(model).experts
    assert bf16 - mxfp4 == pytest.approx(experts * (2 - 4.25 / 8), rel=1e-12)
    fast = estimate_inference(model, h200, Parallelism(), setup, get_precision("mxfp4-experts"))
    slow = estimate_inference(model, h200, Parallelism(), setup, get_precision("bf16"))
    assert fast.tpot_s < slow.tpot_s  # decode reads a quarter of the expert bytes


@pytest.mark.parametrize(
    ("layout", "setup", "field"),
    [
        (Parallelism(tp=3), InferenceSetup(128, 128), "layout.tp"),
        (Parallelism(), InferenceSetup(8000, 1000), "input_len"),
        (Parallelism(), InferenceSetup(0, 10), "input_len"),
        (Parallelism(), InferenceSetup(10, 10, concurrency=0), "concurrency"),
        (Parallelism(dp=2), InferenceSetup(10, 10), "layout.dp"),  # dense: replicas
        (Parallelism(cp=2), InferenceSetup(10, 10), "layout"),
    ],
)
def test_invalid_serving_inputs(layout: Parallelism, setup: InferenceSetup, field: str) -> None:
    with pytest.raises(SpecError) as err:
        inference_memory(get_model("llama-3-8b"), H100, layout, setup, get_precision("bf16"))
    assert err.value.field == field


@pytest.mark.parametrize("model_id", ["llama-3-8b", "qwen3-8b"])
def test_pipeline_adds_hops_to_a_lone_prompt_it_divides_nothing(model_id: str) -> None:
    """A lone prompt crosses every stage in turn: its TTFT is the whole model's prefill plus a
    hand-off per stage boundary (issue 22: pp 1/2/4 used to give 17.1/8.6/4.3 ms on GB200)."""
    model, gb200 = get_model(model_id), get_accelerator("gb200")
    setup = InferenceSetup(input_len=2048, output_len=256, concurrency=1)
    ttft = {}
    for pp in (1, 2, 4):
        est = estimate_inference(model, gb200, Parallelism(tp=1, pp=pp), setup, BF16)
        ttft[pp] = est.ttft_breakdown
    for pp in (2, 4):
        for part in ("gemm", "attention", "elementwise"):
            assert ttft[pp][part] == pytest.approx(ttft[1][part], rel=1e-12), (pp, part)
        assert ttft[pp]["comm"] > ttft[1]["comm"] == 0.0
    assert ttft[4]["comm"] > 2 * ttft[2]["comm"]  # three hand-offs against one


def test_cost_is_all_in_with_the_split_by_phase_beside_it() -> None:
    """$ per output token counts every GPU-second, prefill's included (issue 22: an 8B model
    on one H100 showed the decode share only); the phase split adds up to the same spend."""
    setup = InferenceSetup(input_len=2048, output_len=256, concurrency=64)
    est = estimate_inference(
        get_model("llama-3-8b"), H100, Parallelism(tp=1), setup, BF16, price_usd_per_gpu_hour=3.0
    )
    assert est.usd_per_hour == 3.0
    per_s = 3.0 / 3600
    out_tps, in_tps = est.output_tokens_per_s, est.input_tokens_per_s
    assert est.usd_per_1m_output_tokens == pytest.approx(per_s / out_tps * 1e6, rel=1e-12)
    decode, prefill = est.usd_per_1m_output_tokens_decode, est.usd_per_1m_input_tokens
    assert decode is not None and prefill is not None
    assert decode < est.usd_per_1m_output_tokens  # type: ignore[operator]
    spend = decode * out_tps / 1e6 + prefill * in_tps / 1e6
    assert spend == pytest.approx(per_s, rel=1e-9)
