"""Training endpoints: one plan's estimate, and the sweep over many."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response

from app.answers import (
    comm_plan_out,
    layer_table_out,
    needs_fit_suggestions,
    rank_layout_out,
    ranks_csv,
    rows_csv,
    timeline_out,
    training_out,
    training_sweep_out,
    training_sweep_rows,
)
from app.api.responses import json_response, model_response
from app.deps import bind_team_of
from app.resolve import (
    fitting_alternatives,
    run_comms,
    run_layers,
    run_ranks,
    run_training,
    run_training_sweep,
    run_training_timeline,
)
from app.schemas.common import ERROR_RESPONSES
from app.schemas.sweep import TrainingSweepOut, TrainingSweepRequest, TrainingSweepRow
from app.schemas.training import (
    CommPlanOut,
    LayerTableOut,
    RankLayoutOut,
    TimelineOut,
    TrainingRequest,
)
from app.service.lanes import ESTIMATES, SWEEPS, estimate_lane, training_cost
from estimator.errors import SpecError

__all__ = ["CSV_RESPONSE", "MAX_CSV_ROWS", "Format", "check_csv_rows", "estimate", "router"]

router = APIRouter(prefix="/training", tags=["training"], responses=ERROR_RESPONSES)

CSV_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}}
}
Format = Literal["json", "csv"]
MAX_CSV_ROWS = 200_000
MAX_CSV_RANKS = 262_144


def check_csv_rows(count: int) -> None:
    """A CSV export is bounded like every response (~430 bytes a training row)."""
    if count > MAX_CSV_ROWS:
        raise SpecError(
            "rows",
            f"{count:,} rows exceed the CSV export limit of {MAX_CSV_ROWS:,}; "
            "narrow the sweep or list only the feasible rows",
            count,
        )


# POST /training/estimate: a route of the app itself (``api.add_estimate_routes``).
async def estimate(req: TrainingRequest, request: Request) -> Response:
    """Per-GPU memory with its breakdown, step time with its breakdown, throughput, MFU/HFU and
    cost of one training plan."""
    bind_team_of(request)  # here, not as a dependency: ~85k instructions less a request
    cost = training_cost(req.model, req.layout.pp, req.layout.vp)
    out = await estimate_lane(req.model, cost).run(training_estimate_out, req)
    if needs_fit_suggestions(out):  # a search of up to FIT_SEARCH_S: never on the loop
        out["fit_suggestions"] = await ESTIMATES.run(fitting_alternatives, req)
    return json_response(out)


def training_estimate_out(req: TrainingRequest) -> dict[str, Any]:
    return training_out(*run_training(req))


@router.post("/comms", response_model=CommPlanOut)
def comms(req: TrainingRequest) -> Response:
    """Every collective one iteration runs on the most-loaded GPU, per parallel dimension:
    message size, calls per micro-batch and per iteration, group size and nodes spanned, bytes
    sent, time, and whether it overlaps compute. The sizes are the ones the step time uses."""
    return json_response(comm_plan_out(run_comms(req)))


@router.post("/layers", response_model=LayerTableOut)
def layers(req: TrainingRequest) -> Response:
    """Every module of each kind of layer, the embedding and the head: shapes before and after
    sharding, parameters and bytes per GPU, the activations each layer keeps for backward and
    the TP collectives it triggers; the unsharded model's and the most-loaded GPU's totals."""
    return json_response(layer_table_out(run_layers(req)))


@router.post("/timeline", response_model=TimelineOut)
def timeline(req: TrainingRequest) -> Response:
    """Memory of the most-loaded GPU through one step (1F1B): resident states, activations
    rising through the warm-up forwards and falling through the backwards, the peak and what
    makes it up. The peak equals the memory estimate's total."""
    return json_response(timeline_out(run_training_timeline(req)))


@router.post("/ranks", response_model=RankLayoutOut, responses=CSV_RESPONSE)
def ranks(
    req: TrainingRequest,
    format: Annotated[Format, Query(description="csv: every rank, its GPU and groups")] = "json",
) -> Response:
    """Which GPUs (node_gpu names) form each TP, CP, DP, PP, expert-TP, EP and expert-DP
    group of the plan, in Megatron-LM's rank order; clusters above 4,096 GPUs list the first
    groups of each dimension with the size and stride that give the rest, and the CSV lists
    every rank (up to 262,144)."""
    layout = run_ranks(req)
    if format == "csv":
        if layout.world > MAX_CSV_RANKS:
            raise SpecError(
                "num_gpus", f"the rank CSV lists at most {MAX_CSV_RANKS:,} GPUs", layout.world
            )
        return Response(ranks_csv(layout), media_type="text/csv")
    return json_response(rank_layout_out(layout))


@router.post("/sweep", response_model=TrainingSweepOut, responses=CSV_RESPONSE)
async def sweep(
    req: TrainingSweepRequest,
    format: Annotated[Format, Query(description="csv: every listed row, sorted, as CSV")] = "json",
) -> Response:
    """Every layout of the space: counts, a page of rows, the Pareto fronts and explained
    recommendations. Pages of one request reuse its evaluation. Sweeps run one at a time; at
    most 8 wait (503 with Retry-After past that)."""
    return await SWEEPS.run(_sweep, req, format)


def _sweep(req: TrainingSweepRequest, format: Format) -> Response:
    """The sweep and its answer, built in the sweep lane's thread (a page of rows is
    serialized there too, not on the event loop)."""
    result = run_training_sweep(req)
    if format == "csv":
        listed = result.counts["feasible"] if req.rows == "feasible" else len(result)
        check_csv_rows(listed)
        text = rows_csv(training_sweep_rows(result, req), list(TrainingSweepRow.model_fields))
        return Response(text, media_type="text/csv")
    return model_response(training_sweep_out(result, req))
