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


def test_sweep_page_draws_memory_against_throughput_and_calls_ties(
    browser: Any, server: str
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    query = "model=llama-3-8b&accelerator=h100-sxm-80gb&num_gpus=64&tokens=2e11"
    page.goto(f"{server}/sweep?{query}", wait_until="networkidle")
    chart = page.locator("#fig-memory")
    chart.scroll_into_view_if_needed()
    assert chart.locator(".main-svg").count() > 0
    assert "fit lines" in chart.inner_text()
    spec = page.eval_on_selector("#fig-memory", "e => JSON.parse(e.dataset.figure)")
    caps = {round(s["x0"], 1) for s in spec["layout"]["shapes"] if s["line"]["dash"] == "dash"}
    assert caps == {79.6}  # the H100's 80 GB, in GiB: the fit line
    assert page.locator("#recommendations .tie").count() >= 1
    if os.environ.get("SHOTS"):
        chart.screenshot(path=f"{os.environ['SHOTS']}/sweep-memory.png")
    assert not errors
    page.close()
