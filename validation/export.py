"""The measured records the planner's accuracy search reads, exported as a core catalog file.

``estimator/catalog/accuracy.json`` holds every compared record of the validation report
(``validation/report.json``: kernels, training and serving throughput, serving latency under
load, measured training peak memory per GPU), each with its measurement, the planner's
prediction when the report was written, what a plan is matched on and its source. The core's
accuracy search (``estimator.accuracy``) reads that file, so the product never reads the
validation package or its generated report.

Only the fields the search reads are kept (``FIELDS``): a key the report gains for its own
pages does not reach the catalog. The error is not stored: it is ``predicted / measured - 1``,
as the report computes it. A peak-memory run that went out of memory has no measurement and is
left out.

``python -m validation.report --write`` writes it beside the report; ``python -m
validation.export`` writes it again from the report already on disk. ``tests/test_accuracy.py``
checks the shipped file equals a fresh export of the shipped report.
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CATALOG", "FIELDS", "REPORT", "accuracy_catalog", "main", "write"]

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "validation" / "report.json"
CATALOG = ROOT / "estimator" / "catalog" / "accuracy.json"

# What each record keeps, in this order: what it is (kind, metric and its unit), which record,
# what a plan is matched on, how the run was set up, the numbers, where it is from.
FIELDS = (
    "kind",
    "metric",
    "unit",
    "id",
    "group",
    "accelerator",
    "family",
    "model",
    "model_class",
    "stack",
    "gpus",
    "precision",
    "regime",
    "layout",
    "measured",
    "predicted",
    "source",
)
# A training run's layout as the search reads its style (tp / pp / cp / ep degrees).
LAYOUT_KEYS = ("tp", "pp", "cp", "ep")
# The metric of a report row of each kind (a kernel row's is its group: the op timed).
_ROW_METRIC = {"training": "tokens_per_s_per_gpu", "serving": "output_tokens_per_s"}
# The units of the load rows (the report's load section gives its metrics in these).
_LOAD_UNITS = {
    "ttft": "ms",
    "tpot": "ms",
    "itl": "ms",
    "throughput": "output tokens/s",
    "slo_rate": "requests/s within the run's latency limits",
}
_ABOUT = (
    "Every published measurement the planner was compared with (validation/report.json):"
    " kernels, training throughput, serving throughput, serving latency under load and"
    " training peak memory per GPU. Each record: kind and metric, the unit of its numbers, the"
    " accelerator, model family and class, software stack or engine, GPU count, precision,"
    " load regime and parallel layout (tp/pp/cp/ep degrees) it was run with, the measured"
    " value, the planner's prediction when the report was written, and its source. The error"
    " is predicted / measured - 1. Read by estimator.accuracy (nearest runs, likely ranges,"
    " peak-memory factors of the fit verdict)."
)
_SOURCE = (
    "validation/report.py (python -m validation.report --write; validation/export.py), from"
    " the published records under validation/data, each record's own source below"
)


def _layout(value: Any) -> dict[str, int] | None:
    if not isinstance(value, Mapping):
        return None
    return {k: int(value.get(k) or 1) for k in LAYOUT_KEYS}


def _record(kind: str, metric: str, unit: str, row: Mapping[str, Any]) -> dict[str, Any]:
    values = {
        **{k: row.get(k) for k in FIELDS},
        "kind": kind,
        "metric": metric,
        "unit": unit,
        "stack": row.get("stack") or row.get("engine") or "",
        "layout": _layout(row.get("layout")),
    }
    return {k: values[k] for k in FIELDS}


def accuracy_catalog(report: Mapping[str, Any], generated: str) -> dict[str, Any]:
    """The catalog file's content for a report as ``report.json`` holds it, dated ``generated``
    (an ISO date): its compared rows, latency-under-load rows and measured peaks, in that order."""
    records = [
        _record(r["kind"], _ROW_METRIC.get(r["kind"], r["group"]), r["unit"], r)
        for r in report["rows"]
    ]
    records += [
        _record("load", r["metric"], _LOAD_UNITS.get(r["metric"], ""), r)
        for r in report["load"]["rows"]
    ]
    records += [
        _record(
            "memory",
            "peak_memory",
            "GiB",
            {**r, "measured": r["measured_gib"], "predicted": r["predicted_gib"]},
        )
        for r in report["memory"]["rows"]
        if r["measured_gib"] is not None  # an out-of-memory run: a fits call, no measurement
    ]
    return {"about": _ABOUT, "source": _SOURCE, "generated": generated, "records": records}


def dumps(catalog: Mapping[str, Any]) -> str:
    """The file's text: one record a line, so a changed record is one changed line."""
    head = {k: v for k, v in catalog.items() if k != "records"}
    lines = [json.dumps(head, indent=1)[:-2] + ","] if head else ["{"]
    rows = [" " + json.dumps(r, separators=(",", ":")) for r in catalog["records"]]
    lines.append(' "records": [')
    lines.append(",\n".join(rows))
    lines.append(" ]\n}\n")
    return "\n".join(lines)


def write(report: Mapping[str, Any], path: Path = CATALOG) -> None:
    """Write the catalog of ``report`` (``report.json``'s content), dated today."""
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    path.write_text(dumps(accuracy_catalog(report, today)), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.export", description=__doc__)
    parser.parse_args(argv)
    write(json.loads(REPORT.read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
