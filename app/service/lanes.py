"""Where CPU-bound request work runs: a lane serves its calls one at a time, in arrival order.

A plain ``def`` route runs in Starlette's shared thread pool (40 threads). Under load every
waiting request there holds a thread, and the threads take the GIL in turns of Python's switch
interval (5 ms): a request is served in as many turns as there are others running beside it,
and the latency tail grows with the number of clients. A lane caps how many of its requests
compute at once (the rest wait in arrival order, holding no thread), so each request runs to its
end in one go. Two kinds:

- ``Lane``: worker threads. For work of unbounded length (a pasted config is read and timed
  layer by layer, a team model may have thousands of layers): the event loop keeps answering
  other requests while it runs, in the GIL's 5 ms turns.
- ``LoopLane``: the event loop itself, one call per turn of the loop. For calls known to be
  short: a single estimate of a public catalog model takes at most ~1.5 ms (the slowest over
  every catalog model at tp 1 and 8 and every pipeline depth its layers allow, which
  ``benchmarks/bench_api.py`` times first; ~0.4 ms for a typical one), while a hop to a lane
  thread and back made a serving estimate cost ~1.4x the CPU time under load (threads trading
  the GIL across cores; bench_api with 32 clients: ~780 req/s in a thread lane, ~1,030 on the
  loop, measured in alternation). A thread holding the GIL holds up the loop for up to the
  5 ms switch interval anyway; on the loop an estimate holds it for its own run time, then the
  loop reads and answers whatever arrived meanwhile before the next call.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import Context, copy_context
from functools import partial
from typing import Any, TypeVar

import estimator

__all__ = ["ESTIMATES", "SHORT_ESTIMATES", "Lane", "LoopLane", "estimate_lane"]

T = TypeVar("T")
_Call = tuple[asyncio.Future[Any], Context, Callable[..., Any], tuple[Any, ...]]  # a queued call


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


class LoopLane:
    """Runs short functions on the event loop, one per turn of the loop, in the order they
    arrive, each in a copy of the calling request's context. Between two calls the loop polls
    its sockets and runs what became ready, so requests that arrive meanwhile are read, and
    queue behind the ones before them, rather than waiting for a whole batch to finish."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: deque[_Call] = deque()
        self._scheduled = False

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the loop once the calls queued before it have run."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append((future, copy_context(), fn, args))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._step, loop)
        return await future

    def _step(self, loop: asyncio.AbstractEventLoop) -> None:
        """One call; the next is scheduled for the loop's next turn (``call_soon`` from a
        callback runs after the loop has polled again)."""
        while self._queue:
            future, context, fn, args = self._queue.popleft()
            if future.cancelled():  # the client went away while it waited
                continue
            try:
                future.set_result(context.run(fn, *args))
            except Exception as exc:  # the caller's await raises it
                future.set_exception(exc)
            break
        if self._queue:
            loop.call_soon(self._step, loop)
        else:
            self._scheduled = False


# Single estimates: milliseconds each, so one at a time is fastest.
ESTIMATES = Lane("estimates", 1)
SHORT_ESTIMATES = LoopLane("short estimates")
_CATALOG = frozenset(estimator.model_ids())


def estimate_lane(model: str | dict[str, Any]) -> Lane | LoopLane:
    """The lane of a single estimate: the loop for a public catalog model (bounded and short),
    a thread for a pasted config or a team model (unbounded: any layer count, read per call)."""
    return SHORT_ESTIMATES if isinstance(model, str) and model in _CATALOG else ESTIMATES
