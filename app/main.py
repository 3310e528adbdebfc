"""The FastAPI application. This issue's scope: health and the catalog ids; the API proper
(estimates, sweeps) is built on top of it."""

from __future__ import annotations

from fastapi import FastAPI

import estimator

__all__ = ["app"]

app = FastAPI(
    title="LLM Planner",
    version=estimator.__version__,
    description="Capacity planner for training and serving large language models.",
)


@app.get("/health", tags=["service"])
def health() -> dict[str, object]:
    """Liveness: the service answers and its catalogs load."""
    return {
        "status": "ok",
        "version": estimator.__version__,
        "models": len(estimator.model_ids()),
        "accelerators": len(estimator.accelerator_ids()),
    }
