"""Derive the serving kernel curves of every NVIDIA system aiconfigurator covers from its measured
operator tables, into ``estimator/catalog/kernels/aiconfigurator.json``.

Input: NVIDIA aiconfigurator-core 0.12.0 (Apache-2.0; PyPI ``aiconfigurator-core``, installed as a
calibration-data extra, ``make test``), its op-level tables
``aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/*.parquet``, read with
pyarrow. Only four table kinds are opened: ``gemm/*/*/gemm_perf.parquet``,
``attention/*/*/context_attention_perf.parquet``,
``attention/*/*/generation_attention_perf.parquet`` and ``moe/*/*/moe_perf.parquet`` (the
package's end-to-end samples, e.g.
``systems/silicon_sample.csv``, are reserved for independent evaluation and never opened:
``tests/test_measured_kernels.py`` checks it with an audit hook).

For each (system, engine, version) and compute format it fits the constants of
``estimator/timing/kernels.py``'s curves, by coordinate descent over fixed grids minimising the
mean absolute log ratio of predicted over measured time (a deterministic search: a fresh run
writes the same file):

- GEMM (per ``gemm_dtype``: bfloat16, fp8 per-tensor, fp8_block, nvfp4): ``e_max``, ``F_half``,
  ``e_mem``, ``floor`` of ``max((F + F_half) / (e_max peak), bytes / (e_mem hbm)) + floor``,
  over every shape with N and K in 1,024-32,768 (an LLM's linears; the fastest kernel where the
  table has several per shape); bytes are the estimator's (``gemm_coefficients``: inputs and
  weights in the format, bf16 output). The tables time the engine's linear layer from a bf16
  input, its input quantization included (ai-dynamo/aiconfigurator
  ``collector/trtllm/collect_gemm.py``), so the serving layer charges no separate cast.
- MoE (per ``moe_dtype``, balanced routing, no expert TP, gated kernels): the same four
  constants, for one projection of the routed experts' fused kernel, fitted on the whole MoE
  op as the estimator charges it (``fit_moe``).
- Context (prefill) attention (per ``attn_dtype``, 128-dimension heads, no window):
  ``e_max``, ``s_half``, ``floor`` of ``F / (peak e_max s / (s + s_half)) + floor`` over the
  causal FLOPs ``4 b h d s (s + 1) / 2`` (the memory term is not fitted: it never binds there).
- Generation (decode) attention (no window, all head dims, both KV formats):
  ``e_mem``, ``floor`` of ``kv_bytes / (e_mem hbm) + floor``, rows whose KV cache reaches 1 MiB.

Peaks and bandwidths are the catalog accelerator's (``SYSTEMS``): the fitted efficiencies are
relative to the numbers the estimator multiplies them by. Each entry records its table's path,
rows, the measured grid and the fit's median APE. Nothing is fitted on end-to-end records.

``python -m validation.derive_kernels`` rewrites the file; ``--root`` reads another copy of the
tables; ``--check`` exits 1 when the shipped file differs from a fresh derivation.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from estimator import get_accelerator
from estimator.inputs.precision import DTYPES
from estimator.timing.measured import TABLES, version_key

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "estimator" / "catalog" / "kernels"
OUT = ROOT / "estimator" / "catalog" / TABLES
LICENSE = (
    ROOT / "validation" / "data" / "kernels" / "licenses" / "aiconfigurator-Apache-2.0.LICENSE"
)
PACKAGE = "aiconfigurator-core"
PACKAGE_VERSION = "0.12.0"

# aiconfigurator system -> the catalog accelerator whose peaks the efficiencies are relative to
SYSTEMS = {
    "h100_sxm": "h100-sxm-80gb",
    "h200_sxm": "h200-sxm-141gb",
    "b200_sxm": "b200",
    "gb200": "gb200",
    "b300_sxm": "b300",
    "gb300": "gb300",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000-bse",
    "a100_sxm": "a100-sxm-80gb",
}
ENGINES = ("trtllm", "vllm", "sglang")
# aiconfigurator's gemm_dtype -> (the estimator's compute-format key, its input/weight dtype)
GEMM_FORMATS = {
    "bfloat16": ("bf16", "bf16"),
    "fp8": ("fp8", "fp8"),
    "fp8_block": ("fp8_block", "fp8"),
    "nvfp4": ("fp4", "nvfp4"),
}
ATTENTION_FORMATS = {"bfloat16": "bf16", "fp8": "fp8"}
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
MIN_DIM = 1024  # GEMM shapes with a smaller N or K are not the linears of an LLM
MAX_DIM = 32768
MIN_KV_BYTES = 2**20
ROUNDS = 8
COARSE = 8  # the coarse scan's stride over a grid

GEMM_GRIDS = (
    np.round(np.arange(0.05, 1.0001, 0.005), 3),  # e_max
    np.concatenate([[0.0], np.round(np.geomspace(0.01, 500.0, 121), 4)]) * 1e9,  # F_half, FLOPs
    np.round(np.arange(0.2, 1.0001, 0.005), 3),  # e_mem
    np.round(np.arange(0.0, 40.0001, 0.25), 2) * 1e-6,  # floor, s
)
PREFILL_GRIDS = (
    np.round(np.arange(0.05, 1.0001, 0.005), 3),  # e_max
    np.concatenate([[0.0], np.round(np.geomspace(8.0, 32768.0, 97), 1)]),  # s_half, keys
    np.round(np.arange(0.0, 60.0001, 0.25), 2) * 1e-6,  # floor, s
)
DECODE_GRIDS = (
    np.round(np.arange(0.2, 1.2001, 0.005), 3),  # e_mem (L2 hits can exceed the HBM rate)
    np.round(np.arange(0.0, 60.0001, 0.25), 2) * 1e-6,  # floor, s
)


def data_root() -> Path:
    """The installed package's op tables (found without importing it)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{PACKAGE}=={PACKAGE_VERSION} is not installed (make test installs it)")
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


def _columns(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The columns ``names`` of one table, read through a Python file object (so that every
    file the derivation reads raises the interpreter's ``open`` audit event)."""
    import pyarrow.parquet as pq

    with path.open("rb") as f:
        table = pq.read_table(f, columns=list(names)).to_pydict()
    return {c: np.asarray(table[c]) for c in names}


def _names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    with path.open("rb") as f:
        return list(pq.read_schema(f).names)


def _fit(predict: Any, measured: np.ndarray, grids: tuple[np.ndarray, ...]) -> list[float]:
    """Coordinate descent over ``grids`` (one parameter at a time, the others held), starting at
    each grid's middle, minimising the mean absolute log ratio; each step scans every
    ``COARSE``-th grid value, then every value within ``COARSE`` of the best. Deterministic."""
    log_measured = np.log(measured)
    idx = [len(g) // 2 for g in grids]

    def best(i: int, candidates: np.ndarray) -> int:
        params: list[Any] = [grids[j][idx[j]] for j in range(len(grids))]
        params[i] = grids[i][candidates][:, None]
        loss = np.mean(np.abs(np.log(predict(*params)) - log_measured), axis=1)
        return int(candidates[int(np.argmin(loss))])

    for _ in range(ROUNDS):
        before = list(idx)
        for i, g in enumerate(grids):
            coarse = best(i, np.arange(0, len(g), COARSE))
            idx[i] = best(i, np.arange(max(coarse - COARSE, 0), min(coarse + COARSE + 1, len(g))))
        if idx == before:
            break
    return [float(grids[j][idx[j]]) for j in range(len(grids))]


def _ape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return round(float(np.median(np.abs(predicted / measured - 1))) * 100, 1)


def _grid(**axes: np.ndarray) -> dict[str, list[int]]:
    return {k: [int(v.min()), int(v.max())] for k, v in axes.items()}


def _gemm_entry(predict: Any, measured: np.ndarray, grid: dict[str, list[int]]) -> dict[str, Any]:
    """A GEMM-form curve's fitted constants, its rows, its fit's median APE and its grid."""
    e, half, em, floor = _fit(predict, measured, GEMM_GRIDS)
    return {
        "efficiency_max": e,
        "half_gflop": round(half / 1e9, 4),
        "memory_efficiency": em,
        "floor_us": round(floor * 1e6, 2),
        "rows": int(measured.size),
        "fit_median_ape_pct": _ape(predict(e, half, em, floor), measured),
        "grid": grid,
    }


def fit_gemm(path: Path, acc_id: str) -> dict[str, Any]:
    """Per format: the GEMM curve's constants, the rows, the grid and the fit's median APE."""
    acc = get_accelerator(acc_id)
    c = _columns(path, ("gemm_dtype", "m", "n", "k", "latency"))
    out: dict[str, Any] = {}
    hbm = acc.hbm_bytes_per_s
    for dtype, (key, fmt) in GEMM_FORMATS.items():
        sel = (c["gemm_dtype"] == dtype) & (np.minimum(c["n"], c["k"]) >= MIN_DIM)
        sel &= np.maximum(c["n"], c["k"]) <= MAX_DIM
        if not sel.any():
            continue
        shapes = np.stack([c["m"][sel], c["n"][sel], c["k"][sel]]).astype(float)
        uniq, inv = np.unique(shapes, axis=1, return_inverse=True)
        ms = np.full(uniq.shape[1], np.inf)
        np.minimum.at(ms, inv.ravel(), c["latency"][sel].astype(float))  # the fastest kernel
        m, n, k = uniq
        measured = ms * 1e-3
        w_b = DTYPES[fmt].bytes
        flops = 2 * m * n * k
        moved = m * k * w_b + k * n * w_b + m * n * 2.0
        peak = acc.peak(DTYPES[fmt].compute or "bf16")

        def predict(
            e: Any, half: Any, em: Any, floor: Any, f: Any = flops, b: Any = moved, x: Any = peak
        ) -> Any:
            return np.maximum((f + half) / (e * x), b / (em * hbm)) + floor

        out[key] = _gemm_entry(predict, measured, _grid(m=m, n=n, k=k))
    return out


def fit_prefill(path: Path, acc_id: str) -> dict[str, Any]:
    """Per attention format: the prefill curve's constants (128-dim heads, no window)."""
    acc = get_accelerator(acc_id)
    names = ("batch_size", "isl", "num_heads", "head_dim", "attn_dtype", "latency")
    c = _columns(path, names)
    window = _window(path, c["latency"].size)
    out: dict[str, Any] = {}
    for dtype, key in ATTENTION_FORMATS.items():
        sel = (c["attn_dtype"] == dtype) & (c["head_dim"] == 128) & (window == 0)
        if key not in acc.peak_flop_per_s or not sel.any():
            continue
        b, s, h = (c[n][sel].astype(float) for n in ("batch_size", "isl", "num_heads"))
        measured = c["latency"][sel].astype(float) * 1e-3
        flops = 4 * b * h * 128 * s * (s + 1) / 2
        peak = acc.peak(key)

        def predict(
            e: Any, half: Any, floor: Any, f: Any = flops, s: Any = s, x: Any = peak
        ) -> Any:
            return f / (x * e * s / (s + half)) + floor

        e, half, floor = _fit(predict, measured, PREFILL_GRIDS)
        out[key] = {
            "efficiency_max": e,
            "half_seq": half,
            "floor_us": round(floor * 1e6, 2),
            "rows": int(s.size),
            "fit_median_ape_pct": _ape(predict(e, half, floor), measured),
            "grid": _grid(batch=b, isl=s, heads=h),
        }
    return out


def fit_decode(path: Path, acc_id: str) -> dict[str, Any]:
    """The decode attention curve's constants over both KV formats (no window)."""
    acc = get_accelerator(acc_id)
    names = ("batch_size", "isl", "step", "num_key_value_heads", "head_dim")
    c = _columns(path, (*names, "kv_cache_dtype", "latency"))
    window = _window(path, c["latency"].size)
    kv_b = np.array([KV_BYTES.get(str(x), 0.0) for x in c["kv_cache_dtype"]])
    b, isl, step, kvh, d = (c[n].astype(float) for n in names)
    context = isl + step
    kv_bytes = b * context * kvh * d * 2 * kv_b
    sel = (window == 0) & (kv_bytes >= MIN_KV_BYTES)
    if not sel.any():
        return {}
    kv, measured = kv_bytes[sel], c["latency"][sel].astype(float) * 1e-3
    hbm = acc.hbm_bytes_per_s

    def predict(em: Any, floor: Any) -> Any:
        return kv / (em * hbm) + floor

    em, floor = _fit(predict, measured, DECODE_GRIDS)
    return {
        "kv": {
            "memory_efficiency": em,
            "floor_us": round(floor * 1e6, 2),
            "rows": int(kv.size),
            "fit_median_ape_pct": _ape(predict(em, floor), measured),
            "grid": _grid(batch=b[sel], context=context[sel]),
        }
    }


def fit_moe(path: Path, acc_id: str) -> dict[str, Any]:
    """Per format: a grouped-GEMM curve (the GEMM curve's four constants) on the MoE table's
    whole fused MoE op, balanced routing, no expert TP, gated experts: each row predicted as the
    estimator charges its routed experts (``timing.gemms.linear_gemm_time``, grouped): the
    up/gate and the down projection, each one kernel over the local experts the ``T k / ep``
    routed rows touch."""
    acc = get_accelerator(acc_id)
    names = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size")
    c = _columns(path, (*names, "moe_tp_size", "moe_dtype", "distribution", "latency"))
    kernel = _columns(path, ("kernel_source",))["kernel_source"]
    gated = np.array(["nongated" not in str(k) and "min_latency" not in str(k) for k in kernel])
    base = gated & (c["distribution"] == "balanced") & (c["moe_tp_size"] == 1)
    out: dict[str, Any] = {}
    hbm = acc.hbm_bytes_per_s
    for dtype, (key, fmt) in GEMM_FORMATS.items():
        sel = base & (c["moe_dtype"] == dtype)
        if not sel.any():
            continue
        cols = np.stack([c[n][sel].astype(float) for n in names])
        uniq, inv = np.unique(cols, axis=1, return_inverse=True)
        ms = np.full(uniq.shape[1], np.inf)
        np.minimum.at(ms, inv.ravel(), c["latency"][sel].astype(float))  # the fastest kernel
        t, h, i, k, e, ep = uniq
        measured = ms * 1e-3
        w_b = DTYPES[fmt].bytes
        rows = t * k / ep  # routed rows one rank computes (balanced)
        touched = e / ep * (1 - (1 - k / e) ** t)
        f_up, f_down = 2 * rows * h * 2 * i, 2 * rows * i * h
        b_up = rows * (h * w_b + 2 * i * 2.0) + touched * h * 2 * i * w_b
        b_down = rows * (i * w_b + h * 2.0) + touched * i * h * w_b
        peak = acc.peak(DTYPES[fmt].compute or "bf16")

        def predict(
            e_max: Any, half: Any, em: Any, floor: Any, x: Any = peak, g: Any = (f_up, f_down),
            b: Any = (b_up, b_down),
        ) -> Any:  # fmt: skip
            up = np.maximum((g[0] + half) / (e_max * x), b[0] / (em * hbm))
            down = np.maximum((g[1] + half) / (e_max * x), b[1] / (em * hbm))
            return up + down + 2 * floor

        out[key] = _gemm_entry(
            predict, measured, _grid(tokens=t, hidden=h, inter=i, topk=k, experts=e, ep=ep)
        )
    return out


def _window(path: Path, rows: int) -> np.ndarray:
    if "window_size" not in _names(path):
        return np.zeros(rows)
    return _columns(path, ("window_size",))["window_size"].astype(float)


OPS = (
    ("gemm", "gemm", "gemm_perf.parquet", fit_gemm),
    ("attention_prefill", "attention", "context_attention_perf.parquet", fit_prefill),
    ("attention_decode", "attention", "generation_attention_perf.parquet", fit_decode),
    ("moe", "moe", "moe_perf.parquet", fit_moe),
)


def derive(root: Path) -> dict[str, Any]:
    """The whole derived table from the op tables under ``root``."""
    systems: dict[str, Any] = {}
    for system, acc_id in SYSTEMS.items():
        ops: dict[str, Any] = {}
        for key, folder, filename, fit in OPS:
            engines: dict[str, Any] = {}
            for engine in ENGINES:
                base = root / system / folder / engine
                versions = sorted(
                    (p.name for p in base.iterdir() if (p / filename).is_file())
                    if base.is_dir()
                    else (),
                    key=version_key,
                )
                fitted = [
                    {
                        "version": v,
                        "path": f"{system}/{folder}/{engine}/{v}/{filename}",
                        "formats": formats,
                    }
                    for v in versions
                    if (formats := fit(base / v / filename, acc_id))
                ]
                if fitted:
                    engines[engine] = fitted
            ops[key] = engines
        systems[system] = {"accelerator": acc_id, "ops": ops}
    return {
        "about": (
            "Serving kernel curves fitted on NVIDIA aiconfigurator's measured operator tables, "
            "per system, engine, engine version and format (validation/derive_kernels.py; read "
            "by estimator/timing/measured.py). Constants as in estimator/catalog/efficiency.json."
        ),
        "source": {
            "package": PACKAGE,
            "version": PACKAGE_VERSION,
            "tables": "aiconfigurator_core/systems/data/<path>",
            "license": "Apache-2.0",
            "license_file": LICENSE.name,
            "copyright": "Copyright (c) NVIDIA CORPORATION & AFFILIATES",
        },
        "systems": systems,
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", type=Path, default=None, help="aiconfigurator's systems/data")
    parser.add_argument("--check", action="store_true", help="compare with the shipped file")
    args = parser.parse_args(argv)
    text = render(derive(args.root or data_root()))
    if args.check:
        same = OUT.read_text(encoding="utf-8") == text
        print("shipped tables equal a fresh derivation" if same else "shipped tables differ")
        return 0 if same else 1
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    shutil.copyfile(LICENSE, OUT_DIR / LICENSE.name)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
