"""What a training sweep takes: the workload (``TrainingWorkload``), the search space's axes
(``TrainingSearch``) and the software stacks compared, each checked at the boundary with the
field it names; the space's size, known before anything runs (a space above ``max_layouts`` is
refused with the count and the axes to narrow); and each accelerator's price."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from estimator.catalog import accelerator_ids, get_accelerator, price
from estimator.counts.flops import Recompute
from estimator.energy import NoPowerFigure, PowerSetup, power_per_gpu
from estimator.errors import SpecError
from estimator.finetune import FULL, FineTune, adapters, check_precision
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import get_precision
from estimator.layout.parallel import Violation
from estimator.memory.training import (
    OPTIMIZERS,
    RECOMPUTE_POLICIES,
    RECOMPUTE_RULE,
    TrainingSetup,
    check_mtp,
    check_op_policy,
    check_recompute_modules,
    check_seq_len,
)
from estimator.memory.verdict import MIN_HEADROOM
from estimator.offload import NO_OFFLOAD, Offload
from estimator.timing.effective import Reliability
from estimator.timing.stacks import RUNS, auto_takes, runs_layout
from estimator.timing.training import TimingOptions, check_ep_comm_overlap_stack

__all__ = [
    "AXES",
    "DEFAULT_ACCELERATORS",
    "DEFAULT_MAX_LAYOUTS",
    "RECOMPUTE",
    "SweepTooLarge",
    "TrainingSearch",
    "TrainingWorkload",
    "accelerator_spec",
    "axes_of",
    "check_search",
    "checked_size",
    "facility_w_of",
    "price_of",
    "stack_axis",
    "stack_options",
    "stack_rule",
    "sweep_size",
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
    budget_usd: float | None = None  # deadline and budget: of the effective run (``reliability``)
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
    power: PowerSetup = field(default_factory=PowerSetup)  # energy's (``estimator.energy``)
    reliability: Reliability = field(default_factory=Reliability)  # ``timing.effective``
    # Layouts whose objective is within this share of the best are ties (the app passes the
    # validation's measured band, ``estimator.accuracy.tie_band``); 0: no ties called.
    tie_band: float = 0.0


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


def axes_of(model: ModelSpec, space: TrainingSearch) -> dict[str, tuple[int, ...]]:
    """The numeric axes of ``space`` for ``model``, ``ep=None`` resolved (1 for a dense model,
    the powers of two up to 64 dividing the expert count of a mixture-of-experts one)."""
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


def check_search(model: ModelSpec, workload: TrainingWorkload, space: TrainingSearch) -> None:
    """Refuse a workload or space a sweep cannot run, naming the field and the rule
    (``SpecError``): empty axes, values out of range, a fine-tune, precision, recompute policy
    or MTP setting the model does not take, a deadline or budget without a token count."""
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
    for name, values in axes_of(model, space).items():
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
    for values in axes_of(model, space).values():
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


def facility_w_of(acc: Accelerator, power: PowerSetup) -> float | None:
    """One GPU's power at the facility (``energy.power_per_gpu``), None where no figure is
    published or given (the layout's energy is then empty)."""
    try:
        return power_per_gpu(acc, power).facility_w
    except NoPowerFigure:
        return None


def checked_size(model: ModelSpec, space: TrainingSearch, stacks: int, max_layouts: int) -> int:
    """The layouts a sweep of ``space`` under ``stacks`` profiles enumerates, or
    ``SweepTooLarge`` with the widths of its axes where they exceed ``max_layouts``."""
    size = sweep_size(model, space, stacks)
    if size > max_layouts:
        widths = {k: len(v) for k, v in axes_of(model, space).items()} | {
            "stack": stacks,
            "accelerators": len(space.accelerators),
            "recompute": len(space.recompute),
            "precision": len(space.precision),
        }
        raise SweepTooLarge(size, max_layouts, widths)
    return size


def stack_options(
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


def stack_axis(stacks: tuple[TimingOptions, ...]) -> int:
    """How many times a sweep enumerates each layout: once per stack asked for, once in all
    for the stacks ``auto`` picks between (each layout goes to one of them)."""
    return sum(not o.auto for o in stacks) + any(o.auto for o in stacks)


def stack_rule(
    options: TimingOptions, g: Mapping[str, np.ndarray]
) -> tuple[list[Violation], np.ndarray]:
    """A stack's part of a sweep's rules over layouts ``g``: a stack asked for refuses the
    layouts it cannot run (``stacks.runs_layout``; ``stacks.RUNS`` says what it runs); a stack
    ``auto`` picked has no rule but times only the layouts auto gives it (the mask)."""
    axes = (g["tp"], g["pp"], g["cp"], g["ep"], g["vp"], g["zero"])
    if options.auto:
        return [], np.asarray(auto_takes(options.stack, *axes), dtype=bool)
    runs = np.asarray(runs_layout(options.stack, *axes), dtype=bool)
    rule = f"stack {options.stack} runs {RUNS[options.stack]}; this layout has tp*pp*cp*ep={{v}}"
    size = g["tp"] * g["pp"] * g["cp"] * g["ep"]
    return [("stack", ~runs, rule, size)], np.ones(runs.shape, dtype=bool)
