"""Shared fixtures: the catalog models and a lazily imported ground-truth harness."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

DATA = Path(__file__).parent / "data"

# Saved plans go to a fresh SQLite file per test session, never into the checkout.
os.environ.setdefault("PLANNER_DATA_DIR", tempfile.mkdtemp(prefix="llm-planner-test-"))


def load_data(name: str) -> Any:
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="session")
def gt() -> Any:
    """The transformers ground-truth harness; skipped where torch/transformers are absent
    (``make test`` installs them, so CI always runs these)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from validation import groundtruth

    return groundtruth


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """The service on a free loopback port (uvicorn, one worker), for real HTTP and browsers."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise RuntimeError("server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
