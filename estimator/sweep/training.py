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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from estimator.catalog import accelerator_ids, get_accelerator, price
from estimator.counts.flops import Recompute, training_flops
from estimator.errors import SpecError
from estimator.finetune import FULL, FineTune, adapters, check_precision
from estimator.layout.parallel import Parallelism, Violation, layout_violations
from estimator.layout.pipeline import SPLITS, PipelineSplit, model_split
from estimator.memo import per_model
from estimator.memory.training import (
    HOST_TERMS,
    OPTIMIZERS,
    OVERHEAD_TERMS,
    RECOMPUTE_POLICIES,
    RECOMPUTE_RULE,
    TrainingSetup,
    candidate_stages,
    check_mtp,
    check_op_policy,
    check_recompute_modules,
    check_seq_len,
    most_loaded_terms,
)
from estimator.memory.verdict import FIT_VERDICTS, MIN_HEADROOM, fit_index
from estimator.offload import NO_OFFLOAD, Offload, host_of
from estimator.spec.accelerator import GIB, Accelerator
from estimator.spec.cluster import cluster_of
from estimator.spec.model import ModelSpec
from estimator.spec.precision import Precision, get_precision
from estimator.sweep.pareto import front
from estimator.terms import TRAINING_MEMORY
from estimator.timing.rates import derive_rates
from estimator.timing.stacks import stack_profile
from estimator.timing.training import (
    BREAKDOWN,
    TimingOptions,
    check_ep_comm_overlap_stack,
    training_time_terms,
)

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

# Ten data-centre training accelerators of the catalog.
DEFAULT_ACCELERATORS = (
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "h100-sxm-80gb",
    "h200-sxm-141gb",
    "b200",
    "gb200",
    "b300",
    "gb300",
    "mi300x",
    "mi325x",
)
DEFAULT_MAX_LAYOUTS = 2_000_000
RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full")
AXES = ("num_gpus", "tp", "pp", "cp", "ep", "vp", "zero", "micro_batch")
# The dtype of a sweep's code columns (accelerator, stack, precision, recompute, pipeline split,
# fit verdict: an index into a short list of names): two bytes each, the columns of a million
# layouts concatenated in a few milliseconds.
CODE = np.int16

Objective = Literal["cost", "time"]


class SweepTooLarge(SpecError):
    """A search space above the configured maximum; ``size`` is its layout count."""

    def __init__(self, size: int, maximum: int, axes: Mapping[str, int]) -> None:
        widest = ", ".join(
            f"{k} ({n} values)" for k, n in sorted(axes.items(), key=lambda a: -a[1])[:3]
        )
        super().__init__(
            "space",
            f"{size:,} layouts exceed the maximum of {maximum:,}; narrow the widest axes: {widest}",
            size,
        )
        self.size = size
        self.maximum = maximum


@dataclass(frozen=True)
class TrainingWorkload:
    """What to train. ``tokens`` gives time to train and cost per run; ``deadline_s`` and
    ``budget_usd`` filter the feasible set, as ``min_headroom`` does: the share of each GPU's
    memory a feasible layout leaves free (a plan that fills a GPU to the last 0.2 GiB fails on
    the first allocator hiccup or longer batch); ``prices`` (USD per GPU-hour by accelerator
    id) override the catalog's defaults; ``finetune`` is what every layout trains (full, LoRA
    or QLoRA, ``estimator.finetune``)."""

    seq_len: int
    global_batch_size: int
    tokens: float | None = None
    deadline_s: float | None = None
    budget_usd: float | None = None
    min_headroom: float = MIN_HEADROOM
    prices: Mapping[str, float] = field(default_factory=dict)
    flash_attention: bool = True
    optimizer: str = "adamw"
    finetune: FineTune = FULL
    offload: Offload = NO_OFFLOAD
    moe_imbalance: float = 1.0
    moe_capacity_factor: float | None = None
    recompute_modules: tuple[str, ...] = ()  # Megatron-Core's, in the selective layouts
    mtp_layers: int = 0  # multi-token-prediction depths trained (``TrainingSetup.mtp_layers``)
    mtp_repeated: bool = False  # one depth's weights for every depth (``mtp_repeated``)


@dataclass(frozen=True)
class TrainingSearch:
    """The axes of a training sweep. ``ep=None`` means 1 for dense models and the powers of two
    up to the expert count (at most 64) for mixture-of-experts models; ``dp`` restricts the data
    parallelism the GPU count leaves to the listed values; ``zero`` 1 stands for
    ZeRO-1 and Megatron's distributed optimizer alike. TP stays inside a node
    (``gpus_per_node``, default each accelerator's, or its NVLink domain if larger).
    ``accelerators`` are catalog ids or specs given as they are (a team's own hardware).
    ``scale_up_domain``, ``scale_out_gbit_per_s`` and ``oversubscription`` state the network
    as a single plan's cluster does, for every accelerator (None: each one's catalog values)."""

    accelerators: tuple[str | Accelerator, ...] = DEFAULT_ACCELERATORS
    num_gpus: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    pp: tuple[int, ...] = (1, 2, 4, 8, 16)
    cp: tuple[int, ...] = (1,)
    ep: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None  # None: whatever num_gpus / (tp pp cp) leaves
    vp: tuple[int, ...] = (1,)
    zero: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = RECOMPUTE
    micro_batch: tuple[int, ...] = (1, 2, 4, 8)
    precision: tuple[str, ...] = ("bf16",)
    gpus_per_node: int | None = None
    # the network every accelerator's layouts are timed over, as a single plan's cluster
    # (``spec.cluster.cluster_of``; None: the accelerator's catalog values)
    scale_up_domain: int | None = None
    scale_out_gbit_per_s: float | None = None
    oversubscription: float = 1.0


@dataclass(frozen=True)
class Recommendation:
    """One recommended layout: its row of the sweep and why it wins."""

    rank: int
    row: dict[str, Any]
    why: tuple[str, ...]


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


def _axes(model: ModelSpec, space: TrainingSearch) -> dict[str, tuple[int, ...]]:
    ep = space.ep
    if ep is None:
        if model.moe is None:
            ep = (1,)
        else:
            ep = tuple(2**i for i in range(7) if model.moe.num_experts % 2**i == 0)
    return {
        "num_gpus": space.num_gpus,
        "tp": space.tp,
        "pp": space.pp,
        "cp": space.cp,
        "ep": ep,
        "vp": space.vp,
        "zero": space.zero,
        "micro_batch": space.micro_batch,
    }


def _check(model: ModelSpec, workload: TrainingWorkload, space: TrainingSearch) -> None:
    for name in ("accelerators", "precision", "recompute"):
        if not getattr(space, name):
            raise SpecError(f"space.{name}", "must list at least one value", ())
    given = {a.id for a in map(accelerator_spec, space.accelerators)}
    adapters(model, workload.finetune)
    for prec in space.precision:
        check_precision(workload.finetune, get_precision(prec))
    for rec in space.recompute:
        if rec not in RECOMPUTE_POLICIES:
            raise SpecError("space.recompute", f"values {RECOMPUTE_RULE}", rec)
        if rec == "op":
            try:
                check_op_policy(model, workload.finetune, workload.flash_attention)
            except SpecError as exc:
                raise SpecError("space.recompute", exc.rule, rec) from None
    if workload.recompute_modules:
        if "selective" not in space.recompute:
            rule = "apply to the selective layouts: add 'selective' to the recompute values"
            raise SpecError("recompute_modules", rule, list(workload.recompute_modules))
        check_recompute_modules(model, workload.recompute_modules)
    if workload.mtp_layers or workload.mtp_repeated:
        check_mtp(
            TrainingSetup(
                workload.seq_len,
                finetune=workload.finetune,
                mtp_layers=workload.mtp_layers,
                mtp_repeated=workload.mtp_repeated,
            ),
        )
    for name, values in _axes(model, space).items():
        if not values:
            raise SpecError(f"space.{name}", "must list at least one value", values)
        for v in values:
            if type(v) is not int or v < (0 if name == "zero" else 1):
                raise SpecError(f"space.{name}", "values must be integers >= 1", v)
    for v in space.dp or ():
        if type(v) is not int or v < 1:
            raise SpecError("space.dp", "values must be integers >= 1", v)
    if space.dp is not None and not space.dp:
        raise SpecError("space.dp", "must list at least one value (or be None)", ())
    if any(z > 3 for z in space.zero):
        raise SpecError("space.zero", "values must be 0, 1, 2 or 3", space.zero)
    if space.gpus_per_node is not None and space.gpus_per_node < 1:
        raise SpecError("space.gpus_per_node", "must be >= 1", space.gpus_per_node)
    check_seq_len(model, workload.seq_len, "workload.seq_len")
    if workload.global_batch_size < 1:
        raise SpecError("workload.global_batch_size", "must be >= 1", workload.global_batch_size)
    if workload.optimizer not in OPTIMIZERS:
        raise SpecError(
            "workload.optimizer", f"must be one of {', '.join(OPTIMIZERS)}", workload.optimizer
        )
    for name in ("tokens", "deadline_s", "budget_usd"):
        v = getattr(workload, name)
        if v is not None and not v > 0:
            raise SpecError(f"workload.{name}", "must be > 0", v)
    if not 0 <= workload.min_headroom < 1:
        raise SpecError("workload.min_headroom", "must be in [0, 1)", workload.min_headroom)
    if workload.deadline_s is not None and workload.tokens is None:
        raise SpecError("workload.deadline_s", "needs workload.tokens (time to train)", None)
    if workload.budget_usd is not None and workload.tokens is None:
        raise SpecError("workload.budget_usd", "needs workload.tokens (cost per run)", None)
    for acc, p in workload.prices.items():
        if acc not in given:
            get_accelerator(acc)
        if not p >= 0:
            raise SpecError(f"workload.prices.{acc}", "must be >= 0", p)


def sweep_size(model: ModelSpec, space: TrainingSearch, stacks: int = 1) -> int:
    """Layouts a sweep enumerates (before any rule) under ``stacks`` software stack profiles,
    known before it runs."""
    size = stacks * len(space.accelerators) * len(space.precision) * len(space.recompute)
    for values in _axes(model, space).values():
        size *= len(values)
    return size


def accelerator_spec(acc: str | Accelerator) -> Accelerator:
    """An accelerator of a search space: a catalog id looked up, a spec used as it is."""
    return acc if isinstance(acc, Accelerator) else get_accelerator(acc)


def price_of(acc: str, prices: Mapping[str, float]) -> float | None:
    """The user's price for an accelerator, else the catalog's default, else None (always
    None for a spec outside the catalog that the prices leave out)."""
    if acc in prices:
        return float(prices[acc])
    if acc not in accelerator_ids():
        return None
    p = price(acc)
    return None if p is None else p.usd_per_gpu_hour


def _grid(axes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    mesh = np.meshgrid(*(np.asarray(v, dtype=np.int64) for v in axes.values()), indexing="ij")
    return {name: m.ravel() for name, m in zip(axes, mesh, strict=True)}


def _rules(
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
        [_split_of(model, int(a), int(b)) is not False for a, b in zip(pp, vp, strict=True)]
        if pp.size < 64
        else _splittable(model, pp, vp),
        dtype=bool,
    )
    rule = (
        f"pp*vp={{v}} virtual stages exceed the {model.num_layers} layers plus the embedding and"
        " the loss"
    )
    rules += [
        *layout_violations(
            model,
            tp=tp,
            pp=pp,
            dp=np.maximum(dp, 1),
            cp=cp,
            ep=ep,
            etp=tp,
            vp=vp,
            training=True,
            pipeline_rule=False,
        ),
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
    shape = tp.shape
    return [(f, np.broadcast_to(b, shape), r, np.broadcast_to(v, shape)) for f, b, r, v in rules]


def _split_of(model: ModelSpec, pp: int, vp: int) -> PipelineSplit | bool | None:
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
    ok = np.array([_split_of(model, int(a), int(b)) is not False for a, b in pairs.T], dtype=bool)
    return ok[inverse.ravel()]


def _by_split(
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
        split = _split_of(model, int(pp), int(vp))
        assert isinstance(split, PipelineSplit)  # the rules kept only splittable layouts
        chosen = inverse == i
        yield {k: v[chosen] for k, v in rest.items()}, split


def _refusal(
    label: Mapping[str, str], layouts: Mapping[str, np.ndarray], j: int, fld: str, reason: str
) -> dict[str, Any]:
    """One refused layout as reported: its block, its axes, the field and the reason."""
    return {**label, **{k: int(layouts[k][j]) for k in AXES}, "field": fld, "reason": reason}


def _evaluate(
    model: ModelSpec,
    acc: Accelerator,
    precision: Precision,
    recompute: Recompute,
    g: Mapping[str, Any],  # numpy arrays, typed loosely: the layout dataclasses declare ints
    workload: TrainingWorkload,
    options: TimingOptions,
    usd_per_gpu_hour: float,
    split: PipelineSplit | None = None,
    peak_range: PeakRange | None = None,
) -> dict[str, np.ndarray]:
    """Memory, time and cost of valid layouts ``g`` (arrays), by the single-estimate formulas;
    with ``split``, layouts that share one uneven ``pp x vp`` (given as ints). ``peak_range``:
    the likely range of a layout's peak as factors of the planner's, by GPU count, where
    published measurements give one (``sweep_training``)."""
    tp, pp, cp, ep, vp, zero, mb, n = (
        g[k] for k in ("tp", "pp", "cp", "ep", "vp", "zero", "micro_batch", "num_gpus")
    )
    if split is not None:
        pp, vp = int(pp[0]), int(vp[0])
    dp = n // (tp * pp * cp)
    p = Parallelism(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        vp=vp,
        sequence_parallel=tp > 1,
        zero_stage=zero,
        stage_layers=None if split is None else split.stage_layers,
    )
    gbs = workload.global_batch_size
    setup = TrainingSetup(
        workload.seq_len,
        micro_batch_size=mb,
        global_batch_size=gbs,
        recompute=recompute,
        flash_attention=workload.flash_attention,
        optimizer=workload.optimizer,  # type: ignore[arg-type]
        finetune=workload.finetune,
        offload=workload.offload,
        moe_imbalance=workload.moe_imbalance,
        moe_capacity_factor=workload.moe_capacity_factor,
        recompute_modules=workload.recompute_modules if recompute == "selective" else (),
        mtp_layers=workload.mtp_layers,
        mtp_repeated=workload.mtp_repeated,
        # the stack's, as a single estimate takes it by default (FSDP2 frees them between steps)
        gradients_per_step=stack_profile(options.stack).gradients_per_step,
    )
    mem = most_loaded_terms(model, p, setup, precision, acc.fp8_any_layout)
    t = training_time_terms(
        model,
        acc,
        p,
        setup,
        precision,
        params_on_gpu=mem["params_on_gpu"],
        optimizer_states_bytes=mem["optimizer_states_bytes"],
        stages=candidate_stages(model, pp, p.stage_layers),
        options=options,
        trainable_params_on_gpu=mem["trainable_params_on_gpu"],
        expert_params_on_gpu=mem["expert_params_on_gpu"],
    )
    flops = training_flops(
        model,
        workload.seq_len,
        gbs,
        recompute,
        workload.finetune,
        setup.selective_modules,
        setup.mtp_layers,
    )
    step = t["step_s"]
    rates = derive_rates(
        step_s=step,
        tokens_per_step=gbs * workload.seq_len,
        gpus=n,
        model_flops=flops.model,
        hardware_flops=flops.hardware,
        peak_flop_per_s=acc.peak(precision.compute),
        usd_per_gpu_hour=usd_per_gpu_hour,
        tokens=workload.tokens,
    )
    out = {
        "dp": dp,
        "memory_bytes": mem["total_bytes"],
        "capacity_bytes": np.full(tp.shape, float(acc.memory_bytes)),
        "memory_stage": np.broadcast_to(mem["stage"], tp.shape),
        **{k: mem[k] for k in ROW_MEMORY},
        "step_s": step,
        **{k: np.broadcast_to(t[k], tp.shape).astype(float) for k in BREAKDOWN},
        "microbatches": t["microbatches"],
        "tokens_per_s": rates.tokens_per_s,
        "tokens_per_s_per_gpu": rates.tokens_per_s_per_gpu,
        "mfu": rates.mfu,
        "hfu": rates.hfu,
        "usd_per_gpu_hour": np.full(tp.shape, usd_per_gpu_hour),
        "usd_per_1m_tokens": rates.usd_per_1m_tokens,
        "pipeline_split": np.full(tp.shape, SPLITS.index(split.rule) if split else 1, CODE),
    }
    if workload.tokens is not None:
        out |= {
            "time_to_train_s": rates.time_to_train_s,
            "gpu_hours": rates.gpu_hours,
            "cost_usd": rates.cost_usd,
        }
    out["headroom_bytes"] = out["capacity_bytes"] - out["memory_bytes"]
    out["fits"] = out["memory_bytes"] <= out["capacity_bytes"]
    out["fit"] = _fit_codes(mem, out["capacity_bytes"], n, acc, workload, options, peak_range)
    if workload.offload.any:  # what it offloads must fit its host's memory too, as a plan's
        out["fits"] &= out["fit"] < 2
    return out


# The likely range of a layout's peak memory as factors of the planner's (low, high), for an
# accelerator, a software stack and a GPU count; None where no measurement bounds it.
PeakRange = Callable[[Accelerator, str, int], tuple[float, float] | None]


def _fit_codes(
    mem: Mapping[str, Any],
    capacity: np.ndarray,
    gpus: np.ndarray,
    acc: Accelerator,
    workload: TrainingWorkload,
    options: TimingOptions,
    peak_range: PeakRange | None,
) -> np.ndarray:
    """Each layout's fit verdict (an index in ``FIT_VERDICTS``) by the single plan's rule
    (``verdict.fit_index``, ``verdict.training_fit``): the likely range of its peak decides
    where measurements give one at its GPU count, the named overheads elsewhere; what it
    offloads overflowing its host's memory does not fit."""
    total = np.broadcast_to(mem["total_bytes"], capacity.shape).astype(float)
    overheads = sum(mem[k] for k in OVERHEAD_TERMS)
    codes = np.asarray(fit_index(total, capacity, overheads), dtype=CODE)
    if peak_range is not None:
        for count in np.unique(gpus).tolist():
            factors = peak_range(acc, options.stack, int(count))
            if factors is None:
                continue
            rows = gpus == count
            low, high = factors
            codes[rows] = fit_index(
                total[rows], capacity[rows], 0.0, (total[rows] * low, total[rows] * high)
            )
    if workload.offload.any:
        host = host_of(acc.id, workload.offload).memory_bytes
        codes = np.where(sum(mem[k] for k in HOST_TERMS) > host, 2, codes).astype(CODE)
    return codes


def _groups(
    space: TrainingSearch, specs: tuple[Accelerator, ...], stacks: tuple[TimingOptions, ...]
) -> Iterator[tuple[int, Accelerator, int, TimingOptions, int, str, int, Recompute]]:
    for ai, acc in enumerate(specs):
        for si, opts in enumerate(stacks):
            for pi, prec in enumerate(space.precision):
                for rec in space.recompute:
                    ri = RECOMPUTE_POLICIES.index(rec)
                    yield ai, acc, si, opts, pi, prec, ri, rec  # type: ignore[misc]


def _stack_options(
    options: TimingOptions | tuple[TimingOptions, ...] | None,
) -> tuple[TimingOptions, ...]:
    """The timing options of each software stack a sweep compares, checked: one stack each."""
    if options is None:
        return (TimingOptions(),)
    stacks = options if isinstance(options, tuple) else (options,)
    if not stacks:
        raise SpecError("stack", "must list at least one software stack profile", ())
    names = [o.stack for o in stacks]
    if len(set(names)) < len(names):
        raise SpecError("stack", "must list each software stack profile once", names)
    for o in stacks:
        check_ep_comm_overlap_stack(o)
    return stacks


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

    ``objective`` ranks the recommendations: ``"cost"`` (USD per token; the default when a price
    is known) or ``"time"`` (tokens/s). ``options``: the timing options of one software stack
    profile, or a tuple of several (one each), which the sweep compares as an axis.
    ``progress(done, total)`` is called after each (accelerator, stack, precision, recompute)
    block. ``peak_range(accelerator, stack, num_gpus)``: the likely range of a layout's peak
    memory as factors of the planner's, where published measurements of the stack give one (the
    service's accuracy model): each row's ``fit`` verdict is then the single plan's, and a
    layout whose likely peak crosses its GPU's memory is counted ``tight``, not feasible.
    """
    space = space or TrainingSearch()
    stacks = _stack_options(options)
    _check(model, workload, space)
    axes = _axes(model, space)
    size = sweep_size(model, space, len(stacks))
    if size > max_layouts:
        widths = {k: len(v) for k, v in axes.items()} | {
            "stack": len(stacks),
            "accelerators": len(space.accelerators),
            "recompute": len(space.recompute),
            "precision": len(space.precision),
        }
        raise SweepTooLarge(size, max_layouts, widths)
    grid = _grid(axes)
    parts: list[dict[str, np.ndarray]] = []
    rejected: list[dict[str, Any]] = []
    counts = {"enumerated": size, "invalid": 0, "evaluated": 0, "out_of_memory": 0}
    specs = tuple(map(accelerator_spec, space.accelerators))
    ids = tuple(a.id for a in specs)
    groups = list(_groups(space, specs, stacks))
    precisions = {name: get_precision(name) for name in space.precision}
    dp_all = grid["num_gpus"] // (grid["tp"] * grid["pp"] * grid["cp"])
    rule_cache: dict[int, tuple[list[Violation], np.ndarray]] = {}  # by GPUs per node
    for done, (ai, acc, si, opts, pi, prec_name, ri, rec) in enumerate(groups, 1):
        acc_id = acc.id
        cluster = cluster_of(
            acc, scale_up_domain=space.scale_up_domain,
            scale_out_gbit_per_s=space.scale_out_gbit_per_s,
            oversubscription=space.oversubscription,
        )  # fmt: skip
        opts = replace(opts, cluster=cluster)
        node = space.gpus_per_node or max(acc.gpus_per_node, cluster.scale_up_domain)
        if node not in rule_cache:
            rules = _rules(model, grid, dp_all, workload, node, space.dp)
            first_broken = np.full(dp_all.shape, -1)
            for i, (_, broken, _, _) in enumerate(rules):
                first_broken[(first_broken < 0) & broken] = i
            rule_cache[node] = (rules, first_broken)
        rules, first_broken = rule_cache[node]
        ok = first_broken < 0
        counts["invalid"] += int((~ok).sum())

        label = {
            "accelerator": acc_id,
            "stack": opts.stack,
            "precision": prec_name,
            "recompute": rec,
        }
        if keep_rejected:
            for j in np.flatnonzero(~ok):
                fld, _, rule, value = rules[first_broken[j]]
                rejected.append(_refusal(label, grid, int(j), fld, rule.format(v=int(value[j]))))
        usd = price_of(acc_id, workload.prices)
        for g, split in _by_split(model, {k: v[ok] for k, v in grid.items()}):
            cols = _evaluate(
                model,
                acc,
                precisions[prec_name],
                rec,
                g,
                workload,
                opts,
                math.nan if usd is None else usd,
                split,
                peak_range,
            )
            cols |= {k: g[k] for k in AXES}
            for name, code in (
                ("accelerator", ai),
                ("stack", si),
                ("precision", pi),
                ("recompute", ri),
            ):
                cols[name] = np.full(g["tp"].shape, code, CODE)
            parts.append(cols)
            counts["evaluated"] += int(g["tp"].size)
            if keep_rejected:
                for j in np.flatnonzero(~cols["fits"]):
                    need, cap = cols["memory_bytes"][j] / GIB, cols["capacity_bytes"][j] / GIB
                    reason = f"out of memory: needs {need:.1f} GiB of {cap:.1f} GiB"
                    rejected.append(_refusal(label, g, int(j), "memory", reason))
        if progress is not None:
            progress(done, len(groups))
    if parts:
        columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    else:
        columns = _empty(workload)
    # Each evaluated layout is counted once, under the first filter it fails, so that
    # evaluated = out_of_memory + tight + under_headroom + past_deadline + over_budget + feasible
    # (tight: fits by the planner's figure, but its likely peak crosses the GPU's memory).
    fits = columns["fits"].astype(bool)
    counts["out_of_memory"] = int((~fits).sum())
    feasible = fits.copy()
    limit = columns["capacity_bytes"] * (1 - workload.min_headroom)
    for name, passes in (
        ("tight", columns["fit"] == 0),
        ("under_headroom", columns["memory_bytes"] <= limit),
        ("past_deadline", None if workload.deadline_s is None else (
            columns["time_to_train_s"] <= workload.deadline_s)),
        ("over_budget", None if workload.budget_usd is None else (
            np.nan_to_num(columns["cost_usd"], nan=np.inf) <= workload.budget_usd)),
    ):  # fmt: skip
        failed = np.zeros_like(feasible) if passes is None else feasible & ~passes
        counts[name] = int(failed.sum())
        feasible &= ~failed
    idx = np.flatnonzero(feasible)
    counts["feasible"] = int(idx.size)
    priced = idx[np.isfinite(columns["usd_per_1m_tokens"][idx])]
    notes = [*model.notes, *(stack_profile(o.stack).note() for o in stacks)]
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
    unpriced = sorted({a for a in ids if price_of(a, workload.prices) is None})
    if unpriced:
        notes.append(
            f"No default price for {', '.join(unpriced)}: their costs are empty until a price "
            "is given (workload.prices)."
        )
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
        rejected=rejected,
        feasible=idx,
        pareto_cost=front(
            columns["tokens_per_s"][priced], -columns["usd_per_1m_tokens"][priced], priced
        ),
        pareto_memory=front(columns["tokens_per_s"][idx], columns["headroom_bytes"][idx], idx),
        recommendations=[],
        objective=objective,
        notes=tuple(notes),
    )
    sweep.recommendations = _recommend(sweep, priced if objective == "cost" else idx, top_k)
    return sweep


# The memory terms a sweep row keeps (the largest; the row's memory_bytes sums them all), in
# the registry's order.
ROW_MEMORY = tuple(
    t.key
    for t in TRAINING_MEMORY
    if t.key
    in {
        "weights_bytes",
        "gradients_bytes",
        "master_weights_bytes",
        "optimizer_states_bytes",
        "activations_bytes",
    }
)
# The columns of a sweep, in ``_evaluate``'s order, and those only a token count adds.
COLUMNS = (
    "dp",
    "memory_bytes",
    "capacity_bytes",
    "memory_stage",
    *ROW_MEMORY,
    "step_s",
    *BREAKDOWN,
    "microbatches",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "hfu",
    "usd_per_gpu_hour",
    "usd_per_1m_tokens",
    "pipeline_split",
)
TOKEN_COLUMNS = ("time_to_train_s", "gpu_hours", "cost_usd")
INT_COLUMNS = {
    "dp",
    "memory_stage",
    "microbatches",
    *AXES,
    "accelerator",
    "stack",
    "precision",
    "recompute",
    "pipeline_split",
    "fit",
}


def _empty(workload: TrainingWorkload) -> dict[str, np.ndarray]:
    """The columns of a sweep in which no layout was evaluated."""
    names = [*COLUMNS, *(TOKEN_COLUMNS if workload.tokens is not None else ()), "headroom_bytes"]
    out = {k: np.zeros(0, dtype=np.int64 if k in INT_COLUMNS else float) for k in names}
    out["fits"] = np.zeros(0, dtype=bool)
    for k in (*AXES, "accelerator", "stack", "precision", "recompute", "fit"):
        out[k] = np.zeros(0, dtype=np.int64)
    return out


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


def _recommend(sweep: TrainingSweep, candidates: np.ndarray, k: int) -> list[Recommendation]:
    """The best ``k`` layouts by the objective, one per shape: a layout that differs from a
    better one only in its GPU count (more data parallelism) is folded into it."""
    c = sweep.columns
    if not candidates.size:
        return []
    if sweep.objective == "cost":
        order = np.lexsort((-c["tokens_per_s"][candidates], c["usd_per_1m_tokens"][candidates]))
    else:
        order = np.argsort(-c["tokens_per_s"][candidates], kind="stable")
    fastest = int(candidates[np.argmax(c["tokens_per_s"][candidates])])
    out: list[Recommendation] = []
    seen: set[tuple[int, ...]] = set()
    for i in candidates[order]:
        shape = tuple(int(c[key][i]) for key in _SHAPE)
        if shape in seen:
            continue
        seen.add(shape)
        rank = len(out) + 1
        out.append(
            Recommendation(rank, sweep.row(int(i)), tuple(_why(sweep, int(i), fastest, rank)))
        )
        if len(out) == k:
            break
    if len(sweep.stacks) > 1 and out:
        out += _best_per_stack(sweep, candidates[order], fastest, out)
    return out


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
        if sweep.objective == "cost":
            gap = f"{r['usd_per_1m_tokens'] / best['usd_per_1m_tokens']:.2f}x the cost per token"
        else:
            gap = f"{r['tokens_per_s'] / best['tokens_per_s']:.0%} of the throughput"
        rank = len(out) + len(added) + 1
        first = f"the best layout under {name}: {gap} of the best of all ({best['stack']})"
        added.append(Recommendation(rank, r, (first, *_why(sweep, i, fastest, rank))))
    return added


_SIMPLER = {"pp": 1, "tp": 1, "zero": 0, "recompute": 0, "micro_batch": 1}
_TERM_NAMES = {t.key: t.label.lower() for t in TRAINING_MEMORY if t.key in ROW_MEMORY}


def _why(sweep: TrainingSweep, i: int, fastest: int, rank: int) -> list[str]:
    c = sweep.columns
    r = sweep.row(i)
    step = r["step_s"]
    exposed = sum(r[k] for k in BREAKDOWN if k.endswith("_comm"))
    lines = []
    if rank == 1:
        lines.append("lowest cost per token" if sweep.objective == "cost" else "highest throughput")
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
