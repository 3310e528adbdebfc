"""How right the planner was on published runs like a plan, and the range that implies.

``plan_accuracy`` gives a plan's ``accuracy`` block: for each headline number, the published
records nearest to the plan (``nearest.select``), their observed error, and the range it
implies; ``peak_memory_factors`` the likely range of a training plan's peak memory as factors
of the planner's figure (what the fit verdict reads, ``memory.verdict``).

The predicted range is the plan's number divided by (1 + the 10th and 90th percentile signed
error) of those records: where the planner over-predicted similar runs, the range sits below
its number. Below ``MIN_RANGE`` records no range is given. Where the plan's own model family
has ``MIN_RANGE`` records or more and they lean beyond ``FAMILY_BIAS`` in the median, that is a
known bias of the model: the family's records give the range instead, and the summary says so.
Where the records had to come from other vendors' accelerators (match "other vendor"), the
range is widened both ways by a factor of 1 + the error seen where the planner predicted the
plan's vendor's accelerators with curves read off another vendor's (``cross_vendor``: measured
on the runs on that vendor's accelerators, or on every other vendor's where it has none), never
by a set percentage. A ``caveat`` says in words what the records do not share with the plan.

Everything but the plan's own numbers is memoized per metric and what a plan is matched on
(``_near``): a plan's block costs a few dictionary copies once its neighbours are known.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from estimator.accuracy.nearest import (
    MIN_MATCH,
    MIN_RANGE,
    POOLS,
    STYLE_BOUND,
    Match,
    Plan,
    family_summary,
    neighbours,
)
from estimator.accuracy.records import STYLES, Record, quantile, records, vendor_of

__all__ = [
    "FAMILY_BIAS",
    "METRIC_LABELS",
    "METRIC_UNITS",
    "cross_vendor",
    "peak_memory_factors",
    "plan_accuracy",
    "time_range",
]

# A model family whose own records lean further than this (median signed error, the issue's
# +/-15% per group) is a known bias: its runs, not the nearest records, give the plan's range.
FAMILY_BIAS = 0.15
# How a summary says a match's hardware level.
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
        "p90": quantile(sizes, 0.9),
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


@dataclass(frozen=True)
class _Near:
    """What one headline number's block says for a plan whatever the number is (``_near``)."""

    block: dict[str, Any]  # the block with no number, no range and no caveat
    basis: Mapping[str, Any] | None  # the summary its range is read from (None: no range)
    range_from: str | None  # "nearest" or "family"
    widening: float | None  # the range's widening for another vendor's records
    caveats: tuple[str | None, str | None]  # the caveat without a range, with one


def _empty_block(
    metric: str, plan: Plan, match: Match, family: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A metric's block with no record counted, every key in the answer's order."""
    label = METRIC_LABELS[metric]
    return {
        "metric": metric,
        "label": label,
        "unit": METRIC_UNITS[metric],
        "predicted": None,
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


def _record_rows(chosen: Sequence[Record]) -> list[dict[str, Any]]:
    """The records a block shows, as the answer gives them."""
    return [
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
    ]


def _summary_text(label: str, level: str | None, matched_on: str, stats: Mapping[str, Any]) -> str:
    """A block's summary: how near the records are and the planner's error on them."""
    lean = stats["median_signed"]
    direction = "over" if lean > 0 else "under"
    return (
        f"On {stats['n']} similar published runs, matched on {LEVEL_WORDS[level or 'any']}"
        f" ({matched_on.split(': ', 1)[-1]}), the planner's {label} was within"
        f" {stats['median_ape']:.0%} (median), {stats['p90_ape']:.0%} at p90,"
        f" {direction}-predicting by {abs(lean):.0%} in the median."
    )


def _leans(family: Mapping[str, Any]) -> bool:
    """Whether a model family's own runs are a known bias: ``MIN_RANGE`` of them or more,
    leaning beyond ``FAMILY_BIAS`` in the median."""
    return bool(family["n"] >= MIN_RANGE and abs(family["median_signed"]) > FAMILY_BIAS)


@lru_cache(maxsize=4096)
def _near(metric: str, plan: Plan) -> _Near:
    """The nearest records of ``metric`` to ``plan``, their error, the plan's own family's error
    where it has records (and its range where that family's runs lean beyond ``FAMILY_BIAS``),
    the level its records matched the plan's hardware at, whether they share its layout style,
    what they do not share and the widening of the range where they are all on other vendors'
    accelerators. The plan's layout style is read for a ``STYLE_BOUND`` metric only. Memoized:
    none of it depends on the plan's number."""
    if metric not in STYLE_BOUND:
        plan = replace(plan, style="")
    match, stats = neighbours(metric, plan)
    chosen = match.records
    family = family_summary(metric, plan.family, plan.stack) if plan.family else None
    label = METRIC_LABELS[metric]
    out = _empty_block(metric, plan, match, family)
    if stats is None:
        return _Near(out, None, None, None, (None, None))
    matched_on = _matched_on(chosen, plan)
    out.update(**stats, matched_on=matched_on, match=match.level, records=_record_rows(chosen))
    out["summary"] = _summary_text(label, match.level, matched_on, stats)
    basis = stats if stats["n"] >= MIN_RANGE else None
    if family is not None and _leans(family):
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
    style = _style_caveat(label, match, plan)
    caveats = tuple(
        " ".join(c for c in (_hardware_caveat(label, match, plan, across, ranged), style) if c)
        or None
        for ranged in (False, True)
    )
    return _Near(
        out,
        basis,
        None if basis is None else "family" if basis is family else "nearest",
        across["widening"] if across else None,
        (caveats[0], caveats[1]),
    )


def _metric(metric: str, value: float | None, plan: Plan) -> dict[str, Any]:
    """The accuracy of one headline number (``_near``'s block), with the plan's number and the
    range it implies."""
    near = _near(metric, plan)
    if value is not None and not math.isfinite(value):
        value = None  # an overloaded replica's latency: unbounded
    block = near.block
    out = {
        **block,
        "predicted": value,
        "family": None if block["family"] is None else dict(block["family"]),
        "records": [dict(r) for r in block["records"]],
    }
    basis = near.basis
    ranged = value is not None and basis is not None
    out["caveat"] = near.caveats[ranged]
    if value is not None and basis is not None:
        # error = predicted / measured - 1, so measured = predicted / (1 + error)
        widen = 1 + (near.widening or 0.0)
        out["range_low"] = value / (1 + basis["p90_signed"]) / widen
        out["range_high"] = value / (1 + basis["p10_signed"]) * widen
        out["range_from"] = near.range_from
        out["range_widening"] = near.widening
    return out


def plan_accuracy(plan: Plan, headline: Mapping[str, float | None]) -> dict[str, Any]:
    """A plan's ``accuracy`` block: for each headline number (``tokens_per_s_per_gpu`` and
    ``peak_memory`` for a training plan; ``output_tokens_per_s``, ``ttft`` and ``tpot`` for a
    serving one), the nearest published records of that metric, their error and the range it
    implies. ``plan.style`` (``layout_style``; "" matches no style) is read for
    ``STYLE_BOUND`` metrics."""
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
        vendor = vendor_of(accelerator)
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
