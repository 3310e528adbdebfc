"""Saved plans against the embedded SQLite store and a real PostgreSQL server started on
loopback for the run (Debian's postgresql, which ``make test`` installs): CRUD, migrations from
empty and from the previous revision, persistence across a restart, 16 concurrent writers with
no lost or torn plan, and invalid payloads refused without touching stored data."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.main import create_app
from app.store.plans import PlanStore, make_engine, migrate

REQUEST = {"model": "llama-3-8b", "num_gpus": 8, "layout": {"tp": 2}}


def _save(
    store: PlanStore, name: str = "plan", request: dict[str, Any] | None = None
) -> dict[str, Any]:
    return store.create(
        name=name,
        description="d",
        tags=["t"],
        kind="training",
        request=request or REQUEST,
        saved_result={"step_s": 1.0},
        estimator_version="0.1.0",
    )


def test_crud_and_restart(url: str) -> None:
    store = PlanStore(url)
    plan = _save(store, "70B on 64 H100")
    assert store.get(plan["id"])["request"] == REQUEST
    assert [p["id"] for p in store.list("64 H100")] == [plan["id"]]
    assert store.list(tag="t") and not store.list(tag="nope")
    edited = store.update(plan["id"], name="renamed", tags=["a", "b"])
    assert edited is not None and edited["revision"] == 2 and edited["tags"] == ["a", "b"]
    store.engine.dispose()
    reopened = PlanStore(url)  # a restart: a new engine, migrations find the schema current
    assert reopened.get(plan["id"])["name"] == "renamed"
    assert reopened.delete(plan["id"]) and reopened.get(plan["id"]) is None
    assert reopened.update("missing", name="x") is None and not reopened.delete("missing")
    reopened.engine.dispose()


def test_migrates_from_the_previous_revision(url: str) -> None:
    engine = make_engine(url)
    migrate(engine, "0001")  # the first schema: no tags, no saved numbers, no revision
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO plans (id, name, description, kind, request, estimator_version,"
                " created_at, updated_at) VALUES ('old', 'saved before', '', 'training',"
                " :req, '0.0.9', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            ),
            {"req": json.dumps(REQUEST)},
        )
    engine.dispose()
    store = PlanStore(url)  # upgrades to head
    old = store.get("old")
    assert old is not None and old["request"] == REQUEST
    assert old["tags"] == [] and old["revision"] == 1 and old["saved_result"] == {}
    store.engine.dispose()


def test_sixteen_concurrent_writers(url: str) -> None:
    store = PlanStore(url)
    shared = _save(store, "shared")
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for j in range(5):
                request = {**REQUEST, "seq_len": 1024 + 16 * i + j}
                _save(store, f"w{i}-{j}", request)
                store.update(shared["id"], description=f"by {i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    plans = store.list(limit=500)
    assert len(plans) == 1 + 16 * 5
    for p in plans:  # no torn plan: each one's request is the one its writer sent
        if p["name"].startswith("w"):
            i, j = map(int, p["name"][1:].split("-"))
            assert p["request"]["seq_len"] == 1024 + 16 * i + j
    assert store.get(shared["id"])["revision"] == 1 + 16 * 5  # no lost update
    store.engine.dispose()


def test_api_refuses_bad_payloads_and_keeps_data(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("PLANNER_API_TOKEN", "s3cret")
    with TestClient(create_app()) as client:
        auth = {"Authorization": "Bearer s3cret"}
        body = {"name": "good", "kind": "training", "request": REQUEST}
        assert client.post("/api/v1/plans", json=body).status_code == 401  # no token
        good = client.post("/api/v1/plans", json=body, headers=auth)
        assert good.status_code == 201
        pid = good.json()["id"]
        bad_request = {**body, "request": {**REQUEST, "layout": {"tp": 3}}}
        assert client.post("/api/v1/plans", json=bad_request, headers=auth).status_code == 422
        assert client.patch(f"/api/v1/plans/{pid}", json={"request": {"model": "nope"}},
                            headers=auth).status_code == 404  # fmt: skip
        assert (
            client.post("/api/v1/plans", json={**body, "kind": "x"}, headers=auth).status_code
            == 422
        )
        plans = client.get("/api/v1/plans").json()  # reads need no token
        assert len(plans) == 1 and plans[0]["request"] == REQUEST and plans[0]["revision"] == 1
        opened = client.get(f"/api/v1/plans/{pid}").json()
        assert opened["changed"] == {} and opened["current_result"]["fits"] is not None
        assert client.delete(f"/api/v1/plans/{pid}", headers=auth).status_code == 204
    monkeypatch.setenv("PLANNER_READ_ONLY", "1")
    with TestClient(create_app()) as client:
        assert client.post("/api/v1/plans", json=body, headers=auth).status_code == 403


def test_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli.commands import main

    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(REQUEST))
    assert main(["plans", "save", str(plan), "--name", "8B on 8", "--tag", "q3"]) == 0
    pid = capsys.readouterr().out.strip()
    assert main(["plans", "list", "--tag", "q3"]) == 0 and "8B on 8" in capsys.readouterr().out
    assert main(["plans", "show", pid]) == 0 and '"current_result"' in capsys.readouterr().out
    plan.write_text(json.dumps({**REQUEST, "layout": {"tp": 3}}))
    assert main(["plans", "save", str(plan), "--name", "bad"]) == 2
    assert main(["plans", "delete", pid]) == 0 and main(["plans", "delete", pid]) == 2
