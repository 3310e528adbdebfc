"""CPU-bound request work off the event loop, in a lane of a few threads served in order.

A plain ``def`` route runs in Starlette's shared thread pool (40 threads). Under load every
waiting request there holds a thread, and the threads take the GIL in turns of Python's switch
interval (5 ms): a request is served in as many turns as there are others running beside it,
and the latency tail grows with the number of clients. A lane caps how many of its requests
compute at once (one per lane thread; the rest wait in arrival order in the lane's queue,
holding no thread), so each request runs to its end in one go. The event loop keeps parsing,
validating and answering other requests meanwhile: CPU-bound work never runs on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from functools import partial
from typing import TypeVar

__all__ = ["ESTIMATES", "Lane"]

T = TypeVar("T")


class Lane:
    """Runs functions in ``threads`` worker threads, in the order they arrive (a thread pool
    executor's queue), each in a copy of the calling request's context (its bound team
    catalog). Cheaper per call than ``anyio.to_thread.run_sync`` (no cancel scope or limiter
    bookkeeping): the hop to the thread and back is ~0.3M instructions with anyio."""

    def __init__(self, name: str, threads: int) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"lane-{name}")

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` in a lane thread; the caller's task waits without holding a thread."""
        context = copy_context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, partial(context.run, fn, *args))


# Single estimates (training and serving): milliseconds each, so one at a time is fastest.
ESTIMATES = Lane("estimates", 1)
