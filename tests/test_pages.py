"""The dashboard's server side: each page's JSON twin is the API's answer for the same plan,
refusals come back as a 422 page naming the input, and charts are built from the breakdowns."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from app.main import app
from app.web import charts
from app.web.static import IMMUTABLE

client = TestClient(app)
GIB = 2**30


def test_training_json_twin_is_the_api_answer() -> None:
    query = "model=llama-3-70b&num_gpus=64&tp=8&pp=2&recompute=selective&tokens=2e12"
    twin = client.get(f"/training?{query}&format=json").json()
    api = client.post(
        "/api/v1/training/estimate",
        json={
            "model": "llama-3-70b",
            "num_gpus": 64,
            "layout": {"tp": 8, "pp": 2},
            "recompute": "selective",
            "tokens": 2e12,
        },
    ).json()
    assert twin == api
    page = client.get(f"/training?{query}").text
    assert f"{api['memory_per_gpu']['total_bytes'] / GIB:,.1f} GiB" in page


def test_memory_chart_is_the_breakdown_against_capacity() -> None:
    result = client.get("/training?model=llama-3-8b&num_gpus=8&format=json").json()
    fig = charts.training_memory_figure(result)
    shown = sum(t["x"][0] for t in fig["data"]) * GIB
    assert (
        shown == result["memory_per_gpu"]["total_bytes"]
        or abs(shown / result["memory_per_gpu"]["total_bytes"] - 1) < 1e-12
    )
    (capacity,) = fig["layout"]["shapes"]
    assert capacity["x0"] == result["memory_per_gpu"]["capacity_bytes"] / GIB
    step = charts.training_time_figure(result)
    assert abs(sum(t["x"][0] for t in step["data"]) / result["time"]["step_s"] - 1) < 1e-12


def test_refusals_name_the_input() -> None:
    r = client.get("/training?model=llama-3-70b&tp=3")
    assert r.status_code == 422
    assert re.search(r'id="e-tp"[^>]*>[^<]*must divide num_attention_heads=64', r.text)
    r = client.get("/serving?model=llama-3-70b&concurrency=lots")
    assert r.status_code == 422 and 'id="e-concurrency"' in r.text
    r = client.get('/training?config={"hidden_size": 4096}')
    assert r.status_code == 422 and 'id="e-config"' in r.text and "model_type" in r.text
    r = client.get("/training?model=llama-3-70b&accelerator=h1000")
    assert r.status_code == 422 and 'id="e-accelerator"' in r.text
    assert "Traceback" not in r.text
    twin = client.get("/training?model=llama-3-70b&tp=3&format=json")
    assert twin.status_code == 422


def test_pages_render_and_catalog_twin() -> None:
    for path in ("/", "/training?blank=1", "/serving?blank=1", "/catalog"):
        r = client.get(path)
        assert r.status_code == 200 and "cdn" not in r.text.lower()
        # no figure, no Plotly: it is 0.5 MB of the first visit, gzipped
        assert "plotly" not in r.text and "charts.js" not in r.text
        assert re.search(r'<script src="/static/forms\.js\?v=[0-9a-f]{12}"></script>', r.text)
    twin = client.get("/catalog?format=json").json()
    assert any(
        m["id"] == "llama-2-7b" and m["params"]["total"] == 6_738_415_616 for m in twin["models"]
    )


def test_pages_that_draw_load_plotly_under_versioned_urls() -> None:
    for path in (
        "/training?model=llama-3-8b&num_gpus=8",
        "/serving?model=llama-3-8b",
        "/sweep?model=llama-3-8b&num_gpus=8",
        "/compare?a.model=llama-3-8b&b.model=llama-3-8b&b.num_gpus=16",
    ):
        r = client.get(path)
        assert r.status_code == 200 and "data-figure" in r.text, path
        scripts = re.findall(r'<script src="([^"]+)"></script>', r.text)
        assert [s.split("?v=")[0] for s in scripts] == [
            "/static/vendor/plotly/plotly.min.js",
            "/static/charts.js",
            "/static/forms.js",
        ], path
        for script in scripts:
            assert client.get(script).headers["cache-control"] == IMMUTABLE


def test_sweep_pages_carry_strict_json_figures() -> None:
    # The default space includes accelerators without a price: their points have no cost, and
    # the page must not emit NaN (not JSON; the browser refuses the whole figure).
    for url in ("/sweep?model=llama-3-70b", "/sweep?mode=serving&model=llama-3-8b&tp=1,2&pp=1"):
        r = client.get(url)
        assert r.status_code == 200 and "data-figure" in r.text
        assert "NaN" not in r.text and "Infinity" not in r.text


def test_money_keeps_its_significant_digits() -> None:
    """Never a bare $0.0000 for a small price per token (issue 22)."""
    from app.format import usd

    assert usd(0.0000412) == "$0.0000412"
    assert usd(0.0123) == "$0.0123"
    assert usd(0.10649) == "$0.106"
    assert usd(12.345) == "$12.35"
    assert usd(1234.5) == "$1,234"
    assert usd(0.0) == "$0.00"


def test_serving_page_says_which_load_it_shows_and_the_cost_split() -> None:
    client = TestClient(app)
    page = client.get("/serving", params={"model": "llama-3-8b", "concurrency": 1}).text
    assert "Every figure below is at concurrency 1, the load asked for" in page
    assert "show the plan at it" in page and "concurrency=" in page
    assert "All-in cost" in page and "Split by phase" in page


def test_serving_sweep_recommends_and_prices_per_million() -> None:
    """The serving explorer leads with its picks (cheapest, most tokens/s per GPU, quickest
    first token), each with why and a link; costs are per 1M tokens (issue 22)."""
    client = TestClient(app)
    page = client.get("/sweep", params={"mode": "serving", "model": "llama-3-8b"}).text
    assert 'id="recommendations"' in page
    for title in ("Cheapest per output token", "Most tokens/s per GPU", "Quickest first token"):
        assert title in page
    assert "$ / 1k out" not in page and "$0.0000<" not in page
