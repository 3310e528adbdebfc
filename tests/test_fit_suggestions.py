"""A plan that does not fit (issue 23, item 7): its speed and cost are greyed out, and the
answer proposes the nearest layouts that fit, each a link to its plan."""

from __future__ import annotations

import re
from html import unescape

from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)
MISSES = {"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": 8}
LAYOUT = ("tp", "pp", "zero_stage")


def _with(changes: dict[str, object]) -> dict[str, object]:
    """The API request of ``MISSES`` with a suggestion's changes (page inputs)."""
    layout = {k: v for k, v in changes.items() if k in LAYOUT}
    return {**MISSES, **{k: v for k, v in changes.items() if k not in LAYOUT}, "layout": layout}


def test_suggestions_fit_and_change_little() -> None:
    out = client.post("/api/v1/training/estimate", json=MISSES).json()
    assert out["memory_per_gpu"]["fits"] is False
    suggestions = out["fit_suggestions"]
    assert 1 <= len(suggestions) <= 3
    for s in suggestions:
        assert 1 <= len(s["changes"]) <= 2
        again = client.post("/api/v1/training/estimate", json=_with(s["changes"])).json()
        assert again["memory_per_gpu"]["fits"] is True
        assert again["memory_per_gpu"]["total_bytes"] == s["memory_bytes"]
        assert again["throughput"]["tokens_per_s"] == s["tokens_per_s"]
    # on the plan's own 8 GPUs before any that adds GPUs
    assert "num_gpus" not in suggestions[0]["changes"]
    fits = client.post("/api/v1/training/estimate", json={**MISSES, "num_gpus": 64}).json()
    assert fits["memory_per_gpu"]["fits"] is True and fits["fit_suggestions"] is None


def test_page_greys_out_speed_and_links_the_suggestions() -> None:
    page = client.get("/training", params=MISSES)
    assert page.status_code == 200
    assert '<dl class="kpis void">' in page.text
    section = page.text[page.text.index('id="fit-suggestions"') :]
    links = [unescape(h) for h in re.findall(r'<li><a href="([^"]+)"', section)]
    assert links
    followed = client.get(links[0])
    assert 'class="verdict ok"' in followed.text and "kpis void" not in followed.text


def test_nothing_near_fits_says_so() -> None:
    far = {"model": "llama-3-70b", "accelerator": "h100-sxm-80gb", "num_gpus": 8}
    out = client.post("/api/v1/training/estimate", json={**far, "layout": {"zero_stage": 0}})
    assert out.json()["fit_suggestions"] == []
    page = client.get("/training", params={**far, "zero_stage": 0})
    assert "No layout within two changes" in page.text and 'href="/sweep?' in page.text


def test_the_search_stops_at_its_deadline(monkeypatch: object) -> None:
    # A huge model's plan costs ~50 ms an estimate: the search answers with what it found by
    # its deadline (here none: the deadline has passed before the first try).
    from app import resolve

    monkeypatch.setattr(resolve, "FIT_SEARCH_S", -1.0)  # type: ignore[attr-defined]
    out = client.post("/api/v1/training/estimate", json=MISSES).json()
    assert out["memory_per_gpu"]["fits"] is False and out["fit_suggestions"] == []
