"""Health checks while the worst requests of issue 38's audit are in flight, this tree against a
baseline tree (default: the main before the issue), in one run.

For each tree: the service on a loopback port (one worker); ``GET /healthz`` from 8 clients for
``duration`` seconds alone (the quiet floor), then again while 8 more clients send, back to
back, the requests that held the event loop (Llama 3 70B at pp 1024 and at pp 83; DeepSeek-V3
and Llama 3 70B plans that do not fit, so each searches for fitting layouts). Printed: health
requests/s and p99 in both phases, the loaded/quiet ratio, and the hostile requests' statuses.
Bounded in count and time, loopback only; a report, no assertions.

Run: ``.venv/bin/python -m benchmarks.bench_hostile [--duration 5] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from benchmarks.service import ROOT, baseline_tree, start_server

BASELINE_REV = "9bb1033"  # main before issue 38
HOSTILE: list[dict[str, Any]] = [
    {"model": "llama-3-70b", "num_gpus": 1024, "layout": {"pp": 1024}},
    {"model": "llama-3-70b", "num_gpus": 83, "layout": {"pp": 83}},
    {"model": "deepseek-v3", "num_gpus": 64, "layout": {"pp": 8, "ep": 8}},
    {"model": "llama-3-70b", "num_gpus": 8, "layout": {"pp": 8}},
]


async def _clients(url: str, n: int, until: float, send: Any) -> list[tuple[float, int]]:
    out: list[tuple[float, int]] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def one() -> None:
            while time.monotonic() < until:
                started = time.monotonic()
                status = (await send(client)).status_code
                out.append((time.monotonic() - started, status))

        await asyncio.gather(*(one() for _ in range(n)))
    return out


async def _phase(url: str, duration: float, hostile: bool) -> tuple[list[Any], list[Any]]:
    until = time.monotonic() + duration
    bodies = itertools.cycle(HOSTILE)

    def health(c: httpx.AsyncClient) -> Any:
        return c.get("/healthz")

    def attack(c: httpx.AsyncClient) -> Any:
        return c.post("/api/v1/training/estimate", json=next(bodies))

    tasks = [_clients(url, 8, until, health)]
    if hostile:
        tasks.append(_clients(url, 8, until, attack))
    results = await asyncio.gather(*tasks)
    return results[0], results[1] if hostile else []


def _p99(samples: list[tuple[float, int]]) -> float:
    ordered = sorted(s for s, _ in samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


def measure(tree: Path, duration: float) -> dict[str, Any]:
    env = {**os.environ, "PLANNER_DATA_DIR": tempfile.mkdtemp(prefix="bench-hostile-")}
    proc, url = start_server(tree=tree, env=env)
    try:
        quiet, _ = asyncio.run(_phase(url, duration, hostile=False))
        loaded, hostile = asyncio.run(_phase(url, duration, hostile=True))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "quiet_rps": len(quiet) / duration,
        "quiet_p99_s": _p99(quiet),
        "loaded_rps": len(loaded) / duration,
        "loaded_p99_s": _p99(loaded),
        "hostile": Counter(status for _, status in hostile),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--baseline", default=BASELINE_REV)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {f"baseline {args.baseline}": baseline_tree(args.baseline, Path(tmp)), "HEAD": ROOT}
        for name, tree in trees.items():
            r = measure(tree, args.duration)
            ratio = r["loaded_rps"] / r["quiet_rps"]
            print(
                f"{name:>18}: health quiet {r['quiet_rps']:,.0f} req/s p99 "
                f"{r['quiet_p99_s'] * 1e3:.1f} ms; with the worst requests in flight "
                f"{r['loaded_rps']:,.0f} req/s p99 {r['loaded_p99_s'] * 1e3:.1f} ms "
                f"({ratio:.2f} x quiet); hostile answers {dict(r['hostile'])}"
            )


if __name__ == "__main__":
    main()
