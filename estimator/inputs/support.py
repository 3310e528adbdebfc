"""Which formats and engines an accelerator runs: the support matrix (``catalog/support.json``).

A plan names an accelerator, a precision by role and, when served, an engine. Each row of the
matrix says whether one accelerator (by catalog id, generation or vendor) runs one thing, why,
and where that is written:

- ``gemm``: the format GEMM inputs are cast to (``Precision.gemm_inputs``). MXFP8 and MXFP4 need
  a block-scaled matrix instruction (Blackwell's tcgen05 scaled MMA, CDNA4's scaled MFMA), NVFP4
  its E4M3-per-16 scales (Blackwell only); FP8 runs as OCP E4M3 on NVIDIA and CDNA4, as
  E4M3FNUZ on CDNA3 (the row's ``encoding``).
- ``weights``: a weight format run weight-only, dequantized into GEMMs in the activations'
  dtype (MXFP4 experts through Marlin on Hopper).
- ``kv_cache``: the KV cache's format, per engine where the engines differ.
- ``engine``: the serving engine itself (TensorRT-LLM on NVIDIA only).

A row's ``scope`` says when it applies: ``hardware`` always, ``training`` to training plans, an
engine name to plans served by it. Every applicable scope is checked, and within one the most
specific accelerator key wins (id, then generation, then vendor). A combination with no row is
not refused here; the accelerator's peak rates still refuse a GEMM format it has no rate for
(``Accelerator.peak``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from estimator.catalog.files import load
from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.precision import Precision

__all__ = ["ROLES", "SCOPES", "SupportRow", "check_support", "support_row", "support_rows"]

ROLES = ("gemm", "weights", "kv_cache", "engine")
HARDWARE, TRAINING = "hardware", "training"
# The serving engines' presets (``serving.load.ENGINES``) by the engine whose rows they read.
ENGINE_SCOPES: Mapping[str, str] = {
    "vllm": "vllm",
    "vllm-small-gpu": "vllm",
    "sglang": "sglang",
    "trtllm": "trtllm",
}
SCOPES = (HARDWARE, TRAINING, *sorted(set(ENGINE_SCOPES.values())))
_ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
_SCOPE_SUFFIX = {TRAINING: " in training", **{k: f" under {v}" for k, v in _ENGINE_LABELS.items()}}


@dataclass(frozen=True, slots=True)
class SupportRow:
    """One row of the matrix: whether ``accelerator`` (an id, generation or vendor) runs
    ``format`` in ``role`` (or, for ``role="engine"``, the engine ``scope``), why, and where
    that is written; ``encoding`` the FP8 bit layout it runs, where the row names one."""

    accelerator: str
    role: str
    format: str
    scope: str
    supported: bool
    reason: str
    source: str
    encoding: str | None = None
    also: tuple[str, ...] = ()


def _row(entry: Mapping[str, Any]) -> SupportRow:
    return SupportRow(
        accelerator=entry["accelerator"],
        role=entry["role"],
        format=entry.get("format", ""),
        scope=entry.get("scope", HARDWARE),
        supported=bool(entry["supported"]),
        reason=entry["reason"],
        source=entry["source"],
        encoding=entry.get("encoding"),
        also=tuple(entry.get("also", ())),
    )


@cache
def support_rows() -> tuple[SupportRow, ...]:
    """Every row of ``catalog/support.json``, in file order."""
    return tuple(_row(e) for e in load("support.json")["rows"])


@cache
def _by_key() -> dict[tuple[str, str, str, str], SupportRow]:
    out: dict[tuple[str, str, str, str], SupportRow] = {}
    for r in support_rows():
        key = (r.role, r.format, r.scope, r.accelerator)
        if key in out:
            raise ValueError(f"support.json repeats {key}")
        out[key] = r
    return out


def _keys(accelerator: Accelerator) -> tuple[str, ...]:
    return tuple(k for k in (accelerator.id, accelerator.generation, accelerator.vendor) if k)


def support_row(
    accelerator: Accelerator, role: str, fmt: str = "", scope: str = HARDWARE
) -> SupportRow | None:
    """The most specific row for ``accelerator`` (its id, then generation, then vendor), or
    None where the matrix says nothing."""
    return _most_specific(_keys(accelerator), role, fmt, scope)


def _most_specific(keys: tuple[str, ...], role: str, fmt: str, scope: str) -> SupportRow | None:
    rows = _by_key()
    for key in keys:
        found = rows.get((role, fmt, scope, key))
        if found is not None:
            return found
    return None


def check_support(
    accelerator: Accelerator,
    precision: Precision,
    engine: str | None = None,
    *,
    training: bool = False,
) -> None:
    """Refuse a plan the accelerator cannot run: the serving ``engine`` (a preset name of
    ``serving.load.ENGINES``) on its vendor, its GEMM format, a weight format run weight-only,
    its KV-cache format; SpecError names the field (``engine``, ``precision.gemm_inputs``,
    ``precision.weights``, ``precision.expert_weights``, ``precision.kv_cache``), the reason
    and the row's source."""
    a, p = accelerator, precision
    refusal = _refusal(
        (a.id, a.generation, a.vendor, a.name),
        (p.gemm_inputs, p.weights, p.expert_format, p.kv_cache),
        engine,
        training,
    )
    if refusal is not None:
        raise SpecError(*refusal)


# Every serving and training estimate starts here, and a sweep asks the same few combinations
# over and over: the verdict is memoized on the strings it reads (bounded for team catalogs).
_REFUSAL_CACHE_SIZE = 4096


@lru_cache(maxsize=_REFUSAL_CACHE_SIZE)
def _refusal(
    accelerator: tuple[str, str, str, str],
    formats: tuple[str, str, str, str],
    engine: str | None,
    training: bool,
) -> tuple[str, str, str] | None:
    """The first refusal of the matrix for these keys (id, generation, vendor, name) and
    formats (GEMM inputs, weights, experts' weights, KV cache), as SpecError's (field, rule,
    value); None when nothing refuses."""
    keys = tuple(k for k in accelerator[:3] if k)
    name = accelerator[3]
    scopes = [HARDWARE]
    if training:
        scopes.append(TRAINING)
    engine_scope = ENGINE_SCOPES.get(engine) if engine is not None else None
    checks: list[tuple[str, str, str, str, str]] = []
    if engine_scope is not None:
        scopes.append(engine_scope)
        checks.append(("engine", "", engine_scope, "engine", _ENGINE_LABELS[engine_scope]))
    gemm, weights, experts, kv = formats
    checks += [("gemm", gemm, scope, "precision.gemm_inputs", f"{gemm} GEMMs") for scope in scopes]
    for field, fmt in (("precision.weights", weights), ("precision.expert_weights", experts)):
        if fmt != gemm:
            what = f"{fmt} weights weight-only"
            checks += [("weights", fmt, scope, field, what) for scope in scopes]
    what = f"a {kv} KV cache"
    checks += [("kv_cache", kv, scope, "precision.kv_cache", what) for scope in scopes]
    for role, fmt, scope, field, what in checks:
        row = _most_specific(keys, role, fmt, scope)
        if row is not None and not row.supported:
            suffix = "" if role == "engine" else _SCOPE_SUFFIX.get(scope, "")
            rule = f"{name} does not run {what}{suffix}: {row.reason} (source: {row.source})"
            return field, rule, (engine or "") if role == "engine" else fmt
    return None
