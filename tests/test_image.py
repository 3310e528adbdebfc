"""The service image, tested without a container engine: the Dockerfile's steps
(``scripts/image.sh``) run on exactly the files its build stage copies: the wheel is built in one
clean virtualenv and installed in another (the runtime stage), and the service is started from a
directory with no source tree. It serves every page, chart script and the API docs offline (the
scripts and styles gzipped, under versioned URLs), saves and reads a plan over HTTP, finishes a
request in flight when SIGTERM arrives and exits 0, and finds its data again after a
restart."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD_WORKDIR = "/src"
RUNTIME_WORKDIR = "/data"


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (keyword, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions, stage by stage (a FROM starts one)."""
    out: list[list[tuple[str, str]]] = []
    for key, args in instructions():
        if key == "FROM":
            out.append([])
        out[-1].append((key, args))
    return out


def copied() -> list[tuple[list[str], str]]:
    """The build stage's COPY instructions: (sources, destination under its work dir)."""
    out = []
    for key, args in stages()[0]:
        if key == "COPY":
            *sources, dest = args.split()
            out.append((sources, dest))
    return out


def test_the_dockerfile_runs_the_script_steps() -> None:
    build, runtime = stages()
    # one Python patch release, not a moving tag, in both stages
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm AS build", build[0][1])
    assert ("WORKDIR", BUILD_WORKDIR) in build and ("RUN", "scripts/image.sh wheel") in build
    sources = {s for sources, _ in copied() for s in sources}
    assert {"scripts", "app", "estimator", "static", "templates", "setup.py"} <= sources
    assert all((ROOT / s).exists() for s in sources)
    # the runtime stage: the wheel only, installed by the script, run as a non-root user
    assert runtime[0][1] == build[0][1].removesuffix(" AS build")
    args = dict(runtime[::-1])  # the first of each keyword
    copies = [a for k, a in runtime if k == "COPY"]
    assert all(a.startswith("--from=build ") for a in copies)
    assert not any(" ./app" in a or " ./estimator" in a for a in copies)  # no source tree
    runs = [a for k, a in runtime if k == "RUN"]
    assert "useradd" in runs[0] and "planner" in runs[0]
    assert any(
        r.startswith("PIP_CONSTRAINT=/tmp/dist/requirements.lock planner-image install /tmp/dist/")
        for r in runs
    )
    assert args["WORKDIR"] == RUNTIME_WORKDIR and args["USER"] == "planner"
    keys = [k for k, _ in runtime]
    assert keys[-1] == "CMD" and json.loads(args["CMD"]) == ["planner-image", "start"]
    assert keys.index("USER") > max(i for i, k in enumerate(keys) if k == "RUN")
    assert "/readyz" in args["HEALTHCHECK"]
    env = " ".join(a for k, a in runtime if k == "ENV")
    assert "PLANNER_DATA_DIR=/data" in env and "PLANNER_HOST=0.0.0.0" in env
    assert json.loads(args["VOLUME"]) == ["/data"]
    assert args["STOPSIGNAL"] == "SIGTERM"


def test_the_lock_pins_every_runtime_dependency() -> None:
    """requirements.lock names one exact version of each of the service's dependencies (those
    of pyproject.toml, on this platform), so the image's install is the same each build."""
    pinned = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pinned[re.sub(r"[-_.]+", "-", name).lower()] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {
        re.sub(r"[-_.]+", "-", re.split(r"[\[<>=;! ]", d, maxsplit=1)[0]).lower()
        for d in project["dependencies"]
    }
    assert wanted <= set(pinned), wanted - set(pinned)
    assert all(re.fullmatch(r"\d+(\.\d+)*", v) for v in pinned.values())


def test_compose_runs_the_planner_on_postgresql() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    planner, db = compose["services"]["planner"], compose["services"]["db"]
    assert planner["build"] == "."
    # The secrets are required (${VAR:?message}): no default token or database password.
    env = planner["environment"]
    assert re.fullmatch(
        r"postgresql\+psycopg://planner:\$\{POSTGRES_PASSWORD:\?[^}]+\}@db:5432/planner",
        env["DATABASE_URL"],
    )
    assert re.fullmatch(r"\$\{PLANNER_API_TOKEN:\?[^}]+\}", env["PLANNER_API_TOKEN"])
    assert re.fullmatch(r"\$\{POSTGRES_PASSWORD:\?[^}]+\}", db["environment"]["POSTGRES_PASSWORD"])
    assert ":-" not in env["DATABASE_URL"] + env["PLANNER_API_TOKEN"]
    assert planner["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert planner["volumes"] == ["planner-data:/data"]
    assert db["image"] == "postgres:16"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert set(compose["volumes"]) == {"planner-data", "db-data"}
    # the grace period outlasts the service's own graceful-shutdown timeout
    grace = int(planner["environment"]["PLANNER_GRACEFUL_SHUTDOWN_S"])
    assert int(planner["stop_grace_period"].removesuffix("s")) > grace


def test_every_setting_is_documented() -> None:
    names = set(
        re.findall(r"\b(?:PLANNER_[A-Z_]+|DATABASE_URL)\b", (ROOT / "app/settings.py").read_text())
    )
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert set(compose["services"]["planner"]["environment"]) <= names
    readme = (ROOT / "docs/deployment.md").read_text()
    assert {n for n in names if f"`{n}`" not in readme} == set()


# --- build and run ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _venv(path: Path) -> dict[str, str]:
    """A clean virtualenv (no system site-packages, not this test's venv) and an environment
    that runs it first and knows no planner setting."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PLANNER_") and k not in ("DATABASE_URL", "VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The build stage's context laid out as its COPY lines say, its wheel built by the image's
    ``wheel`` step in one clean virtualenv, then installed by the ``install`` step into another
    (the runtime stage), which has only the script and the wheel."""
    tmp = tmp_path_factory.mktemp("image")
    src = tmp / "src"
    src.mkdir()
    for sources, dest in copied():
        for source in sources:
            target = src / (Path(source).name if dest.endswith("/") else dest)
            if (ROOT / source).is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
                shutil.copytree(ROOT / source, target, ignore=ignore)
            else:
                shutil.copy2(ROOT / source, target)
    _run([str(src / "scripts/image.sh"), "wheel"], _venv(tmp / "build-venv"), tmp)
    (wheel,) = (src / "dist").glob("llm_planner-*.whl")
    runtime = tmp / "runtime"
    runtime.mkdir()
    script = runtime / "planner-image"
    shutil.copy2(src / "scripts/image.sh", script)
    shutil.copy2(wheel, runtime / wheel.name)
    shutil.rmtree(src)  # nothing of the source tree is left to run from
    env = _venv(tmp / "venv")
    _run([str(script), "install", str(runtime / wheel.name)], env, runtime)
    yield script, env


def _start(
    script: Path, env: dict[str, str], data: Path, log: Path, workers: int = 1
) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    settings = {
        "PLANNER_PORT": str(port),
        "PLANNER_DATA_DIR": str(data),
        "PLANNER_GRACEFUL_SHUTDOWN_S": "30",
        "PLANNER_WORKERS": str(workers),
    }
    with log.open("ab") as stderr:
        proc = subprocess.Popen(
            [str(script), "start"],
            env={**env, **settings},
            cwd=data,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if _healthy(url):
            return proc, url
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the service did not start:\n{log.read_text()[-3000:]}")


def _serves_every_page_offline(url: str) -> None:
    """Every page (with a worked plan where it takes one) and every script and style it links
    to are served by the installed wheel: nothing comes from the source tree or a CDN."""
    pages = [
        "/",
        "/training?model=llama-3-8b&num_gpus=8",
        "/serving?model=llama-3-8b",
        "/sweep?model=llama-3-8b&num_gpus=8",
        "/sweep?mode=serving&model=llama-3-8b",
        "/compare",
        "/catalog",
        "/plans",
        "/docs",
    ]
    assets: set[str] = set()
    for page in pages:
        r = httpx.get(url + page, timeout=60)
        assert r.status_code == 200, (page, r.text[:300])
        assert "http://" not in re.sub(r"http://127\.0\.0\.1:\d+", "", r.text.split("<body")[0])
        assets |= set(re.findall(r'(?:src|href)="(/static/[^"]+)"', r.text))
    files = {asset.split("?")[0] for asset in assets}
    assert {"/static/charts.js", "/static/vendor/plotly/plotly.min.js", "/static/forms.js"} <= files
    for asset in assets:  # versioned URLs: cached for good; scripts and styles gzipped
        r = httpx.get(url + asset, timeout=60)
        assert r.status_code == 200 and len(r.content) > 100, asset
        assert "?v=" in asset and "immutable" in r.headers["cache-control"], asset
        if asset.split("?")[0].endswith((".js", ".css")):
            assert r.headers["content-encoding"] == "gzip", asset


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60), time.monotonic() - start


def _half_sent(url: str, path: str, body: bytes) -> tuple[socket.socket, bytes]:
    """A POST whose headers and first half of the body are sent: a request in flight for as
    long as the caller holds the rest."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[: len(body) // 2])
    return sock, body[len(body) // 2 :]


def _status_of(sock: socket.socket) -> int:
    reply = b""
    while b"\r\n" not in reply:
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    return int(reply.split(b" ", 2)[1])


def test_built_started_saved_stopped_gracefully_restarted(
    image: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    script, env = image
    data, log = tmp_path / "data", tmp_path / "server.log"
    data.mkdir()
    plan = {"name": "70B pretraining", "kind": "training", "request": {"model": "llama-3-70b"}}
    proc, url = _start(script, env, data, log)
    try:
        _serves_every_page_offline(url)
        saved = httpx.post(f"{url}/api/v1/plans", json=plan, headers={"X-Request-ID": "img-1"})
        assert saved.status_code == 201 and saved.headers["x-request-id"] == "img-1"
        plan_id = saved.json()["id"]
        assert httpx.get(f"{url}/api/v1/plans/{plan_id}").json()["name"] == plan["name"]
        # SIGTERM while a save is in flight (half its body sent): it still completes
        late = {**plan, "name": "saved during shutdown"}
        sock, rest = _half_sent(url, "/api/v1/plans", json.dumps(late).encode())
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None, "the server exited with a request in flight"
        sock.sendall(rest)
        assert _status_of(sock) == 201
        sock.close()
        code = proc.wait(timeout=60)
        assert code == 0
    finally:
        proc.kill()
    assert (data / "planner.db").exists()

    proc, url = _start(script, env, data, log)
    try:
        again = httpx.get(f"{url}/api/v1/plans/{plan_id}")
        assert again.status_code == 200 and again.json()["name"] == plan["name"]
        names = {p["name"] for p in httpx.get(f"{url}/api/v1/plans").json()}
        assert "saved during shutdown" in names
        code, seconds = _stop(proc)
        assert code == 0 and seconds < 5
    finally:
        proc.kill()

    lines = [json.loads(line) for line in log.read_text().splitlines()]  # every line is JSON
    access = [x for x in lines if x["logger"] == "llm_planner.access"]
    assert {"/healthz", "/api/v1/plans"} <= {x["path"] for x in access}
    first_save = next(x for x in access if x["path"] == "/api/v1/plans")
    assert first_save["request_id"] == "img-1" and first_save["status"] == 201
    assert first_save["route"] == "/api/v1/plans" and first_save["method"] == "POST"
    assert sum(x["message"] == "Application shutdown complete." for x in lines) == 2


def test_workers_start_together_on_a_fresh_store(
    image: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The store is migrated once before the workers start (two migrating a fresh SQLite file
    at once collide), and the supervisor stops them all on SIGTERM."""
    script, env = image
    data, log = tmp_path / "data", tmp_path / "server.log"
    data.mkdir()
    proc, url = _start(script, env, data, log, workers=2)
    try:
        deadline = time.monotonic() + 30
        while log.read_text().count("Application startup complete.") < 2:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        assert httpx.get(f"{url}/api/v1/plans").status_code == 200
        code, _ = _stop(proc)
    finally:
        proc.kill()
    assert code == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [x["message"] for x in lines if x["level"] == "error"] == []
    messages = [x["message"] for x in lines]
    migrated = messages.index("plan store at the latest schema revision")
    assert migrated < min(i for i, m in enumerate(messages) if m.startswith("Started server"))
    assert messages.count("Application shutdown complete.") == 2
