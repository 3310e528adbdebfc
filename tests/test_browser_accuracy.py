"""The accuracy page and a plan's accuracy block in a real browser (Debian's chromium, headless,
against the running service): the predicted-vs-measured charts draw every record as an SVG
point, filtering narrows them, and the planner pages show the likely range beside the headline."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    p = context.new_page()
    errors: list[str] = []
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.errors = errors
    yield p
    context.close()


def test_accuracy_page_draws_every_record(page: Any, server: str) -> None:
    page.goto(f"{server}/accuracy?kind=training", wait_until="networkidle")
    want = httpx.get(f"{server}/api/v1/accuracy", params={"kind": "training"}).json()["n"]
    points = page.eval_on_selector_all("#fig-accuracy-0 .scatterlayer .point", "ps => ps.length")
    assert points == want > 250
    assert page.locator("#accuracy-records tbody tr").count() == want
    # filter in the form: the page reloads with fewer records
    page.select_option("#f-family", "llama")
    page.click("#accuracy-filters button[type=submit]")
    page.wait_for_load_state("networkidle")
    llama = httpx.get(
        f"{server}/api/v1/accuracy", params={"kind": "training", "family": "llama"}
    ).json()["n"]
    assert page.locator("#accuracy-records tbody tr").count() == llama < want
    assert page.errors == []


def test_training_page_shows_the_likely_range(page: Any, server: str) -> None:
    page.goto(
        f"{server}/training?model=llama-3-70b&accelerator=h100-sxm-80gb&num_gpus=64&tp=4&pp=4",
        wait_until="networkidle",
    )
    assert page.locator("#kpi-tps-range").inner_text().startswith("likely ")
    assert page.locator("#kpi-step-range").is_visible()
    page.click("#accuracy-tokens_per_s_per_gpu summary")
    links = page.locator("#accuracy-tokens_per_s_per_gpu .accuracy-records a")
    assert links.count() >= 10
    assert links.first.get_attribute("href").startswith("https://github.com/")
    assert page.errors == []
