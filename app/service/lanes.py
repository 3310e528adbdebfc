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

Each estimate has a cost bound known before it runs (``training_cost``: the model's decoder
layers times the plan's virtual stages, the per-stage tables a split fills): a catalog model's
estimate under ``ON_LOOP_MAX_COST`` takes the loop, anything above it, or of unknown size, a
thread. A thread lane admits at most ``threads + queue`` calls at once; the next is refused
with ``LaneFull`` (503 with Retry-After) rather than left to wait without end.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import Context, copy_context
from typing import Any, TypeVar

import estimator
from app.settings import current

__all__ = [
    "ESTIMATES",
    "ON_LOOP_MAX_COST",
    "SHORT_ESTIMATES",
    "SWEEPS",
    "Lane",
    "LaneDraining",
    "LaneFull",
    "LaneLate",
    "LaneRefused",
    "LoopLane",
    "begin_drain",
    "estimate_lane",
    "training_cost",
]

T = TypeVar("T")
_Call = tuple[asyncio.Future[Any], Context, Callable[..., Any], tuple[Any, ...]]  # a queued call


class LaneRefused(Exception):
    """A lane did not take or start a call; the API answers 503 with ``Retry-After``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(f"the service is busy: {message}; retry in {retry_after_s} s")


class LaneFull(LaneRefused):
    """A lane has as many calls admitted as it takes."""

    def __init__(self, name: str, admitted: int, retry_after_s: int) -> None:
        super().__init__(
            f"{admitted} {name} requests are running or waiting already", retry_after_s
        )


class LaneLate(LaneRefused):
    """A call waited in its lane past its deadline and was not started."""

    def __init__(self, name: str, waited_s: float, retry_after_s: int) -> None:
        super().__init__(
            f"this {name} request waited {waited_s:.0f} s for its turn and was not started",
            retry_after_s,
        )


class LaneDraining(Exception):
    """The service is shutting down: a call not yet started is answered 503 at once, so its
    client can retry elsewhere, rather than run out the grace period and be cut off."""

    retry_after_s = 1

    def __init__(self, name: str) -> None:
        super().__init__(
            f"the service is shutting down: this {name} request was not started; retry in a moment"
        )


_DRAINING = threading.Event()


def begin_drain() -> None:
    """From now on the lanes start nothing new (the server calls this when a graceful shutdown
    begins: ``app.service.server``); what is running finishes."""
    _DRAINING.set()


class Lane:
    """Runs functions in ``threads`` worker threads, in the order they arrive (a thread pool
    executor's queue), each in a copy of the calling request's context (its bound team
    catalog). Cheaper per call than ``anyio.to_thread.run_sync`` (no cancel scope or limiter
    bookkeeping): the hop to the thread and back is ~0.3M instructions with anyio.

    Admission: at most ``threads + queue`` calls are admitted (running or waiting; ``queue``
    None: no bound); the next raises ``LaneFull``. A call counts until its thread is done with
    it, even if its caller went away. ``wait_s`` (a function: settings are read when it runs):
    a call still waiting that long after it was admitted is not started (``LaneLate``), so a
    queue never serves answers nobody waits for."""

    def __init__(
        self,
        name: str,
        threads: int,
        queue: int | None = None,
        wait_s: Callable[[], float] | None = None,
    ) -> None:
        self.name = name
        self.threads = threads
        self.queue = queue
        self.wait_s = wait_s
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"lane-{name}")
        self._admitted = 0
        self._lock = threading.Lock()

    @property
    def admitted(self) -> int:
        """Calls running or waiting now."""
        return self._admitted

    def _retry_after_s(self) -> int:
        return max(1, math.ceil(self.wait_s() if self.wait_s is not None else 1.0))

    def _admit(self) -> None:
        if _DRAINING.is_set():
            raise LaneDraining(self.name)
        with self._lock:
            if self.queue is not None and self._admitted >= self.threads + self.queue:
                raise LaneFull(self.name, self._admitted, self._retry_after_s())
            self._admitted += 1

    def _release(self, _: Future[Any]) -> None:
        with self._lock:
            self._admitted -= 1

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` in a lane thread; the caller's task waits without holding a thread."""
        self._admit()
        context = copy_context()
        admitted = time.monotonic()
        try:
            future = self._pool.submit(context.run, self._timely, admitted, fn, *args)
        except BaseException:
            self._release(Future())
            raise
        future.add_done_callback(self._release)
        return await asyncio.wrap_future(future)

    def _timely(self, admitted: float, fn: Callable[..., T], *args: object) -> T:
        if _DRAINING.is_set():
            raise LaneDraining(self.name)
        waited = time.monotonic() - admitted
        if self.wait_s is not None and waited > self.wait_s():
            raise LaneLate(self.name, waited, self._retry_after_s())
        return fn(*args)


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


# Single estimates: milliseconds each, so one at a time is fastest. The thread lane takes the
# ones of unknown or large size and the fit-suggestion searches (each bounded at
# ``resolve.FIT_SEARCH_S``): 64 may wait, about half a minute of the slowest kind.
ESTIMATES = Lane("estimate", 1, queue=64)
SHORT_ESTIMATES = LoopLane("short estimates")
# Sweeps: one at a time (``resolve._one_at_a_time`` says why), at most 8 waiting, none started
# after waiting a whole sweep time limit (``PLANNER_SWEEP_TIMEOUT_S``: set on first use).
SWEEPS = Lane("sweep", 1, queue=8, wait_s=lambda: float(current().sweep_timeout_s))
_CATALOG = frozenset(estimator.model_ids())

# The largest cost bound served on the loop: 4,096 layer-stages, about 1.5 ms (Llama 3 70B's
# 80 layers over 41 virtual stages, uneven; the slowest catalog estimate at that bound,
# benchmarks/bench_api.py); the catalog's deepest plans (82 stages of 80 layers: 3 ms) go to
# the thread lane.
ON_LOOP_MAX_COST = 4_096


def training_cost(model: str | dict[str, Any], pp: int, vp: int) -> int | None:
    """A training estimate's cost bound, known before it runs: the model's decoder layers
    times its virtual stages (the per-stage memory and time tables an uneven split fills; the
    stage count itself is bounded by the layers, ``pipeline.check_stage_count``). None for a
    model whose size is not known without reading it (a pasted config, a team model)."""
    if not isinstance(model, str) or model not in _CATALOG:
        return None
    return estimator.get_model(model).num_layers * pp * vp


def estimate_lane(model: str | dict[str, Any], cost: int | None = 0) -> Lane | LoopLane:
    """The lane of a single estimate: the loop for a public catalog model whose cost bound is
    at most ``ON_LOOP_MAX_COST`` (short), a thread for the rest and for a pasted config or a
    team model (unbounded: any layer count, read per call)."""
    on_loop = isinstance(model, str) and model in _CATALOG
    if on_loop and cost is not None and cost <= ON_LOOP_MAX_COST:
        return SHORT_ESTIMATES
    return ESTIMATES
