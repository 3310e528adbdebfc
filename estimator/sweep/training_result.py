"""A training sweep's result (``TrainingSweep``): the evaluated layouts' columns, the feasible
set with every evaluated layout counted under the first filter it fails (``feasible_layouts``),
the sweep's notes, the Pareto fronts, and the recommendations, each with the reasons it wins
(``recommend``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from estimator.catalog import accelerator_ids, get_accelerator
from estimator.finetune import adapters
from estimator.inputs.accelerator import GIB
from estimator.inputs.model import ModelSpec
from estimator.layout.pipeline import SPLITS
from estimator.memory.training import RECOMPUTE_POLICIES
from estimator.memory.verdict import FIT_VERDICTS
from estimator.sweep.training_eval import ROW_MEMORY
from estimator.sweep.training_space import AXES, TrainingWorkload, facility_w_of, price_of
from estimator.terms import TRAINING_MEMORY
from estimator.timing.stacks import AUTO_PRECEDENCE, stack_profile
from estimator.timing.training import BREAKDOWN, TimingOptions

__all__ = [
    "Objective",
    "Recommendation",
    "TrainingSweep",
    "feasible_layouts",
    "rankable",
    "recommend",
    "sweep_notes",
]

Objective = Literal["cost", "time", "energy"]


@dataclass(frozen=True)
class Recommendation:
    """One recommended layout: its row of the sweep and why it wins."""

    rank: int
    row: dict[str, Any]
    why: tuple[str, ...]
    tie: bool = False  # within the tie band of the best: ranked by the tie-breakers


@dataclass
class TrainingSweep:
    """Columns of every evaluated (rule-abiding) layout, fitting or not, plus counts, fronts
    and recommendations. ``column(name)`` gives a numpy array; ``row(i)`` one layout as a dict."""

    model_id: str
    exact: bool
    workload: TrainingWorkload
    accelerators: tuple[str, ...]
    precisions: tuple[str, ...]
    stacks: tuple[str, ...]  # the software stack profiles, in the order of the ``stack`` codes
    columns: dict[str, np.ndarray]
    size: int
    counts: dict[str, int]
    rejected: list[dict[str, Any]]
    feasible: np.ndarray
    pareto_cost: np.ndarray
    pareto_memory: np.ndarray
    recommendations: list[Recommendation]
    objective: Objective
    notes: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.columns["tp"].size)

    def column(self, name: str) -> np.ndarray:
        return self.columns[name]

    def row(self, i: int) -> dict[str, Any]:
        return self.rows([i])[0]

    def rows(self, indices: np.ndarray | list[int]) -> list[dict[str, Any]]:
        """Layouts as dicts of plain Python values (names for the accelerator, stack,
        precision and recompute codes; None for a missing price or cost), one column at a time."""
        index = np.asarray(indices, dtype=np.int64)
        names = {
            "accelerator": self.accelerators,
            "stack": self.stacks,
            "precision": self.precisions,
            "recompute": RECOMPUTE_POLICIES,
            "pipeline_split": SPLITS,
            "fit": FIT_VERDICTS,
        }
        cols: dict[str, list[Any]] = {
            name: [labels[code] for code in self.columns[name][index].tolist()]
            for name, labels in names.items()
        }
        for name, values in self.columns.items():
            if name in cols:
                continue
            picked = values[index]
            plain = picked.tolist()
            if picked.dtype.kind == "f" and np.isnan(picked).any():
                plain = [None if math.isnan(v) else v for v in plain]
            cols[name] = plain
        return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]


def feasible_layouts(
    columns: Mapping[str, np.ndarray], workload: TrainingWorkload
) -> tuple[np.ndarray, dict[str, int]]:
    """The indices of the feasible layouts, and the evaluated ones counted under the first
    filter each fails, so that evaluated = out_of_memory + tight + under_headroom +
    past_deadline + over_budget + feasible (tight: fits by the planner's figure, but its likely
    peak crosses the GPU's memory; deadline and budget judged on the effective run, with
    interruptions, restarts and checkpoints: ``timing.effective``)."""
    fits = columns["fits"].astype(bool)
    counts = {"out_of_memory": int((~fits).sum())}
    feasible = fits.copy()
    limit = columns["capacity_bytes"] * (1 - workload.min_headroom)
    for name, passes in (
        ("tight", columns["fit"] == 0),
        ("under_headroom", columns["memory_bytes"] <= limit),
        ("past_deadline", None if workload.deadline_s is None else (
            columns["effective_time_to_train_s"] <= workload.deadline_s)),
        ("over_budget", None if workload.budget_usd is None else (
            np.nan_to_num(columns["effective_cost_usd"], nan=np.inf) <= workload.budget_usd)),
    ):  # fmt: skip
        failed = np.zeros_like(feasible) if passes is None else feasible & ~passes
        counts[name] = int(failed.sum())
        feasible &= ~failed
    idx = np.flatnonzero(feasible)
    counts["feasible"] = int(idx.size)
    return idx, counts


def sweep_notes(
    model: ModelSpec,
    workload: TrainingWorkload,
    stacks: tuple[TimingOptions, ...],
    accelerators: tuple[str, ...],
) -> tuple[str, ...]:
    """What a sweep's numbers assume: the model's and each stack's notes, the expert
    all-to-all overlap, the fine-tune's adapters, the accelerators without a price."""
    notes = [*model.notes, *(stack_profile(o.stack).note() for o in stacks)]
    if any(o.auto for o in stacks):  # each row's stack is auto's pick for its layout
        notes.append(f"Each layout timed on the {AUTO_PRECEDENCE[0].lower()}{AUTO_PRECEDENCE[1:]}")
    if any(o.ep_comm_overlap for o in stacks):
        where = " Megatron-Core" if len(stacks) > 1 else ""
        notes.append(
            "Expert all-to-all overlapped with another micro-batch's compute (Megatron-Core's"
            f" --overlap-moe-expert-parallel-comm) in the{where} layouts that allow it: a virtual"
            " pipeline with a pipeline, no full recomputation (an upper bound: the SMs the"
            " dispatcher's kernels share with the GEMMs are not charged)."
        )
    if workload.finetune.frozen:
        notes.append(adapters(model, workload.finetune).note())
    unpriced = sorted({a for a in accelerators if price_of(a, workload.prices) is None})
    if unpriced:
        notes.append(
            f"No default price for {', '.join(unpriced)}: their costs are empty until a price "
            "is given (workload.prices)."
        )
    unpowered = sorted(a for a in accelerators if not _has_power(a, workload))
    if unpowered:
        notes.append(
            f"No published power figure for {', '.join(unpowered)}: their energy is empty until"
            " one is given (gpu_power_w)."
        )
    return tuple(notes)


def _has_power(acc: str, workload: TrainingWorkload) -> bool:
    return acc not in accelerator_ids() or (
        facility_w_of(get_accelerator(acc), workload.power) is not None
    )


_SHAPE = (
    "accelerator",
    "stack",
    "precision",
    "recompute",
    "tp",
    "pp",
    "cp",
    "ep",
    "vp",
    "zero",
    "micro_batch",
)


RANK_COLUMN = {"cost": "usd_per_1m_tokens", "energy": "kwh_per_1m_tokens"}


def rankable(columns: Mapping[str, np.ndarray], feasible: np.ndarray, objective: str) -> np.ndarray:
    """The feasible layouts an objective ranks: those with a price (cost) or a power figure
    (energy) where it needs one, every feasible one for time."""
    if objective not in RANK_COLUMN:
        return feasible
    keep: np.ndarray = feasible[np.isfinite(columns[RANK_COLUMN[objective]][feasible])]
    return keep


def recommend(sweep: TrainingSweep, candidates: np.ndarray, k: int) -> list[Recommendation]:
    """The best ``k`` layouts by the objective, one per shape: a layout that differs from a
    better one only in its GPU count (more data parallelism) is folded into it."""
    c = sweep.columns
    if not candidates.size:
        return []
    if sweep.objective in RANK_COLUMN:  # the cheapest (in $ or kWh) per token, then fastest
        key = c[RANK_COLUMN[sweep.objective]][candidates]
        order = np.lexsort((-c["tokens_per_s"][candidates], key))
    else:
        order = np.argsort(-c["tokens_per_s"][candidates], kind="stable")
    fastest = int(candidates[np.argmax(c["tokens_per_s"][candidates])])
    ranked, tied = _ties_first(sweep, candidates[order])
    out: list[Recommendation] = []
    seen: set[tuple[int, ...]] = set()
    for i in ranked:
        shape = tuple(int(c[key][i]) for key in _SHAPE)
        if shape in seen:
            continue
        seen.add(shape)
        rank = len(out) + 1
        why = _why(sweep, int(i), fastest, rank)
        tie = bool(tied.size > 1 and i in tied)
        if tie:
            if rank == 1:  # the best of the ties, not surely the best
                why[0] = f"tied for the {why[0]}"
            why.insert(1 if rank == 1 else 0, _tie_note(sweep.workload.tie_band, tied.size))
        out.append(Recommendation(rank, sweep.row(int(i)), tuple(why), tie))
        if len(out) == k:
            break
    if len(sweep.stacks) > 1 and out:
        out += _best_per_stack(sweep, candidates[order], fastest, out)
    return out


# Tie-breakers among layouts the planner cannot tell apart, in order: more memory headroom,
# less exposed communication (less traffic across nodes), less recomputation, fewer stages.
_RECOMPUTE_ORDER = {"none": 0, "selective": 1, "op": 2, "full": 3}


def _ties_first(sweep: TrainingSweep, ranked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ranked`` with the layouts within ``workload.tie_band`` of the best (by the objective)
    reordered by the tie-breakers, and those tied layouts."""
    band = sweep.workload.tie_band
    c = sweep.columns
    if band <= 0 or ranked.size < 2:
        return ranked, ranked[:0]
    if sweep.objective in RANK_COLUMN:
        value = c[RANK_COLUMN[sweep.objective]][ranked]
        tied = ranked[value <= value[0] * (1 + band)]
    else:
        value = c["tokens_per_s"][ranked]
        tied = ranked[value >= value[0] / (1 + band)]
    exposed = sum(c[k][tied] for k in BREAKDOWN if k.endswith("_comm"))
    recompute = np.array(
        [_RECOMPUTE_ORDER.get(RECOMPUTE_POLICIES[j], 9) for j in c["recompute"][tied].tolist()]
    )
    order = np.lexsort((c["pp"][tied], recompute, exposed, -c["headroom_bytes"][tied]))
    rest = ranked[~np.isin(ranked, tied)]
    return np.concatenate([tied[order], rest]), tied


def _tie_note(band: float, n: int) -> str:
    return (
        f"a tie: {n} layouts within {band:.1%} of the best, the gap between two layouts the"
        " planner can tell apart (its errors on two runs of one model and accelerator); ranked"
        " among them by memory headroom, exposed communication, recomputation, pipeline stages"
    )


def _best_per_stack(
    sweep: TrainingSweep, ranked: np.ndarray, fastest: int, out: list[Recommendation]
) -> list[Recommendation]:
    """With several software stacks compared, the best layout of each stack the first
    recommendations leave out (``ranked``: the candidates best first), with how far it is from
    the best of all."""
    c = sweep.columns
    best = out[0].row
    shown = {r.row["stack"] for r in out}
    added: list[Recommendation] = []
    for si, name in enumerate(sweep.stacks):
        mine = ranked[c["stack"][ranked] == si]
        if name in shown or not mine.size:
            continue
        i = int(mine[0])
        r = sweep.row(i)
        if sweep.objective in RANK_COLUMN:
            what = "cost" if sweep.objective == "cost" else "energy"
            col = RANK_COLUMN[sweep.objective]
            gap = (
                f"{r[col] / best[col]:.2f}x the {what} per token"
                if best[col] > 0
                else f"{r[col]:.3g} against {best[col]:.3g} {what} per token"  # a free price
            )
        else:
            gap = f"{r['tokens_per_s'] / best['tokens_per_s']:.0%} of the throughput"
        rank = len(out) + len(added) + 1
        first = f"the best layout under {name}: {gap} of the best of all ({best['stack']})"
        added.append(Recommendation(rank, r, (first, *_why(sweep, i, fastest, rank))))
    return added


_BEST = {
    "cost": "lowest cost per token",
    "energy": "lowest energy per token (the most tokens/s per MW)",
    "time": "highest throughput",
}
_SIMPLER = {"pp": 1, "tp": 1, "zero": 0, "recompute": 0, "micro_batch": 1}
_TERM_NAMES = {t.key: t.label.lower() for t in TRAINING_MEMORY if t.key in ROW_MEMORY}


def _why(sweep: TrainingSweep, i: int, fastest: int, rank: int) -> list[str]:
    """Why layout ``i`` (ranked ``rank``) wins, at most four reasons: its objective, the
    fastest feasible layout beside it, its memory and step, and each axis set off its simplest
    value that makes it fit or faster (against the same layout with that axis simplest)."""
    c = sweep.columns
    r = sweep.row(i)
    step = r["step_s"]
    exposed = sum(r[k] for k in BREAKDOWN if k.endswith("_comm"))
    lines = []
    if rank == 1:
        lines.append(_BEST[sweep.objective])
    if sweep.objective == "cost" and i != fastest:
        f = sweep.row(fastest)
        stack = f", {f['stack']}" if len(sweep.stacks) > 1 else ""
        lines.append(
            f"{r['tokens_per_s']:,.0f} tokens/s on {r['num_gpus']} GPUs; the fastest feasible "
            f"layout ({f['accelerator']}{stack}, {f['num_gpus']} GPUs) reaches "
            f"{f['tokens_per_s']:,.0f} at ${f['usd_per_1m_tokens']:.3f} per 1M tokens"
        )
    lines.append(
        f"uses {r['memory_bytes'] / GIB:.1f} of {r['capacity_bytes'] / GIB:.0f} GiB per GPU "
        f"({r['headroom_bytes'] / GIB:.1f} GiB headroom); MFU {r['mfu']:.0%}, pipeline bubble "
        f"{r['bubble'] / step:.0%} and exposed communication {exposed / step:.0%} of the step"
    )
    for axis, simple in _SIMPLER.items():
        if c[axis][i] == simple:
            continue
        # The same layout with this one axis at its simplest value (dp absorbs the GPU count).
        peer = np.ones(c["tp"].shape, dtype=bool)
        for key in ("accelerator", "stack", "precision", "recompute", *AXES):
            if key != axis:
                peer &= c[key] == c[key][i]
        peer &= c[axis] == simple
        hits = np.flatnonzero(peer)
        if not hits.size:
            continue
        j = int(hits[0])
        label = (
            f"recompute={RECOMPUTE_POLICIES[int(c[axis][i])]}"
            if axis == "recompute"
            else f"{axis}={int(c[axis][i])}"
        )
        base = "recompute=none" if axis == "recompute" else f"{axis}={simple}"
        saved = {t: c[t][j] - c[t][i] for t in _TERM_NAMES}
        term = max(saved, key=lambda t: saved[t])
        speed = c["tokens_per_s"][i] / c["tokens_per_s"][j] - 1
        if not c["fits"][j]:
            lines.append(
                f"{label} instead of {base}: fits where {base} needs "
                f"{c['memory_bytes'][j] / GIB:.1f} GiB (saves {saved[term] / GIB:.1f} GiB of "
                f"{_TERM_NAMES[term]} per GPU)"
            )
        elif speed > 0:
            lines.append(f"{label} instead of {base}: {speed:.0%} more throughput")
        if len(lines) >= 4:
            break
    return lines
