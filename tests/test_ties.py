"""Ties called ties: the band within which the planner cannot tell two layouts apart, measured
on the validation report's training runs (``app.accuracy.tie_band``)."""

from __future__ import annotations

import itertools
import json
import statistics
from collections import defaultdict
from pathlib import Path

from app.accuracy import tie_band

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
