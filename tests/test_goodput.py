"""End-to-end latency percentiles and goodput under latency targets (``estimate_load``): E2E is
a request's TTFT plus its own decode steps, its output length independent of its prompt and
wait; goodput is the requests/s within both targets (DistServe's SLO attainment x the rate),
from the same TTFT distribution as the percentiles."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app
from estimator import InferenceSetup, Parallelism, get_accelerator, get_model, get_precision
from estimator.inputs.lengths import LENGTH_PRESETS
from estimator.serving.estimate import estimate_load
from estimator.serving.load import exceed_probability

H100 = get_accelerator("h100-sxm-80gb")
LLAMA = get_model("llama-3.1-70b")
FP8 = get_precision("fp8-serving")
TP4 = Parallelism(tp=4)
FIXED = InferenceSetup(2048, 256)
SHAREGPT = InferenceSetup(2048, 256, lengths=LENGTH_PRESETS["sharegpt"])


def _load(setup: InferenceSetup = FIXED, rate: float = 3.0, **targets: float):
    return estimate_load(LLAMA, H100, TP4, setup, FP8, request_rate=rate, **targets)


def test_the_tail_probability_is_the_sampled_sums() -> None:
    """P(S + W > t), S one of equally likely services and W an independent wait (mass 1 - rho
    at zero, an exponential tail): against a sampled sum; its quantile is the 1 - p point."""
    services = [0.2 + 0.15 * k for k in range(16)]
    mean_wait, rho = 1.2, 0.6
    rng = np.random.default_rng(1)
    n = 400_000
    total = rng.choice(services, n) + np.where(
        rng.random(n) < rho, rng.exponential(mean_wait / rho, n), 0.0
    )
    ts = np.array([0.5, 1.5, 3.0, 6.0])
    got = exceed_probability(services, mean_wait, rho, ts)
    assert got == pytest.approx([(total > t).mean() for t in ts], abs=3e-3)
    assert exceed_probability([1.0], 0.0, 0.0, 0.5) == 1.0
    assert exceed_probability([1.0], 0.0, 0.0, 1.5) == 0.0
    assert exceed_probability([1.0], float("inf"), 1.0, 1e9) == 1.0  # overloaded
    # far below every service, with a steep tail: all exceed it, without an overflow
    with np.errstate(over="raise"):
        assert exceed_probability([5.0, 6.0], 1e-4, 0.5, 0.0) == 1.0


def test_fixed_lengths_e2e_is_the_ttft_plus_the_decode() -> None:
    load = _load()
    decode = (256 - 1) * load.tpot_s
    for q in ("p50", "p90", "p99"):
        assert getattr(load, f"e2e_{q}_s") == pytest.approx(
            getattr(load, f"ttft_{q}_s") + decode, rel=1e-9
        )
    assert load.e2e_s == pytest.approx(load.ttft_s + decode, rel=1e-9)


def test_a_length_distribution_spreads_e2e_over_the_outputs() -> None:
    """ShareGPT's outputs run from 4 to 2,044 tokens: the median request ends well before the
    slowest, and every E2E quantile lies between the TTFT's plus the shortest and the longest
    request's decode."""
    load = _load(SHAREGPT, rate=6.0)
    outs = LENGTH_PRESETS["sharegpt"].output_lens
    assert load.e2e_p50_s < load.e2e_p90_s < load.e2e_p99_s
    assert load.e2e_p99_s > 3 * load.e2e_p50_s
    for q in ("p50", "p90", "p99"):
        e2e, ttft = getattr(load, f"e2e_{q}_s"), getattr(load, f"ttft_{q}_s")
        lower = min(outs) - 1
        assert e2e >= ttft * 0.999 and e2e >= lower * load.tpot_s
        assert e2e <= ttft + (max(outs) - 1) * load.tpot_s + 1e-9


def test_goodput_is_the_share_within_the_targets_times_the_rate() -> None:
    base = _load()
    # at the TTFT's own p99 (fixed lengths: one prompt length, the wait's exponential tail) 99%
    # of requests are within it
    at_p99 = _load(ttft_target_s=base.ttft_p99_s)
    assert at_p99.slo_attainment == pytest.approx(0.99, abs=1e-6)
    assert at_p99.goodput_requests_per_s == pytest.approx(0.99 * base.requests_per_s)
    generous = _load(ttft_target_s=60.0, tpot_target_s=1.0)
    assert generous.slo_attainment == pytest.approx(1.0)
    # every request decodes at the replica's step: a TPOT target below it, none within
    tight = _load(tpot_target_s=0.5 * base.tpot_s)
    assert tight.slo_attainment == 0.0 and tight.goodput_requests_per_s == 0.0
    assert base.slo_attainment is None and base.goodput_requests_per_s is None
    # the wait's tail: the share past a TTFT target between the lone prefill and the p99
    mid = _load(ttft_target_s=base.ttft_p90_s)
    assert mid.slo_attainment == pytest.approx(0.9, abs=1e-6)


def test_overloaded_nothing_is_within_a_ttft_target() -> None:
    over = _load(rate=50.0, ttft_target_s=10.0)
    assert over.regime == "overloaded"
    assert over.slo_attainment == 0.0 and over.goodput_requests_per_s == 0.0
    assert over.e2e_p99_s == float("inf")


def test_a_finite_run_counts_its_own_requests() -> None:
    setup = InferenceSetup(2048, 256, concurrency=16, num_prompts=200)
    run = estimate_load(LLAMA, H100, TP4, setup, FP8, ttft_target_s=0.5, tpot_target_s=0.05)
    assert run.num_prompts == 200 and run.slo_attainment is not None
    assert 0.0 <= run.slo_attainment <= 1.0
    assert run.goodput_requests_per_s == pytest.approx(run.slo_attainment * run.requests_per_s)
    assert run.e2e_p50_s <= run.e2e_p99_s


client = TestClient(app)
BODY = {
    "model": "llama-3.1-70b",
    "accelerator": "h100-sxm-80gb",
    "layout": {"tp": 4},
    "precision": "fp8-serving",
    "input_len": 2048,
    "output_len": 256,
    "request_rate": 3,
    "ttft_target_s": 0.5,
    "tpot_target_s": 0.05,
}


def test_the_api_the_page_and_the_cli_show_them(capsys: pytest.CaptureFixture[str]) -> None:
    load = client.post("/api/v1/inference/estimate", json=BODY).json()["load"]
    core = _load(ttft_target_s=0.5, tpot_target_s=0.05)
    assert load["e2e_p99_s"] == pytest.approx(core.e2e_p99_s)
    assert load["slo_attainment"] == pytest.approx(core.slo_attainment)
    assert load["goodput_requests_per_s"] == pytest.approx(core.goodput_requests_per_s)
    page = client.get(
        "/serving?model=llama-3.1-70b&accelerator=h100-sxm-80gb&tp=4&precision=fp8-serving"
        "&input_len=2048&output_len=256&request_rate=3&ttft_target_s=0.5&tpot_target_s=0.05"
    )
    assert page.status_code == 200 and 'id="goodput"' in page.text
    assert main(["infer", "--model", "llama-3.1-70b", "--tp", "4", "--precision", "fp8-serving",
                 "--input-len", "2048", "--output-len", "256", "--request-rate", "3",
                 "--ttft-target-s", "0.5", "--tpot-target-s", "0.05"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "goodput" in out and "within the latency targets" in out
