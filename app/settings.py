"""Service settings, read from the environment (documented in docs/deployment.md, "Settings").

Plan store and access:

- ``DATABASE_URL``: SQLAlchemy URL of the plan store; default a SQLite file under
  ``PLANNER_DATA_DIR`` (default ``./data``), created on first start. PostgreSQL for a shared
  deployment: ``postgresql+psycopg://user:password@host:5432/planner``.
- ``PLANNER_API_TOKEN``: when set, writes (saving, editing, deleting plans, the team
  catalog) need ``Authorization: Bearer <token>``; reads stay open. Without one, writes are
  open only to a service listening on loopback (``PLANNER_HOST`` 127.0.0.1, the default, and
  the request arriving there); listening anywhere else, every write is refused with a 403
  that says how to set a token.
- ``PLANNER_READ_ONLY``: ``1`` refuses every write.
- ``PLANNER_CORS_ORIGINS``: comma-separated origins allowed to call the API from a browser
  (``*`` for any); empty (the default) sends no CORS headers.

The server (``llm-planner serve`` and the image's start step):

- ``PLANNER_HOST`` / ``PLANNER_PORT``: where to listen (default ``127.0.0.1:8000``).
- ``PLANNER_WORKERS``: worker processes (default 1).
- ``PLANNER_KEEP_ALIVE_S``: how long an idle keep-alive connection is held (default 5).
- ``PLANNER_HEADER_TIMEOUT_S``: time a client has to send a request's headers, from its first
  byte or the connection's opening (default 10; the connection is closed past it).
- ``PLANNER_MAX_CONNECTIONS``: connections and requests a worker holds at once (default 1,024;
  503 past it).
- ``PLANNER_FORWARDED_ALLOW_IPS``: comma-separated addresses of the reverse proxies whose
  ``X-Forwarded-For`` / ``X-Forwarded-Proto`` are believed (default none: the client address is
  the connection's, so no client picks its own for the write limit).
- ``PLANNER_PUBLIC_URL``: the address users reach the service at (``https://planner.example``),
  for the links a Markdown summary carries; default the request's own (its Host checked).
- ``PLANNER_ALLOWED_HOSTS``: comma-separated host names (and addresses) requests may be sent
  to, ``*`` for any; default ``localhost``, ``127.0.0.1``, ``[::1]`` and ``PLANNER_HOST`` where
  that is one address (not ``0.0.0.0``). Any other ``Host`` is answered 400, so a page on
  another site that rebinds its name to this machine cannot read or write a local instance.
- ``PLANNER_GRACEFUL_SHUTDOWN_S``: on SIGTERM, how long requests in flight may finish before
  they are cancelled (default 10).
- ``PLANNER_LOG_LEVEL``: ``debug``, ``info`` (default: one access line per request),
  ``warning``, ``error``.
- ``PLANNER_FAST_ESTIMATES``: ``0`` serves the two single estimates through FastAPI's routing
  only (default on: a measured fast path, ``app.api.fast``).

Limits (every one bounds what a single request can cost; docs/deployment.md, "Limits"):

- ``PLANNER_MAX_BODY_BYTES``: largest request body (default 1,000,000; 413 past it).
- ``PLANNER_MAX_JSON_DEPTH``: deepest nesting of a JSON body or a JSON query parameter
  (default 32; 422 past it, before anything parses it).
- ``PLANNER_BODY_TIMEOUT_S``: time a client has to send a whole request body (default 10;
  408 and the connection closed past it).
- ``PLANNER_SWEEP_TIMEOUT_S``: time one sweep may compute (default 30; 503 past it).
- ``PLANNER_SWEEP_CACHE_MIB``: memory the sweeps kept for paging may hold, per worker (default
  512; the least recently used go first, and a sweep over it is answered but not kept).
- ``PLANNER_EXACT_TIMEOUT_S``: time the exact module tree may take, queueing included
  (default 60; 503 past it, its worker process killed).
- ``PLANNER_EXACT_MAX_LAYERS``: deepest model the exact tree builds (default 512; 422 past it).
- ``PLANNER_EXACT_QUEUE``: exact-tree requests waiting at once beyond the one running
  (default 2; 503 with Retry-After past it).
- ``PLANNER_MAX_PLAN_BYTES``: largest stored plan or team entry, as JSON (default 65,536; a
  pasted config over it is kept as the keys the reader uses; 413 if still over).
- ``PLANNER_TEAM_MAX_LAYERS``: deepest team model the catalog stores (default 1,024; 422 past
  it): every page lists the team's models, so a write reads each changed one again.
- ``PLANNER_WRITES_PER_MINUTE``: saved-plan and team-catalog writes per client address and
  minute (default 60, ``0`` for no limit; 429 with Retry-After past it).

Models by Hugging Face id (``app.hub``; docs/catalogs.md, "Hugging Face ids"):

- ``HF_ENDPOINT``: the Hub the service fetches ``config.json`` from (default
  ``https://huggingface.co``; a mirror or a private hub as ``huggingface_hub`` reads it). No
  other address is ever fetched.
- ``PLANNER_HF_FETCH``: ``0`` turns fetching off (air-gapped): catalog ids and catalog-known
  Hugging Face ids still resolve, any other id is refused.
- ``PLANNER_HF_OFFLINE``: ``1`` (or ``HF_HUB_OFFLINE=1``) reads the on-disk cache only.
- ``PLANNER_HF_CACHE_DIR``: the cache (default ``PLANNER_DATA_DIR/hf-cache``, the Hub's layout).
- ``PLANNER_HF_TOKEN``: a token for gated or private repositories; sent to ``HF_ENDPOINT``
  only, never logged, never stored in a plan.
- ``PLANNER_HF_TIMEOUT_S``: the time one model's fetch may take, all its requests together
  (default 5; the hub is then unreachable for this request, and the cache is read).
- ``PLANNER_HF_MAX_CONFIG_BYTES``: the largest ``config.json`` fetched (default 1,000,000).

A value that cannot be read is refused at start-up with the variable's name and the rule.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

__all__ = ["LOG_LEVELS", "WILDCARD_HOSTS", "Settings", "current", "is_loopback", "settings"]

LOG_LEVELS = ("debug", "info", "warning", "error")


def _int(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValueError(f"{name}={raw!r}: must be an integer from {low} to {high}")
    return int(raw)


def _list(name: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in os.environ.get(name, "").split(",") if v.strip())


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name, "").strip().lower() or default
    if raw not in choices:
        raise ValueError(f"{name}={raw!r}: must be one of {', '.join(choices)}")
    return raw


def _endpoint(name: str, default: str) -> str:
    raw = os.environ.get(name, "").strip().rstrip("/") or default
    if not raw.startswith(("http://", "https://")) or any(c in raw for c in " ?#@"):
        raise ValueError(f"{name}={raw!r}: must be an http(s) address with no query or user")
    return raw


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str
    api_token: str | None
    read_only: bool
    cors_origins: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    keep_alive_s: int = 5
    header_timeout_s: int = 10
    max_connections: int = 1_024
    forwarded_allow_ips: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    public_url: str | None = None
    graceful_shutdown_s: int = 10
    log_level: str = "info"
    otel: bool = False
    max_body_bytes: int = 1_000_000
    max_json_depth: int = 32
    body_timeout_s: int = 10
    sweep_timeout_s: int = 30
    sweep_cache_mib: int = 512
    exact_timeout_s: int = 60
    exact_max_layers: int = 512
    exact_queue: int = 2
    max_plan_bytes: int = 65_536
    team_max_layers: int = 1_024
    writes_per_minute: int = 60
    fast_estimates: bool = True
    hf_endpoint: str = "https://huggingface.co"
    hf_fetch: bool = True
    hf_offline: bool = False
    hf_cache_dir: Path | None = None  # None: data_dir / "hf-cache"
    hf_token: str | None = field(default=None, repr=False)  # never printed
    hf_timeout_s: int = 5
    hf_max_config_bytes: int = 1_000_000

    @property
    def on_loopback(self) -> bool:
        """Whether the service listens on a loopback address only."""
        return is_loopback(self.host)

    @property
    def hosts(self) -> tuple[str, ...]:
        """The host names requests may name (``PLANNER_ALLOWED_HOSTS``, else the default)."""
        if self.allowed_hosts:
            return tuple(h.lower() for h in self.allowed_hosts)
        bound = () if self.host in WILDCARD_HOSTS else (self.host.lower(),)
        return tuple(dict.fromkeys(("localhost", "127.0.0.1", "[::1]", *bound)))

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = Path(os.environ.get("PLANNER_DATA_DIR", "data"))
        url = os.environ.get("DATABASE_URL") or f"sqlite:///{data_dir / 'planner.db'}"
        origins = os.environ.get("PLANNER_CORS_ORIGINS", "").split(",")
        return cls(
            data_dir=data_dir,
            database_url=url,
            api_token=os.environ.get("PLANNER_API_TOKEN") or None,
            read_only=os.environ.get("PLANNER_READ_ONLY", "") in ("1", "true", "yes"),
            cors_origins=tuple(o.strip().rstrip("/") for o in origins if o.strip()),
            host=os.environ.get("PLANNER_HOST", "").strip() or "127.0.0.1",
            port=_int("PLANNER_PORT", 8000, 1, 65535),
            workers=_int("PLANNER_WORKERS", 1, 1, 256),
            keep_alive_s=_int("PLANNER_KEEP_ALIVE_S", 5, 1, 3600),
            header_timeout_s=_int("PLANNER_HEADER_TIMEOUT_S", 10, 1, 3600),
            max_connections=_int("PLANNER_MAX_CONNECTIONS", 1_024, 1, 10**6),
            forwarded_allow_ips=_list("PLANNER_FORWARDED_ALLOW_IPS"),
            allowed_hosts=_list("PLANNER_ALLOWED_HOSTS"),
            public_url=os.environ.get("PLANNER_PUBLIC_URL", "").strip() or None,
            graceful_shutdown_s=_int("PLANNER_GRACEFUL_SHUTDOWN_S", 10, 0, 3600),
            log_level=_choice("PLANNER_LOG_LEVEL", "info", LOG_LEVELS),
            otel=os.environ.get("PLANNER_OTEL", "") in ("1", "true", "yes"),
            max_body_bytes=_int("PLANNER_MAX_BODY_BYTES", 1_000_000, 1_024, 2**30),
            max_json_depth=_int("PLANNER_MAX_JSON_DEPTH", 32, 4, 256),
            body_timeout_s=_int("PLANNER_BODY_TIMEOUT_S", 10, 1, 3600),
            sweep_timeout_s=_int("PLANNER_SWEEP_TIMEOUT_S", 30, 1, 3600),
            sweep_cache_mib=_int("PLANNER_SWEEP_CACHE_MIB", 512, 0, 2**20),
            exact_timeout_s=_int("PLANNER_EXACT_TIMEOUT_S", 60, 1, 3600),
            exact_max_layers=_int("PLANNER_EXACT_MAX_LAYERS", 512, 1, 16_384),
            exact_queue=_int("PLANNER_EXACT_QUEUE", 2, 0, 64),
            max_plan_bytes=_int("PLANNER_MAX_PLAN_BYTES", 65_536, 4_096, 2**24),
            team_max_layers=_int("PLANNER_TEAM_MAX_LAYERS", 1_024, 1, 16_384),
            writes_per_minute=_int("PLANNER_WRITES_PER_MINUTE", 60, 0, 10**6),
            fast_estimates=os.environ.get("PLANNER_FAST_ESTIMATES", "1")
            not in ("0", "false", "no"),
            hf_endpoint=_endpoint("HF_ENDPOINT", "https://huggingface.co"),
            hf_fetch=os.environ.get("PLANNER_HF_FETCH", "1") not in ("0", "false", "no"),
            hf_offline=any(
                os.environ.get(name, "") in ("1", "true", "yes")
                for name in ("PLANNER_HF_OFFLINE", "HF_HUB_OFFLINE")
            ),
            hf_cache_dir=Path(os.environ.get("PLANNER_HF_CACHE_DIR") or data_dir / "hf-cache"),
            hf_token=os.environ.get("PLANNER_HF_TOKEN", "").strip() or None,
            hf_timeout_s=_int("PLANNER_HF_TIMEOUT_S", 5, 1, 120),
            hf_max_config_bytes=_int("PLANNER_HF_MAX_CONFIG_BYTES", 1_000_000, 1_024, 2**26),
        )


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def settings() -> Settings:
    return Settings.from_env()


@cache
def current() -> Settings:
    """The process's settings, read once: the environment does not change under a running
    service (tests that change it clear this cache)."""
    return Settings.from_env()
