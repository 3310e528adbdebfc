"""Disaggregated prefill/decode serving (issue 22, item 3): the KV transfer's bytes and time,
the prefill and decode pools against the single estimate, the fleets against their targets and
their cost formula, the comparison with aggregated serving, the 422s and the no-plan answer,
and the page with its JSON twin."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app import format as fmt
from app.cli.commands import main
from app.main import app
from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.context import Context
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster, cluster_of
from estimator.serving.disagg import (
    Link,
    PoolReplica,
    decode_curve,
    kv_bytes_per_gpu,
    kv_bytes_per_request,
    kv_transfer,
    link_wait,
    prefill_curve,
)
from estimator.serving.estimate import estimate_inference, estimate_load
from estimator.serving.load import ENGINES
from estimator.sweep import disagg
from estimator.sweep.disagg import DisaggComparison
from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving
from estimator.timing.kernels import LinkProfile, kernel_profile

H100 = get_accelerator("h100-sxm-80gb")
FP8 = get_precision("fp8-serving")
LLAMA = get_model("llama-3.1-70b")
VLLM = ENGINES["vllm"]
NET = cluster_of(H100)
SPACE = ServingSearch(accelerators=("h100-sxm-80gb",), precision=("fp8-serving",))
client = TestClient(app)


def ctx(layout: Parallelism, acc: Accelerator = H100, net: Cluster = NET) -> Context:
    """Llama-3.1-70B FP8 under ``layout`` on ``acc`` over ``net``: a pool's side of a
    transfer."""
    return Context.of(LLAMA, acc, layout, FP8, net)


def pool(layout: Parallelism, isl: int = 8192) -> PoolReplica:
    """A replica of Llama-3.1-70B FP8 on H100 for ``isl`` / 1,024 tokens under vLLM."""
    return PoolReplica(LLAMA, H100, layout, isl, 1024, FP8, VLLM, NET)


@cache
def compared(
    isl: int, osl: int, rate: float, ttft: float | None, tpot: float | None
) -> DisaggComparison:
    workload = ServingWorkload(
        isl, osl, ttft_target_s=ttft, tpot_target_s=tpot, request_rate=rate, disaggregated=True
    )
    result = sweep_serving(LLAMA, workload, SPACE).disaggregated
    assert result is not None
    return result


# --- the KV transfer ---------------------------------------------------------------------------


def test_kv_bytes_are_the_models_kv_per_token_times_the_prompt() -> None:
    """Llama-3.1-70B (config.json: 80 layers, 8 KV heads of 128): K and V, one fp8 byte each,
    80 x 8 x 128 x 2 = 163,840 bytes a token; DeepSeek-V3 (61 layers, MLA: kv_lora_rank 512 +
    qk_rope_head_dim 64) 61 x 576 = 35,136, its latent whole on every TP rank."""
    assert kv_bytes_per_request(LLAMA, FP8, 8192) == 163_840 * 8192
    assert kv_bytes_per_request(LLAMA, get_precision("bf16"), 8192) == 2 * 163_840 * 8192
    assert kv_bytes_per_gpu(LLAMA, FP8, 8192, Parallelism(tp=4)) == 163_840 * 8192 / 4
    assert kv_bytes_per_gpu(LLAMA, FP8, 8192, Parallelism(tp=2, pp=4)) == 163_840 * 8192 / 8
    dsv3 = get_model("deepseek-v3")
    assert kv_bytes_per_request(dsv3, FP8, 8192) == 35_136 * 8192
    assert kv_bytes_per_gpu(dsv3, FP8, 8192, Parallelism(tp=8, ep=8)) == 35_136 * 8192


def test_transfer_time_over_nvlink_and_over_the_scale_out_network() -> None:
    """Each GPU sends its shard over its own link: NVLink 4 at 450 GB/s a direction, or a
    400 Gbit/s (50 GB/s) NIC, each at its fitted efficiency and latency (a send/recv)."""
    prof = kernel_profile(H100.id)
    assert H100.scale_up_bytes_per_s == 450e9 and NET.scale_out_bytes_per_s == 50e9
    shard = 163_840 * 8192 / 4
    tp4 = Parallelism(tp=4)
    times: dict[Link, float] = {}
    links: tuple[tuple[Link, float, LinkProfile], ...] = (
        ("nvlink", 450e9, prof.scale_up),
        ("scale-out", 50e9, prof.scale_out),
    )
    for link, bw, fit in links:
        kv = kv_transfer(ctx(tp4), ctx(tp4), 8192, 0.5, link=link)
        expected = (
            fit.latency_s + fit.latency_per_doubling_s + shard / (bw * fit.bandwidth_fraction)
        )
        assert kv.time_s == pytest.approx(expected, rel=1e-12)
        assert kv.exposed_s == kv.time_s  # no overlap: all of it in TTFT
        times[link] = kv.time_s
    assert times["scale-out"] / times["nvlink"] == pytest.approx(
        (450e9 * prof.scale_up.bandwidth_fraction) / (50e9 * prof.scale_out.bandwidth_fraction),
        rel=0.01,
    )
    # The slower side sets the time: a TP-2 prefill GPU sends twice a TP-4 decode GPU's share.
    mixed = kv_transfer(ctx(Parallelism(tp=2)), ctx(tp4), 8192, 0.5, link="scale-out")
    assert mixed.send_bytes_per_gpu == 2 * mixed.receive_bytes_per_gpu
    assert mixed.time_s == mixed.send_s > mixed.receive_s


def test_pools_on_two_accelerators_send_and_receive_at_their_own_nics() -> None:
    """A prefill pool on H100 (400 Gbit/s NIC a GPU) and a decode pool on GB300 (800 Gbit/s):
    each GPU moves its shard at its own NIC, the transfer at the slower; no NVLink between."""
    gb300 = get_accelerator("gb300")
    assert cluster_of(gb300).scale_out_bytes_per_s == 2 * NET.scale_out_bytes_per_s
    tp4 = Parallelism(tp=4)
    theirs = (gb300, cluster_of(gb300))
    kv = kv_transfer(ctx(tp4), ctx(tp4, *theirs), 8192, 0.5, link="scale-out")
    h100 = kv_transfer(ctx(tp4), ctx(tp4), 8192, 0.5, link="scale-out")
    blackwell = kv_transfer(ctx(tp4, *theirs), ctx(tp4, *theirs), 8192, 0.5, link="scale-out")
    assert kv.send_s == h100.send_s and kv.receive_s == blackwell.receive_s
    assert kv.receive_s < kv.send_s == kv.time_s
    with pytest.raises(SpecError) as err:
        kv_transfer(ctx(tp4), ctx(tp4, *theirs), 8192, 0.5, link="nvlink")
    assert err.value.field == "kv_link"


def test_layerwise_overlap_hides_the_transfer_behind_the_prefill() -> None:
    """Layer by layer, only the last layer's share is left after a long prefill; after a
    short one, what the prefill could not cover."""
    tp4 = Parallelism(tp=4)

    def exposed(prefill_s: float) -> tuple[float, float]:
        kv = kv_transfer(ctx(tp4), ctx(tp4), 8192, prefill_s, link="scale-out", overlap="layerwise")
        return kv.exposed_s, kv.time_s

    hidden, whole = exposed(1.0)
    assert hidden == pytest.approx(whole / 80)
    short, whole = exposed(0.004)
    assert short == pytest.approx(whole - 0.004 * (1 - 1 / 80))
    with pytest.raises(SpecError, match="kv_overlap"):
        kv_transfer(ctx(tp4), ctx(tp4), 8192, 1.0, link="nvlink", overlap="x")  # type: ignore[arg-type]


def test_a_link_is_an_md1_queue_that_caps_the_pool_at_its_capacity() -> None:
    """A link busy 10 ms a request: at 50 requests/s (half busy) the mean wait is 5 ms
    (Pollaczek-Khinchine), its p99 the exponential tail's, 5 ms / 0.5 x ln(0.5 / 0.01); at 100
    requests/s and past, no steady state. A decode pool whose receiving link would saturate is
    held below it, however many sequences its KV cache holds."""
    assert float(link_wait(50.0, 0.01, 0.5)) == 0.0  # half the requests do not wait
    assert float(link_wait(50.0, 0.01)) == pytest.approx(0.005 / 0.5 * math.log(0.5 / 0.01))
    assert np.isinf(link_wait(np.array([100.0, 150.0]), 0.01)).all()
    layout = Parallelism(tp=4)
    pools = disagg.pools(
        LLAMA,
        ServingWorkload(8192, 1024, request_rate=10, disaggregated=True),
        [(H100, "fp8-serving")],
        [(4, 1)],
    )
    pc, dc = pools[0].prefill[0], pools[0].decode[0]
    kv = kv_transfer(ctx(layout), ctx(layout), 8192, pc.lone_s, link="scale-out")
    slow = replace(kv, receive_s=1.0)  # one request a second at most
    workload = ServingWorkload(8192, 1024, request_rate=10, disaggregated=True)
    both, price = (pools[0], pools[0]), lambda _: 3.0
    fast_plan, _ = disagg._fleet(workload, both, pc, dc, kv, price, 10.0)
    slow_plan, _ = disagg._fleet(workload, both, pc, dc, slow, price, 10.0)
    assert isinstance(fast_plan, dict) and isinstance(slow_plan, dict)
    assert fast_plan["decode_rate_per_replica"] > 1.0
    assert slow_plan["decode_rate_per_replica"] < 1.0


# --- the pools ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_decode_replica_steps_as_the_single_estimates_decode(tp: int) -> None:
    """With no prompt in its steps a decode replica's TPOT at D sequences is the single
    estimate's decode step at concurrency D: a plan with a huge prefill pool is decode-only."""
    layout = Parallelism(tp=tp)
    curve = decode_curve(pool(layout))
    memory = estimate_inference(LLAMA, H100, layout, InferenceSetup(8192, 1024), FP8).memory
    assert curve.slots == min(VLLM.slots(VLLM.kv_slots(memory, tp)), VLLM.token_budget)
    for d, tpot in zip(curve.decoding[::7], curve.tpot_s[::7], strict=True):
        setup = InferenceSetup(8192, 1024, concurrency=int(d))
        assert tpot == pytest.approx(estimate_inference(LLAMA, H100, layout, setup, FP8).tpot_s)
    # It finishes D / (OSL tau) requests/s: it computes every output token.
    assert np.allclose(curve.rate, curve.decoding / (1024 * curve.tpot_s))


def test_decode_steps_are_quicker_without_prompt_chunks() -> None:
    """An aggregated replica's steps carry prompt chunks; a decode replica's at the same decoding
    level do not, and take less."""
    layout = Parallelism(tp=4)
    point = estimate_load(LLAMA, H100, layout, InferenceSetup(8192, 1024), FP8, request_rate=1.0)
    curve = decode_curve(pool(layout))
    alone = float(np.interp(point.decoding, curve.decoding, curve.tpot_s))
    assert alone < 0.8 * point.tpot_s


def test_a_prefill_replica_is_an_md1_queue_of_lone_prefills() -> None:
    """A lone prompt (4,096 tokens, within one 8,192-token step) takes the single estimate's
    lone prefill; at utilization 1/2 the mean TTFT is the step, half a step for the arrival
    landing mid-step and the M/D/1 wait of half a step (Pollaczek-Khinchine: rho / (2 (1 -
    rho)) = 1/2), each step carrying the prompt (4,096 tokens = half the budget)."""
    layout = Parallelism(tp=4)
    curve = prefill_curve(pool(layout, 4096))
    lone = estimate_inference(LLAMA, H100, layout, InferenceSetup(4096, 1024), FP8)
    assert curve.lone_s == pytest.approx(lone.ttft_s, rel=0.01)
    half = int(np.flatnonzero(np.isclose(curve.rho, 0.5))[0])
    assert curve.ttft_s[half] == pytest.approx(curve.lone_s * (1 + 0.25 + 0.5), rel=1e-9)
    assert curve.rate[half] == pytest.approx(0.5 / curve.lone_s, rel=1e-9)
    assert np.all(np.diff(curve.rate) > 0) and np.all(np.diff(curve.ttft_p99_s) > 0)
    # Past a few percent busy the p99 is above the mean (below it, 99% of arrivals wait nil).
    busy = curve.rho >= 0.05
    assert np.all(curve.ttft_p99_s[busy] >= curve.ttft_s[busy])
    assert curve.ttft_p99_s[0] == pytest.approx(curve.lone_s, rel=0.01)
    assert curve.rate[-1] < curve.capacity  # the queue stays finite


# --- fleets ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "ttft", "tpot"), [(2.0, 2.0, 0.05), (10.0, 1.0, 0.03), (40.0, 2.0, 0.03)]
)
def test_every_plan_meets_its_targets_at_its_cost(rate: float, ttft: float, tpot: float) -> None:
    c = compared(8192, 1024, rate, ttft, tpot)
    assert c.plans and c.disaggregated == c.plans[0]
    costs = [p["usd_per_1m_output_tokens"] for p in c.plans]
    assert costs == sorted(costs)
    for p in c.plans:
        assert p["ttft_p99_s"] <= ttft * (1 + 1e-9) and p["tpot_s"] <= tpot
        parts = ("prefill_p99", "kv_wait_p99", "kv_transfer", "first_token")
        assert sum(p[f"ttft_{k}_s"] for k in parts) == pytest.approx(p["ttft_p99_s"])
        assert p["prefill_replicas"] * p["prefill_rate_per_replica"] == pytest.approx(rate)
        assert p["decode_replicas"] * p["decode_rate_per_replica"] == pytest.approx(rate)
        gpus = (
            p["prefill_replicas"] * p["prefill_tp"] * p["prefill_pp"]
            + p["decode_replicas"] * p["decode_tp"] * p["decode_pp"]
        )
        assert p["fleet_gpus"] == gpus
        assert p["usd_per_hour"] == 3.0 * gpus  # the catalog's H100 price
        assert p["usd_per_1m_output_tokens"] == pytest.approx(
            3.0 * gpus / 3600 / (rate * 1024) * 1e6
        )
        assert p["output_tokens_per_s_per_gpu"] == pytest.approx(rate * 1024 / gpus)
        assert p["output_tokens_per_s_per_user"] == pytest.approx(1 / p["tpot_s"])
        # The first token: half a step's wait for the running step, then its own step.
        assert p["ttft_first_token_s"] == pytest.approx(1.5 * p["tpot_s"])
        # Little's law on a decode replica
        assert p["decoding_per_replica"] == pytest.approx(
            p["decode_rate_per_replica"] * 1024 * p["tpot_s"]
        )


def test_each_pool_is_at_its_fewest_replicas() -> None:
    """One prefill replica fewer misses the TTFT target; one decode replica fewer, the TPOT
    target (or the decode replica's slots)."""
    rate, ttft, tpot = 40.0, 2.0, 0.03
    best = compared(8192, 1024, rate, ttft, tpot).disaggregated
    assert best is not None and best["prefill_replicas"] > 1 and best["decode_replicas"] > 1
    pre = Parallelism(tp=best["prefill_tp"], pp=best["prefill_pp"])
    dec = Parallelism(tp=best["decode_tp"], pp=best["decode_pp"])
    curve = decode_curve(pool(dec))
    ok = curve.rate[curve.tpot_s <= tpot]
    assert rate / (best["decode_replicas"] - 1) > ok[-1]
    prefill = prefill_curve(pool(pre))
    kv = kv_transfer(ctx(pre), ctx(dec), 8192, prefill.lone_s, link="scale-out")
    receiving = float(link_wait(best["decode_rate_per_replica"], kv.receive_s))
    budget = ttft - kv.exposed_s - receiving - best["ttft_first_token_s"]
    fewer = rate / (best["prefill_replicas"] - 1)
    sending = float(np.interp(fewer, prefill.rate, prefill.ttft_p99_s)) + float(
        link_wait(fewer, kv.send_s)
    )
    assert fewer > prefill.rate[-1] or sending > budget
    assert best["ttft_kv_wait_p99_s"] >= receiving


def test_the_kv_link_is_nvlink_only_where_the_fleet_fits_one_domain() -> None:
    small = compared(8192, 1024, 2.0, 4.0, 0.05)  # a 4 s TTFT: a fleet of 8 GPUs meets it
    large = compared(8192, 1024, 40.0, 2.0, 0.03)
    for plan in (*small.plans, *large.plans):
        assert (plan["kv_link"] == "nvlink") == (plan["fleet_gpus"] <= 8)
    assert any(p["kv_link"] == "nvlink" for p in small.plans)
    assert all(p["kv_link"] == "scale-out" for p in large.plans)


def test_tiny_prompts_do_not_pay_for_a_prefill_pool() -> None:
    """With 64-token prompts there is no prefill to keep out of the decodes: a separate prefill
    pool re-reads the weights for prompts an aggregated step carries almost free, so
    disaggregation costs more at any rate."""
    for rate in (10.0, 100.0):
        c = compared(64, 1024, rate, 2.0, 0.05)
        assert c.winner == "aggregated" and c.cost_ratio is not None and c.cost_ratio > 1
        assert c.aggregated is not None and c.disaggregated is not None
        assert c.disaggregated["fleet_gpus"] > c.aggregated["fleet_gpus"]


def test_long_prompts_and_a_tight_tpot_favour_disaggregation() -> None:
    """8,192-token prompts with TPOT 12 ms: an aggregated replica's decodes share steps with
    the prompt chunks and need tp 8 at light load; decode replicas keep their steps short."""
    c = compared(8192, 1024, 10.0, 2.0, 0.012)
    assert c.winner == "disaggregated" and c.cost_ratio is not None and c.cost_ratio < 0.5
    assert c.aggregated is not None and c.aggregated["tpot_s"] <= 0.012


def test_the_fronts_are_non_dominated_and_within_the_ttft_target() -> None:
    c = compared(8192, 1024, 10.0, 2.0, 0.05)
    for front in (c.pareto_aggregated, c.pareto_disaggregated):
        assert len(front) > 3
        speed = [p["output_tokens_per_s_per_gpu"] for p in front]
        user = [p["output_tokens_per_s_per_user"] for p in front]
        assert speed == sorted(speed, reverse=True)  # most per GPU first...
        assert all(b > a for a, b in itertools.pairwise(user))  # ...each faster per user
    assert all(p["ttft_p99_s"] <= 2.0 for p in c.pareto_aggregated)
    best = c.disaggregated
    assert best is not None
    # The fleet (whole replicas) is not above its fluid front.
    above = [
        p
        for p in c.pareto_disaggregated
        if p["output_tokens_per_s_per_user"] >= best["output_tokens_per_s_per_user"]
    ]
    assert (
        above
        and max(p["output_tokens_per_s_per_gpu"] for p in above)
        >= (best["output_tokens_per_s_per_gpu"])
    )


# --- refusals and the no-plan answer -----------------------------------------------------------

BODY = {
    "model": "llama-3.1-70b",
    "accelerator": "h100-sxm-80gb",
    "precision": "fp8-serving",
    "layout": {"tp": [4, 8], "pp": 1},
    "input_len": 8192,
    "output_len": 1024,
    "ttft_target_s": 2.0,
    "tpot_target_s": 0.05,
    "request_rate": 10,
    "disaggregated": True,
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"request_rate": 0}, "request_rate"),
        ({"request_rate": None}, "request_rate"),
        ({"ttft_target_s": 0.05}, "ttft_target_s"),
        ({"tpot_target_s": 0.005}, "tpot_target_s"),
        ({"kv_overlap": "overlapped"}, "kv_overlap"),
        ({"output_len": 0}, "output_len"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(change: dict[str, object], field: str) -> None:
    r = client.post("/api/v1/inference/sweep", json=BODY | change)
    assert r.status_code == 422, r.text
    assert [d["field"] for d in r.json()["detail"]] == [field]


def test_a_target_below_the_quickest_lone_prefill_says_what_that_is() -> None:
    r = client.post("/api/v1/inference/sweep", json=BODY | {"ttft_target_s": 0.05})
    rule = r.json()["detail"][0]["rule"]
    lone = prefill_curve(pool(Parallelism(tp=8))).lone_s
    assert f"{lone:.4g} s" in rule and "tp 8 pp 1" in rule


def test_targets_no_pair_meets_together_answer_why() -> None:
    """A TTFT target above the quickest lone prefill but below it plus the KV transfer and a
    first decode step: no disaggregated fleet, said in words, not a 500."""
    lone = prefill_curve(pool(Parallelism(tp=8))).lone_s
    r = client.post("/api/v1/inference/sweep", json=BODY | {"ttft_target_s": lone * 1.005})
    assert r.status_code == 200, r.text
    d = r.json()["disaggregated"]
    assert d["disaggregated"] is None and d["plans"] == [] and d["winner"] is None
    assert d["counts"]["refused_ttft"] == d["counts"]["pairs"] == 4
    assert (
        "TTFT p99" in d["no_plan_disaggregated"]
        and "first decode step" in (d["no_plan_disaggregated"])
    )


def test_the_api_answers_what_the_core_does() -> None:
    d = client.post("/api/v1/inference/sweep", json=BODY).json()["disaggregated"]
    space = ServingSearch(
        accelerators=("h100-sxm-80gb",), tp=(4, 8), pp=(1,), precision=("fp8-serving",)
    )
    workload = ServingWorkload(
        8192, 1024, ttft_target_s=2.0, tpot_target_s=0.05, request_rate=10, disaggregated=True
    )
    core = sweep_serving(LLAMA, workload, space).disaggregated
    assert core is not None
    assert d["disaggregated"] == pytest.approx(core.disaggregated)
    assert d["counts"] == core.counts and d["winner"] == core.winner
    assert len(d["pareto_disaggregated"]) == len(core.pareto_disaggregated)


def test_without_disaggregated_the_sweep_answers_as_before() -> None:
    r = client.post("/api/v1/inference/sweep", json=BODY | {"disaggregated": False}).json()
    assert r["disaggregated"] is None and r["counts"]["evaluated"] == 2


# --- the page ----------------------------------------------------------------------------------

PAGE = (
    "/sweep?mode=serving&model=llama-3.1-70b&accelerator=h100-sxm-80gb&precision=fp8-serving"
    "&tp=4,8&pp=1&input_len=8192&output_len=1024&ttft_target_s=2&tpot_target_s=0.05"
    "&request_rate=10&disaggregated=true"
)


def test_the_page_shows_both_side_by_side_and_its_json_twin_is_the_api() -> None:
    page = client.get(PAGE)
    assert page.status_code == 200
    html = page.text
    api = client.post("/api/v1/inference/sweep", json=BODY).json()
    d = api["disaggregated"]
    assert 'id="disagg-compare"' in html and 'id="fig-fronts"' in html
    agg, dis = d["aggregated"], d["disaggregated"]
    assert f'data-value="{agg["fleet_gpus"]}"' in html
    assert f'data-value="{dis["fleet_gpus"]}"' in html
    assert f"{dis['prefill_replicas']}:{dis['decode_replicas']}" in html
    assert client.get(PAGE + "&format=json").json() == api


def test_the_page_puts_an_unreachable_target_next_to_its_field() -> None:
    page = client.get(PAGE.replace("ttft_target_s=2", "ttft_target_s=0.05"))
    assert page.status_code == 422
    assert 'id="e-ttft_target_s"' in page.text and "quickest lone prefill" in page.text


@pytest.mark.slow
def test_a_disaggregated_plan_on_every_catalog_model_answers() -> None:
    """Whatever the model (MLA, sliding windows, recurrent layers, MoE), a disaggregated sweep
    answers 200: plans, or why there are none."""
    from estimator import model_ids

    for model in model_ids():
        body = BODY | {"model": model, "layout": {"tp": 8, "pp": 1}, "input_len": 2048}
        r = client.post("/api/v1/inference/sweep", json=body)
        assert r.status_code in (200, 422), (model, r.text)
        if r.status_code == 200:
            d = r.json()["disaggregated"]
            assert d["disaggregated"] is not None or d["no_plan_disaggregated"], model
        else:
            assert r.json()["error"] == "invalid_plan", (model, r.text)


def test_the_cli_prints_both_side_by_side(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(BODY | {"disaggregated": False}))
    assert main(["sweep", "--serving", str(plan), "--disaggregated", "true"]) == 0
    out = capsys.readouterr().out
    d = client.post("/api/v1/inference/sweep", json=BODY).json()["disaggregated"]
    assert "Aggregated against disaggregated at 10 requests/s:" in out
    assert (
        f"{d['disaggregated']['prefill_replicas']}:{d['disaggregated']['decode_replicas']}" in out
    )
    assert f"cheaper: {d['winner']}" in out


def test_a_trickle_of_requests_takes_one_replica_of_each() -> None:
    r = client.post("/api/v1/inference/sweep", json=BODY | {"request_rate": 1e-6})
    assert r.status_code == 200, r.text
    fleet = r.json()["disaggregated"]["disaggregated"]
    assert fleet["prefill_replicas"] == fleet["decode_replicas"] == 1


# --- mixed pools -------------------------------------------------------------------------------

MIXED_SPACE = ServingSearch(
    accelerators=("h100-sxm-80gb", "h200-sxm-141gb"), tp=(2, 4), pp=(1,), precision=("fp8-serving",)
)
MIXED_PRICES = {"h100-sxm-80gb": 2.5, "h200-sxm-141gb": 3.5}


@cache
def mixed(on: bool) -> DisaggComparison:
    workload = ServingWorkload(
        8192, 1024, ttft_target_s=2.0, tpot_target_s=0.05, request_rate=10,
        disaggregated=True, mixed_pools=on, prices=MIXED_PRICES,
    )  # fmt: skip
    result = sweep_serving(LLAMA, workload, MIXED_SPACE).disaggregated
    assert result is not None
    return result


def test_mixed_pools_pair_every_prefill_pool_with_each_accelerators_decode_pools() -> None:
    """Without mixed_pools both pools run on one accelerator; with it each prefill pool pairs
    with the other accelerator's decode pools as well (twice the pairs for two accelerators),
    the same-accelerator plans unchanged."""
    alone, both = mixed(False), mixed(True)
    assert all(p["decode_accelerator"] == p["accelerator"] for p in alone.plans)
    assert both.counts["pairs"] == 2 * alone.counts["pairs"]
    across = [p for p in both.plans if p["decode_accelerator"] != p["accelerator"]]
    assert across and {(p["accelerator"], p["decode_accelerator"]) for p in across} <= {
        ("h100-sxm-80gb", "h200-sxm-141gb"),
        ("h200-sxm-141gb", "h100-sxm-80gb"),
    }
    key = ("accelerator", "decode_accelerator", "prefill_tp", "decode_tp")
    same = {tuple(p[k] for k in key): p for p in both.plans if p not in across}
    for p in alone.plans:
        if tuple(p[k] for k in key) in same:
            assert same[tuple(p[k] for k in key)] == p
    assert both.aggregated == alone.aggregated
    assert any("Mixed pools" in n for n in both.notes)


def test_a_mixed_fleet_pays_each_pool_at_its_price_over_the_scale_out_network() -> None:
    for p in mixed(True).plans:
        prefill_gpus = p["prefill_replicas"] * p["prefill_tp"] * p["prefill_pp"]
        decode_gpus = p["decode_replicas"] * p["decode_tp"] * p["decode_pp"] * p["decode_dp"]
        assert p["fleet_gpus"] == prefill_gpus + decode_gpus
        usd = MIXED_PRICES[p["accelerator"]] * prefill_gpus
        usd += MIXED_PRICES[p["decode_accelerator"]] * decode_gpus
        assert p["usd_per_hour"] == pytest.approx(usd)
        assert p["usd_per_gpu_hour"] == pytest.approx(usd / p["fleet_gpus"])
        tokens = 10 * 1024
        assert p["usd_per_1m_output_tokens"] == pytest.approx(usd / 3600 / tokens * 1e6)
        if p["decode_accelerator"] != p["accelerator"]:
            assert p["kv_link"] == "scale-out"


def test_a_mixed_plans_decode_pool_steps_on_its_own_accelerator() -> None:
    """An H100 prefill pool with an H200 decode pool: its TPOT is the H200 decode replica's at
    the plan's decoding level, not the H100's."""
    p = next(
        p
        for p in mixed(True).plans
        if (p["accelerator"], p["decode_accelerator"]) == ("h100-sxm-80gb", "h200-sxm-141gb")
    )
    h200 = get_accelerator("h200-sxm-141gb")
    layout = Parallelism(tp=p["decode_tp"])
    replica = PoolReplica(LLAMA, h200, layout, 8192, 1024, FP8, VLLM, cluster_of(h200))
    dc = decode_curve(replica)
    assert p["tpot_s"] == pytest.approx(
        float(np.interp(p["decode_rate_per_replica"], dc.rate, dc.tpot_s))
    )


def test_mixed_pools_need_disaggregated_and_one_accelerator_has_nothing_to_mix() -> None:
    r = client.post(
        "/api/v1/inference/sweep", json=BODY | {"disaggregated": False, "mixed_pools": True}
    )
    assert r.status_code == 422 and [d["field"] for d in r.json()["detail"]] == ["mixed_pools"]
    one = client.post("/api/v1/inference/sweep", json=BODY | {"mixed_pools": True}).json()
    plain = client.post("/api/v1/inference/sweep", json=BODY).json()
    assert one["disaggregated"]["plans"] == plain["disaggregated"]["plans"]
    assert any("nothing to mix" in n for n in one["disaggregated"]["notes"])


def test_the_page_and_the_cli_name_each_pools_accelerator(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = BODY | {
        "accelerator": ["h100-sxm-80gb", "h200-sxm-141gb"],
        "layout": {"tp": [2, 4], "pp": 1},
        "mixed_pools": True,
    }
    api = client.post("/api/v1/inference/sweep", json=body).json()
    d = api["disaggregated"]
    across = next(p for p in d["plans"] if p["decode_accelerator"] != p["accelerator"])
    query = (
        PAGE.replace(
            "accelerator=h100-sxm-80gb", "accelerator=h100-sxm-80gb,h200-sxm-141gb"
        ).replace("tp=4,8", "tp=2,4")
        + "&mixed_pools=true"
    )
    page = client.get(query)
    assert page.status_code == 200, page.text
    assert f"{across['accelerator']} → {across['decode_accelerator']}" in page.text
    assert client.get(query + "&format=json").json() == api
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(body))
    assert main(["sweep", "--serving", str(plan)]) == 0
    assert fmt.disagg_layout(d["disaggregated"], "P", "D") in capsys.readouterr().out
