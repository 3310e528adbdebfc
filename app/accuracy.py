"""How right the planner was on published runs like a plan.

The validation report (``validation/report.json``, written by ``python -m validation.report
--write`` and checked by ``make test``) holds every published measurement the estimator was
compared with: kernels, training throughput, serving throughput and serving latency under load,
each with the accelerator, model, software stack or engine, scale and source. This module reads
it once and answers two questions:

* ``report_view``: the records and their summaries, filtered, for the ``/accuracy`` page and
  its JSON twin;
* ``plan_accuracy``: for one plan, the records nearest to it and their observed error, and the
  range that error implies for the plan's headline numbers.

Nearness, scored per record (highest first, ties to the nearest scale): the same accelerator
(2) or the same generation (1); the same model family, i.e. ``model_type`` (2), or the same
class, dense / MoE / hybrid (1); the same software stack or engine (1); a scale within 2x (1)
or 8x (0.5) of the plan's GPU count. A record must match at least the accelerator generation
or the model class to count. The predicted range is the plan's number divided by (1 + the
10th and 90th percentile signed error) of those records: where the planner over-predicted
similar runs, the range sits below its number. Below ``MIN_RANGE`` records no range is given.
Where the plan's own model family has ``MIN_RANGE`` records or more and they lean beyond
``FAMILY_BIAS`` in the median, that is a known bias of the model: the family's records give the
range instead, and the summary says so.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from estimator import get_accelerator
from estimator.errors import SpecError, UnknownIdError

__all__ = [
    "KINDS",
    "Record",
    "plan_accuracy",
    "rate_headroom_note",
    "records",
    "report_view",
    "source_url",
]

LIMIT = 12  # the nearest records a plan's accuracy is read from
MIN_RANGE = 5  # fewer similar records than this: no predicted range
# A model family whose own records lean further than this (median signed error, the issue's
# +/-15% per group) is a known bias: its runs, not the nearest records, give the plan's range.
FAMILY_BIAS = 0.15
# The kinds of record, as the page names them; "load" rows carry their metric.
KINDS = {
    "kernel": "Kernels (time per call)",
    "training": "Training throughput (tokens/s per GPU)",
    "memory": "Training peak memory (GiB per GPU)",
    "serving": "Serving throughput (output tokens/s)",
    "load": "Serving latency and throughput under load",
}
METRIC_UNITS = {
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "peak_memory": "GiB per GPU",
    "output_tokens_per_s": "output tokens/s",
    "ttft": "s",
    "tpot": "s",
}
METRIC_LABELS = {
    "tokens_per_s_per_gpu": "training throughput",
    "peak_memory": "training peak memory",
    "output_tokens_per_s": "serving throughput",
    "ttft": "TTFT under load",
    "tpot": "TPOT under load",
}


@dataclass(frozen=True, slots=True)
class Record:
    """One compared published measurement."""

    kind: str  # kernel, training, serving, load
    metric: str  # what was measured: op time, tokens_per_s_per_gpu, ttft, tpot, ...
    id: str
    group: str
    accelerator: str
    generation: str
    family: str
    model: str
    model_class: str
    stack: str
    gpus: int
    precision: str
    regime: str
    measured: float
    predicted: float
    unit: str
    source: str
    url: str | None

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


_GITHUB_AT = re.compile(r"^([\w.-]+/[\w.-]+)@([0-9a-f]{7,40}):([^\s:]+)(?::(\d+))?")
_GITHUB_SPACED = re.compile(r"^([\w.-]+/[\w.-]+)/(\S+) @ ([0-9a-f]{7,40})(?: line (\d+))?")
_URL = re.compile(r"https?://[^\s)\"']+")


def source_url(source: str) -> str | None:
    """A link to a record's source where its citation names one: a URL in it, or a GitHub
    ``owner/repo@commit:path[:line]`` or ``owner/repo/path @ commit line N`` citation."""
    text = source.strip()
    if text.startswith("github "):
        text = text[len("github ") :]
    if m := _GITHUB_AT.match(text):
        repo, commit, path, line = m.groups()
        return f"https://github.com/{repo}/blob/{commit}/{path}" + (f"#L{line}" if line else "")
    if m := _GITHUB_SPACED.match(text):
        repo, path, commit, line = m.groups()
        return f"https://github.com/{repo}/blob/{commit}/{path}" + (f"#L{line}" if line else "")
    if m := _URL.search(text):
        return m.group(0).rstrip(".,;")
    return None


def _generation(accelerator: str) -> str:
    """A catalog accelerator's generation; "" for any other (a record's are all catalog ids)."""
    try:
        return get_accelerator(accelerator).generation or ""
    except (SpecError, UnknownIdError):
        return ""


def _record(kind: str, metric: str, row: dict[str, Any], unit: str) -> Record:
    source = str(row.get("source") or "")
    return Record(
        kind=kind,
        metric=metric,
        id=str(row["id"]),
        group=str(row["group"]),
        accelerator=str(row.get("accelerator") or ""),
        generation=_generation(str(row.get("accelerator") or "")),
        family=str(row.get("family") or ""),
        model=str(row.get("model") or ""),
        model_class=str(row.get("model_class") or ""),
        stack=str(row.get("stack") or row.get("engine") or ""),
        gpus=int(row.get("gpus") or 0),
        precision=str(row.get("precision") or ""),
        regime=str(row.get("regime") or ""),
        measured=float(row["measured"]),
        predicted=float(row["predicted"]),
        unit=unit,
        source=source,
        url=source_url(source),
    )


@cache
def _report() -> dict[str, Any]:
    text = resources.files("validation").joinpath("report.json").read_text(encoding="utf-8")
    report: dict[str, Any] = json.loads(text)
    return report


_ROW_METRIC = {"training": "tokens_per_s_per_gpu", "serving": "output_tokens_per_s"}
_LOAD_UNITS = {
    "ttft": "ms",
    "tpot": "ms",
    "itl": "ms",
    "throughput": "output tokens/s",
    "slo_rate": "requests/s within the run's latency limits",
}


@cache
def records() -> tuple[Record, ...]:
    """Every compared record of the validation report, latency under load included (its ITL
    rows read as TPOT: the inter-token latency a source gives where it gives no TPOT)."""
    report = _report()
    out = [
        _record(r["kind"], _ROW_METRIC.get(r["kind"], r["group"]), r, r["unit"])
        for r in report["rows"]
    ]
    for r in report["load"]["rows"]:
        metric = "tpot" if r["metric"] == "itl" else r["metric"]
        out.append(_record("load", metric, r, _LOAD_UNITS.get(r["metric"], "")))
    for r in report["memory"]["rows"]:
        if r["measured_gib"] is None:  # an out-of-memory run: a fits call, no measurement
            continue
        row = {**r, "measured": r["measured_gib"], "predicted": r["predicted_gib"]}
        out.append(_record("memory", "peak_memory", row, "GiB"))
    return tuple(out)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile as the validation report takes it (``validation.report.summarize``):
    the value at rank ``round(q (n - 1))``, so the page's and the report's p90 agree."""
    n = len(sorted_values)
    return sorted_values[min(n - 1, round(q * (n - 1)))]


def summary(rows: Iterable[Record]) -> dict[str, Any] | None:
    """n, median and p90 absolute error, the median and the 10th / 90th percentile signed
    error of ``rows``; None for none."""
    errors = sorted(r.error for r in rows)
    if not errors:
        return None
    ape = sorted(abs(e) for e in errors)
    return {
        "n": len(errors),
        "median_ape": statistics.median(ape),
        "p90_ape": _quantile(ape, 0.9),
        "median_signed": statistics.median(errors),
        "p10_signed": _quantile(errors, 0.1),
        "p90_signed": _quantile(errors, 0.9),
    }


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


# --- one plan's accuracy -------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What a plan is matched on."""

    accelerator: str
    generation: str  # the accelerator's (a team accelerator's may be "")
    family: str
    model_class: str
    stack: str
    gpus: int


def _score(r: Record, p: Plan) -> float:
    score = 0.0
    if r.accelerator == p.accelerator:
        score += 2
    elif p.generation and r.generation == p.generation:
        score += 1
    if r.family == p.family:
        score += 2
    elif r.model_class == p.model_class:
        score += 1
    if p.stack and r.stack == p.stack:
        score += 1
    if r.gpus and p.gpus:
        ratio = max(r.gpus, p.gpus) / min(r.gpus, p.gpus)
        score += 1 if ratio <= 2 else 0.5 if ratio <= 8 else 0
    return score


def _related(r: Record, p: Plan) -> bool:
    """A record counts when it shares at least the accelerator generation or the model class."""
    same_hardware = r.accelerator == p.accelerator or (
        p.generation and r.generation == p.generation
    )
    return bool(same_hardware) or r.model_class == p.model_class or r.family == p.family


def nearest(candidates: Iterable[Record], plan: Plan, limit: int = LIMIT) -> list[Record]:
    """The ``limit`` records nearest to ``plan`` (see the module's docstring)."""
    scored = [
        (_score(r, plan), -abs(math.log2(max(r.gpus, 1) / max(plan.gpus, 1))), r.id, r)
        for r in candidates
        if _related(r, plan)
    ]
    scored.sort(key=lambda t: (t[0], t[1], t[2]), reverse=True)
    return [t[3] for t in scored[:limit]]


def _matched_on(chosen: Sequence[Record], plan: Plan) -> str:
    """What the chosen records share with the plan, said in words, most specific first."""
    n = len(chosen)

    def share(test: Any) -> int:
        return sum(1 for r in chosen if test(r))

    parts = []
    same_acc = share(lambda r: r.accelerator == plan.accelerator)
    generation = plan.generation
    same_gen = share(lambda r: generation and r.generation == generation)
    if same_acc:
        parts.append(f"{same_acc} on {plan.accelerator}")
    elif same_gen:
        parts.append(f"{same_gen} on {generation} GPUs")
    same_family = share(lambda r: r.family == plan.family)
    same_class = share(lambda r: r.model_class == plan.model_class)
    if same_family:
        parts.append(f"{same_family} of the {plan.family} family")
    elif same_class:
        parts.append(f"{same_class} {plan.model_class} models")
    if plan.stack:
        same_stack = share(lambda r: r.stack == plan.stack)
        if same_stack:
            parts.append(f"{same_stack} on {plan.stack}")
    return f"{n} records: " + ", ".join(parts) if parts else f"{n} records"


@lru_cache(maxsize=4096)
def _neighbours(metric: str, plan: Plan) -> tuple[tuple[Record, ...], dict[str, Any] | None]:
    """The records nearest to ``plan`` for ``metric`` and their summary (cached: a plan's
    neighbours depend only on what it is matched on)."""
    kind, load_metric = POOLS[metric]
    pool = [
        r
        for r in records()
        if r.kind == kind
        and (load_metric is None or r.metric == load_metric)
        and (metric not in STACK_BOUND or r.stack == plan.stack)
    ]
    chosen = tuple(nearest(pool, plan))
    return chosen, summary(chosen)


@lru_cache(maxsize=256)
def _family(metric: str, family: str, stack: str) -> dict[str, Any] | None:
    """The error of every record of ``metric`` of one model family (None: it has none), on
    ``stack`` alone for a ``STACK_BOUND`` metric."""
    kind, load_metric = POOLS[metric]
    return summary(
        r
        for r in records()
        if r.kind == kind
        and r.family == family
        and (load_metric is None or r.metric == load_metric)
        and (metric not in STACK_BOUND or r.stack == stack)
    )


def _metric(metric: str, value: float | None, plan: Plan) -> dict[str, Any]:
    """The accuracy of one headline number: the nearest records, their error, the range; the
    plan's own family's error where it has records, and its range where that family's runs
    lean beyond ``FAMILY_BIAS``."""
    chosen, stats = _neighbours(metric, plan)
    family = _family(metric, plan.family, plan.stack) if plan.family else None
    label = METRIC_LABELS[metric]
    if value is not None and not math.isfinite(value):
        value = None  # an overloaded replica's latency: unbounded
    out: dict[str, Any] = {
        "metric": metric,
        "label": label,
        "unit": METRIC_UNITS[metric],
        "predicted": value,
        "n": 0,
        "median_ape": None,
        "p90_ape": None,
        "median_signed": None,
        "p10_signed": None,
        "p90_signed": None,
        "range_low": None,
        "range_high": None,
        "range_from": None,
        "family": None if family is None else {"name": plan.family, **family},
        "matched_on": "",
        "summary": f"No published {label} record is near this plan: its error is unknown.",
        "records": [],
    }
    if stats is None:
        return out
    out.update(
        **stats,
        matched_on=_matched_on(chosen, plan),
        records=[
            {
                "id": r.id,
                "group": r.group,
                "accelerator": r.accelerator,
                "model": r.model,
                "stack": r.stack,
                "gpus": r.gpus,
                "measured": r.measured,
                "predicted": r.predicted,
                "error": r.error,
                "source": r.source,
                "url": r.url,
            }
            for r in chosen
        ],
    )
    lean = stats["median_signed"]
    direction = "over" if lean > 0 else "under"
    out["summary"] = (
        f"On {stats['n']} similar published runs ({out['matched_on'].split(': ', 1)[-1]}) the "
        f"planner's {label} was within {stats['median_ape']:.0%} (median), "
        f"{stats['p90_ape']:.0%} at p90, {direction}-predicting by {abs(lean):.0%} in the median."
    )
    basis = stats if stats["n"] >= MIN_RANGE else None
    if (
        family is not None
        and family["n"] >= MIN_RANGE
        and abs(family["median_signed"]) > FAMILY_BIAS
    ):
        basis = family
        lean = "over" if family["median_signed"] > 0 else "under"
        out["summary"] += (
            f" The {plan.family} family's own {family['n']} runs were {lean}-predicted by"
            f" {abs(family['median_signed']):.0%} in the median ({family['p90_ape']:.0%} at p90),"
            f" a known bias of the model: the range is theirs."
        )
    if value is not None and basis is not None:
        # error = predicted / measured - 1, so measured = predicted / (1 + error)
        out["range_low"] = value / (1 + basis["p90_signed"])
        out["range_high"] = value / (1 + basis["p10_signed"])
        out["range_from"] = "family" if basis is family else "nearest"
    return out


def plan_accuracy(
    *,
    accelerator: str,
    generation: str,
    family: str,
    model_class: str,
    stack: str,
    gpus: int,
    headline: dict[str, float | None],
) -> dict[str, Any]:
    """A plan's ``accuracy`` block: for each headline number (``tokens_per_s_per_gpu`` for a
    training plan; ``output_tokens_per_s``, ``ttft`` and ``tpot`` for a serving one), the
    nearest published records of that metric, their error and the range it implies."""
    plan = Plan(accelerator, generation, family, model_class, stack, gpus)
    return {
        "metrics": [_metric(metric, value, plan) for metric, value in headline.items()],
        "report": "/accuracy",
    }


@lru_cache(maxsize=1024)
def peak_memory_factors(
    *, accelerator: str, generation: str, family: str, model_class: str, stack: str, gpus: int
) -> tuple[float, float] | None:
    """The likely range of a training plan's peak memory as factors of the planner's figure
    (the ``peak_memory`` metric's range for a figure of 1), or None where no published
    measurement of its stack near it gives one: what the training sweep judges each layout's
    fit by, as a single plan's answer does."""
    plan = Plan(accelerator, generation, family, model_class, stack, gpus)
    metric = _metric("peak_memory", 1.0, plan)
    if metric["range_low"] is None or metric["range_high"] is None:
        return None
    return metric["range_low"], metric["range_high"]


def time_range(step_s: float, throughput: dict[str, Any]) -> tuple[float, float] | None:
    """The range of a time the planner derives from a throughput it predicts (a training step
    from tokens/s): measured time = predicted time x (1 + the throughput's error), the error
    range the throughput's own range came from."""
    if throughput["range_low"] is None or not throughput["predicted"]:
        return None
    value = throughput["predicted"]
    return step_s * value / throughput["range_high"], step_s * value / throughput["range_low"]


# headline metric -> (the record kind it is read from, the load metric within it)
POOLS: dict[str, tuple[str, str | None]] = {
    "tokens_per_s_per_gpu": ("training", None),
    "peak_memory": ("memory", None),
    "output_tokens_per_s": ("serving", None),
    "ttft": ("load", "ttft"),
    "tpot": ("load", "tpot"),
}


# Metrics whose records count only on the plan's own software stack: peak memory depends on
# what a framework keeps (its allocator settings, buffers, saved tensors), and the planner's
# error on one stack's measurements says little about another's.
STACK_BOUND = frozenset({"peak_memory"})


# --- the report page ------------------------------------------------------------------------

FILTERS = ("kind", "metric", "accelerator", "family", "stack", "group")


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
