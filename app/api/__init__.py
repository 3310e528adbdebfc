"""The REST API, version 1: every router under ``/api/v1``; each request resolves team catalog
ids from the app's store."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI

from ..schemas.common import ERROR_RESPONSES
from ..schemas.inference import InferenceEstimateOut
from ..schemas.training import TrainingEstimateOut
from . import catalog, inference, plans, team, training

__all__ = ["PREFIX", "add_estimate_routes", "router"]

PREFIX = "/api/v1"
_TEAM = [Depends(plans.bind_team)]

router = APIRouter(prefix=PREFIX, dependencies=_TEAM)
router.include_router(training.router)
router.include_router(inference.router)
router.include_router(catalog.router)
router.include_router(plans.router)
router.include_router(team.router)


def add_estimate_routes(app: FastAPI) -> None:
    """The two single estimates, the most called operations, as routes of the app itself,
    matched before all others. FastAPI 0.165 matches an included router's routes through a
    matcher of its own that walks the whole route tree again; a constant answer on the serving
    estimate cost ~870k instructions two inclusions down, ~590k as the app's own route. They bind
    the team catalog themselves rather than through the API's dependency (FastAPI resolves a
    dependency in ~85k instructions): ~505k (a health check ~430k)."""
    for area, endpoint, out in (
        ("training", training.estimate, TrainingEstimateOut),
        ("inference", inference.estimate, InferenceEstimateOut),
    ):
        app.post(
            f"{PREFIX}/{area}/estimate",
            response_model=out,
            tags=[area],
            responses=ERROR_RESPONSES,
        )(endpoint)
