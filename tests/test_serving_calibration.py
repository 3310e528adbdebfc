"""Serving calibrated on a deployment's measured run (issue 47 item 2,
``estimator.serving.calibration``): a benchmark's JSON read, two step scales fitted and
recovered from a synthetic run with known ones, another load predicted from them, and the
refusals (an impossible measurement, another accelerator) at the core and the API."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import app, create_app
from estimator import Parallelism, get_accelerator, get_model, get_precision
from estimator.errors import SpecError
from estimator.memory.inference import InferenceSetup
from estimator.serving.calibration import (
    ServingMeasurement,
    calibrate,
    fit_scales,
    parse_bench,
)
from estimator.serving.estimate import estimate_load
from estimator.serving.feasibility import InfeasibleMeasurement
from estimator.serving.load import EnginePreset, LoadPoint, engine_preset

H100 = get_accelerator("h100-sxm-80gb")
MODEL = get_model("llama-3.3-70b")
FP8 = get_precision("fp8-serving")
TP2 = Parallelism(tp=2)
VLLM = engine_preset("vllm")
SETUP = InferenceSetup(input_len=2000, output_len=300, concurrency=32)
TRUE_SCALES = (1.3, 0.8)  # the synthetic deployment: prefill 30 % slower, decode 20 % faster

# The shape of ``vllm bench serve --save-result``'s JSON (vLLM 0.10, benchmarks/serve.py):
# a run of 500 ShareGPT-like requests at --max-concurrency 32, --request-rate inf
BENCH: dict[str, Any] = {
    "date": "20250801-120000",
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.3-70B-Instruct",
    "num_prompts": 500,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 32,
    "duration": 161.2,
    "completed": 500,
    "total_input_tokens": 1_000_000,
    "total_output_tokens": 150_000,
    "request_throughput": 3.10,
    "request_goodput": None,
    "output_throughput": 930.5,
    "total_token_throughput": 7134.2,
    "mean_ttft_ms": 412.7,
    "median_ttft_ms": 380.1,
    "std_ttft_ms": 120.4,
    "p99_ttft_ms": 901.3,
    "mean_tpot_ms": 31.2,
    "median_tpot_ms": 30.9,
    "std_tpot_ms": 2.1,
    "p99_tpot_ms": 38.0,
    "mean_itl_ms": 31.0,
    "median_itl_ms": 28.4,
    "p99_itl_ms": 95.2,
}


def _load_of(setup: InferenceSetup, engine: EnginePreset, rate: float | None) -> LoadPoint:
    return estimate_load(MODEL, H100, TP2, setup, FP8, engine=engine, request_rate=rate)


def _truth(setup: InferenceSetup, rate: float | None = None) -> LoadPoint:
    """The synthetic deployment: the model itself with the known scales on its steps."""
    return _load_of(setup, replace(VLLM, step_scales=TRUE_SCALES), rate)


def _measured(point: LoadPoint, setup: InferenceSetup, **kw: Any) -> ServingMeasurement:
    return ServingMeasurement(
        ttft_s=point.ttft_s, tpot_s=point.tpot_s, input_len=setup.input_len,
        output_len=setup.output_len, accelerator=H100.id,
        output_tokens_per_s=point.output_tokens_per_s, **kw,
    )  # fmt: skip


def test_a_vllm_bench_result_reads_as_a_closed_loop_run() -> None:
    m = parse_bench(BENCH, H100.id)
    assert (m.ttft_s, m.tpot_s) == pytest.approx((0.4127, 0.0312))
    assert (m.input_len, m.output_len) == (2000, 300)
    assert (m.concurrency, m.request_rate) == (32, None)
    assert (m.output_tokens_per_s, m.requests_per_s) == (930.5, 3.10)
    rated = parse_bench({**BENCH, "request_rate": 2.5, "max_concurrency": None}, H100.id)
    assert (rated.concurrency, rated.request_rate) == (None, 2.5)


def test_a_bench_result_without_its_load_or_a_mean_is_refused() -> None:
    with pytest.raises(SpecError) as e:
        parse_bench({**BENCH, "max_concurrency": None}, H100.id)
    assert e.value.field == "calibration.bench.max_concurrency"
    with pytest.raises(SpecError) as e:
        parse_bench({k: v for k, v in BENCH.items() if k != "mean_tpot_ms"}, H100.id)
    assert e.value.field == "calibration.bench.mean_tpot_ms"
    for key, value in (("total_input_tokens", "inf"), ("total_output_tokens", 1e300)):
        with pytest.raises(SpecError) as e:
            parse_bench({**BENCH, key: value}, H100.id)
        assert e.value.field == f"calibration.bench.{key}"


def test_the_fit_recovers_known_scales_from_a_synthetic_run() -> None:
    fit = fit_scales(_load_of, SETUP, VLLM, _measured(_truth(SETUP), SETUP, concurrency=32))
    assert fit.prefill_scale == pytest.approx(TRUE_SCALES[0], rel=0.02)
    assert fit.decode_scale == pytest.approx(TRUE_SCALES[1], rel=0.02)
    assert fit.calibrated[:2] == pytest.approx(fit.measured_at[:2], rel=0.01)
    assert fit.uncalibrated[0] < 0.75 * fit.measured_at[0]  # the model before was far off
    assert "prefill time x1.30" in fit.note and "decode time x0.80" in fit.note


@pytest.mark.parametrize(("held", "rate"), [(96, None), (8, None), (1, 1.5)])
def test_a_calibration_predicts_a_load_it_was_not_fitted_on(held: int, rate: float | None) -> None:
    fit = fit_scales(_load_of, SETUP, VLLM, _measured(_truth(SETUP), SETUP, concurrency=32))
    other = replace(SETUP, concurrency=held)
    truth, predicted = _truth(other, rate), _load_of(other, fit.preset(VLLM), rate)
    assert predicted.ttft_s == pytest.approx(truth.ttft_s, rel=0.03)
    assert predicted.tpot_s == pytest.approx(truth.tpot_s, rel=0.03)


def test_an_open_loop_run_calibrates_too() -> None:
    truth = _truth(SETUP, 1.5)
    fit = fit_scales(_load_of, SETUP, VLLM, _measured(truth, SETUP, request_rate=1.5))
    assert fit.scales == pytest.approx(TRUE_SCALES, rel=0.02)


def test_an_impossible_ttft_is_refused_naming_the_prefix_cache() -> None:
    m = replace(_measured(_truth(SETUP), SETUP, concurrency=32), ttft_s=1e-3)
    with pytest.raises(InfeasibleMeasurement) as e:
        calibrate(MODEL, H100, FP8, SETUP, 2, VLLM, m, _load_of)
    assert e.value.field == "calibration.ttft_s"
    assert "prefix-cache" in e.value.rule.lower()


def test_scales_beyond_the_bounds_and_another_gpu_are_refused() -> None:
    m = _measured(_truth(SETUP), SETUP, concurrency=32)
    with pytest.raises(SpecError) as e:
        calibrate(
            MODEL, H100, FP8, SETUP, 2, VLLM, replace(m, accelerator="a100-sxm-80gb"), _load_of
        )
    assert e.value.field == "calibration.accelerator"
    with pytest.raises(SpecError) as e:
        calibrate(MODEL, H100, FP8, SETUP, 2, VLLM, replace(m, engine="sglang"), _load_of)
    assert e.value.field == "calibration.engine"
    with pytest.raises(SpecError) as e:
        fit_scales(_load_of, SETUP, VLLM, replace(m, tpot_s=m.tpot_s * 20))
    assert e.value.field == "calibration" and "outside" in e.value.rule


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app, base_url="http://localhost")


def _body(**calibration: Any) -> dict[str, Any]:
    return {
        "model": "llama-3.3-70b", "accelerator": H100.id, "layout": {"tp": 2},
        "precision": "fp8-serving", "input_len": 2000, "output_len": 300, "concurrency": 96,
        "calibration": {"accelerator": H100.id, **calibration},
    }  # fmt: skip


def test_the_api_answers_with_the_calibration_and_re_plans_another_load(
    client: TestClient,
) -> None:
    truth = _truth(SETUP)
    typed = {"ttft_ms": truth.ttft_s * 1e3, "tpot_ms": truth.tpot_s * 1e3, "concurrency": 32}
    r = client.post("/api/v1/inference/estimate", json=_body(**typed))
    assert r.status_code == 200, r.text
    out = r.json()
    cal = out["calibrated"]
    assert cal["prefill_scale"] == pytest.approx(1.3, rel=0.02)
    assert cal["decode_scale"] == pytest.approx(0.8, rel=0.02)
    assert cal["calibrated"]["ttft_s"] == pytest.approx(truth.ttft_s, rel=0.01)
    assert any(n.startswith("Calibrated on a measured run") for n in out["notes"])
    held = _truth(replace(SETUP, concurrency=96))  # the plan's own load: not the measured one
    assert out["load"]["ttft_s"] == pytest.approx(held.ttft_s, rel=0.03)
    assert out["load"]["tpot_s"] == pytest.approx(held.tpot_s, rel=0.03)
    plain = client.post("/api/v1/inference/estimate", json={**_body(), "calibration": None}).json()
    assert plain["calibrated"] is None and plain["load"]["tpot_s"] != out["load"]["tpot_s"]


def test_the_api_reads_a_bench_result_and_refuses_with_the_field(client: TestClient) -> None:
    r = client.post("/api/v1/inference/estimate", json=_body(bench=BENCH))
    assert r.status_code == 200, r.text
    assert r.json()["calibrated"]["source"].startswith("vllm bench serve")
    for body, field in (
        (_body(bench={**BENCH, "mean_ttft_ms": 1.0}), "calibration.ttft_s"),
        ({**_body(bench=BENCH), "calibration": {"accelerator": "a100-sxm-80gb", "bench": BENCH}},
         "calibration.accelerator"),
        (_body(ttft_ms=400.0, tpot_ms=30.0), "calibration.concurrency"),
    ):  # fmt: skip
        r = client.post("/api/v1/inference/estimate", json=body)
        assert r.status_code == 422, r.text
        assert field in r.text
    impossible = client.post(
        "/api/v1/inference/estimate", json=_body(bench={**BENCH, "mean_ttft_ms": 1.0})
    )
    assert "prefix-cache" in impossible.text.lower()


def test_a_saved_plan_keeps_its_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'plans.db'}")
    request = _body(bench=BENCH)
    with TestClient(create_app()) as saving:
        saved = saving.post(
            "/api/v1/plans", json={"name": "calibrated", "kind": "inference", "request": request}
        )
        assert saved.status_code == 201, saved.text
        opened = saving.get(f"/api/v1/plans/{saved.json()['id']}").json()
    assert opened["request"]["calibration"] == request["calibration"]
    assert opened["changed"] == {}  # re-evaluated with the same fit
