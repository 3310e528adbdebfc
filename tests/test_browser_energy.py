"""The energy section (issue 48): the training page shows the run's MWh and the serving page
the token prices the API answers for the same plan, with no console errors."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.test_energy import PLAN as TRAINING


def test_training_page_shows_the_apis_energy(browser: Any, server: str) -> None:
    api = httpx.post(f"{server}/api/v1/training/estimate", json=TRAINING).json()
    query = {k: v for k, v in TRAINING.items() if k != "layout"} | {"tp": 1, "pp": 1}
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{server}/training?{urlencode(query)}", wait_until="networkidle")
    shown = float(page.locator("#kpi-mwh").get_attribute("data-value"))
    assert shown == pytest.approx(api["energy"]["mwh"])
    assert page.locator("#tco").is_visible()
    page.goto(
        f"{server}/serving?model=llama-3-8b&accelerator=h100-sxm-80gb&input_len=512"
        "&output_len=128&concurrency=8&prefix_cache_hit_rate=0.5",
        wait_until="networkidle",
    )
    assert "cached input" in page.locator("#token-prices").inner_text()
    assert not errors
    page.close()
