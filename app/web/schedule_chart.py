"""The pipeline schedule of a PP plan as a Gantt chart (``estimator.timing.schedule``): one row
per stage, each micro-batch's forward and backward a bar, the idle gaps between them the bubble."""

from __future__ import annotations

from typing import Any

from app.web.charts import _LAYOUT, Figure
from estimator.timing.schedule import Schedule

__all__ = ["schedule_figure"]

LABELLED = 64  # at most this many bars of a kind carry their micro-batch's number
KINDS = {"F": ("Forward", "#0072B2"), "B": ("Backward (and recompute)", "#E69F00")}


def schedule_figure(schedule: Schedule, microbatches: int, step_bubble: float) -> Figure:
    """Bars of ``schedule``'s operations (the first micro-batches of the step's
    ``microbatches``); the title gives the shown schedule's idle share and the whole step's
    bubble as the time model charges it (``step_bubble`` of the step)."""
    data: list[dict[str, Any]] = []
    interleaved = any(o.chunk for o in schedule.operations)  # label chunks only where they are
    for kind, (label, color) in KINDS.items():
        ops = [o for o in schedule.operations if o.kind == kind]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": label,
                "y": [f"stage {o.stage}" for o in ops],
                "x": [o.end_s - o.start_s for o in ops],
                "base": [o.start_s for o in ops],
                "text": [
                    f"{o.microbatch}.{o.chunk}" if interleaved else str(o.microbatch) for o in ops
                ],
                "textposition": "inside" if len(ops) <= LABELLED else "none",
                "insidetextanchor": "middle",
                "marker": {"color": color, "line": {"color": "#fff", "width": 1}},
                "hovertemplate": "%{y}, micro-batch %{text}: %{base:.3g}–%{x:.3g} s"
                "<extra>%{fullData.name}</extra>",
            }
        )
    shown = len({o.microbatch for o in schedule.operations})
    title = (
        f"{schedule.name.replace(' a stage', '')}: {shown} of {microbatches} micro-batches;"
        f" step bubble {step_bubble:.1%}"
    )
    stages = sorted({o.stage for o in schedule.operations})
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": title},
            "barmode": "overlay",
            "height": 120 + 36 * len(stages),
            "xaxis": {"title": {"text": "seconds into the step", "standoff": 4}},
            "yaxis": {
                "autorange": "reversed",
                "categoryorder": "array",
                "categoryarray": [f"stage {s}" for s in stages],
            },
        },
    }
