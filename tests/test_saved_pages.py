"""Saved-plan pages on the server side: saving from each planner page's form, the share link
(saved numbers against numbers now, changes highlighted, JSON twin equal to the API), list
search and tag filter, compare, edit/duplicate/delete forms, user text escaped, refusals
(bad plans, token, read-only, unknown ids) shown in words with stored plans unchanged."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app

HOSTILE = '<script>alert("x")</script>'
TRAINING_QUERY = "model=llama-3-8b&num_gpus=8&tp=2&tokens=1e11"


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'pages.db'}")
    with TestClient(create_app()) as c:
        yield c


def _save(c: TestClient, kind: str, query: str, name: str = "plan", tags: str = "") -> str:
    r = c.post(
        "/plans",
        data={"kind": kind, "query": query, "name": name, "tags": tags},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    return str(r.headers["location"]).rsplit("/", 1)[1]


def _message(html: str) -> str:
    found = re.search(r'id="message">([^<]*)<', html)
    return found.group(1) if found else ""


def test_each_planner_page_offers_to_save_and_saves(client: TestClient) -> None:
    c = client
    pages = {
        "training": f"/training?{TRAINING_QUERY}",
        "inference": "/serving?model=llama-3-8b",
        "training_sweep": "/sweep?model=llama-3-8b&num_gpus=8&tp=1,2",
        "inference_sweep": "/sweep?mode=serving&model=llama-3-8b&accelerator=h100-sxm-80gb",
    }
    for kind, url in pages.items():
        page = c.get(url).text
        assert f'name="kind" value="{kind}"' in page
        query = re.search(r'name="query" value="([^"]*)"', page)
        assert query is not None
        pid = _save(c, kind, query.group(1).replace("&amp;", "&"), f"{kind} plan")
        opened = c.get(f"/plans/{pid}?format=json").json()
        assert opened["kind"] == kind and opened["changed"] == {}
        assert opened == c.get(f"/api/v1/plans/{pid}").json()  # the JSON twin is the API's
        planner = re.search(r'href="([^"]*)" id="open-planner"', c.get(f"/plans/{pid}").text)
        assert planner is not None  # and the planner it links to shows the same plan
        assert c.get(planner.group(1).replace("&amp;", "&")).status_code == 200
    assert "Save this plan" not in c.get("/training?blank=1").text  # nothing evaluated, no form
    # the first visit's worked example is a plan like any other: its query travels with it
    example = re.search(r'name="query" value="([^"]*)"', c.get("/training").text)
    assert example is not None and "model=llama-3.1-70b" in example.group(1)


def test_share_link_shows_saved_and_current_numbers(client: TestClient) -> None:
    c = client
    pid = _save(c, "training", TRAINING_QUERY, HOSTILE, f"q3, {HOSTILE}")
    # As if saved by an older estimator with other numbers: the page marks what changed.
    store = c.app.state.store  # type: ignore[attr-defined]
    store.update(pid, saved_result={"step_s": 123.0, "fits": True}, estimator_version="0.0.1")
    page = c.get(f"/plans/{pid}").text
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert "Saved with estimator 0.0.1" in page and "a newer estimator" in page
    changed = re.findall(r'<tr class="changed" data-key="([a-z_0-9]+)"', page)
    assert "step_s" in changed and "fits" not in changed  # fits is as saved
    assert "123.00 s" in page
    listing = c.get("/plans").text
    assert HOSTILE not in listing and "&lt;script&gt;" in listing


def test_list_search_tags_and_compare(client: TestClient) -> None:
    c = client
    a = _save(c, "training", TRAINING_QUERY, "eight GPUs", "q3")
    b = _save(c, "training", "model=llama-3-8b&num_gpus=16&tp=2&tokens=1e11", "sixteen", "q4")
    s = _save(c, "inference", "model=llama-3-8b", "serving it", "q3")
    assert [p["id"] for p in c.get("/plans?q=eight&format=json").json()] == [a]
    assert {p["id"] for p in c.get("/plans?tag=q3&format=json").json()} == {a, s}
    assert "sixteen" not in c.get("/plans?tag=q3").text
    page = c.get(f"/plans/compare?ids={a},{b},{s}")
    assert page.status_code == 200
    assert 'id="fig-memory"' in page.text and 'id="fig-time"' in page.text
    # serving plans get the serving compare charts (memory, latency at load, throughput curve)
    s2 = _save(c, "inference", "model=llama-3-8b&accelerator=h200-sxm-141gb", "on H200", "q3")
    served = c.get(f"/plans/compare?ids={s},{s2}").text
    assert re.findall(r'id="fig-([\w-]+)"', served) == [
        "serving-memory",
        "serving-latency",
        "serving-curve",
    ]
    twin = c.get(f"/plans/compare?ids={a}&ids={b}&format=json").json()
    assert list(twin) == [a, b]
    assert twin[a]["current_result"]["step_s"] > twin[b]["current_result"]["step_s"]
    assert c.get(f"/plans/compare?ids={a}").status_code == 422  # one is not a comparison
    missing = c.get(f"/plans/compare?ids={a},nope")
    assert missing.status_code == 404 and "nope" in _message(missing.text)


def _rows(html: str, tbody: str) -> list[list[str]]:
    """The rows of one of the compare page's input tables: label, then each plan's value."""
    body = re.search(rf'<tbody id="{tbody}">(.*?)</tbody>', html, re.S)
    assert body is not None, tbody
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)
        ]
        for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body.group(1), re.S)
    ]


def test_saved_compare_names_plans_and_shows_what_differs(client: TestClient) -> None:
    """Issue 39, item 8: the plans headed by their saved names (a name saved twice told apart),
    never "Plan A"; their inputs listed, the ones that differ first and marked, then the ones
    the same in all; an input of one kind only is "—" in a plan of the other."""
    c = client
    a = _save(c, "training", TRAINING_QUERY, "eight GPUs")
    b = _save(c, "training", "model=llama-3-8b&num_gpus=16&tp=4&tokens=1e11", "sixteen GPUs")
    page = c.get(f"/plans/compare?ids={a},{b}").text
    headings = re.findall(r'<span class="plan-name">(.*?)</span>', page)
    assert headings[:2] == ["eight GPUs", "sixteen GPUs"] and "Plan A" not in page
    assert "Inputs that differ" in page and "Same in all plans" in page
    differ = _rows(page, "inputs-differ")
    assert differ == [["GPUs", "8", "16"], ["TP", "2", "4"]]
    assert page.count('<tr class="differ"') == 2
    same = {row[0]: row[1:] for row in _rows(page, "inputs-same")}
    assert same["Model"] == ["llama-3-8b"] and same["Tokens to train"] == ["1e11"]
    assert same["PP"] == ["1"]  # left to its default, it reads as the planner's default
    # one name saved twice: told apart (by revision once one was edited), not by a letter
    twin = _save(c, "training", TRAINING_QUERY, "eight GPUs")
    c.post(f"/plans/{twin}/edit", data={"name": "eight GPUs", "description": "again"})
    named = c.get(f"/plans/compare?ids={a},{twin}").text
    assert re.findall(r'<span class="plan-name">(.*?)</span>', named)[:2] == [
        "eight GPUs · rev 1",
        "eight GPUs · rev 2",
    ]
    assert "Inputs that differ" in named and "None: the plans' inputs are the same." in named
    # a training plan beside a serving plan: each kind's own inputs, "—" in the other
    s = _save(c, "inference", "model=llama-3-8b&concurrency=8", "serving it")
    mixed = {
        row[0]: row[1:] for row in _rows(c.get(f"/plans/compare?ids={a},{s}").text, "inputs-differ")
    }
    assert mixed["Concurrency"] == ["—", "8"] and mixed["Tokens to train"] == ["1e11", "—"]
    assert "Model" not in mixed  # the same model in both


def test_edit_duplicate_delete_forms(client: TestClient) -> None:
    c = client
    pid = _save(c, "training", TRAINING_QUERY, "first")
    r = c.post(f"/plans/{pid}/edit", data={"name": "renamed", "description": "d", "tags": "x, y"})
    assert r.status_code == 200 and "renamed" in r.text
    assert c.get(f"/api/v1/plans/{pid}").json()["tags"] == ["x", "y"]
    bad = c.post(f"/plans/{pid}/edit", data={"name": "", "tags": ""})
    assert bad.status_code == 422 and "name" in _message(bad.text)
    assert c.get(f"/api/v1/plans/{pid}").json()["name"] == "renamed"  # unchanged
    copy = c.post(f"/plans/{pid}/duplicate", follow_redirects=False)
    copy_id = str(copy.headers["location"]).rsplit("/", 1)[1]
    assert c.get(f"/api/v1/plans/{copy_id}").json()["name"] == "renamed (copy)"
    assert c.post(f"/plans/{copy_id}/delete", follow_redirects=False).status_code == 303
    assert c.get(f"/plans/{copy_id}").status_code == 404
    assert c.post("/plans/nope/delete").status_code == 404


def test_refusals_in_words_and_nothing_stored(client: TestClient) -> None:
    c = client
    for query, status, words in (
        ("model=llama-3-8b&tp=3", 422, "tp=3 must divide"),
        ("model=not-a-model", 404, "unknown model id 'not-a-model'"),
    ):
        r = c.post("/plans", data={"kind": "training", "query": query, "name": "bad"})
        assert r.status_code == status and words in _message(r.text).replace("&#39;", "'")
        assert "Traceback" not in r.text
    r = c.post("/plans", data={"kind": "nonsense", "query": TRAINING_QUERY, "name": "x"})
    assert r.status_code == 422
    assert c.get("/plans?format=json").json() == []
    unknown = c.get("/plans/no-such-plan")
    assert unknown.status_code == 404 and "no-such-plan" in _message(unknown.text)


def test_token_and_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'pages.db'}")
    monkeypatch.setenv("PLANNER_API_TOKEN", "s3cret")
    with TestClient(create_app()) as c:
        assert 'name="token"' in c.get(f"/training?{TRAINING_QUERY}").text
        form = {"kind": "training", "query": TRAINING_QUERY, "name": "x"}
        assert c.post("/plans", data=form).status_code == 401
        assert c.post("/plans", data={**form, "token": "wrong"}).status_code == 401
        saved = c.post("/plans", data={**form, "token": "s3cret"}, follow_redirects=False)
        pid = str(saved.headers["location"]).rsplit("/", 1)[1]
        assert c.post(f"/plans/{pid}/delete").status_code == 401
        assert c.get(f"/plans/{pid}").status_code == 200  # reads need no token
    monkeypatch.setenv("PLANNER_READ_ONLY", "1")
    with TestClient(create_app()) as c:
        page = c.get(f"/training?{TRAINING_QUERY}").text
        assert "read-only" in page and 'action="/plans"' not in page
        assert c.post("/plans", data={**form, "token": "s3cret"}).status_code == 403
        assert c.post(f"/plans/{pid}/delete", data={"token": "s3cret"}).status_code == 403
        assert len(c.get("/plans?format=json").json()) == 1
