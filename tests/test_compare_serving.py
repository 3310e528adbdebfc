"""Compare that helps decide (issue 23, items 4 and 8): serving plans side by side as training
plans are, from the serving page, the sweeps and saved plans; each number with its change
against the first plan, GPU count, fleet $/hour and max concurrency; the JSON twin is the API's."""

from __future__ import annotations

import json
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
    headings = _headings(opened.text)
    assert headings and all("llama-3" in h.lower() and " × " in h for h in headings), headings


def _headings(html: str) -> list[str]:
    """The comparison's column headings, as text."""
    head = re.search(r'<table class="data" id="comparison">.*?<thead>(.*?)</thead>', html, re.S)
    assert head is not None
    return [
        unescape(re.sub(r"<[^>]+>", "", name))
        for name in re.findall(r'<span class="plan-name">(.*?)</span>\s*<a', head.group(1), re.S)
    ]


def test_results_first_and_plans_named() -> None:
    """Issue 39, item 8: the result table and its charts come right under the title, the
    plans' forms after them, one collapsed <details> each with its one-line name; columns are
    headed by what each plan is (model, GPUs × accelerator, layout), never a letter; plans
    alike in that are told apart by the inputs in which they differ, and the charts' axes read
    only what varies. The JSON twin keeps its keys."""
    query = {
        "a.model": "llama-3-8b", "a.num_gpus": "8", "a.tp": "2", "a.micro_batch_size": "1",
        "b.model": "llama-3-8b", "b.num_gpus": "8", "b.tp": "2", "b.micro_batch_size": "2",
        "c.model": "llama-3-8b", "c.num_gpus": "16", "c.tp": "8", "c.accelerator": "b200",
    }  # fmt: skip
    page = client.get("/compare?" + urlencode(query)).text
    assert page.index('id="comparison"') < page.index('id="fig-memory"') < page.index("<form")
    assert re.findall(r'<details class="slot" id="slot-(\w)"( open)?>', page) == [
        ("a", ""), ("b", ""), ("c", ""), ("d", ""),
    ]  # fmt: skip
    assert _headings(page) == [
        "Meta-Llama-3-8B · 8 × H100 SXM 80GB · tp 2 dp 4 · Micro-batch 1",
        "Meta-Llama-3-8B · 8 × H100 SXM 80GB · tp 2 dp 4 · Micro-batch 2",
        "Meta-Llama-3-8B · 16 × B200 · tp 8 dp 2",
    ]
    summaries = re.findall(r'<details class="slot"[^>]*>\s*<summary>(.*?)</summary>', page)
    assert summaries[0] == "Plan 1: " + _headings(page)[0]
    assert summaries[3].startswith("Plan 4: empty")
    differ = re.findall(r'<tr class="differ" data-key="([\w.]+)"', page)
    assert differ == ["accelerator", "num_gpus", "layout.tp", "micro_batch_size"]
    figure = re.search(r'id="fig-memory" data-figure="([^"]+)"', page)
    assert figure is not None
    ticks = json.loads(unescape(figure.group(1)))["layout"]["xaxis"]["ticktext"]
    assert ticks == [
        "8 × H100 SXM 80GB<br>tp 2 dp 4<br>Micro-batch 1",
        "8 × H100 SXM 80GB<br>tp 2 dp 4<br>Micro-batch 2",
        "16 × B200<br>tp 8 dp 2",
    ]
    twin = client.get("/compare?" + urlencode(query) + "&format=json").json()
    assert list(twin) == ["Plan A", "Plan B", "Plan C"]
    # an evaluated plan stays collapsed; one that needs a look opens, naming why
    bad = client.get("/compare?" + urlencode({**query, "b.tp": "3"})).text
    assert re.search(
        r'<details class="slot" id="slot-b" open>\s*<summary>Plan 2: not compared', bad
    )
    # with fewer than two plans the first empty one opens, to add the second
    one = client.get("/compare?a.model=llama-3-8b").text
    assert re.findall(r'<details class="slot" id="slot-(\w)" open>', one) == ["b"]
