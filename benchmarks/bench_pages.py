"""How long does a first visit to the dashboard take? Chromium against two servers in one run:
this tree, and a baseline revision (default ``BASELINE``, the last commit before issue 23's
static-file work: ``plotly.min.js`` on every page, uncompressed, without Cache-Control).

For each page and each server, ``--rounds`` times, the servers interleaved round by round:

- **cold**: a fresh browser context (empty cache) navigates to the page; the load event's time
  from the navigation's start (Navigation Timing's ``loadEventEnd``), the server's answer
  (``responseStart``) and the bytes on the wire (``transferSize`` of the page and every resource
  it loaded);
- **warm**: the same context navigates to the page again (the browser's cache as a returning
  visitor has it).

The script prints the medians side by side with their ratio, and which pages loaded Plotly. No
assertions; the target (issue 23: a first visit under 1.5 s on loopback) is reported, never
enforced. Both servers are one uvicorn worker on loopback, warmed before the browser comes
(every page requested once), so what is measured is the browser's first visit, not the server's.
Chromium is Debian's (``/usr/bin/chromium``, headless), as in the browser tests.

``--link MBIT`` has Chromium emulate a slower link (that many Mbit/s each way, ``LINK_RTT_MS``
round trip), where the bytes saved show as time.

Run: ``.venv/bin/python -m benchmarks.bench_pages [--rounds 5] [--baseline REV] [--link
MBIT]``. The baseline is the revision's tree from ``git archive``, run with this tree's
virtualenv.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.service import BASELINE, ROOT, baseline_tree, start_server

CHROMIUM = Path("/usr/bin/chromium")
ROUNDS = 5
TARGET_S = 1.5
LINK_RTT_MS = 20  # with --link: a round trip across a city
PAGES = {
    "home": "/",
    "training planner, empty": "/training",
    "training plan, 6 charts": "/training?model=llama-3-70b&num_gpus=64&tp=8&pp=2",
    "serving plan, 5 charts": "/serving?model=llama-3-8b&tp=2&concurrency=16",
    "catalog": "/catalog",
}
# Navigation and resource timing of the page just loaded (same-origin: every size is exposed).
TIMING = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const res = performance.getEntriesByType("resource");
  return {
    load_s: nav.loadEventEnd / 1000,
    response_s: nav.responseStart / 1000,
    bytes: nav.transferSize + res.reduce((sum, e) => sum + e.transferSize, 0),
    plotly: res.some(e => e.name.includes("plotly")),
  };
}"""


@dataclass
class Visits:
    """One page on one server: the cold and warm visits' timings."""

    cold: list[dict[str, Any]] = field(default_factory=list)
    warm: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def median(visits: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(v[key] for v in visits))


@contextmanager
def serving(tree: Path, data: Path) -> Iterator[str]:
    """The service from ``tree`` on a loopback port, one worker, every page requested once."""
    env = {**os.environ, "PLANNER_DATA_DIR": str(data), "PLANNER_WRITES_PER_MINUTE": "0"}
    proc, url = start_server(1, tree, env)
    try:
        for path in PAGES.values():
            httpx.get(url + path, timeout=120).raise_for_status()
        time.sleep(1.0)  # the static files' compression, in its start-up thread
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def visit(browser: Any, url: str, link_mbit: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """A cold visit to ``url`` in a fresh context, then a warm one in the same context; over a
    link of ``link_mbit`` Mbit/s and ``LINK_RTT_MS`` round trip where that is not 0."""
    context = browser.new_context()
    try:
        page = context.new_page()
        if link_mbit:
            cdp = context.new_cdp_session(page)
            cdp.send("Network.enable")
            rate = link_mbit * 1e6 / 8  # bytes per second
            cdp.send(
                "Network.emulateNetworkConditions",
                {
                    "offline": False,
                    "latency": LINK_RTT_MS,
                    "downloadThroughput": rate,
                    "uploadThroughput": rate,
                },
            )
        out = []
        for _ in range(2):
            page.goto(url, wait_until="load")
            page.wait_for_function("performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
            out.append(page.evaluate(TIMING))
        return out[0], out[1]
    finally:
        context.close()


def measure(
    browser: Any, servers: dict[str, str], rounds: int, link_mbit: float
) -> dict[tuple[str, str], Visits]:
    results = {(s, p): Visits() for s in servers for p in PAGES}
    for _ in range(rounds):
        for page, path in PAGES.items():
            for server, url in servers.items():
                cold, warm = visit(browser, url + path, link_mbit)
                results[(server, page)].cold.append(cold)
                results[(server, page)].warm.append(warm)
    return results


def report(
    results: dict[tuple[str, str], Visits], before: str, after: str, loopback: bool
) -> list[str]:
    lines = [
        f"{'page':<26} {'visit':<5} {'before':>8} {'after':>8} {'ratio':>6} "
        f"{'bytes before':>13} {'bytes after':>12} {'server':>7}  plotly (before/after)",
    ]
    for page in PAGES:
        b, a = results[(before, page)], results[(after, page)]
        for kind in ("cold", "warm"):
            bv, av = getattr(b, kind), getattr(a, kind)
            b_load, a_load = Visits.median(bv, "load_s"), Visits.median(av, "load_s")
            server_ms = Visits.median(av, "response_s") * 1e3
            plotly = "/".join("yes" if v[0]["plotly"] else "no" for v in (bv, av))
            lines.append(
                f"{page:<26} {kind:<5} {b_load * 1e3:>6.0f}ms {a_load * 1e3:>6.0f}ms "
                f"{b_load / a_load:>5.1f}x {Visits.median(bv, 'bytes'):>13,.0f} "
                f"{Visits.median(av, 'bytes'):>12,.0f} {server_ms:>5.0f}ms  {plotly}"
            )
    worst = max(Visits.median(results[(after, p)].cold, "load_s") for p in PAGES)
    lines += [
        "",
        "server: the answer's first byte (responseStart) on this tree's server, median.",
        f"slowest first visit on this tree: {worst:.2f} s (target on loopback {TARGET_S} s"
        + (f": {'met' if worst < TARGET_S else 'missed'})" if loopback else ")"),
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--baseline", default=BASELINE, help="the git revision to compare with")
    parser.add_argument(
        "--link", type=float, default=0.0, help="emulate a link of this many Mbit/s (0: loopback)"
    )
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is missing: install Debian's chromium (make test does); not measured")
        return 0
    from playwright.sync_api import sync_playwright

    before, after = f"baseline {args.baseline}", "this tree"
    link = f"a {args.link:g} Mbit/s link, {LINK_RTT_MS} ms RTT" if args.link else "loopback"
    print(f"first visits in Chromium over {link}, {args.rounds} rounds; {before} against {after}")
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores")
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pages-")))
        old = baseline_tree(args.baseline, tmp)
        (tmp / "data-before").mkdir()
        (tmp / "data-after").mkdir()
        servers = {
            before: stack.enter_context(serving(old, tmp / "data-before")),
            after: stack.enter_context(serving(ROOT, tmp / "data-after")),
        }
        playwright = stack.enter_context(sync_playwright())
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        stack.callback(browser.close)
        results = measure(browser, servers, args.rounds, args.link)
    print("\n".join(report(results, before, after, loopback=not args.link)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
