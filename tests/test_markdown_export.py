"""Plan export as a short Markdown summary for a design doc or a ticket (issue 23, item 5): the
numbers, the layout, the assumptions, the accuracy line and a link back, for training and
serving plans, both sweeps and saved plans."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import format as fmt
from app.main import app, create_app

client = TestClient(app)
TRAINING = {"model": "llama-3-70b", "accelerator": "h100-sxm-80gb", "num_gpus": "64", "tp": "4",
            "pp": "4", "tokens": "1e12"}  # fmt: skip


def _md(path: str, **params: str) -> str:
    r = client.get(path, params={**params, "format": "md"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    return r.text


def _table(md: str) -> dict[str, str]:
    return dict(re.findall(r"^\| ([^|]+?) \| ([^|]+?) \|$", md, re.M))


def test_names_and_notes_are_escaped_not_markup() -> None:
    """A name from a pasted config is written as text: no tag, link or table cell of its own."""
    hostile = "<img src=x onerror=alert(1)> [click](http://evil) | cell *x* `y` \\"
    shown = fmt.md(hostile)
    assert "<" not in shown and ">" not in shown and "&lt;img" in shown
    assert "\\[click\\]" in shown and "\\|" in shown and "\\*x\\*" in shown and "\\`y\\`" in shown
    assert fmt.md("line one\nline two") == "line one line two"  # a note stays one list item


def test_training_plan() -> None:
    md = _md("/training", **TRAINING)
    api = client.get("/training", params={**TRAINING, "format": "json"}).json()
    assert md.startswith("## Training plan: llama-3-70b on 64 × h100-sxm-80gb")
    rows = _table(md)
    assert rows["GPUs"] == "64" and rows["Fits"] == (
        "yes" if api["memory_per_gpu"]["fits"] else "no"
    )
    assert rows["Tokens/s"] == f"{api['throughput']['tokens_per_s']:,.0f}"
    assert "tp 4 · pp 4 · dp 4" in md
    assert api["accuracy"]["metrics"][0]["summary"] in md  # the accuracy line
    assert all(fmt.md(note) in md for note in api["notes"])  # the assumptions, escaped
    link = re.search(r"\[Open this plan in LLM Planner\]\(([^)]+)\)", md)
    assert link is not None and link.group(1).startswith("http://testserver/training?")
    assert "format=md" not in link.group(1) and "num_gpus=64" in link.group(1)
    # the planner page links it
    assert 'id="markdown-link"' in client.get("/training", params=TRAINING).text


def test_serving_plan_and_sweeps() -> None:
    md = _md("/serving", model="llama-3-8b", concurrency="16")
    assert md.startswith("## Serving plan: llama-3-8b")
    assert {"TTFT (at this load)", "TPOT (at this load)", "$ per 1M output tokens"} <= _table(
        md
    ).keys()
    sweep = _md("/sweep", model="llama-3-8b", num_gpus="8", tp="1,2")
    body = [line for line in sweep.splitlines() if re.match(r"^\| \d+ \|", line)]
    out = client.get("/sweep", params={"model": "llama-3-8b", "num_gpus": "8", "tp": "1,2",
                                       "format": "json"}).json()  # fmt: skip
    assert len(body) == len(out["recommendations"]) >= 1
    assert f"{out['counts']['feasible']:,} feasible" in sweep
    serving = _md("/sweep", mode="serving", model="llama-3-8b", accelerator="h100-sxm-80gb")
    assert serving.startswith("## Serving sweep: llama-3-8b") and "| 1 |" in serving
    # a refused plan has no summary: the JSON twin's refusal
    assert (
        client.get("/training", params={**TRAINING, "tp": "3", "format": "md"}).status_code == 422
    )


@pytest.fixture
def store_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'md.db'}")
    with TestClient(create_app()) as c:
        yield c


def test_saved_plan_links_its_share_link(store_client: TestClient) -> None:
    c = store_client
    r = c.post("/plans", data={"kind": "training", "query": "model=llama-3-8b&num_gpus=8",
                               "name": "eight"}, follow_redirects=False)  # fmt: skip
    plan_id = r.headers["location"].rsplit("/", 1)[1]
    md = c.get(f"/plans/{plan_id}", params={"format": "md"}).text
    assert md.startswith("## Training plan: llama-3-8b on 8 ×")
    assert f"(http://testserver/plans/{plan_id})" in md
    assert 'id="markdown-link"' in c.get(f"/plans/{plan_id}").text
