"""Serving under load (issue 22): the steady state of a continuous-batching replica at a
concurrency or a request rate, its regimes, and its error on published measurements."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace as replace_
from typing import Any

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
    model_entry,
)
from estimator.inputs.lengths import LENGTH_PRESETS
from estimator.memory.inference import inference_memory
from estimator.serving.estimate import estimate_inference, estimate_load
from estimator.serving.load import (
    ENGINES,
    budget_cap,
    engine_preset,
    residual_step,
    solve_decoding,
)
from validation import report
from validation.load import OVERLOADED, LoadCase, Skip, cases, overloaded, rows, summary

H100 = get_accelerator("h100-sxm-80gb")
MODEL = get_model("llama-3.3-70b")
FP8 = get_precision("fp8-serving")
TP2 = Parallelism(tp=2)


def _load(concurrency: int = 1, rate: float | None = None, engine: str = "vllm") -> object:
    setup = InferenceSetup(input_len=5000, output_len=500, concurrency=concurrency)
    return estimate_load(MODEL, H100, TP2, setup, FP8, engine=engine, request_rate=rate)


def test_a_lone_request_is_the_single_estimate() -> None:
    """At concurrency 1 the load model's TTFT and TPOT are the lone prefill and decode step."""
    lone = estimate_inference(
        MODEL, H100, TP2, InferenceSetup(input_len=5000, output_len=500, concurrency=1), FP8
    )
    point = _load(1)
    assert point.regime == "light"  # type: ignore[attr-defined]
    assert point.ttft_s == pytest.approx(lone.ttft_s, rel=0.05)  # type: ignore[attr-defined]
    assert point.tpot_s == pytest.approx(lone.tpot_s, rel=0.01)  # type: ignore[attr-defined]


def test_latency_grows_with_load_and_throughput_saturates() -> None:
    points = [_load(n) for n in (1, 5, 25, 50, 100, 150, 250)]
    for a, b in itertools.pairwise(points):
        assert b.ttft_s >= a.ttft_s and b.tpot_s >= a.tpot_s  # type: ignore[attr-defined]
        assert b.output_tokens_per_s >= a.output_tokens_per_s * 0.999  # type: ignore[attr-defined]
    slot = points[-1]
    assert slot.regime == "slot-limited" and slot.queued > 0  # type: ignore[attr-defined]
    # past the slots, each extra request waits one more completion: TTFT grows by 1 / X
    a, b = points[-2], points[-1]
    grow = (250 - 150) / b.requests_per_s  # type: ignore[attr-defined]
    assert b.ttft_s - a.ttft_s == pytest.approx(grow, rel=0.02)  # type: ignore[attr-defined]


@pytest.mark.parametrize("concurrency", [5, 50, 150])
def test_littles_law_holds_in_the_closed_loop(concurrency: int) -> None:
    p = _load(concurrency)
    in_flight = p.requests_per_s * p.e2e_s  # type: ignore[attr-defined]
    assert in_flight == pytest.approx(concurrency, rel=0.1)


def test_open_loop_completes_what_arrives_until_it_cannot() -> None:
    light = _load(rate=0.5)
    assert light.requests_per_s == pytest.approx(0.5, rel=1e-4)  # type: ignore[attr-defined]
    assert light.regime in ("shared", "light")  # type: ignore[attr-defined]
    capacity = light.capacity_requests_per_s  # type: ignore[attr-defined]
    over = _load(rate=2 * capacity)
    assert over.regime == "overloaded" and math.isinf(over.ttft_s)  # type: ignore[attr-defined]
    assert over.requests_per_s == pytest.approx(capacity, rel=1e-6)  # type: ignore[attr-defined]


def test_budget_and_decoding_levels() -> None:
    cap = budget_cap(5000, 500, 8192)
    assert cap == pytest.approx(8192 * 499 / (499 + 5000), rel=1e-6)
    d, bound = solve_decoding(1.0, 5000, 500, 8192)
    assert 0.9 < d < 1.0 and not bound
    d, bound = solve_decoding(5000.0, 5000, 500, 8192)
    assert bound and d == pytest.approx(cap, rel=1e-3)  # the prompts queue for the budget


def test_separate_prefill_batches_slow_the_decodes() -> None:
    """SGLang's default runs a prefill batch on its own: decodes wait for it."""
    mixed, apart = _load(50, engine="vllm"), _load(50, engine="sglang")
    assert apart.tpot_s > mixed.tpot_s  # type: ignore[attr-defined]
    with pytest.raises(SpecError) as bad:
        _load(5, engine="nope")
    assert bad.value.field == "engine"


def test_api_page_and_refusals() -> None:
    client = TestClient(app)
    req = {"model": "llama-3.3-70b", "num_gpus": 2, "layout": {"tp": 2},
           "precision": "fp8-serving", "input_len": 5000, "output_len": 500}  # fmt: skip
    body = client.post("/api/v1/inference/estimate", json={**req, "concurrency": 50}).json()
    assert body["load"]["regime"] == "shared" and body["load"]["ttft_p99_s"] > 0
    over = client.post("/api/v1/inference/estimate", json={**req, "request_rate": 1000})
    assert over.status_code == 200 and over.json()["load"]["ttft_s"] is None
    assert any("grows without bound" in n for n in over.json()["notes"])
    both = client.post(
        "/api/v1/inference/estimate", json={**req, "request_rate": 1, "concurrency": 4}
    )
    assert both.status_code == 422 and both.json()["detail"][0]["field"] == "request_rate"
    bad = client.post("/api/v1/inference/estimate", json={**req, "request_rate": -1})
    assert bad.status_code == 422
    page = client.get("/serving", params={"model": "llama-3-8b", "concurrency": 64}).text
    assert "Under load" in page and "requests kept in flight" in page


def test_every_load_record_is_a_case_or_a_skip_with_its_reason() -> None:
    found = cases()
    assert len(found) == 129
    skips = [c for c in found if isinstance(c, Skip)]
    assert all(s.reason for s in skips)
    compared = [c for c in found if isinstance(c, LoadCase)]
    assert len(compared) == 71 and all(c.assumptions for c in compared)
    reasons = {s.reason for s in skips}
    assert any(r.startswith("CUDA graphs disabled") for r in reasons)
    assert any("sgl-project/sglang#2591" in r for r in reasons)
    vultr = [c for c in compared if c.group == "vultr_inference_cookbook_b200"]
    assert {(c.concurrency, c.num_prompts) for c in vultr if c.concurrency in (1, 8)} == {
        (1, 50), (8, 400)}  # fmt: skip


def test_replicas_share_the_rate_and_add_their_throughput() -> None:
    """An MLPerf system of several identical replicas (8 H100s as 4 x TP2): one replica at a
    quarter of target_qps, its throughput times 4 against the system's tokens/s."""
    rid = "mlperf-v4.1-NVIDIA-DGX-H100_H100-SXM-80GBx8_TRT-llama2-70b-99-Server"
    case = next(c for c in cases() if c.id == rid)
    assert isinstance(case, LoadCase) and case.lengths == "mlperf-llama2-70b"
    assert (case.tp, case.instances, case.request_rate) == (2, 4, pytest.approx(75.0 / 4))
    assert any("4 replicas" in a for a in case.assumptions)
    point = estimate_load(
        get_model(case.model), get_accelerator(case.accelerator), Parallelism(tp=2),
        InferenceSetup(input_len=case.input_len, output_len=case.output_len,
                       lengths=LENGTH_PRESETS[case.lengths]),
        get_precision(case.precision), request_rate=75.0 / 4,
        engine=engine_preset(case.engine, case.token_budget, case.max_seqs),
    )  # fmt: skip
    assert (case.token_budget, case.max_seqs) == (4096, 1024)  # the harness's, as it ran
    found, _ = rows()
    tps = next(r for r in found if r.id == rid and r.metric == "throughput")
    assert tps.predicted == pytest.approx(4 * point.output_tokens_per_s, rel=1e-12)


@pytest.mark.slow
def test_an_overloaded_prediction_is_counted_not_dropped() -> None:
    """Where the model's capacity is below the rate a run sustained, its unbounded TTFT stays
    out of the errors and the record is listed, in the report too."""
    found, skipped = rows()
    over = overloaded(skipped)
    assert any(i.startswith("mlperf-") for i in over)
    for i in over:
        assert not any(r.id == i and r.metric == "ttft" for r in found)
        assert {r.regime for r in found if r.id == i} == {"overloaded"}
    section = report.load_section()
    assert section["overloaded"] == over and OVERLOADED not in str(section["skip reasons"])
    text = "\n".join(report.render_load(section))
    assert "Predicted overloaded where the run served its rate (MLPerf: within its latency" in text
    assert f"constraints): {len(over)} records" in text


def test_accuracy_under_load_is_pinned() -> None:
    """Measured, not tuned (docs/validation.md): TPOT and throughput hold on Llama-3.3-70B
    (NIM) and on the hybrid Nemotron-3-Nano's finite vLLM runs (Vultr: its waves simulated,
    the experts one grouped GEMM); TTFT under load is under-predicted (per-request overheads
    are not modelled: Vultr's runs take ~150 ms to a first token at any concurrency)."""
    found, _ = rows()
    table = {(s["metric"], s["group"]): s for s in summary(found)}
    nim, vultr = "nvidia_nim_benchmarking_docs", "vultr_inference_cookbook_b200"
    # 0.107: 0.069 before the H100 GEMM fit took the GEMMs timed on a lent H100 (mid-size
    # GEMMs slower, the saturated steady state's 5,000-token prefills with them: 99.5 -> 103.1
    # ms against 93 measured); 0.167 before the engines' KV budgets
    assert table[("itl", nim)]["median_ape"] <= 0.11
    assert table[("throughput", nim)]["median_ape"] <= 0.10
    assert table[("ttft", nim)]["median_ape"] <= 0.08  # 0.263, 0.176, now with the queue in time
    assert table[("tpot", vultr)]["median_ape"] <= 0.16
    assert table[("throughput", vultr)]["median_ape"] <= 0.11


def test_an_arrival_waits_for_the_step_under_way() -> None:
    """The residual life of the running step (renewal theory): half a step when steps are
    alike; with one step in five carrying a 5,000-token prompt (0.45 s against 0.04 s) a
    Poisson arrival waits 0.171 s on average, not half the mean step's 0.061 s."""
    assert residual_step(0.04, 0.04, 0.3) == pytest.approx(0.02)
    assert residual_step(0.04, 0.45, 0.0) == pytest.approx(0.02)
    by_hand = (0.2 * 0.45**2 + 0.8 * 0.04**2) / (2 * (0.2 * 0.45 + 0.8 * 0.04))
    assert residual_step(0.04, 0.45, 0.2) == pytest.approx(by_hand) == pytest.approx(0.1712, 1e-3)
    # Long prompts: TTFT under load grows with the load faster than the prefill queue's wait
    light, loaded = _load(1), _load(50)
    assert loaded.ttft_s - light.ttft_s > 0.1


def test_a_deployments_limits_replace_the_presets() -> None:
    """max_num_batched_tokens and max_num_seqs as a deployment sets them (API, page, CLI and
    the validation's records, from their engine options)."""
    assert engine_preset("vllm") is ENGINES["vllm"]
    small = engine_preset("trtllm", 2048, 64)
    assert (small.token_budget, small.max_seqs, small.mixed) == (2048, 64, True)
    assert "token budget 2,048, sequence cap 64, as set" in small.label
    with pytest.raises(SpecError) as err:
        engine_preset("vllm", max_seqs=0)
    assert err.value.field == "max_num_seqs"
    setup = InferenceSetup(input_len=5000, output_len=500, concurrency=8)
    wide = estimate_load(MODEL, H100, TP2, setup, FP8, engine="trtllm")
    narrow = estimate_load(MODEL, H100, TP2, setup, FP8, engine=small)
    assert wide.prefill_steps < 1.01 < 2 < narrow.prefill_steps  # 5,000 tokens in 2,048-token steps
    assert narrow.ttft_s > wide.ttft_s
    client = TestClient(app)
    req = {"model": "llama-3.3-70b", "accelerator": "h100-sxm-80gb", "layout": {"tp": 2},
           "precision": "fp8-serving", "engine": "trtllm", "concurrency": 8,
           "max_num_batched_tokens": 2048, "max_num_seqs": 64}  # fmt: skip
    body = client.post("/api/v1/inference/estimate", json=req).json()
    assert "--max_batch_size 64 --max_num_tokens 2048" in body["launch"]["trtllm"]
    assert any("token budget 2,048, sequence cap 64, as set" in n for n in body["notes"])
    bad = client.post("/api/v1/inference/estimate", json={**req, "max_num_batched_tokens": 0})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "max_num_batched_tokens"
    found = {c.id: c for c in cases() if isinstance(c, LoadCase)}
    nebius = found["mlperf-v5.1-Nebius-H200-SXM-141GBx8_TRT-llama2-70b-99-Interactive"]
    assert (nebius.token_budget, nebius.max_seqs) == (256, 512)


def test_a_fleet_plan_takes_a_dataset_and_engine_limits() -> None:
    """The serving sweep at a request rate with ShareGPT lengths and a deployment's engine
    limits: each row's rate per replica is the highest whose steady state, on those lengths and
    limits, meets the targets; a dataset with disaggregated planning is a 422 naming it."""
    from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving

    sharegpt = LENGTH_PRESETS["sharegpt"]
    space = ServingSearch(accelerators=("h100-sxm-80gb",), tp=(2,), pp=(1,),
                          precision=("fp8-serving",))  # fmt: skip
    workload = ServingWorkload(
        sharegpt.input_len, sharegpt.output_len, ttft_target_s=0.5, tpot_target_s=0.05,
        request_rate=40.0, lengths=sharegpt, token_budget=512, max_seqs=128,
    )  # fmt: skip
    (row,) = sweep_serving(MODEL, workload, space).rows
    assert row["ok"]
    setup = InferenceSetup(sharegpt.input_len, sharegpt.output_len, lengths=sharegpt)
    engine = engine_preset("vllm", 512, 128)
    at = estimate_load(MODEL, H100, TP2, setup, FP8, engine=engine,
                       request_rate=row["rate_per_replica"])  # fmt: skip
    assert at.lengths == "sharegpt" and at.ttft_p99_s <= 0.5 and at.tpot_s <= 0.05
    plain = sweep_serving(MODEL, replace_(workload, token_budget=None, max_seqs=None), space)
    assert plain.rows[0]["rate_per_replica"] > row["rate_per_replica"]  # 128 slots bind
    client = TestClient(app)
    both = client.post("/api/v1/inference/sweep", json={
        "model": "llama-3-8b", "request_rate": 5, "dataset": "sharegpt", "disaggregated": True,
        "accelerator": "h100-sxm-80gb"})  # fmt: skip
    assert both.status_code == 422 and both.json()["detail"][0]["field"] == "dataset"


def test_arrivals_near_capacity_are_marked_approximate() -> None:
    """Never silently wrong: Poisson arrivals at 85% or more of the replica's capacity carry a
    note that the latencies are approximate to a factor (the MLPerf server runs' regime); a
    lighter rate and a closed loop do not."""
    setup = InferenceSetup(5000, 500)

    def notes(**load: Any) -> list[str]:
        e = estimate_inference(MODEL, H100, TP2, setup, FP8, **load)
        return [n for n in e.notes if "approximate to a factor" in n]

    capacity = estimate_load(MODEL, H100, TP2, setup, FP8, request_rate=0.1)
    top = capacity.capacity_requests_per_s
    assert notes(request_rate=0.9 * top) and not notes(request_rate=0.5 * top)
    assert "At 90% of the replica's capacity" in notes(request_rate=0.9 * top)[0]
    closed = replace_(setup, concurrency=400)
    e = estimate_inference(MODEL, H100, TP2, closed, FP8, engine="vllm")
    assert e.load is not None and e.load.regime == "slot-limited"
    assert not [n for n in e.notes if "approximate to a factor" in n]


def test_each_engine_gives_its_kv_cache_its_share_of_memory() -> None:
    """vLLM: 0.9 of the GPU for everything (gpu_memory_utilization); TensorRT-LLM: 0.9 of what
    the model and its activations leave (free_gpu_memory_fraction); SGLang: a share of the GPU
    for weights and KV pool by TP size (mem_fraction_static, 0.85 at TP 4); each over the
    sequences' whole context. All below what the GPU holds (the memory model's count)."""
    memory = inference_memory(MODEL, H100, TP2, InferenceSetup(5000, 500), FP8)
    cap, held = memory.capacity_bytes, memory.kv_cache_bytes_per_sequence
    weights = memory.weights_bytes
    transient = memory.activation_peak_bytes + memory.runtime_overhead_bytes
    assert ENGINES["vllm"].kv_slots(memory, 2) == int((0.9 * cap - weights - transient) // held)
    assert ENGINES["trtllm"].kv_slots(memory, 2) == int(0.9 * (cap - weights - transient) // held)
    assert ENGINES["sglang"].kv_slots(memory, 2) == int((0.87 * cap - weights) // held)
    assert ENGINES["sglang"].fraction(4) == 0.85 and ENGINES["sglang"].fraction(16) == 0.79
    for engine in ("vllm", "trtllm", "sglang"):
        assert 0 < ENGINES[engine].kv_slots(memory, 2) < memory.max_concurrency
    # attention data parallel: each group its own cache
    assert ENGINES["vllm"].kv_slots(memory, 2, groups=4) == 4 * ENGINES["vllm"].kv_slots(memory, 2)
    # vLLM allocates blocks as tokens arrive: a sequence holds its live context on average
    # (5,250 of 5,500 tokens at fixed lengths); the others reserve the whole context
    budget = ENGINES["vllm"].kv_budget_bytes(memory, 2)
    live = ENGINES["vllm"].kv_slots(memory, 2, live_share=5250 / 5500)
    assert live == int(budget // (held * 5250 / 5500)) > ENGINES["vllm"].kv_slots(memory, 2)
    trt = ENGINES["trtllm"]
    assert trt.kv_slots(memory, 2, live_share=5250 / 5500) == trt.kv_slots(memory, 2)


def test_mlperf_rates_within_their_limits_are_compared() -> None:
    """Each MLPerf Server / Interactive run with its TTFT and TPOT p99 limits gets a slo_rate
    row: the highest predicted rate meeting the limits (a hair more does not), against the rate
    the run served. The model is optimistic there (median signed +28%; 30% APE: the long-prompt
    405B runs, whose prefill work queues, come out pessimistic), pinned so it cannot drift. (The
    TTFT p99 as the independent sum of a prompt's prefill and its wait, not the sum of their
    quantiles: 36.5% -> 30.1% APE, +25.7% -> +27.7% signed, the 405B runs less pessimistic.)"""
    from estimator.serving.estimate import rate_within_targets
    from validation.load import _load_at

    found, _ = rows()
    slo = {r.id: r for r in found if r.metric == "slo_rate"}
    limited = [c for c in cases() if isinstance(c, LoadCase) and c.constraints is not None]
    assert set(slo) == {c.id for c in limited} and len(slo) == 49
    case = next(c for c in limited if c.id.endswith("H200-SXM-141GBx8_TRT-llama2-70b-99-Server"))
    setup = InferenceSetup(case.input_len, case.output_len, lengths=LENGTH_PRESETS[case.lengths])
    rate = rate_within_targets(lambda r: _load_at(case, setup, r), *case.constraints)
    assert rate == slo[case.id].predicted and slo[case.id].measured == case.request_rate
    ttft, tpot = case.constraints
    inside, past = _load_at(case, setup, rate), _load_at(case, setup, rate * 1.01)
    assert inside.ttft_p99_s <= ttft and inside.tpot_s <= tpot
    assert past.regime == "overloaded" or past.ttft_p99_s > ttft or past.tpot_s > tpot
    table = {(s["metric"], s["group"]): s for s in summary(found)}
    assert table[("slo_rate", "all")]["median_ape"] <= 0.31
    assert table[("slo_rate", "all")]["median_signed"] <= 0.29


def test_serving_page_draws_latency_against_load() -> None:
    client = TestClient(app)
    page = client.get(
        "/serving", params={"model": "llama-3-8b", "concurrency": 64, "ttft_target_s": 0.5}
    ).text
    assert 'id="fig-load"' in page and "Latency under load" in page and "slots" in page


def test_launch_commands_carry_the_plan() -> None:
    """A plan turns into a deployment (issue 22 item 5): each engine's command carries the
    replica's parallelism, lengths, caps, budget and formats."""
    client = TestClient(app)
    req = {"model": "deepseek-v3", "accelerator": "h200-sxm-141gb", "num_gpus": 8,
           "layout": {"tp": 8, "ep": 8}, "precision": "fp8-serving",
           "input_len": 1024, "output_len": 1024}  # fmt: skip
    body = client.post("/api/v1/inference/estimate", json=req).json()
    launch = body["launch"]
    assert launch["vllm"].startswith("vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8")
    assert "--enable-expert-parallel" in launch["vllm"] and "--max-model-len 2048" in launch["vllm"]
    assert "--kv-cache-dtype fp8" in launch["vllm"]  # DeepSeek-V3 ships FP8: served as it is
    assert "--quantization" not in launch["vllm"] + launch["sglang"]  # (tests/test_launch.py)
    assert "--tp-size 8 --ep-size 8" in launch["sglang"] and "fp8_e4m3" in launch["sglang"]
    assert "--tp_size 8 --pp_size 1 --ep_size 8" in launch["trtllm"]
    assert "--max_num_tokens 8192" in launch["trtllm"] and "dtype: fp8" in launch["trtllm"]
    memory = inference_memory(
        get_model("deepseek-v3"), get_accelerator("h200-sxm-141gb"), Parallelism(tp=8, ep=8),
        InferenceSetup(1024, 1024), get_precision("fp8-serving"),
    )  # fmt: skip
    slots = min(1024, ENGINES["vllm"].kv_slots(memory, 8))
    assert slots < body["max_concurrency"]  # the engine keeps 10% of the GPU back
    assert f"--max-num-seqs {slots}" in launch["vllm"]
    nvfp4 = client.post(
        "/api/v1/inference/estimate",
        json={"model": "llama-3-8b", "precision": "nvfp4-serving", "accelerator": "b200"},
    ).json()["launch"]
    assert "--quantization" not in nvfp4["vllm"] and "quantized ahead of time" in nvfp4["notes"][0]
    pasted = client.post("/api/v1/inference/estimate", json={
        "model": {**model_entry("llama-3-8b")["config"]}}).json()["launch"]  # fmt: skip
    assert "/path/to/your/model" in pasted["vllm"]


def test_plan_a_fleet_from_a_request_rate_and_slos() -> None:
    """Issue 22 item 2: "lambda req/s at ISL/OSL with TTFT p99 <= X and TPOT <= Y": each layout
    serves the highest rate per replica whose steady state meets the targets, the fleet takes
    as many replicas as the rate needs, cheapest first, all-in cost at the rate served."""
    from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving

    workload = ServingWorkload(
        input_len=2000, output_len=500, ttft_target_s=2.0, tpot_target_s=0.05,
        request_rate=20.0, prices={"h100-sxm-80gb": 3.0},
    )  # fmt: skip
    space = ServingSearch(accelerators=("h100-sxm-80gb",), tp=(1, 2, 4), pp=(1,))
    sweep = sweep_serving(MODEL, workload, space)
    served = [r for r in sweep.rows if r["ok"]]
    assert served
    for r in served:
        assert r["ttft_p99_s"] <= 2.0 and r["tpot_s"] <= 0.05
        assert r["replicas"] * r["rate_per_replica"] >= 20.0 and r["headroom"] >= 0
        gpus = r["tp"] * r["pp"]
        spend = 3.0 * gpus * r["replicas"] / 3600
        assert r["usd_per_1m_output_tokens"] == pytest.approx(spend / (20.0 * 500) * 1e6)
        # one replica at its rate meets the targets; a bit more does not (within the search)
        precision = get_precision(r["precision"])
        over = estimate_load(MODEL, H100, Parallelism(tp=r["tp"]), InferenceSetup(2000, 500),
                             precision, request_rate=r["rate_per_replica"] * 1.01)  # fmt: skip
        assert over.ttft_p99_s > 2.0 or over.tpot_s > 0.05 or over.regime == "overloaded"
    costs = [r["usd_per_1m_output_tokens"] for r in served]
    assert costs == sorted(costs)
    client = TestClient(app)
    both = client.post(
        "/api/v1/inference/sweep",
        json={"model": "llama-3-8b", "request_rate": 5, "output_tokens_per_s": 1000},
    )
    assert both.status_code == 422 and both.json()["detail"][0]["field"] == "request_rate"


def test_report_has_a_latency_under_load_section() -> None:
    from validation.report import load_section, render_load

    section = load_section()
    metrics = {s["name"] for s in section["summary"]["latency under load, by metric"]}
    assert metrics == {"itl", "throughput", "tpot", "ttft", "slo_rate"}
    assert sum(section["skip reasons"].values()) == 58
    text = "\n".join(render_load(section, details=True))
    assert "# Serving latency under load" in text and "nim-1.8.0-llama3.3-70b" in text


def test_pipeline_stages_do_not_divide_a_prompts_prefill() -> None:
    """With pipeline parallelism a prompt's chunk rides in one micro-batch through every stage:
    the load model's TTFT of a lone request (concurrency 1) is the single estimate's, pp stages
    and all, not a pp-th of it (as it was when the chunk's tokens were spread over the pp
    micro-batches of a step)."""
    model, acc = get_model("llama-3.1-70b"), get_accelerator("h100-sxm-80gb")
    fp8 = get_precision("fp8-serving")
    for tp, pp in ((4, 1), (2, 2), (1, 4)):
        setup = InferenceSetup(8192, 256, 1)
        lone = estimate_inference(model, acc, Parallelism(tp=tp, pp=pp), setup, fp8).ttft_s
        load = estimate_load(model, acc, Parallelism(tp=tp, pp=pp), setup, fp8, engine="vllm")
        assert load.ttft_s == pytest.approx(lone, rel=0.03), (tp, pp)


def test_expert_load_imbalance_slows_the_busiest_rank() -> None:
    """A mixture-of-experts router's imbalance (issue 22, item 4 in part): balanced (1) is the
    plan as it was, to the bit; more imbalance, slower prefill and decode, lone and under load;
    a dense model or an imbalance under 1 is refused naming the field."""
    model, acc = get_model("qwen3-30b-a3b"), get_accelerator("h100-sxm-80gb")
    bf16, layout = get_precision("bf16"), Parallelism(tp=4, ep=4)

    def run(imbalance: float) -> Any:
        setup = InferenceSetup(2048, 256, 32, moe_imbalance=imbalance)
        return estimate_inference(model, acc, layout, setup, bf16, engine="vllm")

    base = estimate_inference(
        model, acc, layout, InferenceSetup(2048, 256, 32), bf16, engine="vllm"
    )
    same, more = run(1.0), run(2.0)
    assert (same.ttft_s, same.tpot_s, same.load.tpot_s) == (
        base.ttft_s,
        base.tpot_s,
        base.load.tpot_s,
    )  # type: ignore[union-attr]
    assert more.ttft_s > base.ttft_s and more.tpot_s > base.tpot_s
    assert more.load.tpot_s > base.load.tpot_s  # type: ignore[union-attr]
    assert any("imbalance 2" in n for n in more.notes)
    with pytest.raises(SpecError, match="mixture-of-experts") as dense:
        estimate_inference(
            get_model("llama-3-8b"),
            acc,
            Parallelism(),
            InferenceSetup(128, 16, moe_imbalance=2.0),
            bf16,
        )
    assert dense.value.field == "moe_imbalance"
    with pytest.raises(SpecError, match=">= 1"):
        run(0.5)
    client = TestClient(app)
    body = {"model": "qwen3-30b-a3b", "layout": {"tp": 4, "ep": 4}, "moe_imbalance": 2.0}
    api = client.post("/api/v1/inference/estimate", json=body)
    assert api.status_code == 200 and any("imbalance 2" in n for n in api.json()["notes"])
    refused = client.post(
        "/api/v1/inference/estimate", json={"model": "llama-3-8b", "moe_imbalance": 2.0}
    )
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "moe_imbalance"


def test_ttft_quantile_is_the_independent_sum_of_prefill_and_wait() -> None:
    """A request's own prefill (one of the length bins) and its prefill-queue wait (mass
    ``1 - rho`` at zero, an exponential tail) are independent: the quantile of their sum, checked
    against a sampled sum; in the tail it lies between the larger of the two quantiles and their
    sum (the comonotonic one, a long prompt waiting longest, which the model used to take)."""
    import numpy as np

    from estimator.serving.load import quantile_wait, sum_quantiles

    services = [0.2 + 0.15 * k for k in range(16)]  # 0.2 .. 2.45 s
    mean_wait, rho = 1.2, 0.6
    rng = np.random.default_rng(0)
    n = 400_000
    s = rng.choice(services, n)
    waiting = rng.random(n) < rho
    w = np.where(waiting, rng.exponential(mean_wait / rho, n), 0.0)
    ps = (0.5, 0.9, 0.99)
    quantiles = dict(zip(ps, sum_quantiles(services, mean_wait, rho, ps), strict=True))
    for p, got in quantiles.items():
        sampled = float(np.quantile(s + w, p))
        assert got == pytest.approx(sampled, rel=0.02), p
        alone = max(float(np.quantile(services, p)), float(quantile_wait(mean_wait, rho, p)))
        assert alone <= got
        if p >= 0.9:
            assert got < float(np.quantile(services, p)) + quantile_wait(mean_wait, rho, p)
    (alone_99,) = sum_quantiles(services, 0.0, 0.0, (0.99,))
    assert alone_99 == pytest.approx(np.quantile(services, 0.99))
