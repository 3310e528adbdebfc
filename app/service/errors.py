"""Every refusal as one JSON shape (``schemas.common.ErrorResponse``): the field path, the rule
and the value. Invalid input is a 422, an unknown id a 404 with the nearest ids, an oversize
body a 413, a sweep past its time limit a 503. Nothing becomes a traceback."""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.service.exceptions import BodyTimeout, ShapeError, TooLarge
from estimator.errors import SpecError, UnknownIdError

__all__ = [
    "BodyTimeout",
    "ShapeError",
    "TooLarge",
    "field_path",
    "install",
    "invalid",
    "refusal_text",
]

_ECHO_CHARS = 200
STORE_RETRY_AFTER_S = 5
_TYPE_TAGS = {"str", "int", "float", "bool", "none", "list", "dict"}
# The tags of the API's one tagged union (a saved plan's kind picks its request's shape):
# pydantic puts the tag in an error's location, which a field path leaves out.
_UNION_TAGS = {"training", "inference", "training_sweep", "inference_sweep"}
log = logging.getLogger("llm_planner")


def _echo(value: Any) -> Any:
    """A value short and plain enough to send back."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    text = value if isinstance(value, str) else repr(value)
    text = _printable(text)
    return text if len(text) <= _ECHO_CHARS else text[:_ECHO_CHARS] + "..."


def _printable(text: str) -> str:
    """``text`` with any lone surrogate written as its escape: an answer is UTF-8, which cannot
    hold one (the guard refuses them in JSON bodies; this keeps every other echo safe)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _body(status: int, error: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(
        {"error": error, "message": _printable(message), **extra}, status_code=status
    )


def field_path(loc: tuple[Any, ...]) -> str:
    """pydantic's location as a dotted path: ``('body', 'layout', 'tp')`` -> ``layout.tp``.
    Union branch tags (``str``, ``list[...]``, model class names) are dropped."""
    parts = []
    for i, part in enumerate(loc):
        if i == 0 and part in ("body", "query", "path", "header"):
            continue
        if i == 1 and loc[0] == "body" and part in _UNION_TAGS:
            continue
        if isinstance(part, int):
            parts.append(str(part))
        elif part in _TYPE_TAGS or "[" in part or "-" in part or part[:1].isupper():
            continue
        else:
            parts.append(part)
    return ".".join(parts) or "body"


def invalid(
    field: str, rule: str, value: Any = None, kind: str = "invalid_request"
) -> JSONResponse:
    item = {"field": field, "rule": rule, "value": _echo(value)}
    return _body(422, kind, f"{field}: {rule}", detail=[item])


def allowed_methods(request: Request, fallback: str) -> str:
    """The methods the API documents for this path (a literal path before a template that also
    matches it: ``/models/import`` before ``/models/{model_id}``). Starlette's own 405 names
    the methods of the first route whose path matches, where several routes (``GET /plans``
    and ``POST /plans``) share one; paths the schema does not document keep its answer."""
    index = getattr(request.app.state, "allow_index", None)
    if index is None:
        by_path: dict[str, set[str]] = {}
        for template, operations in request.app.openapi().get("paths", {}).items():
            by_path[template] = {m.upper() for m in operations if m in _HTTP_METHODS}
        for router in getattr(request.app.state, "page_routers", ()):  # not in the schema
            for route in router.routes:
                by_path.setdefault(route.path, set()).update(route.methods)
        index = sorted(
            (
                (
                    "{" in template,
                    re.compile("^" + re.sub(r"\{[^/}]+\}", "[^/]+", template) + "$"),
                    methods,
                )
                for template, methods in by_path.items()
            ),
            key=lambda item: item[0],  # literal paths first
        )
        request.app.state.allow_index = index
    path = request.url.path
    for _, pattern, methods in index:
        if pattern.match(path):
            return ", ".join(sorted(methods))
    return fallback


_HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    # The modules that raise these import this one (for ShapeError): imported here, not above.
    from app.hub import HubRefusal
    from app.resolve import SweepTimeout
    from app.service.isolated import Busy, ClientGone, IsolatedTimeout
    from app.service.lanes import LaneDraining, LaneRefused

    @app.exception_handler(SpecError)
    def spec_error(_: Request, exc: SpecError) -> JSONResponse:
        kind = "invalid_request" if isinstance(exc, ShapeError) else "invalid_plan"
        return invalid(exc.field, exc.rule, exc.value, kind)

    @app.exception_handler(HubRefusal)
    def hub_refusal(_: Request, exc: HubRefusal) -> JSONResponse:
        """A Hugging Face id that cannot be read: 404 unknown, 403 gated, 422 no readable
        config, 424 the hub unreachable (``app.hub``), naming the field like any refusal."""
        item = {"field": exc.field, "rule": exc.rule, "value": _echo(exc.value)}
        return _body(exc.status, exc.kind, f"{exc.field}: {exc.rule}", detail=[item])

    @app.exception_handler(RequestValidationError)
    def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        items: dict[tuple[str, str], dict[str, Any]] = {}
        for e in exc.errors():
            field = field_path(tuple(e.get("loc", ())))
            rule = str(e.get("msg", "invalid"))
            if e.get("type") == "json_invalid":  # loc is ('body', character offset)
                field, rule = "body", f"must be valid JSON: {rule} at character {e['loc'][-1]}"
            items.setdefault((field, rule), {"field": field, "rule": rule, "value": None})
            if "input" in e and e.get("type") != "missing":
                items[(field, rule)]["value"] = _echo(e["input"])
        detail = list(items.values())
        message = "; ".join(f"{d['field']}: {d['rule']}" for d in detail[:5])
        return _body(422, "invalid_request", message, detail=detail)

    @app.exception_handler(UnknownIdError)
    def unknown_id(_: Request, exc: UnknownIdError) -> JSONResponse:
        near = difflib.get_close_matches(exc.ident, exc.known, n=5, cutoff=0.3)
        item = {
            "field": exc.kind,
            "rule": f"must be a catalog {exc.kind} id",
            "value": _echo(exc.ident),
        }
        message = f"unknown {exc.kind} id {_echo(exc.ident)!r}"
        if near:
            message += f"; nearest: {', '.join(near)}"
        return _body(
            404, "not_found", message, detail=[item], suggestions=near or list(exc.known[:5])
        )

    @app.exception_handler(StarletteHTTPException)
    def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # an unreadable body (bad UTF-8, broken multipart)
            return invalid("body", f"must be readable JSON: {exc.detail}")
        kinds = {
            401: "unauthorized",
            403: "forbidden",
            404: "not_found",
            405: "method_not_allowed",
            409: "conflict",
            413: "too_large",
            429: "rate_limited",
            503: "unavailable",
        }
        kind = kinds.get(exc.status_code, "invalid_request")
        detail = exc.detail if isinstance(exc.detail, dict) else {"message": str(exc.detail)}
        response = _body(exc.status_code, kind, **detail)
        for name, value in (exc.headers or {}).items():  # Retry-After (429, 503)
            response.headers[name] = value
        if exc.status_code == 405:
            fallback = (exc.headers or {}).get("Allow", "")
            response.headers["Allow"] = allowed_methods(request, fallback)
        return response

    # Refusals of the service itself: exception -> status, kind, message, extra headers.
    refusals: dict[type[Exception], Callable[[Any], tuple[int, str, str, dict[str, str]]]] = {
        TooLarge: lambda e: (413, "too_large", str(e), {}),
        BodyTimeout: lambda e: (408, "timeout", str(e), {"Connection": "close"}),
        SweepTimeout: lambda e: (503, "timeout", str(e), {}),
        IsolatedTimeout: lambda e: (503, "timeout", str(e), {}),
        Busy: lambda e: (503, "unavailable", str(e), {"Retry-After": str(e.retry_after_s)}),
        LaneRefused: lambda e: (
            503,
            "unavailable",
            str(e),
            {"Retry-After": str(e.retry_after_s)},
        ),
        LaneDraining: lambda e: (
            503,
            "unavailable",
            str(e),
            {"Retry-After": str(e.retry_after_s), "Connection": "close"},
        ),
        ClientGone: lambda e: (
            499,
            "timeout",
            "the client closed the connection; the work was stopped",
            {},
        ),
    }

    def refused(_: Request, exc: Exception) -> JSONResponse:
        answer = next(refusals[c] for c in type(exc).__mro__ if c in refusals)
        status, kind, message, headers = answer(exc)
        response = _body(status, kind, message)
        response.headers.update(headers)
        return response

    for exc_class in refusals:
        app.add_exception_handler(exc_class, refused)

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    def store_down(_: Request, exc: Exception) -> JSONResponse:
        """The plan store does not answer (the database is down or unreachable): a 503 the
        client can retry, not a 500 (``/readyz`` says the same)."""
        log.warning("plan store unavailable: %s", type(exc).__name__)
        response = _body(
            503, "unavailable", "the plan store is unavailable; retry shortly (see /readyz)"
        )
        response.headers["Retry-After"] = str(STORE_RETRY_AFTER_S)
        return response

    @app.exception_handler(Exception)
    def internal(_: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error", exc_info=exc)
        return _body(500, "internal", "internal error: the planner could not answer this request")


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def refusal_text(exc: Exception) -> str:
    """A refusal of the core, of validation or of the store as one line a reader can act on."""
    if isinstance(exc, RequestValidationError | ValidationError):
        parts = [f"{field_path(tuple(e['loc']))}: {e['msg']}" for e in list(exc.errors())[:5]]
        return "; ".join(parts)
    if isinstance(exc, StarletteHTTPException):
        detail = exc.detail
        return str(detail.get("message", detail)) if isinstance(detail, dict) else str(detail)
    if isinstance(exc, UnknownIdError):
        return f"unknown {exc.kind} id {exc.ident!r} (not in the public or the team catalog)"
    if isinstance(exc, SpecError):
        return f"{exc.field}: {exc.rule}"
    return str(exc)
