"""Models by their Hugging Face id: what an id resolves to (the catalog's entry, or the
repository's config fetched by the service, with its quantization and parameter cross-check),
and saving a fetched model to the team catalog (``app.hub``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app import hub
from app.answers import model_out
from app.api.plans import WRITE_RESPONSES
from app.api.responses import json_response
from app.api.team import CONFLICT, Writer, create_team_entry
from app.schemas.common import ERROR_RESPONSES, ErrorResponse
from app.schemas.hub import HubModelOut, HubTeamModelIn
from app.schemas.team import TeamModelOut

__all__ = ["HUB_RESPONSES", "router", "team_router"]

HUB_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorResponse, "description": "A gated or private repository"},
    424: {"model": ErrorResponse, "description": "The hub did not answer, nothing cached"},
}
router = APIRouter(prefix="/hub", tags=["catalog"], responses={**ERROR_RESPONSES, **HUB_RESPONSES})
team_router = APIRouter(
    prefix="/team",
    tags=["team catalog"],
    responses={**ERROR_RESPONSES, **WRITE_RESPONSES, **CONFLICT, **HUB_RESPONSES},
)

ModelQuery = Annotated[
    str,
    Query(
        min_length=3,
        max_length=240,
        description="A Hugging Face id, org/name, with an optional @revision",
        examples=["Qwen/Qwen3-8B"],
    ),
]


def resolution(found: hub.HubModel) -> dict[str, Any]:
    """The answer for one resolved id: the resolution and the model as ``/models`` shows it."""
    entry = {"config": found.config or found.spec.config, "hf_id": found.ref.repo_id}
    return {**found.as_dict(), "model": model_out(found.spec, entry).model_dump()}


@router.get("/model", response_model=HubModelOut)
def resolve_model(model: ModelQuery) -> Response:
    """Resolve a Hugging Face id as a plan's ``model`` does: the catalog's entry offline, or
    the repository's config.json fetched from ``HF_ENDPOINT`` (cached; never code), its
    quantization (the serving default precision) and its parameter count against
    ``model.safetensors.index.json``."""
    return json_response(resolution(hub.resolve(model)))


@team_router.post("/hub-models", response_model=TeamModelOut, status_code=201)
def save_to_team(body: HubTeamModelIn, store: Writer) -> Response:
    """Save a model fetched by its Hugging Face id to the team catalog: its config (and its
    quantization), with the repository and commit as its source."""
    found = hub.resolve(body.hf_id, "hf_id")
    if found.config is None:  # a catalog entry: its id already names it everywhere
        catalog_id = found.catalog_id
        rule = f"is the catalog's {catalog_id!r}: use that id, or name a revision to fetch it"
        raise hub.HubRefusal("hf_id", rule, body.hf_id, status=409, kind="conflict")
    source = f"Hugging Face {found.ref.repo_id} at commit {found.commit} ({found.endpoint})"
    notes = "" if found.check is None else found.check.note()
    entry = body.entry(dict(found.config), source, notes)
    response = json_response(create_team_entry(store, "models", entry))
    response.status_code = 201
    return response
