"""Every refusal at once (issue 23, item 7): a form shows all the rules a plan breaks, the
model's own before the ones derived from them, each next to its field, with focus on the first;
the API keeps its single refusal."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)
BAD = {"model": "llama-3-70b", "accelerator": "h100-sxm-80gb", "num_gpus": "64", "tp": "3"}


def _errors(html: str) -> list[tuple[str, str]]:
    return re.findall(r'class="error" id="e-(\w+)"[^>]*>([^<]*)', html)


def test_all_errors_at_once_model_rule_first() -> None:
    page = client.get("/training", params=BAD)
    assert page.status_code == 422
    shown = dict(_errors(page.text))
    assert shown["tp"] == "tp=3 must divide num_attention_heads=64"
    assert shown["num_gpus"] == "must be a multiple of tp*pp*cp = 3"
    banner = re.search(r'role="status">([^<]*)', page.text)
    assert banner is not None and banner.group(1).startswith("layout.tp: tp=3 must divide")
    assert re.findall(r'id="f-(\w+)"[^>]*autofocus', page.text) == ["tp"]
    # several layout fields at once (tp, pp against the layers, the GPU count)
    more = client.get("/training", params={**BAD, "pp": "7"})
    assert {"tp", "pp", "num_gpus"} <= dict(_errors(more.text)).keys()


def test_the_api_keeps_one_refusal() -> None:
    api = client.post(
        "/api/v1/training/estimate",
        json={"model": "llama-3-70b", "num_gpus": 64, "layout": {"tp": 3}},
    )
    assert api.status_code == 422 and len(api.json()["detail"]) == 1


def test_serving_form_too() -> None:
    page = client.get(
        "/serving", params={"model": "llama-3-70b", "accelerator": "h100-sxm-80gb", "tp": "3"}
    )
    assert page.status_code == 422 and "tp" in dict(_errors(page.text))


def test_focus_lands_on_the_first_bad_field(browser: Any, server: str) -> None:
    page = browser.new_page()
    query = "&".join(f"{k}={v}" for k, v in BAD.items())
    page.goto(f"{server}/training?{query}", wait_until="networkidle")
    assert page.evaluate("document.activeElement.id") == "f-tp"
    page.close()
