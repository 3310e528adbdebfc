"""The service as the benchmarks run it: uvicorn on a loopback port, from this tree or from a
baseline revision's (``git archive``, run with this tree's virtualenv), for the benchmarks that
compare the two in the same run; and what a command imports, by self time."""

from __future__ import annotations

import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

__all__ = ["BASELINE", "ROOT", "baseline_tree", "self_import_ms", "start_server"]

ROOT = Path(__file__).resolve().parents[1]
# The last commit before issue 23's speed work on the pages and the command line: plotly.min.js
# on every page, uncompressed and without Cache-Control; every CLI call importing FastAPI and
# SQLAlchemy.
BASELINE = "8369e55"


def baseline_tree(rev: str, into: Path) -> Path:
    """The tree of revision ``rev`` of this repository, unpacked under ``into``."""
    archive = into / "baseline.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev], cwd=ROOT, check=True)
    tree = into / "baseline"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    workers: int = 1, tree: Path = ROOT, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """The service from ``tree`` with ``workers`` uvicorn workers, once it answers its health
    check: its process and URL."""
    port = _free_port()
    cmd = [sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--log-level", "warning", "--workers", str(workers)]
    proc = subprocess.Popen(cmd, cwd=tree, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.terminate()
    raise RuntimeError(f"the server from {tree} did not start")


def self_import_ms(
    args: Sequence[str], env: dict[str, str], tree: Path = ROOT
) -> list[tuple[str, float]]:
    """The modules ``python <args>`` imports with their self import time in ms (one ``-X
    importtime`` run), slowest first."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((name.strip(), int(self_us) / 1e3))
    return sorted(rows, key=lambda r: r[1], reverse=True)
