"""No request can tie the service up, crash it, or write from another site (issue 18's audit,
kept as tests): the exact tree's limits, deadline and cancellation in a real server; the largest
accepted input of every operation answered within its documented bound; JSON depth refused
before parsing on every body and JSON query parameter; no input shape answered 500; cross-site
writes refused; slow bodies cut off; methods refused with ``Allow``; whole-number floats read as
integers; the smaller rules of the audit.

Real servers run on loopback (``conftest.running_server``) with small limits, so each bound is
reached in seconds; requests are bounded in count and time.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.main import app, create_app
from estimator import model_entry

from .conftest import running_server, team_accelerator

API = "/api/v1"
client = TestClient(app)
DEEP = "[" * 1000 + "]" * 1000  # a 2 KB body nested 1,000 levels


# --- helpers -----------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` and that run the exact tree's child."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"app.service.isolated" in cmdline:
            found.append(int(entry.name))
    return found


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _wait_until(condition: Any, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


def _llama(layers: int) -> dict[str, Any]:
    return {**model_entry("llama-2-7b")["config"], "num_hidden_layers": layers}


# --- 1. the exact module tree: limits, deadline, cancellation ------------------------------------


@pytest.fixture(scope="module")
def exact_server(gt: Any) -> Iterator[tuple[str, Any]]:
    env = {"PLANNER_EXACT_TIMEOUT_S": "2", "PLANNER_EXACT_QUEUE": "0"}
    with running_server(env) as (url, proc):
        yield url, proc


def test_exact_tree_refuses_more_layers_than_its_limit() -> None:
    r = client.post(f"{API}/models/tree", json={"model": _llama(513), "source": "exact"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "model" and "512" in r.json()["message"]


def test_exact_tree_answers_then_stops_at_its_deadline(exact_server: tuple[str, Any]) -> None:
    """A catalog model's exact tree is answered (its child started: importing torch is not
    counted); a 512-layer tree (~3 s of work here) runs past the 2 s deadline and is answered
    503 within it, its child killed, the server's memory unchanged and health checks answered
    meanwhile."""
    url, proc = exact_server
    ok = httpx.post(
        f"{url}{API}/models/tree", json={"model": "llama-2-7b", "source": "exact"}, timeout=60
    )
    assert ok.status_code == 200 and ok.json()["exact"][0]["flops"] > 0
    before = _rss_bytes(proc.pid)
    slow = {"model": _llama(512), "source": "exact", "seq_len": 65536}
    with ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        answer = pool.submit(httpx.post, f"{url}{API}/models/tree", json=slow, timeout=60)
        time.sleep(1)
        health = httpx.get(f"{url}/healthz", timeout=5)
        assert health.status_code == 200 and health.elapsed.total_seconds() < 1
        r = answer.result()
        took = time.monotonic() - start
    assert r.status_code == 503 and r.json()["error"] == "timeout", r.text[:300]
    assert took < 2 + 1.5
    assert _wait_until(lambda: not _children(proc.pid), 5), "the child still runs"
    assert _rss_bytes(proc.pid) - before < 100 * 2**20


def test_exact_tree_stops_when_its_client_goes(exact_server: tuple[str, Any]) -> None:
    """The client gives up 0.5 s into a tree; the child is killed well before the 2 s deadline
    would have stopped it."""
    url, proc = exact_server
    warm = httpx.post(
        f"{url}{API}/models/tree", json={"model": "gpt2", "source": "exact"}, timeout=60
    )
    assert warm.status_code == 200  # the child is up, so the slow tree starts at once
    slow = {"model": _llama(512), "source": "exact", "seq_len": 65536}
    start = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}{API}/models/tree", json=slow, timeout=0.5)
    assert _wait_until(lambda: not _children(proc.pid), 3), "the child outlived its client"
    assert time.monotonic() - start < 1.8


def test_exact_tree_queue_is_bounded(exact_server: tuple[str, Any]) -> None:
    """With no queue (``PLANNER_EXACT_QUEUE=0``) a second tree while one runs is answered 503
    at once, with Retry-After."""
    url, _ = exact_server
    slow = {"model": _llama(512), "source": "exact", "seq_len": 65536}
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, f"{url}{API}/models/tree", json=slow, timeout=60)
        time.sleep(1)
        second = httpx.post(
            f"{url}{API}/models/tree", json={"model": "gpt2", "source": "exact"}, timeout=60
        )
        assert second.status_code == 503 and second.json()["error"] == "unavailable"
        assert int(second.headers["retry-after"]) >= 1
        assert first.result().status_code == 503


# --- 2. the largest accepted input of every operation, within its documented bound ------------

BIG_CONFIG = {  # the largest a pasted config may be: 16,384 layers, ~7e14 parameters
    "model_type": "gemma2",
    "hidden_size": 16384,
    "num_hidden_layers": 16384,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 65536,
    "vocab_size": 2**18,
    "sliding_window": 4096,
    "layer_types": ["sliding_attention", "full_attention"] * 8192,
}
ESTIMATE_S = 5.0  # documented: every single estimate, deep dive and import
SWEEP_S = 3  # the server below runs sweeps under PLANNER_SWEEP_TIMEOUT_S=3


def _largest_cases() -> dict[tuple[str, str], tuple[dict[str, Any], float]]:
    """Per operation: its heaviest accepted request and the bound it must be answered in."""
    big_training = {"model": BIG_CONFIG, "num_gpus": 2**20, "layout": {"pp": 1024}}
    big_serving = {
        "model": BIG_CONFIG,
        "num_gpus": 1024,
        "layout": {"tp": 8, "pp": 128},
        "input_len": 2**20,
        "output_len": 2**20,
        "concurrency": 2**20,
    }
    every_accelerator = [a["id"] for a in client.get(f"{API}/accelerators").json()]
    big_sweep = {
        "model": "llama-3.1-405b",
        "accelerator": every_accelerator,
        "num_gpus": [2**k for k in range(4, 21)],
        "layout": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "zero_stage": [0, 1, 2, 3]},
        "micro_batch_size": [1, 2, 4, 8],
        "recompute": ["none", "selective", "full"],
    }
    serving_sweep = {
        "model": "llama-3.1-405b",
        "accelerator": every_accelerator,
        "layout": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8]},
        "precision": ["bf16", "fp8-serving"],
        "request_rate": 50.0,  # plan a fleet, aggregated and disaggregated: the heaviest path
        "disaggregated": True,
    }
    small_enough = {k: v for k, v in BIG_CONFIG.items() if k != "layer_types"}
    plan = {
        "name": "p" * 200,
        "description": "d" * 10_000,
        "tags": [f"{i:02d}" + "t" * 48 for i in range(20)],
        "kind": "training",
        "request": {**big_training, "model": small_enough},
    }
    team_model = {"id": "big-team-model", "name": "n", "config": BIG_CONFIG}
    team_gpu = team_accelerator(
        "big-team-gpu", "n", memory_gb=1e5, hbm_tb_per_s=100, dense_tflops={"bf16": 1e5}
    )
    e, s = ESTIMATE_S, SWEEP_S + 2.0
    return {
        ("POST", "/training/estimate"): (big_training, e),
        ("POST", "/inference/estimate"): (big_serving, e),
        ("POST", "/training/layers"): (big_training, e),
        ("POST", "/training/comms"): (big_training, e),
        ("POST", "/training/ranks"): (big_training, e),
        ("POST", "/training/timeline"): (big_training, e),
        ("POST", "/inference/timeline"): (big_serving, e),
        ("POST", "/training/sweep"): (big_sweep, s),
        ("POST", "/inference/sweep"): (serving_sweep, s),
        ("POST", "/models/tree"): ({"model": BIG_CONFIG, "seq_len": 2**20, "batch_size": 4096}, e),
        ("POST", "/models/import"): (BIG_CONFIG, e),
        ("GET", "/models"): ({}, e),
        ("GET", "/models/{model_id}"): ({}, e),
        ("GET", "/accelerators"): ({}, e),
        ("GET", "/accelerators/{accelerator_id}"): ({}, e),
        ("GET", "/precisions"): ({}, e),
        ("GET", "/accuracy"): ({}, e),  # every record of the validation report
        ("POST", "/plans"): (plan, e),
        ("GET", "/plans"): ({}, e),
        ("GET", "/plans/{plan_id}"): ({}, e),
        ("PATCH", "/plans/{plan_id}"): ({"request": {"model": BIG_CONFIG}}, e),
        ("POST", "/plans/{plan_id}/duplicate"): ({}, e),
        ("DELETE", "/plans/{plan_id}"): ({}, e),
        ("GET", "/team/accelerators"): ({}, e),
        ("POST", "/team/accelerators"): (team_gpu, e),
        ("GET", "/team/accelerators/{entry_id}"): ({}, e),
        ("PUT", "/team/accelerators/{entry_id}"): (
            {k: v for k, v in team_gpu.items() if k != "id"},
            e,
        ),
        ("DELETE", "/team/accelerators/{entry_id}"): ({}, e),
        ("GET", "/team/models"): ({}, e),
        ("POST", "/team/models"): (team_model, e),
        ("GET", "/team/models/{entry_id}"): ({}, e),
        ("PUT", "/team/models/{entry_id}"): ({"name": "n", "config": BIG_CONFIG}, e),
        ("DELETE", "/team/models/{entry_id}"): ({}, e),
        # a Hugging Face id: the test server's hub is a closed loopback port (refused, 424)
        ("POST", "/team/hub-models"): ({"id": "big-hub-model", "hf_id": "org/" + "n" * 90}, e),
        ("GET", "/hub/model"): ({}, e),
    }


def test_every_operation_answers_its_largest_input_in_time(tmp_path: Path) -> None:
    """Every API operation (from the schema, so a new one must be added here) is sent its
    heaviest accepted request against a real server and must answer within its bound, with
    no server error."""
    cases = _largest_cases()
    paths = client.get("/openapi.json").json()["paths"]
    operations = {
        (method.upper(), path.removeprefix(API))
        for path, ops in paths.items()
        if path.startswith(API)
        for method in ops
    }
    assert operations == set(cases), "every operation needs its largest-input case"
    env = {"PLANNER_SWEEP_TIMEOUT_S": str(SWEEP_S), "PLANNER_DATA_DIR": str(tmp_path)}
    ids = {
        "model_id": "llama-3.1-405b",
        "accelerator_id": "gb200",
        "entry_id": "",
        "plan_id": "",
    }
    order = sorted(cases, key=lambda op: ("DELETE" in op[0], "{" in op[1]))  # create, then use
    with running_server(env) as (url, _):
        for method, path in order:
            body, bound = cases[(method, path)]
            ids["entry_id"] = "big-team-model" if "/team/models" in path else "big-team-gpu"
            concrete = path.format(**ids)
            start = time.monotonic()
            kwargs: dict[str, Any] = {"json": body} if method in ("POST", "PUT", "PATCH") else {}
            r = httpx.request(method, f"{url}{API}{concrete}", timeout=60, **kwargs)
            took = time.monotonic() - start
            assert r.status_code < 500 or r.status_code == 503, (method, path, r.text[:300])
            assert took < bound, f"{method} {path} took {took:.1f} s (bound {bound} s)"
            if (method, path) == ("POST", "/plans"):
                assert r.status_code == 201, r.text[:300]
                ids["plan_id"] = r.json()["id"]


# --- 3. JSON nested too deep: refused before parsing, by name -----------------------------------


def _post_operations() -> list[str]:
    paths = client.get("/openapi.json").json()["paths"]
    out = []
    for path, ops in paths.items():
        for method in ops:
            if method in ("post", "put", "patch"):
                out.append(f"{method.upper()} {path}")
    return sorted(out)


@pytest.mark.parametrize("operation", _post_operations())
def test_deep_json_body_is_refused_by_name(operation: str) -> None:
    method, path = operation.split(" ", 1)
    concrete = path.replace("{plan_id}", "x").replace("{entry_id}", "x")
    r = client.request(method, concrete, content=DEEP, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"][0]["field"] == "body"


@pytest.mark.parametrize("page", ["/training", "/serving", "/sweep", "/catalog", "/compare"])
def test_deep_json_query_parameter_is_refused_by_name(page: str) -> None:
    r = client.get(page, params={"config": DEEP, "model": "llama-2-7b"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "config"


def test_a_refused_deep_body_keeps_the_connection(server: str) -> None:
    """The keep-alive connection survives the refusal: the next request on it is answered."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        body = DEEP.encode()
        sock.sendall(
            b"POST /api/v1/training/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
            + b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        replies = b""
        while replies.count(b"HTTP/1.1 ") < 2 or not replies.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            replies += chunk
    assert replies.startswith(b"HTTP/1.1 422") and b"HTTP/1.1 200" in replies


# --- 4. no input shape answers 500 ----------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=30,
)
FIELDS = st.sampled_from(
    ["model", "layout", "accelerator", "precision", "num_gpus", "seq_len", "request", "config"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    operation=st.sampled_from(_post_operations()),
    body=JSON_VALUES | st.dictionaries(FIELDS, JSON_VALUES, max_size=4),
)
def test_no_json_shape_is_a_server_error(operation: str, body: Any) -> None:
    method, path = operation.split(" ", 1)
    concrete = path.replace("{plan_id}", "x").replace("{entry_id}", "x")
    r = client.request(
        method, concrete, content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert r.status_code < 500, r.text[:300]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    page=st.sampled_from(["/training", "/serving", "/sweep", "/catalog", "/compare", "/plans"]),
    value=JSON_VALUES.map(json.dumps) | st.text(max_size=50),
    name=st.sampled_from(["config", "model", "tp", "num_gpus", "q", "tag", "format", "mode"]),
)
def test_no_query_shape_is_a_server_error(page: str, value: str, name: str) -> None:
    r = client.get(page, params={"model": "llama-2-7b", name: value})
    assert r.status_code < 500, r.text[:300]
    assert "Traceback" not in r.text


# --- 5. writes from another site ---------------------------------------------------------------


def _a_plan(c: TestClient) -> str:
    body = {"name": "target", "kind": "training", "request": {"model": "llama-2-7b"}}
    r = c.post(f"{API}/plans", json=body)
    assert r.status_code == 201
    return str(r.json()["id"])


CROSS_SITE = [
    {"origin": "https://evil.example"},
    {"origin": "null"},
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site", "origin": "http://sub.testserver"},
]


@pytest.mark.parametrize(
    "headers", CROSS_SITE, ids=lambda h: "+".join(f"{k}={v}" for k, v in h.items())
)
def test_cross_site_writes_are_refused(headers: dict[str, str]) -> None:
    plan_id = _a_plan(client)
    count = len(client.get(f"{API}/plans", params={"limit": 500}).json())
    form = {"name": "x", "kind": "training", "query": "model=llama-2-7b"}
    for path, data in (
        ("/plans", form),
        (f"/plans/{plan_id}/edit", {"name": "hacked"}),
        (f"/plans/{plan_id}/duplicate", {}),
        (f"/plans/{plan_id}/delete", {}),
    ):
        r = client.post(path, data=data, headers=headers, follow_redirects=False)
        assert r.status_code == 403, (path, r.status_code)
    api = client.post(
        f"{API}/plans",
        content=json.dumps({"name": "x", "kind": "training", "request": {"model": "llama-2-7b"}}),
        headers=headers,  # no content type, as a no-cors fetch of a Blob sends it
    )
    assert api.status_code == 403
    assert client.delete(f"{API}/plans/{plan_id}", headers=headers).status_code == 403
    assert len(client.get(f"{API}/plans", params={"limit": 500}).json()) == count
    assert client.get(f"{API}/plans/{plan_id}").json()["name"] == "target"


def test_same_site_and_non_browser_writes_go_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    plan_id = _a_plan(client)
    same = {"origin": "http://testserver", "sec-fetch-site": "same-origin"}
    r = client.post(
        f"/plans/{plan_id}/edit", data={"name": "renamed"}, headers=same, follow_redirects=False
    )
    assert r.status_code == 303
    assert client.get(f"{API}/plans/{plan_id}").json()["name"] == "renamed"
    monkeypatch.setenv("PLANNER_CORS_ORIGINS", "https://wiki.example")
    trusted = TestClient(create_app())
    r = trusted.post(
        f"{API}/plans",
        json={"name": "from the wiki", "kind": "training", "request": {"model": "llama-2-7b"}},
        headers={"origin": "https://wiki.example", "sec-fetch-site": "cross-site"},
    )
    assert r.status_code == 201


# --- 6. slow bodies --------------------------------------------------------------------------


def test_slow_bodies_are_cut_off() -> None:
    """200 connections each send 4 of a 100-byte body; with a 2 s body timeout the server
    answers 408 and closes every one, and still answers a health check meanwhile."""
    with running_server({"PLANNER_BODY_TIMEOUT_S": "2"}) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        socks = []
        for _ in range(200):
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(
                b"POST /api/v1/training/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mo'
            )
            socks.append(s)
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        start = time.monotonic()
        statuses = []
        for s in socks:
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            statuses.append(data.split(b" ", 2)[1] if data else b"closed")
            s.close()
        assert time.monotonic() - start < 10
        assert set(statuses) <= {b"408", b"closed"} and b"408" in statuses


# --- 7. the smaller rules ---------------------------------------------------------------------


def test_405_names_the_allowed_methods_of_every_path() -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, ops in paths.items():
        concrete = path.replace("{plan_id}", "x").replace("{entry_id}", "x")
        concrete = concrete.replace("{model_id}", "gpt2").replace("{accelerator_id}", "l4")
        documented = {m.upper() for m in ops}
        refused = next(m for m in ("PUT", "PATCH", "DELETE", "POST", "GET") if m not in documented)
        r = client.request(refused, concrete)
        assert r.status_code == 405, (refused, path)
        assert set(r.headers["allow"].split(", ")) == documented, path


def test_cors_preflight_allows_put(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANNER_CORS_ORIGINS", "https://wiki.example")
    c = TestClient(create_app())
    r = c.options(
        f"{API}/team/models/x",
        headers={"origin": "https://wiki.example", "access-control-request-method": "PUT"},
    )
    assert r.status_code == 200 and "PUT" in r.headers["access-control-allow-methods"]


def test_whole_number_floats_are_integers() -> None:
    base = {"model": "llama-2-7b", "num_gpus": 8}
    exact = client.post(f"{API}/training/estimate", json={**base, "seq_len": 4096}).json()
    floats = client.post(f"{API}/training/estimate", json={**base, "seq_len": 4096.0})
    assert floats.status_code == 200 and floats.json() == exact
    for bad in (4096.5, "4096", True):
        r = client.post(f"{API}/training/estimate", json={**base, "seq_len": bad})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request"
    sweep = client.post(
        f"{API}/training/sweep", json={"model": "llama-2-7b", "num_gpus": [8.0, 16.0]}
    )
    assert sweep.status_code == 200


def test_pasted_config_schema_requires_model_type() -> None:
    schema = client.get("/openapi.json").json()
    text = json.dumps(schema)
    assert '"required": ["model_type"]' in text
    r = client.post(f"{API}/training/estimate", json={"model": {"hidden_size": 4096}})
    assert r.status_code == 422 and r.json()["error"] == "invalid_request"
    assert r.json()["detail"][0]["field"] == "model.model_type"
    # A model_type the schema takes but the reader refuses (an unknown family naming Mamba
    # blocks) is the plan's problem, as the fuzz test's invariant wants
    odd = {"model_type": "my-hybrid", "mamba_head_dim": 64}
    r = client.post(f"{API}/models/import", json=odd)
    assert r.status_code == 422 and r.json()["error"] == "invalid_plan"
    assert r.json()["detail"][0]["field"] == "config.model_type"


@pytest.mark.parametrize(
    ("base", "changes", "field"),
    [
        ("llama-2-7b", {"num_key_value_heads": 64}, "model.num_key_value_heads"),
        (
            "falcon-40b",
            {"num_kv_heads": 256, "new_decoder_architecture": True},
            "model.num_kv_heads",
        ),
        ("mixtral-8x7b", {"num_experts_per_tok": 16}, "model.num_experts_per_tok"),
    ],
)
def test_impossible_head_and_expert_counts_are_refused(
    base: str, changes: dict[str, Any], field: str
) -> None:
    config = {**model_entry(base)["config"], **changes}
    r = client.post(f"{API}/training/estimate", json={"model": config})
    assert r.status_code == 422 and r.json()["error"] == "invalid_plan"
    assert r.json()["detail"][0]["field"] == field


def test_write_rate_is_limited_per_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANNER_WRITES_PER_MINUTE", "3")
    limited = create_app()
    one = TestClient(limited, client=("10.0.0.1", 5000))
    other = TestClient(limited, client=("10.0.0.2", 5000))
    body = {"name": "n", "kind": "training", "request": {"model": "llama-2-7b"}}
    assert [one.post(f"{API}/plans", json=body).status_code for _ in range(3)] == [201] * 3
    refused = one.post(f"{API}/plans", json=body)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"] == "rate_limited"
    assert one.get(f"{API}/plans").status_code == 200  # reads are not counted
    assert other.post(f"{API}/plans", json=body).status_code == 201
