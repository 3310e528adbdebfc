"""Request guards: what every request must satisfy before a route sees it, so that no single
request can tie the service up, crash it, or write from another site.

- **Size**: a body over ``max_body_bytes`` is refused with a 413, by its Content-Length or, for a
  chunked upload, as soon as the bytes read pass it.
- **Time to send**: a client has ``body_timeout_s`` to send its whole body; past it the request
  is answered 408 and its connection closed (a slow-body client holds no worker beyond it).
  Slow *headers* are the server's or a reverse proxy's to bound (docs/deployment.md, "Limits").
- **Depth**: a JSON body, or a JSON query parameter (a pasted ``config``), nested deeper than
  ``max_json_depth`` is refused with a 422 naming ``body`` or the parameter *before* anything
  parses it (Python's parser recurses, and a 2 KB body of brackets would exhaust its stack).
- **Origin**: a write (POST, PUT, PATCH, DELETE) that a browser sends from another site is
  refused with a 403 (the Fetch Metadata and Origin checks of OWASP's CSRF guidance). The service
  keeps no session or cookie, so a browser holds no credential another site could ride on; what
  is left to refuse is the write itself. Origins listed in ``PLANNER_CORS_ORIGINS`` may write;
  clients that are not browsers send neither header and are not concerned.
- **Host**: a request must name one of the service's own hosts (``PLANNER_ALLOWED_HOSTS``, by
  default the loopback names and the bound address), so a page on another site whose name was
  rebound to this machine (DNS rebinding) cannot read or write a local instance: 400.
- **Rate**: ``WriteRate`` spaces out saved-plan and team-catalog writes per client address.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import OrderedDict
from threading import Lock
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from fastapi.responses import HTMLResponse, JSONResponse

from app.service.errors import (
    ASGIApp,
    BodyTimeout,
    Message,
    Receive,
    Scope,
    Send,
    ShapeError,
    TooLarge,
    invalid,
)
from app.settings import Settings

__all__ = ["RequestGuard", "WriteRate", "json_depth", "parse_json"]

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")
_OPENERS = frozenset(b"[{")
_JSONISH_QUERY = re.compile(rb"%5b|%7b|[\[{]", re.IGNORECASE)


def json_depth(raw: bytes | str) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not
    count), without parsing it. Malformed text gets a number too: the parser refuses it after."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= 1:
        return data.count(b"[") + data.count(b"{")
    brackets = b"".join(_BRACKETS.findall(_STRING.sub(b"", data)))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(max(np.cumsum(steps).max(), 0))


def parse_json(raw: bytes | str, field: str, max_depth: int) -> Any:
    """``json.loads`` of user input, its depth checked first; ShapeError naming ``field`` for
    input too deep, not JSON, or holding a lone surrogate escape."""
    depth = json_depth(raw)
    if depth > max_depth:
        raise ShapeError(field, f"JSON nested {depth} levels deep; at most {max_depth}")
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ShapeError(field, f"must be valid JSON: {exc}") from None
    where = surrogate_path(value)
    if where is not None:
        raise ShapeError(".".join([field, *where]) if where else field, SURROGATE_RULE)
    return value


SURROGATE_RULE = (
    "holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair), which is not "
    "a character: JSON text must be valid Unicode"
)


def surrogate_path(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The path to the first string (a key or a value) of parsed JSON that holds a lone
    surrogate (``json.loads`` accepts ``"\\ud800"``, but no UTF-8 answer can echo it), or
    None where there is none."""
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _SURROGATE.search(key):
                return (*path, key.encode("utf-8", "backslashreplace").decode())
            found = surrogate_path(item, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = surrogate_path(item, (*path, str(i)))
            if found is not None:
                return found
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return bytes(value)
    return None


def _is_json(content_type: bytes | None) -> bool:
    """A body FastAPI reads as JSON: declared JSON, or no type at all."""
    if content_type is None:
        return True
    kind = content_type.split(b";")[0].strip().lower()
    return kind == b"application/json" or (
        kind.startswith(b"application/") and kind.endswith(b"+json")
    )


def _cross_site(scope: Scope, allowed: tuple[str, ...]) -> str | None:
    """Why a write from a browser comes from another site, or None. A browser that sends Fetch
    Metadata says so in ``Sec-Fetch-Site``; otherwise its ``Origin`` is compared with the Host
    the request was sent to (a reverse proxy must pass Host on). Origins in ``allowed``
    (``PLANNER_CORS_ORIGINS``) may write from their own site; ``*`` there lets any site read,
    never write."""
    origin = _header(scope, b"origin")
    text = origin.decode("latin-1").strip().rstrip("/") if origin is not None else None
    if text is not None and text in allowed:  # named origins only: "*" opens reads, not writes
        return None
    site = _header(scope, b"sec-fetch-site")
    if site is not None:
        if site.lower() in (b"same-origin", b"none"):
            return None
        return f"a write the browser marks {site.decode('latin-1')!r} is not same-origin"
    if text is None:
        return None  # not a browser: no site to ride on
    host = (_header(scope, b"host") or b"").decode("latin-1").strip().lower()
    netloc = urlsplit(text).netloc.lower() if text != "null" else ""
    if netloc and netloc == host:
        return None
    return f"a write from {text!r} to this service ({host or 'no Host'}) is cross-site"


def _forbidden(scope: Scope, reason: str) -> Any:
    message = f"Refused: {reason}. Open the planner itself and submit the form there."
    if str(scope.get("path", "")).startswith("/api/"):
        return JSONResponse(
            {"error": "forbidden", "message": message, "detail": [], "suggestions": []},
            status_code=403,
        )
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Refused</title>"
        "<link rel='stylesheet' href='/static/site.css'></head><body><main>"
        "<h1>Refused</h1><p>This form was sent from another site, so the planner did not act "
        "on it. Open the planner itself and submit the form there.</p></main></body></html>"
    )
    return HTMLResponse(page, status_code=403)


def _host_allowed(named: bytes | None, hosts: frozenset[str]) -> bool:
    """Whether the request's ``Host`` (its port left off) is one the service answers to. A
    request with no Host (HTTP/1.0) names no site, so no other site can have sent it."""
    if named is None:
        return True
    text = named.decode("latin-1").strip().lower()
    name = text if text.endswith("]") else text.rsplit(":", 1)[0] if ":" in text else text
    return name in hosts


def _wrong_host(scope: Scope, named: bytes | None, hosts: frozenset[str]) -> Any:
    shown = (named or b"").decode("latin-1")[:100]
    message = (
        f"Refused: this service does not answer to the host {shown!r}; it answers to "
        f"{', '.join(sorted(hosts))}. Set PLANNER_ALLOWED_HOSTS to the names it is reached by."
    )
    return JSONResponse(
        {"error": "invalid_host", "message": message, "detail": [], "suggestions": []},
        status_code=400,
    )


def _timed_out(limit_s: float) -> Any:
    return JSONResponse(
        {
            "error": "timeout",
            "message": str(BodyTimeout(limit_s)),
            "detail": [],
            "suggestions": [],
        },
        status_code=408,
        headers={"Connection": "close"},
    )


def _too_large(limit: int) -> Any:
    body = {"error": "too_large", "message": str(TooLarge(limit)), "detail": [], "suggestions": []}
    return JSONResponse(body, status_code=413)


class RequestGuard:
    """The checks above, in one pass, ahead of every route (outside the exception handlers:
    it answers for itself)."""

    def __init__(self, app: ASGIApp, limits: Settings) -> None:
        self.app = app
        self.limit = limits.max_body_bytes
        self.depth = limits.max_json_depth
        self.body_s = float(limits.body_timeout_s)
        self.allowed = limits.cors_origins
        hosts = limits.hosts
        self.hosts: frozenset[str] | None = None if "*" in hosts else frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        named = _header(scope, b"host")
        if self.hosts is not None and not _host_allowed(named, self.hosts):
            await _wrong_host(scope, named, self.hosts)(scope, receive, send)
            return
        method = scope.get("method", "GET")
        if method in UNSAFE_METHODS:
            reason = _cross_site(scope, self.allowed)
            if reason is not None:
                await _forbidden(scope, reason)(scope, receive, send)
                return
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _too_large(self.limit)(scope, receive, send)
            return
        query: bytes = scope.get("query_string", b"")
        if query and _JSONISH_QUERY.search(query):
            for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
                depth = json_depth(value)
                if depth > self.depth:
                    rule = f"JSON nested {depth} levels deep; at most {self.depth}"
                    await invalid(name, rule)(scope, receive, send)
                    return
        deadline = time.monotonic() + self.body_s
        has_body = method in UNSAFE_METHODS and (
            (length is not None and length != b"0")
            or _header(scope, b"transfer-encoding") is not None
        )
        if has_body and _is_json(_header(scope, b"content-type")):
            await self._buffered(scope, receive, send, deadline)
            return
        await self.app(scope, _streamed(receive, self.limit, deadline, self.body_s), send)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send, deadline: float) -> None:
        """A JSON body read whole (it is at most ``limit`` bytes), its depth checked, then
        handed on as one message."""
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
            except TimeoutError:
                await _timed_out(self.body_s)(scope, receive, send)
                return
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await _too_large(self.limit)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        depth = json_depth(body)
        if depth > self.depth:
            rule = f"JSON nested {depth} levels deep; at most {self.depth}"
            await invalid("body", rule)(scope, receive, send)
            return
        if _ESCAPED_SURROGATE.search(body):  # rare: parsed once more only when one may be there
            where = _body_surrogate(body)
            if where is not None:
                await invalid(where, SURROGATE_RULE)(scope, receive, send)
                return
        await self.app(scope, _replay(body, receive), send)


def _body_surrogate(body: bytes) -> str | None:
    """The field path (``body`` for the whole) of a JSON body's first lone surrogate, or None
    (also for a body that does not parse: the route refuses that in its own words)."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    where = surrogate_path(value)
    return None if where is None else ".".join(where) or "body"


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body in one message, then the client's own messages (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _streamed(receive: Receive, limit: int, deadline: float, body_s: float) -> Receive:
    """``receive`` with the size and time limits applied until the body is complete."""
    seen = 0
    complete = False

    async def guarded() -> Message:
        nonlocal seen, complete
        if complete:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
        except TimeoutError:
            raise BodyTimeout(body_s) from None
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise TooLarge(limit)
            complete = not message.get("more_body", False)
        return message

    return guarded


class WriteRate:
    """At most ``per_minute`` writes per client address, as a token bucket holding a minute's
    worth (so a burst of ``per_minute`` passes, then one write every ``60 / per_minute`` s).
    Per worker process; behind a reverse proxy, run uvicorn with ``--proxy-headers`` so the
    client address is the caller's and not the proxy's."""

    MAX_CLIENTS = 10_000  # addresses tracked at once; the least recent are forgotten

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = Lock()

    def wait_s(self, client: str, now: float | None = None) -> float:
        """0 when a write from ``client`` may go ahead now (and counts it), else how many
        seconds until it may."""
        if self.per_minute <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        rate = self.per_minute / 60.0
        with self._lock:
            tokens, last = self._buckets.pop(client, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - last) * rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / rate
            self._buckets[client] = (tokens, now)
            while len(self._buckets) > self.MAX_CLIENTS:
                self._buckets.popitem(last=False)
        return wait

    @staticmethod
    def retry_after(wait_s: float) -> str:
        return str(max(1, math.ceil(wait_s)))
