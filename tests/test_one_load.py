"""Answers that agree with themselves (issue 39): every figure of a serving answer at the load
asked for, one throughput per page, fleets a user can find and size with headroom, and a
default serving sweep that tries the layouts big MoE models are served with."""

from __future__ import annotations

import html
import math
import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator.accuracy import MIN_GROUP, rate_headroom, records, summary
from estimator.catalog import get_accelerator, get_model
from estimator.inputs.precision import get_precision
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceSetup
from estimator.serving.estimate import estimate_inference, estimate_load, fleet_replicas
from estimator.sweep.serving import (
    WIDE_MAX_GPUS,
    ServingSearch,
    ServingWorkload,
    default_search,
    sweep_serving,
)

API = "/api/v1"
# The finding: Llama-3.1-70B FP8 on 2 x H100, 2048 / 512 tokens, Poisson arrivals.
PLAN: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "accelerator": "h100-sxm-80gb",
    "layout": {"tp": 2},
    "precision": "fp8",
    "input_len": 2048,
    "output_len": 512,
}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app)


def _estimate(client: TestClient, **extra: Any) -> dict[str, Any]:
    r = client.post(f"{API}/inference/estimate", json=PLAN | extra)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


# --- 1. one load per answer -------------------------------------------------------------------


def test_throughput_and_cost_are_at_the_request_rate(client: TestClient) -> None:
    """With request_rate the headline throughput and cost are the steady state's at that rate
    (they were a concurrency-1 cycle's: 52 tokens/s and $31.93 per 1M beside a load block of
    several hundred), and the cost at capacity is shown beside a partly idle replica's."""
    out = _estimate(client, request_rate=0.5)
    load, tp, cost = out["load"], out["throughput"], out["cost"]
    assert tp["output_tokens_per_s"] == pytest.approx(load["output_tokens_per_s"], rel=1e-12)
    assert tp["output_tokens_per_s"] == pytest.approx(0.5 * PLAN["output_len"], rel=1e-6)
    assert tp["input_tokens_per_s"] == pytest.approx(0.5 * PLAN["input_len"], rel=1e-6)
    per_s = cost["usd_per_hour"] / 3600
    assert cost["usd_per_1m_output_tokens"] == pytest.approx(
        per_s / tp["output_tokens_per_s"] * 1e6, rel=1e-9
    )
    capacity = load["capacity_requests_per_s"] * PLAN["output_len"]
    assert tp["capacity_output_tokens_per_s"] == pytest.approx(capacity, rel=1e-9)
    assert 0 < tp["utilization"] < 1
    assert cost["usd_per_1m_output_tokens_at_capacity"] == pytest.approx(
        cost["usd_per_1m_output_tokens"] * tp["utilization"], rel=1e-9
    )
    assert "0.5 requests/s" in tp["basis"] and tp["basis"] == out["latency"]["basis"]
    # the split by phase sums to the all-in cost's GPU time
    parts = (
        cost["usd_per_1m_output_tokens_decode"] * tp["output_tokens_per_s"]
        + cost["usd_per_1m_input_tokens"] * tp["input_tokens_per_s"]
    )
    assert parts / 1e6 == pytest.approx(per_s, rel=1e-9)


def test_one_throughput_at_a_concurrency(client: TestClient) -> None:
    """A closed loop: the headline throughput is the load block's at the same concurrency (the
    page showed a batched-prefill cycle's in the headline and the load model's under load)."""
    out = _estimate(client, concurrency=16)
    assert out["throughput"]["output_tokens_per_s"] == pytest.approx(
        out["load"]["output_tokens_per_s"], rel=1e-12
    )
    assert out["fleet"] is None


def test_the_core_answers_at_its_load_too() -> None:
    """The Python API: an estimate with a load model answers throughput at it; without one it
    keeps the concurrency curve's cycle (the validation report's offline runs)."""
    m, acc, p = get_model("llama-3.1-70b"), get_accelerator("h100-sxm-80gb"), get_precision("fp8")
    setup = InferenceSetup(2048, 512, 8)
    plain = estimate_inference(m, acc, Parallelism(tp=2), setup, p)
    loaded = estimate_inference(m, acc, Parallelism(tp=2), setup, p, engine="vllm")
    assert plain.load is None and plain.output_tokens_per_s == pytest.approx(
        next(c.output_tokens_per_s for c in plain.curve if c.concurrency == 8)
    )
    assert loaded.load is not None
    assert loaded.output_tokens_per_s == loaded.load.output_tokens_per_s
    assert any("load model's" in n for n in loaded.notes)


def test_a_sweep_row_and_its_planner_link_cost_the_same(client: TestClient) -> None:
    """The sweep's "Open in the serving planner" link lands on the row's cost per token (a row
    of $0.977 opened at $31.93)."""
    query = {"mode": "serving", "model": "llama-3.1-70b", "accelerator": "h100-sxm-80gb",
             "tp": "2,4", "pp": "1", "precision": "fp8-serving", "input_len": "2048",
             "output_len": "512", "ttft_target_s": "2", "tpot_target_s": "0.05",
             "request_rate": "3.3"}  # fmt: skip
    rows = client.get("/sweep", params=query | {"format": "json"}).json()["rows"]
    page = client.get("/sweep", params=query).text
    links = {html.unescape(h) for h in re.findall(r'href="(/serving\?[^"]+)"', page)}
    by_tp = {r["tp"]: r for r in rows if r["ok"]}
    assert links and by_tp
    for link in links:
        params = dict(parse_qsl(urlsplit(link).query))
        row = by_tp[int(params["tp"])]
        answer = client.get("/serving", params=params | {"format": "json"}).json()
        assert answer["cost"]["usd_per_1m_output_tokens"] == pytest.approx(
            row["usd_per_1m_output_tokens"], rel=1e-6
        )


def test_the_cli_prints_the_load_it_answers_at() -> None:
    import contextlib
    import io

    from app.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["infer", "--model", "llama-3.1-70b", "--accelerator", "h100-sxm-80gb", "--tp", "2",
              "--precision", "fp8", "--input-len", "2048", "--output-len", "512",
              "--request-rate", "0.5"])  # fmt: skip
    text = out.getvalue()
    first, _, rest = text.partition("\n")
    assert first.endswith("0.5 requests/s") and "concurrency" not in first
    assert "256 output tokens/s (128 per GPU) at the steady state at 0.5 requests/s" in rest
    assert "at capacity" in rest


def test_a_saved_plan_says_why_its_throughput_moved(client: TestClient) -> None:
    """Saved plans re-evaluated show the change, as saved and now, with what changed in the
    figure's meaning."""
    body = {"kind": "inference", "name": "one load", "request": PLAN | {"request_rate": 0.5}}
    r = client.post(f"{API}/plans", json=body)
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    store = client.app.state.store  # type: ignore[attr-defined]
    saved = dict(store.get(pid)["saved_result"])
    saved["output_tokens_per_s"] = 52.0  # the cycle's figure the plan was saved with before
    store.update(pid, saved_result=saved)
    page = client.get(f"/plans/{pid}").text
    row = re.search(r'<tr class="changed" data-key="output_tokens_per_s">(.*?)</tr>', page, re.S)
    assert row is not None
    assert "at the load its latencies are at" in row.group(1)


# --- 3. fleets a user finds -------------------------------------------------------------------


def test_an_overloaded_plan_says_how_many_replicas_and_links_to_the_fleet_sweep(
    client: TestClient,
) -> None:
    query = {"model": "llama-3.1-70b", "accelerator": "h100-sxm-80gb", "tp": "2",
             "precision": "fp8", "input_len": "2048", "output_len": "512",
             "request_rate": "20", "ttft_target_s": "2", "tpot_target_s": "0.05"}  # fmt: skip
    answer = client.get("/serving", params=query | {"format": "json"}).json()
    assert answer["load"]["regime"] == "overloaded"
    fleet = answer["fleet"]
    assert fleet["replicas"] > 1 and fleet["headroom"] == pytest.approx(rate_headroom("vllm")[0])
    page = client.get("/serving", params=query).text
    need = re.search(r'<p id="fleet-need"[^>]*>(.*?)</p>', page, re.S)
    assert need is not None and f"needs {fleet['replicas']} replicas" in need.group(1)
    link = re.search(r'id="fleet-link" href="([^"]+)"', need.group(1))
    assert link is not None
    target = dict(parse_qsl(urlsplit(html.unescape(link.group(1))).query))
    for key in ("model", "input_len", "output_len", "request_rate", "ttft_target_s",
                "tpot_target_s", "accelerator", "precision"):  # fmt: skip
        assert target[key] == query[key]
    assert target["mode"] == "serving"
    # the sweep it opens sizes the same layout with the same replica count
    sweep = client.get("/sweep", params=target | {"tp": "2", "pp": "1", "format": "json"})
    (row,) = [r for r in sweep.json()["rows"] if r["ok"] and r["tp"] == 2]
    assert row["replicas"] == fleet["replicas"]


def test_every_serving_page_reaches_the_rate_question(client: TestClient) -> None:
    page = client.get("/serving", params={"model": "llama-3-8b"}).text
    assert 'id="fleet-question"' in page and 'href="/sweep?mode=serving' in page


def test_the_default_headroom_is_read_from_the_validation_records() -> None:
    """The default headroom is the planner's median optimism on the rate within targets over
    the shipped MLPerf server runs (the engine's own where it has >= 10, else all)."""
    rows = [r for r in records() if r.metric == "slo_rate"]
    assert len(rows) >= MIN_GROUP
    for engine in ("vllm", "trtllm", "sglang"):
        mine = [r for r in rows if r.stack == engine]
        pool = mine if len(mine) >= MIN_GROUP else rows
        expected = max(summary(pool)["median_signed"], 0.0)  # type: ignore[index]
        assert rate_headroom(engine)[0] == pytest.approx(expected)
    assert rate_headroom("vllm")[0] > 0.1  # the planner has been optimistic there


def test_fleet_sizing_takes_a_headroom_down_to_zero(client: TestClient) -> None:
    body = {"model": "llama-3-8b", "accelerator": ["h100-sxm-80gb"], "layout": {"tp": [1],
            "pp": [1]}, "precision": ["bf16"], "input_len": 1024, "output_len": 256,
            "ttft_target_s": 1.0, "tpot_target_s": 0.05, "request_rate": 50}  # fmt: skip
    probe = client.post(f"{API}/inference/sweep", json=body).json()["rows"][0]
    rate = 2.5 * probe["rate_per_replica"]  # 3 replicas without headroom, 4 with 23%
    body["request_rate"] = rate
    default = client.post(f"{API}/inference/sweep", json=body).json()
    none = client.post(f"{API}/inference/sweep", json=body | {"rate_headroom": 0}).json()
    assert default["rate_headroom"] == pytest.approx(rate_headroom("vllm")[0])
    assert none["rate_headroom"] == 0 and none["rate_headroom_source"] == "the request's"
    (a,), (b,) = default["rows"], none["rows"]
    assert a["rate_per_replica"] == pytest.approx(b["rate_per_replica"])
    assert b["replicas"] == math.ceil(rate / b["rate_per_replica"]) == 3
    assert a["replicas"] == fleet_replicas(rate, a["rate_per_replica"], default["rate_headroom"])
    assert a["replicas"] > b["replicas"]
    bad = client.post(f"{API}/inference/sweep", json=body | {"rate_headroom": -0.1})
    assert bad.status_code == 422 and "rate_headroom" in bad.text
    # the replicas-against-rate curve: rising, and at the rate asked the row's count
    (curve,) = default["fleet_curves"]
    counts = [p["replicas"] for p in curve["points"]]
    assert counts == sorted(counts)
    at = next(p for p in curve["points"] if p["request_rate"] == pytest.approx(rate))
    assert at["replicas"] == a["replicas"]
    page = client.get("/sweep", params={"mode": "serving", "model": "llama-3-8b",
                      "accelerator": "h100-sxm-80gb", "tp": "1", "pp": "1",
                      "precision": "bf16", "ttft_target_s": "1", "tpot_target_s": "0.05",
                      "request_rate": str(rate)}).text  # fmt: skip
    assert 'id="fig-fleet"' in page and 'id="fleet-headroom"' in page


def test_fleet_replicas() -> None:
    assert fleet_replicas(10, 5) == 2
    assert fleet_replicas(10, 5, 0.23) == 3  # 12.3 / 5
    assert fleet_replicas(0.1, 5) == 1
    assert fleet_replicas(10, 1 / 3) == 30  # no float round-up to 31


# --- 5. the default sweep tries what big MoE models are served with ---------------------------


def test_the_default_sweep_widens_for_a_model_too_large_for_a_node(client: TestClient) -> None:
    """DeepSeek-V3 on H100s: the plain default (TP <= 8) finds few or no plans under tight
    targets; the widened one tries attention DP with wide EP and TP 16, within 32 GPUs."""
    ds = get_model("deepseek-v3")
    wide = default_search(ds, ("h100-sxm-80gb",))
    assert 16 in wide.tp and max(wide.dp) == 16 and wide.max_gpus == WIDE_MAX_GPUS
    assert default_search(get_model("llama-3-8b"), ("h100-sxm-80gb",)) == ServingSearch(
        accelerators=("h100-sxm-80gb",)
    )
    body = {"model": "deepseek-v3", "accelerator": ["h100-sxm-80gb"], "input_len": 1024,
            "output_len": 256, "ttft_target_s": 2, "tpot_target_s": 0.05, "rows": "all",
            "page_size": 500}  # fmt: skip
    out = client.post(f"{API}/inference/sweep", json=body).json()
    served = [r for r in out["rows"] if r["ok"]]
    assert any(r["dp"] > 1 and r["ep"] == r["dp"] * r["tp"] for r in served)
    assert any(r["tp"] == 16 for r in out["rows"])
    assert all(r["num_gpus"] <= WIDE_MAX_GPUS for r in out["rows"])
    assert not any(r["dp"] > 1 and r["pp"] > 1 for r in out["rows"])
    assert any("wide EP" in n for n in out["notes"])
    cheapest = served[0]
    plain = sweep_serving(
        ds, ServingWorkload(1024, 256, 2, 0.05), ServingSearch(accelerators=("h100-sxm-80gb",))
    )
    best_plain = next(r for r in plain.rows if r["ok"])
    assert cheapest["usd_per_1m_output_tokens"] < best_plain["usd_per_1m_output_tokens"]


def test_an_empty_answer_says_what_to_widen_and_draws_no_chart(client: TestClient) -> None:
    query = {"mode": "serving", "model": "deepseek-v3", "accelerator": "h100-sxm-80gb",
             "tp": "1,2", "pp": "1", "dp": "1", "ttft_target_s": "2"}  # fmt: skip
    out = client.get("/sweep", params=query | {"format": "json"}).json()
    assert out["counts"]["ok"] == 0 and "out of memory" in out["widen"]
    assert "tp beyond 2" in out["widen"] and "attention dp" in out["widen"]
    page = client.get("/sweep", params=query).text
    assert 'id="none-served"' in page
    assert 'id="fig-scatter"' not in page and 'id="fig-bars"' not in page
    tight = client.get(
        "/sweep", params=query | {"tp": "8,16", "ttft_target_s": "0.001", "format": "json"}
    )
    assert "loosen ttft_target_s" in tight.json()["widen"]


def test_the_open_loop_share_of_time_splits_cost_by_phase() -> None:
    """The load model's prefill share of the step time: between 0 and 1, and larger with
    longer prompts."""
    m, acc, p = get_model("llama-3-8b"), get_accelerator("h100-sxm-80gb"), get_precision("bf16")

    def share(isl: int) -> float:
        point = estimate_load(m, acc, Parallelism(), InferenceSetup(isl, 256), p, request_rate=2)
        return point.prefill_time_share

    assert 0 < share(256) < share(4096) < 1


def test_the_picks_compare_link_never_compares_a_plan_with_itself(client: TestClient) -> None:
    """One layout can be the cheapest and the most tokens/s per GPU: its compare link lists it
    once (it compared a plan with itself)."""
    for query in (
        {"mode": "serving", "model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "tp": "1",
         "pp": "1", "precision": "bf16"},
        {"mode": "serving", "model": "llama-3-8b", "accelerator": "h100-sxm-80gb"},
    ):  # fmt: skip
        page = client.get("/sweep", params=query).text
        link = re.search(r'id="compare-picks" href="([^"]+)"', page)
        if link is None:
            continue  # one distinct pick: no compare link
        params = dict(parse_qsl(urlsplit(html.unescape(link.group(1))).query))
        plans = {
            tuple(sorted((k[2:], v) for k, v in params.items() if k.startswith(f"{p}.")))
            for p in "abcd"
            if f"{p}.model" in params
        }
        count = sum(f"{p}.model" in params for p in "abcd")
        assert len(plans) == count >= 2
