"""The REST API, version 1: every router under ``/api/v1``; each request resolves team catalog
ids from the app's store."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from . import catalog, inference, plans, team, training

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", dependencies=[Depends(plans.bind_team)])
# The two single estimates first: routes are matched in order, one by one (about 10k
# instructions each), and these are the most called. Then each area's other routes.
router.include_router(training.estimate_router)
router.include_router(inference.estimate_router)
router.include_router(training.router)
router.include_router(inference.router)
router.include_router(catalog.router)
router.include_router(plans.router)
router.include_router(team.router)
