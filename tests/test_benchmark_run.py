"""A finite benchmark run (``estimator.serving.run``): ``num_prompts`` requests through a closed
loop of ``concurrency`` clients, simulated step by step on the engine's scheduler rules."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.inputs.lengths import LENGTH_PRESETS
from estimator.serving.estimate import estimate_load
from estimator.serving.run import RunScheduler, simulate_run


def _one_second(decoding: object, prompt_tokens: object) -> np.ndarray:
    """Every step one second, whatever it carries: the schedule alone sets the latencies."""
    return np.ones(np.broadcast(np.asarray(decoding), np.asarray(prompt_tokens)).shape)


def test_a_tiny_run_by_hand() -> None:
    """Two 3-token prompts, 2 output tokens each, a 4-token budget. Step 0: r0's 3 tokens (its
    first token) and 1 of r1's; step 1: r0 decodes (its last token) and r1's last 2 tokens;
    step 2: r1 decodes. One second a step: TTFT 1 and 2 s, TPOT 1 s, 4 tokens in 3 s."""
    run = simulate_run(
        _one_second, RunScheduler(budget=4, slots=8), prompts=(3.0,),
        outputs=(2.0,), concurrency=2, num_prompts=2,
    )  # fmt: skip
    assert list(run.ttft_s) == [1.0, 2.0] and list(run.tpot_s) == [1.0, 1.0]
    assert list(run.e2e_s) == [2.0, 3.0] and run.steps == 3 and run.duration_s == 3.0
    assert run.output_tokens_per_s == pytest.approx(4 / 3)


def test_a_closed_loop_sends_the_next_request_when_one_finishes() -> None:
    """One client, three requests of a 1-step prompt and 3 output tokens: each request takes 3
    steps (prefill and 2 decodes) and the next is sent after its last token."""
    run = simulate_run(
        _one_second, RunScheduler(budget=8, slots=8), prompts=(4.0,),
        outputs=(3.0,), concurrency=1, num_prompts=3,
    )  # fmt: skip
    assert list(run.ttft_s) == [1.0, 1.0, 1.0] and list(run.e2e_s) == [3.0, 3.0, 3.0]
    assert run.duration_s == 9.0 and run.mean_queued == 0.0


def test_slots_make_requests_wait() -> None:
    run = simulate_run(
        _one_second, RunScheduler(budget=64, slots=2), prompts=(4.0,),
        outputs=(3.0,), concurrency=4, num_prompts=4,
    )  # fmt: skip
    # Two run at once; the other two wait for their slots (3 steps), then prefill
    assert sorted(run.ttft_s) == [1.0, 1.0, 4.0, 4.0] and run.mean_queued > 0


def _nano(concurrency: int, prompts: int | None) -> object:
    setup = InferenceSetup(
        input_len=2048, output_len=512, concurrency=concurrency, num_prompts=prompts
    )
    return estimate_load(
        get_model("nemotron-3-nano-30b-a3b"), get_accelerator("b200"), Parallelism(tp=2),
        setup, get_precision("fp8-serving"), engine="vllm",
    )  # fmt: skip


def test_a_burst_queues_its_prompts_and_a_long_run_nears_the_steady_state() -> None:
    """400 requests at 512 in flight all start at once: their prompts queue for the token
    budget, so the run's mean TTFT is many prefills (the steady state's is about one); at 8 in
    flight over 400 requests the run is mostly steady: TPOT within 25% of the steady state's."""
    burst, steady = _nano(512, 400), _nano(512, None)
    assert burst.num_prompts == 400 and burst.duration_s > 0
    assert burst.ttft_s > 20 * steady.ttft_s
    assert burst.ttft_p50_s < burst.ttft_p99_s
    long_run, steady8 = _nano(8, 400), _nano(8, None)
    assert long_run.tpot_s == pytest.approx(steady8.tpot_s, rel=0.25)
    assert long_run.output_tokens_per_s == pytest.approx(long_run.requests_per_s * 512)


def test_a_run_takes_a_length_distribution() -> None:
    sharegpt = LENGTH_PRESETS["sharegpt"]
    setup = InferenceSetup(
        sharegpt.input_len, sharegpt.output_len, concurrency=16, num_prompts=256,
        lengths=sharegpt,
    )  # fmt: skip
    point = estimate_load(
        get_model("llama-3.1-8b"), get_accelerator("h100-sxm-80gb"), Parallelism(), setup,
        get_precision("bf16"), engine="vllm",
    )  # fmt: skip
    assert point.lengths == "sharegpt" and point.num_prompts == 256
    assert point.ttft_p50_s <= point.ttft_p90_s <= point.ttft_p99_s


def test_a_run_is_refused_where_it_is_not_simulated() -> None:
    setup = InferenceSetup(input_len=1024, output_len=128, concurrency=8, num_prompts=64)
    args = (get_model("llama-3.1-8b"), get_accelerator("h100-sxm-80gb"))
    with pytest.raises(SpecError, match="closed loop"):
        estimate_load(*args, Parallelism(), setup, get_precision("bf16"), request_rate=2.0)
    with pytest.raises(SpecError, match="pp = 1"):
        estimate_load(*args, Parallelism(pp=2), setup, get_precision("bf16"))
    with pytest.raises(SpecError, match="num_prompts"):
        simulate_run(
            _one_second, RunScheduler(budget=8, slots=8), prompts=(4.0,),
            outputs=(3.0,), concurrency=1, num_prompts=0,
        )  # fmt: skip


def test_the_api_and_the_page_take_a_run() -> None:
    client = TestClient(app)
    req = {"model": "llama-3.1-8b", "accelerator": "h100-sxm-80gb", "input_len": 2048,
           "output_len": 256, "concurrency": 64, "num_prompts": 128}  # fmt: skip
    body = client.post("/api/v1/inference/estimate", json=req).json()
    assert body["load"]["num_prompts"] == 128 and body["load"]["duration_s"] > 0
    assert body["latency"]["basis"].startswith("a run of 128 requests at 64 requests in flight")
    assert body["latency"]["ttft_s"] == body["load"]["ttft_s"]
    steady = client.post("/api/v1/inference/estimate", json={**req, "num_prompts": None}).json()
    assert steady["load"]["num_prompts"] is None
    assert steady["load"]["ttft_s"] < body["load"]["ttft_s"]
    both = client.post("/api/v1/inference/estimate", json={**req, "request_rate": 2})
    assert both.status_code == 422
    rate = {k: v for k, v in req.items() if k != "concurrency"}
    open_loop = client.post("/api/v1/inference/estimate", json={**rate, "request_rate": 2})
    assert open_loop.status_code == 422 and open_loop.json()["detail"][0]["field"] == "num_prompts"
    page = client.get("/serving", params={k: v for k, v in req.items() if k != "accelerator"})
    assert page.status_code == 200 and "a run of 128 requests simulated step by step" in page.text
