"""The best concurrency under latency targets on the footing the serving planner answers on:
the most requests kept in flight whose steady state on the engine (chunked prefills sharing the
decodes' steps, queueing for slots) meets TTFT p99 and TPOT. A concurrency chosen on a lone
request's TTFT and a decode step without the prefills beside it is what users measured as
~60% off, and is no longer what the planner or the serving sweep recommend."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import Parallelism, get_accelerator, get_model, get_precision
from estimator.memory.inference import InferenceSetup
from estimator.serving.estimate import estimate_inference, estimate_load, meets_targets
from estimator.serving.load import engine_preset
from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving

MODEL, ACC, PREC = get_model("llama-3-8b"), get_accelerator("h100-sxm-80gb"), "fp8-serving"
TPOT, TTFT = 0.05, 1.0


def _steady(concurrency: int, tp: int = 1, kv_fraction: float | None = None) -> object:
    engine = engine_preset("vllm", kv_fraction=kv_fraction)
    setup = InferenceSetup(2048, 256, concurrency=concurrency)
    return estimate_load(MODEL, ACC, Parallelism(tp=tp), setup, get_precision(PREC), engine=engine)


@pytest.mark.parametrize("kv_fraction", [None, 0.5])
def test_the_sweep_keeps_the_most_requests_whose_steady_state_meets_the_targets(
    kv_fraction: float | None,
) -> None:
    work = ServingWorkload(
        2048, 256, ttft_target_s=TTFT, tpot_target_s=TPOT, kv_fraction=kv_fraction
    )
    space = ServingSearch(accelerators=("h100-sxm-80gb",), tp=(1, 2), pp=(1,), precision=(PREC,))
    rows = [r for r in sweep_serving(MODEL, work, space).rows if r["ok"]]
    assert len(rows) == 2
    for r in rows:
        best = r["concurrency"]
        point = _steady(best, r["tp"], kv_fraction)
        assert meets_targets(point, TTFT, TPOT)  # type: ignore[arg-type]
        assert not meets_targets(_steady(best + 1, r["tp"], kv_fraction), TTFT, TPOT)  # type: ignore[arg-type]
        assert r["tpot_s"] == point.tpot_s and r["ttft_p99_s"] == point.ttft_p99_s  # type: ignore[attr-defined]
        assert r["output_tokens_per_s"] == point.output_tokens_per_s  # type: ignore[attr-defined]
        assert r["ttft_p99_s"] <= TTFT and r["tpot_s"] <= TPOT
    # the old choice (a lone prompt's TTFT, a decode step alone) kept 494 requests on one H100,
    # whose steady state is 1.8x the TPOT target
    lone = estimate_inference(
        MODEL, ACC, Parallelism(tp=1), InferenceSetup(2048, 256, 1), get_precision(PREC),
        ttft_target_s=TTFT, tpot_target_s=TPOT,
    )  # fmt: skip
    if kv_fraction is None:
        assert lone.best_concurrency is not None
        assert _steady(lone.best_concurrency).tpot_s > 1.5 * TPOT  # type: ignore[attr-defined]
        assert rows[0]["concurrency"] < lone.best_concurrency


def test_the_planner_answers_the_same_best_concurrency_and_its_link_keeps_it() -> None:
    client = TestClient(app)
    req = {"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "precision": PREC,
           "input_len": 2048, "output_len": 256, "tpot_target_s": TPOT,
           "ttft_target_s": TTFT}  # fmt: skip
    plan = client.post("/api/v1/inference/estimate", json=req | {"layout": {"tp": 1}}).json()
    sweep = client.post(
        "/api/v1/inference/sweep",
        json=req | {"accelerator": ["h100-sxm-80gb"], "layout": {"tp": [1], "pp": [1]}},
    ).json()
    row = sweep["rows"][0]
    assert plan["best_concurrency"] == row["concurrency"]
    at_best = client.post(
        "/api/v1/inference/estimate",
        json=req | {"layout": {"tp": 1}, "concurrency": row["concurrency"]},
    ).json()
    assert at_best["latency"]["tpot_s"] == pytest.approx(row["tpot_s"], rel=1e-12)
    assert at_best["latency"]["ttft_p99_s"] == pytest.approx(row["ttft_p99_s"], rel=1e-12)
    # the sweep page's link opens the planner at that concurrency, with the same answer
    query = {"mode": "serving", "model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "tp": "1",
             "pp": "1", "precision": PREC, "input_len": "2048", "output_len": "256",
             "tpot_target_s": str(TPOT), "ttft_target_s": str(TTFT),
             "kv_cache_memory_fraction": "0.5"}  # fmt: skip
    page = client.get("/sweep", params=query).text
    links = {html.unescape(h) for h in re.findall(r'href="(/serving\?[^"]+)"', page)}
    assert links
    row = client.get("/sweep", params=query | {"format": "json"}).json()["rows"][0]
    for link in links:
        params = dict(parse_qsl(urlsplit(link).query))
        assert params["kv_cache_memory_fraction"] == "0.5"
        answer = client.get("/serving", params=params | {"format": "json"}).json()
        assert int(params["concurrency"]) == row["concurrency"]
        assert answer["latency"]["tpot_s"] == pytest.approx(row["tpot_s"], rel=1e-12)


def test_no_targets_keep_as_many_as_the_kv_cache_holds_and_unreachable_ones_refuse() -> None:
    space = ServingSearch(accelerators=("h100-sxm-80gb",), tp=(1,), pp=(1,), precision=(PREC,))
    free = sweep_serving(MODEL, ServingWorkload(2048, 256), space).rows[0]
    lone = estimate_inference(
        MODEL, ACC, Parallelism(tp=1), InferenceSetup(2048, 256, 1), get_precision(PREC)
    )
    assert free["ok"] and free["concurrency"] == lone.max_concurrency
    strict = sweep_serving(MODEL, ServingWorkload(2048, 256, tpot_target_s=1e-4), space).rows[0]
    assert not strict["ok"] and strict["field"] == "targets"
    assert "steady state" in strict["reason"]


def test_a_row_at_a_fleet_rate_opens_at_its_replicas_share_of_it() -> None:
    """A sweep at a request rate plans each replica at its share of the fleet's rate (an open
    loop): its link opens the planner at that rate, which answers the row's steady state."""
    client = TestClient(app)
    query = {"mode": "serving", "model": "llama-3-8b", "accelerator": "h100-sxm-80gb",
             "tp": "1,2", "pp": "1", "precision": PREC, "input_len": "2048",
             "output_len": "256", "tpot_target_s": str(TPOT), "ttft_target_s": str(TTFT),
             "request_rate": "40"}  # fmt: skip
    page = client.get("/sweep", params=query).text
    links = {html.unescape(h) for h in re.findall(r'href="(/serving\?[^"]+)"', page)}
    rows = client.get("/sweep", params=query | {"format": "json"}).json()["rows"]
    by_tp = {r["tp"]: r for r in rows if r["ok"]}
    assert len(links) >= 2 and len(by_tp) == 2
    for link in links:
        params = dict(parse_qsl(urlsplit(link).query))
        row = by_tp[int(params["tp"])]
        assert "concurrency" not in params
        assert float(params["request_rate"]) == pytest.approx(40 / row["replicas"])
        answer = client.get("/serving", params=params | {"format": "json"}).json()
        assert answer["latency"]["tpot_s"] == pytest.approx(row["tpot_s"], rel=1e-9)
        assert answer["latency"]["ttft_p99_s"] == pytest.approx(row["ttft_p99_s"], rel=1e-9)


def test_the_network_stated_serves_every_layout_on_that_cluster() -> None:
    """The serving sweep takes the cluster's network as a plan does (issue 21, item 2): a TP
    group wider than the stated scale-up domain reduces over the stated scale-out network, and
    each row is the steady state on that cluster, which its planner link keeps."""
    from estimator.inputs.cluster import cluster_of

    space = ServingSearch(accelerators=("h100-sxm-80gb",), tp=(4, 8), pp=(1,), precision=(PREC,))
    net = {"scale_up_domain": 4, "scale_out_gbit_per_s": 100.0}
    plain = {
        r["tp"]: r
        for r in sweep_serving(MODEL, ServingWorkload(2048, 256, tpot_target_s=TPOT), space).rows
    }
    stated = ServingWorkload(2048, 256, tpot_target_s=TPOT, **net)
    split = {r["tp"]: r for r in sweep_serving(MODEL, stated, space).rows}
    assert split[4]["output_tokens_per_s"] == plain[4]["output_tokens_per_s"]  # inside a domain
    assert split[8]["output_tokens_per_s"] < 0.8 * plain[8]["output_tokens_per_s"]
    cluster = cluster_of(ACC, **net)
    setup = InferenceSetup(2048, 256, concurrency=split[8]["concurrency"])
    point = estimate_load(
        MODEL,
        ACC,
        Parallelism(tp=8),
        setup,
        get_precision(PREC),
        engine=engine_preset("vllm"),
        cluster=cluster,
    )
    assert split[8]["tpot_s"] == point.tpot_s
    client = TestClient(app)
    query = {"mode": "serving", "model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "tp": "8",
             "pp": "1", "precision": PREC, "input_len": "2048", "output_len": "256",
             "tpot_target_s": str(TPOT), "scale_up_domain": "4",
             "scale_out_gbit_per_s": "100"}  # fmt: skip
    page = client.get("/sweep", params=query).text
    row = client.get("/sweep", params=query | {"format": "json"}).json()["rows"][0]
    for link in {html.unescape(h) for h in re.findall(r'href="(/serving\?[^"]+)"', page)}:
        params = dict(parse_qsl(urlsplit(link).query))
        assert params["scale_up_domain"] == "4" and params["scale_out_gbit_per_s"] == "100"
        answer = client.get("/serving", params=params | {"format": "json"}).json()
        assert answer["latency"]["tpot_s"] == pytest.approx(row["tpot_s"], rel=1e-12)


class _Point:
    """The fields of a steady state the search reads."""

    def __init__(self, ttft: float, tpot: float, overloaded: bool = False) -> None:
        self.ttft_p99_s, self.tpot_s = ttft, tpot
        self.regime = "overloaded" if overloaded else "shared"


@pytest.mark.parametrize(
    "curve",
    [
        lambda c: _Point(0.1 + 0.002 * c, 0.01 + 0.0001 * c),  # linear
        lambda c: _Point(0.05 * (1 + c / 300) ** 4, 0.02),  # steep TTFT, TPOT met throughout
        lambda c: _Point(0.2, 0.01 + 0.0004 * (c // 37)),  # steps
        lambda c: _Point(0.2 + 0.001 * c, 0.02, overloaded=c > 700),  # overloaded near the cap
    ],
)
def test_the_interpolated_search_finds_bisections_answer(curve: object) -> None:
    """The search's answer is the last concurrency meeting the targets (what bisection finds on
    latencies that grow with the requests in flight), whatever the curve's shape, from at most
    two steady states more than bisection evaluates (its safeguard: a probe that does not halve
    the bracket is followed by a bisection step)."""
    from estimator.serving.estimate import concurrency_within_targets

    for cap, ttft, tpot in ((1024, 1.0, 0.05), (2048, 0.6, 0.03), (37, 5.0, 0.05), (900, 0.9, 1)):
        calls: list[int] = []

        def at(c: int, calls: list[int] = calls) -> object:
            calls.append(c)
            return curve(c)

        best, point = concurrency_within_targets(at, cap, ttft, tpot)
        meeting = [c for c in range(1, cap + 1) if meets_targets(curve(c), ttft, tpot)]
        assert best == (meeting[-1] if meeting else 0)
        assert (point is None) == (best == 0)
        assert len(calls) <= 2 + max(cap - 1, 1).bit_length() + 2
