"""The team catalog: private accelerators (with the team's negotiated price per GPU-hour) and
private models (a pasted config.json), stored with the saved plans and usable wherever a public
catalog id is. An id may not repeat a public id or another team entry's (409); every entry is
built into the core's spec before it is stored (422 naming the field). Writes need the bearer
token when one is configured and are refused in read-only mode, as for saved plans."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response

import estimator
from app.api.plans import WRITE_RESPONSES
from app.api.responses import json_response
from app.deps import open_store, writer
from app.resolve import resolve_model
from app.schemas.common import ERROR_RESPONSES, ErrorResponse
from app.schemas.team import (
    TeamAcceleratorIn,
    TeamAcceleratorOut,
    TeamAcceleratorSpec,
    TeamModelIn,
    TeamModelOut,
    TeamModelSpec,
)
from app.settings import current
from app.store.saving import json_size, reduced, too_big
from app.store.team import TeamConflict, TeamInUse, TeamStore, accelerator_spec_of
from estimator.errors import SpecError

__all__ = ["create_team_entry", "router"]

CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorResponse,
        "description": "The id is a public catalog id or taken; or saved plans use the entry",
    }
}
router = APIRouter(
    prefix="/team",
    tags=["team catalog"],
    responses={**ERROR_RESPONSES, **WRITE_RESPONSES, **CONFLICT},
)


def _team(request: Request) -> TeamStore:
    open_store(request.app)
    store: TeamStore = request.app.state.team
    return store


def _team_writer(request: Request) -> TeamStore:
    writer(request)
    return _team(request)


Reader = Annotated[TeamStore, Depends(_team)]
Writer = Annotated[TeamStore, Depends(_team_writer)]


def _accelerator(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry, once the core has built it into an Accelerator."""
    accelerator_spec_of(entry)
    return entry


def _model(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry, once the core has read its config (errors under ``config.<key>``), within
    the size cap: a config that takes it over is kept as the keys the reader uses, those left
    out named in its notes (413 if still over)."""
    spec = resolve_model(entry["config"], "config")
    limits = current()
    if spec.num_layers > limits.team_max_layers:
        raise SpecError(
            "config.num_hidden_layers",
            f"a team model has at most {limits.team_max_layers:,} layers "
            "(PLANNER_TEAM_MAX_LAYERS): every page lists the team's models, so each is read "
            "whenever the team catalog changes; paste a deeper config into a plan instead",
            spec.num_layers,
        )
    cap = limits.max_plan_bytes
    if json_size(entry) > cap:
        used, dropped = reduced(entry["config"])
        note = f"config.json keys left out (over the size cap): {', '.join(dropped[:50])}"
        entry = {**entry, "config": used, "notes": (entry["notes"] + "\n" + note).strip()}
        if json_size(entry) > cap:
            raise too_big("a team model", "config", json_size(entry), cap)
    return entry


# kind -> the public ids it may not take, and the check that builds an entry into a core spec
CHECKS = {
    "accelerators": (estimator.accelerator_ids, _accelerator),
    "models": (estimator.model_ids, _model),
}


def _create(store: TeamStore, kind: str, entry: dict[str, Any]) -> Response:
    response = json_response(create_team_entry(store, kind, entry))
    response.status_code = 201
    return response


def create_team_entry(store: TeamStore, kind: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Store a team entry once the core has built it: 409 for a public catalog id or one taken
    (the API and the catalog page's form alike)."""
    public_ids, check = CHECKS[kind]
    if entry["id"] in public_ids():
        raise HTTPException(409, f"id {entry['id']!r} is a public catalog id; choose another")
    try:
        created: dict[str, Any] = store.create(kind, check(entry))
    except TeamConflict:
        raise HTTPException(409, f"team {kind} already has id {entry['id']!r}") from None
    return created


def _replace(store: TeamStore, kind: str, entry_id: str, entry: dict[str, Any]) -> Response:
    _, check = CHECKS[kind]
    return json_response(_found(store.replace(kind, check({**entry, "id": entry_id})), entry_id))


def _delete(store: TeamStore, kind: str, entry_id: str) -> Response:
    """Delete a team entry; 409 naming the saved plans that use it (those plans re-evaluate
    with it, so they are changed or deleted first)."""
    try:
        deleted = store.delete(kind, entry_id)
    except TeamInUse as exc:
        users = [
            {"field": "id", "rule": f"used by plan {p['id']} ({p['name']!r})", "value": p["id"]}
            for p in exc.plans
        ]
        raise HTTPException(
            409,
            detail={
                "message": str(exc),
                "detail": users,
                "suggestions": [p["id"] for p in exc.plans],
            },
        ) from None
    if not deleted:
        raise HTTPException(404, f"no team entry {entry_id!r}")
    return Response(status_code=204)


def _found(entry: dict[str, Any] | None, entry_id: str) -> dict[str, Any]:
    if entry is None:
        raise HTTPException(404, f"no team entry {entry_id!r}")
    return entry


@router.get("/accelerators", response_model=list[TeamAcceleratorOut])
def list_accelerators(store: Reader) -> Response:
    """The team's accelerators as stored (catalog units; ``GET /accelerators`` lists them in
    base units beside the public ones)."""
    return json_response(store.list("accelerators"))


@router.post("/accelerators", response_model=TeamAcceleratorOut, status_code=201)
def create_accelerator(body: TeamAcceleratorIn, store: Writer) -> Response:
    return _create(store, "accelerators", body.model_dump())


@router.get("/accelerators/{entry_id}", response_model=TeamAcceleratorOut)
def show_accelerator(entry_id: str, store: Reader) -> Response:
    return json_response(_found(store.get("accelerators", entry_id), entry_id))


@router.put("/accelerators/{entry_id}", response_model=TeamAcceleratorOut)
def replace_accelerator(entry_id: str, body: TeamAcceleratorSpec, store: Writer) -> Response:
    return _replace(store, "accelerators", entry_id, body.model_dump())


@router.delete("/accelerators/{entry_id}", status_code=204)
def delete_accelerator(entry_id: str, store: Writer) -> Response:
    return _delete(store, "accelerators", entry_id)


@router.get("/models", response_model=list[TeamModelOut])
def list_models(store: Reader) -> Response:
    return json_response(store.list("models"))


@router.post("/models", response_model=TeamModelOut, status_code=201)
def create_model(body: TeamModelIn, store: Writer) -> Response:
    """Store a model from its config.json, once the core has read it (422 under
    ``config.<key>`` where it cannot)."""
    return _create(store, "models", body.model_dump())


@router.get("/models/{entry_id}", response_model=TeamModelOut)
def show_model(entry_id: str, store: Reader) -> Response:
    return json_response(_found(store.get("models", entry_id), entry_id))


@router.put("/models/{entry_id}", response_model=TeamModelOut)
def replace_model(entry_id: str, body: TeamModelSpec, store: Writer) -> Response:
    return _replace(store, "models", entry_id, body.model_dump())


@router.delete("/models/{entry_id}", status_code=204)
def delete_model(entry_id: str, store: Writer) -> Response:
    return _delete(store, "models", entry_id)
