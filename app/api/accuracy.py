"""``GET /api/v1/accuracy``: the validation report (every published record the planner was
compared with, its error and source) filtered, with its summaries: the JSON twin of the
``/accuracy`` page."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from app.accuracy import report_view
from app.schemas.accuracy import AccuracyReportOut
from app.schemas.common import ERROR_RESPONSES

__all__ = ["router"]

router = APIRouter(tags=["accuracy"])


@router.get("/accuracy", response_model=AccuracyReportOut, responses=ERROR_RESPONSES)
def accuracy(
    kind: str = Query("", description="kernel, training, serving or load"),
    metric: str = Query("", description="e.g. tokens_per_s_per_gpu, ttft, tpot, gemm"),
    accelerator: str = Query("", description="an accelerator id"),
    family: str = Query("", description="a model_type"),
    stack: str = Query("", description="a software stack profile or serving engine"),
    group: str = Query("", description="a source group"),
) -> Any:
    """Predicted against measured on every published record that passes the filters (exact
    matches; empty: any), summarized by kind and metric, group, accelerator, family and stack.
    A filter value the report does not hold is a 422 naming it."""
    return report_view(
        {
            "kind": kind,
            "metric": metric,
            "accelerator": accelerator,
            "family": family,
            "stack": stack,
            "group": group,
        }
    )
