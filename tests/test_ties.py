"""Ties called ties: the band within which the planner cannot tell two layouts apart, measured
on the validation report's training runs (``estimator.accuracy.tie_band``)."""

from __future__ import annotations

import itertools
import json
import statistics
from collections import defaultdict
from pathlib import Path

from estimator.accuracy import tie_band

REPORT = Path(__file__).resolve().parents[1] / "validation" / "report.json"


def test_the_band_is_the_median_gap_between_errors_on_one_job() -> None:
    """Recomputed here from the report's rows, the published measurements' own fields."""
    rows = [r for r in json.loads(REPORT.read_text())["rows"] if r["kind"] == "training"]
    by_job = defaultdict(list)
    for r in rows:
        by_job[(r["group"], r["model"], r["accelerator"], r["precision"])].append(
            r["predicted"] / r["measured"] - 1
        )
    gaps = [abs(a - b) for e in by_job.values() for a, b in itertools.combinations(e, 2)]
    band, why = tie_band()
    assert band == statistics.median(gaps)
    assert f"{len(gaps)} pairs" in why
    # A few percent: well inside the absolute error of one estimate, above zero.
    assert 0.02 < band < 0.10


def test_the_sweep_calls_ties_and_ranks_them_by_the_tie_breakers() -> None:
    from fastapi.testclient import TestClient

    from app.main import app

    client = TestClient(app, base_url="http://localhost")
    req = {"model": "llama-3-8b", "accelerator": ["h100-sxm-80gb"], "num_gpus": [64]}
    recs = client.post("/api/v1/training/sweep", json=req).json()["recommendations"]
    band = tie_band()[0]
    tied = [r for r in recs if r["tie"]]
    assert tied and recs[0]["tie"]
    best = max(r["row"]["tokens_per_s"] for r in tied)
    for r in tied:  # within the band of the best, each says so
        assert r["row"]["tokens_per_s"] >= best / (1 + band) - 1e-6
        assert any(w.startswith("a tie:") for w in r["why"])
    assert recs[0]["why"][0].startswith("tied for the")
    # ranked among themselves by headroom first
    rooms = [r["row"]["headroom_bytes"] for r in tied]
    assert rooms == sorted(rooms, reverse=True)


def test_no_band_no_ties() -> None:
    from estimator import get_model
    from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training

    s = sweep_training(
        get_model("llama-3-8b"),
        TrainingWorkload(seq_len=4096, global_batch_size=512),
        TrainingSearch(accelerators=("h100-sxm-80gb",), num_gpus=(64,)),
    )
    assert s.recommendations and not any(r.tie for r in s.recommendations)
