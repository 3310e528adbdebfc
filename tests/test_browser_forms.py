"""The planner pages' forms and charts in a real browser (issue 39, item 9): the worked example's
inputs sit in the form, so the next edit works or says why; a skip link comes first and a
submitted form's answer takes the focus; the model and accelerator pickers are grouped by
family and vendor, sorted, and searchable, and still work without JavaScript; a diverging
queue's latencies are cut off, marked "overloaded"; at 1280 x 800 no chart clips a tick label
or draws an axis title over one.

Screenshots go to ``artifacts/screenshots/`` (``PLANNER_SHOTS`` names another folder)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from app.web import charts
from app.web.forms import TEAM_GROUP, model_family
from app.web.planners import EXAMPLES
from estimator import accelerator_ids, get_accelerator, get_model, model_ids
from tests.test_chart_bounds import BOUNDED, load_point

SHOTS = Path(
    os.environ.get("PLANNER_SHOTS")
    or Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
)
VIEWPORT = {"width": 1280, "height": 800}
# Every chart of the page drawn (charts.js draws them once the page has loaded; a busy machine
# can answer "networkidle" first)
DRAWN = """() => [...document.querySelectorAll('[data-figure]')].every(
    e => e.data && e.querySelector('.main-svg'))"""


class Tab:
    """A 1280 x 800 page that records console errors and uncaught exceptions."""

    def __init__(self, browser: Any, base: str, **options: Any) -> None:
        self.context = browser.new_context(viewport=VIEWPORT, **options)
        self.page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _console(self, message: Any) -> None:
        # a refused plan's page is a 422, which the browser logs: that is the answer, not a fault
        if message.type == "error" and "status of 422" not in message.text:
            self.errors.append(message.text)

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path, wait_until="networkidle")
        return self.page

    def submit(self) -> Any:
        with self.page.expect_navigation(wait_until="networkidle"):
            self.page.click("form.plan button[type=submit]")
        return self.page

    def shot(self, name: str, selector: str | None = None) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = str(SHOTS / f"{name}.png")
        if selector:
            self.page.locator(selector).screenshot(path=path)
        else:
            self.page.screenshot(path=path)


@pytest.fixture
def tab(browser: Any, server: str) -> Iterator[Tab]:
    t = Tab(browser, server)
    yield t
    t.context.close()


def query_of(page: Any) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def active(page: Any) -> dict[str, Any]:
    """What has the focus: its tag, id, classes, and whether it is in the results."""
    return page.evaluate(  # type: ignore[no-any-return]
        """() => { const e = document.activeElement;
            return {tag: e.tagName, id: e.id, cls: e.className, text: e.textContent.trim(),
                    inResults: !!e.closest('[data-results]')}; }"""
    )


# --- the worked example ---------------------------------------------------------------------


def test_the_worked_examples_inputs_are_in_the_form_and_the_next_edit_works(tab: Tab) -> None:
    """The first visit's example (TP 4 x PP 4, FP8 on 256 GPUs) fills its inputs in visible
    fields, precision reading fp8 in its picker; changing the model then estimates that model
    with the example's other inputs; changing the GPU count to one the layout cannot use says
    why, next to the GPU count, which takes the focus."""
    page = tab.open("/training")
    for name, value in EXAMPLES["training"][1].items():
        field = page.locator(f"#f-{name}")
        assert field.is_visible(), name
        assert field.input_value() == value, name
    shown = page.eval_on_selector("#f-precision", "s => s.selectedOptions[0].textContent.trim()")
    assert shown == "fp8"
    page.select_option("#f-model", "llama-3-8b")
    tab.submit()
    query = query_of(page)
    assert (query["model"], query["pp"], query["tp"], query["precision"]) == (
        "llama-3-8b",
        "4",
        "4",
        "fp8",
    )
    assert page.is_visible("#verdict")
    assert "llama-3-8b on 256 × h100-sxm-80gb · tp 4 · pp 4" in page.inner_text("section.results")
    assert page.input_value("#f-precision") == "fp8" and page.is_visible("#f-precision")
    tab.shot("example-edited-model")

    page = tab.open("/training")
    page.fill("#f-num_gpus", "8")
    tab.submit()
    error = page.locator(".field.invalid:has(#f-num_gpus) .error")
    assert "multiple of tp*pp" in error.inner_text()
    assert active(page)["id"] == "f-num_gpus"  # the refused input keeps the focus
    tab.shot("example-refused-gpus")
    assert tab.errors == []


# --- skip link and focus --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/training", "/serving", "/sweep?model=llama-3-8b", "/catalog"])
def test_the_first_tab_reaches_the_skip_link(tab: Tab, path: str) -> None:
    page = tab.open(path)
    link = page.locator("a.skip-link")
    assert link.bounding_box()["y"] < 0  # off screen until focused
    page.keyboard.press("Tab")
    now = active(page)
    assert (now["tag"], now["cls"], now["text"]) == ("A", "skip-link", "Skip to main content")
    box = link.bounding_box()
    assert 0 <= box["y"] < VIEWPORT["height"] and box["width"] > 0  # shown on focus
    if path == "/training":
        tab.shot("skip-link-focused")
    page.keyboard.press("Enter")
    assert active(page)["id"] == "main"
    assert tab.errors == []


@pytest.mark.parametrize(
    "path",
    [
        "/training",
        "/serving",
        "/sweep?model=llama-3-8b&tp=1,2",
        "/sweep?mode=serving&model=llama-3-8b&accelerator=h100-sxm-80gb&tp=1&pp=1",
    ],
)
def test_a_submitted_plan_moves_the_focus_to_its_results(tab: Tab, path: str) -> None:
    page = tab.open(path)
    assert not active(page)["inResults"]  # an opened page leaves the focus where it is
    tab.submit()
    now = active(page)
    assert now["inResults"] and now["id"] == "results", now
    if path == "/training":
        tab.shot("focus-after-submit")
    page.keyboard.press("Tab")  # and the next Tab goes on from there
    assert active(page)["inResults"]
    assert tab.errors == []


# --- pickers ----------------------------------------------------------------------------------


def picker_groups(page: Any, select: str) -> list[tuple[str, list[str]]]:
    return [
        (label, values)
        for label, values in page.eval_on_selector(
            select,
            """s => [...s.querySelectorAll('optgroup')].map(
                g => [g.label, [...g.querySelectorAll('option')].map(o => o.value)])""",
        )
    ]


def public_groups(groups: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """The bundled catalog's groups, checking that a team catalog group, if any, is the last."""
    labels = [g for g, _ in groups]
    assert TEAM_GROUP not in labels[:-1], labels
    return [(g, members) for g, members in groups if g != TEAM_GROUP]


def natural(ident: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", ident.lower())]


def test_pickers_are_grouped_sorted_and_searchable(tab: Tab) -> None:
    page = tab.open("/training")
    # The session's server is shared: other tests may have added team catalog entries, which
    # the pickers list last, under their own group; the public groups come first.
    models = public_groups(picker_groups(page, "#f-model"))
    assert [g for g, _ in models] == sorted((g for g, _ in models), key=str.lower)
    assert sorted(m for _, ms in models for m in ms) == sorted(model_ids())
    for family, members in models:
        assert members == sorted(members, key=natural), family
        assert {model_family(get_model(m).model_type) for m in members} == {family}
    assert dict(models)["llama"][:3] == ["llama-2-7b", "llama-2-13b", "llama-2-70b"]
    accelerators = public_groups(picker_groups(page, "#f-accelerator"))
    assert [g for g, _ in accelerators] == ["AMD", "AWS", "Google", "Intel", "NVIDIA"]
    assert sorted(a for _, acs in accelerators for a in acs) == sorted(accelerator_ids())
    for vendor, members in accelerators:
        assert members == sorted(members, key=natural)
        assert {get_accelerator(a).vendor for a in members} == {vendor.lower()}
    # the example's choices are still the ones selected
    assert page.input_value("#f-model") == "llama-3.1-70b"

    search = page.locator("#s-model")
    assert search.is_visible() and search.get_attribute("list") == "dl-model"
    assert page.locator("#dl-model option").count() >= len(model_ids())
    search.fill("llama-3-8b")  # an id typed (or picked from the list) sets the select
    assert page.input_value("#f-model") == "llama-3-8b"
    tab.shot("pickers-search", "aside")
    search.fill("llama")  # several match: Enter submits nothing stale
    page.keyboard.press("Enter")
    page.wait_for_timeout(300)
    assert urlparse(page.url).query == "" and page.input_value("#f-model") == "llama-3-8b"
    page.fill("#s-accelerator", "mi355")  # one matches: Enter picks it and submits
    with page.expect_navigation(wait_until="networkidle"):
        page.keyboard.press("Enter")
    query = query_of(page)
    assert (query["model"], query["accelerator"]) == ("llama-3-8b", "mi355x")
    assert "s-model" not in page.url  # the search boxes are not submitted

    page = tab.open("/sweep?model=llama-3-8b")  # the sweep's accelerator checkboxes
    vendors = page.eval_on_selector_all(
        "#f-accelerator .check-group-label", "ls => ls.map(l => l.textContent)"
    )
    assert [v for v in vendors if v != TEAM_GROUP] == ["AMD", "AWS", "Google", "Intel", "NVIDIA"]
    assert TEAM_GROUP not in vendors[:-1]
    tab.shot("pickers-sweep-accelerators", "#f-accelerator")
    assert tab.errors == []


def test_pickers_work_without_javascript(browser: Any, server: str) -> None:
    t = Tab(browser, server, java_script_enabled=False)
    try:
        page = t.open("/training")
        assert not page.is_visible("#s-model")  # the search box needs the script
        assert len(picker_groups(page, "#f-model")) > 10
        page.select_option("#f-model", "qwen3-8b")
        t.submit()
        assert query_of(page)["model"] == "qwen3-8b"
        assert page.locator("#verdict").count() == 1
        t.shot("pickers-no-javascript", "aside")
    finally:
        t.context.close()


# --- charts -----------------------------------------------------------------------------------


def test_a_diverging_queue_is_drawn_to_its_last_bounded_point(tab: Tab) -> None:
    """The load chart of a queue that diverges past its slots (p99 1e39 s, then infinite) draws
    up to 8 in flight, shades the rest "overloaded", and its log axis ends near the largest
    bounded latency, not at 1e42 ms."""
    points = [*BOUNDED, load_point(16, 2.0, 1e39, 0.03), load_point(32, 5.0, math.inf, 0.03)]
    figure = json.loads(charts.figure_json(charts.serving_load_figure(points, 8, 0.05, None)))
    page = tab.open("/serving")  # a page that loads Plotly
    drawn = page.evaluate(
        """fig => { const el = document.createElement('div'); el.id = 'diverging';
            el.style.width = '800px'; document.querySelector('main').prepend(el);
            return Plotly.newPlot(el, fig.data, fig.layout).then(() => ({
                y: el._fullLayout.yaxis.range, x: el._fullLayout.xaxis.range,
                notes: [...el.querySelectorAll('.annotation-text')].map(a => a.textContent)}));
        }""",
        figure,
    )
    assert drawn["y"][1] < math.log10(660) + 0.5  # log10 ms: the largest bounded, 660 ms
    assert drawn["x"][1] >= math.log10(32) - 0.01  # the axis still runs to the last load
    assert "overloaded from 16 in flight" in drawn["notes"]
    tab.shot("load-chart-overloaded", "#diverging")
    assert tab.errors == []


def test_the_load_charts_axis_ends_near_its_latencies_with_targets(tab: Tab) -> None:
    """A serving plan with a 42 ms TPOT target: the load chart's log axis ended at ~1e46 ms
    (the target's label placed at 1e42); now at its largest latency."""
    query = {
        "model": "llama-3.1-8b", "accelerator": "h100-sxm-80gb", "input_len": "2048",
        "output_len": "256", "concurrency": "32", "tpot_target_s": "0.042", "ttft_target_s": "2",
    }  # fmt: skip
    page = tab.open("/serving?" + urlencode(query))
    page.wait_for_function(DRAWN, timeout=30_000)
    top, largest = page.evaluate(
        """() => { const el = document.getElementById('fig-load');
            const ys = el.data.flatMap(t => t.y).filter(y => y !== null);
            return [el._fullLayout.yaxis.range[1], Math.max(...ys, 2000)]; }"""
    )
    assert top < math.log10(largest) + 0.5
    tab.shot("load-chart-targets", "#fig-load")
    assert tab.errors == []


OVERLAPS = """() => {
  const over = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5
                      && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const inside = (r, box) => r.left >= box.left - 1 && r.right <= box.right + 1
                          && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
  const problems = [];
  document.querySelectorAll('[data-figure]').forEach(el => {
    const svg = el.querySelector('.main-svg');
    if (!svg) { problems.push(el.id + ': not drawn'); return; }
    const box = svg.getBoundingClientRect();
    for (const ax of ['x', 'y', 'y2', 'x2']) {
      const title = el.querySelector(`.g-${ax}title text`);
      const ticks = [...el.querySelectorAll(`.${ax}tick text`)].filter(
        t => t.textContent && getComputedStyle(t).display !== 'none');
      const hidden = [...el.querySelectorAll(`.${ax}tick text`)].filter(
        t => t.textContent && getComputedStyle(t).display === 'none');
      hidden.forEach(t => problems.push(`${el.id} ${ax}: tick "${t.textContent}" hidden`));
      for (const t of ticks) {
        const r = t.getBoundingClientRect();
        if (!inside(r, box)) problems.push(`${el.id} ${ax}: tick "${t.textContent}" clipped`);
        if (title && title.textContent && over(title.getBoundingClientRect(), r))
          problems.push(`${el.id} ${ax}: title over tick "${t.textContent}"`);
      }
      if (title && title.textContent && !inside(title.getBoundingClientRect(), box))
        problems.push(`${el.id} ${ax}: title clipped`);
    }
  });
  return problems;
}"""

CHART_PAGES = {
    "training": "/training",
    "serving": "/serving",
    "sweep": "/sweep?model=llama-3-70b",
    "sweep-serving": "/sweep?" + urlencode({"mode": "serving", "model": "llama-3-70b"}),
}


@pytest.mark.parametrize("name", CHART_PAGES)
def test_no_chart_clips_a_tick_label_or_titles_over_one(tab: Tab, name: str) -> None:
    page = tab.open(CHART_PAGES[name])
    page.wait_for_function(DRAWN, timeout=30_000)
    assert page.evaluate(OVERLAPS) == [], tab.errors
    for figure in page.eval_on_selector_all("[data-figure]", "els => els.map(e => e.id)"):
        tab.shot(f"axes-{name}-{figure}", f"#{figure}")
    assert tab.errors == []
