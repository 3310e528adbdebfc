"""Serving kernel profiles on measured operator tables, per accelerator, engine and version.

``catalog/kernels/aiconfigurator.json`` holds, per NVIDIA system aiconfigurator-core 0.12.0 has
op-level tables for (H100 SXM, H200 SXM, B200, GB200, B300, GB300, L40S, RTX PRO 6000 Blackwell
Server, A100 SXM), engine (TensorRT-LLM, vLLM, SGLang) and engine version, the curves of
``timing.kernels`` fitted on its measured tables by ``validation/derive_kernels.py`` (Apache-2.0,
the license beside the file): GEMMs per compute format (bf16, fp8, fp4 as NVFP4, fp8_block),
the fused prefill attention per format, the routed experts' fused MoE kernel per format, and
decode attention. ``serving_profile`` lays the GEMM, prefill attention and MoE curves over the
accelerator's ``kernel_profile`` (what training reads, unchanged): each op from the covered
version nearest the one asked for (the newest where none is), named in the notes; an op, a
format or an accelerator without tables keeps today's fitted curves, and the notes say so.
Decode attention keeps the fitted curves: the derived two-constant stream fit misses the tables
by 12-50% (median, per table) and moved the validation records the wrong way. Collectives,
elementwise kernels and copies keep the fitted curves too (the tables' collectives are not read
yet). The single estimate (``serving.estimate.estimate_inference``) reads them; the load
model's engine step (``serving.engine_step``, the disaggregated pools') keeps the fitted curves
until it is revalidated on them (on the load records the measured curves halve the SLO-rate
error but raise the ITL and throughput errors: ``docs/validation.md``).

The file is read on the first serving estimate, not at import.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from estimator.catalog.files import load
from estimator.inputs.model import ModelSpec
from estimator.layout.parallel import Parallelism
from estimator.timing.gemms import linear_gemms
from estimator.timing.kernels import AttentionCurve, GemmCurve, KernelProfile, kernel_profile

__all__ = [
    "DEFAULT_ENGINE",
    "TABLES",
    "engine_tables",
    "grid_notes",
    "nearest_version",
    "serving_profile",
    "step_grid_notes",
    "version_key",
]

TABLES = "kernels/aiconfigurator.json"
# The tables a serving preset's kernels come from (``serving.load.ENGINES`` names).
ENGINE_TABLES = {"vllm": "vllm", "vllm-small-gpu": "vllm", "sglang": "sglang", "trtllm": "trtllm"}
# No engine named (the single estimate's maximum throughput): the vendor engine's tables, the
# most complete (every format on every system).
DEFAULT_ENGINE = "trtllm"
_LABELS = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}
_OPS = {"gemm": "GEMM", "attention_prefill": "prefill attention", "moe": "MoE experts"}


def engine_tables(engine: str | None) -> str:
    """The engine whose measured tables a serving preset (or none: ``DEFAULT_ENGINE``) reads."""
    if engine is None:
        return DEFAULT_ENGINE
    return ENGINE_TABLES.get(engine, engine)


def version_key(version: str) -> tuple[int, ...]:
    """Orders engine versions: ``1.3.0rc20`` after ``1.3.0rc10``, ``0.5.6.post2`` after
    ``0.5.6`` (a pre-release marker counts as one more number)."""
    parts = version.replace("rc", ".").replace("post", ".").replace("dev", ".").split(".")
    return tuple(int(p) if p.isdigit() else 0 for p in parts)


def nearest_version(versions: list[str], wanted: str | None) -> str:
    """The covered version nearest ``wanted`` (the newest where none is asked for): the same one,
    else the closest by (major, minor, patch, pre-release) distance, the newer on a tie."""
    ordered = sorted(versions, key=version_key)
    if wanted is None or wanted in ordered:
        return wanted or ordered[-1]
    target = version_key(wanted)
    width = max(len(target), *(len(version_key(v)) for v in ordered))

    def distance(v: str) -> tuple[int, ...]:
        key = version_key(v) + (0,) * width
        pad = target + (0,) * width
        return tuple(abs(a - b) for a, b in zip(key[:width], pad[:width], strict=True))

    return min(reversed(ordered), key=distance)


def _system_of(accelerator_id: str) -> tuple[str, dict[str, Any]] | None:
    for name, entry in load(TABLES)["systems"].items():
        if entry["accelerator"] == accelerator_id:
            return name, entry
    return None


def _pick(entry: dict[str, Any], op: str, engine: str, version: str | None) -> dict[str, Any]:
    fits: list[dict[str, Any]] = entry["ops"].get(op, {}).get(engine, [])
    if not fits:
        return {}
    chosen = nearest_version([f["version"] for f in fits], version)
    return next(f for f in fits if f["version"] == chosen)


def _gemm_curves(fit: dict[str, Any]) -> tuple[tuple[str, GemmCurve], ...]:
    return tuple(
        (fmt, GemmCurve(c["efficiency_max"], c["half_gflop"] * 1e9,
                        c["memory_efficiency"], c["floor_us"] * 1e-6))
        for fmt, c in sorted(fit["formats"].items())
    )  # fmt: skip


def _changes(system: str, fits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The profile fields each op's chosen fit sets (``KernelProfile``'s measured curves)."""
    changes: dict[str, Any] = {}
    if gemm := fits["gemm"]:
        changes["gemm_curves"] = _gemm_curves(gemm)
        grids = [c["grid"] for c in gemm["formats"].values()]
        changes["gemm_grid"] = (
            system,
            max(g["m"][1] for g in grids),
            max(max(g["n"][1], g["k"][1]) for g in grids),
        )
    if prefill := fits["attention_prefill"]:
        changes["attention_curves"] = tuple(
            (fmt, AttentionCurve(c["efficiency_max"], c["half_seq"], c["floor_us"] * 1e-6))
            for fmt, c in sorted(prefill["formats"].items())
        )
    if moe := fits["moe"]:
        changes["moe_curves"] = _gemm_curves(moe)
    return changes


@cache
def serving_profile(
    accelerator_id: str, engine: str | None = None, version: str | None = None
) -> KernelProfile:
    """``kernel_profile(accelerator_id)`` with the GEMM, fused prefill attention and routed
    experts' curves measured on its system under ``engine``'s tables (``engine_tables``), each
    op's from the version nearest ``version``; the notes name the tables, versions and what
    kept the fitted curves."""
    base = kernel_profile(accelerator_id)
    tables = engine_tables(engine)
    label = _LABELS.get(tables, tables)
    found = _system_of(accelerator_id)
    if found is None:
        note = (
            f"No measured serving kernel tables for {accelerator_id}: today's fitted kernel "
            "curves (aiconfigurator's systems do not include it)."
        )
        return replace(base, notes=(*base.notes, note))
    system, entry = found
    fits = {op: _pick(entry, op, tables, version) for op in _OPS}
    used = [
        f"{name} {'/'.join(sorted(fits[op]['formats']))} ({fits[op]['version']})"
        for op, name in _OPS.items()
        if fits[op]
    ]
    missing = [name for op, name in _OPS.items() if not fits[op]]
    source = load(TABLES)["source"]
    notes = [
        f"Serving kernels measured: {label} tables of {source['package']} {source['version']} "
        f"({system}, {source['license']}): {', '.join(used) or 'none'}"
        + (f", the nearest covered versions to {version}" if version else "")
        + ". Decode attention, collectives, elementwise kernels and copies keep the fitted "
        f"curves ({base.name} profile), as does a format without a table."
    ]
    if missing:
        notes.append(
            f"No {label} {', '.join(missing)} table for {system}: today's fitted curves there."
        )
    return replace(
        base,
        measured=bool(fits["gemm"]) or base.measured,
        notes=(*base.notes, *notes),
        **_changes(system, fits),
    )


def grid_notes(prof: KernelProfile, rows: float, width: float) -> list[str]:
    """A note when a serving step's GEMM rows (``rows``: its largest M) or a layer linear's
    width (``width``: its largest N or K) lies outside the measured GEMM grid ``prof``'s curves
    were fitted on (``KernelProfile.gemm_grid``): the fitted curve extrapolates there."""
    if not prof.gemm_grid:
        return []
    system, m_max, nk_max = prof.gemm_grid
    out = []
    if rows > m_max:
        out.append(
            f"A step's GEMMs run {rows:,.0f} rows, beyond the measured grid's {m_max:,} "
            f"({system}): the fitted curve is extrapolated there."
        )
    if width > nk_max:
        out.append(
            f"A linear {width:,.0f} wide lies beyond the measured grid's {nk_max:,} "
            f"({system}): the fitted curve is extrapolated there."
        )
    return out


def step_grid_notes(
    model: ModelSpec, prof: KernelProfile, p: Parallelism, rows: float
) -> list[str]:
    """``grid_notes`` for a serving plan: its largest step's GEMM rows against the widest
    per-rank linear of its layers (K or N, ``linear_gemms``; the output head is not checked)."""
    if not prof.gemm_grid:
        return []
    width = max(
        (
            float(max(k, n))
            for kind in model.kinds
            for _, k, n, _, _ in linear_gemms(kind, p.tp, p.ep, p.expert_tp, 1)
        ),
        default=0.0,
    )
    return grid_notes(prof, rows, width)
