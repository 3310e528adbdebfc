"""The run section (issue 46) in a real browser: the training page shows the effective
wall-clock the API answers, a PP plan's pipeline schedule as a chart, and the plan's jobs."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

PLAN = {
    "model": "llama-3-70b", "num_gpus": 512, "tokens": 2e12, "global_batch_size": 512,
    "layout": {"tp": 8, "pp": 4, "vp": 5, "sequence_parallel": True},
}  # fmt: skip


def test_training_page_shows_the_run_as_it_goes(browser: Any, server: str) -> None:
    api = httpx.post(f"{server}/api/v1/training/estimate", json=PLAN, timeout=60).json()
    query = {k: v for k, v in PLAN.items() if k != "layout"} | PLAN["layout"]  # type: ignore[operator]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{server}/training?{urlencode(query)}", wait_until="networkidle")
    shown = float(page.locator("#kpi-effective").get_attribute("data-value"))
    assert shown == pytest.approx(api["effective"]["effective_time_fraction"])
    wall = float(page.locator("#kpi-effective-ttt").get_attribute("data-value"))
    assert wall == pytest.approx(api["effective"]["effective_time_to_train_s"])
    assert wall > api["cost"]["time_to_train_s"]  # interruptions cost time, never save it
    chart = page.locator("#fig-schedule")
    chart.scroll_into_view_if_needed()
    assert chart.locator(".main-svg").count() > 0  # Plotly drew it
    assert "interleaved 1F1B" in chart.inner_text()
    assert page.locator("#run .figure-data summary").count() == 1  # its numbers as a table
    page.locator("#jobs summary").click()
    text = page.locator("#jobs").inner_text()
    assert "--tensor-model-parallel-size 8" in text and "torchrun" in text
    assert "TorchTitan: ZeRO-1" in text  # the stacks that cannot run it, and why
    if os.environ.get("SHOTS"):
        page.locator("#run").screenshot(path=f"{os.environ['SHOTS']}/run-section.png")
    assert not errors
    page.close()
