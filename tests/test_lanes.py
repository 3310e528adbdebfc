"""The estimate lanes: one call at a time, in arrival order, in the caller's context; a thread
lane off the event loop, a loop lane on it one call per turn; which estimates take which."""

from __future__ import annotations

import asyncio
import threading
from contextvars import ContextVar

from app.service.lanes import ESTIMATES, SHORT_ESTIMATES, Lane, LoopLane, estimate_lane

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


def test_loop_lane_runs_one_call_per_loop_turn_in_order_with_the_callers_context() -> None:
    lane = LoopLane("test")
    seen: list[tuple[int, str, int]] = []
    turns = 0  # a callback that re-schedules itself counts the loop's turns

    def tick() -> None:
        nonlocal turns
        turns += 1
        if turns < 100:
            asyncio.get_running_loop().call_soon(tick)

    def work(i: int) -> int:
        if i == 3:
            raise ValueError("refused")
        seen.append((i, CALLER.get(), turns))
        return i * i

    async def request(i: int) -> int | str:
        CALLER.set(f"request {i}")
        try:
            return await lane.run(work, i)
        except ValueError as exc:  # a call's error reaches its own caller only
            return str(exc)

    async def main() -> tuple[list[int | str], int]:
        asyncio.get_running_loop().call_soon(tick)
        results = await asyncio.gather(*(request(i) for i in range(8)))
        return list(results), threading.get_ident()

    results, _ = asyncio.run(main())
    assert results == [0, 1, 4, "refused", 16, 25, 36, 49]
    assert [s[0] for s in seen] == [0, 1, 2, 4, 5, 6, 7]  # arrival order
    assert [s[1] for s in seen] == [f"request {i}" for i in (0, 1, 2, 4, 5, 6, 7)]
    calls_turns = [s[2] for s in seen]
    assert len(set(calls_turns)) == len(calls_turns)  # never two calls in one turn


def test_loop_lane_skips_calls_whose_caller_went_away() -> None:
    lane = LoopLane("test")
    ran: list[int] = []

    async def main() -> None:
        first = asyncio.ensure_future(lane.run(ran.append, 1))
        second = asyncio.ensure_future(lane.run(ran.append, 2))
        await asyncio.sleep(0)  # both queued
        second.cancel()
        await first
        await asyncio.sleep(0.01)

    asyncio.run(main())
    assert ran == [1]


def test_only_catalog_model_estimates_run_on_the_loop() -> None:
    assert estimate_lane("llama-3-70b") is SHORT_ESTIMATES
    assert estimate_lane("my-team-model") is ESTIMATES  # a team model: any size
    assert estimate_lane({"model_type": "llama"}) is ESTIMATES  # a pasted config is read per call
