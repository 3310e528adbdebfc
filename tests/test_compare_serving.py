"""Compare that helps decide (issue 23, items 4 and 8): serving plans side by side as training
plans are, from the serving page, the sweeps and saved plans; each number with its change
against the first plan, GPU count, fleet $/hour and max concurrency; the JSON twin is the API's."""

from __future__ import annotations

import re
from html import unescape
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.web.planners import COMPARE_EXAMPLE, COMPARE_SERVING_EXAMPLE

client = TestClient(app)


def _cells(html: str, label: str) -> list[str]:
    row = re.search(rf"<tr data-label=\"{re.escape(label)}\"><th>.*?</th>(.*?)</tr>", html, re.S)
    assert row is not None, label
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    ]


def _api(plan: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {k: v for k, v in plan.items() if k not in ("tp",)}
    body["layout"] = {"tp": int(plan["tp"])}
    body["concurrency"] = int(plan["concurrency"])
    return client.post("/api/v1/inference/estimate", json=body).json()  # type: ignore[no-any-return]


def test_serving_plans_side_by_side() -> None:
    page = client.get("/compare?" + urlencode(COMPARE_SERVING_EXAMPLE))
    assert page.status_code == 200 and "Compare serving plans" in page.text
    twin = client.get("/compare?" + urlencode(COMPARE_SERVING_EXAMPLE) + "&format=json").json()
    assert list(twin) == ["Plan A", "Plan B", "Plan C"]
    plans = {
        slot: {
            k.split(".", 1)[1]: v
            for k, v in COMPARE_SERVING_EXAMPLE.items()
            if k.startswith(f"{slot}.")
        }
        for slot in "abc"
    }
    for label, slot in (("Plan A", "a"), ("Plan C", "c")):
        api = _api(plans[slot])
        assert twin[label]["throughput"] == api["throughput"]
        assert twin[label]["load"] == api["load"]
    # each plan's change against Plan A, with its sign
    a, b, c = (twin[p]["throughput"]["output_tokens_per_s"] for p in ("Plan A", "Plan B", "Plan C"))
    shown = _cells(page.text, "Output tokens/s")
    assert shown[1].endswith(f"{100 * (b / a - 1):+.0f}%") and shown[2].endswith(
        f"{100 * (c / a - 1):+.0f}%"
    )
    gpus = _cells(page.text, "GPUs (replica)")
    assert gpus == ["2", "1 -50%", "4 +100%"]
    assert _cells(page.text, "Max concurrency")[0] == f"{twin['Plan A']['max_concurrency']:,}"
    assert re.findall(r'id="fig-(\w+)"', page.text) == ["memory", "latency", "curve"]
    # better / worse by the row's direction: more GPUs is worse, more throughput better
    assert '<span class="delta worse">+100%</span>' in page.text


def test_training_compare_gains_gpus_and_fleet_cost() -> None:
    page = client.get("/compare?" + urlencode(COMPARE_EXAMPLE))
    assert page.status_code == 200
    assert _cells(page.text, "GPUs") == ["64", "64 +0%", "128 +100%"]
    twin = client.get("/compare?" + urlencode(COMPARE_EXAMPLE) + "&format=json").json()
    fleet = _cells(page.text, "Fleet $ per hour")
    a = twin["Plan A"]
    assert fleet[0] == f"${a['cost']['price_usd_per_gpu_hour'] * a['num_gpus']:,.2f}"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/sweep?model=llama-3-8b&num_gpus=8&tp=1,2", "training"),
        ("/sweep?mode=serving&model=llama-3-8b&accelerator=h100-sxm-80gb", "serving"),
        ("/serving?model=llama-3-8b", "serving"),
        ("/training?model=llama-3-8b&num_gpus=64", "training"),
    ],
)
def test_compare_links(path: str, kind: str) -> None:
    page = client.get(path).text
    link = re.search(r'id="compare-(?:picks|link)" href="([^"]+)"', page)
    assert link is not None
    opened = client.get(unescape(link.group(1)))
    assert opened.status_code == 200 and f"Compare {kind} plans" in opened.text
    assert "Plan A" in opened.text
