"""The plan store under the audit's checks, on SQLite and on a real PostgreSQL server: tag
filters before paging, searches taken literally, team entries that saved plans use protected
(with the migration that indexes plans saved before it), the per-plan size cap, and 16
concurrent writers with the server killed (SIGKILL) mid-write: every acknowledged plan is
stored whole after a restart."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.main import create_app
from app.store.plans import make_engine, migrate
from app.store.team import TeamInUse, TeamStore
from estimator import model_entry

from .conftest import running_server, team_accelerator

API = "/api/v1"
REQUEST = {"model": "llama-3-8b", "num_gpus": 8, "layout": {"tp": 2}}


@pytest.fixture
def api(url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("DATABASE_URL", url)
    with TestClient(create_app()) as c:
        yield c


def _save(
    api: TestClient, name: str, tags: list[str], request: dict[str, Any] | None = None
) -> str:
    body = {"name": name, "tags": tags, "kind": "training", "request": request or REQUEST}
    r = api.post(f"{API}/plans", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_tag_filter_comes_before_paging(api: TestClient) -> None:
    tagged = {_save(api, f"w3 plan {i}", ["w3"]) for i in range(58)}
    for i in range(62):
        _save(api, f"other {i}", ["w4"])
    every = api.get(f"{API}/plans", params={"tag": "w3", "limit": 500}).json()
    assert {p["id"] for p in every} == tagged
    first = api.get(f"{API}/plans", params={"tag": "w3", "limit": 10}).json()
    rest = api.get(f"{API}/plans", params={"tag": "w3", "limit": 100, "offset": 10}).json()
    assert len(first) == 10 and len(rest) == 48
    assert {p["id"] for p in first + rest} == tagged
    page = api.get("/plans", params={"tag": "w3", "format": "json"}).json()
    assert len(page) == 58


def test_search_is_taken_literally(api: TestClient) -> None:
    names = ["a_b", "100% fit", "plain", "back\\slash", "upper CASE"]
    ids = {n: _save(api, n, []) for n in names}
    for query, expected in (
        ("_", "a_b"),
        ("%", "100% fit"),
        ("\\", "back\\slash"),
        ("case", "upper CASE"),
    ):
        found = api.get(f"{API}/plans", params={"q": query}).json()
        assert [p["id"] for p in found] == [ids[expected]], query


def test_team_entries_in_use_cannot_be_deleted(api: TestClient) -> None:
    model = {"id": "our-8b", "name": "8B", "config": model_entry("llama-3-8b")["config"]}
    gpu = team_accelerator("our-h100")
    assert api.post(f"{API}/team/models", json=model).status_code == 201
    assert api.post(f"{API}/team/accelerators", json=gpu).status_code == 201
    plan = _save(api, "on our model", [], {"model": "our-8b", "num_gpus": 8})
    sweep = api.post(
        f"{API}/plans",
        json={
            "name": "our GPUs",
            "kind": "training_sweep",
            "request": {"model": "llama-3-8b", "accelerator": ["h100-sxm-80gb", "our-h100"]},
        },
    )
    assert sweep.status_code == 201, sweep.text
    refused = api.delete(f"{API}/team/models/our-8b")
    assert refused.status_code == 409 and refused.json()["suggestions"] == [plan]
    assert api.delete(f"{API}/team/accelerators/our-h100").status_code == 409
    assert api.get(f"{API}/plans/{plan}").status_code == 200  # the plan still opens
    assert api.get(f"/plans/{plan}").status_code == 200
    assert api.delete(f"{API}/plans/{plan}").status_code == 204
    assert api.delete(f"{API}/team/models/our-8b").status_code == 204
    assert api.delete(f"{API}/plans/{sweep.json()['id']}").status_code == 204
    assert api.delete(f"{API}/team/accelerators/our-h100").status_code == 204


def test_migration_indexes_plans_saved_before_it(url: str) -> None:
    engine = make_engine(url)
    migrate(engine, "0003")
    now = "2026-01-01 00:00:00"
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO team_models (id, name, config, source, notes, created_at, updated_at)"
                " VALUES ('old-model', 'm', :config, '', '', :t, :t)"
            ),
            {"config": json.dumps(model_entry("llama-3-8b")["config"]), "t": now},
        )
        c.execute(
            text(
                "INSERT INTO plans (id, name, description, tags, kind, request, saved_result,"
                " estimator_version, revision, created_at, updated_at) VALUES ('p1', 'old',"
                " '', :tags, 'training', :request, '{}', '0.1.0', 1, :t, :t)"
            ),
            {
                "tags": json.dumps(["legacy", "q1"]),
                "request": json.dumps({"model": "old-model"}),
                "t": now,
            },
        )
    migrate(engine)
    from app.store.plans import PlanStore

    store = PlanStore(url)
    assert [p["id"] for p in store.list(tag="legacy")] == ["p1"]
    with pytest.raises(TeamInUse) as err:
        TeamStore(store.engine).delete("models", "old-model")
    assert err.value.plans == [{"id": "p1", "name": "old"}]
    store.engine.dispose()
    engine.dispose()


def test_plans_stay_within_the_size_cap(api: TestClient) -> None:
    """A pasted config with a 950 kB junk key is stored as the keys the reader uses (the same
    numbers); a plan still over the cap is refused 413; a list of many plans stays small."""
    config = {**model_entry("llama-3-8b")["config"], "junk": "x" * 950_000}
    request = {"model": config, "num_gpus": 8}
    r = api.post(f"{API}/plans", json={"name": "junk", "kind": "training", "request": request})
    assert r.status_code == 201, r.text[:300]
    stored = r.json()
    assert len(json.dumps(stored)) < 65_536
    assert "junk" not in stored["request"]["model"]
    assert stored["saved_result"]["dropped_config_keys"] == ["junk", "rms_norm_eps", "rope_theta"]
    estimate = api.post(f"{API}/training/estimate", json=request).json()
    assert stored["saved_result"]["step_s"] == estimate["time"]["step_s"]
    # a key the reader uses, padded past the cap: nothing can be left out
    used_key_too_big = {**model_entry("llama-3-8b")["config"]}
    used_key_too_big["num_hidden_layers"] = 4096
    used_key_too_big["layer_types"] = ["full_attention"] * 4096
    big = {"name": "big", "kind": "training", "request": {"model": used_key_too_big, "num_gpus": 8}}
    refused = api.post(f"{API}/plans", json=big)
    assert refused.status_code == 413, refused.text[:300]
    assert refused.json()["detail"][0]["field"] == "request"
    team = api.post(f"{API}/team/models", json={"id": "junk-8b", "name": "8B", "config": config})
    assert team.status_code == 201 and len(json.dumps(team.json())) < 65_536
    assert "junk" not in team.json()["config"] and "junk" in team.json()["notes"]
    on_team = api.post(f"{API}/training/estimate", json={**request, "model": "junk-8b"}).json()
    assert on_team["time"]["step_s"] == estimate["time"]["step_s"]
    for i in range(30):
        api.post(f"{API}/plans", json={"name": f"j{i}", "kind": "training", "request": request})
    listing = api.get(f"{API}/plans", params={"limit": 500})
    assert len(listing.json()) == 31 and len(listing.content) < 31 * 65_536


def test_acknowledged_plans_survive_a_kill_mid_write(url: str) -> None:
    """16 writers save plans as fast as they can; the server is killed with SIGKILL mid-way.
    After a restart every plan it acknowledged (201) is stored, whole, and found by its tag."""
    acknowledged: dict[str, tuple[str, str]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(w: int, base: str) -> None:
        with httpx.Client(base_url=base, timeout=10) as c:
            n = 0
            while not stop.is_set():
                name, tag = f"w{w}-{n}", f"writer-{w}"
                body = {"name": name, "tags": [tag], "kind": "training", "request": REQUEST}
                try:
                    r = c.post(f"{API}/plans", json=body)
                except httpx.TransportError:
                    return
                if r.status_code == 201:
                    with lock:
                        acknowledged[r.json()["id"]] = (name, tag)
                n += 1

    with running_server({"DATABASE_URL": url}) as (base, proc):
        threads = [threading.Thread(target=writer, args=(w, base)) for w in range(16)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while len(acknowledged) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        stop.set()
        for t in threads:
            t.join(15)
    assert len(acknowledged) >= 40
    with running_server({"DATABASE_URL": url}) as (base, _):
        stored = httpx.get(f"{base}{API}/plans", params={"limit": 500}, timeout=30).json()
        by_id = {p["id"]: p for p in stored}
        for plan_id, (name, tag) in acknowledged.items():
            assert plan_id in by_id, f"acknowledged plan {name} was lost"
            assert by_id[plan_id]["name"] == name and by_id[plan_id]["request"] == REQUEST
            assert by_id[plan_id]["tags"] == [tag]
        for p in stored:  # nothing torn: every stored plan opens and is found by its tag
            opened = httpx.get(f"{base}{API}/plans/{p['id']}", timeout=30).json()
            assert opened["current_error"] is None
            found = httpx.get(f"{base}{API}/plans", params={"tag": p["tags"][0], "limit": 500})
            assert p["id"] in {x["id"] for x in found.json()}
