"""Inference endpoints: one serving replica's estimate, and the sweep over replica layouts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from app.answers import (
    inference_out,
    rows_csv,
    serving_sweep_out,
    serving_sweep_rows,
    timeline_out,
)
from app.api.responses import json_response, model_response
from app.api.training import CSV_RESPONSE, Format
from app.deps import bind_team_of
from app.resolve import run_inference, run_inference_timeline, run_serving_sweep
from app.schemas.common import ERROR_RESPONSES
from app.schemas.inference import InferenceRequest
from app.schemas.sweep import ServingSweepOut, ServingSweepRequest, ServingSweepRow
from app.schemas.training import TimelineOut
from app.service.lanes import SWEEPS, estimate_lane

__all__ = ["estimate", "router"]

router = APIRouter(prefix="/inference", tags=["inference"], responses=ERROR_RESPONSES)


# POST /inference/estimate: a route of the app itself (``api.add_estimate_routes``).
async def estimate(req: InferenceRequest, request: Request) -> Response:
    """Memory with the KV cache, TTFT/TPOT with breakdowns, throughput, the concurrency curve
    and cost per 1k/1M tokens of one serving replica."""
    bind_team_of(request)  # here, not as a dependency: ~85k instructions less a request
    return await estimate_lane(req.model).run(_estimate, req)


def _estimate(req: InferenceRequest) -> Response:
    plan, result = run_inference(req)
    return json_response(inference_out(req, plan, result))


@router.post("/timeline", response_model=TimelineOut)
def timeline(req: InferenceRequest) -> Response:
    """Memory of a serving GPU: weights, the prefill peak, the KV cache growing one decode step
    at a time, and a new prompt prefilled with the cache full (the memory estimate's total)."""
    return json_response(timeline_out(run_inference_timeline(req)))


@router.post("/sweep", response_model=ServingSweepOut, responses=CSV_RESPONSE)
async def sweep(
    req: ServingSweepRequest,
    format: Annotated[Format, Query(description="csv: every listed row as CSV")] = "json",
) -> Response:
    """Every replica layout at its best concurrency under the targets, cheapest first, with
    refusal reasons and the cost/throughput Pareto front. Sweeps run one at a time; at most 8
    wait (503 with Retry-After past that)."""
    return await SWEEPS.run(_sweep, req, format)


def _sweep(req: ServingSweepRequest, format: Format) -> Response:
    served = run_serving_sweep(req)
    if format == "csv":
        text = rows_csv(serving_sweep_rows(served, req), list(ServingSweepRow.model_fields))
        return Response(text, media_type="text/csv")
    return model_response(serving_sweep_out(served, req))
