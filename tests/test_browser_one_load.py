"""The serving page in Chromium (issue 39, items 1-3 and 5): one throughput at the load asked for,
the replicas an overloaded rate needs with a link that opens the fleet sweep filled in, and no
chart drawn for an empty sweep."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

pytestmark = pytest.mark.browser

PLAN = {"model": "llama-3.1-70b", "accelerator": "h100-sxm-80gb", "tp": "2", "precision": "fp8",
        "input_len": "2048", "output_len": "512"}  # fmt: skip


def _value(page: Any, selector: str) -> float:
    return float(page.get_attribute(selector, "data-value"))


def test_the_page_shows_one_throughput_at_the_rate(browser: Any, server: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/serving?{urlencode(PLAN | {'request_rate': '0.5'})}")
    headline = _value(page, "#kpi-otps")
    summary = page.inner_text("#load-summary") + page.inner_text("section.results")
    assert "0.5 requests/s" in page.inner_text("#load-note")
    assert f"{headline:,.0f} output tokens/s" in summary  # the under-load line's figure
    assert headline == pytest.approx(256, rel=1e-6)
    assert "at capacity" in page.inner_text("#kpi-per-m")
    assert "capacity" in page.inner_text("#kpi-otps")
    page.screenshot(path="/tmp/one_load_serving.png", full_page=False)
    page.close()


def test_an_overloaded_rate_links_to_its_fleet(browser: Any, server: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    query = PLAN | {"request_rate": "20", "ttft_target_s": "2", "tpot_target_s": "0.05"}
    page.goto(f"{server}/serving?{urlencode(query)}")
    need = page.locator("#fleet-need")
    assert need.is_visible() and "replicas of this layout" in need.inner_text()
    box = need.bounding_box()
    assert box is not None and box["y"] < 900  # in the first screen, beside the verdict
    page.screenshot(path="/tmp/one_load_overloaded.png", full_page=False)
    page.click("#fleet-link")
    page.wait_for_load_state()
    target = dict(parse_qsl(urlsplit(page.url).query))
    assert target["mode"] == "serving" and target["request_rate"] == "20"
    assert page.locator("#fleet-headroom").is_visible()
    headroom = page.locator("input[name=rate_headroom]")
    assert headroom.is_visible() and headroom.get_attribute("placeholder") == "measured optimism"
    one = page.inner_text("#fleet-headroom")
    headroom.fill("0")
    page.click("form button[type=submit]")
    page.wait_for_load_state()
    assert "keep 0.0% headroom" in page.inner_text("#fleet-headroom") and one != page.inner_text(
        "#fleet-headroom"
    )
    assert page.locator("#fig-fleet .main-svg").count() >= 1  # the replicas-against-rate chart
    page.screenshot(path="/tmp/one_load_fleet.png", full_page=True)
    page.close()


def test_an_empty_sweep_draws_no_chart(browser: Any, server: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    query = {"mode": "serving", "model": "deepseek-v3", "accelerator": "h100-sxm-80gb",
             "tp": "1,2", "pp": "1", "dp": "1", "ttft_target_s": "2"}  # fmt: skip
    page.goto(f"{server}/sweep?{urlencode(query)}")
    assert "out of memory" in page.inner_text("#none-served")
    assert page.locator("[data-figure]").count() == 0
    page.close()


def test_the_accuracy_page_leads_with_where_it_is_weak(browser: Any, server: str) -> None:
    """The accuracy page was 126,000 px, every record open and nothing said in words: it now
    leads with its weak spots and keeps the records behind one disclosure."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{server}/accuracy", wait_until="networkidle")
    height = page.evaluate("document.documentElement.scrollHeight")
    weak = page.locator("#weak-spots").bounding_box()
    assert weak is not None and weak["y"] < 900
    assert "TTFT under load near a server run's latency limits" in page.inner_text("#weak-spots")
    assert height < 40_000, height
    page.screenshot(path="/tmp/accuracy_top.png")
    page.click("#records-details > summary")
    assert page.locator("#accuracy-records").is_visible()
    page.close()
