"""A pasted config saved as a named team model from the pages (issue 23, item 7), and a model
picker that says when a pasted config takes its place."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app

CONFIG = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 8,
          "num_attention_heads": 8, "intermediate_size": 4096, "vocab_size": 32000}  # fmt: skip


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'team.db'}")
    with TestClient(create_app()) as c:
        yield c


def _save(c: TestClient, **form: str) -> object:
    data = {"config": json.dumps(CONFIG), "id": "our-1b", "name": "Our 1B", **form}
    return c.post("/catalog/team-models", data=data, follow_redirects=False)


def test_save_a_pasted_config_as_a_team_model(client: TestClient) -> None:
    c = client
    page = c.get("/catalog", params={"config": json.dumps(CONFIG)})
    assert 'id="save-team-model"' in page.text
    r = _save(c)
    assert r.status_code == 303 and r.headers["location"] == "/training?model=our-1b"  # type: ignore[attr-defined]
    stored = c.get("/api/v1/team/models/our-1b").json()
    assert stored["config"] == CONFIG and stored["name"] == "Our 1B"
    planner = c.get("/training?model=our-1b&num_gpus=8")
    assert planner.status_code == 200 and 'value="our-1b" selected' in planner.text
    assert "our-1b (team)" in planner.text
    # the same checks as the API: taken, public, unreadable, bad id
    for form, status, said in (
        ({}, 409, "already has id"),
        ({"id": "llama-3-8b"}, 409, "public catalog id"),
        (
            {"id": "x1", "config": json.dumps({"model_type": "llama"} | {"hidden_size": -1})},
            422,
            "hidden_size",
        ),
        ({"id": "Bad Id"}, 422, "id"),
    ):
        refused = _save(c, **form)
        assert refused.status_code == status, form  # type: ignore[attr-defined]
        assert said in refused.text  # type: ignore[attr-defined]


def test_picker_names_the_pasted_config(client: TestClient) -> None:
    page = client.get("/training", params={"model": "llama-3-8b", "config": json.dumps(CONFIG)})
    picker = re.search(r'<select id="f-model".*?</select>', page.text, re.S)
    assert picker is not None
    selected = re.findall(r'<option value="([^"]*)"\s*selected>', picker.group(0))
    assert selected == [""] and "(the pasted config below)" in picker.group(0)
