"""A training sweep's grid and the rules its layouts must satisfy: the numeric axes as flat
numpy arrays (one entry per layout), every framework rule as a boolean array with the field
and the reason a refused layout is given, the pipeline split each ``pp x vp`` takes (looked up
once per distinct pair and model), and the valid layouts in evaluation groups (the evenly split
ones together, each uneven split on its own)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from estimator.errors import SpecError
from estimator.inputs.model import ModelSpec
from estimator.layout.parallel import Parallelism, Violation, layout_violations
from estimator.layout.pipeline import PipelineSplit, model_split
from estimator.memo import per_model
from estimator.sweep.training_space import AXES, TrainingWorkload

__all__ = [
    "by_split",
    "first_broken",
    "grid",
    "layout_rules",
    "refusal",
    "rule_refusals",
]


def grid(axes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The product of ``axes`` as flat arrays, one entry per layout (the last axis fastest)."""
    mesh = np.meshgrid(*(np.asarray(v, dtype=np.int64) for v in axes.values()), indexing="ij")
    return {name: m.ravel() for name, m in zip(axes, mesh, strict=True)}


def layout_rules(
    model: ModelSpec,
    g: Mapping[str, np.ndarray],
    dp: np.ndarray,
    workload: TrainingWorkload,
    node: int,
    dp_values: tuple[int, ...] | None = None,
) -> list[Violation]:
    """Every rule a sweep layout must satisfy, in the order reasons are given: the single
    estimate's (``layout_violations``) between the sweep's own (GPU count, TP in a node, batch
    split, CP, ZeRO with nothing to shard)."""
    tp, pp, cp, ep, vp, mb = (g[k] for k in ("tp", "pp", "cp", "ep", "vp", "micro_batch"))
    n, zero, gbs, seq = g["num_gpus"], g["zero"], workload.global_batch_size, workload.seq_len
    rules: list[Violation] = [
        ("layout.num_gpus", n % (tp * pp * cp) != 0, "tp*pp*cp must divide num_gpus={v}", n),
        ("layout.tp", tp > node, f"tp={{v}} must stay within a node of {node} GPUs", tp),
    ]
    if dp_values is not None:
        listed = ", ".join(map(str, dp_values))
        rule = f"dp={{v}} (num_gpus / (tp*pp*cp)) is not one of the requested {listed}"
        rules.append(("layout.dp", ~np.isin(dp, dp_values), rule, dp))
    splittable = np.array(
        [split_of(model, int(a), int(b)) is not False for a, b in zip(pp, vp, strict=True)]
        if pp.size < 64
        else _splittable(model, pp, vp),
        dtype=bool,
    )
    rule = (
        f"pp*vp={{v}} virtual stages exceed the {model.num_layers} layers plus the embedding and"
        " the loss"
    )
    # The layouts as one of arrays (etp: tp, Megatron-Core's default).
    sizes: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vp": vp}
    layouts = Parallelism(**sizes, dp=np.maximum(dp, 1))
    rules += [
        *layout_violations(model, layouts, training=True, pipeline_rule=False),
        ("layout.pp", ~splittable, rule, pp * vp),
        (
            "workload.global_batch_size",
            gbs % np.maximum(mb * dp, 1) != 0,
            f"global_batch_size={gbs} must be a multiple of micro_batch x dp = {{v}}",
            mb * dp,
        ),
    ]
    if workload.flash_attention:
        rule = f"2*cp must divide seq_len={seq}; cp={{v}}"
        rules.append(("layout.cp", seq % (2 * cp) != 0, rule, cp))
    else:
        rules.append(("layout.cp", cp > 1, "cp={v}: context parallelism needs flash attention", cp))
    rule = "zero_stage={v} with dp*cp = 1 shards nothing (same as zero_stage=0)"
    rules.append(("layout.zero_stage", (zero > 0) & (dp * cp == 1), rule, zero))
    # Rules about the model alone are one bool for every layout: broadcast them.
    shape = np.shape(tp)
    return [(f, np.broadcast_to(b, shape), r, np.broadcast_to(v, shape)) for f, b, r, v in rules]


def first_broken(rules: list[Violation]) -> np.ndarray:
    """Each layout's first broken rule (an index into ``rules``), -1 where it breaks none."""
    out = np.full(np.shape(rules[0][1]), -1)
    for i, (_, broken, _, _) in enumerate(rules):
        out[(out < 0) & np.asarray(broken)] = i
    return out


def split_of(model: ModelSpec, pp: int, vp: int) -> PipelineSplit | bool | None:
    """The split ``auto`` gives ``pp x vp`` stages (None: even), or False where none fits."""
    return _splits(model).setdefault((pp, vp), _find_split(model, pp, vp))


@per_model
def _splits(model: ModelSpec) -> dict[tuple[int, int], PipelineSplit | bool | None]:
    return {}


def _find_split(model: ModelSpec, pp: int, vp: int) -> PipelineSplit | bool | None:
    try:
        return model_split(model, pp, vp, "auto")
    except SpecError:
        return False


def _splittable(model: ModelSpec, pp: np.ndarray, vp: np.ndarray) -> np.ndarray:
    """Whether each layout's ``pp x vp`` has a split (one lookup per distinct pair)."""
    pairs, inverse = np.unique(np.stack([pp, vp]), axis=1, return_inverse=True)
    ok = np.array([split_of(model, int(a), int(b)) is not False for a, b in pairs.T], dtype=bool)
    return ok[inverse.ravel()]


def by_split(
    model: ModelSpec, g: dict[str, np.ndarray]
) -> Iterator[tuple[dict[str, np.ndarray], PipelineSplit | None]]:
    """Valid layouts ``g`` in evaluation groups: every evenly split one together (arrays of
    ``pp``), then those of each uneven ``pp x vp`` (one split each)."""
    if not g["tp"].size:
        return
    even = model.num_layers % (g["pp"] * g["vp"]) == 0
    if even.any():
        yield {k: v[even] for k, v in g.items()}, None
    if even.all():
        return
    rest = {k: v[~even] for k, v in g.items()}
    pairs, inverse = np.unique(np.stack([rest["pp"], rest["vp"]]), axis=1, return_inverse=True)
    inverse = inverse.ravel()
    for i, (pp, vp) in enumerate(pairs.T):
        split = split_of(model, int(pp), int(vp))
        assert isinstance(split, PipelineSplit)  # the rules kept only splittable layouts
        chosen = inverse == i
        yield {k: v[chosen] for k, v in rest.items()}, split


def refusal(
    label: Mapping[str, str], layouts: Mapping[str, np.ndarray], j: int, fld: str, reason: str
) -> dict[str, Any]:
    """One refused layout as reported: its block, its axes, the field and the reason."""
    return {**label, **{k: int(layouts[k][j]) for k in AXES}, "field": fld, "reason": reason}


def rule_refusals(
    label: Mapping[str, str],
    layouts: Mapping[str, np.ndarray],
    rules: list[Violation],
    broken: np.ndarray,
) -> list[dict[str, Any]]:
    """The layouts that break a rule (``broken``: ``first_broken``'s), each with the first."""
    out = []
    for j in np.flatnonzero(broken >= 0):
        fld, _, rule, value = rules[broken[j]]
        out.append(refusal(label, layouts, int(j), fld, rule.format(v=int(value[j]))))
    return out
