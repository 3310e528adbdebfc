"""The training sweep's layouts as memory per GPU against throughput (issue 46): every
evaluated layout a point, by accelerator, and each accelerator's capacity as the fit line a
layout must stay left of (the minimum headroom's line beside it, where the sweep keeps one)."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.web.charts import (
    _LAYOUT,
    ACCELERATOR_COLORS,
    MAX_POINTS,
    Figure,
    _sweep_labels,
    _thin,
)
from estimator.inputs.accelerator import GIB

__all__ = ["sweep_memory_figure"]


def sweep_memory_figure(s: Any) -> Figure:
    """Tokens/s against memory per GPU (GiB) of the evaluated layouts, feasible ones by
    accelerator, the rest grey; a dashed vertical line at each accelerator's capacity (the fit
    line) and a dotted one at the capacity less the sweep's minimum headroom."""
    c = s.columns
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    feasible = _thin(s.feasible, s.pareto_memory, MAX_POINTS)
    others = np.setdiff1d(np.arange(len(s)), s.feasible)
    for a, name in enumerate(s.accelerators):
        color = ACCELERATOR_COLORS[a % len(ACCELERATOR_COLORS)]
        idx = feasible[c["accelerator"][feasible] == a]
        if idx.size:
            data.append(_points(s, idx, name, {"color": color, "size": 6}))
        mine = np.flatnonzero(c["accelerator"] == a)
        if not mine.size:
            continue
        cap = float(c["capacity_bytes"][mine[0]]) / GIB
        keep = cap * (1 - s.workload.min_headroom)
        for x, dash in ((cap, "dash"), (keep, "dot")):
            shapes.append(
                {
                    "type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x,
                    "y0": 0, "y1": 1, "line": {"color": color, "dash": dash, "width": 1.5},
                }
            )  # fmt: skip
    rest = _thin(others, np.zeros(0, dtype=np.int64), MAX_POINTS // 3)
    if rest.size:
        data.append(_points(s, rest, "not feasible", {"color": "#C8C8C8", "size": 5}))
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "Memory per GPU against throughput: fit lines at each capacity"},
            "height": 380,
            "shapes": shapes,
            "xaxis": {"title": {"text": "memory per GPU (GiB)", "standoff": 4}},
            "yaxis": {"title": {"text": "tokens/s"}},
        },
    }


def _points(s: Any, idx: np.ndarray, name: str, marker: dict[str, Any]) -> dict[str, Any]:
    c = s.columns
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": (c["memory_bytes"][idx] / GIB).tolist(),
        "y": c["tokens_per_s"][idx].tolist(),
        "text": _sweep_labels(s, idx),
        "hovertemplate": "%{text}<br>%{x:.1f} GiB, %{y:,.0f} tokens/s<extra></extra>",
        "marker": marker,
    }
