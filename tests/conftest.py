"""Shared fixtures: the catalog models, a lazily imported ground-truth harness, the service on
a loopback port, and plan-store databases (a SQLite file and a real PostgreSQL server)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from estimator.inputs.model import ModelSpec

DATA = Path(__file__).parent / "data"

# Saved plans go to a fresh SQLite file per test session, never into the checkout.
os.environ.setdefault("PLANNER_DATA_DIR", tempfile.mkdtemp(prefix="llm-planner-test-"))
# Tests write hundreds of plans a minute from one address; the write-rate test sets its own.
os.environ.setdefault("PLANNER_WRITES_PER_MINUTE", "0")
# No test reaches the Hugging Face Hub: a model id it fetches goes to a closed loopback port
# (tests/test_hub.py starts its own hub and points HF_ENDPOINT at it).
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")
os.environ.pop("PLANNER_HF_TOKEN", None)
# The in-process test client names its host "testserver"; the host tests set their own list.
os.environ.setdefault("PLANNER_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")


# --- markers: what a test needs beyond Python (make test-fast leaves these out) --------------

# A test that uses one of these fixtures needs what its marker names; modules that reach the
# component without a fixture carry the marker themselves (``pytestmark``).
FIXTURE_MARKERS = {
    "browser": "browser",
    "postgres": "postgres",
    "gt": "groundtruth",
    "server": "server",
}


# Modules that start a server, a process or torch without one of those fixtures.
MODULE_MARKERS = {
    "test_activations_compiled.py": ("groundtruth",),
    "test_optimizer_in_backward.py": ("groundtruth",),
    "test_hardening.py": ("server",),
    "test_hardening_store.py": ("server",),
    "test_image.py": ("server", "slow"),
    "test_api_fuzz.py": ("slow",),  # schemathesis over every operation: minutes
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the components its fixtures start (the ``url`` fixture's postgresql
    case included) or its module reaches (``MODULE_MARKERS``), so ``-m "not (browser or
    postgres or ...)"`` leaves out exactly those."""
    for item in items:
        for marker in MODULE_MARKERS.get(item.path.name, ()):
            item.add_marker(marker)
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in names:
                item.add_marker(marker)
        callspec = getattr(item, "callspec", None)
        if "url" in names and callspec is not None and callspec.params.get("url") == "postgresql":
            item.add_marker("postgres")


def load_data(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def by_name(model: ModelSpec) -> dict[str, int]:
    """The spec's parameters under transformers' names, layer indices collapsed as
    ``gt.param_breakdown`` collapses them: bare tensors for the fused experts (``gate_up_proj``,
    ``gate_up_proj_bias``) and DeepSeek-V4's hyper-connections (``attn_hc.fn``, the ``hc_head``'s
    ``hc_fn``, ``hc_base`` and ``hc_scale``), ``.weight`` and ``.bias`` for the rest."""
    out: dict[str, int] = defaultdict(int)
    out["model.embed_tokens.weight"] = model.token_embedding_params
    if model.output_head_params:
        out["lm_head.weight"] = model.output_head_params
    if model.final_norm is not None:
        out["model.norm.weight"] = model.final_norm.params
    n = model.hyper_streams
    if n:
        out["model.hc_head.hc_fn"] = n * n * model.hidden_size
        out["model.hc_head.hc_base"] = n
        out["model.hc_head.hc_scale"] = 1
    for kind, count in zip(model.kinds, model.kind_counts, strict=True):
        for m in kind.linears:
            bare = m.component in ("experts", "hyper_connections")
            weight, bias = ("", "_bias") if bare else (".weight", ".bias")
            out[f"model.layers.*.{m.name}{weight}"] += count * m.weight_params
            if m.bias:
                out[f"model.layers.*.{m.name}{bias}"] += count * m.bias_params
        for norm in kind.norms:
            out[f"model.layers.*.{norm.name}.weight"] += count * norm.params
        for extra in kind.extras:
            out[f"model.layers.*.{extra.name}"] += count * extra.params
    return dict(out)


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


@contextmanager
def running_server(
    env: dict[str, str] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The service on a free loopback port (``llm-planner serve``, one worker) with ``env`` over
    the test session's environment: its URL and process."""
    port = _free_port()
    proc = subprocess.Popen(
        # As `make serve` and the image start it: the server's own protocol and options.
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise RuntimeError("server did not start")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """The service on a free loopback port (uvicorn, one worker), for real HTTP and browsers."""
    with running_server() as (url, _):
        yield url


# --- plan store databases (saved plans, team catalog) ----------------------------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on a loopback port; its URL."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        if os.environ.get("CI"):
            raise RuntimeError("CI needs Debian's postgresql for these tests (make installs it)")
        pytest.skip("postgresql is not installed (make test installs it)")
    bin_dir = Path(found[-1]).parent
    root = Path(tempfile.mkdtemp(prefix="planner-pg-"))
    data = root / "data"
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        shutil.chown(root, "postgres", "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def pg(*args: str) -> None:
        subprocess.run([*run_as, *args], check=True, capture_output=True, timeout=120)

    pg(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "planner", "--no-sync")
    pg(
        str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log"),
        "-o", f"-p {port} -k {root} -h 127.0.0.1 -c fsync=off", "start",
    )  # fmt: skip
    try:
        pg(
            str(bin_dir / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "planner",
            "planner",
        )
        yield f"postgresql+psycopg://planner@127.0.0.1:{port}/planner"
    finally:
        pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'plans.db'}"
        return
    from app.store.plans import make_engine

    base: str = request.getfixturevalue("postgres")
    # A fresh database per test: create it from the server's default one.
    name = f"t_{os.getpid()}_{abs(hash(tmp_path)) % 10**8}"
    admin = make_engine(base)
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    yield base.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="session")
def slow_sweep() -> dict[str, Any]:
    """A serving-sweep request that keeps a server busy for seconds (960 replica layouts, just
    under the 1,000-layout limit, about 3 s on a 2-core machine): the tests that need a request
    in flight send it. The default serving sweep became too quick for that (under a second)."""
    from estimator import accelerator_ids

    return {
        "model": "llama-3-70b",
        "accelerator": list(accelerator_ids())[:20],
        "precision": ["bf16", "fp8-serving", "int8-wo", "int4-wo"],
        "layout": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4]},
        "input_len": 2048,
        "output_len": 300,
    }


# --- a real browser ------------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright, headless (never Playwright's own download).
    One per test module: Playwright's sync API holds an event loop while it is open, which
    other modules' asyncio tests must not find.
    ``make test`` installs it; outside CI the browser tests skip where it is missing, in CI
    (``CI`` set) they fail instead."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            raise RuntimeError("CI needs /usr/bin/chromium for the browser tests (make test)")
        pytest.skip("chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def team_accelerator(ident: str, name: str = "H100", **over: Any) -> dict[str, Any]:
    """A team accelerator entry (an H100's figures) as the team API takes it."""
    return {
        "id": ident,
        "name": name,
        "memory_gb": 80,
        "hbm_tb_per_s": 3.35,
        "dense_tflops": {"bf16": 989},
        **over,
    }
