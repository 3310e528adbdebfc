"""Predicted vs measured: kernels, training runs, serving runs and peak training memory.

``python -m validation.report`` (or ``llm-planner validate``) evaluates the estimator on every
usable record of ``validation/data`` and prints, per group, accelerator and model family, the
median and p90 absolute percentage error; ``--write`` also stores ``validation/report.md`` and
``validation/report.json``, and exports the measured records the planner's accuracy search reads
to ``estimator/catalog/accuracy.json`` (``export.py``). Error = ``predicted / measured - 1``.
Nothing is fitted on single records: the kernel constants come from ``calibrate.py`` (kernel
tables only) and the framework behaviours are the software stack profile of each record's
framework (``estimator.timing.stacks``; ``records.py`` names it): one compute factor per stack
is fitted on that stack's whole group (``fit_stacks.py``), never per record. Peak memory per GPU
(``memory.py``) is reported in its own section: the measured statistic against the part of the
estimate it counts, and whether the planner's ``fits`` matches what happened. Published runs
of the non-Megatron stacks (DeepSpeed ZeRO, PyTorch FSDP1 outside llm-foundry) are their own
section, ``stacks_measured`` (``stacks.py``); AMD Instinct runs theirs, ``amd`` (``amd.py``);
TPU, Gaudi and Trainium runs theirs, ``platforms`` (``other_accelerators.py``): all three kept
out of the GPU summaries.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    get_accelerator,
    get_precision,
)
from estimator.inputs.cluster import cluster_of
from estimator.inputs.model import ModelSpec
from estimator.memory.verdict import FIT_VERDICTS, training_fit
from estimator.serving.estimate import DEFAULT_MAX_BATCH, estimate_inference
from estimator.timing.gemms import gemm_coefficients
from estimator.timing.kernels import (
    attention_decode_time,
    attention_prefill_time,
    collective_time,
    gemm_time,
    kernel_profile,
)
from estimator.timing.layer import flash_backward_time
from estimator.timing.training import TimingOptions, TrainingEstimate, estimate_training
from estimator.xp import Num
from validation import export
from validation.calibrate import HEAD_DIM_BACKENDS, LENT

if TYPE_CHECKING:
    from validation.memory import MemoryRow
    from validation.records import TrainingCase

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT / "validation" / "data"
SYSTEMS = {"h100_sxm": "h100-sxm-80gb", "a100_sxm": "a100-sxm-80gb"}


@dataclass(frozen=True)
class Row:
    """One comparison: what was measured, what we predict."""

    kind: str  # "kernel", "training" or "serving"
    group: str
    accelerator: str
    family: str
    id: str
    measured: float
    predicted: float
    unit: str
    # What the accuracy lookup (estimator.accuracy) matches a plan on, and where the record is from
    model: str = ""
    model_class: str = ""  # dense, moe or hybrid (ModelSpec.model_class)
    stack: str = ""  # the software stack profile (training) or the engine (serving)
    gpus: int = 0
    precision: str = ""
    source: str = ""
    # A training run ran, so it fitted: the planner's verdict on it (estimator.memory.verdict)
    # and its total against the card, minus 1
    fit: str = ""
    over_capacity: float | None = None
    # A training run's parallel layout (``records.layout_of``; the JSON writes it as an object):
    # what the accuracy lookup reads its layout style from
    layout: tuple[tuple[str, int], ...] = ()

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def _csv(name: str) -> list[dict[str, str]]:
    with (DATA / "kernels" / name).open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def kernel_rows() -> list[Row]:
    out: list[Row] = []
    for r in _csv("gemm.csv"):
        acc = get_accelerator(SYSTEMS[r["system"]])
        m, n, k = (float(r[c]) for c in "mnk")
        t = gemm_time(
            acc, kernel_profile(acc.id), 2 * m * n * k, 2 * (m * k + k * n + m * n), "bf16"
        )
        out.append(_kernel("gemm", r, acc.id, t, f"{m:.0f}x{n:.0f}x{k:.0f}"))
    for r in _csv("layer_ops_vidur.csv"):  # held out: Llama-2 layer GEMMs profiled by Vidur
        if not r["m"]:
            continue
        acc = get_accelerator(SYSTEMS[r["system"]])
        m, n, k = (float(r[c]) for c in "mnk")
        t = gemm_time(
            acc, kernel_profile(acc.id), 2 * m * n * k, 2 * (m * k + k * n + m * n), "fp16"
        )
        out.append(_kernel("gemm (vidur, held out)", r, acc.id, t, f"{r['op']} {m:.0f}"))
    for r in _csv("attention_prefill.csv"):
        acc = get_accelerator(SYSTEMS[r["system"]])
        b, s, h, kv, d = (
            float(r[c])
            for c in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim")
        )
        flops = 4 * b * h * d * s * (s + 1) / 2
        moved = 2 * b * s * d * (2 * h + 2 * kv)
        t = attention_prefill_time(acc, kernel_profile(acc.id), flops, moved, s, "bf16")
        out.append(_kernel("attention prefill", r, acc.id, t, f"b{b:.0f} s{s:.0f} h{h:.0f}"))
    for r in _csv("attention_decode.csv"):
        if r["flag"].strip():  # KV served from L2 in the benchmark loop: not a planning case
            continue
        acc = get_accelerator(SYSTEMS[r["system"]])
        t = attention_decode_time(acc, kernel_profile(acc.id), float(r["kv_bytes"]))
        out.append(_kernel("attention decode", r, acc.id, t, f"b{r['batch_size']} kv{r['kv_len']}"))
    for r in _csv("allreduce.csv"):
        if not r["impl"].startswith("NCCL"):
            continue
        acc = get_accelerator(SYSTEMS[r["system"]])
        n = int(r["num_gpus"])
        node = cluster_of(acc, scale_up_domain=8)  # the benchmarks ran inside 8-GPU nodes
        t = collective_time(
            acc, kernel_profile(acc.id), "all_reduce", float(r["message_bytes"]), n, 1, node
        )
        label = "all-reduce (nccl-tests)" if "nccl-tests" in r["impl"] else "all-reduce (vidur)"
        out.append(_kernel(label, r, acc.id, t, f"n{n} {r['message_bytes']}B"))
    return out


def lent_kernel_rows() -> list[Row]:
    """The kernels this project timed on a lent H100: the fine-grained MoE layers' GEMMs (per
    local expert, the three shapes of each linear) and a grid of mid-size GEMMs in bf16 and
    FP8, fused attention forward and forward + backward over head dims (the head-dim factors'
    fit data)."""
    acc = get_accelerator("h100-sxm-80gb")
    prof = kernel_profile(acc.id)
    out: list[Row] = []

    def row(op: str, label: str, measured_ms: float, predicted_s: Num) -> None:
        out.append(
            Row(
                kind="kernel",
                group=f"{op} (lent H100)",
                accelerator=acc.id,
                family=op,
                id=f"{op} lent {label}",
                measured=measured_ms,
                predicted=float(predicted_s) * 1e3,
                unit="ms",
                source=str(LENT.relative_to(ROOT)),
            )
        )

    def gemm(m: float, k: float, n: float, fmt: str) -> float:  # bf16 output rows
        in_b = 1 if fmt == "fp8" else 2
        per_row, row_bytes, fixed = gemm_coefficients(k, n, in_b, 2, in_b)
        return float(gemm_time(acc, prof, per_row * m, row_bytes * m + fixed, fmt))

    kernels = {backend: kernel for kernel, backend in HEAD_DIM_BACKENDS.items()}
    data = json.loads(LENT.read_text(encoding="utf-8"))["rows"]
    for r in data:
        m, k, n = r.get("m", 0), r.get("k", 0), r.get("n", 0)
        shape = f"{m}x{k}x{n}"
        if r["op"] == "gemm":
            label = f"{r['model']} {r['linear']} {r['phase']} {shape} x{r['count']}"
            row("gemm, MoE layers", label, r["ms"], r["count"] * gemm(m, k, n, "bf16"))
        elif r["op"] == "gemm_grid":
            row("gemm, mid-size grid", shape, r["ms"], gemm(m, k, n, "bf16"))
            if r.get("fp8_ms"):
                row("gemm fp8, mid-size grid", shape, r["fp8_ms"], gemm(m, k, n, "fp8"))
        elif r["op"] == "attention" and "error" not in r:
            b, h, s, d = r["batch"], r["heads"], r["seq"], r["head_dim"]
            label = f"{r['backend']} b{b} h{h} d{d} s{s}"
            if r["backend"] == "unfused":
                # a three-pass PyTorch path (scale, mask, softmax); the model's eager attention
                # is Transformer Engine's, two passes: not the same implementation, not compared
                continue
            kernel = kernels[r["backend"]]
            moved = 2 * b * s * h * d * 4
            t = attention_prefill_time(acc, prof, r["flops_fwd"], moved, s, "bf16", kernel, d)
            bwd = flash_backward_time(prof, t, kernel, d)
            row(f"attention {kernel}, fwd", label, r["fwd_ms"], t)
            row(f"attention {kernel}, fwd+bwd", label, r["fwd_bwd_ms"], t + bwd)
    return out


def _kernel(op: str, r: dict[str, str], acc: str, predicted_s: Num, label: str) -> Row:
    return Row(
        kind="kernel",
        group=op,
        accelerator=acc,
        family=op,
        id=f"{op} {r['system']} {label}",
        measured=float(r["measured_ms"]),
        predicted=float(predicted_s) * 1e3,
        unit="ms",
        source=r.get("source_file") or r.get("source") or "validation/data/kernels/README.md",
    )


def _family(model: ModelSpec) -> str:
    """The family a record is summarized under: its ``model_type`` (the reader that read it)."""
    return model.model_type


def _engine_of(group: str) -> str:
    """The serving engine a throughput group measured (its name says it)."""
    for engine, marks in (
        ("trtllm", ("tensorrt", "trtllm")),
        ("vllm", ("vllm",)),
        ("sglang", ("sglang",)),
    ):
        if any(m in group.lower() for m in marks):
            return engine
    return ""


def _precision_name(precision: str | dict[str, str]) -> str:
    if isinstance(precision, str):
        return precision
    return ", ".join(f"{k} {v}" for k, v in sorted(precision.items()))


def case_throughput(
    case: TrainingCase, stack: str | None = None, scale: float | None = None
) -> float:
    """Predicted tokens/s per GPU of a training record, under its own stack profile or
    ``stack``, with the profile's compute factor or ``scale``."""
    return case_estimate(case, stack, scale).tokens_per_s_per_gpu


def case_estimate(
    case: TrainingCase,
    stack: str | None = None,
    scale: float | None = None,
    host_s: float | None = None,
) -> TrainingEstimate:
    """The estimate of a training record, as ``case_throughput`` makes it."""
    name = stack or case.stack
    # the expert all-to-all overlap its recipe sets: Megatron-Core's, so under its profile only
    own = name == case.stack  # the recipe's overlaps are Megatron-Core's: under its profile
    dispatcher = {"moe_dispatcher": case.moe_dispatcher} if own and case.moe_dispatcher else {}
    if own and case.cuda_graphs:
        dispatcher["cuda_graphs"] = case.cuda_graphs
    options = TimingOptions.of_stack(
        name,
        ep_comm_overlap=case.ep_comm_overlap and own,
        tp_comm_overlap=case.tp_comm_overlap and own,
        **dispatcher,
    )
    if scale is not None:  # this factor on every accelerator
        options = replace(options, compute_scale=scale, compute_scale_by_generation=())
    if host_s is not None:  # this host time per MoE layer and micro-batch, without CUDA graphs
        options = replace(options, moe_host_s=host_s)
    return estimate_training(
        case.model,
        get_accelerator(case.accelerator),
        case.parallel,
        case.setup,
        case.training_precision,
        options=options,
    )


def training_rows() -> tuple[list[Row], list[tuple[str, str]]]:
    from validation.records import Skip, all_training_cases, layout_of

    rows: list[Row] = []
    skipped: list[tuple[str, str]] = []
    for case in all_training_cases():
        if isinstance(case, Skip):
            skipped.append((case.id, case.reason))
            continue
        try:
            estimate = case_estimate(case)
        except SpecError as exc:
            skipped.append((case.id, str(exc)))
            continue
        memory = estimate.memory
        rows.append(
            Row(
                kind="training",
                group=case.group,
                accelerator=case.accelerator,
                family=_family(case.model),
                id=case.id,
                measured=case.measured_tokens_per_s_per_gpu,
                predicted=estimate.tokens_per_s_per_gpu,
                unit="tokens/s/GPU",
                model=case.model.id,
                model_class=case.model.model_class,
                stack=case.stack,
                gpus=case.num_gpus,
                precision=case.precision,
                source=case.source,
                fit=training_fit(memory)[0],
                over_capacity=memory.total_bytes / memory.capacity_bytes - 1,
                layout=layout_of(case.parallel),
            )
        )
    return rows, skipped


def ran_section(training: list[Row]) -> dict[str, Any]:
    """Every compared training run ran, so it fitted on its GPUs: how the planner's fit
    verdict (``estimator.memory.verdict``, on the named overheads: the runs' stacks have no
    peak-memory measurements) reads them, and the runs it calls "does_not_fit", with what
    their cases say the planner could not read from the run."""
    from validation.records import Skip, all_training_cases

    notes = {c.id: c.assumptions for c in all_training_cases() if not isinstance(c, Skip)}
    unread = ("not modelled", "not published")
    wrong = sorted(
        (r for r in training if r.fit == "does_not_fit"),
        key=lambda r: (r.over_capacity or 0.0, r.id),
    )
    return {
        "n": len(training),
        "verdicts": {v: sum(1 for r in training if r.fit == v) for v in FIT_VERDICTS},
        "does_not_fit": [
            {
                "id": r.id,
                "over_capacity": r.over_capacity,
                "unread": [a for a in notes[r.id] if any(u in a for u in unread)],
            }
            for r in wrong
        ],
    }


def serving_rows(kernels: str = "fitted") -> tuple[list[Row], list[tuple[str, str]]]:
    """The maximum-throughput serving records against the estimate on ``kernels``: the fitted
    curves (the default every answer reads) or the measured operator tables' opt-in."""
    from validation.records import InferenceCase, Skip, inference_cases

    rows: list[Row] = []
    skipped: list[tuple[str, str]] = []
    for case in inference_cases():
        if isinstance(case, Skip):
            skipped.append((case.id, case.reason))
            continue
        assert isinstance(case, InferenceCase)
        try:
            acc = get_accelerator(case.accelerator)
            layout = Parallelism(tp=case.tp, pp=case.pp, ep=case.ep)
            precision = get_precision(case.precision)
            probe = estimate_inference(
                case.model,
                acc,
                layout,
                InferenceSetup(case.input_len, case.output_len, 1),
                precision,
                kernels=kernels,
            )
            concurrency = max(min(probe.max_concurrency, DEFAULT_MAX_BATCH), 1)
            est = estimate_inference(
                case.model,
                acc,
                layout,
                InferenceSetup(case.input_len, case.output_len, concurrency),
                precision,
                kernels=kernels,
            )
        except SpecError as exc:
            skipped.append((case.id, str(exc)))
            continue
        rows.append(
            Row(
                kind="serving",
                group=case.group,
                accelerator=case.accelerator,
                family=_family(case.model),
                id=case.id,
                measured=case.measured_output_tokens_per_s,
                predicted=est.output_tokens_per_s,
                unit="output tokens/s",
                model=case.model.id,
                model_class=case.model.model_class,
                stack=_engine_of(case.group),
                gpus=case.num_gpus,
                precision=_precision_name(case.precision),
                source=case.source,
            )
        )
    return rows, skipped


class _Compared(Protocol):
    """A compared record: anything with an error (predicted / measured - 1)."""

    @property
    def error(self) -> float: ...


_Row = TypeVar("_Row", bound=_Compared)


def summarize(rows: Iterable[_Row], key: Callable[[_Row], str]) -> list[dict[str, Any]]:
    groups: dict[str, list[float]] = {}
    signed: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(abs(r.error))
        signed.setdefault(key(r), []).append(r.error)
    out = []
    for name, errs in sorted(groups.items()):
        errs.sort()
        p90 = errs[min(len(errs) - 1, round(0.9 * (len(errs) - 1)))]
        out.append(
            {
                "name": name,
                "n": len(errs),
                "median_ape": statistics.median(errs),
                "p90_ape": p90,
                "median_signed": statistics.median(signed[name]),
            }
        )
    return out


def build() -> dict[str, Any]:
    kernels = kernel_rows() + lent_kernel_rows()
    training, t_skip = training_rows()
    serving, s_skip = serving_rows()
    measured, _ = serving_rows("measured")  # the opt-in: summaries only, not in the records
    everything = kernels + training + serving
    return {
        "rows": everything,
        "skipped": {"training": t_skip, "serving": s_skip},
        "ran": ran_section(training),
        "memory": memory_section(),
        "load": load_section(),
        "amd": amd_section(),
        "stacks_measured": stacks_section(),
        "platforms": platforms_section(),
        "summary": {
            "by kind": summarize(everything, lambda r: r.kind),
            "kernels by op": summarize(kernels, lambda r: f"{r.group} / {r.accelerator}"),
            "training by group": summarize(training, lambda r: r.group),
            "training by accelerator": summarize(training, lambda r: r.accelerator),
            "training by family": summarize(training, lambda r: r.family),
            "serving by accelerator": summarize(serving, lambda r: r.accelerator),
            "serving by family": summarize(serving, lambda r: r.family),
            "serving on the measured kernels (opt-in, kernels=measured)": summarize(
                measured, lambda r: r.group
            ),
            "serving on the measured kernels (opt-in), by accelerator": summarize(
                measured, lambda r: r.accelerator
            ),
            "serving on the measured kernels (opt-in), by family": summarize(
                measured, lambda r: r.family
            ),
        },
    }


def amd_section() -> dict[str, Any]:
    """Published runs on AMD Instinct (``validation/amd.py``): training and serving records,
    their summaries by kind and accelerator, the vendor constant per kind (reported, not
    adopted) with its leave-one-source-out error."""
    from validation.amd import build as build_amd

    return build_amd()


def platforms_section() -> dict[str, Any]:
    """TPU, Gaudi and Trainium (``validation/other_accelerators.py``): their published runs by
    platform family and kind and by source group, the refused and flagged records, and each
    vendor's fitted compute factor with its leave-one-source-out error (reported, not adopted)."""
    from validation.other_accelerators import section

    return section()


def memory_section() -> dict[str, Any]:
    """Peak memory per GPU (``validation/memory.py``): every compared record, the summaries
    over those with a measurement, the fits calls (out-of-memory runs included) and the skips."""
    from validation.memory import fits_summary, rows, skip_reasons

    found, skipped = rows()
    measured = [r for r in found if r.measured_gib is not None]
    return {
        "rows": found,
        "summary": {
            "peak memory, all": summarize(measured, lambda r: "all"),
            "peak memory by group": summarize(measured, lambda r: r.group),
            "peak memory by framework": summarize(measured, lambda r: r.framework),
            "peak memory by statistic": summarize(measured, lambda r: r.statistic),
        },
        "fits": fits_summary(found),
        "skip reasons": skip_reasons(skipped),
        "skipped": skipped,
    }


def stacks_section() -> dict[str, Any]:
    """Published DeepSpeed ZeRO and PyTorch FSDP1 runs (``validation/stacks.py``): each under
    its stack's profile, by stack, group and ZeRO stage, peak memory where published, and each
    stack's compute factor fitted on its group with leave-one-source-out (reported, not
    applied)."""
    from validation.stacks import section

    return section()


def load_section() -> dict[str, Any]:
    """Serving latency under load (``validation/load.py``): TTFT, TPOT / ITL and throughput of
    the steady-state load model against the published measurements, by metric, source, engine,
    accelerator and regime."""
    from validation.feasibility import PREFILL_HEAVY_RATIO, prefill_heavy_ids
    from validation.load import OVERLOADED, overloaded
    from validation.load import rows as load_rows

    found, skipped = load_rows()
    heavy = prefill_heavy_ids()
    reasons: dict[str, int] = {}
    for _, why in skipped:
        if not why.endswith(OVERLOADED):
            reasons[why] = reasons.get(why, 0) + 1
    return {
        "rows": found,
        "summary": {
            "latency under load, by metric": summarize(found, lambda r: r.metric),
            "latency under load, by metric and source": summarize(
                found, lambda r: f"{r.metric} / {r.group}"
            ),
            "latency under load, by metric and engine": summarize(
                found, lambda r: f"{r.metric} / {r.engine}"
            ),
            "latency under load, by metric and accelerator": summarize(
                found, lambda r: f"{r.metric} / {r.accelerator}"
            ),
            "latency under load, by metric and regime": summarize(
                found, lambda r: f"{r.metric} / {r.regime}"
            ),
            f"latency under load, prefill-heavy (ISL / OSL >= {PREFILL_HEAVY_RATIO:g}), by"
            " metric and engine": summarize(
                (r for r in found if r.id in heavy), lambda r: f"{r.metric} / {r.engine}"
            ),
        },
        "skip reasons": reasons,
        "overloaded": overloaded(skipped),
        "peak": peak_section(),
    }


def peak_section() -> dict[str, Any]:
    """The published runs against their GPUs' dense peak (``validation/feasibility.py``): the
    highest share any run's measured throughput or TTFT implies, and the runs above it."""
    from validation.feasibility import load_checks, throughput_checks

    checks = load_checks() + throughput_checks()
    top = max(checks, key=lambda c: c.worst)
    return {
        "checked": len(checks),
        "highest": {"id": top.id, "share_of_peak": top.worst},
        "above_peak": [{"id": c.id, "warnings": list(c.warnings)} for c in checks if c.warnings],
    }


def render_load(load: dict[str, Any], details: bool = False) -> list[str]:
    """The latency-under-load section of report.md."""
    found = load["rows"]
    skipped = sum(load["skip reasons"].values())
    lines = [
        "",
        "# Serving latency under load",
        "",
        f"{len({r.id for r in found})} records of serving_load_measured.json compared,"
        f" {skipped} skipped ("
        + "; ".join(f"{why}: {n}" for why, n in load["skip reasons"].items())
        + "). TTFT and TPOT as each source states them (mean, or median against the model's"
        " p50); ITL where a source gives no TPOT; output tokens/s of the replica; slo_rate:"
        " the requests/s an MLPerf Server or Interactive run served within its scenario's"
        " TTFT and TPOT p99 limits against the highest rate whose predicted steady state meets"
        " the same limits (the SLO planning answer; its sign says how optimistic it is). MLPerf"
        " runs sit near their capacity, where TTFT and TPOT change steeply with the rate: a few"
        " percent of capacity moves them several-fold, while the rate within the limits is"
        " well conditioned.",
    ]
    over = load.get("overloaded", [])
    lines += [
        "",
        f"Predicted overloaded where the run served its rate (MLPerf: within its latency"
        f" constraints): {len(over)} records"
        + (f" ({', '.join(over)})" if over else "")
        + "; their TTFT (unbounded in the model) is left out of the errors above.",
    ]
    peak = load.get("peak")
    if peak:
        above = peak["above_peak"]
        lines += [
            "",
            f"Implied compute against the GPUs' dense peak (validation/feasibility.py):"
            f" {peak['checked']} published runs checked (these and the offline maximum-throughput"
            f" ones), {len(above)} above it"
            + "".join(f"; {a['id']}: {a['warnings'][0]}" for a in above)
            + f"; the highest, {peak['highest']['id']}, at"
            f" {peak['highest']['share_of_peak']:.0%} of it.",
        ]
    for title, table in load["summary"].items():
        lines += _table(title, table)
    if details:
        lines += ["", "## load records", "", "| id | metric | regime | measured | predicted |"
                  " error |", "|---|---|---|---:|---:|---:|"]  # fmt: skip
        for r in found:
            lines.append(
                f"| {r.id} | {r.metric} ({r.statistic}) | {r.regime} | {r.measured:,.1f} |"
                f" {r.predicted:,.1f} | {r.error:+.1%} |"
            )
    return lines


def _table(title: str, table: list[dict[str, Any]]) -> list[str]:
    lines = ["", f"## {title}", "", "| | n | median APE | p90 APE | median signed |"]
    lines.append("|---|---:|---:|---:|---:|")
    for s in table:
        lines.append(
            f"| {s['name']} | {s['n']} | {s['median_ape']:.1%} | {s['p90_ape']:.1%} |"
            f" {s['median_signed']:+.1%} |"
        )
    return lines


def render_memory(memory: dict[str, Any], details: bool = False) -> list[str]:
    """The peak-memory section of report.md."""
    found: list[MemoryRow] = memory["rows"]
    fits = memory["fits"]
    skipped = memory["skipped"]
    lines = [
        "",
        "# Peak memory per GPU (training and fine-tuning)",
        "",
        f"{len(found)} of {len(found) + len(skipped)} records of memory_measured.json compared"
        f" ({len([r for r in found if r.oom])} out of memory), {len(skipped)} skipped."
        " Predicted = the estimate's part that the measured statistic counts (allocated /"
        " active: the allocated terms; reserved: with fragmentation; unknown: the whole"
        " estimate); the fits call reads the planner's total against the card.",
    ]
    for title, table in memory["summary"].items():
        lines += _table(title, table)
    rate = "n/a" if fits["rate"] is None else f"{fits['rate']:.1%}"
    lines += [
        "",
        "## fits called right",
        "",
        f"{fits['right']} of {fits['n']} records whose card size is known ({rate};"
        f" {fits['oom_records']} of them out of memory). Wrong:"
        f" {', '.join(fits['wrong']) or 'none'}. Not judged (card size not stated):"
        f" {', '.join(fits['not_judged']) or 'none'}.",
    ]
    for ident, over in fits["oom_over_capacity"].items():
        lines.append(f"- {ident} (out of memory): the planner's total is {over:+.1%} of capacity")
    if details:
        lines += [
            "",
            "## peak memory records",
            "",
            "| id | statistic | measured GiB | predicted GiB | error | planner total GiB |"
            " capacity GiB | fits | ran |",
            "|---|---|---:|---:|---:|---:|---:|---|---|",
        ]
        for r in found:
            measured = "OOM" if r.measured_gib is None else f"{r.measured_gib:.2f}"
            error = "" if r.measured_gib is None else f"{r.error:+.1%}"
            capacity = f"{r.capacity_gib:.1f}" if r.capacity_known else "not stated"
            lines.append(
                f"| {r.id} | {r.statistic} | {measured} | {r.predicted_gib:.2f} | {error} |"
                f" {r.total_gib:.2f} | {capacity} | {'yes' if r.fits else 'no'} |"
                f" {'OOM' if r.oom else 'yes'} |"
            )
    lines += [
        "",
        "## skipped peak-memory records, by reason",
        "",
        "A record with several reasons counts under each; sole = the records that reason alone"
        " keeps out. Every skip's reasons in full, with the bounded options' sizes: report.json.",
        "",
        "| reason | records | sole |",
        "|---|---:|---:|",
    ]
    for reason, counts in memory["skip reasons"].items():
        lines.append(f"| {reason} | {counts['records']} | {counts['sole']} |")
    return lines


def render_ran(ran: dict[str, Any]) -> list[str]:
    """The section of report.md on the published training runs' fit verdicts."""
    v = ran["verdicts"]
    lines = [
        "",
        "# Published training runs ran: did the planner say they fit?",
        "",
        f"Every one of the {ran['n']} compared training runs ran on its GPUs. The planner's"
        f" verdict (estimator/memory/verdict.py; these stacks have no peak-memory measurements,"
        f" so the named overheads, which are estimates, make the tight band): fits {v['fits']},"
        f" tight {v['tight']}, does not fit {v['does_not_fit']}. The runs it calls"
        ' "does not fit", with the planner\'s total over the card and what the case could not'
        " read from the run (recipe settings not published or not modelled):",
        "",
        "| id | over capacity | not read |",
        "|---|---:|---|",
    ]
    for r in ran["does_not_fit"]:
        unread = "; ".join(u.split(":")[0] for u in r["unread"]) or "-"
        lines.append(f"| {r['id']} | {r['over_capacity']:+.1%} | {unread} |")
    return lines


def render(report: dict[str, Any], details: bool = False) -> str:
    lines = ["# LLM Planner validation: predicted vs measured", ""]
    lines.append("APE = |predicted / measured - 1|; signed = median of predicted / measured - 1.")
    for title, table in report["summary"].items():
        lines += _table(title, table)
    skipped = report["skipped"]
    lines += [
        "",
        f"Skipped records: {len(skipped['training'])} training, {len(skipped['serving'])} serving"
        " (reasons in report.json).",
    ]
    if details:
        lines += ["", "## Records", "", "| kind | id | measured | predicted | error |"]
        lines.append("|---|---|---:|---:|---:|")
        for r in report["rows"]:
            if r.kind == "kernel":
                continue
            lines.append(
                f"| {r.kind} | {r.id} | {r.measured:,.1f} | {r.predicted:,.1f} | {r.error:+.1%} |"
            )
    if "ran" in report:
        lines += render_ran(report["ran"])
    if "memory" in report:
        lines += render_memory(report["memory"], details)
    if "load" in report:
        lines += render_load(report["load"], details)
    if "amd" in report:
        from validation.amd import render as render_amd

        lines += render_amd(report["amd"], details)
    if "stacks_measured" in report:
        from validation.stacks import render as render_stacks

        lines += render_stacks(report["stacks_measured"])
    if "platforms" in report:
        from validation.other_accelerators import render as render_platforms

        lines += render_platforms(report["platforms"], details)
    return "\n".join(lines) + "\n"


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    from validation.amd import to_json as amd_json
    from validation.other_accelerators import to_json as platforms_json
    from validation.stacks import to_json as stacks_json

    memory, load = report["memory"], report["load"]
    return {
        "amd": amd_json(report["amd"]),
        "platforms": platforms_json(report["platforms"]),
        "stacks_measured": stacks_json(report["stacks_measured"]),
        "load": {
            "summary": load["summary"],
            "skip reasons": load["skip reasons"],
            "overloaded": load["overloaded"],
            "peak": load["peak"],
            "rows": [{**r.__dict__, "error": r.error} for r in load["rows"]],
        },
        "summary": report["summary"],
        "skipped": report["skipped"],
        "ran": report["ran"],
        "rows": [
            {**r.__dict__, "layout": dict(r.layout) or None, "error": r.error}
            for r in report["rows"]
        ],
        "memory": {
            "summary": memory["summary"],
            "fits": memory["fits"],
            "skip reasons": memory["skip reasons"],
            "skipped": [(s.id, s.reason) for s in memory["skipped"]],
            "rows": [
                {
                    **r.__dict__,
                    "layout": dict(r.layout) or None,
                    "error": None if r.measured_gib is None else r.error,
                    "fits_right": r.fits_right,
                    "over_capacity": r.over_capacity,
                }
                for r in memory["rows"]
            ],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llm-planner validate", description=__doc__)
    parser.add_argument(
        "--write",
        action="store_true",
        help="write report.md, report.json and the core's estimator/catalog/accuracy.json",
    )
    parser.add_argument("--details", action="store_true", help="list every record")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    report = build()
    if args.json:
        print(json.dumps(to_json(report), indent=1))
    else:
        print(render(report, args.details), end="")
    if args.write:
        (ROOT / "validation" / "report.md").write_text(render(report, True), encoding="utf-8")
        stored = to_json(report)
        (ROOT / "validation" / "report.json").write_text(
            json.dumps(stored, indent=1) + "\n", encoding="utf-8"
        )
        export.write(stored)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
