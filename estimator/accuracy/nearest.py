"""The published records nearest to a plan (``select``), by metric (``neighbours``).

A record counts when it shares at least the accelerator generation or the model class with
the plan. The records counted are narrowed first by layout style, for training throughput
(``STYLE_BOUND``): to those of the plan's style (``layout_style``: dp-only, i.e. ZeRO / FSDP;
tp/pp, Megatron's; moe/ep) where ``MIN_MATCH`` share it, else all of them. Then by hardware: to
the records on the plan's accelerator, else on its generation, else on its vendor's
accelerators, the first of these that has ``MIN_MATCH`` (or every record counted), else every
record counted (``Match.level``: "accelerator", "generation", "vendor", or "other vendor"; "any"
where the plan's vendor is not known). Among those, nearness is scored per record (highest
first, ties to the nearest scale): the same accelerator (2), the same generation (1) or the same
vendor (0.5); the same model family, i.e. ``model_type`` (2), or the same class, dense / MoE /
hybrid (1); the same software stack or engine (1); the same layout style (1, where matched on
it); a scale within 2x (1) or 8x (0.5) of the plan's GPU count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from estimator.accuracy.records import Record, records, summary

__all__ = [
    "LEVELS",
    "LIMIT",
    "MIN_MATCH",
    "MIN_RANGE",
    "POOLS",
    "STACK_BOUND",
    "STYLE_BOUND",
    "Match",
    "Plan",
    "family_summary",
    "nearest",
    "neighbours",
    "select",
]

LIMIT = 12  # the nearest records a plan's accuracy is read from
MIN_RANGE = 5  # fewer similar records than this: no predicted range
# The records a plan's nearest are read from narrow to its layout style, then to its accelerator,
# generation or vendor, where this many share it: enough to give a range (``MIN_RANGE``).
MIN_MATCH = MIN_RANGE
# Hardware levels of a match, most specific first.
LEVELS = ("accelerator", "generation", "vendor")

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


@lru_cache(maxsize=4096)
def neighbours(metric: str, plan: Plan) -> tuple[Match, dict[str, Any] | None]:
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


@lru_cache(maxsize=256)
def family_summary(metric: str, family: str, stack: str) -> dict[str, Any] | None:
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
