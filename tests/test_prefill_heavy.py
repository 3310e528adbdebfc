"""Prefill-heavy steady states (issue 41 item 4: long prompts, short answers): the compute a
steady state implies against the GPUs' dense peak (``estimator.serving.feasibility``), the
planner's answers never above it, a measurement above it refused with the prefix cache named as
the likely cause, and the published runs checked."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.counts.flops import forward_flops
from estimator.inputs.lengths import LENGTH_PRESETS
from estimator.serving.engine_step import engine_step_time
from estimator.serving.estimate import estimate_inference, estimate_load
from estimator.serving.feasibility import (
    InfeasibleMeasurement,
    Measured,
    check_measured,
    feasible_hit_rate,
    implied_compute,
    request_flops,
    require_feasible,
)
from validation.feasibility import (
    PREFILL_HEAVY_RATIO,
    load_checks,
    prefill_heavy_ids,
    throughput_checks,
)

H100 = get_accelerator("h100-sxm-80gb")
LLAMA_70B = get_model("llama-3.3-70b")
LLAMA_8B = get_model("llama-3.1-8b")
FP8 = get_precision("fp8-serving")
BF16 = get_precision("bf16")
NIM = InferenceSetup(input_len=5000, output_len=500)  # NVIDIA NIM's 5000-in / 500-out runs


def _llama_8b_prefill(prompt: int, cached: int) -> float:
    """Llama-3.1-8B's prefill FLOPs by hand, from its config.json (32 layers, hidden 4096, 32
    query and 8 key-value heads of 128, MLP 14336, vocabulary 128256): every linear's 2
    FLOPs per weight per computed token, the new queries against every earlier key (Q K^T and
    P V: 2 x 32 heads x (128 + 128) a pair), the output head over the last token."""
    hidden, kv, mlp, layers, vocab = 4096, 8 * 128, 14336, 32, 128256
    per_token = layers * 2 * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * mlp)
    per_pair = layers * 2 * 32 * (128 + 128)

    def pairs(n: int) -> int:
        return n * (n + 1) // 2

    new = prompt - cached
    return new * per_token + per_pair * (pairs(prompt) - pairs(cached)) + 2 * vocab * hidden


@pytest.mark.parametrize(("prompt", "hit"), [(1, 0.0), (5000, 0.0), (5000, 0.5), (8192, 0.9)])
def test_prefill_flops_are_llama_8bs_by_hand(prompt: int, hit: float) -> None:
    setup = InferenceSetup(input_len=prompt, output_len=1, prefix_cache_hit_rate=hit)
    prefill, decode = request_flops(LLAMA_8B, setup)
    assert prefill == _llama_8b_prefill(prompt, setup.cached_prompt_tokens)
    assert decode == 0.0  # one output token: the prefill's


def test_decode_flops_are_one_forward_token_each() -> None:
    """``y`` output tokens: ``y - 1`` decode steps, each one token's forward at its position."""
    _, decode = request_flops(LLAMA_8B, InferenceSetup(input_len=1000, output_len=4))
    one = [
        forward_flops(LLAMA_8B, n + 1).total_causal - forward_flops(LLAMA_8B, n).total_causal
        for n in (1000, 1001, 1002)
    ]
    assert decode == pytest.approx(sum(one), rel=1e-12)


def test_a_length_distribution_implies_at_least_its_means_work() -> None:
    """The causal pairs make a prompt's work convex in its length: the mean over the 405B task's
    prompts is above the work of its mean prompt (the bound stays a bound)."""
    dist = LENGTH_PRESETS["mlperf-llama3.1-405b"]
    spread = request_flops(LLAMA_70B, InferenceSetup(dist.input_len, dist.output_len, lengths=dist))
    mean = request_flops(LLAMA_70B, InferenceSetup(dist.input_len, dist.output_len))
    assert spread[0] > mean[0]


def test_nims_measured_runs_fit_under_the_peak() -> None:
    """NIM 1.8.0's Llama-3.3-70B on 2 x H100 FP8 at 5000 / 500: 920 tokens/s at its plateau,
    about 37 % of the dense FP8 peak (nvidia_nim_benchmarking_docs)."""
    measured = Measured(output_tokens_per_s=920.0)
    check = require_feasible(check_measured(LLAMA_70B, H100, FP8, NIM, 2, measured))
    assert check.feasible and check.throughput is not None
    assert check.throughput.utilization == pytest.approx(0.37, abs=0.01)
    assert check.throughput.prefill_flop_per_s > 9 * check.throughput.decode_flop_per_s
    assert check.throughput_hit_rate == 0.0


def test_an_impossible_throughput_is_refused_and_blames_the_prefix_cache() -> None:
    measured = Measured(output_tokens_per_s=5000.0)  # 10 requests/s of 5000 + 500 tokens
    check = check_measured(LLAMA_70B, H100, FP8, NIM, 2, measured)
    assert not check.feasible and check.throughput is not None
    assert check.throughput.utilization == pytest.approx(2.0, abs=0.05)
    hit = check.throughput_hit_rate
    assert hit is not None and 0.5 < hit < 0.6
    ((field, value, message),) = check.warnings
    assert (field, value) == ("output_tokens_per_s", 5000.0)
    assert "Prefix-cache hits are the likely cause" in message
    assert "7,173 TFLOP/s of prefill" in message and "3,958 TFLOP/s" in message
    assert f"{hit:.0%}" in message and "--no-enable-prefix-caching" in message
    with pytest.raises(InfeasibleMeasurement) as refused:
        require_feasible(check)
    assert isinstance(refused.value, SpecError)
    assert refused.value.field == "measured.output_tokens_per_s"
    # at the hit rate it names the run is feasible, a point below it is not
    for rate, ok in ((hit, True), (hit - 0.01, False)):
        cached = InferenceSetup(input_len=5000, output_len=500, prefix_cache_hit_rate=rate)
        assert check_measured(LLAMA_70B, H100, FP8, cached, 2, measured).feasible is ok


def test_an_impossible_ttft_is_refused() -> None:
    """5,000 tokens of Llama-3.3-70B prefilled in 50 ms on two H100s: 14 PFLOP/s, 3.6 x the
    peak."""
    check = check_measured(LLAMA_70B, H100, FP8, NIM, 2, Measured(ttft_s=0.05))
    with pytest.raises(InfeasibleMeasurement, match="Prefix-cache hits") as refused:
        require_feasible(check)
    assert refused.value.field == "measured.ttft_s"
    assert check.ttft is not None and check.ttft.utilization == pytest.approx(3.62, abs=0.02)
    assert check.ttft_hit_rate is not None and 0.7 < check.ttft_hit_rate < 0.75
    assert check_measured(LLAMA_70B, H100, FP8, NIM, 2, Measured(ttft_s=0.4)).feasible


def test_what_no_prefix_cache_explains_says_so() -> None:
    """Decode alone above the peak: no hit rate helps, and the message says to check the
    measurement instead."""
    check = check_measured(LLAMA_8B, H100, BF16, InferenceSetup(1000, 1000), 1,
                           Measured(output_tokens_per_s=1e6))  # fmt: skip
    assert check.throughput_hit_rate is None
    assert "not even a prefix cache" in check.warnings[0][2]
    assert "likely cause" not in check.warnings[0][2]


def test_bad_inputs_are_refused_with_their_field() -> None:
    with pytest.raises(SpecError, match="gpus"):
        implied_compute(LLAMA_8B, H100, BF16, NIM, 1.0, 0)
    with pytest.raises(SpecError, match=r"measured\.ttft_s"):
        check_measured(LLAMA_8B, H100, BF16, NIM, 1, Measured(ttft_s=0.0))


# -- the planner's answers never imply more than the peak ----------------------------------

# prefill-heavy lengths (ISL / OSL >= 10: RAG, agents) and a balanced one
GRID_LENGTHS = ((5000, 500), (20000, 200), (8192, 32), (2048, 128), (1024, 1024))
GRID_ENGINES = ("vllm", "sglang", "trtllm")
FAST_GRID = ({"llama-3.1-8b": 1, "qwen3-30b-a3b": 1}, ("h100-sxm-80gb",))
FULL_GRID = (
    {"llama-3.1-8b": 1, "llama-3.3-70b": 2, "qwen3-30b-a3b": 1, "mixtral-8x7b": 2},
    ("h100-sxm-80gb", "b200", "a100-sxm-80gb", "l40s"),
)


def _answers(models: dict[str, int], accelerators: tuple[str, ...]) -> Iterator[tuple[str, float]]:
    """(what, share of the peak) of every steady state the planner answers over the grid: the
    load model's point and capacity, closed loop and open, and the concurrency curve's points."""
    grid = itertools.product(
        models.items(), accelerators, ("bf16", "fp8-serving"), GRID_LENGTHS, GRID_ENGINES,
        (0.0, 0.75),
    )  # fmt: skip
    for (name, tp), acc_id, prec, (isl, osl), engine, hit in grid:
        model, acc, precision = get_model(name), get_accelerator(acc_id), get_precision(prec)
        if precision.compute not in acc.peak_flop_per_s:
            continue
        layout = Parallelism(tp=tp)
        label = f"{name} {acc_id} {prec} {isl}/{osl} {engine} hit {hit}"
        for concurrency in (8, 512):
            setup = InferenceSetup(isl, osl, concurrency, prefix_cache_hit_rate=hit)
            try:
                point = estimate_load(model, acc, layout, setup, precision, engine=engine)
            except SpecError:
                continue
            rates: dict[str, float] = {
                "closed loop": point.requests_per_s,
                "capacity": point.capacity_requests_per_s,
            }
            rate = 0.95 * point.capacity_requests_per_s
            rates["open loop"] = estimate_load(
                model, acc, layout, setup, precision, engine=engine, request_rate=rate
            ).requests_per_s
            if engine == "vllm" and concurrency == 8:
                est = estimate_inference(model, acc, layout, setup, precision)
                for p in est.curve:
                    rates[f"curve at {p.concurrency}"] = p.output_tokens_per_s / osl
            for what, r in rates.items():
                rate_ = implied_compute(model, acc, precision, setup, r, layout.num_gpus)
                yield f"{label} c{concurrency} {what}", rate_.utilization


def _check_answers(shares: dict[str, float], least: int) -> None:
    assert len(shares) >= least
    above = {k: v for k, v in shares.items() if v > 1.0}
    assert not above, f"steady states above the GPUs' dense peak: {above}"
    # the prefill-heavy ones are answered and checked (the grid's ISL / OSL >= 10 lengths)
    for isl, osl in GRID_LENGTHS:
        if isl >= PREFILL_HEAVY_RATIO * osl:
            assert any(f" {isl}/{osl} " in k for k in shares), (isl, osl)


def test_no_answer_implies_more_than_the_peak() -> None:
    _check_answers(dict(_answers(*FAST_GRID)), 500)


@pytest.mark.slow
def test_no_answer_over_the_whole_grid_implies_more_than_the_peak() -> None:
    _check_answers(dict(_answers(*FULL_GRID)), 4000)


def test_the_property_catches_a_load_model_faster_than_the_chip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step timed 20 x too fast (a broken kernel table, a unit slip) implies more than the
    peak: the property above fails on it."""

    def too_fast(*args: Any, **kwargs: Any) -> Any:
        step = engine_step_time(*args, **kwargs)
        return lambda d, p: step(d, p) / 20

    monkeypatch.setattr("estimator.serving.estimate.engine_step_time", too_fast)
    setup = InferenceSetup(8192, 32, 512)
    point = estimate_load(LLAMA_8B, H100, Parallelism(tp=1), setup, BF16, engine="vllm")
    rate = implied_compute(LLAMA_8B, H100, BF16, setup, point.requests_per_s, 1)
    assert not rate.feasible
    assert feasible_hit_rate(LLAMA_8B, setup, rate.requests_per_s, rate.peak_flop_per_s)


# -- the published runs -----------------------------------------------------------------------


def test_no_published_run_implies_more_than_the_peak() -> None:
    """Every mapped run of serving_load_measured.json and inference_measured.json within its
    GPUs' dense peak; the highest, vLLM 0.10.0 serving Llama-3.1-8B on one H100 in MLPerf
    v5.1 (RedHat, Server: 39.6 requests/s of CNN/DailyMail, BF16), at 58 % of it."""
    checks = load_checks() + throughput_checks()
    assert len(checks) == 198
    assert not [c.id for c in checks if c.warnings]
    top = max(checks, key=lambda c: c.worst)
    assert top.id == "mlperf-v5.1-RedHat-XE8640_4xH100_vLLM-llama3.1-8b-Server"
    assert top.worst == pytest.approx(0.577, abs=0.005)


def test_the_prefill_heavy_records_are_tensorrt_llms() -> None:
    """The load records with ISL / OSL >= 10 today: NIM's 5000 / 500 (8) and MLPerf's
    Llama-3.1-405B task (7, 9,429 / 685 on average), all TensorRT-LLM; no published vLLM or
    SGLang run under load is prefill-heavy yet (the nearest: MLPerf Llama-3.1-8B, 6.75)."""
    heavy = prefill_heavy_ids()
    assert len(heavy) == 15
    assert sum("nim-1.8.0" in i for i in heavy) == 8
    assert sum("llama3.1-405b" in i for i in heavy) == 7
    checks = {c.id: c for c in load_checks()}
    assert {checks[i].engine for i in heavy} == {"trtllm"}
    assert all(checks[i].prompt_over_output >= PREFILL_HEAVY_RATIO for i in heavy)


def test_the_report_has_the_prefill_heavy_group_and_the_peak_note() -> None:
    from validation.report import load_section, render_load

    section = load_section()
    (title,) = [t for t in section["summary"] if "prefill-heavy" in t]
    names = {s["name"] for s in section["summary"][title]}
    assert names == {"itl / trtllm", "slo_rate / trtllm", "throughput / trtllm",
                     "tpot / trtllm", "ttft / trtllm"}  # fmt: skip
    assert section["peak"]["above_peak"] == []
    text = "\n".join(render_load(section))
    assert "0 above it" in text and "prefill-heavy (ISL / OSL >= 10)" in text
