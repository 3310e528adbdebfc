"""The REST API, version 1: every router under ``/api/v1``; each request resolves team catalog
ids from the app's store."""

from __future__ import annotations

import json
from contextlib import suppress

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from app.api import catalog, inference, plans, team, training
from app.deps import bind_team
from app.schemas.common import ERROR_RESPONSES
from app.schemas.inference import InferenceEstimateOut, InferenceRequest
from app.schemas.training import TrainingEstimateOut, TrainingRequest

__all__ = ["PREFIX", "add_estimate_routes", "router"]

PREFIX = "/api/v1"
_TEAM = [Depends(bind_team)]

router = APIRouter(prefix=PREFIX, dependencies=_TEAM)
router.include_router(training.router)
router.include_router(inference.router)
router.include_router(catalog.router)
router.include_router(plans.router)
router.include_router(team.router)


class _LeanEstimate:
    """An estimate endpoint served without FastAPI's request machinery, for the requests it can
    take as they are: a JSON body (``Content-Type: application/json``) that parses and
    validates, handed to the same endpoint function FastAPI would call. Any other request (no
    body, another content type, invalid JSON, a field refused) goes to the documented FastAPI
    route itself, with the body read so far, so every refusal is FastAPI's own answer.

    Why: FastAPI 0.165 routes, reads, validates and solves dependencies in ~250k instructions
    more than a plain Starlette route does (a constant answer: ~460k against ~200k; a health
    check ~350k), about a tenth of a serving estimate's request."""

    def __init__(self, documented: APIRoute, model: type[BaseModel]) -> None:
        self.documented = documented
        self.model = model
        self.endpoint = documented.endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self.documented  # the access log's and the metrics' route template
        request = Request(scope, receive, send)
        body = await request.body()
        req = None
        if request.headers.get("content-type") == "application/json":
            # Invalid JSON or a refused field leaves req None: FastAPI words the refusal.
            with suppress(ValueError):
                req = self.model.model_validate(json.loads(body))  # as FastAPI parses a body
        if req is None:
            await self.documented.handle(scope, _replay(body), send)
            return
        response = await self.endpoint(req, request)
        await response(scope, receive, send)


def _replay(body: bytes) -> Receive:
    """A ``receive`` that hands over a body already read."""

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def add_estimate_routes(app: FastAPI) -> None:
    """The two single estimates, the most called operations, as routes of the app itself,
    matched before all others. FastAPI 0.165 matches an included router's routes through a
    matcher of its own that walks the whole route tree again; a constant answer on the serving
    estimate cost ~870k instructions two inclusions down, ~590k as the app's own route. They bind
    the team catalog themselves rather than through the API's dependency (FastAPI resolves a
    dependency in ~85k instructions), and a plain route ahead of each (``_LeanEstimate``)
    serves the requests that parse and validate."""
    for area, endpoint, model, out in (
        ("training", training.estimate, TrainingRequest, TrainingEstimateOut),
        ("inference", inference.estimate, InferenceRequest, InferenceEstimateOut),
    ):
        path = f"{PREFIX}/{area}/estimate"
        app.post(path, response_model=out, tags=[area], responses=ERROR_RESPONSES)(endpoint)
        documented = app.router.routes[-1]
        assert isinstance(documented, APIRoute) and documented.path == path
        lean = Route(path, _LeanEstimate(documented, model), methods=["POST"])
        app.router.routes.insert(-1, lean)  # matched first; not in the schema (a plain route)
