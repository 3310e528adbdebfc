"""Compare pages that show results first (issue 39, item 8), in a real browser: the compare page
opened from a sweep's "compare" link puts its result table right under the title, in the first
viewport and above the plans' forms (collapsed, one per plan, still working); its columns are
named by what the plans are, never "A" / "B". The saved-plan compare names its plans by their
saved names and lists the inputs that differ. Screenshots go to ``/tmp/compare_*.png``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

VIEWPORT = {"width": 1400, "height": 900}
SWEEPS = {
    "training": "/sweep?model=llama-3-8b&num_gpus=8&tp=1,2,4",
    "serving": "/sweep?mode=serving&model=llama-3-8b&accelerator=h100-sxm-80gb",
}
LETTER = re.compile(r"^(Plan )?[A-D]$")


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=VIEWPORT)
    p = context.new_page()
    p.errors = []
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    yield p
    context.close()


def _headings(page: Any) -> list[str]:
    return [
        " ".join(t.split())
        for t in page.eval_on_selector_all(
            "#comparison thead .plan-name", "names => names.map(n => n.textContent)"
        )
    ]


def _others(url: str) -> dict[str, str]:
    """The inputs a compare page was asked for, but plan 2's, the empty ones left out."""
    return {k: v for k, v in parse_qsl(urlsplit(url).query) if v and not k.startswith("b.")}


@pytest.mark.parametrize("kind", ["training", "serving"])
def test_compare_from_a_sweep_shows_results_first(page: Any, server: str, kind: str) -> None:
    page.goto(server + SWEEPS[kind], wait_until="networkidle")
    page.click("#compare-picks")
    page.wait_for_selector("#comparison")
    page.wait_for_load_state("networkidle")
    table = page.locator("#comparison").bounding_box()
    form = page.locator("main form").first.bounding_box()
    print(f"{kind}: result table top {table['y']:.0f} px, first form top {form['y']:.0f} px")
    page.screenshot(path=f"/tmp/compare_{kind}.png")
    page.screenshot(path=f"/tmp/compare_{kind}_full.png", full_page=True)
    assert table["y"] < form["y"]
    assert table["y"] < VIEWPORT["height"]  # in the first viewport, under the title
    headings = _headings(page)
    assert 2 <= len(headings) <= 4 and len(set(headings)) == len(headings), headings
    assert not any(LETTER.match(h) for h in headings), headings
    assert all("llama-3" in h.lower() and " × " in h for h in headings), headings
    # the forms are there, one collapsed <details> per plan, each with its one-line summary
    summaries = page.eval_on_selector_all(
        "details.slot", "ds => ds.map(d => [d.open, d.querySelector('summary').textContent])"
    )
    assert len(summaries) == 4 and not any(opened for opened, _ in summaries)
    assert all(h in " ".join(s.split()) for h, (_, s) in zip(headings, summaries, strict=False))
    assert page.errors == []


def test_editing_one_collapsed_plan_keeps_the_others(page: Any, server: str) -> None:
    page.goto(server + SWEEPS["training"], wait_until="networkidle")
    page.click("#compare-picks")
    page.wait_for_selector("#comparison")
    before = _headings(page)
    sent = _others(page.url)
    assert len(before) >= 3
    page.click("#slot-b > summary")  # opens plan 2's form; the others stay collapsed
    page.fill('[id="f-b.micro_batch_size"]', "2")
    page.click("#slot-b button[type=submit]")
    page.wait_for_selector("#comparison")
    page.wait_for_load_state("networkidle")
    assert len(_headings(page)) == len(before)
    assert _others(page.url) == sent  # plans 1, 3, 4 as they were
    assert page.input_value('[id="f-b.micro_batch_size"]') == "2"
    cells = page.eval_on_selector_all(
        "#inputs-differ tr", "trs => trs.map(tr => tr.querySelector('th').textContent)"
    )
    assert "Micro-batch" in cells
    assert page.errors == []


def test_saved_compare_names_plans_and_lists_their_differences(page: Any, server: str) -> None:
    ids = []
    for name, gpus in (("eight-way compare", 8), ("sixteen-way compare", 16)):
        body = {
            "name": name,
            "kind": "training",
            "request": {"model": "llama-3-8b", "num_gpus": gpus, "layout": {"tp": 2}},
        }
        ids.append(httpx.post(f"{server}/api/v1/plans", json=body).json()["id"])
    page.goto(f"{server}/plans/compare?ids={','.join(ids)}", wait_until="networkidle")
    page.screenshot(path="/tmp/compare_saved.png", full_page=True)
    assert _headings(page) == ["eight-way compare", "sixteen-way compare"]
    differ = page.eval_on_selector_all(
        "#inputs-differ tr", "trs => trs.map(tr => [...tr.children].map(c => c.textContent))"
    )
    assert ["GPUs", "8", "16"] in differ
    table = page.locator("#comparison").bounding_box()
    assert table["y"] < VIEWPORT["height"]
    assert page.errors == []
