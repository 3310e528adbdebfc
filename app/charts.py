"""Plotly figure dicts built from API responses. The pages embed them as JSON and one small
script (``static/charts.js``) draws them; nothing here recomputes a number, it only converts
units for display (bytes to GiB, seconds to ms) and arranges traces.

Every chart reads a breakdown the core returned, so the bars always sum to the total shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "COLORS",
    "inference_latency_figure",
    "inference_memory_figure",
    "serving_curve_figure",
    "training_memory_figure",
    "training_time_figure",
]

GIB = 2**30
Figure = dict[str, Any]

# One color per term across every chart (colour-blind-safe Okabe-Ito order, then greys).
COLORS = {
    "weights": "#0072B2",
    "weight_cache": "#56B4E9",
    "gradients": "#E69F00",
    "master_weights": "#D55E00",
    "optimizer_states": "#CC79A7",
    "activations": "#009E73",
    "logits": "#F0E442",
    "zero3_gather": "#999999",
    "kv_cache": "#E69F00",
    "activation_peak": "#009E73",
    "runtime_overhead": "#777777",
    "cuda_context": "#777777",
    "comm_buffers": "#AAAAAA",
    "fragmentation": "#CCCCCC",
    "compute": "#0072B2",
    "bubble": "#BBBBBB",
    "tp_comm": "#E69F00",
    "ep_comm": "#CC79A7",
    "cp_comm": "#56B4E9",
    "pp_comm": "#D55E00",
    "dp_comm": "#009E73",
    "zero3_comm": "#999999",
    "optimizer": "#F0E442",
    "gemm": "#0072B2",
    "attention": "#009E73",
    "elementwise": "#F0E442",
    "comm": "#E69F00",
}

LABELS = {
    "weights": "Weights",
    "weight_cache": "FP8 weight cache",
    "gradients": "Gradients",
    "master_weights": "Master weights (fp32)",
    "optimizer_states": "Optimizer states",
    "activations": "Activations",
    "logits": "Logits",
    "zero3_gather": "ZeRO-3 gather buffers",
    "cuda_context": "CUDA context",
    "comm_buffers": "NCCL buffers",
    "fragmentation": "Allocator fragmentation",
    "kv_cache": "KV cache",
    "activation_peak": "Activations (peak)",
    "runtime_overhead": "Runtime overhead",
    "compute": "Compute",
    "bubble": "Pipeline bubble",
    "tp_comm": "TP comm (exposed)",
    "ep_comm": "EP all-to-all (exposed)",
    "cp_comm": "CP comm (exposed)",
    "pp_comm": "PP send/recv (exposed)",
    "dp_comm": "DP grad sync (exposed)",
    "zero3_comm": "ZeRO-3 gathers (exposed)",
    "optimizer": "Optimizer step",
    "gemm": "GEMMs",
    "attention": "Attention",
    "elementwise": "Elementwise",
    "comm": "Communication",
}

_LAYOUT = {
    "margin": {"l": 60, "r": 60, "t": 40, "b": 20},
    "font": {"family": "system-ui, sans-serif", "size": 13},
    "legend": {"orientation": "h", "y": -0.3, "yanchor": "top", "traceorder": "normal"},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
}


def _stacked_bar(
    terms: Mapping[str, float], scale: float, unit: str, category: str
) -> list[dict[str, Any]]:
    """One horizontal bar per term, stacked; zero terms are left out."""
    return [
        {
            "type": "bar",
            "orientation": "h",
            "name": LABELS.get(name, name),
            "x": [value / scale],
            "y": [category],
            "marker": {"color": COLORS.get(name, "#444")},
            "hovertemplate": f"%{{fullData.name}}: %{{x:.2f}} {unit}<extra></extra>",
            "meta": name,
        }
        for name, value in terms.items()
        if value > 0
    ]


def _memory_figure(terms: Mapping[str, float], capacity_bytes: float, title: str) -> Figure:
    total = sum(terms.values())
    capacity = capacity_bytes / GIB
    return {
        "data": _stacked_bar(terms, GIB, "GiB", "per GPU"),
        "layout": {
            **_LAYOUT,
            "title": {"text": title},
            "barmode": "stack",
            "height": 300,
            "xaxis": {
                "title": {"text": "GiB", "standoff": 4},
                "range": [0, max(total / GIB, capacity) * 1.08],
            },
            "yaxis": {"showticklabels": False},
            "shapes": [
                {
                    "type": "line",
                    "name": "capacity",
                    "x0": capacity,
                    "x1": capacity,
                    "y0": -0.5,
                    "y1": 0.5,
                    "line": {"color": "#C00000", "width": 3, "dash": "dash"},
                }
            ],
            "annotations": [
                {
                    "x": capacity,
                    "y": 0.5,
                    "yanchor": "bottom",
                    "text": f"capacity {capacity:.1f} GiB",
                    "showarrow": False,
                    "font": {"color": "#C00000"},
                }
            ],
        },
    }


def _strip(terms: Mapping[str, Any], suffix: str) -> dict[str, float]:
    return {k.removesuffix(suffix): float(v) for k, v in terms.items() if k.endswith(suffix)}


def training_memory_figure(result: Mapping[str, Any]) -> Figure:
    """Per-GPU memory terms stacked against the GPU's capacity (a dashed line)."""
    m = result["memory_per_gpu"]
    terms = {
        k: v for k, v in _strip(m, "_bytes").items() if k not in ("total", "capacity", "headroom")
    }
    return _memory_figure(terms, m["capacity_bytes"], "Memory per GPU (most-loaded stage)")


def training_time_figure(result: Mapping[str, Any]) -> Figure:
    """The step time split into compute, bubble, exposed communication and optimizer."""
    parts = _strip(result["time"]["breakdown"], "_s")
    return {
        "data": _stacked_bar(parts, 1.0, "s", "step"),
        "layout": {
            **_LAYOUT,
            "title": {"text": f"Step time {result['time']['step_s']:.3g} s"},
            "barmode": "stack",
            "height": 280,
            "xaxis": {"title": {"text": "seconds", "standoff": 4}},
            "yaxis": {"showticklabels": False},
        },
    }


def inference_memory_figure(result: Mapping[str, Any]) -> Figure:
    m = result["memory_per_gpu"]
    terms = {
        k: m[f"{k}_bytes"] for k in ("weights", "kv_cache", "activation_peak", "runtime_overhead")
    }
    title = f"Memory per GPU at concurrency {result['concurrency']}"
    return _memory_figure(terms, m["capacity_bytes"], title)


def inference_latency_figure(result: Mapping[str, Any]) -> Figure:
    """TTFT and TPOT, each split into GEMMs, attention, elementwise and communication (ms)."""
    lat = result["latency"]
    ttft, tpot = _strip(lat["ttft_breakdown"], "_s"), _strip(lat["tpot_breakdown"], "_s")
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": LABELS[name],
            "x": [ttft[name] * 1e3, tpot[name] * 1e3],
            "y": ["TTFT", "TPOT"],
            "marker": {"color": COLORS[name]},
            "hovertemplate": "%{y} %{fullData.name}: %{x:.2f} ms<extra></extra>",
            "meta": name,
        }
        for name in ttft
    ]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "Latency breakdown"},
            "barmode": "stack",
            "height": 300,
            "xaxis": {"title": {"text": "milliseconds", "standoff": 4}},
        },
    }


def serving_curve_figure(
    result: Mapping[str, Any], tpot_target_s: float | None, ttft_target_s: float | None
) -> Figure:
    """Throughput and TPOT against concurrency, with the KV-cache limit and the SLO lines."""
    curve: Sequence[Mapping[str, Any]] = result["curve"]
    x = [p["concurrency"] for p in curve]
    # On a log axis plotly.js 4 places shapes in data units and annotations in log10 units.
    limit = result["max_concurrency"]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "Output tokens/s",
            "x": x,
            "y": [p["output_tokens_per_s"] for p in curve],
            "marker": {"color": COLORS["gemm"]},
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "TPOT (ms)",
            "x": x,
            "y": [p["tpot_s"] * 1e3 for p in curve],
            "yaxis": "y2",
            "marker": {"color": COLORS["comm"]},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "TTFT (ms)",
            "x": x,
            "y": [p["ttft_s"] * 1e3 for p in curve],
            "yaxis": "y2",
            "line": {"color": COLORS["optimizer_states"], "dash": "dash"},
        },
    ]
    shapes: list[dict[str, Any]] = [
        {
            "type": "line",
            "name": "memory limit",
            "xref": "x",
            "yref": "paper",
            "x0": limit,
            "x1": limit,
            "y0": 0,
            "y1": 1,
            "line": {"color": "#C00000", "dash": "dash", "width": 2},
        }
    ]
    annotations = [
        {
            "x": math.log10(max(limit, 1)),
            "y": 1,
            "xref": "x",
            "yref": "paper",
            "text": f"KV cache full at {result['max_concurrency']}",
            "showarrow": False,
            "yanchor": "bottom",
            "font": {"color": "#C00000"},
        }
    ]
    latencies_ms = [max(p["tpot_s"], p["ttft_s"]) * 1e3 for p in curve]
    targets_ms = []
    for name, target in (("TPOT", tpot_target_s), ("TTFT", ttft_target_s)):
        if target is not None:
            targets_ms.append(target * 1e3)
            annotations.append(
                {
                    "x": 0,
                    "y": target * 1e3,
                    "xref": "paper",
                    "yref": "y2",
                    "text": f"{name} target",
                    "showarrow": False,
                    "xanchor": "left",
                    "yanchor": "bottom",
                    "font": {"color": "#555"},
                }
            )
            shapes.append(
                {
                    "type": "line",
                    "name": f"{name} target",
                    "xref": "paper",
                    "yref": "y2",
                    "x0": 0,
                    "x1": 1,
                    "y0": target * 1e3,
                    "y1": target * 1e3,
                    "line": {"color": "#555", "dash": "dot", "width": 2},
                }
            )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "Throughput and latency vs concurrency"},
            "height": 380,
            "xaxis": {"title": {"text": "concurrent sequences", "standoff": 4}, "type": "log"},
            "yaxis": {"title": {"text": "output tokens/s"}, "rangemode": "tozero"},
            "yaxis2": {
                "title": {"text": "latency (ms)"},
                "overlaying": "y",
                "side": "right",
                "range": [0, 1.1 * max(latencies_ms + targets_ms)],
            },
            "shapes": shapes,
            "annotations": annotations,
        },
    }
