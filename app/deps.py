"""What the API and the pages both need of a request: the app's plan store (opened and migrated
once), the team catalog bound for the request, and whether a write may go ahead (read-only
service, token, write rate)."""

from __future__ import annotations

import ipaddress
import secrets
from threading import Lock
from typing import Any

from fastapi import HTTPException, Request

from app.service.guards import WriteRate
from app.settings import Settings, is_loopback
from app.store import catalog as team
from app.store.plans import PlanStore
from app.store.team import TeamStore

__all__ = [
    "bind_team",
    "bind_team_of",
    "listens_on_loopback",
    "open_store",
    "plan_store",
    "settings_of",
    "write_refusal",
    "writer",
]

_OPENING = Lock()


def open_store(app: Any) -> PlanStore:
    """The app's plan store, opened and migrated once: at start-up by the lifespan, or on
    first use where the lifespan did not run (an app driven without it, as in tests)."""
    state = app.state
    if getattr(state, "store", None) is None:
        with _OPENING:
            if getattr(state, "store", None) is None:
                store = PlanStore(settings_of(app).database_url)
                state.team = TeamStore(store.engine)
                state.store = store
    opened: PlanStore = state.store
    return opened


def settings_of(app: Any) -> Settings:
    """The app's settings (read from the environment when it was made)."""
    state = app.state
    if getattr(state, "settings", None) is None:  # an app made without create_app
        state.settings = Settings.from_env()
    settings: Settings = state.settings
    return settings


def bind_team_of(request: Request) -> None:
    """Resolve team catalog ids from this app's store for the rest of the request, in the
    context it runs in (the request's own, for an async route or dependency; the lanes and the
    threads of sync routes copy it)."""
    open_store(request.app)
    team.bind(request.app.state.team)


async def bind_team(request: Request) -> None:
    """``bind_team_of`` as a router dependency of the API and the pages. Async, so the binding
    is made in the request's own context."""
    bind_team_of(request)


def plan_store(request: Request) -> PlanStore:
    return open_store(request.app)


def write_refusal(request: Request, token: str | None) -> HTTPException | None:
    """Why a write with ``token`` is refused (a read-only service, a token configured and not
    given, too many writes from this client), or None where it may go ahead. The API reads the
    token from the Authorization header, the pages from their forms."""
    cfg = settings_of(request.app)
    if cfg.read_only:
        return HTTPException(403, "the service is read-only (PLANNER_READ_ONLY)")
    if cfg.api_token is None and not listens_on_loopback(cfg, request.scope.get("server")):
        return HTTPException(
            403,
            "writes need a token when the service listens beyond loopback: start it with "
            "PLANNER_API_TOKEN set to a secret (e.g. openssl rand -hex 32) and send "
            "'Authorization: Bearer <token>' (the pages ask for it)",
        )
    if cfg.api_token is not None and not secrets.compare_digest(
        (token or "").encode(), cfg.api_token.encode()
    ):
        return HTTPException(401, "writes need 'Authorization: Bearer <PLANNER_API_TOKEN>'")
    rate: WriteRate | None = getattr(request.app.state, "write_rate", None)
    client = request.client.host if request.client else "unknown"
    wait = rate.wait_s(client) if rate is not None else 0.0
    if wait > 0:
        return HTTPException(
            429,
            f"more than {cfg.writes_per_minute} writes a minute from {client} "
            "(PLANNER_WRITES_PER_MINUTE); retry later",
            headers={"Retry-After": WriteRate.retry_after(wait)},
        )
    return None


def listens_on_loopback(cfg: Settings, server: Any) -> bool:
    """Whether writes may go ahead without a token: the service is configured to listen on
    loopback (``PLANNER_HOST``) and this request arrived on a loopback address (the ASGI
    scope's ``server``; one that is not an address, as an in-process client's or a Unix
    socket's, leaves the setting to decide). A server started on ``0.0.0.0`` without
    ``PLANNER_HOST`` is caught by the second: a request from the network arrives elsewhere."""
    if not cfg.on_loopback:
        return False
    address = server[0] if isinstance(server, tuple | list) and server else None
    if not isinstance(address, str):
        return True
    try:
        ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return True
    return is_loopback(address)


def writer(request: Request) -> PlanStore:
    """The store, for a request allowed to write (a dependency)."""
    sent = request.headers.get("authorization", "")
    token = sent.removeprefix("Bearer ") if sent.startswith("Bearer ") else None
    refusal = write_refusal(request, token)
    if refusal is not None:
        raise refusal
    return plan_store(request)
