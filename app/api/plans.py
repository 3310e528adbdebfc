"""Saved plans: save any training, serving or sweep request with a name, description and tags;
list and search, open (re-evaluated with the current estimator, with what changed since it was
saved), edit, duplicate, delete. Writes need the bearer token when one is configured and are
refused in read-only mode (the rules: ``store.saving``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response

from app.api.responses import json_response
from app.deps import plan_store, settings_of, writer
from app.schemas.common import ERROR_RESPONSES, ErrorResponse
from app.schemas.plans import PlanCreate, PlanOpened, PlanOut, PlanUpdate
from app.store.plans import PlanStore
from app.store.saving import (
    duplicate,
    etag,
    found,
    reopened,
    revision_of,
    save_plan,
    update_plan,
)

__all__ = ["WRITE_RESPONSES", "router"]

WRITE_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "A token is configured and was not sent"},
    403: {
        "model": ErrorResponse,
        "description": "The service is read-only, or a browser sent the write from another site",
    },
    409: {
        "model": ErrorResponse,
        "description": "A team entry the plan uses was deleted, or (If-Match) the plan was"
        " edited since that revision",
    },
    429: {
        "model": ErrorResponse,
        "description": "Too many writes from this client (PLANNER_WRITES_PER_MINUTE)",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
}


router = APIRouter(
    prefix="/plans", tags=["plans"], responses={**ERROR_RESPONSES, **WRITE_RESPONSES}
)


def _max_bytes(request: Request) -> int:
    cap: int = settings_of(request.app).max_plan_bytes
    return cap


@router.post("", response_model=PlanOut, status_code=201)
def create_plan(
    body: PlanCreate, request: Request, store: Annotated[PlanStore, Depends(writer)]
) -> Response:
    """Save a plan: its request is validated and evaluated first; nothing is stored if it
    cannot be."""
    plan = save_plan(
        store,
        body.name,
        body.description,
        body.tags,
        body.kind,
        body.request_body(),
        _max_bytes(request),
    )
    response = json_response(plan)
    response.status_code = 201
    return response


@router.get("", response_model=list[PlanOut])
def list_plans(
    store: Annotated[PlanStore, Depends(plan_store)],
    q: Annotated[str, Query(max_length=200, description="Search names and descriptions")] = "",
    tag: Annotated[str, Query(max_length=50)] = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
) -> Response:
    return json_response(store.list(q, tag, limit, offset))


@router.get("/{plan_id}", response_model=PlanOpened)
def open_plan(plan_id: str, store: Annotated[PlanStore, Depends(plan_store)]) -> Response:
    """The saved plan, re-evaluated with the current estimator, and what changed; where it
    cannot be re-evaluated now, the plan as saved and why (``current_error``). Its ``ETag``
    is its revision: send it back as ``If-Match`` with an edit."""
    plan = found(store.get(plan_id), plan_id)
    response = json_response(reopened(plan))
    response.headers["ETag"] = etag(plan["revision"])
    return response


@router.patch("/{plan_id}", response_model=PlanOut)
def edit_plan(
    plan_id: str,
    body: PlanUpdate,
    request: Request,
    store: Annotated[PlanStore, Depends(writer)],
) -> Response:
    """Change a plan's name, description, tags or request. With ``If-Match`` (the ETag its GET
    answered) the edit applies only to that revision: 409 if someone edited it meanwhile."""
    expected = revision_of(request.headers.get("if-match"))
    plan = found(store.get(plan_id), plan_id)
    updated = update_plan(store, plan, body.changes(), _max_bytes(request), expected)
    response = json_response(updated)
    response.headers["ETag"] = etag(updated["revision"])
    return response


@router.post("/{plan_id}/duplicate", response_model=PlanOut, status_code=201)
def duplicate_plan(
    plan_id: str, request: Request, store: Annotated[PlanStore, Depends(writer)]
) -> Response:
    plan = found(store.get(plan_id), plan_id)
    response = json_response(duplicate(store, plan, _max_bytes(request)))
    response.status_code = 201
    return response


@router.delete("/{plan_id}", status_code=204)
def delete_plan(plan_id: str, store: Annotated[PlanStore, Depends(writer)]) -> Response:
    if not store.delete(plan_id):
        raise HTTPException(404, f"no saved plan {plan_id!r}")
    return Response(status_code=204)
