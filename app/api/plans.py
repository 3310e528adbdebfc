"""Saved plans: save any training, serving or sweep request with a name, description and tags;
list and search, open (re-evaluated with the current estimator, with what changed since it was
saved), edit, duplicate, delete. Writes need the bearer token when one is configured and are
refused in read-only mode."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from threading import Lock
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError

import estimator

from .. import team
from ..plans import run_inference, run_serving_sweep, run_training, run_training_sweep
from ..schemas.common import ERROR_RESPONSES, ErrorResponse
from ..schemas.common import Request as StrictRequest
from ..schemas.inference import InferenceRequest
from ..schemas.sweep import ServingSweepRequest, TrainingSweepRequest
from ..schemas.training import TrainingRequest
from ..settings import Settings
from ..store import PlanStore
from ..team_store import TeamStore
from ..views import json_response, serving_sweep_out, training_sweep_out

__all__ = [
    "KINDS",
    "WRITE_RESPONSES",
    "bind_team",
    "duplicate",
    "headline",
    "open_saved",
    "open_store",
    "router",
    "save_plan",
    "write_refusal",
    "writer",
]

WRITE_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "A token is configured and was not sent"},
    403: {"model": ErrorResponse, "description": "The service is read-only"},
}
router = APIRouter(
    prefix="/plans", tags=["plans"], responses={**ERROR_RESPONSES, **WRITE_RESPONSES}
)

Kind = Literal["training", "inference", "training_sweep", "inference_sweep"]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Tag = Annotated[str, Field(min_length=1, max_length=50)]


class PlanCreate(StrictRequest):
    name: Name
    description: str = Field("", max_length=10_000)
    tags: list[Tag] = Field(default_factory=list, max_length=20)
    kind: Kind
    request: dict[str, Any] = Field(description="The request body of the kind's endpoint")


class PlanUpdate(StrictRequest):
    name: Name | None = None
    description: str | None = Field(None, max_length=10_000)
    tags: list[Tag] | None = Field(None, max_length=20)
    request: dict[str, Any] | None = None


class PlanOut(BaseModel):
    id: str
    name: str
    description: str
    tags: list[str]
    kind: str
    request: dict[str, Any]
    saved_result: dict[str, Any] = Field(description="Headline numbers when it was saved")
    estimator_version: str
    revision: int
    created_at: str
    updated_at: str


class PlanOpened(PlanOut):
    current_result: dict[str, Any] = Field(description="Headline numbers now")
    current_version: str
    changed: dict[str, dict[str, Any]] = Field(
        description="Numbers that differ from the saved ones: {name: {saved, now}}"
    )


def _training(req: TrainingRequest) -> dict[str, Any]:
    _, e = run_training(req)
    return {
        "memory_per_gpu_bytes": e.memory.total_bytes,
        "fits": e.memory.fits,
        "step_s": e.time.step_s,
        "tokens_per_s": e.tokens_per_s,
        "mfu": e.mfu,
        "cost_usd": e.cost_usd,
        "usd_per_1m_tokens": e.usd_per_1m_tokens,
    }


def _inference(req: InferenceRequest) -> dict[str, Any]:
    _, i = run_inference(req)
    return {
        "memory_per_gpu_bytes": i.memory.total_bytes,
        "fits": i.memory.fits,
        "ttft_s": i.ttft_s,
        "tpot_s": i.tpot_s,
        "output_tokens_per_s": i.output_tokens_per_s,
        "usd_per_1m_output_tokens": i.usd_per_1m_output_tokens,
    }


def _training_sweep(req: TrainingSweepRequest) -> dict[str, Any]:
    out = training_sweep_out(run_training_sweep(req), req)
    best = out.recommendations[0].row if out.recommendations else None
    return {
        "feasible": out.counts.feasible,
        "best_tokens_per_s": best.tokens_per_s if best else None,
        "best_usd_per_1m_tokens": best.usd_per_1m_tokens if best else None,
    }


def _serving_sweep(req: ServingSweepRequest) -> dict[str, Any]:
    out = serving_sweep_out(run_serving_sweep(req), req)
    cheapest = out.rows[0] if out.rows else None
    return {
        "ok": out.counts.get("ok", 0),
        "cheapest_usd_per_1m_output_tokens": cheapest.usd_per_1m_output_tokens
        if cheapest
        else None,
    }


# Each kind: its request model and the headline numbers kept when a plan is saved.
KINDS: dict[str, tuple[type[BaseModel], Callable[[Any], dict[str, Any]]]] = {
    "training": (TrainingRequest, _training),
    "inference": (InferenceRequest, _inference),
    "training_sweep": (TrainingSweepRequest, _training_sweep),
    "inference_sweep": (ServingSweepRequest, _serving_sweep),
}


def headline(kind: str, request: dict[str, Any]) -> dict[str, Any]:
    """Validate ``request`` as the kind's request, evaluate it and keep the numbers a reader
    compares; raises (422/404) before anything is stored."""
    model, numbers = KINDS[kind]
    try:
        req = model.model_validate(request)
    except ValidationError as exc:  # reported like any body error, under "request."
        errors = [{**e, "loc": ("body", "request", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None
    return numbers(req)


_OPENING = Lock()


def open_store(app: Any) -> PlanStore:
    """The app's plan store, opened and migrated once: at start-up by the lifespan, or on
    first use where the lifespan did not run (an app driven without it, as in tests)."""
    state = app.state
    if getattr(state, "store", None) is None:
        with _OPENING:
            if getattr(state, "store", None) is None:
                state.settings = Settings.from_env()
                store = PlanStore(state.settings.database_url)
                state.team = TeamStore(store.engine)
                state.store = store
    opened: PlanStore = state.store
    return opened


def bind_team_of(request: Request) -> None:
    """Resolve team catalog ids from this app's store for the rest of the request, in the
    context it runs in (the request's own, for an async route or dependency; the lanes and the
    threads of sync routes copy it)."""
    open_store(request.app)
    team.bind(request.app.state.team)


async def bind_team(request: Request) -> None:
    """``bind_team_of`` as a router dependency of the API and the pages. Async, so the binding
    is made in the request's own context."""
    bind_team_of(request)


def _store(request: Request) -> PlanStore:
    return open_store(request.app)


def write_refusal(request: Request, token: str | None) -> HTTPException | None:
    """Why a write with ``token`` is refused (a read-only service, a token configured and not
    given), or None where it may go ahead. The API reads the token from the Authorization
    header, the pages from their forms."""
    open_store(request.app)
    cfg: Settings = request.app.state.settings
    if cfg.read_only:
        return HTTPException(403, "the service is read-only (PLANNER_READ_ONLY)")
    if cfg.api_token is not None and not secrets.compare_digest(
        (token or "").encode(), cfg.api_token.encode()
    ):
        return HTTPException(401, "writes need 'Authorization: Bearer <PLANNER_API_TOKEN>'")
    return None


def writer(request: Request) -> PlanStore:
    """The store, for a request allowed to write (a dependency)."""
    sent = request.headers.get("authorization", "")
    token = sent.removeprefix("Bearer ") if sent.startswith("Bearer ") else None
    refusal = write_refusal(request, token)
    if refusal is not None:
        raise refusal
    return _store(request)


def save_plan(
    store: PlanStore,
    name: str,
    description: str,
    tags: list[str],
    kind: str,
    request: dict[str, Any],
) -> dict[str, Any]:
    """Validate and evaluate ``request`` as a plan of ``kind``, then store it with its headline
    numbers and the estimator version; nothing is stored if it cannot be evaluated."""
    return store.create(
        name=name,
        description=description,
        tags=tags,
        kind=kind,
        request=request,
        saved_result=headline(kind, request),
        estimator_version=estimator.__version__,
    )


def open_saved(plan: dict[str, Any]) -> dict[str, Any]:
    """A saved plan re-evaluated with the current estimator: the numbers now and those that
    differ from the saved ones."""
    now = headline(plan["kind"], plan["request"])
    changed = {
        k: {"saved": plan["saved_result"].get(k), "now": v}
        for k, v in now.items()
        if plan["saved_result"].get(k) != v
    }
    return {
        **plan,
        "current_result": now,
        "current_version": estimator.__version__,
        "changed": changed,
    }


def _found(plan: dict[str, Any] | None, plan_id: str) -> dict[str, Any]:
    if plan is None:
        raise HTTPException(404, f"no saved plan {plan_id!r}")
    return plan


@router.post("", response_model=PlanOut, status_code=201)
def create_plan(body: PlanCreate, store: Annotated[PlanStore, Depends(writer)]) -> Response:
    """Save a plan: its request is validated and evaluated first; nothing is stored if it
    cannot be."""
    plan = save_plan(store, body.name, body.description, body.tags, body.kind, body.request)
    response = json_response(plan)
    response.status_code = 201
    return response


@router.get("", response_model=list[PlanOut])
def list_plans(
    store: Annotated[PlanStore, Depends(_store)],
    q: Annotated[str, Query(max_length=200, description="Search names and descriptions")] = "",
    tag: Annotated[str, Query(max_length=50)] = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
) -> Response:
    return json_response(store.list(q, tag, limit, offset))


@router.get("/{plan_id}", response_model=PlanOpened)
def open_plan(plan_id: str, store: Annotated[PlanStore, Depends(_store)]) -> Response:
    """The saved plan, re-evaluated with the current estimator, and what changed."""
    return json_response(open_saved(_found(store.get(plan_id), plan_id)))


@router.patch("/{plan_id}", response_model=PlanOut)
def edit_plan(
    plan_id: str, body: PlanUpdate, store: Annotated[PlanStore, Depends(writer)]
) -> Response:
    plan = _found(store.get(plan_id), plan_id)
    changes: dict[str, Any] = body.model_dump(exclude_none=True)
    if body.request is not None:
        changes["saved_result"] = headline(plan["kind"], body.request)
        changes["estimator_version"] = estimator.__version__
    return json_response(_found(store.update(plan_id, **changes), plan_id))


def duplicate(store: PlanStore, plan: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``plan`` under "<name> (copy)", with the numbers and version it was saved with."""
    return store.create(
        name=f"{plan['name']} (copy)"[:200],
        description=plan["description"],
        tags=plan["tags"],
        kind=plan["kind"],
        request=plan["request"],
        saved_result=plan["saved_result"],
        estimator_version=plan["estimator_version"],
    )


@router.post("/{plan_id}/duplicate", response_model=PlanOut, status_code=201)
def duplicate_plan(plan_id: str, store: Annotated[PlanStore, Depends(writer)]) -> Response:
    response = json_response(duplicate(store, _found(store.get(plan_id), plan_id)))
    response.status_code = 201
    return response


@router.delete("/{plan_id}", status_code=204)
def delete_plan(plan_id: str, store: Annotated[PlanStore, Depends(writer)]) -> Response:
    if not store.delete(plan_id):
        raise HTTPException(404, f"no saved plan {plan_id!r}")
    return Response(status_code=204)
