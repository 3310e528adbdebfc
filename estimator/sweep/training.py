"""Training layout sweep: every valid layout of a search space, its memory, time and cost, the
feasible set, Pareto fronts and explained recommendations.

The space is the product of its axes (accelerator, software stack profile, precision, recompute
policy, GPU count, TP, PP, CP, EP, virtual stages, ZeRO stage, micro-batch); data parallelism
fills the rest of the GPU count. Its size is known before anything runs, and a space above
``max_layouts`` is refused with the count and the axes to narrow.

Evaluation is in bulk: for each (accelerator, stack, precision, recompute) the numeric axes
become numpy arrays and go through the same functions a single estimate calls
(``parallel.layout_violations``, ``memory.training_memory_terms``,
``timing.training_time_terms``), so each layout's numbers equal ``estimate_training``'s for
that layout (a property test checks it). Layouts that break a framework rule or do not fit in
memory are counted, and kept with their reason when asked.

This module runs the sweep (``sweep_training``) and is its public face; the pieces live in
their own modules: the workload and the space (``sweep.training_space``), the grid and the
rules (``sweep.training_grid``), the evaluation of one block (``sweep.training_eval``) and the
result with its verdicts and recommendations (``sweep.training_result``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from estimator.inputs.model import ModelSpec
from estimator.layout.parallel import Violation
from estimator.sweep.pareto import front
from estimator.sweep.training_eval import COLUMNS as COLUMNS
from estimator.sweep.training_eval import ROW_MEMORY as ROW_MEMORY
from estimator.sweep.training_eval import (
    PeakRange,
    blocks,
    empty_columns,
    evaluate,
    memory_refusals,
)
from estimator.sweep.training_grid import by_split, first_broken, grid, layout_rules, rule_refusals
from estimator.sweep.training_result import (
    Objective,
    Recommendation,
    TrainingSweep,
    feasible_layouts,
    rankable,
    recommend,
    sweep_notes,
)
from estimator.sweep.training_space import (
    DEFAULT_ACCELERATORS,
    DEFAULT_MAX_LAYOUTS,
    SweepTooLarge,
    TrainingSearch,
    TrainingWorkload,
    accelerator_spec,
    axes_of,
    check_search,
    checked_size,
    price_of,
    stack_axis,
    stack_options,
    stack_rule,
    sweep_size,
)
from estimator.timing.training import TimingOptions

__all__ = [
    "DEFAULT_ACCELERATORS",
    "DEFAULT_MAX_LAYOUTS",
    "Recommendation",
    "SweepTooLarge",
    "TrainingSearch",
    "TrainingSweep",
    "TrainingWorkload",
    "accelerator_spec",
    "price_of",
    "sweep_size",
    "sweep_training",
]


def sweep_training(
    model: ModelSpec,
    workload: TrainingWorkload,
    space: TrainingSearch | None = None,
    *,
    options: TimingOptions | tuple[TimingOptions, ...] | None = None,
    max_layouts: int = DEFAULT_MAX_LAYOUTS,
    keep_rejected: bool = False,
    top_k: int = 5,
    objective: Objective | None = None,
    progress: Callable[[int, int], None] | None = None,
    peak_range: PeakRange | None = None,
) -> TrainingSweep:
    """Evaluate every layout of ``space`` for ``workload``; see the module docstring.

    ``objective`` ranks the recommendations: ``"cost"`` (USD per token; default with a price),
    ``"time"`` (tokens/s) or ``"energy"`` (kWh per token, ``estimator.energy``). ``options``:
    the timing options of one stack profile, or a tuple of several, compared as an axis.
    ``progress(done, total)`` is called after each (accelerator, stack, precision, recompute)
    block. ``peak_range(accelerator, stack, num_gpus)``: the likely range of a layout's peak
    memory as factors of the planner's, where published measurements of the stack give one (the
    service's accuracy model): each row's ``fit`` verdict is then the single plan's, and a
    layout whose likely peak crosses its GPU's memory is counted ``tight``, not feasible.
    """
    space = space or TrainingSearch()
    stacks = stack_options(options)
    check_search(model, workload, space)
    size = checked_size(model, space, stack_axis(stacks), max_layouts)
    run = _evaluate_blocks(model, workload, space, stacks, peak_range, keep_rejected, progress)
    columns = run.columns
    feasible, filtered = feasible_layouts(columns, workload)
    counts = {"enumerated": size, "invalid": run.invalid, "evaluated": run.evaluated, **filtered}
    priced = feasible[np.isfinite(columns["usd_per_1m_tokens"][feasible])]
    ids = tuple(accelerator_spec(a).id for a in space.accelerators)
    if objective is None:
        objective = "cost" if priced.size else "time"
    sweep = TrainingSweep(
        model_id=model.id or "custom",
        exact=model.exact,
        workload=workload,
        accelerators=ids,
        precisions=space.precision,
        stacks=tuple(o.stack for o in stacks),
        columns=columns,
        size=size,
        counts=counts,
        rejected=run.rejected,
        feasible=feasible,
        pareto_cost=front(
            columns["tokens_per_s"][priced], -columns["usd_per_1m_tokens"][priced], priced
        ),
        pareto_memory=front(
            columns["tokens_per_s"][feasible], columns["headroom_bytes"][feasible], feasible
        ),
        recommendations=[],
        objective=objective,
        notes=sweep_notes(model, workload, stacks, ids),
    )
    sweep.recommendations = recommend(sweep, rankable(columns, feasible, objective), top_k)
    return sweep


@dataclass(frozen=True)
class _Evaluated:
    """What a sweep's blocks gave: every evaluated layout's columns (the blocks' one after
    another), the refused layouts (when kept) and the counts refused by a rule and evaluated."""

    columns: dict[str, np.ndarray]
    rejected: list[dict[str, Any]]
    invalid: int
    evaluated: int


def _evaluate_blocks(
    model: ModelSpec,
    workload: TrainingWorkload,
    space: TrainingSearch,
    stacks: tuple[TimingOptions, ...],
    peak_range: PeakRange | None,
    keep_rejected: bool,
    progress: Callable[[int, int], None] | None,
) -> _Evaluated:
    """Every block of ``space`` (``training_eval.blocks``): the grid's layouts that break a
    rule counted (the rules worked out once per node size, the only thing of a block they
    depend on), the rest evaluated split by split; ``progress(done, total)`` after each block."""
    layouts = grid(axes_of(model, space))
    dp = layouts["num_gpus"] // (layouts["tp"] * layouts["pp"] * layouts["cp"])
    by_node: dict[int, list[Violation]] = {}
    by_stack: dict[tuple[int, str, bool], tuple[list[Violation], np.ndarray]] = {}
    parts: list[dict[str, np.ndarray]] = []
    rejected: list[dict[str, Any]] = []
    invalid = evaluated = 0
    specs = tuple(map(accelerator_spec, space.accelerators))
    total = len(specs) * len(stacks) * len(space.precision) * len(space.recompute)
    for done, block in enumerate(blocks(space, specs, stacks, workload), 1):
        if block.node not in by_node:
            by_node[block.node] = layout_rules(model, layouts, dp, workload, block.node, space.dp)
        key = (block.node, block.options.stack, block.options.auto)
        if key not in by_stack:  # the stack's own rule, or the layouts auto gives it
            own, mine = stack_rule(block.options, layouts)
            rules = by_node[block.node] + own
            # -1: breaks no rule; -2: a layout auto gives another stack (not counted here)
            by_stack[key] = (rules, np.where(mine, first_broken(rules), -2))
        rules, broken = by_stack[key]
        ok = broken == -1
        invalid += int((broken >= 0).sum())
        if keep_rejected:
            rejected += rule_refusals(block.label, layouts, rules, broken)
        for g, split in by_split(model, {k: v[ok] for k, v in layouts.items()}):
            cols = evaluate(model, block, g, workload, split, peak_range)
            parts.append(cols)
            evaluated += int(g["tp"].size)
            if keep_rejected:
                rejected += memory_refusals(block.label, g, cols)
        if progress is not None:
            progress(done, total)
    if parts:
        columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    else:
        columns = empty_columns(workload)
    return _Evaluated(columns, rejected, invalid, evaluated)
