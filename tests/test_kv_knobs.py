"""The engine's KV cache as a deployment sets it: its memory fraction in the engine's own
meaning (vLLM --gpu-memory-utilization, TensorRT-LLM free_gpu_memory_fraction, SGLang
--mem-fraction-static) and its tokens per block (--block-size / tokens_per_block /
--page-size): a sequence holds whole blocks."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import InferenceSetup, Parallelism, get_accelerator, get_model, get_precision
from estimator.errors import SpecError
from estimator.memory.inference import inference_memory
from estimator.serving.load import ENGINES, engine_preset
from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving

H100 = get_accelerator("h100-sxm-80gb")
LLAMA = get_model("llama-3.1-70b")
FP8 = get_precision("fp8-serving")
TP4 = Parallelism(tp=4)
# 2,000 + 300 tokens: not a whole number of 32-token blocks (72 blocks hold 2,304)
MEMORY = inference_memory(LLAMA, H100, TP4, InferenceSetup(2000, 300), FP8)


def test_a_reserved_context_holds_whole_blocks() -> None:
    """TensorRT-LLM reserves each sequence's whole context: 2,300 tokens take 72 blocks of 32,
    2,304 tokens' worth; one token a block reserves exactly the context."""
    trtllm = ENGINES["trtllm"]
    assert trtllm.kv_block_tokens == 32
    budget = trtllm.kv_budget_bytes(MEMORY, 4)
    per_token = MEMORY.kv_cache_bytes_per_token
    assert MEMORY.kv_cache_bytes_per_sequence == pytest.approx(2300 * per_token)
    blocks = trtllm.kv_slots(MEMORY, 4)
    assert blocks == int(budget // (math.ceil(2300 / 32) * 32 * per_token))
    exact = engine_preset("trtllm", kv_block_tokens=1).kv_slots(MEMORY, 4)
    assert exact == int(budget // (2300 * per_token)) and exact >= blocks


def test_blocks_allocated_as_tokens_arrive_leave_the_last_half_empty() -> None:
    """vLLM allocates 16-token blocks as a sequence grows: on average its live tokens plus 7.5."""
    vllm = ENGINES["vllm"]
    assert vllm.kv_block_tokens == 16 and vllm.kv_on_demand
    live = 0.6
    per_token = MEMORY.kv_cache_bytes_per_token
    held = (live * 2300 + 7.5) * per_token
    assert vllm.kv_slots(MEMORY, 4, live_share=live) == int(vllm.kv_budget_bytes(MEMORY, 4) // held)
    bigger = engine_preset("vllm", kv_block_tokens=256).kv_slots(MEMORY, 4, live_share=live)
    assert bigger < vllm.kv_slots(MEMORY, 4, live_share=live)


def test_the_memory_fraction_is_the_engines_own() -> None:
    """vLLM's fraction is of the GPU with weights and activations in it: 0.95 leaves 0.05 of
    the GPU more for the cache than 0.9; TensorRT-LLM's is of what the model leaves."""
    capacity = MEMORY.capacity_bytes
    more = engine_preset("vllm", kv_fraction=0.95).kv_budget_bytes(MEMORY, 4)
    assert more - ENGINES["vllm"].kv_budget_bytes(MEMORY, 4) == pytest.approx(0.05 * capacity)
    half = engine_preset("trtllm", kv_fraction=0.45).kv_budget_bytes(MEMORY, 4)
    assert half == pytest.approx(ENGINES["trtllm"].kv_budget_bytes(MEMORY, 4) / 2)
    assert "KV memory fraction 0.95" in engine_preset("vllm", kv_fraction=0.95).label


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kv_fraction": 0.0}, "kv_cache_memory_fraction"),
        ({"kv_fraction": 1.5}, "kv_cache_memory_fraction"),
        ({"kv_block_tokens": 0}, "kv_block_size"),
        ({"kv_block_tokens": 4096}, "kv_block_size"),
    ],
)
def test_bad_values_are_refused_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(SpecError) as err:
        engine_preset("vllm", **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


client = TestClient(app)
BODY = {
    "model": "llama-3.1-70b",
    "accelerator": "h100-sxm-80gb",
    "layout": {"tp": 4},
    "precision": "fp8-serving",
    "input_len": 2000,
    "output_len": 300,
    "concurrency": 64,
    "engine": "trtllm",
}


def test_the_api_takes_them_into_the_load_model_and_the_launch_commands() -> None:
    plain = client.post("/api/v1/inference/estimate", json=BODY).json()
    body = BODY | {"kv_cache_memory_fraction": 0.5, "kv_block_size": 64}
    r = client.post("/api/v1/inference/estimate", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["load"]["capacity_requests_per_s"] <= plain["load"]["capacity_requests_per_s"]
    launch = out["launch"]
    assert "--kv_cache_free_gpu_memory_fraction 0.5" in launch["trtllm"]
    assert "tokens_per_block: 64" in launch["trtllm"]
    assert "--gpu-memory-utilization 0.9" in launch["vllm"]  # vLLM's default: not its setting
    assert "--block-size" not in launch["vllm"]
    assert any("trtllm's" in n for n in launch["notes"])
    bad = client.post("/api/v1/inference/estimate", json=BODY | {"kv_cache_memory_fraction": 0})
    assert bad.status_code == 422
    assert [d["field"] for d in bad.json()["detail"]] == ["kv_cache_memory_fraction"]


def test_the_serving_sweep_takes_them() -> None:
    """At a request rate the rate per replica within loose targets is the slots' capacity:
    half the KV memory, fewer slots, a lower rate (the API's rows are the core's)."""
    space = ServingSearch(
        accelerators=("h100-sxm-80gb",), tp=(4,), pp=(1,), precision=("fp8-serving",)
    )
    rates = {}
    for fraction in (None, 0.5):
        workload = ServingWorkload(
            2000, 300, ttft_target_s=30.0, tpot_target_s=1.0, request_rate=1.0,
            engine="trtllm", kv_fraction=fraction,
        )  # fmt: skip
        (row,) = sweep_serving(LLAMA, workload, space).rows
        rates[fraction] = row["rate_per_replica"]
    assert rates[0.5] < rates[None]
    r = client.post(
        "/api/v1/inference/sweep",
        json={"model": "llama-3.1-70b", "accelerator": "h100-sxm-80gb", "layout": {"tp": 4},
              "precision": "fp8-serving", "input_len": 2000, "output_len": 300,
              "ttft_target_s": 30.0, "tpot_target_s": 1.0, "request_rate": 1.0,
              "engine": "trtllm", "kv_cache_memory_fraction": 0.5},
    )  # fmt: skip
    assert r.status_code == 200
    assert r.json()["rows"][0]["rate_per_replica"] == pytest.approx(rates[0.5])
