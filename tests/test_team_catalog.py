"""The team catalog against the embedded SQLite store and a real PostgreSQL server (the
``url`` fixture): CRUD of private accelerators and models over the API, each usable wherever a
public id is (training and inference estimates, sweeps, saved plans, the listings), the
negotiated price as the default cost, refusals (public or taken ids, bad specs and configs,
token, read-only) that leave stored entries unchanged, the migration from revision 0002 with
existing plans kept, and a write seen by a second app on the same database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from app.main import create_app
from app.resolve import run_training
from app.schemas.training import TrainingRequest
from app.store import catalog as team
from app.store.plans import PlanStore, make_engine, migrate
from app.store.team import TeamStore
from estimator import accelerator_entry

AUTH = {"Authorization": "Bearer s3cret"}
# A team's H100 at a negotiated price, its figures copied from the public entry.
H100 = accelerator_entry("h100-sxm-80gb")
TEAM_GPU: dict[str, Any] = {
    "id": "h100-reserved",
    "name": "H100 (reserved, <b>east</b>)",
    "vendor": "nvidia",
    "memory_gb": H100["memory_gb"],
    "memory_bytes_reported": H100["memory_bytes_reported"],
    "hbm_tb_per_s": H100["hbm_tb_per_s"],
    "dense_tflops": {k: v for k, v in H100["dense_tflops"].items() if v},
    "scale_up_gb_per_s": H100["scale_up"]["gb_per_s_unidir"],
    "scale_up_domain": H100["scale_up"]["domain_gpus"],
    "scale_out_gbit_per_s": H100["scale_out_gbit_per_s"],
    "gpus_per_node": 8,
    "price_usd_per_gpu_hour": 1.25,
    "source": "our 2026 reservation",
}
CONFIG = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
BAD_CONFIG = {**CONFIG, "num_attention_heads": 0}
TEAM_MODEL = {"id": "our-2b", "name": "Our 2B", "config": CONFIG, "source": "config.json"}
TRAINING = {"model": "our-2b", "accelerator": "h100-reserved", "num_gpus": 8, "tokens": 1e11}


@pytest.fixture
def client(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The service on ``url`` with a token, and the team's accelerator and model stored."""
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("PLANNER_API_TOKEN", "s3cret")
    with TestClient(create_app()) as c:
        assert c.post("/api/v1/team/accelerators", json=TEAM_GPU, headers=AUTH).status_code == 201
        assert c.post("/api/v1/team/models", json=TEAM_MODEL, headers=AUTH).status_code == 201
        yield c


def _stored(c: TestClient) -> tuple[Any, Any]:
    return c.get("/api/v1/team/accelerators").json(), c.get("/api/v1/team/models").json()


def test_crud(client: TestClient) -> None:
    c = client
    got = c.get("/api/v1/team/accelerators/h100-reserved").json()
    assert got["price_usd_per_gpu_hour"] == 1.25 and got["dense_tflops"] == TEAM_GPU["dense_tflops"]
    edited = c.put(
        "/api/v1/team/accelerators/h100-reserved",
        json={**{k: v for k, v in TEAM_GPU.items() if k != "id"}, "price_usd_per_gpu_hour": 1.1},
        headers=AUTH,
    )
    assert edited.status_code == 200 and edited.json()["price_usd_per_gpu_hour"] == 1.1
    assert c.get("/api/v1/team/models/our-2b").json()["config"] == CONFIG
    put = {"name": "Our 2B v2", "config": {**CONFIG, "num_hidden_layers": 18}}
    assert c.put("/api/v1/team/models/our-2b", json=put, headers=AUTH).status_code == 200
    assert c.get("/api/v1/models/our-2b").json()["num_layers"] == 18  # the listing sees it
    assert c.put("/api/v1/team/models/nope", json=put, headers=AUTH).status_code == 404
    assert c.delete("/api/v1/team/models/our-2b", headers=AUTH).status_code == 204
    assert c.delete("/api/v1/team/models/our-2b", headers=AUTH).status_code == 404
    assert c.get("/api/v1/team/models").json() == []
    assert c.post("/api/v1/training/estimate", json=TRAINING).status_code == 404


def test_usable_wherever_a_public_id_is(client: TestClient) -> None:
    c = client
    estimate = c.post("/api/v1/training/estimate", json=TRAINING).json()
    public = c.post(
        "/api/v1/training/estimate", json={**TRAINING, "accelerator": "h100-sxm-80gb"}
    ).json()
    # Same hardware figures, so the same step; the cost is the negotiated price's.
    assert estimate["time"]["step_s"] == public["time"]["step_s"]
    cost = estimate["cost"]
    assert cost["price_usd_per_gpu_hour"] == 1.25 and "team catalog" in cost["price_source"]
    assert cost["usd"] == pytest.approx(cost["gpu_hours"] * 1.25)
    assert cost["usd"] < public["cost"]["usd"]  # the public default is $3.00
    # A team accelerator has no generation in common with the published runs: its accuracy
    # block reads the nearest records by model class and scale, and says what they share.
    accuracy = estimate["accuracy"]["metrics"][0]
    assert accuracy["n"] > 0 and "on h100-reserved" not in accuracy["matched_on"]

    serving = c.post(
        "/api/v1/inference/estimate", json={"model": "our-2b", "accelerator": "h100-reserved"}
    )
    assert serving.status_code == 200 and serving.json()["cost"]["price_usd_per_gpu_hour"] == 1.25

    sweep = c.post(
        "/api/v1/training/sweep",
        json={
            "model": "our-2b",
            "accelerator": ["h100-reserved", "h100-sxm-80gb"],
            "num_gpus": [8],
            "tokens": 1e11,
            "objective": "cost",
        },
    ).json()
    assert sweep["recommendations"][0]["row"]["accelerator"] == "h100-reserved"  # cheaper
    serving_sweep = c.post(
        "/api/v1/inference/sweep",
        json={"model": "our-2b", "accelerator": ["h100-reserved"], "layout": {"tp": [1]}},
    )
    assert {r["accelerator"] for r in serving_sweep.json()["rows"]} == {"h100-reserved"}
    for deep_dive in ("comms", "layers", "timeline"):
        assert c.post(f"/api/v1/training/{deep_dive}", json=TRAINING).status_code == 200

    saved = c.post(
        "/api/v1/plans",
        json={"name": "team plan", "kind": "training", "request": TRAINING},
        headers=AUTH,
    ).json()
    opened = c.get(f"/api/v1/plans/{saved['id']}").json()
    assert opened["changed"] == {} and opened["current_result"]["cost_usd"] == cost["usd"]

    accelerators = {a["id"]: a for a in c.get("/api/v1/accelerators").json()}
    assert accelerators["h100-reserved"]["scope"] == "team"
    assert accelerators["h100-sxm-80gb"]["scope"] == "public"
    assert accelerators["h100-reserved"]["price_usd_per_gpu_hour"] == 1.25
    assert accelerators["h100-reserved"]["memory_bytes"] == H100["memory_bytes_reported"]
    models = {m["id"]: m for m in c.get("/api/v1/models").json()}
    assert models["our-2b"]["scope"] == "team" and models["our-2b"]["num_layers"] == 16

    page = c.get("/training").text  # the pickers list the team's entries, marked
    assert ">h100-reserved (team)</option>" in page and ">our-2b (team)</option>" in page
    assert "H100 (reserved, &lt;b&gt;east&lt;/b&gt;)" in c.get("/catalog").text


def test_refusals_keep_stored_entries(client: TestClient) -> None:
    c = client
    before = _stored(c)
    acc, mod = "/api/v1/team/accelerators", "/api/v1/team/models"
    x = {**TEAM_GPU, "id": "x"}
    refused = [
        ("public id", c.post, acc, {**TEAM_GPU, "id": "h100-sxm-80gb"}, 409),
        ("taken id", c.post, acc, TEAM_GPU, 409),
        ("public model id", c.post, mod, {**TEAM_MODEL, "id": "llama-3-8b"}, 409),
        ("taken model id", c.post, mod, TEAM_MODEL, 409),
        ("bad id", c.post, acc, {**TEAM_GPU, "id": "Bad Id!"}, 422),
        ("no rates", c.post, acc, {**x, "dense_tflops": {}}, 422),
        ("bad format", c.post, acc, {**x, "dense_tflops": {"bf17": 1}}, 422),
        ("negative memory", c.post, acc, {**x, "memory_gb": -1}, 422),
        ("unknown field", c.post, acc, {**x, "hbm_gib": 1}, 422),
        ("bad config", c.post, mod, {**TEAM_MODEL, "id": "x", "config": BAD_CONFIG}, 422),
        ("config not read", c.put, f"{mod}/our-2b", {"name": "x", "config": BAD_CONFIG}, 422),
    ]
    for name, method, path, body, status in refused:
        r = method(path, json=body, headers=AUTH)
        assert (r.status_code, bool(r.json()["message"])) == (status, True), name
    bad = c.post(
        "/api/v1/team/models",
        json={**TEAM_MODEL, "id": "x", "config": BAD_CONFIG},
        headers=AUTH,
    ).json()
    assert bad["detail"][0]["field"].startswith("config.")  # names the config key
    other = {**TEAM_GPU, "id": "other"}
    assert c.post("/api/v1/team/accelerators", json=other).status_code == 401  # no token
    assert c.delete("/api/v1/team/accelerators/h100-reserved").status_code == 401
    assert _stored(c) == before


def test_read_only_refuses_writes(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("PLANNER_READ_ONLY", "1")
    with TestClient(create_app()) as c:
        assert c.post("/api/v1/team/accelerators", json=TEAM_GPU).status_code == 403
        assert c.post("/api/v1/team/models", json=TEAM_MODEL).status_code == 403
        assert c.get("/api/v1/team/accelerators").json() == []


def test_a_write_is_seen_by_another_worker(url: str) -> None:
    """Two stores on one database stand for two worker processes: each reads the other's
    writes through the revision counter, and resolution follows the bound store."""
    first, second = PlanStore(url), PlanStore(url)
    a, b = TeamStore(first.engine), TeamStore(second.engine)
    assert b.catalog().accelerators == {}
    a.create("accelerators", dict(TEAM_GPU))
    assert "h100-reserved" in b.catalog().accelerators
    assert b.catalog().prices == {"h100-reserved": 1.25}
    req = TrainingRequest.model_validate({**TRAINING, "model": "llama-3-8b"})
    with team.using(b):
        plan, _ = run_training(req)
        assert plan.price_usd_per_gpu_hour == 1.25
    a.delete("accelerators", "h100-reserved")
    assert b.catalog().accelerators == {}
    first.engine.dispose()
    second.engine.dispose()


def test_cli_resolution_from_settings(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the CLI calls: the configured store's team entries resolve while the block runs."""
    from app.settings import Settings

    store = PlanStore(url)
    TeamStore(store.engine).create("models", dict(TEAM_MODEL))
    monkeypatch.setenv("DATABASE_URL", url)
    req = TrainingRequest.model_validate({**TRAINING, "accelerator": "h100-sxm-80gb"})
    with team.using_settings(Settings.from_env()):
        plan, _ = run_training(req)
        assert plan.model.id == "our-2b"
    with pytest.raises(KeyError):  # unbound again after the block
        run_training(req)
    store.engine.dispose()


def test_migrates_from_0002_keeping_plans(url: str) -> None:
    engine = make_engine(url)
    migrate(engine, "0002")
    with engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO plans (id, name, description, kind, request, estimator_version,"
                " tags, saved_result, revision, created_at, updated_at) VALUES ('old',"
                " 'saved before', '', 'training', :req, '0.1.0', :tags, '{}', 3,"
                " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            ),
            {"req": json.dumps({"model": "llama-3-8b"}), "tags": json.dumps(["q3"])},
        )
    assert "team_accelerators" not in inspect(engine).get_table_names()
    engine.dispose()
    store = PlanStore(url)  # upgrades to head (0003)
    old = store.get("old")
    assert old is not None and old["tags"] == ["q3"] and old["revision"] == 3
    tables = set(inspect(store.engine).get_table_names())
    assert {"team_accelerators", "team_models", "team_catalog_revision"} <= tables
    assert TeamStore(store.engine).revision() == 0
    store.engine.dispose()
