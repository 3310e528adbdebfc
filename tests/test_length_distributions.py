"""Length distributions in the serving load model (issue 22): fixed lengths as one point give
today's numbers, a preset keeps its published means, spread moves TTFT the way it must, the
API refuses what does not go together, and the validation maps only what is that dataset."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import fields, replace
from typing import get_args

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
from estimator.inputs.lengths import (
    LENGTH_PRESETS,
    MLPERF_PRESETS,
    LengthDistribution,
    fixed_lengths,
    truncated_exponential,
)
from estimator.serving.estimate import estimate_load
from estimator.serving.load import LoadPoint, prefill_wait
from validation.load import DATA, LoadCase, Skip, cases, lengths_of, rows, summary
from validation.records import Refused

SHAREGPT = LENGTH_PRESETS["sharegpt"]

# estimate_load at fixed lengths since the prefill queue is served in time and an arrival waits
# for the step under way (estimate_load): (ttft_s, tpot_s, ttft_p50_s, ttft_p90_s,
# output_tokens_per_s, requests_per_s, regime). TPOT and throughput as before length
# distributions (commit 20b3b1f); TTFT was 0.4175, 0.4212, 0.0411 and 0.0823 s (the step
# count's queue alone: the 5,000-token prompts' wait behind each other's work was missing).
# The Hopper plans re-based when the H100 GEMM fit took the GEMMs timed on a lent H100 and
# attention its measured head-dim rates (Llama 3.3 70B TTFT 0.7927 -> 0.8333 s and 0.4625 ->
# 0.4830 s, 821.2 -> 794.5 tok/s; DeepSeek-V3 0.1161 -> 0.1171 s, 2,096.9 -> 2,087.1 tok/s).
# An open loop below capacity reports its arrival rate as its completions (issue 39: a fleet's
# cost and its replica's agree): 0.3000000021 -> 0.3 and 4.0000004 -> 4.0 requests/s.
BEFORE = [
    (("llama-3.3-70b", "h100-sxm-80gb", 2, "fp8-serving", 5000, 500, 32, None, "vllm"),
     (0.8332775564998208, 0.03943349764193064, 0.6120483354298754, 1.5059857005300115,
      794.5249534304863, 1.5890499068609727, "shared")),
    (("llama-3.3-70b", "h100-sxm-80gb", 2, "fp8-serving", 5000, 500, 1, 0.3, "trtllm"),
     (0.48302750517947424, 0.01996427323388723, 0.45449637877940735, 0.5018516303910584,
      150.0, 0.3, "shared")),
    (("llama-3.1-8b", "a100-sxm-80gb", 1, "bf16", 230, 203, 1, 4.0, "sglang"),
     (0.04277317193332904, 0.01426909371674741, 0.04183242486671729, 0.04183242486671729,
      812.0, 4.0, "shared")),
    # DeepSeek-V3 since its routed experts are one fused kernel and EP inside TP moves no tokens
    # (serving.steps): was (0.3038, 0.1405, ..., 455.08 tok/s) with a launch per expert
    (("deepseek-v3", "h200-sxm-141gb", 8, "fp8-serving", 1024, 1024, 64, None, "sglang"),
     (0.11710575086581707, 0.030609394177161364, 0.11358807632042503, 0.1171376537734322,
      2087.1375112233113, 2.038220225804015, "shared")),
]  # fmt: skip


def _load(
    model: str, acc: str, tp: int, precision: str, setup: InferenceSetup, rate: float | None,
    engine: str,
) -> LoadPoint:  # fmt: skip
    return estimate_load(
        get_model(model), get_accelerator(acc), Parallelism(tp=tp), setup,
        get_precision(precision), engine=engine, request_rate=rate,
    )  # fmt: skip


def _sharegpt(concurrency: int = 1) -> InferenceSetup:
    return InferenceSetup(
        input_len=SHAREGPT.input_len,
        output_len=SHAREGPT.output_len,
        concurrency=concurrency,
        lengths=SHAREGPT,
    )


@pytest.mark.parametrize(("plan", "before"), BEFORE, ids=lambda v: str(v[0]))
def test_fixed_lengths_give_the_numbers_of_before(plan: tuple, before: tuple) -> None:
    model, acc, tp, precision, isl, osl, conc, rate, engine = plan
    setup = InferenceSetup(input_len=isl, output_len=osl, concurrency=conc)
    p = _load(model, acc, tp, precision, setup, rate, engine)
    got = (p.ttft_s, p.tpot_s, p.ttft_p50_s, p.ttft_p90_s, p.output_tokens_per_s,
           p.requests_per_s, p.regime)  # fmt: skip
    assert got[:-1] == pytest.approx(before[:-1], rel=1e-12) and got[-1] == before[-1]
    # The same lengths as a distribution of one point: every field the same
    one = _load(model, acc, tp, precision, replace(setup, lengths=fixed_lengths(isl, osl)),
                rate, engine)  # fmt: skip
    assert all(getattr(one, f.name) == getattr(p, f.name) for f in fields(LoadPoint))


def test_bins_keep_the_mean_and_the_bounds() -> None:
    bins = truncated_exponential(229.711, 4, 1024)
    assert len(bins) == 16 and math.fsum(bins) / 16 == pytest.approx(229.711, rel=1e-12)
    assert 4 < bins[0] < bins[-1] < 1024 and list(bins) == sorted(bins)
    # A mean above the midpoint gives a rising density: the top bins are the crowded ones
    high = truncated_exponential(800, 4, 1024)
    assert math.fsum(high) / 16 == pytest.approx(800) and high[-1] - high[-2] < high[1] - high[0]
    with pytest.raises(SpecError, match="mean"):
        truncated_exponential(2000, 4, 1024)
    with pytest.raises(SpecError, match="input_lens"):
        LengthDistribution("x", "x", (), (1.0,))


def test_the_sharegpt_preset_keeps_its_published_means() -> None:
    """vLLM PR #18566: 229,711 input and 203,068 output tokens over 1,000 prompts."""
    assert SHAREGPT.mean_input == pytest.approx(229.711, rel=1e-12)
    assert SHAREGPT.mean_output == pytest.approx(203.068, rel=1e-12)
    assert (SHAREGPT.input_len, SHAREGPT.output_len) == (230, 203)
    # The bench samplers' bounds: at least 4 tokens, prompts <= 1,024, prompt + output <= 2,048
    assert min(SHAREGPT.input_lens) >= 4 and max(SHAREGPT.input_lens) <= 1024
    assert min(SHAREGPT.output_lens) >= 4 and max(SHAREGPT.output_lens) <= 2044
    # Right-skewed: median under the mean, a spread near an exponential's
    assert SHAREGPT.input_quantile(0.5) < SHAREGPT.mean_input < SHAREGPT.input_quantile(0.9)
    assert 0.8 < math.sqrt(SHAREGPT.input_scv) < 1.0
    # Long answers weigh more in the context a decode step reads
    assert SHAREGPT.decode_context > SHAREGPT.mean_input + SHAREGPT.mean_output / 2


# (preset, published prompt mean, its bounds, output mean, its cap): the per-sample token counts
# of the official datasets (Harshith-umesh/mlperf-dashboard@5a43d27 mlperf-data/summaries) and
# the task READMEs' reference tokens per sample (mlcommons/inference@b66003e); Llama-3.1-8B's
# output from LoadGen's counts of the compared runs
MLPERF = [
    ("mlperf-llama2-70b", 5_463_976 / 24_576, (48, 1024), 294.45, 1024),
    ("mlperf-llama3.1-8b", 11_639_915 / 13_368, (79, 2540), 129.0, 129),
    ("mlperf-llama3.1-405b", 78_380_323 / 8_313, (476, 20000), 684.68, 2000),
    ("mlperf-mixtral-8x7b", 6_410_905 / 15_000, (35, 2048), 144.84, 1024),
    ("mlperf-deepseek-r1", 3_527_036 / 4_388, (52, 3140), 3886.2274, 20000),
]


@pytest.mark.parametrize(("name", "prompt", "bounds", "output", "cap"), MLPERF)
def test_mlperf_presets_keep_their_published_means_and_bounds(
    name: str, prompt: float, bounds: tuple[int, int], output: float, cap: int
) -> None:
    p = LENGTH_PRESETS[name]
    assert p.mean_input == pytest.approx(prompt, rel=1e-9) and len(p.input_lens) == 16
    assert p.mean_output == pytest.approx(output, rel=1e-9)
    assert bounds[0] < min(p.input_lens) and max(p.input_lens) < bounds[1]
    assert min(p.output_lens) >= 1 and max(p.output_lens) <= cap
    assert any("mlcommons/inference" in s or "LoadGen" in s for s in p.sources)


def test_lengths_of_maps_each_mlperf_task() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))["records"]
    texts = {r["length_distribution"] for r in data if
             str(r.get("length_distribution")).startswith("MLPerf")}  # fmt: skip
    mapped = {}
    for text in texts:
        try:
            mapped[text] = lengths_of({"length_distribution": text})[0]
        except Refused as why:
            assert "Llama-3.1-70B" in str(why) and "llama-3.1-70b" in text.lower()
    assert set(mapped.values()) == set(MLPERF_PRESETS)
    for text, name in mapped.items():
        assert text.lower().startswith(f"mlperf {name.removeprefix('mlperf-')} task")


def test_a_request_population_keeps_its_means_under_load() -> None:
    """Open loop below capacity: requests complete at the arrival rate, output tokens at the
    rate times the mean output."""
    p = _load("llama-3.1-8b", "a100-sxm-80gb", 1, "bf16", _sharegpt(), 4.0, "sglang")
    assert p.lengths == "sharegpt" and p.regime == "shared"
    assert p.requests_per_s == pytest.approx(4.0, rel=1e-6)
    assert p.output_tokens_per_s == pytest.approx(4.0 * 203.068, rel=1e-6)


def test_spread_moves_ttft_as_it_must() -> None:
    """At light load a request's TTFT follows its own prompt: the median prompt (168 tokens) is
    shorter than the mean (230), so the median TTFT is below the fixed-length one, and p90 above
    p50; more load never shortens TTFT."""
    args = ("llama-3.1-8b", "a100-sxm-80gb", 1, "bf16")
    fixed = InferenceSetup(input_len=230, output_len=203)
    for rate in (1.0, 4.0, 8.0):
        spread = _load(*args, _sharegpt(), rate, "sglang")
        flat = _load(*args, fixed, rate, "sglang")
        assert spread.ttft_p50_s < flat.ttft_p50_s
        assert spread.ttft_p50_s < spread.ttft_p90_s < spread.ttft_p99_s
    ttfts = [_load(*args, _sharegpt(), r, "sglang").ttft_s for r in (1.0, 4.0, 8.0, 16.0)]
    assert ttfts == sorted(ttfts)
    closed = [_load(*args, _sharegpt(n), None, "vllm").ttft_s for n in (1, 16, 64, 256)]
    assert closed == sorted(closed)


def test_prompt_spread_lengthens_the_prefill_wait() -> None:
    """Pollaczek-Khinchine: the M/G/1 wait is the M/D/1 wait times 1 + c^2."""
    s0, rho0, w0 = prefill_wait(200.0, 5000, 500, 8192)
    s1, rho1, w1 = prefill_wait(200.0, 5000, 500, 8192, input_scv=1.0)
    assert (s1, rho1) == (s0, rho0) and w0 > 0 and w1 == pytest.approx(2 * w0)


def test_api_takes_a_dataset_and_says_what_it_assumed() -> None:
    client = TestClient(app)
    req = {"model": "llama-3.1-8b", "accelerator": "a100-sxm-80gb", "engine": "sglang",
           "request_rate": 4, "dataset": "sharegpt"}  # fmt: skip
    body = client.post("/api/v1/inference/estimate", json=req).json()
    assert body["lengths"]["name"] == "sharegpt" and body["load"]["lengths"] == "sharegpt"
    assert body["lengths"]["mean_input_tokens"] == pytest.approx(229.711)
    assert any("vLLM PR #18566" in s for s in body["lengths"]["sources"])
    assert any(n.startswith("Request lengths: ShareGPT") for n in body["notes"])
    assert body["launch"]["vllm"].count("--max-model-len 433") == 1  # the rounded means
    plain = client.post("/api/v1/inference/estimate", json={**req, "dataset": None}).json()
    assert plain["lengths"]["name"] == "fixed" and plain["lengths"]["input_cv"] == 0
    for extra in ({"input_len": 512}, {"output_len": 64}):
        bad = client.post("/api/v1/inference/estimate", json={**req, **extra})
        assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "dataset"
    unknown = client.post("/api/v1/inference/estimate", json={**req, "dataset": "lmsys"})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["field"] == "dataset"
    page = client.get("/serving", params={"model": "llama-3.1-8b", "dataset": "sharegpt"})
    assert page.status_code == 200 and "Length distribution" in page.text


def test_every_length_preset_is_a_dataset_of_the_api() -> None:
    """The API's dataset names are the estimator's presets, the MLPerf tasks' among them."""
    from app.schemas.inference import Dataset

    assert set(get_args(Dataset)) == set(LENGTH_PRESETS) >= {"sharegpt", *MLPERF_PRESETS}
    client = TestClient(app)
    req = {
        "model": "llama-2-70b",
        "accelerator": "h200-sxm-141gb",
        "engine": "trtllm",
        "precision": "fp8-serving",
        "request_rate": 12,
        "dataset": "mlperf-llama2-70b",
    }
    body = client.post("/api/v1/inference/estimate", json=req).json()
    assert body["lengths"]["name"] == "mlperf-llama2-70b"
    assert body["lengths"]["mean_input_tokens"] == pytest.approx(222.3, abs=0.05)
    assert body["load"]["lengths"] == "mlperf-llama2-70b"


def test_validation_maps_only_sharegpt_with_its_default_sampling() -> None:
    text = (
        "ShareGPT (sglang.bench_serving --dataset-name sharegpt; per-request input/output"
        " lengths from the dataset conversations)"
    )
    sharegpt = {"length_distribution": text}
    assert lengths_of(sharegpt)[0] == "sharegpt"
    assert lengths_of({"input_len": 1024, "output_len": 1024}) == ("fixed", [])
    override = {"length_distribution": text + " --sharegpt-output-len 256"}
    with pytest.raises(Refused, match="overridden"):
        lengths_of(override)
    with pytest.raises(Refused, match=r"Llama-3\.1-70B"):
        lengths_of(
            {"length_distribution": "MLPerf llama2-70b task (OpenOrca), OPEN division; served"
             " with Llama-3.1-70B-Instruct (model substitution)"}
        )  # fmt: skip
    with pytest.raises(Refused, match="MLPerf"):
        lengths_of({"length_distribution": "MLPerf gpt-j task: CNN/DailyMail"})
    found = {c.id: c for c in cases()}
    compared = [c for c in found.values() if isinstance(c, LoadCase) and c.lengths == "sharegpt"]
    assert sorted(c.id for c in compared) == [
        f"sglang-bench-vllm060-{g}-sglang-rps{r}" for g in ("a100-8b", "h100-70b") for r in (4, 8)
    ]
    v0 = found["sglang-bench-vllm060-a100-8b-vllm-rps4"]
    assert isinstance(v0, Skip) and "multi-step" in v0.reason


def test_accuracy_on_sharegpt_is_pinned() -> None:
    """Measured, not tuned (docs/validation.md): the 4 SGLang 0.3 ShareGPT records (Poisson
    arrivals at 4 and 8 req/s), median TTFT and TPOT; the non-MLPerf records' TTFT and TPOT
    (the table before the MLPerf presets: 30.2% and 15.2%); the MLPerf server runs, far off
    (operated at the edge of their latency limits, near capacity, where the model's 10-20%
    optimistic capacity puts it at a much smaller batch: TTFT and TPOT under-predicted)."""
    found, _ = rows()
    table = {(s["metric"], s["group"]): s for s in summary(found)}
    group = "sglang_repo_benchmark_vllm_060"
    assert table[("ttft", group)]["n"] == 4 and table[("ttft", group)]["median_ape"] <= 0.12
    assert table[("tpot", group)]["n"] == 4 and table[("tpot", group)]["median_ape"] <= 0.13
    assert table[("ttft", group)]["p90_ape"] <= 0.21 and table[("tpot", group)]["p90_ape"] <= 0.33

    def median_ape(metric: str, mlperf: bool) -> float:
        return statistics.median(
            abs(r.error)
            for r in found
            if r.metric == metric and r.group.startswith("mlperf") == mlperf
        )

    # non-MLPerf TTFT 0.179 with the prefill queue in time (0.286 with the engines' KV budgets,
    # 0.302 before); TPOT 0.152 (the ITL rows, pinned in test_serving_load, went from 0.167 to
    # 0.069)
    assert median_ape("ttft", False) <= 0.19 and median_ape("tpot", False) <= 0.16
    # MLPerf TTFT: 0.745 over 43 records; 0.755 with the three DeepSeek-R1 runs (-90% each);
    # 0.760 with the prefill queue in time (the long-prompt 405B runs over-predicted); 0.744
    # with each run's own engine options
    assert median_ape("ttft", True) <= 0.75 and median_ape("tpot", True) <= 0.70
    assert median_ape("throughput", True) <= 0.03  # below capacity: the offered rate, served
