"""Margins the planner keeps from its measured error on published runs.

* ``rate_headroom``: the headroom on a fleet's replica count, the planner's median optimism on
  the rate a replica serves within latency targets (MLPerf Inference server runs);
* ``tie_band``: how close two layouts' predicted throughputs are a tie, the spread of the
  planner's error between runs of one model on one accelerator.

Each comes with a sentence saying where it comes from; both read ``records`` (memoized).
"""

from __future__ import annotations

import statistics
from functools import lru_cache

from estimator.accuracy.nearest import MIN_RANGE
from estimator.accuracy.records import records, summary

__all__ = ["MIN_GROUP", "rate_headroom", "rate_headroom_note", "tie_band"]

MIN_GROUP = 10  # records a group needs to carry a constant of its own (else all of them)


@lru_cache(maxsize=64)
def rate_headroom(engine: str) -> tuple[float, str]:
    """The default headroom on a fleet's replica count: how optimistic the planner's highest
    rate within latency targets has been on published runs (the report's ``slo_rate`` rows,
    MLPerf Inference server runs: the median signed error, never below 0), on ``engine``'s
    runs where it has ``MIN_GROUP`` or more, else on all; with where it comes from. (0, why)
    where the report has none."""
    rows = [r for r in records() if r.metric == "slo_rate"]
    mine = [r for r in rows if r.stack == engine]
    if len(mine) >= MIN_GROUP:
        chosen, scope = mine, f" on {engine}"
    else:
        chosen, scope = rows, f" on every engine ({len(mine)} on {engine}: fewer than {MIN_GROUP})"
    found = summary(chosen)
    if found is None:
        return 0.0, "no published run to measure it on: none kept"
    value = max(found["median_signed"], 0.0)
    return value, (
        "the planner's median optimism on the rate within latency targets over"
        f" {found['n']} MLPerf Inference server runs{scope} (validation/report.md, slo_rate)"
    )


@lru_cache(maxsize=1)
def tie_band() -> tuple[float, str]:
    """How far apart two layouts' throughputs must be predicted for the planner to tell which is
    faster: the median absolute difference of the signed errors of two runs of the same model on
    the same accelerator in the same precision and source (layouts and GPU counts differing),
    over every such pair of training runs in the validation report; with where it comes from.
    Layouts predicted closer than this are ties (``tests/test_ties.py``)."""
    by_job: dict[tuple[str, str, str, str], list[float]] = {}
    for r in records():
        if r.kind == "training":
            by_job.setdefault((r.group, r.model, r.accelerator, r.precision), []).append(r.error)
    gaps = sorted(
        abs(a - b)
        for errors in by_job.values()
        for i, a in enumerate(errors)
        for b in errors[i + 1 :]
    )
    groups = sum(len(e) > 1 for e in by_job.values())
    if len(gaps) < MIN_GROUP:
        return 0.0, f"{len(gaps)} pairs of runs of one model on one accelerator: too few for a band"
    band = statistics.median(gaps)
    return band, (
        f"the median gap between the planner's signed errors on two runs of the same model, "
        f"accelerator and precision: {band:.1%} over {len(gaps)} pairs of training runs in"
        f" {groups} groups (validation/report.md)"
    )


def rate_headroom_note(engine: str) -> str | None:
    """How far the planner's highest rate within latency targets has been from what published
    runs served within the same limits (the report's ``slo_rate`` rows: MLPerf Inference
    server runs), over all of them and over ``engine``'s where it has ``MIN_RANGE`` or more;
    None where the report has none."""
    rows = [r for r in records() if r.metric == "slo_rate"]
    overall = summary(rows)
    if overall is None:
        return None
    mine = summary([r for r in rows if r.stack == engine])
    on_engine = ""
    if mine is not None and mine["n"] >= MIN_RANGE:
        on_engine = f"; on the {mine['n']} runs on {engine}, {mine['median_signed']:+.0%}"
    return (
        "The rate per replica within the targets is the load model's highest; on the"
        f" {overall['n']} MLPerf Inference server runs compared (validation/report.md, slo_rate)"
        f" it was {overall['median_signed']:+.0%} against what each run served within the same"
        f" latency limits (median; 90th percentile {overall['p90_signed']:+.0%}){on_engine}."
        " Near capacity the planner's latencies rise later than the runs' did: keep that much"
        " headroom on the replica count."
    )
