"""A prefix-cache hit rate in serving estimates (issue 22, item 4): prefill computes only the
uncached prompt tokens, whose attention still reads the cached keys; TTFT falls in the lone
request and under load; the KV cache still counts each request's whole prompt."""

from __future__ import annotations

from dataclasses import fields

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import InferenceSetup, Parallelism, get_accelerator, get_model, get_precision
from estimator.serving.estimate import InferenceEstimate, estimate_inference, estimate_load
from estimator.serving.load import LoadPoint

client = TestClient(app)
H100 = get_accelerator("h100-sxm-80gb")
FP8 = get_precision("fp8-serving")
LLAMA = get_model("llama-3.1-70b")  # full attention in every layer
TP4 = Parallelism(tp=4)


def _estimate(input_len: int, hit: float = 0.0, concurrency: int = 1) -> InferenceEstimate:
    setup = InferenceSetup(input_len, 256, concurrency, prefix_cache_hit_rate=hit)
    return estimate_inference(LLAMA, H100, TP4, setup, FP8, engine="vllm")


def test_hit_rate_0_is_today_exactly() -> None:
    today = estimate_inference(LLAMA, H100, TP4, InferenceSetup(4096, 256, 8), FP8, engine="vllm")
    zero = _estimate(4096, 0.0, 8)
    for f in fields(today):
        assert getattr(zero, f.name) == getattr(today, f.name), f.name


def test_the_uncached_tokens_are_computed_and_attend_to_the_whole_prompt() -> None:
    """Half of a 4096-token prompt cached: GEMMs, elementwise work and TP traffic are a
    2048-token prompt's, the same kernels; attention keeps the new queries' share of the causal
    pairs, 1 - 2048 x 2049 / (4096 x 4097), of the whole prompt's."""
    whole, half, short = _estimate(4096), _estimate(4096, 0.5), _estimate(2048)
    for part in ("gemm", "elementwise", "comm"):
        assert half.ttft_breakdown[part] == short.ttft_breakdown[part], part
    share = 1 - 2048 * 2049 / (4096 * 4097)
    expected = share * whole.ttft_breakdown["attention"]
    assert half.ttft_breakdown["attention"] == pytest.approx(expected, rel=1e-12)
    effect = half.prefix_cache
    assert effect is not None
    assert (effect.cached_tokens, effect.computed_tokens) == (2048, 2048)
    assert effect.ttft_without_s == whole.ttft_s
    assert 1.6 < effect.ttft_speedup < 2.0  # attention's 3/4 keeps it under 2x


def test_a_full_hit_still_computes_the_last_token() -> None:
    full = _estimate(4096, 1.0).prefix_cache
    assert full is not None
    assert (full.cached_tokens, full.computed_tokens) == (4095, 1)
    assert _estimate(4096, 1.0).ttft_s < _estimate(4096, 0.5).ttft_s


def test_kv_memory_and_decode_are_unchanged() -> None:
    """The conservative reading: each request holds its whole prompt's KV cache."""
    whole, half = _estimate(4096, 0.0, 32), _estimate(4096, 0.75, 32)
    assert half.memory == whole.memory
    assert half.tpot_s == whole.tpot_s
    assert half.output_tokens_per_s > whole.output_tokens_per_s


def test_the_load_model_prefills_only_the_uncached_tokens() -> None:
    def load(hit: float, n: int) -> LoadPoint:
        setup = InferenceSetup(4096, 256, n, prefix_cache_hit_rate=hit)
        return estimate_load(LLAMA, H100, TP4, setup, FP8)

    one = load(0.5, 1)
    assert one.ttft_s == pytest.approx(_estimate(4096, 0.5).ttft_s, rel=0.05)
    for n in (16, 128):
        cold, warm = load(0.0, n), load(0.75, n)
        assert warm.ttft_s < cold.ttft_s
        assert warm.capacity_requests_per_s > cold.capacity_requests_per_s
        assert warm.requests_per_s * warm.e2e_s == pytest.approx(n, rel=0.1)


def test_api_and_page() -> None:
    body = {"model": "llama-3.1-70b", "layout": {"tp": 4}, "input_len": 4096}
    out = client.post("/api/v1/inference/estimate", json={**body, "prefix_cache_hit_rate": 0.5})
    assert out.json()["prefix_cache"]["cached_tokens"] == 2048
    assert client.post("/api/v1/inference/estimate", json=body).json()["prefix_cache"] is None
    bad = client.post("/api/v1/inference/estimate", json={**body, "prefix_cache_hit_rate": 1.5})
    assert bad.status_code == 422
    assert "prefix_cache_hit_rate" in [d["field"] for d in bad.json()["detail"]]
    page = client.get("/serving?model=llama-3.1-70b&tp=4&input_len=4096&prefix_cache_hit_rate=0.5")
    assert 'name="prefix_cache_hit_rate" value="0.5"' in page.text
    assert 'id="prefix-effect"' in page.text and "2,048 prompt tokens read from it" in page.text
    launch = out.json()["launch"]
    assert "--enable-prefix-caching" in launch["vllm"]
    assert "enable_block_reuse: true" in launch["trtllm"]
