"""Every refusal as one JSON shape (``schemas.common.ErrorResponse``): the field path, the rule
and the value. Invalid input is a 422, an unknown id a 404 with the nearest ids, an oversize
body a 413, a sweep past its time limit a 503. Nothing becomes a traceback."""

from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from estimator.errors import SpecError, UnknownIdError

from .plans import SweepTimeout

__all__ = ["MAX_BODY_BYTES", "BodyLimit", "TooLarge", "field_path", "install"]

MAX_BODY_BYTES = 1_000_000
_ECHO_CHARS = 200
_TYPE_TAGS = {"str", "int", "float", "bool", "none", "list", "dict"}
log = logging.getLogger("llm_planner")


class TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"request body over {limit:,} bytes")


def _echo(value: Any) -> Any:
    """A value short and plain enough to send back."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _ECHO_CHARS else text[:_ECHO_CHARS] + "..."


def _body(status: int, error: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status)


def field_path(loc: tuple[Any, ...]) -> str:
    """pydantic's location as a dotted path: ``('body', 'layout', 'tp')`` -> ``layout.tp``.
    Union branch tags (``str``, ``list[...]``, model class names) are dropped."""
    parts = []
    for i, part in enumerate(loc):
        if i == 0 and part in ("body", "query", "path", "header"):
            continue
        if isinstance(part, int):
            parts.append(str(part))
        elif part in _TYPE_TAGS or "[" in part or "-" in part or part[:1].isupper():
            continue
        else:
            parts.append(part)
    return ".".join(parts) or "body"


def invalid(field: str, rule: str, value: Any = None) -> JSONResponse:
    item = {"field": field, "rule": rule, "value": _echo(value)}
    return _body(422, "invalid_request", f"{field}: {rule}", detail=[item])


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(SpecError)
    def spec_error(_: Request, exc: SpecError) -> JSONResponse:
        return invalid(exc.field, exc.rule, exc.value)

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
    def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # an unreadable body (bad UTF-8, broken multipart)
            return invalid("body", f"must be readable JSON: {exc.detail}")
        kinds = {
            401: "unauthorized",
            403: "forbidden",
            404: "not_found",
            409: "conflict",
            413: "too_large",
        }
        kind = kinds.get(exc.status_code, "invalid_request")
        return _body(exc.status_code, kind, str(exc.detail))

    @app.exception_handler(TooLarge)
    def too_large(_: Request, exc: TooLarge) -> JSONResponse:
        return _body(413, "too_large", str(exc))

    @app.exception_handler(SweepTimeout)
    def timeout(_: Request, exc: SweepTimeout) -> JSONResponse:
        return _body(503, "timeout", str(exc))

    @app.exception_handler(Exception)
    def internal(_: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error", exc_info=exc)
        return _body(500, "internal", "internal error: the planner could not answer this request")


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with a 413, by their Content-Length or, for
    chunked uploads, as soon as the bytes read pass it."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _body(413, "too_large", str(TooLarge(self.limit)))(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise TooLarge(self.limit)
            return message

        await self.app(scope, counted, send)
