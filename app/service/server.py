"""The HTTP server around the app: uvicorn's options from the settings, and its HTTP protocol
with the two bounds uvicorn 0.54 does not keep itself.

- **Time to send headers**: uvicorn arms its keep-alive timer only after a response, so a
  client that opens a connection and sends half a request line holds it for ever (an audit
  kept 2,000 such connections open for its whole run). ``GuardedHttpTools`` gives every request
  ``header_timeout_s`` from its first byte (or from the connection's opening) to finish its
  headers, then closes the connection.
- **Drain**: on SIGTERM uvicorn closes every connection that has no request in flight at that
  moment, dropping a request whose bytes had arrived but were not read yet. The protocol here
  lets a connection whose request has begun finish it (and then close), and closes an idle one
  only after the loop has read what was already on its socket. The lanes stop starting work
  (``lanes.begin_drain``): a sweep still waiting for its turn is answered 503 with Retry-After
  at once instead of running out the grace period and being cut off.

The body's time and size limits, the JSON depth and the rest are the app's own
(``app.service.guards``); the connection limit is uvicorn's ``limit_concurrency`` (503 past it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.service.lanes import begin_drain
from app.settings import Settings, current

__all__ = ["DRAIN_READ_S", "GuardedHttpTools", "server_options"]

DRAIN_READ_S = 0.05  # at shutdown, an idle connection is closed after the loop read its socket


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a drain that reads first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = float(current().header_timeout_s)
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_request = False  # a request's first byte has arrived, its headers not all
        self._draining = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_request = True
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        self._in_request = False
        super().on_headers_complete()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answer this one, then close

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        """No complete request head within the deadline: close the connection (a client that
        has not sent its headers has no request to answer)."""
        self._header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered; its body has the app's own deadline
        if not self.transport.is_closing():
            self.transport.close()

    def shutdown(self) -> None:
        """Called by the server at the start of a graceful shutdown: the lanes start nothing
        new (a waiting sweep is answered 503 with Retry-After at once), requests that have
        begun are answered."""
        begin_drain()
        self._draining = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
            return
        if self._in_request:
            return  # its headers are arriving: on_headers_complete answers it, then closes
        self.loop.call_later(DRAIN_READ_S, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self._in_request or (self.cycle is not None and not self.cycle.response_complete):
            if self.cycle is not None:
                self.cycle.keep_alive = False
            return
        if not self.transport.is_closing():
            self.transport.close()


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for ``settings`` (``llm-planner serve`` passes them; the image and
    ``make serve`` run that command)."""
    proxies = settings.forwarded_allow_ips
    return {
        "host": settings.host,
        "port": settings.port,
        "workers": settings.workers,
        "http": GuardedHttpTools,
        "timeout_keep_alive": settings.keep_alive_s,
        "timeout_graceful_shutdown": settings.graceful_shutdown_s,
        "limit_concurrency": settings.max_connections,
        # Forwarded headers are read only from the proxies listed; by default from none, so a
        # client cannot pick its own address for the write limit.
        "proxy_headers": bool(proxies),
        "forwarded_allow_ips": ",".join(proxies) if proxies else None,
        "server_header": False,
    }
