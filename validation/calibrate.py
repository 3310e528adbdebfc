"""Fit the kernel efficiency constants of ``estimator/kernels.py`` on measured kernel tables.

Inputs (copied into ``validation/data/`` with their licenses): ``kernels/gemm.csv`` (bf16 GEMMs,
TensorRT-LLM, from NVIDIA aiconfigurator 0.12.0), ``kernels/attention_prefill.csv`` and
``kernels/attention_decode.csv`` (same source), ``kernels/allreduce.csv`` (nccl-tests
``all_reduce_perf`` inside one 8-GPU node) and ``efficiency.json`` (maximum achievable matmul
TFLOPS per accelerator, stas00/ml-engineering). Per measured system (H100 SXM, A100 SXM) it
fits, by grid search minimising the squared log error of predicted over measured time:

- GEMM: ``e_max``, ``F_half``, ``e_mem``, ``floor`` (4 constants);
- prefill attention: ``e_max``, ``s_half``, ``floor`` (3);
- decode attention: ``e_mem``, ``floor`` (2), on rows whose KV cache does not fit in L2;
- all-reduce over NVLink: ``latency``, ``latency per doubling``, ``bandwidth fraction`` (3);
- elementwise kernels: ``e_elem`` (1), the median of the measured efficiency medians of Vidur's
  PyTorch layer-norm, activation and rotary kernels at >= 1,025 tokens (``efficiency_summary.csv``,
  Llama-2 7B and 70B).

Blackwell (B200 SXM) has no per-shape tables here, only aiconfigurator's efficiency
distributions (``kernels/efficiency_summary.csv``: p50 of roofline over measured time per size
bin, the same harness and library versions on H100 and B200). ``derive_b200`` carries each fitted
H100 constant over by the ratio of the two chips' medians in the bin that constant governs
(compute-bound GEMMs, weight-read-bound GEMMs, long and mid-length prefill, large-KV decode,
8-GPU NCCL all-reduce bus bandwidth and small-message latency).

Nothing is fitted on end-to-end training or serving records. ``python -m validation.calibrate``
rewrites ``estimator/catalog/efficiency.json``'s ``profiles`` (keeping its hand-written
``accelerators`` and ``scale_out`` sections) and prints the fit errors.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from estimator import get_accelerator
from estimator.timing.kernels import AttentionKernel

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "data"
TABLE = ROOT / "estimator" / "catalog" / "efficiency.json"
LENT = DATA / "kernels" / "h100_lent.json"  # measured by this project (measure_kernels.py)

SYSTEMS = {"h100_sxm": "h100-sxm-80gb", "a100_sxm": "a100-sxm-80gb"}
DERIVED = {"b200_sxm": "b200"}  # profiles carried over from H100 by measured medians
BF16 = 2


def rows(name: str) -> list[dict[str, str]]:
    with (DATA / "kernels" / name).open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _grid_fit(
    predict: Any, measured: np.ndarray, grids: list[np.ndarray], weights: Any = None
) -> tuple[float, ...]:
    """Exhaustive search over the product of ``grids`` (broadcast), minimising the (weighted)
    mean squared log ratio; ``predict(*params)`` takes arrays shaped ``(g1, ..., gk, 1)``."""
    k = len(grids)
    rest = [
        g.reshape([-1 if i == j else 1 for j in range(k - 1)] + [1])
        for i, g in enumerate(grids[1:])
    ]
    # one value of the first parameter at a time: the whole product may not fit in memory
    loss = np.stack(
        [
            np.average(np.log(predict(first, *rest) / measured) ** 2, axis=-1, weights=weights)
            for first in grids[0]
        ]
    )
    idx = np.unravel_index(np.argmin(loss), loss.shape)
    return tuple(float(g[i]) for g, i in zip(grids, idx, strict=True))


def gemm_shapes(system: str, lent: bool = True) -> tuple[np.ndarray, ...]:
    """M, N, K, measured seconds and weight of each bf16 GEMM measured on ``system``: the
    TensorRT-LLM table's, and on H100 also the GEMMs this project timed on a lent card (the
    fine-grained MoE layers' and the mid-size grid, one GEMM each; ``h100_lent.json``). Each
    source weighs the same in the fit, whatever its number of rows."""
    trt = [r for r in rows("gemm.csv") if r["system"] == system and r["dtype"] == "bf16"]
    shapes = [
        (float(r["m"]), float(r["n"]), float(r["k"]), float(r["measured_ms"]), 0) for r in trt
    ]
    if system == "h100_sxm" and lent:
        shapes += [
            (r["m"], r["n"], r["k"], r["ms"] / r.get("count", 1), 1)
            for r in json.loads(LENT.read_text(encoding="utf-8"))["rows"]
            if r["op"] in ("gemm", "gemm_grid")
        ]
    m, n, k, ms, source = (np.array(c, dtype=float) for c in zip(*shapes, strict=True))
    counts = np.bincount(source.astype(int))
    return m, n, k, ms * 1e-3, 1 / counts[source.astype(int)]


def fit_gemm(system: str, lent: bool = True) -> dict[str, float]:
    """The GEMM constants on every bf16 table of ``system`` (``lent``: with the GEMMs timed on
    the lent H100, where there are some; else aiconfigurator's table alone)."""
    acc = get_accelerator(SYSTEMS[system])
    m, n, k, measured, weights = gemm_shapes(system, lent)
    flops = 2 * m * n * k
    moved = BF16 * (m * k + k * n + m * n)
    peak, hbm = acc.peak("bf16"), acc.hbm_bytes_per_s

    def predict(e: Any, half: Any, em: Any, floor: Any) -> Any:
        compute = flops / (peak * e * flops / (flops + half))
        return np.maximum(compute, moved / (hbm * em)) + floor

    e, half, em, floor = _grid_fit(
        predict,
        measured,
        [
            np.linspace(0.5, 1.0, 51),
            np.concatenate([[0.0], np.logspace(7, 11, 25)]),
            np.linspace(0.5, 1.0, 51),
            np.linspace(0, 12e-6, 49),
        ],
        weights,
    )
    return {
        "efficiency_max": round(e, 3),
        "half_gflop": round(half / 1e9, 4),
        "memory_efficiency": round(em, 3),
        "floor_us": round(floor * 1e6, 2),
    }


def prefill_shapes(data: list[dict[str, str]]) -> tuple[np.ndarray, ...]:
    b, s, h, kv, d = (
        np.array([float(r[c]) for r in data])
        for c in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim")
    )
    flops = 4 * b * h * d * s * (s + 1) / 2  # QK^T and PV over the causal half
    moved = BF16 * b * s * d * (2 * h + 2 * kv)  # q, o read/written; k, v read
    return flops, moved, s


def fit_prefill(system: str) -> dict[str, float]:
    acc = get_accelerator(SYSTEMS[system])
    data = [r for r in rows("attention_prefill.csv") if r["system"] == system]
    flops, moved, s = prefill_shapes(data)
    measured = np.array([float(r["measured_ms"]) for r in data]) * 1e-3
    peak, hbm = acc.peak("bf16"), acc.hbm_bytes_per_s

    def predict(e: Any, half: Any, floor: Any) -> Any:
        compute = flops / (peak * e * s / (s + half))
        return np.maximum(compute, moved / (hbm * 0.8)) + floor

    e, half, floor = _grid_fit(
        predict,
        measured,
        [np.linspace(0.3, 1.0, 71), np.linspace(0, 8192, 65), np.linspace(0, 40e-6, 41)],
    )
    return {
        "efficiency_max": round(e, 3),
        "half_seq": round(half),
        "floor_us": round(floor * 1e6, 2),
    }


# the model's attention kernels: the SDPA backends that timed them on the lent H100
HEAD_DIM_BACKENDS: dict[AttentionKernel, str] = {"fused": "cudnn", "flash2": "flash2"}
HEAD_DIM_SEQS = (4096, 8192)  # long enough that the kernel's ramp does not blur the head dim


def fit_head_dims() -> dict[str, dict[str, list[float]]]:
    """Attention time per FLOP at each measured head dim relative to 128 (the dim the prefill
    tables and the curve fitted on them hold), forward and backward apart, per kernel family:
    the median over ``HEAD_DIM_SEQS`` of the lent H100's 32-head causal timings. Small heads
    reuse each K/V tile over fewer FLOPs; odd sizes run a padded kernel (80 costs what 96
    does)."""
    rows_ = json.loads(LENT.read_text(encoding="utf-8"))["rows"]
    out: dict[str, dict[str, list[float]]] = {}
    for kernel, backend in HEAD_DIM_BACKENDS.items():
        timed = {
            (r["head_dim"], r["seq"]): (r["fwd_ms"], r["fwd_bwd_ms"] - r["fwd_ms"], r["flops_fwd"])
            for r in rows_
            if r["op"] == "attention"
            and r["backend"] == backend
            and r["heads"] == 32
            and r["batch"] == 1
            and r["seq"] in HEAD_DIM_SEQS
        }
        dims = sorted({d for d, _ in timed})
        factors: dict[str, list[float]] = {}
        for d in dims:
            per_seq = []
            for s in HEAD_DIM_SEQS:
                f, b, flops = timed[(d, s)]
                f0, b0, flops0 = timed[(128, s)]
                per_seq.append((f / flops / (f0 / flops0), b / flops / (b0 / flops0)))
            factors[str(d)] = [round(float(np.median([p[i] for p in per_seq])), 3) for i in (0, 1)]
        out[kernel] = factors
    return out


def fit_decode(system: str) -> dict[str, float]:
    acc = get_accelerator(SYSTEMS[system])
    data = [
        r for r in rows("attention_decode.csv") if r["system"] == system and not r["flag"].strip()
    ]
    kv = np.array([float(r["kv_bytes"]) for r in data])
    measured = np.array([float(r["measured_ms"]) for r in data]) * 1e-3
    hbm = acc.hbm_bytes_per_s

    def predict(em: Any, floor: Any) -> Any:
        return kv / (hbm * em) + floor

    em, floor = _grid_fit(predict, measured, [np.linspace(0.4, 1.0, 61), np.linspace(0, 40e-6, 81)])
    return {"memory_efficiency": round(em, 3), "floor_us": round(floor * 1e6, 2)}


def fit_allreduce(system: str) -> dict[str, float]:
    acc = get_accelerator(SYSTEMS[system])
    data = [
        r
        for r in rows("allreduce.csv")
        if r["system"] == system and r["impl"].startswith("NCCL (nccl-tests")
    ]
    n = np.array([float(r["num_gpus"]) for r in data])
    size = np.array([float(r["message_bytes"]) for r in data])
    measured = np.array([float(r["measured_ms"]) for r in data]) * 1e-3
    bw = acc.scale_up_bytes_per_s
    assert bw is not None

    def predict(lat: Any, per: Any, frac: Any) -> Any:
        return lat + per * np.log2(n) + 2 * (n - 1) / n * size / (bw * frac)

    lat, per, frac = _grid_fit(
        predict,
        measured,
        [np.linspace(0, 20e-6, 41), np.linspace(0, 10e-6, 41), np.linspace(0.3, 1.2, 91)],
    )
    return {
        "latency_us": round(lat * 1e6, 2),
        "latency_per_doubling_us": round(per * 1e6, 2),
        "bandwidth_fraction": round(frac, 3),
    }


_ELEMENTWISE_OPS = ("vidur_input_layernorm_fp16", "vidur_mlp_act_fp16", "vidur_attn_rope_fp16")


def fit_elementwise(system: str) -> dict[str, float]:
    """Elementwise streaming efficiency: the median, over Vidur's layer-norm, activation and
    rotary kernels of Llama-2 7B and 70B, of each one's median efficiency at >= 1,025 tokens
    (roofline over measured time; the launch floor is negligible at these sizes)."""
    medians = [
        float(r["eff_p50"])
        for r in rows("efficiency_summary.csv")
        if r["system"] == system and r["op"] in _ELEMENTWISE_OPS and "tokens 1025-" in r["bin"]
    ]
    return {"memory_efficiency": round(float(np.median(medians)), 3)}


def summary_p50(op: str, system: str, bin_name: str, column: str = "eff_p50") -> float:
    """One median of ``kernels/efficiency_summary.csv`` (aiconfigurator distributions)."""
    for r in rows("efficiency_summary.csv"):
        if r["op"] == op and r["system"] == system and r["bin"] == bin_name:
            return float(r[column])
    raise KeyError(f"{op} / {system} / {bin_name} not in efficiency_summary.csv")


_GEMM_BIG = "m,n,k>=4096 (compute-bound)"
_GEMM_WEIGHTS = "m<=16, n*k>=16M (weight-read bound)"
_GEMM_TINY = "n*k<=1M, m<=256 (launch/latency bound)"
_PREFILL_MID = "hd=128, isl 513-4096, b*isl>=4096"
_PREFILL_LONG = "hd=128, isl 4097-1048576, b*isl>=4096"
_PREFILL_MID_S = math.sqrt(513 * 4096)  # geometric middle of the bins
_PREFILL_LONG_S = 16384.0
_DECODE_BIG = "hd=128, KV>=256MB"
_DECODE_SMALL = "hd=128, KV<1MB"
_AR_BIG = "n=8, >=64MB"
_AR_SMALL = "n=8, <=64KB"


def _half_seq_for(ratio: float) -> float:
    """``s_half`` whose saturation curve gives ``ratio`` between the mid and long prefill bins."""
    lo, hi = 1.0, 65536.0
    for _ in range(60):
        h = math.sqrt(lo * hi)
        r = (_PREFILL_MID_S / (_PREFILL_MID_S + h)) / (_PREFILL_LONG_S / (_PREFILL_LONG_S + h))
        lo, hi = (h, hi) if r > ratio else (lo, h)
    return h


def derive_b200(h100: dict[str, Any]) -> dict[str, Any]:
    """B200 constants: the fitted H100 ones times the B200 / H100 ratio of aiconfigurator's
    medians (same harness, TensorRT-LLM 1.3.0rc20 kernels, NCCL 2.29.2) in the matching bin;
    for the GEMMs, the H100 fit on aiconfigurator's table alone (``gemm_aiconfigurator``): the
    ratio is of that harness's medians, and the lent H100's timings are not in it.
    NCCL bandwidth compares bus bandwidth over each chip's NVLink bandwidth."""
    h, b = "h100_sxm", "b200_sxm"

    def ratio(op: str, bin_name: str, column: str = "eff_p50") -> float:
        return summary_p50(op, b, bin_name, column) / summary_p50(op, h, bin_name, column)

    g, a, d, up = (
        h100.get("gemm_aiconfigurator", h100["gemm"]),
        h100["attention_prefill"],
        h100["attention_decode"],
        h100["scale_up"],
    )
    weights = ratio("gemm_bf16", _GEMM_WEIGHTS)
    shape = {
        sys_: summary_p50("attn_prefill_bf16", sys_, _PREFILL_MID)
        / summary_p50("attn_prefill_bf16", sys_, _PREFILL_LONG)
        for sys_ in (h, b)
    }
    h100_curve = (_PREFILL_MID_S / (_PREFILL_MID_S + a["half_seq"])) / (
        _PREFILL_LONG_S / (_PREFILL_LONG_S + a["half_seq"])
    )
    busbw = {
        sys_: summary_p50("allreduce_nccl_fp16", sys_, _AR_BIG, "busbw_gbps_p50")
        * 1e9
        / (get_accelerator({**SYSTEMS, **DERIVED}[sys_]).scale_up_bytes_per_s or 1.0)
        for sys_ in (h, b)
    }
    latency = ratio("allreduce_nccl_fp16", _AR_SMALL, "latency_us_p50")
    return {
        "gemm": {
            "efficiency_max": round(g["efficiency_max"] * ratio("gemm_bf16", _GEMM_BIG), 3),
            "half_gflop": g["half_gflop"],
            "memory_efficiency": round(g["memory_efficiency"] * weights, 3),
            "floor_us": round(g["floor_us"] * ratio("gemm_bf16", _GEMM_TINY, "latency_us_p50"), 2),
        },
        "attention_prefill": {
            "efficiency_max": round(
                a["efficiency_max"] * ratio("attn_prefill_bf16", _PREFILL_LONG), 3
            ),
            "half_seq": round(_half_seq_for(h100_curve * shape[b] / shape[h])),
            "floor_us": a["floor_us"],
        },
        "attention_decode": {
            "memory_efficiency": round(
                d["memory_efficiency"] * ratio("attn_decode_bf16kv[trtllm]", _DECODE_BIG), 3
            ),
            "floor_us": round(
                d["floor_us"]
                * ratio("attn_decode_bf16kv[trtllm]", _DECODE_SMALL, "latency_us_min"),
                2,
            ),
        },
        # No elementwise kernels measured on B200: its streaming GEMMs' ratio to H100's.
        "elementwise": {
            "memory_efficiency": round(h100["elementwise"]["memory_efficiency"] * weights, 3)
        },
        "scale_up": {
            "latency_us": round(up["latency_us"] * latency, 2),
            "latency_per_doubling_us": round(up["latency_per_doubling_us"] * latency, 2),
            "bandwidth_fraction": round(up["bandwidth_fraction"] * busbw[b] / busbw[h], 3),
        },
    }


def blackwell_head_dims(hopper: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Blackwell's attention time per FLOP by head dim, where no Blackwell kernel was timed:
    the lent H100's factors for the dims up to 128, a lower bound. A head's two matmuls take
    4 d FLOPs per (query, key) pair and its softmax one exponential: Blackwell doubles the tensor
    cores' rate and keeps the exponential units at 16 a clock per SM (FlashAttention-4), so a
    128-dim head balances the two where Hopper's is matmul-bound, and smaller heads are
    exponential-bound sooner; Blackwell Ultra's doubled exponential rate (B300, GB300) puts it
    back where Hopper is. Larger heads keep the 128-dim curve (Blackwell's cuDNN has its own
    kernels for MLA's 192 / 128 heads)."""
    return {
        "time_per_flop": {
            kernel: {d: v for d, v in dims.items() if int(d) <= 128}
            for kernel, dims in hopper.items()
        },
        "source": (
            "The h100_sxm profile's measured factors for head dims up to 128"
            " (validation/calibrate.py blackwell_head_dims), as a lower bound: Blackwell"
            " doubles the tensor-core rate and not the exponential units (16 a clock per SM),"
            " so smaller heads are no cheaper per FLOP than on Hopper (Zadouri et al. 2026,"
            " FlashAttention-4, arXiv:2603.05451; together.ai blog 'FlashAttention-4')."
            " Larger heads keep the 128-dim curve."
        ),
    }


def mamf_efficiency() -> dict[str, dict[str, float]]:
    """Maximum achievable matmul efficiency per accelerator name and dtype."""
    out: dict[str, dict[str, float]] = {}
    for r in json.loads((DATA / "efficiency.json").read_text(encoding="utf-8")):
        if r.get("category") == "gemm_max_achievable":
            m = r["measured"]
            out.setdefault(r["accelerator"], {})[r["dtype"]] = (
                m["mamf_tflops"] / m["theoretical_tflops"]
            )
    return out


def main() -> None:
    table = json.loads(TABLE.read_text(encoding="utf-8"))
    for system in SYSTEMS:
        prof = table["profiles"].setdefault(system, {})
        prof["gemm"] = fit_gemm(system)
        if system == "h100_sxm":  # what the Blackwell derivation scales (derive_b200)
            prof["gemm_aiconfigurator"] = fit_gemm(system, lent=False)
        prof["attention_prefill"] = fit_prefill(system)
        prof["attention_decode"] = fit_decode(system)
        prof["scale_up"] = fit_allreduce(system)
        prof["elementwise"] = fit_elementwise(system)
        prof["measured"] = True
        print(
            system,
            json.dumps(
                {k: prof[k] for k in ("gemm", "attention_prefill", "attention_decode", "scale_up")}
            ),
        )
    b200 = table["profiles"].setdefault("b200_sxm", {})
    b200.update(derive_b200(table["profiles"]["h100_sxm"]))
    b200["measured"] = False  # carried over by medians, not fitted on per-shape B200 tables
    b200.setdefault("scale_out", table["profiles"]["h100_sxm"]["scale_out"])
    b200["source"] = (
        "fitted h100_sxm constants x the B200 / H100 ratio of NVIDIA aiconfigurator-core 0.12.0 "
        "(Apache-2.0) efficiency medians, validation/data/kernels/efficiency_summary.csv, by "
        "validation/calibrate.py derive_b200"
    )
    print("b200_sxm", json.dumps({k: b200[k] for k in ("gemm", "attention_prefill")}))
    hopper = fit_head_dims()
    table["profiles"]["h100_sxm"]["attention_head_dim"]["time_per_flop"] = hopper
    b200["attention_head_dim"] = blackwell_head_dims(hopper)
    table["mamf_efficiency"] = {
        k: {d: round(v, 4) for d, v in sorted(x.items())}
        for k, x in sorted(mamf_efficiency().items())
    }
    TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
