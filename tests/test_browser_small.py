"""Small screens (issue 23, items 6 and 7): at 390 px an answer comes before its form, nothing
overflows the page sideways, and a chart keeps room for its plot under a wrapped legend."""

from __future__ import annotations

from typing import Any

import pytest

PAGES = ("/training", "/serving", "/accuracy?kind=training", "/catalog", "/")


@pytest.mark.parametrize("path", PAGES)
def test_readable_at_390px(browser: Any, server: str, path: str) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(server + path, wait_until="networkidle")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
    if path in ("/training", "/serving"):  # the worked example: answer first, form below
        results = page.locator("section.results").bounding_box()
        form = page.locator(".planner > aside").bounding_box()
        assert results["y"] < form["y"]
        for plot in page.eval_on_selector_all(
            "[data-figure] .main-svg .cartesianlayer .bg",
            "els => els.map(e => e.getBoundingClientRect().height)",
        ):
            assert plot >= 150, (path, plot)  # the legend leaves the plot its room
    page.close()


def test_blank_form_leads_without_an_answer(browser: Any, server: str) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(server + "/training?blank=1", wait_until="networkidle")
    form = page.locator(".planner > aside").bounding_box()
    results = page.locator("section.results").bounding_box()
    assert form["y"] < results["y"]
    page.close()
