"""How long does one ``llm-planner`` call take? The command line against the interpreter's own
start-up and against a baseline revision, measured in the same run.

Each command runs as a fresh subprocess (``python -m app.cli ...`` from a tree's root, as the
``llm-planner`` script runs it), ``RUNS`` times, the commands interleaved round by round so that
the machine's drift falls on all of them alike; the script prints the median and p90 wall time
of each, the median less the interpreter's start-up, and ratios (no timed assertions; the
target is reported, never enforced):

- ``python -c pass``: the interpreter's start-up, the floor every command pays;
- ``python -c "import app.main"``: the web service imported and its app built (FastAPI,
  SQLAlchemy, Jinja, every route);
- ``llm-planner --help``;
- ``llm-planner train``: a training estimate of a catalog model (Llama-3-70B on 64 H100s, TP 8,
  PP 2), the table printed. Target (issue 23): under 0.5 s;
- ``llm-planner infer``: a serving estimate of a catalog model;
- the last three again from the baseline revision (``--baseline``, default ``BASELINE``: the
  last commit before issue 23's lazy imports, when every command imported FastAPI and
  SQLAlchemy), its tree from ``git archive`` run with this tree's virtualenv.

Then the modules the training estimate imported, by self time (``-X importtime``, one run), and
whether any of the web service's packages were among them (none should be).

Run: ``.venv/bin/python -m benchmarks.bench_cli [--runs 21] [--baseline REV]``. Measured with
cached bytecode (a private ``PYTHONPYCACHEPREFIX``, warmed once: what an installed package
sees).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.service import BASELINE, ROOT, baseline_tree, self_import_ms

RUNS = 21
TARGET_S = 0.5
TRAIN = ["train", "--model", "llama-3-70b", "--gpus", "64", "--tp", "8", "--pp", "2"]
INFER = ["infer", "--model", "llama-3-8b", "--concurrency", "16"]
# The service's packages: an estimate on the command line needs none of them.
SERVICE_PACKAGES = ("fastapi", "starlette", "sqlalchemy", "alembic", "jinja2", "uvicorn")

TRAIN_LABEL = "llm-planner train (catalog model)"
FLOOR = "python -c pass"
SERVICE = 'python -c "import app.main"'
CLI: dict[str, list[str]] = {
    "llm-planner --help": ["-m", "app.cli", "--help"],
    TRAIN_LABEL: ["-m", "app.cli", *TRAIN],
    "llm-planner infer (catalog model)": ["-m", "app.cli", *INFER],
}


def commands(baseline: Path | None) -> dict[str, tuple[list[str], Path]]:
    """Each command's interpreter arguments and the tree it runs from."""
    out = {FLOOR: (["-c", "pass"], ROOT), SERVICE: (["-c", "import app.main"], ROOT)}
    out |= {name: (args, ROOT) for name, args in CLI.items()}
    if baseline is not None:
        out |= {f"{name}, baseline": (args, baseline) for name, args in CLI.items()}
    return out


def _env(pycache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": pycache}


def _wall_s(args: Sequence[str], tree: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *args], cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def measure(
    runs: int, env: dict[str, str], todo: dict[str, tuple[list[str], Path]]
) -> dict[str, list[float]]:
    """Wall times of every command, ``runs`` rounds, one call of each command a round."""
    for args, tree in todo.values():  # warm the bytecode cache
        _wall_s(args, tree, env)
    times: dict[str, list[float]] = {name: [] for name in todo}
    for _ in range(runs):
        for name, (args, tree) in todo.items():
            times[name].append(_wall_s(args, tree, env))
    return times


def _p90(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def report(times: dict[str, list[float]], modules: list[tuple[str, float]]) -> list[str]:
    floor = statistics.median(times[FLOOR])
    service = statistics.median(times[SERVICE])
    lines = [
        f"{'command':<46} {'median':>8} {'p90':>8} {'- floor':>8} {'x floor':>8} {'/ service':>9}",
    ]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(
            f"{name:<46} {median * 1e3:>6.0f}ms {_p90(values) * 1e3:>6.0f}ms "
            f"{(median - floor) * 1e3:>6.0f}ms {median / floor:>7.1f}x {median / service:>8.2f}x"
        )
    train = statistics.median(times[TRAIN_LABEL])
    lines += [
        "",
        f"training estimate: {train:.3f} s median (target {TARGET_S} s: "
        f"{'met' if train < TARGET_S else 'missed'})",
    ]
    if f"{TRAIN_LABEL}, baseline" in times:
        before = statistics.median(times[f"{TRAIN_LABEL}, baseline"])
        lines.append(f"the baseline's: {before:.3f} s, {before / train:.1f}x this tree's")
    lines += [
        "",
        "modules the training estimate imports, slowest first (self ms, -X importtime):",
    ]
    lines += [f"  {ms:6.1f}  {name}" for name, ms in modules[:12]]
    total = sum(ms for _, ms in modules)
    service_modules = sorted(
        {name.split(".")[0] for name, _ in modules if name.split(".")[0] in SERVICE_PACKAGES}
    )
    lines += [
        f"  {total:6.1f}  in all, {len(modules)} modules",
        "web-service packages imported: " + (", ".join(service_modules) or "none"),
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--baseline", default=BASELINE, help="git revision to compare ('': none)")
    args = parser.parse_args(argv)
    print(f"llm-planner CLI, {args.runs} runs a command, interleaved; baseline {args.baseline}")
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        env = _env(str(Path(tmp) / "pycache"))
        old = baseline_tree(args.baseline, Path(tmp)) if args.baseline else None
        times = measure(args.runs, env, commands(old))
        modules = self_import_ms(CLI[TRAIN_LABEL], env)
    print("\n".join(report(times, modules)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
