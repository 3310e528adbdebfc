"""Work that cannot be bounded from inside the service, run in a child process that can be
killed: the exact module tree builds the real ``transformers`` model on the meta device and runs
one forward under torch's FLOP counter, which no deadline inside the server's own process could
stop (a pasted config of thousands of layers ran for minutes and kept a gigabyte).

One child process per service worker, started on first use (importing torch takes seconds, so it
is kept warm for ``IDLE_S`` and reused), serves one tree at a time. The service waits for the
answer without holding the event loop or a thread; when the request's deadline passes or its
client goes away, the child is killed and the next request starts a fresh one. The deadline
counts from the request's arrival (its wait in the queue included), not counting the child's
own start-up (importing torch: a few seconds, bounded by ``STARTUP_S``). At most ``queue``
requests wait behind the one running; more are answered 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import IO, Any

from estimator.errors import SpecError

__all__ = ["Busy", "ClientGone", "IsolatedTimeout", "TreeWorker"]

IDLE_S = 300.0  # a warm child with no work for this long exits
RECYCLE_RSS_BYTES = 1_536 * 2**20  # a child whose peak memory passed this is replaced after a job
POLL_S = 0.05  # how often a waiting request looks at its deadline and its client
STARTUP_S = 120.0  # a child that has not imported its model code by then is killed


class Busy(Exception):
    """Too many requests wait for the child already."""

    def __init__(self, waiting: int, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(
            f"{waiting} exact-tree requests are waiting already; retry in {retry_after_s} s"
        )


class ClientGone(Exception):
    """The client closed its connection while its work ran; the work was stopped."""


class IsolatedTimeout(Exception):
    """The work ran past its deadline (queueing included) and was stopped."""

    def __init__(self, limit_s: float, what: str = "") -> None:
        self.limit_s = limit_s
        super().__init__(
            f"{what or 'the exact module tree did not finish'} within {limit_s:g} s and was "
            "stopped; use source=analytical, or a smaller model or seq_len x batch_size"
        )


def _serve() -> None:
    """The child (``python -m app.service.isolated``): one JSON job a line on stdin, one JSON
    reply a line on the stdout it started with (anything the model code prints goes to stderr),
    until stdin closes or it is killed."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    from app.service.exact import exact_modules, load_harness

    with contextlib.suppress(SpecError):  # without torch every job is refused by name
        load_harness()
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in sys.stdin:
        job = json.loads(line)
        try:
            reply: dict[str, Any] = {
                "ok": exact_modules(job["config"], job["seq_len"], job["batch"])
            }
        except SpecError as exc:
            reply = {"refused": [exc.field, exc.rule]}
        except Exception as exc:  # the model code refused the config: report, stay up
            reply = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
        reply["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


class TreeWorker:
    """The exact-tree child process and the queue in front of it."""

    def __init__(self, timeout_s: float, queue: int) -> None:
        self.timeout_s = timeout_s
        self.queue = queue
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._last_used = 0.0

    def _bind(self) -> asyncio.Lock:
        """The queue's lock, on the running loop (an app served by a new loop, as in tests,
        gets a new one)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._lock is None:
            self._loop, self._lock = loop, asyncio.Lock()
        return self._lock

    async def run(
        self,
        config: dict[str, Any],
        seq_len: int,
        batch: int,
        disconnected: Callable[[], Awaitable[bool]],
    ) -> list[dict[str, Any]]:
        """The exact tree of ``config``; raises Busy, IsolatedTimeout, ClientGone, or
        SpecError (the child's refusal, or a model the real code could not build)."""
        lock = self._bind()
        if lock.locked() and self._waiting >= self.queue:
            raise Busy(self._waiting, max(1, int(self.timeout_s)))
        deadline = time.monotonic() + self.timeout_s
        self._waiting += 1
        try:
            await asyncio.wait_for(lock.acquire(), self.timeout_s)
        except TimeoutError:
            raise IsolatedTimeout(self.timeout_s) from None
        finally:
            self._waiting -= 1
        try:
            job = {"config": config, "seq_len": seq_len, "batch": batch}
            return await self._job(job, deadline, disconnected)
        finally:
            lock.release()

    async def _job(
        self,
        job: dict[str, Any],
        deadline: float,
        disconnected: Callable[[], Awaitable[bool]],
    ) -> list[dict[str, Any]]:
        started = time.monotonic()
        await self._ready(disconnected)
        deadline += time.monotonic() - started  # the child's start-up is not the job's time
        line = json.dumps(job).encode() + b"\n"
        try:
            stdout = self._send(line)
        except OSError:  # the child died since its last job: once more, with a new one
            self.stop()
            await self._ready(disconnected)
            stdout = self._send(line)
        reply = await self._reply(stdout, deadline, disconnected, IsolatedTimeout(self.timeout_s))
        self._last_used = time.monotonic()
        if reply["peak_rss_bytes"] > RECYCLE_RSS_BYTES:
            self.stop()
        else:
            asyncio.get_running_loop().call_later(IDLE_S, self._idle_check)
        if "ok" in reply:
            result: list[dict[str, Any]] = reply["ok"]
            return result
        if "refused" in reply:
            raise SpecError(*reply["refused"])
        raise SpecError(
            "model", f"transformers could not build or run this config: {reply['failed']}"
        )

    async def _ready(self, disconnected: Callable[[], Awaitable[bool]]) -> None:
        """A child that has imported its model code (a few seconds the first time)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.stop()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "app.service.isolated"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdout is not None  # opened with a pipe
        limit = time.monotonic() + STARTUP_S
        slow = IsolatedTimeout(STARTUP_S, "the exact tree's worker process did not start")
        await self._reply(self._proc.stdout, limit, disconnected, slow)

    async def _reply(
        self,
        stdout: IO[bytes],
        deadline: float,
        disconnected: Callable[[], Awaitable[bool]],
        late: Exception,
    ) -> dict[str, Any]:
        """The child's next line, read by a thread blocked on the pipe (it holds no lock, and
        killing the child ends its read); the child is killed at ``deadline`` (``late`` is
        raised) or when the client goes."""
        reading = asyncio.get_running_loop().run_in_executor(None, stdout.readline)
        try:
            while not reading.done():
                if time.monotonic() > deadline:
                    raise late
                if await disconnected():
                    raise ClientGone()
                await asyncio.wait({reading}, timeout=POLL_S)
        except BaseException:
            reading.cancel()
            self.stop()
            raise
        line = reading.result()
        if not line:  # the child died (out of memory, killed from outside)
            self.stop()
            raise SpecError("source", "the exact tree's worker process died; try again")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _send(self, line: bytes) -> IO[bytes]:
        """Write a job to the (ready) child; its stdout, to read the reply."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line)
        proc.stdin.flush()
        return proc.stdout

    def _idle_check(self) -> None:
        if self._lock is None or self._lock.locked() or self._proc is None:
            return
        if time.monotonic() - self._last_used >= IDLE_S:
            self.stop()

    def stop(self) -> None:
        """Kill the child, if any (it holds nothing that needs a clean exit)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


if __name__ == "__main__":
    _serve()
