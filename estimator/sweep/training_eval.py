"""A training sweep's evaluation, one block at a time: for each (accelerator, software stack,
precision, recompute policy) block (``Block``), its valid layouts' numeric axes go as numpy
arrays through the functions a single estimate calls (``memory.training.most_loaded_terms``,
``timing.training.training_time_terms``, ``timing.rates.derive_rates``), so each layout's
numbers equal ``estimate_training``'s for that layout; each row gets the single plan's fit
verdict (``fit_codes``). The columns a sweep keeps are named here once (``COLUMNS``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from estimator.context import Context
from estimator.counts.flops import Recompute, training_flops
from estimator.energy import energy_of
from estimator.inputs.accelerator import GIB, Accelerator
from estimator.inputs.cluster import cluster_of
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision, get_precision
from estimator.layout.parallel import Parallelism
from estimator.layout.pipeline import SPLITS, PipelineSplit
from estimator.memory.training import (
    HOST_TERMS,
    OVERHEAD_TERMS,
    RECOMPUTE_POLICIES,
    TrainingSetup,
    candidate_stages,
    most_loaded_terms,
)
from estimator.memory.verdict import fit_index
from estimator.offload import host_of
from estimator.sweep.training_grid import refusal
from estimator.sweep.training_space import (
    AXES,
    TrainingSearch,
    TrainingWorkload,
    facility_w_of,
    price_of,
)
from estimator.terms import TRAINING_MEMORY
from estimator.timing.effective import checkpoint_of, effective_fraction
from estimator.timing.rates import Rates, derive_rates
from estimator.timing.stacks import stack_profile
from estimator.timing.training import BREAKDOWN, Held, TimingOptions, training_time_terms

__all__ = [
    "CODE",
    "COLUMNS",
    "INT_COLUMNS",
    "ROW_MEMORY",
    "TOKEN_COLUMNS",
    "Block",
    "PeakRange",
    "blocks",
    "empty_columns",
    "evaluate",
    "fit_codes",
    "memory_refusals",
]

# The dtype of a sweep's code columns (accelerator, stack, precision, recompute, pipeline split,
# fit verdict: an index into a short list of names): two bytes each, the columns of a million
# layouts concatenated in a few milliseconds.
CODE = np.int16

# The likely range of a layout's peak memory as factors of the planner's (low, high), for an
# accelerator, a software stack and a GPU count; None where no measurement bounds it.
PeakRange = Callable[[Accelerator, str, int], tuple[float, float] | None]

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
# The columns of a sweep, in ``evaluate``'s order, and those only a token count adds.
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
    "kwh_per_1m_tokens",
    "tokens_per_s_per_mw",
    "pipeline_split",
)
TOKEN_COLUMNS = (
    "time_to_train_s",
    "gpu_hours",
    "cost_usd",
    "mwh",
    "effective_time_fraction",
    "effective_time_to_train_s",
    "effective_cost_usd",
)
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


def empty_columns(workload: TrainingWorkload) -> dict[str, np.ndarray]:
    """The columns of a sweep in which no layout was evaluated."""
    names = [*COLUMNS, *(TOKEN_COLUMNS if workload.tokens is not None else ()), "headroom_bytes"]
    out = {k: np.zeros(0, dtype=np.int64 if k in INT_COLUMNS else float) for k in names}
    out["fits"] = np.zeros(0, dtype=bool)
    for k in (*AXES, "accelerator", "stack", "precision", "recompute", "fit"):
        out[k] = np.zeros(0, dtype=np.int64)
    return out


@dataclass(frozen=True)
class Block:
    """One (accelerator, software stack, precision, recompute policy) block of a sweep: what
    its layouts share, and its codes (indices into the sweep's lists of names)."""

    accelerator: Accelerator
    options: TimingOptions  # the stack's, on the space's network for this accelerator
    precision_name: str  # as the space lists it
    precision: Precision
    recompute: Recompute
    node: int  # the GPUs a TP group stays within
    usd_per_gpu_hour: float  # NaN where no price is known
    facility_w_per_gpu: float  # NaN where no power figure is (``energy.power_per_gpu``)
    codes: tuple[int, int, int, int]  # accelerator, stack, precision, recompute

    @property
    def label(self) -> dict[str, str]:
        """The block's names, as a refused layout of it is reported."""
        return {
            "accelerator": self.accelerator.id,
            "stack": self.options.stack,
            "precision": self.precision_name,
            "recompute": self.recompute,
        }


def blocks(
    space: TrainingSearch,
    specs: tuple[Accelerator, ...],
    stacks: tuple[TimingOptions, ...],
    workload: TrainingWorkload,
) -> Iterator[Block]:
    """The blocks of ``space`` in the sweep's order (accelerator, stack, precision, recompute),
    each stack's options timed over the network the space states for the accelerator (as a
    single plan's cluster, ``spec.cluster.cluster_of``), TP kept within ``gpus_per_node`` (each
    accelerator's by default, or its NVLink domain if larger)."""
    precisions = {name: get_precision(name) for name in space.precision}
    for ai, acc in enumerate(specs):
        usd = price_of(acc.id, workload.prices)
        watts = facility_w_of(acc, workload.power)
        for si, opts in enumerate(stacks):
            for pi, prec in enumerate(space.precision):
                for rec in space.recompute:
                    cluster = cluster_of(
                        acc, scale_up_domain=space.scale_up_domain,
                        scale_out_gbit_per_s=space.scale_out_gbit_per_s,
                        oversubscription=space.oversubscription,
                    )  # fmt: skip
                    yield Block(
                        accelerator=acc,
                        options=replace(opts, cluster=cluster),
                        precision_name=prec,
                        precision=precisions[prec],
                        recompute=rec,  # type: ignore[arg-type]
                        node=space.gpus_per_node or max(acc.gpus_per_node, cluster.scale_up_domain),
                        usd_per_gpu_hour=math.nan if usd is None else usd,
                        facility_w_per_gpu=math.nan if watts is None else watts,
                        codes=(ai, si, pi, RECOMPUTE_POLICIES.index(rec)),
                    )


def evaluate(
    model: ModelSpec,
    block: Block,
    g: Mapping[str, Any],  # numpy arrays, typed loosely: the layout dataclasses declare ints
    workload: TrainingWorkload,
    split: PipelineSplit | None = None,
    peak_range: PeakRange | None = None,
) -> dict[str, np.ndarray]:
    """The sweep's columns of valid layouts ``g`` (arrays) of one block: memory, time and cost
    by the single-estimate formulas, the fit verdict, the axes and the block's codes. With
    ``split``, layouts that share one uneven ``pp x vp`` (given as ints). ``peak_range``: the
    likely range of a layout's peak as factors of the planner's, by GPU count, where published
    measurements give one (``sweep_training``)."""
    acc, precision, n = block.accelerator, block.precision, g["num_gpus"]
    p, setup = _layout(g, block, workload, split)
    mem = most_loaded_terms(model, p, setup, precision, acc.fp8_any_layout)
    held = Held(
        mem["params_on_gpu"],
        mem["optimizer_states_bytes"],
        mem["trainable_params_on_gpu"],
        mem["expert_params_on_gpu"],
    )
    c = Context.of(model, acc, p, precision, block.options.cluster)
    stages = candidate_stages(model, p.pp, p.stage_layers)
    t = training_time_terms(c, setup, held, stages, block.options)
    step_s = np.asarray(t["step_s"])
    rates = _rates(model, block, workload, setup, step_s, n)
    out = _columns(block, p.dp, mem, t, rates, split)
    if workload.tokens is not None:
        run = energy_of(block.facility_w_per_gpu, n, rates.tokens_per_s, rates.time_to_train_s)
        out |= {
            "time_to_train_s": rates.time_to_train_s,
            "gpu_hours": rates.gpu_hours,
            "cost_usd": rates.cost_usd,
            "mwh": run.mwh,
        }
        out |= _effective(model, block, workload, setup, n, step_s, rates)
    out["headroom_bytes"] = out["capacity_bytes"] - out["memory_bytes"]
    out["fits"] = out["memory_bytes"] <= out["capacity_bytes"]
    out["fit"] = fit_codes(mem, out["capacity_bytes"], n, block, workload, peak_range)
    if workload.offload.any:  # what it offloads must fit its host's memory too, as a plan's
        out["fits"] &= out["fit"] < 2
    out |= {k: g[k] for k in AXES}
    for name, code in zip(
        ("accelerator", "stack", "precision", "recompute"), block.codes, strict=True
    ):
        out[name] = np.full(g["tp"].shape, code, CODE)
    return out


def _effective(
    model: ModelSpec,
    block: Block,
    workload: TrainingWorkload,
    setup: TrainingSetup,
    gpus: np.ndarray,
    step_s: np.ndarray,
    rates: Rates,
) -> dict[str, Any]:
    """The run as it goes (``timing.effective``): each layout's effective time fraction with
    interruptions, restarts and checkpoints, its wall-clock and its cost with the hot spares;
    deadlines and budgets are judged on these. A run that never finishes: fraction 0, inf."""
    r = workload.reliability
    link = host_of(block.accelerator.id, workload.offload).link_bytes_per_s / 1e9
    state = checkpoint_of(model, block.precision, setup)
    fraction = effective_fraction(gpus, state, link, r, step_s)
    ideal = rates.time_to_train_s
    assert ideal is not None  # a sweep with a token count (the caller's condition)
    with np.errstate(divide="ignore"):
        wall = np.where(fraction > 0, ideal / np.maximum(fraction, 1e-300), np.inf)
    cost = rates.cost_usd
    return {
        "effective_time_fraction": fraction,
        "effective_time_to_train_s": wall,
        "effective_cost_usd": None
        if cost is None
        else cost / ideal * wall * (gpus + r.spare_gpus) / gpus,
    }


def _layout(
    g: Mapping[str, Any], block: Block, workload: TrainingWorkload, split: PipelineSplit | None
) -> tuple[Parallelism, TrainingSetup]:
    """The layouts ``g`` of ``block`` as one layout and setup of arrays (data parallelism
    filling the GPU count; ``pp`` and ``vp`` as ints with an uneven ``split``)."""
    tp, pp, cp, ep, vp, zero, mb, n = (
        g[k] for k in ("tp", "pp", "cp", "ep", "vp", "zero", "micro_batch", "num_gpus")
    )
    if split is not None:
        pp, vp = int(pp[0]), int(vp[0])
    p = Parallelism(
        tp=tp,
        pp=pp,
        dp=n // (tp * pp * cp),
        cp=cp,
        ep=ep,
        vp=vp,
        sequence_parallel=tp > 1,
        zero_stage=zero,
        stage_layers=None if split is None else split.stage_layers,
    )
    recompute = block.recompute
    setup = TrainingSetup(
        workload.seq_len,
        micro_batch_size=mb,
        global_batch_size=workload.global_batch_size,
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
        gradients_per_step=stack_profile(block.options.stack).gradients_per_step,
    )
    return p, setup


def _rates(
    model: ModelSpec,
    block: Block,
    workload: TrainingWorkload,
    setup: TrainingSetup,
    step_s: np.ndarray,
    gpus: np.ndarray,
) -> Rates:
    """Throughput, MFU / HFU, time and cost of layouts whose step takes ``step_s``."""
    gbs = workload.global_batch_size
    flops = training_flops(
        model,
        workload.seq_len,
        gbs,
        block.recompute,
        workload.finetune,
        setup.selective_modules,
        setup.mtp_layers,
    )
    return derive_rates(
        step_s=step_s,
        tokens_per_step=gbs * workload.seq_len,
        gpus=gpus,
        model_flops=flops.model,
        hardware_flops=flops.hardware,
        peak_flop_per_s=block.accelerator.peak(block.precision.compute),
        usd_per_gpu_hour=block.usd_per_gpu_hour,
        tokens=workload.tokens,
    )


def _columns(
    block: Block,
    dp: Any,  # a numpy array, typed loosely as the layout's fields
    mem: Mapping[str, Any],
    t: Mapping[str, Any],
    rates: Rates,
    split: PipelineSplit | None,
) -> dict[str, Any]:
    """The columns every sweep has (``COLUMNS``), in their order, from a block's memory terms
    ``mem``, time terms ``t`` and ``rates``."""
    shape = dp.shape
    usd = block.usd_per_gpu_hour
    energy = energy_of(block.facility_w_per_gpu, 1, rates.tokens_per_s_per_gpu)  # per GPU
    return {
        "dp": dp,
        "memory_bytes": mem["total_bytes"],
        "capacity_bytes": np.full(shape, float(block.accelerator.memory_bytes)),
        "memory_stage": np.broadcast_to(mem["stage"], shape),
        **{k: np.broadcast_to(mem[k], shape) for k in ROW_MEMORY},  # a term alike for all (offload)
        "step_s": t["step_s"],
        **{k: np.broadcast_to(t[k], shape).astype(float) for k in BREAKDOWN},
        "microbatches": t["microbatches"],
        "tokens_per_s": rates.tokens_per_s,
        "tokens_per_s_per_gpu": rates.tokens_per_s_per_gpu,
        "mfu": rates.mfu,
        "hfu": rates.hfu,
        "usd_per_gpu_hour": np.full(shape, usd),
        "usd_per_1m_tokens": rates.usd_per_1m_tokens,
        "kwh_per_1m_tokens": energy.kwh_per_1m_tokens,
        "tokens_per_s_per_mw": energy.tokens_per_s_per_mw,
        "pipeline_split": np.full(shape, SPLITS.index(split.rule) if split else 1, CODE),
    }


def fit_codes(
    mem: Mapping[str, Any],
    capacity: np.ndarray,
    gpus: np.ndarray,
    block: Block,
    workload: TrainingWorkload,
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
            factors = peak_range(block.accelerator, block.options.stack, int(count))
            if factors is None:
                continue
            rows = gpus == count
            low, high = factors
            codes[rows] = fit_index(
                total[rows], capacity[rows], 0.0, (total[rows] * low, total[rows] * high)
            )
    if workload.offload.any:
        host = host_of(block.accelerator.id, workload.offload).memory_bytes
        codes = np.where(sum(mem[k] for k in HOST_TERMS) > host, 2, codes).astype(CODE)
    return codes


def memory_refusals(
    label: Mapping[str, str], layouts: Mapping[str, np.ndarray], cols: Mapping[str, np.ndarray]
) -> list[dict[str, Any]]:
    """The evaluated ``layouts`` that do not fit (``cols``: their columns), with what they need."""
    out = []
    for j in np.flatnonzero(~cols["fits"]):
        need, cap = cols["memory_bytes"][j] / GIB, cols["capacity_bytes"][j] / GIB
        reason = f"out of memory: needs {need:.1f} GiB of {cap:.1f} GiB"
        out.append(refusal(label, layouts, int(j), "memory", reason))
    return out
