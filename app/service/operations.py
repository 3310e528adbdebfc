"""Operations: security headers on every response, request metrics in Prometheus' text format at
``/metrics`` (counts by route and status, latency histograms by route, estimates answered by
kind), and one structured (JSON) access-log line per request with its request id.

The content security policy allows only this service's own scripts, styles and fonts; Plotly
sets inline styles on the charts it draws (``style-src 'unsafe-inline'``) and uses ``data:``
images for its toolbar. The Swagger UI page at ``/docs`` starts itself with one inline script, so
that page alone also allows inline scripts.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections import defaultdict
from collections.abc import MutableMapping
from datetime import UTC, datetime
from threading import Lock
from typing import Any

from app.service.errors import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "ESTIMATE_ROUTES",
    "LATENCY_BUCKETS_S",
    "AccessLog",
    "JsonFormatter",
    "Registry",
    "SecurityHeaders",
    "log_config",
]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)
DOCS_CSP = CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'")
HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: a browser then sends the real Origin with the pages' own
    # form posts (under no-referrer it sends "null"), which the cross-site check reads.
    (b"referrer-policy", b"same-origin"),
]
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The REST routes that answer an estimate, by kind (counted when they answer 2xx).
ESTIMATE_ROUTES = {
    ("POST", "/api/v1/training/estimate"): "training",
    ("POST", "/api/v1/inference/estimate"): "inference",
    ("POST", "/api/v1/training/sweep"): "training_sweep",
    ("POST", "/api/v1/inference/sweep"): "serving_sweep",
}


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = DOCS_CSP if scope.get("path") == "/docs" else CSP

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [*HEADERS, (b"content-security-policy", csp.encode())]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def _template(scope: MutableMapping[str, Any]) -> str:
    """The matched route's template as a full path. Routes of included routers carry their
    template relative to the router, so the request path's leading segments are kept and the
    trailing ones replaced by the template's."""
    path = str(scope.get("path", ""))
    if path.startswith("/static/"):
        return "/static"
    template = getattr(scope.get("route"), "path", None)
    if not template:
        return "unmatched"
    tail = template.strip("/").split("/")
    head = path.strip("/").split("/")[: -len(tail)] if template != "/" else []
    return "/" + "/".join([*head, *tail]).strip("/") if head or template != "/" else "/"


class Registry:
    """Counts and latency histograms per (method, route template, status); routes are the
    templates (``/api/v1/models/{model_id}``), so ids never explode the series."""

    def __init__(self) -> None:
        self.lock = Lock()
        self.counts: dict[tuple[str, str, int], int] = defaultdict(int)
        self.buckets: dict[tuple[str, str], list[int]] = {}
        self.sums: dict[tuple[str, str], float] = defaultdict(float)
        self.estimates = dict.fromkeys(ESTIMATE_ROUTES.values(), 0)
        self.started = time.time()

    def observe(self, scope: MutableMapping[str, Any], status: int, seconds: float) -> None:
        path = _template(scope)
        key = (scope.get("method", ""), path)
        with self.lock:
            self.counts[(*key, status)] += 1
            counts = self.buckets.setdefault(key, [0] * (len(LATENCY_BUCKETS_S) + 1))
            for i, bound in enumerate(LATENCY_BUCKETS_S):
                if seconds <= bound:
                    counts[i] += 1
            counts[-1] += 1
            self.sums[key] += seconds
            kind = ESTIMATE_ROUTES.get(key)
            if kind is not None and 200 <= status < 300:
                self.estimates[kind] += 1

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        lines = [
            "# HELP planner_requests_total HTTP requests by method, route and status.",
            "# TYPE planner_requests_total counter",
        ]
        with self.lock:
            for (method, path, status), n in sorted(self.counts.items()):
                lines.append(
                    f'planner_requests_total{{method="{method}",route="{path}",'
                    f'status="{status}"}} {n}'
                )
            lines += [
                "# HELP planner_request_seconds Request latency by method and route.",
                "# TYPE planner_request_seconds histogram",
            ]
            for (method, path), counts in sorted(self.buckets.items()):
                labels = f'method="{method}",route="{path}"'
                for bound, n in zip(LATENCY_BUCKETS_S, counts, strict=False):
                    lines.append(f'planner_request_seconds_bucket{{{labels},le="{bound}"}} {n}')
                lines.append(f'planner_request_seconds_bucket{{{labels},le="+Inf"}} {counts[-1]}')
                lines.append(f"planner_request_seconds_sum{{{labels}}} {self.sums[(method, path)]}")
                lines.append(f"planner_request_seconds_count{{{labels}}} {counts[-1]}")
            lines += [
                "# HELP planner_estimates_total Estimates and sweeps answered by the REST API.",
                "# TYPE planner_estimates_total counter",
            ]
            for kind, n in self.estimates.items():
                lines.append(f'planner_estimates_total{{kind="{kind}"}} {n}')
        lines += [
            "# HELP planner_start_time_seconds When the service started (Unix time).",
            "# TYPE planner_start_time_seconds gauge",
            f"planner_start_time_seconds {self.started}",
        ]
        return "\n".join(lines) + "\n"


# --- access log -------------------------------------------------------------------------------

access_log = logging.getLogger("llm_planner.access")
# An incoming id is echoed only when it is short and plain (no spaces, quotes or control bytes
# that would break a log line or a header); anything else gets a new one.
SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers") or []:
        if name == b"x-request-id" and SANE_REQUEST_ID.fullmatch(value):
            return str(value.decode("ascii"))
    return uuid.uuid4().hex


class AccessLog:
    """Each HTTP request timed once: into ``registry`` (``/metrics``), as one line on the
    ``llm_planner.access`` logger (method, path, route template, status, duration, client,
    request id), and the request id in the ``X-Request-ID`` response header: the caller's when
    it sent a sane one, else a new one."""

    def __init__(self, app: ASGIApp, registry: Registry) -> None:
        self.app = app
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        start = time.perf_counter()
        status = 500

        async def with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, with_id)
        finally:
            seconds = time.perf_counter() - start
            self.registry.observe(scope, status, seconds)
            if access_log.isEnabledFor(logging.INFO):
                client = scope.get("client")
                fields = {
                    "method": scope.get("method", ""),
                    "path": scope.get("path", ""),
                    "route": _template(scope),
                    "status": status,
                    "duration_ms": round(seconds * 1e3, 3),
                    "client": client[0] if client else None,
                    "request_id": request_id,
                }
                access_log.info("request", extra={"fields": fields})


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object: UTC timestamp, level, logger, message, the record's
    ``fields`` (access lines) and the traceback, if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def log_config(level: str) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` the server runs under: the service's and uvicorn's
    loggers as JSON lines on stderr at ``level``; uvicorn's own access log off (``AccessLog``
    writes the one line per request)."""
    handler = {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            },
            "off": {"class": "logging.NullHandler"},
        },
        "loggers": {
            "llm_planner": dict(handler),
            "uvicorn": dict(handler),
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["off"], "propagate": False},
        },
    }
