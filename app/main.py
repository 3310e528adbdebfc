"""The FastAPI application: the REST API under ``/api/v1``, health and version, and the OpenAPI
docs served from local assets (no CDN: the service works offline)."""

from __future__ import annotations

import asyncio
import gc
import platform
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse
from fastapi.telemetry import TelemetryConfig
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

import estimator
from app import api
from app.deps import open_store
from app.service import errors
from app.service.guards import RequestGuard, WriteRate
from app.service.operations import AccessLog, Registry, SecurityHeaders
from app.settings import Settings
from app.web import planners as pages
from app.web import saved as saved_pages
from app.web.static import static_files, static_url

__all__ = ["app", "create_app"]

SWAGGER = "vendor/swagger-ui"


class Health(BaseModel):
    status: str
    version: str
    models: int
    accelerators: int


class Ready(BaseModel):
    status: str
    store: str


READY_TIMEOUT_S = 2.0


def _ping_store(app: FastAPI) -> None:
    with open_store(app).engine.connect() as connection:
        connection.execute(text("SELECT 1"))


class Version(BaseModel):
    version: str
    api: str
    python: str


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load every catalog entry before the first request, then move what is loaded out of the
    garbage collector's view (``gc.freeze``): the long-lived catalog, schema and route objects
    are never collected, and scanning them made full collections pause requests."""
    for model_id in estimator.model_ids():
        estimator.get_model(model_id)
    for accelerator_id in estimator.accelerator_ids():
        estimator.get_accelerator(accelerator_id)
    open_store(app)  # runs the migrations
    static_files.warm_in_background()  # gzip once, before the first visitor asks
    gc.collect()
    gc.freeze()
    yield
    worker = getattr(app.state, "tree_worker", None)
    if worker is not None:
        worker.stop()
    app.state.store.engine.dispose()


# FastAPI's native OpenTelemetry, unless PLANNER_OTEL asks for it: the service has its own
# /metrics and access log, and FastAPI looks for configured OTel providers on every request
# when telemetry is on (~85k instructions, a sixth of a single estimate's framework cost).
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


def create_app() -> FastAPI:
    settings = Settings.from_env()
    app = FastAPI(
        telemetry=None if settings.otel else NO_TELEMETRY,
        lifespan=lifespan,
        title="LLM Planner",
        version=estimator.__version__,
        description=(
            "Capacity planner for training and serving large language models: memory, time, "
            "throughput and cost of a plan, and sweeps over layouts. Every refusal is a 4xx "
            "naming the field and the rule."
        ),
        docs_url=None,
        redoc_url=None,
    )
    errors.install(app)
    app.state.settings = settings
    app.state.write_rate = WriteRate(settings.writes_per_minute)
    app.add_middleware(RequestGuard, limits=settings)
    app.add_middleware(SecurityHeaders)
    origins = settings.cors_origins
    if origins:  # no CORS headers at all unless origins are configured
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(origins),
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
            max_age=600,
        )
    # Outermost: times (into /metrics), logs and tags every answer, refusals included.
    app.state.metrics = registry = Registry()
    app.add_middleware(AccessLog, registry=registry)

    # The single estimates first, then the service routes (routes are matched in order; a
    # health check should not walk the API and page routes), then the API, the pages and the
    # static files.
    api.add_estimate_routes(app, fast=settings.fast_estimates)

    @app.get("/healthz", response_model=Health, tags=["service"])
    async def healthz() -> Health:
        """Liveness: the service answers and its catalogs load."""
        return Health(
            status="ok",
            version=estimator.__version__,
            models=len(estimator.model_ids()),
            accelerators=len(estimator.accelerator_ids()),
        )

    app.get("/health", response_model=Health, include_in_schema=False)(healthz)

    @app.get(
        "/readyz",
        response_model=Ready,
        tags=["service"],
        responses={503: {"model": Ready, "description": "The plan store does not answer"}},
    )
    async def readyz(request: Request) -> Response:
        """Readiness: the service answers and its plan store does (one ``SELECT 1`` within
        ``READY_TIMEOUT_S``); 503 naming the store while it does not. Estimates need no store;
        saved plans and the team catalog do."""
        try:
            await asyncio.wait_for(asyncio.to_thread(_ping_store, request.app), READY_TIMEOUT_S)
        except (TimeoutError, SQLAlchemyError) as exc:
            reason = "no answer" if isinstance(exc, TimeoutError) else type(exc).__name__
            body = Ready(status="unavailable", store=f"unavailable: {reason}")
            return Response(body.model_dump_json(), 503, media_type="application/json")
        return Response(Ready(status="ok", store="ok").model_dump_json(), 200,
                        media_type="application/json")  # fmt: skip

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """Request counts and latencies in Prometheus' text format."""
        return PlainTextResponse(registry.render(), media_type="text/plain; version=0.0.4")

    @app.get("/version", response_model=Version, tags=["service"])
    async def version() -> Version:
        return Version(version=estimator.__version__, api="v1", python=platform.python_version())

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title="LLM Planner API",
            swagger_js_url=static_url(f"{SWAGGER}/swagger-ui-bundle.js"),
            swagger_css_url=static_url(f"{SWAGGER}/swagger-ui.css"),
            swagger_favicon_url=static_url(f"{SWAGGER}/favicon-32x32.png"),
        )

    app.include_router(api.router)
    app.include_router(pages.router)
    app.include_router(saved_pages.router)
    app.state.page_routers = (pages.router, saved_pages.router)  # for 405's Allow (errors.py)
    app.mount("/static", static_files, name="static")
    return app


app = create_app()
