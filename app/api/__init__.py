"""The REST API, version 1: every router under ``/api/v1``; each request resolves team catalog
ids from the app's store."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI

from app.api import accuracy, catalog, hub, inference, plans, team, training
from app.api.fast import PREFIX, add_fast_routes
from app.deps import bind_team
from app.schemas.common import ERROR_RESPONSES
from app.schemas.inference import InferenceEstimateOut
from app.schemas.training import TrainingEstimateOut

__all__ = ["PREFIX", "add_estimate_routes", "router"]

_TEAM = [Depends(bind_team)]

router = APIRouter(prefix=PREFIX, dependencies=_TEAM)
router.include_router(training.router)
router.include_router(inference.router)
router.include_router(catalog.router)
router.include_router(plans.router)
router.include_router(hub.router)
router.include_router(hub.team_router)  # before team's: its literal path first
router.include_router(team.router)
router.include_router(accuracy.router)


def add_estimate_routes(app: FastAPI, fast: bool = True) -> None:
    """The two single estimates, the most called operations, as routes of the app itself,
    matched before all others: FastAPI 0.165 matches an included router's routes through a
    matcher of its own that walks the whole route tree again (a constant answer on the serving
    estimate cost ~870k instructions two inclusions down, ~590k as the app's own route). They
    bind the team catalog themselves rather than through the API's dependency. With ``fast``
    (``PLANNER_FAST_ESTIMATES``, on by default), a plain route ahead of each serves the requests
    that parse and validate (``app.api.fast``)."""
    for area, endpoint, out in (
        ("training", training.estimate, TrainingEstimateOut),
        ("inference", inference.estimate, InferenceEstimateOut),
    ):
        path = f"{PREFIX}/{area}/estimate"
        app.post(path, response_model=out, tags=[area], responses=ERROR_RESPONSES)(endpoint)
    if fast:
        add_fast_routes(app)
