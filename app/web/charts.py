"""Plotly figure dicts built from API responses. The pages embed them as JSON and one small
script (``static/charts.js``) draws them; nothing here recomputes a number, it only converts
units for display (bytes to GiB, seconds to ms) and arranges traces.

Every chart reads a breakdown the core returned, so the bars always sum to the total shown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from app.format import disagg_layout as _dis_text
from estimator import terms
from estimator.inputs.accelerator import GIB

__all__ = [
    "COLORS",
    "accuracy_figure",
    "compare_curve_figure",
    "compare_latency_figure",
    "compare_memory_figure",
    "compare_time_figure",
    "disaggregated_front_figure",
    "figure_json",
    "figure_rows",
    "inference_latency_figure",
    "inference_memory_figure",
    "inference_terms",
    "rank_grid_figure",
    "serving_curve_figure",
    "serving_sweep_bars_figure",
    "serving_sweep_scatter_figure",
    "sweep_bars_figure",
    "sweep_heatmap_figure",
    "sweep_scatter_figure",
    "timeline_figure",
    "training_memory_figure",
    "training_terms",
    "training_time_figure",
]

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
    "dequant_buffer": "#56B4E9",
    "kv_cache": "#E69F00",
    "draft_weights": "#56B4E9",
    "draft_kv_cache": "#F0E442",
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
    "host": "#882255",
    "optimizer": "#F0E442",
    "gemm": "#0072B2",
    "attention": "#009E73",
    "elementwise": "#F0E442",
    "comm": "#E69F00",
}

LABELS = terms.labels()  # every term's label, from the core's registry

# Every axis of every chart (a template's ``xaxis``/``yaxis`` apply to ``xaxis2``, ``yaxis2``
# ... too) grows the margin its tick labels and title need, the title kept clear of the labels:
# fixed margins clipped long labels ("$0.00050", rotated phase names) and drew titles over them.
AXIS_FIT = {"automargin": True, "title": {"standoff": 10}}

_LAYOUT = {
    "margin": {"l": 60, "r": 60, "t": 40, "b": 20},  # the least; automargin adds what is needed
    "font": {"family": "system-ui, sans-serif", "size": 13},
    "legend": {"orientation": "h", "y": -0.3, "yanchor": "top", "traceorder": "normal"},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "template": {"layout": {"xaxis": AXIS_FIT, "yaxis": AXIS_FIT}},
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


def inference_terms(result: Mapping[str, Any]) -> dict[str, float]:
    """A serving answer's memory per GPU by term (bytes); the drafter's terms only where
    speculative decoding holds any."""
    m = result["memory_per_gpu"]
    shown = ("weights", "draft_weights", "kv_cache", "draft_kv_cache", "activation_peak",
             "runtime_overhead")  # fmt: skip
    return {k: m[f"{k}_bytes"] for k in shown if m[f"{k}_bytes"] or not k.startswith("draft")}


def training_terms(result: Mapping[str, Any]) -> dict[str, float]:
    """A training answer's memory per GPU by term (bytes)."""
    totals = ("total", "capacity", "headroom")
    return {k: v for k, v in _strip(result["memory_per_gpu"], "_bytes").items() if k not in totals}


def inference_memory_figure(result: Mapping[str, Any]) -> Figure:
    title = f"Memory per GPU at concurrency {result['concurrency']}"
    return _memory_figure(
        inference_terms(result), result["memory_per_gpu"]["capacity_bytes"], title
    )


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


def _limit_line(
    x: float, name: str, text: str, *, color: str = "#C00000", dash: str = "dash", log: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A vertical limit at ``x`` (the KV cache, the slots, a target), and its label; on a log x
    axis plotly.js 4 places shapes in data units and annotations in log10 units."""
    shape = {
        "type": "line",
        "name": name,
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"color": color, "dash": dash, "width": 2},
    }
    note = {
        "x": math.log10(max(x, 1)) if log else x,
        "y": 1,
        "xref": "x",
        "yref": "paper",
        "text": text,
        "showarrow": False,
        "yanchor": "bottom",
        "font": {"color": color},
    }
    return shape, note


def _limit_and_targets(
    limit: tuple[dict[str, Any], dict[str, Any]],
    tpot_target_s: float | None,
    ttft_target_s: float | None,
    yref: str,
    *,
    log: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The shapes and annotations of a serving chart: its vertical ``limit`` line, then the
    TPOT and TTFT target lines that are given (on the ``yref`` axis, ``log`` if it is one)."""
    lines = [limit] + [
        _target_line(name, target, yref, log=log)
        for name, target in (("TPOT", tpot_target_s), ("TTFT", ttft_target_s))
        if target is not None
    ]
    return [shape for shape, _ in lines], [note for _, note in lines]


def _target_line(
    name: str, target_s: float, yref: str, *, log: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A latency target (seconds) as a dotted horizontal line in ms on ``yref``, labelled; on a
    ``log`` axis the label sits at the line's log10 (plotly.js places shapes in data units and
    annotations in log10 units there: a 42 ms target's label at 1e42 ms stretched the axis)."""
    y = target_s * 1e3
    shape = {
        "type": "line",
        "name": f"{name} target",
        "xref": "paper",
        "yref": yref,
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": "#555", "dash": "dot", "width": 2},
    }
    note = {
        "x": 0,
        "y": math.log10(y) if log else y,
        "xref": "paper",
        "yref": yref,
        "text": f"{name} target",
        "showarrow": False,
        "xanchor": "left",
        "yanchor": "bottom",
        "font": {"color": "#555"},
    }
    return shape, note


# A latency chart draws its points up to the last bounded one: a point whose queue diverges
# (the core's ``overloaded`` regime, an infinite latency) or whose latency passes
# ``OVERLOAD_FACTOR`` times the largest at an in-range point (within the slots, or the KV cache)
# is left out and the rest of the axis is shaded "overloaded", so a diverging queue never
# stretches a log axis to 1e42 ms.
OVERLOAD_FACTOR = 100.0
OVERLOAD_COLOR = "#C00000"


def bounded_count(
    series: Sequence[Sequence[float]], in_range: Sequence[bool], overloaded: Sequence[bool]
) -> int:
    """How many leading points of a latency chart are bounded: the points before the first that
    is ``overloaded``, has a latency (any of ``series``, ms) that is infinite, or one over
    ``OVERLOAD_FACTOR`` times the largest finite latency at the ``in_range`` points (a missing
    latency, NaN, is a gap, not a cut)."""
    finite = [
        v for ys in series for v, ok in zip(ys, in_range, strict=True) if ok and math.isfinite(v)
    ]
    bound = OVERLOAD_FACTOR * max(finite) if finite else math.inf
    for i, over in enumerate(overloaded):
        if over or any(ys[i] == math.inf or ys[i] > bound for ys in series):
            return i
    return len(overloaded)


def _overloaded_band(
    x: Sequence[float], cut: int, unit: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The shaded band from the last bounded point (of ``cut``) to the axis' end on a log x
    axis, and its label (shapes, annotations); none where every point is bounded."""
    if cut >= len(x):
        return [], []
    x0 = x[cut - 1] if cut else x[0]
    band = {
        "type": "rect",
        "name": "overloaded",
        "xref": "x",
        "yref": "paper",
        "x0": x0,
        "x1": x[-1],
        "y0": 0,
        "y1": 1,
        "fillcolor": OVERLOAD_COLOR,
        "opacity": 0.08,
        "line": {"width": 0},
        "layer": "below",
    }
    note = {
        "name": "overloaded",
        "x": math.log10(max(x0, 1e-300)),
        "y": 0.5,
        "xref": "x",
        "yref": "paper",
        "text": f"overloaded from {x[cut]:,g} {unit}",
        "hovertext": "latency grows without bound (or past "
        f"{OVERLOAD_FACTOR:g}x the in-range points'): not drawn",
        "textangle": -90,
        "showarrow": False,
        "xanchor": "left",
        "font": {"color": OVERLOAD_COLOR},
    }
    return [band], [note]


def serving_curve_figure(
    result: Mapping[str, Any], tpot_target_s: float | None, ttft_target_s: float | None
) -> Figure:
    """Throughput and TPOT against concurrency, with the KV-cache limit and the SLO lines."""
    everything: Sequence[Mapping[str, Any]] = result["curve"]
    cut = bounded_count(
        [[p[k] * 1e3 for p in everything] for k in ("tpot_s", "ttft_s")],
        [bool(p["fits"]) for p in everything],
        [False] * len(everything),
    )
    curve = everything[:cut]
    x = [p["concurrency"] for p in curve]
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
    shapes, annotations = _limit_and_targets(
        _limit_line(limit, "memory limit", f"KV cache full at {limit}"),
        tpot_target_s,
        ttft_target_s,
        "y2",
    )
    band, note = _overloaded_band([p["concurrency"] for p in everything], cut, "in flight")
    shapes, annotations = shapes + band, annotations + note
    latencies_ms = [max(p["tpot_s"], p["ttft_s"]) * 1e3 for p in curve]
    targets_ms = [t * 1e3 for t in (tpot_target_s, ttft_target_s) if t is not None]
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
                "range": [0, 1.1 * max(latencies_ms + targets_ms + [1.0])],
            },
            "shapes": shapes,
            "annotations": annotations,
        },
    }


def serving_load_figure(
    points: Sequence[Any],
    slots: int,
    tpot_target_s: float | None,
    ttft_target_s: float | None,
) -> Figure:
    """TTFT (mean and p99) and TPOT in steady state (or over a finite run of ``num_prompts``
    requests) against the requests kept in flight, with the replica's slots (past them requests
    queue) and the SLO lines (``serving.load``)."""
    series = [
        ("TTFT mean (ms)", [p.ttft_s * 1e3 for p in points], COLORS["optimizer_states"], "solid"),
        ("TTFT p99 (ms)", [p.ttft_p99_s * 1e3 for p in points], COLORS["optimizer_states"], "dot"),
        ("TPOT (ms)", [p.tpot_s * 1e3 for p in points], COLORS["comm"], "solid"),
    ]
    cut = bounded_count(
        [ys for _, ys, _, _ in series],
        [p.concurrency is not None and p.concurrency <= slots for p in points],
        [p.regime == "overloaded" for p in points],
    )
    x = [p.concurrency for p in points]
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": name, "x": x[:cut],
         "y": [v if math.isfinite(v) else None for v in ys[:cut]],
         "line": {"color": color, "dash": dash}}
        for name, ys, color, dash in series
    ]  # fmt: skip
    shapes, annotations = _limit_and_targets(
        _limit_line(slots, "slots", f"{slots} slots: more requests queue"),
        tpot_target_s,
        ttft_target_s,
        "y",
        log=True,
    )
    band, note = _overloaded_band(x, cut, "in flight")
    shapes, annotations = shapes + band, annotations + note
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": _load_title(points)},
            "height": 380,
            "xaxis": {"title": {"text": "requests kept in flight", "standoff": 4}, "type": "log"},
            "yaxis": {"title": {"text": "latency (ms)"}, "type": "log"},
            "shapes": shapes,
            "annotations": annotations,
        },
    }


def _load_title(points: Sequence[Any]) -> str:
    runs = {p.num_prompts for p in points}
    if runs == {None}:
        return "Latency under load (steady state)"
    return f"Latency under load (a run of {max(r or 0 for r in runs):,} requests at each load)"


def _figure(data: list[dict[str, Any]], title: str, height: int, **layout: Any) -> Figure:
    """A figure in the pages' common layout, titled, ``layout`` (axes, barmode ...) over it."""
    return {
        "data": data,
        "layout": {**_LAYOUT, "title": {"text": title}, "height": height, **layout},
    }


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def figure_json(figure: Figure) -> str:
    """A figure as strict JSON for the page: a missing value (NaN) becomes null, which Plotly
    leaves as a gap; JSON has no NaN."""
    return json.dumps(_finite(figure), allow_nan=False)


# --- sweeps -----------------------------------------------------------------------------------

# Points drawn per chart: every Pareto point, then the best of the rest (a sweep can evaluate a
# million layouts; a browser draws a few thousand points comfortably).
MAX_POINTS = 3000
ACCELERATOR_COLORS = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00",
    "#56B4E9", "#F0E442", "#000000", "#8C564B", "#7F7F7F",
)  # fmt: skip


# Marker symbols of the software stacks a sweep compares, in the order it lists them.
STACK_SYMBOLS = ("circle", "square", "diamond", "triangle-up")


def _sweep_labels(s: Any, index: np.ndarray) -> list[str]:
    several = len(s.stacks) > 1
    return [
        f"{r['accelerator']} x {r['num_gpus']}: tp {r['tp']} pp {r['pp']} dp {r['dp']} "
        f"ep {r['ep']} ZeRO {r['zero']} mb {r['micro_batch']} {r['precision']} {r['recompute']}"
        + (f" {r['stack']}" if several else "")
        for r in s.rows(index)
    ]


def _thin(index: Any, keep: Any, limit: int) -> Any:
    """``index`` cut to ``limit`` points: those in ``keep`` first, then evenly spaced others."""
    if index.size <= limit:
        return index
    kept = np.intersect1d(index, keep)
    rest = np.setdiff1d(index, kept)
    step = max(1, rest.size // max(limit - kept.size, 1))
    return np.concatenate([kept, rest[::step][: max(limit - kept.size, 0)]])


def sweep_scatter_figure(s: Any) -> Figure:
    """Feasible layouts as points of throughput against cost per 1M tokens (time per step when
    nothing is priced), colored by accelerator, with the Pareto front; layouts that do not fit in
    memory in grey, their reason on hover. SVG traces (``scatter``), thinned to ``MAX_POINTS``:
    Plotly's WebGL traces need ``eval``, which the site's CSP (``script-src 'self'``) forbids, so
    they drew a grey "WebGL is not supported" box for everyone."""
    c = s.columns
    priced = s.objective == "cost"
    y_name = "usd_per_1m_tokens" if priced else "step_s"
    y_title = "USD per 1M tokens" if priced else "step time (s)"
    feasible = _thin(s.feasible, s.pareto_cost if priced else s.pareto_memory, MAX_POINTS)
    data: list[dict[str, Any]] = []
    several = len(s.stacks) > 1  # a trace per accelerator and stack, the stack as the symbol
    for a, name in enumerate(s.accelerators):
        for k, stack in enumerate(s.stacks):
            idx = feasible[(c["accelerator"][feasible] == a) & (c["stack"][feasible] == k)]
            idx = idx[np.isfinite(c[y_name][idx])]  # unpriced accelerators have no cost to plot
            if not idx.size:
                continue
            marker = {"color": ACCELERATOR_COLORS[a % len(ACCELERATOR_COLORS)], "size": 6}
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{name} · {stack}" if several else name,
                    "x": c["tokens_per_s"][idx].tolist(),
                    "y": c[y_name][idx].tolist(),
                    "text": _sweep_labels(s, idx),
                    "hovertemplate": "%{text}<br>%{x:,.0f} tokens/s, %{y:.4g}<extra></extra>",
                    "marker": marker | {"symbol": STACK_SYMBOLS[k % len(STACK_SYMBOLS)]},
                }
            )
    fits = c["fits"].astype(bool)
    # Layouts left out of the feasible set by their memory, each with what it holds on hover:
    # those that do not fit, and those under the card whose likely peak is over it (tight).
    for name, chosen, words, marker in (
        ("does not fit", ~fits, "out of memory: needs {m} of {cap} GiB",
         {"color": "#C8C8C8", "size": 5}),
        ("tight", fits & (c["fit"] == 1), "tight: {m} of {cap} GiB, its likely peak over it",
         {"color": "#E0A030", "size": 5, "symbol": "diamond-open"}),
    ):  # fmt: skip
        idx = _thin(np.flatnonzero(chosen), np.zeros(0, dtype=np.int64), MAX_POINTS // 3)
        if not idx.size:
            continue
        text = [
            label
            + "<br>"
            + words.format(
                m=f"{c['memory_bytes'][i] / GIB:.1f}", cap=f"{c['capacity_bytes'][i] / GIB:.1f}"
            )
            for label, i in zip(_sweep_labels(s, idx), idx, strict=True)
        ]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "x": c["tokens_per_s"][idx].tolist(),
                "y": [None if np.isnan(v) else float(v) for v in c[y_name][idx]],
                "text": text,
                "hovertemplate": "%{text}<extra></extra>",
                "marker": marker,
            }
        )
    front = s.pareto_cost if priced else s.pareto_memory
    if priced and front.size:
        order = front[np.argsort(c["tokens_per_s"][front])]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "Pareto front",
                "x": c["tokens_per_s"][order].tolist(),
                "y": c[y_name][order].tolist(),
                "line": {"color": "#C00000", "width": 2},
                "hoverinfo": "skip",
            }
        )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "Every evaluated layout: throughput against cost"},
            "height": 460,
            "xaxis": {"title": {"text": "tokens/s"}, "type": "log"},
            "yaxis": {"title": {"text": y_title}, "type": "log"},
        },
    }


def sweep_heatmap_figure(s: Any) -> Figure:
    """The cheapest feasible layout's cost per 1M tokens (or fastest step) for each TP x PP,
    over every other choice."""
    c = s.columns
    priced = s.objective == "cost"
    value = c["usd_per_1m_tokens"] if priced else c["step_s"]
    tps = sorted({int(v) for v in c["tp"].tolist()})
    pps = sorted({int(v) for v in c["pp"].tolist()})
    z: list[list[float | None]] = []
    for pp in pps:
        row: list[float | None] = []
        for tp in tps:
            idx = s.feasible[(c["tp"][s.feasible] == tp) & (c["pp"][s.feasible] == pp)]
            v = value[idx]
            v = v[~np.isnan(v)]
            row.append(float(v.min()) if v.size else None)
        z.append(row)
    unit = "USD per 1M tokens" if priced else "step s"
    return {
        "data": [
            {
                "type": "heatmap",
                "x": [f"tp {t}" for t in tps],
                "y": [f"pp {p}" for p in pps],
                "z": z,
                "colorscale": "Viridis",
                "reversescale": True,
                "hovertemplate": f"%{{x}} %{{y}}: %{{z:.4g}} {unit}<extra></extra>",
                "colorbar": {"title": {"text": unit}},
            }
        ],
        "layout": {
            **_LAYOUT,
            "title": {"text": f"Best {unit} by TP x PP (blank: nothing fits)"},
            "height": 360,
        },
    }


def sweep_bars_figure(s: Any) -> Figure:
    """The cheapest (or fastest) feasible layout per accelerator and GPU count."""
    c = s.columns
    priced = s.objective == "cost"
    value = c["usd_per_1m_tokens"] if priced else c["tokens_per_s"]
    counts = sorted({int(v) for v in c["num_gpus"].tolist()})
    data = []
    for a, name in enumerate(s.accelerators):
        ys: list[float | None] = []
        for n in counts:
            idx = s.feasible[(c["accelerator"][s.feasible] == a) & (c["num_gpus"][s.feasible] == n)]
            v = value[idx]
            v = v[~np.isnan(v)]
            ys.append((float(v.min()) if priced else float(v.max())) if v.size else None)
        if any(y is not None for y in ys):
            data.append(
                {
                    "type": "bar",
                    "name": name,
                    "x": [str(n) for n in counts],
                    "y": ys,
                    "marker": {"color": ACCELERATOR_COLORS[a % len(ACCELERATOR_COLORS)]},
                }
            )
    title = "Cheapest USD per 1M tokens" if priced else "Highest tokens/s"
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": f"{title} by accelerator and GPU count"},
            "barmode": "group",
            "height": 360,
            "xaxis": {"title": {"text": "GPUs"}, "type": "category"},
            "yaxis": {"title": {"text": "USD per 1M tokens" if priced else "tokens/s"}},
        },
    }


# --- comparisons ------------------------------------------------------------------------------


def _plan_bars(
    labels: Sequence[str], parts: Mapping[str, list[float]], hover: str
) -> list[dict[str, Any]]:
    """One bar trace per term across the plans (stacked by the layout), zero terms left out."""
    return [
        {
            "type": "bar",
            "name": LABELS.get(name, name),
            "x": list(labels),
            "y": values,
            "marker": {"color": COLORS.get(name, "#444")},
            "meta": name,
            "hovertemplate": f"%{{x}} %{{fullData.name}}: {hover}<extra></extra>",
        }
        for name, values in parts.items()
        if any(values)
    ]


def _by_plan(plans: Sequence[tuple[str, Mapping[str, Any]]], terms: Any) -> dict[str, list[float]]:
    """``terms(result)`` of each plan gathered per term name, 0 where a plan lacks it."""
    out: dict[str, list[float]] = {}
    for i, (_, result) in enumerate(plans):
        for name, value in terms(result).items():
            out.setdefault(name, [0.0] * len(plans))[i] = value
    return out


def compare_memory_figure(
    plans: Sequence[tuple[str, Mapping[str, Any]]],
    terms_of: Callable[[Mapping[str, Any]], dict[str, float]],
) -> Figure:
    """Memory per GPU of each plan, stacked by term (``terms_of`` an answer, in bytes) side by
    side, each with its GPU's capacity (a marker, since plans may be on different GPUs)."""
    labels = [label for label, _ in plans]
    terms = _by_plan(plans, lambda r: {k: v / GIB for k, v in terms_of(r).items()})
    data = _plan_bars(labels, terms, "%{y:.2f} GiB")
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "capacity",
            "x": labels,
            "y": [r["memory_per_gpu"]["capacity_bytes"] / GIB for _, r in plans],
            "marker": {"symbol": "line-ew-open", "size": 60, "color": "#C00000"},
            "hovertemplate": "%{x} capacity: %{y:.1f} GiB<extra></extra>",
        }
    )
    return _figure(data, "Memory per GPU", 380, barmode="stack", yaxis={"title": {"text": "GiB"}})


def compare_time_figure(plans: Sequence[tuple[str, Mapping[str, Any]]]) -> Figure:
    """Step time of each plan split into compute, bubble, exposed communication, optimizer."""
    labels = [label for label, _ in plans]
    parts = _by_plan(plans, lambda r: _strip(r["time"]["breakdown"], "_s"))
    data = _plan_bars(labels, parts, "%{y:.3g} s")
    return _figure(data, "Step time", 380, barmode="stack", yaxis={"title": {"text": "seconds"}})


def compare_latency_figure(plans: Sequence[tuple[str, Mapping[str, Any]]]) -> Figure:
    """TTFT and TPOT of each serving plan at the load it asked for (ms), side by side; an
    unbounded one is left out (a gap)."""
    labels = [label for label, _ in plans]

    def ms(r: Mapping[str, Any], key: str) -> float | None:
        value = r["latency"][key]  # at the plan's load; None where it is unbounded
        return None if value is None else 1e3 * value

    data = [
        {
            "type": "bar",
            "name": name,
            "x": labels,
            "y": [ms(r, key) for _, r in plans],
            "marker": {"color": color},
            "hovertemplate": f"%{{x}} {name}: %{{y:.1f}} ms<extra></extra>",
        }
        for name, key, color in (
            ("TTFT", "ttft_s", COLORS["optimizer_states"]),
            ("TPOT", "tpot_s", COLORS["comm"]),
        )
    ]
    return _figure(
        data,
        "Latency at each plan's load",
        380,
        barmode="group",
        yaxis={"title": {"text": "ms"}, "type": "log"},
    )


def compare_curve_figure(plans: Sequence[tuple[str, Mapping[str, Any]]]) -> Figure:
    """Output tokens/s against concurrency of each serving plan, up to its KV-cache limit."""
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": label,
            "x": [p["concurrency"] for p in r["curve"] if p["fits"]],
            "y": [p["output_tokens_per_s"] for p in r["curve"] if p["fits"]],
            "marker": {"color": ACCELERATOR_COLORS[i % len(ACCELERATOR_COLORS)]},
            "hovertemplate": f"{label}: %{{y:,.0f}} tokens/s at %{{x}}<extra></extra>",
        }
        for i, (label, r) in enumerate(plans)
    ]
    return _figure(
        data,
        "Throughput vs concurrency",
        380,
        xaxis={"title": {"text": "concurrent sequences", "standoff": 4}, "type": "log"},
        yaxis={"title": {"text": "output tokens/s"}, "rangemode": "tozero"},
    )


def serving_sweep_scatter_figure(
    rows: Sequence[Mapping[str, Any]], accelerators: Sequence[str]
) -> Figure:
    """Served replica layouts: output tokens/s per GPU against USD per 1k output tokens, by
    accelerator, with the Pareto front."""
    data: list[dict[str, Any]] = []
    for a, name in enumerate(accelerators):
        mine = [r for r in rows if r["ok"] and r["accelerator"] == name]
        priced = [r for r in mine if r.get("usd_per_1m_output_tokens") is not None]
        if not priced:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": name,
                "x": [r["output_tokens_per_s_per_gpu"] for r in priced],
                "y": [r["usd_per_1m_output_tokens"] / 1e3 for r in priced],
                "text": [
                    f"{r['accelerator']} {r['precision']} tp {r['tp']} pp {r['pp']}, "
                    f"concurrency {r['concurrency']}"
                    for r in priced
                ],
                "hovertemplate": "%{text}<br>%{x:,.0f} tokens/s/GPU, $%{y:.5f} per 1k"
                + "<extra></extra>",
                "marker": {"color": ACCELERATOR_COLORS[a % len(ACCELERATOR_COLORS)], "size": 9},
            }
        )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "Replica layouts: throughput per GPU against cost"},
            "height": 420,
            "xaxis": {"title": {"text": "output tokens/s per GPU"}, "type": "log"},
            "yaxis": {
                "title": {"text": "USD per 1k output tokens"},
                "type": "log",
                "tickformat": "$.5f",
            },
        },
    }


def disaggregated_front_figure(d: Mapping[str, Any], tpot_target_s: float | None) -> Figure:
    """The Pareto fronts of output tokens/s per GPU against tokens/s per user (1 / TPOT) of
    aggregated and disaggregated serving (the answer's ``disaggregated`` block), the cheapest
    fleet of each at the request rate, and the TPOT target as a vertical line. SVG traces."""
    families = (
        ("Aggregated", d["pareto_aggregated"], d["aggregated"], COLORS["gemm"], _agg_text),
        ("Disaggregated", d["pareto_disaggregated"], d["disaggregated"], COLORS["comm"], _dis_text),
    )
    data: list[dict[str, Any]] = []
    for name, points, best, color, text in families:
        ordered = sorted(points, key=lambda p: p["output_tokens_per_s_per_user"])
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{name} front",
                "x": [p["output_tokens_per_s_per_user"] for p in ordered],
                "y": [p["output_tokens_per_s_per_gpu"] for p in ordered],
                "text": [text(p) for p in ordered],
                "hovertemplate": "%{text}<br>%{x:,.1f} tokens/s per user, %{y:,.0f} per GPU"
                + "<extra></extra>",
                "line": {"color": color, "shape": "hv"},
                "marker": {"color": color, "size": 7},
            }
        )
        if best is not None:
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"Cheapest {name.lower()} fleet",
                    "x": [best["output_tokens_per_s_per_user"]],
                    "y": [best["output_tokens_per_s_per_gpu"]],
                    "text": [text(best)],
                    "hovertemplate": "%{text}<br>%{x:,.1f} tokens/s per user, %{y:,.0f} per GPU"
                    + "<extra></extra>",
                    "marker": {"color": color, "size": 15, "symbol": "star", "line": {"width": 1}},
                }
            )
    shapes, annotations = [], []
    if tpot_target_s is not None:
        shape, note = _limit_line(
            1 / tpot_target_s, "TPOT target", "TPOT target", color="#555", dash="dot", log=False
        )
        shapes, annotations = [shape], [note | {"xanchor": "left"}]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "Output tokens/s per GPU against tokens/s per user"},
            "height": 420,
            "xaxis": {"title": {"text": "output tokens/s per user (1 / TPOT)"}},
            "yaxis": {"title": {"text": "output tokens/s per GPU"}, "rangemode": "tozero"},
            "shapes": shapes,
            "annotations": annotations,
        },
    }


def _agg_text(p: Mapping[str, Any]) -> str:
    return f"{p['accelerator']} {p['precision']} tp {p['tp']} pp {p['pp']}"


def serving_sweep_bars_figure(
    rows: Sequence[Mapping[str, Any]], accelerators: Sequence[str]
) -> Figure:
    """The cheapest served layout per accelerator and TP degree (USD per 1k output tokens)."""
    tps = sorted({int(r["tp"]) for r in rows})
    data = []
    for a, name in enumerate(accelerators):
        ys: list[float | None] = []
        for tp in tps:
            costs = [
                r["usd_per_1m_output_tokens"] / 1e3
                for r in rows
                if r["ok"]
                and r["accelerator"] == name
                and r["tp"] == tp
                and r.get("usd_per_1m_output_tokens") is not None
            ]
            ys.append(min(costs) if costs else None)
        if any(y is not None for y in ys):
            data.append(
                {
                    "type": "bar",
                    "name": name,
                    "x": [f"tp {t}" for t in tps],
                    "y": ys,
                    "marker": {"color": ACCELERATOR_COLORS[a % len(ACCELERATOR_COLORS)]},
                }
            )
    return _figure(
        data,
        "Cheapest USD per 1k output tokens by accelerator and TP",
        360,
        barmode="group",
        yaxis={"title": {"text": "USD per 1k output tokens"}, "tickformat": "$.5f"},
    )


def fleet_curve_figure(out: Mapping[str, Any]) -> Figure | None:
    """The cheapest served layouts' replica counts against the fleet's request rate (steps:
    each replica at its planned rate), the rate asked marked; None without curves."""
    curves = out.get("fleet_curves") or []
    if not curves:
        return None
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "line": {"shape": "hv", "color": ACCELERATOR_COLORS[i % len(ACCELERATOR_COLORS)]},
            "name": f"{c['accelerator']} {c['precision']} tp {c['tp']} pp {c['pp']}"
            + (f" dp {c['dp']}" if c["dp"] > 1 else ""),
            "x": [p["request_rate"] for p in c["points"]],
            "y": [p["replicas"] for p in c["points"]],
            "hovertemplate": "%{x:.3g} requests/s: %{y} replicas<extra>%{fullData.name}</extra>",
        }
        for i, c in enumerate(curves)
    ]
    asked = max(p["request_rate"] for p in curves[0]["points"]) / 2
    shape = {
        "type": "line", "xref": "x", "yref": "paper", "x0": asked, "x1": asked, "y0": 0,
        "y1": 1, "line": {"dash": "dot", "color": "#555"},
    }  # fmt: skip
    return _figure(
        data,
        f"Replicas against the fleet's request rate ({out['rate_headroom']:.0%} headroom)",
        360,
        shapes=[shape],
        xaxis={
            "title": {"text": "fleet requests/s (the rate asked dotted)"},
            "rangemode": "tozero",
        },
        yaxis={"title": {"text": "replicas"}, "rangemode": "tozero"},
    )


# --- rank layout ------------------------------------------------------------------------------

MAX_GRID_GPUS = 4096


def rank_grid_figure(layout: Any) -> Figure | None:
    """The cluster as a grid (a row per node, a column per GPU) coloured by group, one
    dimension at a time (buttons switch between TP, CP, DP, PP and the expert groups). None for
    clusters too large to draw cell by cell."""
    world, per_node = layout.world, layout.gpus_per_node
    if world > MAX_GRID_GPUS:
        return None
    nodes = math.ceil(world / per_node)
    shown = [d for d in layout.dimensions if layout.sizes[d] > 1]
    shown = shown or ["tp"]
    data = []
    for k, dim in enumerate(shown):
        z: list[list[float | None]] = [[None] * per_node for _ in range(nodes)]
        text: list[list[str]] = [[""] * per_node for _ in range(nodes)]
        for g, group in enumerate(layout.groups[dim]):
            for r in group:
                z[r // per_node][r % per_node] = g
                text[r // per_node][r % per_node] = (
                    f"rank {r} (n{r // per_node}_g{r % per_node})<br>{dim} group {g}: "
                    f"ranks {group[0]}..{group[-1]} step {layout.strides[dim]}"
                )
        data.append(
            {
                "type": "heatmap",
                "z": z,
                "text": text,
                "hovertemplate": "%{text}<extra></extra>",
                "x": [f"g{i}" for i in range(per_node)],
                "y": [f"n{i}" for i in range(nodes)],
                "colorscale": "Viridis",
                "showscale": False,
                "xgap": 2,
                "ygap": 2,
                "visible": k == 0,
                "name": dim,
            }
        )
    buttons = [
        {
            "label": f"{dim.upper()} groups ({layout.sizes[dim]} GPUs each)",
            "method": "update",
            "args": [{"visible": [j == k for j in range(len(shown))]}],
        }
        for k, dim in enumerate(shown)
    ]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": f"{world} GPUs in {nodes} nodes, coloured by group", "y": 0.98},
            "height": min(120 + 28 * nodes, 900),
            "yaxis": {"autorange": "reversed", "title": {"text": "node"}, "type": "category"},
            "xaxis": {"title": {"text": "GPU in node"}, "type": "category"},
            "updatemenus": [
                {
                    "type": "buttons",
                    "direction": "right",
                    "x": 0,
                    "xanchor": "left",
                    "y": 1.02,
                    "yanchor": "bottom",
                    "buttons": buttons,
                }
            ],
            "margin": {"l": 60, "r": 20, "t": 90, "b": 50},
        },
    }


# --- memory timeline --------------------------------------------------------------------------

_TIMELINE_ORDER = (
    "weights",
    "weight_cache",
    "zero3_gather",
    "dequant_buffer",
    "gradients",
    "master_weights",
    "optimizer_states",
    "kv_cache",
    "activations",
    "activation_peak",
    "working_layer",
    "logits",
    "cuda_context",
    "comm_buffers",
    "runtime_overhead",
    "fragmentation",
)
LABELS["working_layer"] = "Recomputed layer (working)"
COLORS["working_layer"] = "#56B4E9"


# The room the first slanted tick labels need left of the plot: Plotly hides a label that would
# run past the figure's edge (the first phases' slant left of their tick) and automargin grows
# only the bottom for an x axis. A label's width is estimated at ``TICK_CHAR_PX`` a character
# (13 px system-ui), slanted at ``TICK_ANGLE``, with the ticks spaced over a plot of at least
# ``TIMELINE_MIN_PLOT_PX`` (a 1280 px screen draws it about 530 px wide).
TICK_ANGLE = 30
TICK_CHAR_PX = 7.2
TIMELINE_MIN_PLOT_PX = 400


def _slant_margin(labels: Sequence[str], least: int = 60) -> int:
    """The left margin (px) that keeps the first slanted labels inside the figure."""
    if len(labels) < 2:
        return least
    spacing = TIMELINE_MIN_PLOT_PX / (len(labels) - 1)
    slant = math.cos(math.radians(TICK_ANGLE)) * TICK_CHAR_PX
    need = max(slant * len(label) - i * spacing for i, label in enumerate(labels))
    return max(least, math.ceil(need) + 8)


def timeline_figure(timeline: Mapping[str, Any]) -> Figure:
    """Stacked memory by term at each point of the step, the capacity line and the peak."""
    points = timeline["points"]
    x = list(range(len(points)))
    labels = [p["label"] for p in points]
    names = [n for n in _TIMELINE_ORDER if any(p["parts"].get(f"{n}_bytes", 0) for p in points)]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "memory",
            "line": {"width": 0.5, "shape": "hv"},
            "name": LABELS.get(n, n),
            "meta": n,
            "x": x,
            "y": [p["parts"].get(f"{n}_bytes", 0.0) / GIB for p in points],
            "text": labels,
            "hovertemplate": "%{text}<br>%{fullData.name}: %{y:.2f} GiB<extra></extra>",
            "fillcolor": COLORS.get(n, "#888"),
            "marker": {"color": COLORS.get(n, "#888")},
        }
        for n in names
    ]
    peak = timeline["peak_index"]
    capacity = timeline["capacity_bytes"] / GIB
    ticks = [label if len(points) <= 16 else "" for label in labels]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "Memory through the step"},
            "height": 420,
            "legend": {"orientation": "v", "x": 1.02, "y": 1, "traceorder": "reversed"},
            "margin": {"l": _slant_margin(ticks), "r": 20, "t": 40, "b": 110},
            "xaxis": {
                "tickmode": "array",
                "tickvals": x,
                "ticktext": ticks,
                "tickangle": -TICK_ANGLE,
                "title": {"text": "step progress"},
            },
            "yaxis": {"title": {"text": "GiB"}, "rangemode": "tozero"},
            "shapes": [
                {
                    "type": "line",
                    "name": "capacity",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "y0": capacity,
                    "y1": capacity,
                    "line": {"color": "#C00000", "dash": "dash", "width": 2},
                }
            ],
            "annotations": [
                {
                    "x": peak,
                    "y": timeline["peak_bytes"] / GIB,
                    "text": f"peak {timeline['peak_bytes'] / GIB:.1f} GiB",
                    "showarrow": True,
                    "arrowhead": 2,
                    "ay": -30,
                }
            ],
        },
    }


# --- accuracy ---------------------------------------------------------------------------------


def accuracy_figure(title: str, unit: str, records: Sequence[Mapping[str, Any]]) -> Figure:
    """Predicted against measured, log-log, one trace per source group; the identity line and
    the +-10% and +-25% bands. Each point carries its source's link (``customdata``), which
    ``static/charts.js`` opens on click; the records table under the chart holds the same."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["group"], []).append(r)
    data: list[dict[str, Any]] = []
    for i, (group, rows) in enumerate(sorted(groups.items())):
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": group,
                "x": [r["measured"] for r in rows],
                "y": [r["predicted"] for r in rows],
                "customdata": [r["url"] or "" for r in rows],
                "text": [f"{r['id']}<br>error {100 * r['error']:+.1f}%" for r in rows],
                "hovertemplate": "%{text}<extra>%{fullData.name}</extra>",
                "marker": {"size": 7, "color": ACCELERATOR_COLORS[i % len(ACCELERATOR_COLORS)]},
            }
        )
    values = [v for r in records for v in (r["measured"], r["predicted"]) if v > 0]
    lo, hi = (min(values) / 1.5, max(values) * 1.5) if values else (1.0, 10.0)
    for factor, name, dash in (
        (1.0, "predicted = measured", "solid"),
        (1.1, "±10%", "dot"),
        (0.9, "±10%", "dot"),
        (1.25, "±25%", "dash"),
        (0.75, "±25%", "dash"),
    ):
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": name,
                "x": [lo, hi],
                "y": [lo * factor, hi * factor],
                "line": {"color": "#555555" if factor == 1.0 else "#AAAAAA", "dash": dash},
                "hoverinfo": "skip",
                "showlegend": factor >= 1.0,
                "legendgroup": name,
            }
        )
    return {
        "data": data,
        "layout": {
            "title": {"text": title},
            "xaxis": {"title": {"text": f"measured ({unit})"}, "type": "log"},
            "yaxis": {"title": {"text": f"predicted ({unit})"}, "type": "log"},
            "legend": {"orientation": "h", "y": -0.25},
            "margin": {"t": 48, "r": 16},
            "height": 460,
            "template": _LAYOUT["template"],
        },
        "meta": {"links": True},
    }


# --- text alternatives ------------------------------------------------------------------------

ROWS_PER_FIGURE = 300  # a figure's text alternative lists at most this many points


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:,.4g}"
    return "" if value is None else str(value)


def figure_rows(figure: Figure) -> list[dict[str, str]]:
    """A figure's points as rows (series, x, y) for its text alternative: every named trace's
    points in order, at most ``ROWS_PER_FIGURE`` (a last row says how many were left out);
    reference lines and bands (no legend entry of their own, or ``hoverinfo: skip``) are left
    out."""
    rows: list[dict[str, str]] = []
    left = 0
    for trace in figure.get("data", []):
        if trace.get("hoverinfo") == "skip" or "x" not in trace or "y" not in trace:
            continue
        name = str(trace.get("name", ""))
        for x, y in zip(trace["x"], trace["y"], strict=False):
            if len(rows) < ROWS_PER_FIGURE:
                rows.append({"series": name, "x": _shown(x), "y": _shown(y)})
            else:
                left += 1
    if left:
        rows.append({"series": f"… and {left:,} more points", "x": "", "y": ""})
    return rows
