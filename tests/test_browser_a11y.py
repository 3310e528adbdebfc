"""Accessibility in a real browser (issue 23, item 6): axe-core (axe-playwright-python) finds no
serious or critical violation on any page, a plan can be made with the keyboard alone, focus is
visible, and every chart has its numbers as a table beside it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest

from app.web.planners import COMPARE_SERVING_EXAMPLE

PAGES = (
    "/",
    "/training",
    "/training?blank=1",
    "/training?model=llama-3-70b&num_gpus=64&tp=3",  # refused: every error shown
    "/training?model=llama-3-8b&num_gpus=8",  # does not fit: suggestions
    "/serving",
    "/sweep",
    "/sweep?model=llama-3-8b&num_gpus=8&tp=1,2",
    "/sweep?mode=serving&model=llama-3-8b&accelerator=h100-sxm-80gb",
    "/compare",
    "/compare?" + urlencode(COMPARE_SERVING_EXAMPLE),
    "/catalog",
    "/accuracy?kind=load",
    "/plans",
    "/plans/no-such-plan",
)


@pytest.fixture(scope="module")
def axe() -> Any:
    module = pytest.importorskip("axe_playwright_python.sync_playwright")
    return module.Axe()


@pytest.mark.parametrize("path", PAGES)
def test_no_serious_violations(browser: Any, server: str, axe: Any, path: str) -> None:
    page = browser.new_page()
    page.goto(server + path, wait_until="networkidle")
    found = axe.run(page).response["violations"]
    serious = [
        (v["id"], [n["target"] for n in v["nodes"]][:3])
        for v in found
        if v["impact"] in ("serious", "critical")
    ]
    assert serious == [], (path, serious)
    page.close()


def test_keyboard_only_plan(browser: Any, server: str) -> None:
    page = browser.new_page()
    page.goto(server + "/training?blank=1", wait_until="networkidle")
    page.focus("#f-model")
    page.keyboard.type("llama-3-8b")  # a select takes typed text
    while page.evaluate("document.activeElement.id") != "f-num_gpus":  # tab to the GPU count
        page.keyboard.press("Tab")
    page.keyboard.type("8")
    page.keyboard.press("Enter")  # submits the form
    page.wait_for_selector("#verdict")
    assert "model=llama-3-8b" in page.url and "num_gpus=8" in page.url
    # focus is visible: the focused control draws an outline
    page.focus("#f-tp")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", "")
    page.close()


def test_charts_carry_their_numbers(browser: Any, server: str) -> None:
    page = browser.new_page()
    page.goto(server + "/training", wait_until="networkidle")
    charts = page.locator("figure.chart")
    assert charts.count() >= 3
    assert page.locator("figure.chart details.figure-data").count() == charts.count()
    # the memory chart's table lists the terms the chart stacks, with the numbers drawn
    page.click("#fig-memory + details summary")
    series = page.locator("#fig-memory + details tbody td:first-child").all_inner_texts()
    assert "Weights" in series
    page.close()
