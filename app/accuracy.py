"""The ``/accuracy`` page and its JSON twin: the planner's measured records, filtered and summed.

The records and every statistic come from the core (``estimator.accuracy``: the measured records
of ``estimator/catalog/accuracy.json`` and their error summary); this module filters them by the
page's query, groups them the ways the page shows and names where the planner is weak.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from estimator.accuracy import Record, records, summary
from estimator.errors import SpecError

__all__ = [
    "BELOW_CAPACITY",
    "FILTERS",
    "KINDS",
    "NEAR_LIMITS",
    "condition",
    "report_view",
    "weak_spots",
]

# The kinds of record, as the page names them; "load" rows carry their metric.
KINDS = {
    "kernel": "Kernels (time per call)",
    "training": "Training throughput (tokens/s per GPU)",
    "memory": "Training peak memory (GiB per GPU)",
    "serving": "Serving throughput (output tokens/s)",
    "load": "Serving latency and throughput under load",
}

FILTERS = ("kind", "metric", "accelerator", "family", "stack", "group")


NEAR_LIMITS = "near a server run's latency limits (MLPerf Inference server runs)"
BELOW_CAPACITY = "below capacity (benchmark sweeps and recipes)"


def condition(r: Record) -> str:
    """The load a latency-under-load record was measured at: MLPerf Inference server runs are
    driven at the highest rate that keeps their latency limits (near capacity, where latency
    moves several-fold with a few percent of load); the other published runs below it."""
    if r.kind != "load":
        return ""
    return NEAR_LIMITS if r.group.startswith("mlperf_inference") else BELOW_CAPACITY


def _by_condition(chosen: Sequence[Record]) -> list[dict[str, Any]]:
    """Latency under load summarized apart near a run's limits and below capacity."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in chosen:
        if r.kind == "load":
            groups.setdefault((f"load / {r.metric}", condition(r)), []).append(r)
    return [
        {"kind": k, "name": name, **(summary(rows) or {})}
        for (k, name), rows in sorted(groups.items())
    ]


_WEAK_NAMES = {  # how a weak spot names its metric (else the kind and the metric)
    "ttft": "TTFT under load",
    "tpot": "TPOT under load",
    "slo_rate": "The rate a replica serves within latency targets",
    "throughput": "Throughput under load",
    "tokens_per_s_per_gpu": "Training throughput",
    "output_tokens_per_s": "Serving throughput",
    "peak_memory": "Training peak memory",
}
WEAK_APE = 0.25  # a median |error| this large is a weak spot, said in words
WEAK_MIN = 10  # records a slice needs to be called weak (a group's minimum to carry a target)


def weak_spots(chosen: Sequence[Record]) -> list[str]:
    """Where the planner is weak, in words: each kind / metric slice (latency under load by
    its load condition) of ``WEAK_MIN`` records or more whose median |error| is ``WEAK_APE``
    or more, worst first, with its direction."""
    groups: dict[tuple[str, str, str], list[Record]] = {}
    for r in chosen:
        groups.setdefault((KINDS.get(r.kind, r.kind), r.metric, condition(r)), []).append(r)
    found = []
    for (kind, metric, where), rows in groups.items():
        s = summary(rows)
        if s is None or s["n"] < WEAK_MIN or s["median_ape"] < WEAK_APE:
            continue
        lean = "over" if s["median_signed"] > 0 else "under"
        what = _WEAK_NAMES.get(metric, f"{kind}: {metric}")
        found.append(
            (
                s["median_ape"],
                f"{what}{f' {where}' if where else ''}: {s['median_ape']:.0%} median |error|"
                f" over {s['n']} records ({lean}-predicted, median {s['median_signed']:+.0%};"
                f" 90th percentile |error| {s['p90_ape']:.0%}).",
            )
        )
    return [text for _, text in sorted(found, reverse=True)]


def report_view(filters: dict[str, str]) -> dict[str, Any]:
    """The records passing ``filters`` (exact matches on the ``FILTERS`` fields; empty means
    any), their summaries per kind/metric and by group, accelerator, family and stack, and the
    values each filter can take."""
    everything = records()
    options = {k: sorted({getattr(r, k) for r in everything if getattr(r, k)}) for k in FILTERS}
    for k, v in filters.items():
        if k not in FILTERS:
            raise SpecError(f"query.{k}", f"is not a filter; the filters are {', '.join(FILTERS)}")
        if v and v not in options[k]:
            raise SpecError(f"query.{k}", "must be one of the report's values (or empty)", v)
    chosen = [r for r in everything if all(not v or getattr(r, k) == v for k, v in filters.items())]

    def by(field: str | None) -> list[dict[str, Any]]:
        """Summaries per kind and metric, and per ``field`` within them."""
        groups: dict[tuple[str, str], list[Record]] = {}
        for r in chosen:
            name = (getattr(r, field) or "-") if field else ""
            groups.setdefault((f"{r.kind} / {r.metric}", name), []).append(r)
        return [
            {"kind": k, "name": name, **(summary(rows) or {})}
            for (k, name), rows in sorted(groups.items())
        ]

    return {
        "filters": {k: filters.get(k, "") for k in FILTERS},
        "options": options,
        "n": len(chosen),
        "summary": by(None),
        "by_condition": _by_condition(chosen),
        "weak": weak_spots(chosen),
        "by_group": by("group"),
        "by_accelerator": by("accelerator"),
        "by_family": by("family"),
        "by_stack": by("stack"),
        "records": [
            {
                "kind": r.kind,
                "metric": r.metric,
                "id": r.id,
                "group": r.group,
                "accelerator": r.accelerator,
                "family": r.family,
                "model": r.model,
                "stack": r.stack,
                "gpus": r.gpus,
                "precision": r.precision,
                "regime": r.regime,
                "measured": r.measured,
                "predicted": r.predicted,
                "unit": r.unit,
                "error": r.error,
                "source": r.source,
                "url": r.url,
            }
            for r in chosen
        ],
    }
