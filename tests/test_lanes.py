"""The estimate lane: work runs off the event loop, one call at a time, in arrival order, in
the caller's context."""

from __future__ import annotations

import asyncio
import threading
from contextvars import ContextVar

from app.lanes import Lane

CALLER: ContextVar[str] = ContextVar("caller", default="none")


def test_lane_runs_calls_in_order_on_its_own_thread_with_the_callers_context() -> None:
    lane = Lane("test", 1)
    seen: list[tuple[int, str, str, int]] = []
    running = 0
    most = 0
    lock = threading.Lock()

    def work(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        seen.append((i, threading.current_thread().name, CALLER.get(), threading.get_ident()))
        with lock:
            running -= 1
        return i * i

    async def request(i: int) -> int:
        CALLER.set(f"request {i}")  # each task has its own context, as each request does
        return await lane.run(work, i)

    async def main() -> tuple[list[int], int]:
        results = await asyncio.gather(*(request(i) for i in range(8)))
        return list(results), threading.get_ident()

    results, loop_thread = asyncio.run(main())
    assert results == [i * i for i in range(8)]
    assert [s[0] for s in seen] == list(range(8))  # arrival order
    assert {s[1] for s in seen} == {"lane-test_0"} and most == 1
    assert all(s[3] != loop_thread for s in seen)  # never on the event loop's thread
    assert [s[2] for s in seen] == [f"request {i}" for i in range(8)]
