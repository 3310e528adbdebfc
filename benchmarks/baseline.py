"""This tree against a baseline revision in the same run: ``bench_estimate --baseline REF`` and
``bench_sweep --baseline REF`` (or ``BENCH_BASELINE=REF``) time the same requests on both.

The revision is checked out with ``git worktree add --detach`` into a temporary directory and
removed after (``worktree``). Two timing processes (``timing_worker.py``), one with
``PYTHONPATH`` on this tree and one on the baseline's, both on this tree's virtualenv, answer
the same requests in alternation, round after round, so a slow or fast spell of the machine
falls on both alike; each request's ratio is the median over rounds of ours / baseline (below 1:
faster than the baseline). No timed assertion anywhere: the ratios are printed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.service import ROOT

__all__ = ["ENV", "Comparison", "Worker", "baseline_arg", "compare", "report", "worktree"]

# The environment variable a run takes its baseline from when no ``--baseline`` is given.
ENV = "BENCH_BASELINE"
WORKER = Path(__file__).resolve().parent / "timing_worker.py"


def baseline_arg(argv: Sequence[str]) -> str | None:
    """The revision after ``--baseline`` (or ``--baseline=REF``) in ``argv``, else
    ``BENCH_BASELINE``'s, else None (no comparison)."""
    for i, arg in enumerate(argv):
        if arg == "--baseline" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--baseline="):
            return arg.split("=", 1)[1]
    return os.environ.get(ENV) or None


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """Revision ``ref`` of this repository checked out in a temporary directory, removed (and
    pruned from the repository's worktree list) on leaving."""
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(tree), ref],
            cwd=ROOT,
            check=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
            )


class Worker:
    """A timing process (``timing_worker.py``) importing ``estimator`` from ``tree``."""

    def __init__(self, tree: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.tree = tree
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, request: dict[str, Any]) -> float:
        """The median nanoseconds the worker measured for ``request``."""
        if self.proc.stdin is None or self.proc.stdout is None:
            raise RuntimeError("the timing process has no pipes")
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the timing process on {self.tree} exited")
        return float(json.loads(line)["median_ns"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@dataclass(frozen=True)
class Comparison:
    """One request timed on both trees: the medians over rounds and the ratio."""

    label: str
    ours_ns: float
    baseline_ns: float
    ratio: float  # the median over rounds of ours / baseline


def compare(
    ref: str, requests: Sequence[tuple[str, dict[str, Any]]], rounds: int
) -> list[Comparison]:
    """Each labelled request timed ``rounds`` times on this tree and on ``ref``'s, alternating
    (ours first in even rounds, the baseline's in odd ones)."""
    with worktree(ref) as tree:
        ours, theirs = Worker(ROOT), Worker(tree)
        try:
            samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in requests}
            for r in range(rounds):
                for label, request in requests:
                    if r % 2 == 0:
                        mine, base = ours.ask(request), theirs.ask(request)
                    else:
                        base, mine = theirs.ask(request), ours.ask(request)
                    samples[label].append((mine, base))
        finally:
            ours.close()
            theirs.close()
    return [
        Comparison(
            label,
            statistics.median(m for m, _ in pairs),
            statistics.median(b for _, b in pairs),
            statistics.median(m / b for m, b in pairs),
        )
        for label, pairs in samples.items()
    ]


def report(ref: str, comparisons: Sequence[Comparison], unit: str = "us") -> list[str]:
    """The comparison as table lines (times in ``unit``: ``us`` or ``ms``)."""
    scale = {"us": 1e3, "ms": 1e6}[unit]
    lines = [
        f"  against {ref} in the same run ({WORKER.name} on each tree, requests alternated;"
        " ratio: median over rounds of ours / baseline)",
        f"  {'request':<34} {'ours':>10} {'baseline':>10} {'ratio':>7}",
    ]
    for c in comparisons:
        lines.append(
            f"  {c.label:<34} {c.ours_ns / scale:8.1f}{unit} {c.baseline_ns / scale:8.1f}{unit}"
            f" {c.ratio:7.3f}"
        )
    return lines
