"""Load on the real service: uvicorn on a loopback port, driven by concurrent HTTP clients.

For each scenario, ``clients`` asyncio clients send requests back to back for ``duration``
seconds (bounded in count and time, loopback only) and the script prints requests/s, p50/p90/p99
latency and errors. A plain-text report; no assertions (targets are reported, never enforced).

Scenarios (issue 5 targets: single estimate p99 <= 50 ms with 0 errors; a default 70B training
sweep p99 <= 1.5 s):

- ``health``: ``GET /healthz``, the floor the server and this client set; every scenario's
  requests/s is also printed as a ratio to it (``x floor``), the baseline of the same run.
- ``training estimate``: Llama-3-70B on 64 H100s, each request a different layout/batch drawn
  from a fixed list (no response cache exists for estimates; the variety keeps it honest).
- ``inference estimate``: Llama-3-70B serving, varied concurrency and lengths.
- Each estimate also with one client: the service time without queueing. With ``clients``
  clients in a closed loop, latency is ``clients / throughput`` once the server is saturated.
- ``training sweep, uncached``: the default 70B sweep (10 accelerators, 76,800 layouts), each
  request with a different token count so no request hits the sweep cache.
- ``training sweep, pages``: the same sweep request paged (the cache serves the evaluation).

Before the load, the slowest single estimate of a public catalog model is timed in-process (every
catalog model at every pipeline depth its layers allow, training and serving): these run on the
event loop (``app.service.lanes.LoopLane``), so this is the longest the loop is held by one.

Run: ``make bench`` or ``.venv/bin/python -m benchmarks.bench_api [--duration 30]
[--clients 32]``. The server runs one uvicorn worker (one process): on a machine with more cores,
``--workers`` multiplies what CPU-bound sweeps can do at once.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks.service import start_server

ESTIMATE_P99_TARGET_S = 0.050
SWEEP_P99_TARGET_S = 1.5


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)

    def quantile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Request = tuple[str, str, dict[str, Any] | None]  # method, path, body


def _training_bodies() -> Iterator[Request]:
    layouts = [
        {"tp": 8, "pp": 2},
        {"tp": 8, "pp": 4},
        {"tp": 4, "pp": 4},
        {"tp": 8, "pp": 1, "zero_stage": 3},
        {"tp": 2, "pp": 8, "vp": 5},
    ]
    for i in itertools.count():
        yield (
            "POST",
            "/api/v1/training/estimate",
            {
                "model": "llama-3-70b",
                "num_gpus": 64,
                "layout": layouts[i % len(layouts)],
                "global_batch_size": 256 * (1 + i % 4),
                "recompute": ("none", "selective", "full")[i % 3],
                "tokens": 1e12,
            },
        )


def _inference_bodies() -> Iterator[Request]:
    for i in itertools.count():
        yield (
            "POST",
            "/api/v1/inference/estimate",
            {
                "model": "llama-3-70b",
                "num_gpus": 4,
                "layout": {"tp": 4},
                "input_len": 512 * (1 + i % 4),
                "output_len": 256,
                "concurrency": 2 ** (i % 8),
            },
        )


def _sweep_bodies(unique: bool) -> Iterator[Request]:
    for i in itertools.count():
        body: dict[str, Any] = {"model": "llama-3-70b", "global_batch_size": 1024}
        body["tokens"] = 1e12 + (i if unique else 0)
        if not unique:
            body["page"] = 1 + i % 20
        yield "POST", "/api/v1/training/sweep", body


def _health() -> Iterator[Request]:
    while True:
        yield "GET", "/healthz", None


def _encode(host: str, request: Request) -> bytes:
    method, path, body = request
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(data)}\r\n"
    if body is not None:
        head += "Content-Type: application/json\r\n"
    return (head + "\r\n").encode() + data


async def _drive(
    url: str, bodies: Iterator[Request], clients: int, duration: float, cap: int
) -> tuple[Result, float]:
    """``clients`` keep-alive connections, each sending its next request as soon as the last
    answer is read. The client is a few lines of asyncio streams (pre-encoded requests,
    Content-Length framing), so the load generator costs little next to the server."""
    host, port = url.removeprefix("http://").split(":")
    result = Result()
    stop = time.perf_counter() + duration
    sent = 0

    async def client() -> None:
        nonlocal sent
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < stop and sent < cap:
                sent += 1
                payload = _encode(f"{host}:{port}", next(bodies))
                start = time.perf_counter()
                try:
                    writer.write(payload)
                    head = await reader.readuntil(b"\r\n\r\n")
                    status = int(head[9:12])
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    await reader.readexactly(length)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    result.errors += 1
                    return
                result.latencies.append(time.perf_counter() - start)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if status != 200:
                    result.errors += 1
        finally:
            writer.close()

    begin = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return result, time.perf_counter() - begin


def slowest_catalog_estimate(repeat: int = 5) -> tuple[float, str]:
    """The longest a single estimate of a public catalog model takes (best of ``repeat`` runs
    each, so the machine's own pauses do not count), over every model and every pipeline depth
    that divides its layers (tp 1 and 8); with the case that took it."""
    import estimator
    from app.api import inference, training
    from app.schemas.inference import InferenceRequest
    from app.schemas.training import TrainingRequest

    def best(fn: Callable[[Any], Any], req: Any) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn(req)
            times.append(time.perf_counter() - start)
        return min(times)

    worst = (0.0, "")
    for model_id in estimator.model_ids():
        layers = estimator.get_model(model_id).num_layers
        depths = (d for d in range(1, layers + 1) if layers % d == 0)
        for pp, tp in itertools.product(depths, (1, 8)):
            layout = {"tp": tp, "pp": pp}
            cases = [
                (
                    "serving",
                    inference._estimate,
                    InferenceRequest,
                    {"model": model_id, "num_gpus": tp * pp, "layout": layout},
                ),
                (
                    "training",
                    training._estimate,
                    TrainingRequest,
                    {"model": model_id, "num_gpus": 2 * tp * pp, "layout": layout},
                ),
            ]
            for kind, fn, model, body in cases:
                try:
                    req = model.model_validate(body)
                    fn(req)
                except ValueError:  # a layout the model refuses (heads, lengths)
                    continue
                seconds = best(fn, req)
                if seconds > worst[0]:
                    worst = (seconds, f"{kind} {model_id} tp={tp} pp={pp}")
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per scenario")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--sweep-clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--max-requests", type=int, default=200_000, help="per scenario")
    parser.add_argument(
        "--only", default="", help="run the scenarios whose name contains this text (and health)"
    )
    args = parser.parse_args(argv)

    scenarios: list[tuple[str, Callable[[], Iterator[Request]], int, float | None]] = [
        ("health (server floor)", _health, args.clients, None),
        ("training estimate, 1 client", _training_bodies, 1, ESTIMATE_P99_TARGET_S),
        ("training estimate", _training_bodies, args.clients, ESTIMATE_P99_TARGET_S),
        ("inference estimate, 1 client", _inference_bodies, 1, ESTIMATE_P99_TARGET_S),
        ("inference estimate", _inference_bodies, args.clients, ESTIMATE_P99_TARGET_S),
        ("training sweep, uncached, 1 client", lambda: _sweep_bodies(True), 1, SWEEP_P99_TARGET_S),
        (
            f"training sweep, uncached, {args.sweep_clients} clients",
            lambda: _sweep_bodies(True),
            args.sweep_clients,
            SWEEP_P99_TARGET_S,
        ),
        ("training sweep, cached pages", lambda: _sweep_bodies(False), args.clients, None),
    ]
    scenarios = [s for s in scenarios if s[0].startswith("health") or args.only in s[0]]
    seconds, case = slowest_catalog_estimate()
    print(
        f"slowest catalog single estimate (in-process, best of 5): {seconds * 1e3:.2f} ms ({case})"
    )
    proc, url = start_server(args.workers)
    print(
        f"LLM Planner API load: uvicorn x{args.workers} worker(s) on {url}, {args.duration:.0f} s "
        f"per scenario; {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    header = f"{'scenario':40} {'clients':>7} {'req':>7} {'req/s':>8} {'x floor':>7} {'p50 ms':>8} "
    header += f"{'p90 ms':>8} {'p99 ms':>8} {'errors':>6}  target"
    print(header)
    print("-" * len(header))
    floor = None
    try:
        for name, bodies, clients, target in scenarios:
            asyncio.run(_drive(url, bodies(), min(clients, 4), 1.0, 50))  # warm-up
            result, wall = asyncio.run(
                _drive(url, bodies(), clients, args.duration, args.max_requests)
            )
            n = len(result.latencies)
            p99 = result.quantile(0.99)
            floor = floor or n / wall
            verdict = ""
            if target is not None:
                ok = p99 <= target and result.errors == 0
                verdict = f"p99 <= {target * 1e3:.0f} ms: {'OK' if ok else 'OVER'}"
            print(
                f"{name:40} {clients:7d} {n:7d} {n / wall:8.1f} {n / wall / floor:7.3f} "
                f"{statistics.median(result.latencies) * 1e3 if n else float('nan'):8.1f} "
                f"{result.quantile(0.90) * 1e3:8.1f} {p99 * 1e3:8.1f} {result.errors:6d}  {verdict}"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
