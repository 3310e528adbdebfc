"""The REST API, version 1: every router under ``/api/v1``."""

from __future__ import annotations

from fastapi import APIRouter

from . import catalog, inference, plans, training

__all__ = ["router"]

router = APIRouter(prefix="/api/v1")
router.include_router(catalog.router)
router.include_router(training.router)
router.include_router(inference.router)
router.include_router(plans.router)
