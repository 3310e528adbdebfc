"""CPU-bound request work off the event loop, in a lane of a few threads served in order.

A plain ``def`` route runs in Starlette's shared thread pool (40 threads). Under load every
waiting request there holds a thread, and the threads take the GIL in turns of Python's switch
interval (5 ms): a request is served in as many turns as there are others running beside it,
and the latency tail grows with the number of clients. A lane caps how many of its requests
compute at once (one per lane thread; the rest wait in arrival order on the event loop, holding
no thread), so each request runs to its end in one go: measured with ``benchmarks/bench_api.py``
(32 clients, one worker), the single estimates' p99 fell by about a third at equal throughput.

The event loop keeps parsing, validating and answering other requests meanwhile: CPU-bound work
never runs on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar
from weakref import WeakKeyDictionary

import anyio
from anyio import to_thread

__all__ = ["ESTIMATES", "Lane"]

T = TypeVar("T")


class Lane:
    """Runs functions in worker threads, ``threads`` at a time, in the order they arrive.

    Each event loop gets its own capacity limiter (anyio's waits are tied to the loop they are
    made on; tests run several loops in turn)."""

    def __init__(self, name: str, threads: int) -> None:
        self.name = name
        self.threads = threads
        self._limiters: WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
            WeakKeyDictionary()
        )

    def _limiter(self) -> anyio.CapacityLimiter:
        loop = asyncio.get_running_loop()
        limiter = self._limiters.get(loop)
        if limiter is None:
            limiter = self._limiters[loop] = anyio.CapacityLimiter(self.threads)
        return limiter

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` in a lane thread, in the request's context (its bound team catalog)."""
        return await to_thread.run_sync(fn, *args, limiter=self._limiter())


# Single estimates (training and serving): milliseconds each, so one at a time is fastest.
ESTIMATES = Lane("estimates", 1)
