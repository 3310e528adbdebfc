"""Safe sweep recommendations (issue 23, item 7): a minimum memory headroom (default 5%), counts
that add up with each exclusion named, deadlines as durations, and recommendation titles that
name every axis."""

from __future__ import annotations

import re

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.schemas.common import _duration_seconds
from estimator import SpecError, get_model
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training

client = TestClient(app)
SPACE = TrainingSearch(accelerators=("h100-sxm-80gb", "b200"))
EXCLUSIONS = ("out_of_memory", "under_headroom", "past_deadline", "over_budget", "feasible")


@pytest.fixture(scope="module")
def swept() -> dict[float, object]:
    model = get_model("llama-3-70b")

    def workload(headroom: float) -> TrainingWorkload:
        return TrainingWorkload(
            4096, 1024, tokens=2e12, deadline_s=30 * 86400, budget_usd=4e6, min_headroom=headroom
        )

    return {h: sweep_training(model, workload(h), SPACE) for h in (0.0, 0.05, 0.2)}


def test_counts_add_up(swept: dict[float, object]) -> None:
    for s in swept.values():
        c = s.counts  # type: ignore[attr-defined]
        assert c["enumerated"] == c["invalid"] + c["evaluated"]
        assert c["evaluated"] == sum(c[k] for k in EXCLUSIONS)
        assert c["past_deadline"] > 0  # this deadline does exclude layouts, and says so


def test_feasible_layouts_keep_the_headroom(swept: dict[float, object]) -> None:
    counts = {}
    for h, s in swept.items():
        cols = s.columns  # type: ignore[attr-defined]
        idx = s.feasible  # type: ignore[attr-defined]
        used = cols["memory_bytes"][idx] / cols["capacity_bytes"][idx]
        assert np.all(used <= 1 - h + 1e-12)
        for rec in s.recommendations:  # type: ignore[attr-defined]
            assert rec.row["memory_bytes"] <= (1 - h) * rec.row["capacity_bytes"]
        counts[h] = s.counts  # type: ignore[attr-defined]
    assert counts[0.0]["under_headroom"] == 0
    assert counts[0.05]["under_headroom"] < counts[0.2]["under_headroom"]
    assert counts[0.2]["feasible"] < counts[0.05]["feasible"] < counts[0.0]["feasible"]
    with pytest.raises(SpecError, match="min_headroom"):
        sweep_training(get_model("llama-3-8b"), TrainingWorkload(4096, 64, min_headroom=1.0))


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("30d", 2_592_000), ("36h", 129_600), ("90m", 5_400), ("2w", 1_209_600),
     ("30 days", 2_592_000), ("1.5 hours", 5_400), ("45", 45), (86400, 86400)],
)  # fmt: skip
def test_deadlines_as_durations(given: object, seconds: float) -> None:
    assert _duration_seconds(given) == seconds


def test_the_api_reads_durations_and_refuses_the_rest() -> None:
    body = {"model": "llama-3-8b", "accelerator": ["h100-sxm-80gb"], "tokens": 1e11}
    ok = client.post("/api/v1/training/sweep", json={**body, "deadline_s": "7d"})
    assert ok.status_code == 200 and ok.json()["min_headroom"] == 0.05
    for bad, field in (({"deadline_s": "7 fortnights"}, "deadline_s"),
                       ({"deadline_s": "-3d"}, "deadline_s"),
                       ({"min_headroom": 0.7}, "min_headroom")):  # fmt: skip
        r = client.post("/api/v1/training/sweep", json={**body, **bad})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == field


def test_recommendation_titles_name_every_axis() -> None:
    page = client.get(
        "/sweep",
        params={"model": "llama-3-70b", "accelerator": "b200", "tokens": "2e12",
                "deadline_s": "30d"},
    )  # fmt: skip
    assert page.status_code == 200
    titles = re.findall(r"<article>\s*<h3>([^<]+)</h3>", page.text)
    assert len(titles) >= 2 and len(set(titles)) == len(titles)
    assert all("micro-batch" in t and "recompute" in t for t in titles)
    assert "fit with less than 5% free" in page.text and "miss the deadline" in page.text


def test_offload_and_router_inputs_reach_the_sweep() -> None:
    base = {"model": "llama-3-70b", "accelerator": ["h100-sxm-80gb"], "num_gpus": [8],
            "tokens": 1e11}  # fmt: skip
    plain = client.post("/api/v1/training/sweep", json=base).json()
    offloaded = client.post(
        "/api/v1/training/sweep", json={**base, "offload_optimizer": True}
    ).json()
    assert plain["counts"]["feasible"] == 0 < offloaded["counts"]["feasible"]
    bad = client.post("/api/v1/training/sweep", json={**base, "moe_imbalance": 0.5})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "moe_imbalance"
    page = client.get("/sweep", params={"model": "llama-3-8b"}).text
    assert 'name="offload_optimizer"' in page and 'name="moe_imbalance"' in page


def test_serving_sweep_ep_axis_through_the_api_and_page() -> None:
    body = {"model": "qwen3-30b-a3b", "accelerator": ["h100-sxm-80gb"], "precision": ["bf16"],
            "layout": {"tp": [4], "pp": [1], "ep": [1, 4]}}  # fmt: skip
    out = client.post("/api/v1/inference/sweep", json=body).json()
    assert sorted(r["ep"] for r in out["rows"]) == [1, 4]
    page = client.get(
        "/sweep",
        params={"mode": "serving", "model": "qwen3-30b-a3b", "accelerator": "h100-sxm-80gb",
                "tp": "4", "ep": "1,4", "precision": "bf16"},
    )  # fmt: skip
    assert page.status_code == 200 and "ep=1" in page.text and 'name="ep"' in page.text
