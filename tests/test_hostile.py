"""Issue 38's audit of the running service, kept as tests: each soft spot it found has the test
that failed before its fix. Requests that hold the loop are refused or routed off it (checked by
mechanism: the lane a request takes, the queue's bound, never a wall-clock time); lone
surrogates, crowds of sweeps, deep team models, a cache without a byte bound, a foreign Host,
a store that is down, half-sent headers, token-less writes off loopback, forwarded addresses,
crossed edits, concurrent migrations, CORS ``*``, terminal escapes, ``output_len: 0``, and
requests left at shutdown.

Real servers run on loopback (``conftest.running_server``), requests bounded in count and time.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.cli.commands import Printable
from app.main import create_app
from app.resolve import _SweepCache, footprint_bytes
from app.service import lanes
from app.service.lanes import (
    ESTIMATES,
    ON_LOOP_MAX_COST,
    SHORT_ESTIMATES,
    Lane,
    LaneDraining,
    LaneFull,
    LaneLate,
    estimate_lane,
    training_cost,
)
from app.service.server import GuardedHttpTools, server_options
from app.settings import Settings, current
from estimator.errors import SpecError
from estimator.layout.pipeline import _first_last

from .conftest import running_server

API = "/api/v1"
PLAN = {"name": "70B", "kind": "training", "request": {"model": "llama-3-70b"}}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """An app made after the test sets its environment, on its own SQLite file."""
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'plans.db'}")
    current.cache_clear()
    yield monkeypatch
    current.cache_clear()


# --- 1. no request holds the event loop ---------------------------------------------------------


@pytest.mark.parametrize("pp", [83, 1024])
def test_more_virtual_stages_than_layers_plus_two_is_refused(pp: int) -> None:
    """Llama 3 70B has 80 layers: pp 83 and pp 1024 were accepted (0.62 s on the loop)."""
    with TestClient(create_app()) as c:
        body = {"model": "llama-3-70b", "num_gpus": pp, "layout": {"pp": pp}}
        r = c.post(f"{API}/training/estimate", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["field"] == "layout.pp"
        assert "exceed the 80 layers plus the embedding and the loss" in r.text
        assert c.post(f"{API}/training/estimate", json={**body, "num_gpus": 82,
                      "layout": {"pp": 82}}).status_code == 200  # fmt: skip


def _brute_first_last(layers: int, pp: int, vp: int) -> tuple[int, ...] | None:
    """The search the planner made before: every (first, last) pair Megatron-Core accepts,
    the lightest heaviest stage, ties to the lighter ends; middle ranks must hold a layer."""
    best = None
    for first, last in itertools.product(range(layers + 1), repeat=2):
        try:
            found = _first_last(layers, pp, vp, first, last)
        except SpecError:
            continue
        if pp > 2 and found.stage_layers[1] == 0:
            continue
        key = (max(found.stage_layers), found.stage_layers[0] + found.stage_layers[-1])
        if best is None or key < best[0]:
            best = (key, found.stage_layers)
    return None if best is None else best[1]


@pytest.mark.parametrize("layers", [5, 13, 61, 62, 94])
def test_the_arithmetic_first_last_split_is_the_searched_one(layers: int) -> None:
    from estimator.layout.pipeline import _balanced_first_last

    for pp, vp in itertools.product(range(3, 12), (1, 2, 3)):
        if pp * vp > layers + 2:
            continue
        try:
            got: tuple[int, ...] | None = _balanced_first_last(layers, pp, vp).stage_layers
        except SpecError:
            got = None
        assert got == _brute_first_last(layers, pp, vp), (layers, pp, vp)


def test_estimates_take_the_loop_only_under_their_cost_bound() -> None:
    assert training_cost("llama-3-70b", 8, 1) == 640
    assert estimate_lane("llama-3-70b", 640) is SHORT_ESTIMATES
    assert training_cost("llama-3-70b", 82, 1) == 6_560 > ON_LOOP_MAX_COST
    assert estimate_lane("llama-3-70b", 6_560) is ESTIMATES
    assert training_cost({"model_type": "llama"}, 1, 1) is None
    assert estimate_lane({"model_type": "llama"}, None) is ESTIMATES
    assert estimate_lane("a-team-model", None) is ESTIMATES


def test_a_fit_search_runs_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan that does not fit searched up to 0.5 s for fitting layouts on the loop."""
    import threading

    from app.api import training

    seen: list[str] = []

    def alternatives(req: Any, limit: int = 3) -> list[dict[str, Any]]:
        seen.append(threading.current_thread().name)
        return []

    monkeypatch.setattr(training, "fitting_alternatives", alternatives)
    with TestClient(create_app()) as c:
        body = {"model": "llama-3-70b", "num_gpus": 8, "layout": {"pp": 8}}
        r = c.post(f"{API}/training/estimate", json=body)
    assert r.status_code == 200 and r.json()["memory_per_gpu"]["fit"] != "fits"
    assert r.json()["fit_suggestions"] == [] and seen == ["lane-estimate_0"]


def test_a_lane_admits_threads_plus_queue_then_refuses() -> None:
    lane = Lane("test", 1, queue=2)
    gate = __import__("threading").Event()

    async def main() -> list[Any]:
        calls = [asyncio.ensure_future(lane.run(gate.wait, 5)) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert lane.admitted == 3
        with pytest.raises(LaneFull) as refused:
            await lane.run(gate.wait, 5)
        assert refused.value.retry_after_s >= 1
        gate.set()
        return list(await asyncio.gather(*calls))

    assert asyncio.run(main()) == [True, True, True]
    assert lane.admitted == 0


def test_a_call_that_waited_past_its_deadline_is_not_started() -> None:
    lane = Lane("test", 1, wait_s=lambda: 0.05)
    ran: list[int] = []

    async def main() -> None:
        first = asyncio.ensure_future(lane.run(time.sleep, 0.2))
        await asyncio.sleep(0.01)
        with pytest.raises(LaneLate):
            await lane.run(ran.append, 1)
        await first

    asyncio.run(main())
    assert ran == []


def test_a_full_sweep_lane_is_a_503_with_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.api import inference, training

    class Full:
        async def run(self, *_: Any) -> Any:
            raise LaneFull("sweep", 9, 30)

    monkeypatch.setattr(training, "SWEEPS", Full())
    monkeypatch.setattr(inference, "SWEEPS", Full())
    with TestClient(create_app()) as c:
        for path in ("training/sweep", "inference/sweep"):
            r = c.post(f"{API}/{path}", json={"model": "llama-3-8b"})
            assert r.status_code == 503 and r.headers["retry-after"] == "30", r.text
            assert "9 sweep requests are running or waiting" in r.json()["message"]


def test_sweeps_run_in_their_lane_one_at_a_time() -> None:
    assert lanes.SWEEPS.threads == 1 and lanes.SWEEPS.queue == 8
    assert lanes.SWEEPS.wait_s is not None and lanes.SWEEPS.wait_s() == Settings.sweep_timeout_s


# --- 2. medium: surrogates, team models, the sweep cache, hosts, readiness, headers ------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"model":"llama-3-70b\\ud800"}', "model"),
        (b'{"model":"llama-3-70b","layout":{"tp":"\\udc00"}}', "layout.tp"),
        (b'{"model":"llama-3-70b","\\ud800x":1}', "\\ud800x"),
        (b'"\\ud800"', "body"),
    ],
)
def test_a_lone_surrogate_is_a_422_naming_its_field(body: bytes, field: str) -> None:
    with TestClient(create_app(), raise_server_exceptions=False) as c:
        for path in ("inference/estimate", "training/estimate", "training/sweep", "plans"):
            r = c.post(f"{API}/{path}", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422, (path, r.text)
            assert r.json()["detail"][0]["field"] == field
            assert r.headers["x-frame-options"] == "DENY"  # the security headers stay


def test_a_paired_surrogate_is_an_ordinary_character() -> None:
    with TestClient(create_app()) as c:
        body = b'{"model":"llama-3-8b","x":"\\ud83d\\ude00"}'
        r = c.post(f"{API}/inference/estimate", content=body,
                   headers={"content-type": "application/json"})  # fmt: skip
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "x"  # extra field


def test_a_deep_team_model_is_refused(fresh: pytest.MonkeyPatch) -> None:
    config = {
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_hidden_layers": 16_384, "vocab_size": 1000,
    }  # fmt: skip
    with TestClient(create_app()) as c:
        entry = {"id": "deep", "name": "Deep", "config": config, "source": "test"}
        r = c.post(f"{API}/team/models", json=entry)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "config.num_hidden_layers"
        assert "PLANNER_TEAM_MAX_LAYERS" in r.text
        shallow = {**entry, "config": {**config, "num_hidden_layers": 1_024}}
        assert c.post(f"{API}/team/models", json=shallow).status_code == 201


def test_a_catalog_write_rebuilds_only_the_entries_it_changed(fresh: pytest.MonkeyPatch) -> None:
    config = {
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_hidden_layers": 8, "vocab_size": 1000,
    }  # fmt: skip
    app = create_app()
    with TestClient(app) as c:
        for i in range(3):
            entry = {"id": f"m{i}", "name": f"M{i}", "config": config, "source": "test"}
            assert c.post(f"{API}/team/models", json=entry).status_code == 201
        before = app.state.team.catalog().models
        extra = {"id": "m3", "name": "M3", "config": config, "source": "test"}
        assert c.post(f"{API}/team/models", json=extra).status_code == 201
        after = app.state.team.catalog().models
    assert set(after) == {"m0", "m1", "m2", "m3"}
    assert all(after[k] is before[k] for k in before)  # the same objects: not read again


def test_the_sweep_cache_is_bounded_in_bytes() -> None:
    import numpy as np

    cache = _SweepCache(8, lambda: 3_000_000)
    one_mb = [np.zeros(125_000) for _ in range(6)]  # 1 MB each
    for i, value in enumerate(one_mb):
        assert cache.get(f"k{i}", lambda v=value: v) is value  # type: ignore[misc]
    assert cache.held_bytes <= 3_000_000 and list(cache.items) == ["k3", "k4", "k5"]
    huge = np.zeros(1_000_000)  # 8 MB: answered, not kept
    assert cache.get("huge", lambda: huge) is huge and "huge" not in cache.items
    assert footprint_bytes({"a": [np.zeros(10)]}) >= 80


def test_a_foreign_host_is_refused(fresh: pytest.MonkeyPatch) -> None:
    """A DNS-rebinding page reaches a local instance under its own name: refused."""
    fresh.delenv("PLANNER_ALLOWED_HOSTS")
    with TestClient(create_app(), base_url="http://localhost:8000") as c:
        assert c.get("/healthz").status_code == 200
        for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example"):
            r = c.get("/healthz", headers={"host": host})
            assert r.status_code == 400 and "PLANNER_ALLOWED_HOSTS" in r.text, host
            r = c.post(f"{API}/plans", json=PLAN, headers={"host": host})
            assert r.status_code == 400
        for host in ("127.0.0.1:8000", "[::1]:8000", "LOCALHOST"):
            assert c.get("/healthz", headers={"host": host}).status_code == 200, host
    fresh.setenv("PLANNER_ALLOWED_HOSTS", "planner.example.com")
    with TestClient(create_app(), base_url="http://planner.example.com") as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/healthz", headers={"host": "localhost"}).status_code == 400
    assert Settings.from_env().hosts == ("planner.example.com",)


def test_readiness_checks_the_store_and_a_down_store_is_a_503(fresh: pytest.MonkeyPatch) -> None:
    with TestClient(create_app()) as c:
        r = c.get("/readyz")
        assert r.status_code == 200 and r.json() == {"status": "ok", "store": "ok"}
    # A PostgreSQL URL nobody listens on: the store cannot be opened or asked.
    fresh.setenv("DATABASE_URL", "postgresql+psycopg://planner@127.0.0.1:9/planner")
    c = TestClient(create_app(), raise_server_exceptions=False)  # no lifespan: it would migrate
    assert c.get("/healthz").status_code == 200  # liveness: the process answers
    r = c.get("/readyz")
    assert r.status_code == 503 and r.json()["status"] == "unavailable", r.text
    for method, path in (("GET", "/plans"), ("POST", "/plans"), ("GET", "/team/models")):
        r = c.request(method, f"{API}{path}", json=PLAN if method == "POST" else None)
        assert r.status_code == 503 and "plan store is unavailable" in r.text, (path, r.text)
        assert r.headers["retry-after"] == "5"


@pytest.mark.server
def test_half_sent_headers_are_cut_off() -> None:
    """2,000 connections with half a request line stayed open for the audit's whole run."""
    with running_server({"PLANNER_HEADER_TIMEOUT_S": "1"}) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        socks = []
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            socks.append(s)
        idle = socket.create_connection(("127.0.0.1", port), timeout=5)  # sends nothing
        started = time.monotonic()
        closed = [s.recv(100) for s in [*socks, idle]]  # b"" once the server closes
        assert closed == [b""] * 21 and time.monotonic() - started < 4.5
        assert httpx.get(f"{url}/healthz").status_code == 200  # others are served meanwhile
        for s in [*socks, idle]:
            s.close()


def test_the_server_options_bound_connections_and_trust_no_proxy() -> None:
    options = server_options(Settings.from_env())
    assert options["http"] is GuardedHttpTools and options["limit_concurrency"] == 1_024
    assert options["proxy_headers"] is False and options["forwarded_allow_ips"] is None


# --- 3. secure by default ---------------------------------------------------------------------


def test_writes_off_loopback_need_a_token(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("PLANNER_HOST", "0.0.0.0")
    with TestClient(create_app()) as c:
        assert c.post(f"{API}/training/estimate", json={"model": "llama-3-8b"}).status_code == 200
        r = c.post(f"{API}/plans", json=PLAN)
        assert r.status_code == 403 and "PLANNER_API_TOKEN" in r.text
    fresh.setenv("PLANNER_API_TOKEN", "s3cret")
    with TestClient(create_app()) as c:
        auth = {"Authorization": "Bearer s3cret"}
        assert c.post(f"{API}/plans", json=PLAN, headers=auth).status_code == 201


@pytest.mark.parametrize(
    ("host", "server", "open_"),
    [
        ("127.0.0.1", ("127.0.0.1", 8000), True),
        ("127.0.0.1", ("10.1.2.3", 8000), False),  # uvicorn --host 0.0.0.0, a remote client
        ("0.0.0.0", ("127.0.0.1", 8000), False),
        ("127.0.0.1", ("testserver", 80), True),  # an in-process client: the setting decides
        ("::1", ("::1", 8000), True),
    ],
)
def test_loopback_is_both_the_setting_and_the_connection(
    host: str, server: tuple[str, int], open_: bool
) -> None:
    from dataclasses import replace

    from app.deps import listens_on_loopback

    cfg = replace(Settings.from_env(), host=host)
    assert listens_on_loopback(cfg, server) is open_


@pytest.mark.server
def test_a_forwarded_address_does_not_reset_the_write_limit() -> None:
    """Rotating X-Forwarded-For from loopback gave every write a fresh bucket."""
    with running_server({"PLANNER_WRITES_PER_MINUTE": "2"}) as (url, _):
        codes = [
            httpx.post(f"{url}{API}/plans", json=PLAN,
                       headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code
            for i in range(3)
        ]  # fmt: skip
    assert codes == [201, 201, 429]


# --- 4. low --------------------------------------------------------------------------------------


def test_crossed_edits_are_a_409(fresh: pytest.MonkeyPatch) -> None:
    with TestClient(create_app()) as c:
        plan_id = c.post(f"{API}/plans", json=PLAN).json()["id"]
        tag = c.get(f"{API}/plans/{plan_id}").headers["etag"]
        assert tag == '"1"'
        first = c.patch(f"{API}/plans/{plan_id}", json={"name": "A"}, headers={"If-Match": tag})
        assert first.status_code == 200 and first.headers["etag"] == '"2"'
        second = c.patch(f"{API}/plans/{plan_id}", json={"name": "B"}, headers={"If-Match": tag})
        assert second.status_code == 409 and second.headers["etag"] == '"2"', second.text
        assert c.get(f"{API}/plans/{plan_id}").json()["name"] == "A"
        bad = c.patch(f"{API}/plans/{plan_id}", json={"name": "C"}, headers={"If-Match": "x"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "If-Match"
        # the plan page's form carries the revision it showed
        page = c.get(f"/plans/{plan_id}").text
        assert 'name="revision" value="2"' in page
        stale = c.post(f"/plans/{plan_id}/edit", data={"name": "D", "revision": "1"})
        assert stale.status_code == 409 and c.get(f"{API}/plans/{plan_id}").json()["name"] == "A"
        fine = c.post(f"/plans/{plan_id}/edit", data={"name": "D", "revision": "2"})
        assert fine.status_code == 200 and c.get(f"{API}/plans/{plan_id}").json()["name"] == "D"


@pytest.mark.server
def test_two_migrations_at_once_both_succeed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    env = {**__import__("os").environ, "DATABASE_URL": url}
    procs = [
        subprocess.Popen([sys.executable, "-m", "app.cli", "migrate"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(3)
    ]  # fmt: skip
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else b"") for p in procs]
    assert [code for code, _ in results] == [0, 0, 0], results


def test_cors_star_opens_reads_not_cross_site_writes(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("PLANNER_CORS_ORIGINS", "*")
    with TestClient(create_app()) as c:
        evil = {"Origin": "https://evil.example"}
        assert c.get("/healthz", headers=evil).headers["access-control-allow-origin"] == "*"
        assert c.post(f"{API}/plans", json=PLAN, headers=evil).status_code == 403


def test_the_cli_prints_control_characters_as_escapes() -> None:
    out = io.StringIO()
    Printable(out).write("plan \x1b]0;owned\x07 \x1b[2J\x9b ok\n\tnext")
    assert out.getvalue() == "plan \\x1b]0;owned\\x07 \\x1b[2J\\x9b ok\n\tnext"


def test_a_plan_name_with_escapes_reaches_the_terminal_escaped(fresh: pytest.MonkeyPatch) -> None:
    with TestClient(create_app()) as c:
        assert c.post(f"{API}/plans", json={**PLAN, "name": "x\x1b[31mred"}).status_code == 201
    done = subprocess.run([sys.executable, "-m", "app.cli", "plans", "list"], capture_output=True,
                          timeout=120, env={**__import__("os").environ})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout and b"x\\x1b[31mred" in done.stdout


@pytest.mark.parametrize("path", ["inference/estimate", "inference/sweep"])
def test_output_len_zero_is_a_422_naming_it(path: str) -> None:
    with TestClient(create_app()) as c:
        r = c.post(f"{API}/{path}", json={"model": "llama-3-8b", "output_len": 0})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "output_len"


def test_after_the_drain_begins_nothing_new_is_started() -> None:
    lane = Lane("test", 1)
    try:
        lanes.begin_drain()
        with pytest.raises(LaneDraining):
            asyncio.run(lane.run(print, "never"))
    finally:
        lanes._DRAINING.clear()


@pytest.mark.server
def test_a_request_sent_as_shutdown_begins_is_answered() -> None:
    """At SIGTERM uvicorn closed connections whose request had not been read yet."""
    with running_server() as (url, proc):
        port = int(url.rsplit(":", 1)[1])
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers not all sent
        time.sleep(0.2)
        proc.terminate()
        time.sleep(0.3)
        sock.sendall(b"\r\n")
        reply = sock.recv(4096)
        sock.close()
        assert reply.startswith(b"HTTP/1.1 200"), reply[:100]
        assert b"connection: close" in reply.lower()
        assert proc.wait(timeout=15) == 0


def test_the_hostile_json_set_answers_no_5xx(fresh: pytest.MonkeyPatch) -> None:
    """A bounded slice of the audit's hostile set, every operation's POST: no 5xx."""
    bodies = [
        b"", b"null", b"[]", b'"\\ud800"', b"{" * 40 + b"}" * 40, b'{"model": 1e999}',
        b'{"model": "llama-3-70b", "num_gpus": 1024, "layout": {"pp": 1024}}',
        b'{"model": "llama-3-70b", "layout": {"pp": 83, "vp": 1000}}',
        b'{"model": "llama-3-70b", "output_len": 0}', b'{"model": {"model_type": "\\udfff"}}',
        json.dumps({"model": "llama-3-70b", "accelerator": ["h100-sxm-80gb"] * 1000}).encode(),
    ]  # fmt: skip
    app = create_app()
    posts = sorted(
        path for path, ops in app.openapi()["paths"].items() if "post" in ops and "{" not in path
    )
    with TestClient(app, raise_server_exceptions=False) as c:
        codes = {
            (path, body[:30]): c.post(path, content=body,
                                      headers={"content-type": "application/json"}).status_code
            for path in posts
            for body in bodies
        }  # fmt: skip
    assert {k: v for k, v in codes.items() if v >= 500} == {}
    assert len(codes) >= 10 * len(bodies)
