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

A record counts when it shares at least the accelerator generation or the model class with
the plan. The records counted are narrowed first by layout style, for training throughput
(``STYLE_BOUND``): to those of the plan's style (``layout_style``: dp-only, i.e. ZeRO / FSDP;
tp/pp, Megatron's; moe/ep) where ``MIN_MATCH`` share it, else all of them, and the answer says
which styles it shows. Then by hardware: to the records on the plan's accelerator, else on its
generation, else on its vendor's accelerators, the first of these that has ``MIN_MATCH`` (or
every record counted), else every record counted (``match``: "accelerator", "generation",
"vendor", or "other vendor"; "any" where the plan's vendor is not known), and a ``caveat`` says
in words what the records do not share. Among those, nearness is scored per record (highest
first, ties to the nearest scale): the same accelerator (2), the same generation (1) or the same
vendor (0.5); the same model family, i.e. ``model_type`` (2), or the same class, dense / MoE /
hybrid (1); the same software stack or engine (1); the same layout style (1, where matched on
it); a scale within 2x (1) or 8x (0.5) of the plan's GPU count.

The predicted range is the plan's number divided by (1 + the 10th and 90th percentile signed
error) of those records: where the planner over-predicted similar runs, the range sits below
its number. Below ``MIN_RANGE`` records no range is given. Where the plan's own model family
has ``MIN_RANGE`` records or more and they lean beyond ``FAMILY_BIAS`` in the median, that is a
known bias of the model: the family's records give the range instead, and the summary says so.
Where the records had to come from other vendors' accelerators (``match`` "other vendor"), the
range is widened both ways by a factor of 1 + the error seen where the planner predicted the
plan's vendor's accelerators with curves read off another vendor's (``cross_vendor``: measured
on the report's runs on that vendor's accelerators, or on every other vendor's where it has
none), never by a set percentage.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from estimator import get_accelerator
from estimator.errors import SpecError, UnknownIdError

__all__ = [
    "KINDS",
    "STYLES",
    "Match",
    "Record",
    "cross_vendor",
    "layout_style",
    "plan_accuracy",
    "rate_headroom_note",
    "records",
    "report_view",
    "select",
    "source_url",
    "tie_band",
]

LIMIT = 12  # the nearest records a plan's accuracy is read from
MIN_RANGE = 5  # fewer similar records than this: no predicted range
# A model family whose own records lean further than this (median signed error, the issue's
# +/-15% per group) is a known bias: its runs, not the nearest records, give the plan's range.
FAMILY_BIAS = 0.15
# The records a plan's nearest are read from narrow to its layout style, then to its accelerator,
# generation or vendor, where this many share it: enough to give a range (``MIN_RANGE``).
MIN_MATCH = MIN_RANGE
# Layout styles, as an answer names them: a run with expert parallelism; else one splitting the
# model's layers or tensors (tensor, pipeline or context parallel: Megatron's way); else data
# parallel alone, its weights whole or sharded (DDP, ZeRO, FSDP).
STYLES = {"dp-only": "dp-only (ZeRO/FSDP)", "tp/pp": "tp/pp (Megatron)", "moe/ep": "moe/ep"}
# Hardware levels of a match, most specific first, and how a summary says them.
LEVELS = ("accelerator", "generation", "vendor")
LEVEL_WORDS = {
    "accelerator": "the same accelerator",
    "generation": "the same accelerator generation",
    "vendor": "the same vendor's accelerators",
    "other vendor": "other vendors' accelerators",
    "any": "any accelerator",
}
# How the catalog's vendors and generations read in a sentence (the rest: title case).
_VENDOR_NAMES = {
    "nvidia": "NVIDIA",
    "amd": "AMD",
    "google": "Google",
    "intel": "Intel",
    "aws": "AWS",
}
_GENERATION_NAMES = {
    "blackwell-ultra": "Blackwell Ultra",
    "cdna2": "CDNA 2",
    "cdna3": "CDNA 3",
    "cdna4": "CDNA 4",
    "tpu": "TPU",
}
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
    vendor: str = ""  # the accelerator's (catalog) vendor
    style: str = ""  # its layout's style (``STYLES``; "" where the report gives no layout)

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


def _vendor(accelerator: str) -> str:
    """A catalog accelerator's vendor; "" for any other."""
    try:
        return get_accelerator(accelerator).vendor or ""
    except (SpecError, UnknownIdError):
        return ""


def layout_style(*, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1) -> str:
    """A layout's style (``STYLES``): ``moe/ep`` with expert parallelism; ``tp/pp`` with tensor,
    pipeline or context parallelism; else ``dp-only`` (ZeRO / FSDP or plain DDP)."""
    if ep > 1:
        return "moe/ep"
    if tp > 1 or pp > 1 or cp > 1:
        return "tp/pp"
    return "dp-only"


def _style_of(layout: Any) -> str:
    """A report row's layout style; "" where it gives no layout (serving, kernels)."""
    if not isinstance(layout, dict):
        return ""
    return layout_style(**{k: int(layout.get(k) or 1) for k in ("tp", "pp", "cp", "ep")})


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
        vendor=_vendor(str(row.get("accelerator") or "")),
        style=_style_of(row.get("layout")),
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
    vendor: str = ""  # the accelerator's ("": not known, a team accelerator's may be)
    style: str = ""  # its layout's (``layout_style``; "": not matched on it)


def _score(r: Record, p: Plan) -> float:
    score = 0.0
    if r.accelerator == p.accelerator:
        score += 2
    elif p.generation and r.generation == p.generation:
        score += 1
    elif p.vendor and r.vendor == p.vendor:
        score += 0.5
    if p.style and r.style == p.style:
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


def _hardware(r: Record, p: Plan) -> int:
    """How near a record's accelerator is to the plan's: 0 the same one, 1 the same generation,
    2 the same vendor, 3 another vendor's (or a vendor not known)."""
    if r.accelerator == p.accelerator:
        return 0
    if p.generation and r.generation == p.generation:
        return 1
    if p.vendor and r.vendor == p.vendor:
        return 2
    return 3


@dataclass(frozen=True)
class Match:
    """The records nearest to a plan and how they were found (see the module's docstring)."""

    records: tuple[Record, ...]
    level: str | None  # LEVELS, "other vendor" or "any"; None: no record counts
    style: bool | None  # whether they share the plan's layout style; None: not matched on it
    same_style: int = 0  # the records counted that share it, where matched on it
    nearer: int = 0  # the records counted on hardware nearer the plan's than ``level`` says


def select(candidates: Iterable[Record], plan: Plan, limit: int = LIMIT) -> Match:
    """The ``limit`` records nearest to ``plan``: those counted, narrowed to its layout style
    (where ``plan.style`` is set) and then to its accelerator, generation or vendor where
    ``MIN_MATCH`` share it (or every record counted does), ranked by ``_score``."""
    counted = [r for r in candidates if _related(r, plan)]
    style: bool | None = None
    same_style = 0
    if plan.style:
        same = [r for r in counted if r.style == plan.style]
        same_style = len(same)
        style = bool(same) and (len(same) >= MIN_MATCH or len(same) == len(counted))
        if style:
            counted = same
    if not counted:
        return Match((), None, style, same_style)
    level = "other vendor" if plan.vendor else "any"
    pool = counted
    for i, name in enumerate(LEVELS):
        if (name == "generation" and not plan.generation) or (name == "vendor" and not plan.vendor):
            continue
        tier = [r for r in counted if _hardware(r, plan) <= i]
        if len(tier) >= MIN_MATCH or len(tier) == len(counted):
            level, pool = name, tier
            break
    scored = [
        (_score(r, plan), -abs(math.log2(max(r.gpus, 1) / max(plan.gpus, 1))), r.id, r)
        for r in pool
    ]
    scored.sort(key=lambda t: (t[0], t[1], t[2]), reverse=True)
    rank = LEVELS.index(level) if level in LEVELS else len(LEVELS)
    nearer = sum(1 for r in counted if _hardware(r, plan) < rank)
    return Match(tuple(t[3] for t in scored[:limit]), level, style, same_style, nearer)


def nearest(candidates: Iterable[Record], plan: Plan, limit: int = LIMIT) -> list[Record]:
    """The ``limit`` records nearest to ``plan`` (``select``'s)."""
    return list(select(candidates, plan, limit).records)


def _matched_on(chosen: Sequence[Record], plan: Plan) -> str:
    """What the chosen records share with the plan, said in words, most specific first."""
    n = len(chosen)

    def share(test: Any) -> int:
        return sum(1 for r in chosen if test(r))

    parts = []
    same_acc = share(lambda r: r.accelerator == plan.accelerator)
    generation = plan.generation
    same_gen = share(lambda r: generation and r.generation == generation)
    same_vendor = share(lambda r: plan.vendor and r.vendor == plan.vendor)
    if same_acc:
        parts.append(f"{same_acc} on {plan.accelerator}")
    elif same_gen:
        parts.append(f"{same_gen} on {_generation_name(generation)} accelerators")
    elif same_vendor:
        parts.append(f"{same_vendor} on {_vendor_name(plan.vendor)} accelerators")
    if plan.style:
        same_style = share(lambda r: r.style == plan.style)
        if same_style:
            parts.append(f"{same_style} {STYLES[plan.style]}")
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


def _vendor_name(vendor: str) -> str:
    return _VENDOR_NAMES.get(vendor, vendor)


def _generation_name(generation: str) -> str:
    return _GENERATION_NAMES.get(generation, generation.replace("-", " ").title())


def _runs(n: int, label: str = "") -> str:
    """``n`` published (``label``) runs, in words."""
    return f"{n} published {label + ' ' if label else ''}run" + ("" if n == 1 else "s")


@lru_cache(maxsize=4096)
def _neighbours(metric: str, plan: Plan) -> tuple[Match, dict[str, Any] | None]:
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
    match = select(pool, plan)
    return match, summary(match.records)


def _across_metrics() -> frozenset[tuple[str, str]]:
    """The (kind, metric) of the records the planner's error across vendors is measured on:
    those of the headline numbers an accuracy block reads (``POOLS``) and the rate within
    latency targets (``slo_rate``, ``rate_headroom_note``). Not kernels (timed on NVIDIA
    alone), nor the load rows' throughput: below capacity it is the rate the run was driven at,
    which the planner gives back on every vendor's runs (within 2-4%), saying nothing of how its
    curves fit an accelerator."""
    return frozenset((kind, load or metric) for metric, (kind, load) in POOLS.items()) | {
        ("load", "slo_rate")
    }


@lru_cache(maxsize=64)
def cross_vendor(vendor: str, shown: str) -> dict[str, Any] | None:
    """The error seen where the planner predicted ``vendor``'s accelerators with curves read off
    ``shown``'s (every non-NVIDIA accelerator borrows an NVIDIA kernel profile:
    estimator/catalog/efficiency.json), from the report's runs on ``vendor``'s accelerators, or
    on every vendor's but ``shown``'s where ``vendor`` has none (``_across_metrics``'): each
    run's error beyond the planner's error on ``shown``'s runs of the same benchmark, i.e.
    (1 + its error) / (1 + the median error of ``shown``'s runs of its metric in its group, or
    of its metric where the group has none of them) - 1, so that a bias every vendor's runs of a
    benchmark share (which the nearest records' range holds already) is not counted twice. The
    widening is the median of those excesses' sizes. None: no such run, or none of ``shown``'s
    to hold it against."""
    across = [r for r in records() if (r.kind, r.metric) in _across_metrics()]
    reference = [r for r in across if r.vendor == shown]
    own = [r for r in across if r.vendor == vendor]
    scope = "vendor"
    if not own:
        own = [r for r in across if r.vendor and r.vendor != shown]
        scope = "other vendors"
    excess = []
    for r in own:
        base = [
            x.error for x in reference if (x.kind, x.metric, x.group) == (r.kind, r.metric, r.group)
        ]
        base = base or [x.error for x in reference if (x.kind, x.metric) == (r.kind, r.metric)]
        if base:
            excess.append((1 + r.error) / (1 + statistics.median(base)) - 1)
    if not excess:
        return None
    sizes = sorted(abs(e) for e in excess)
    return {
        "vendor": vendor,
        "shown": shown,
        "scope": scope,
        "vendors": sorted({r.vendor for r in own}),
        "n": len(excess),
        "widening": statistics.median(sizes),
        "p90": _quantile(sizes, 0.9),
    }


def _shown_vendor(chosen: Sequence[Record], plan: Plan) -> str:
    """The vendor most of the records shown are on, among those not the plan's."""
    counts: dict[str, int] = {}
    for r in chosen:
        if r.vendor and r.vendor != plan.vendor:
            counts[r.vendor] = counts.get(r.vendor, 0) + 1
    return max(sorted(counts), key=lambda v: counts[v]) if counts else ""


def _hardware_caveat(
    label: str, match: Match, plan: Plan, across: dict[str, Any] | None, ranged: bool
) -> str | None:
    """What the records shown do not share with the plan's accelerator, in words; the range's
    widening for another vendor's where it is widened."""
    level, chosen = match.level, match.records
    if level == "accelerator" or level is None:
        return None
    if level == "any":
        return (
            f"{plan.accelerator}'s vendor is not known: runs on any accelerator shown, the range"
            " not widened for a vendor they may not share."
        )
    acc = plan.accelerator
    generation = _generation_name(plan.generation)
    own = match.nearer
    if level == "generation":
        where, others = f"on {acc}", f"runs on other {generation} accelerators"
    elif level == "vendor":
        where = f"on {acc} or another {generation} accelerator" if plan.generation else f"on {acc}"
        others = f"other {_vendor_name(plan.vendor)} runs"
    else:
        where = f"on {_vendor_name(plan.vendor)} accelerators"
        shown = sorted({r.vendor for r in chosen if r.vendor != plan.vendor})
        others = " and ".join(_vendor_name(v) for v in shown) + " runs"
    if own:
        head = (
            f"Only {_runs(own, label)} {where} (fewer than {MIN_MATCH}): {others} shown beside them"
        )
    else:
        head = f"No published {label} run {where}: {others} shown"
    if level != "other vendor":
        return head + "."
    if across is None:
        return head + (
            f"; no published run off {_vendor_name(_shown_vendor(chosen, plan))} accelerators"
            " measures the planner's error across vendors, so the range is not widened for it."
        )
    basis = (
        f"the {_runs(across['n'])} on {_vendor_name(plan.vendor)} accelerators"
        if across["scope"] == "vendor"
        else f"the {_runs(across['n'])} on other vendors' accelerators"
        f" ({', '.join(_vendor_name(v) for v in across['vendors'])}; none on"
        f" {_vendor_name(plan.vendor)} accelerators)"
    )
    what = (
        f"the range is widened by {across['widening']:.0%} either way"
        if ranged
        else f"the planner's error across vendors is {across['widening']:.0%}"
    )
    return head + (
        f"; {what}: the median error of the planner on {basis} beyond its error on"
        f" {_vendor_name(across['shown'])} runs of the same benchmarks."
    )


def _style_caveat(label: str, match: Match, plan: Plan) -> str | None:
    """Where the records shown do not share the plan's layout style: which styles they have."""
    if match.style is not False or not match.records:
        return None
    counts: dict[str, int] = {}
    for r in match.records:
        counts[r.style] = counts.get(r.style, 0) + 1
    shown = ", ".join(
        f"{n} {STYLES.get(style, 'with no layout given')}" for style, n in sorted(counts.items())
    )
    style = STYLES[plan.style]
    if match.same_style:
        head = (
            f"Only {_runs(match.same_style, label)} had a {style} layout (fewer than {MIN_MATCH})"
        )
    else:
        head = f"No published {label} run had a {style} layout like this plan's"
    return f"{head}: the runs shown are {shown}."


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
    lean beyond ``FAMILY_BIAS``; the level its records matched the plan's hardware at, whether
    they share its layout style, a caveat saying what they do not share, and the widening of
    its range where they are all on other vendors' accelerators. The plan's layout style is
    read for a ``STYLE_BOUND`` metric only."""
    if metric not in STYLE_BOUND:
        plan = replace(plan, style="")
    match, stats = _neighbours(metric, plan)
    chosen = match.records
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
        "match": None,
        "style": plan.style or None,
        "style_match": match.style,
        "caveat": None,
        "range_widening": None,
        "cross_vendor": None,
        "summary": f"No published {label} record is near this plan: its error is unknown.",
        "records": [],
    }
    if stats is None:
        return out
    out.update(
        **stats,
        matched_on=_matched_on(chosen, plan),
        match=match.level,
        records=[
            {
                "id": r.id,
                "group": r.group,
                "accelerator": r.accelerator,
                "vendor": r.vendor,
                "style": r.style,
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
    level = LEVEL_WORDS[match.level or "any"]
    out["summary"] = (
        f"On {stats['n']} similar published runs, matched on {level}"
        f" ({out['matched_on'].split(': ', 1)[-1]}), the planner's {label} was within"
        f" {stats['median_ape']:.0%} (median), {stats['p90_ape']:.0%} at p90,"
        f" {direction}-predicting by {abs(lean):.0%} in the median."
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
    across = None
    if match.level == "other vendor":
        across = cross_vendor(plan.vendor, _shown_vendor(chosen, plan))
        out["cross_vendor"] = across
    ranged = value is not None and basis is not None
    caveats = [
        _hardware_caveat(label, match, plan, across, ranged),
        _style_caveat(label, match, plan),
    ]
    out["caveat"] = " ".join(c for c in caveats if c) or None
    if value is not None and basis is not None:
        # error = predicted / measured - 1, so measured = predicted / (1 + error)
        widen = 1 + (across["widening"] if across else 0.0)
        out["range_low"] = value / (1 + basis["p90_signed"]) / widen
        out["range_high"] = value / (1 + basis["p10_signed"]) * widen
        out["range_from"] = "family" if basis is family else "nearest"
        out["range_widening"] = across["widening"] if across else None
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
    vendor: str | None = None,
    style: str = "",
) -> dict[str, Any]:
    """A plan's ``accuracy`` block: for each headline number (``tokens_per_s_per_gpu`` for a
    training plan; ``output_tokens_per_s``, ``ttft`` and ``tpot`` for a serving one), the
    nearest published records of that metric, their error and the range it implies. ``vendor``
    is the accelerator's (None: the catalog's, "" where it has none); ``style`` the layout's
    (``layout_style``; "" matches no style), read for ``STYLE_BOUND`` metrics."""
    if vendor is None:
        vendor = _vendor(accelerator)
    plan = Plan(accelerator, generation, family, model_class, stack, gpus, vendor, style)
    return {
        "metrics": [_metric(metric, value, plan) for metric, value in headline.items()],
        "report": "/accuracy",
    }


@lru_cache(maxsize=1024)
def peak_memory_factors(
    *,
    accelerator: str,
    generation: str,
    family: str,
    model_class: str,
    stack: str,
    gpus: int,
    vendor: str | None = None,
) -> tuple[float, float] | None:
    """The likely range of a training plan's peak memory as factors of the planner's figure
    (the ``peak_memory`` metric's range for a figure of 1), or None where no published
    measurement of its stack near it gives one: what the training sweep judges each layout's
    fit by, as a single plan's answer does (``vendor`` as ``plan_accuracy`` reads it)."""
    if vendor is None:
        vendor = _vendor(accelerator)
    plan = Plan(accelerator, generation, family, model_class, stack, gpus, vendor)
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

# Metrics whose records are matched on the plan's layout style first (``select``): training
# throughput, whose error differs most between data-parallel-only runs and Megatron-style or
# expert-parallel ones. Not peak memory: the training sweep judges each layout's fit by its range
# read without the layout (``peak_memory_factors``), and a plan's own verdict reads the same range.
STYLE_BOUND = frozenset({"tokens_per_s_per_gpu"})


# --- the report page ------------------------------------------------------------------------

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
