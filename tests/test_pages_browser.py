"""The dashboard in a real browser: Debian's chromium driven by Playwright, headless, against
the running service. Pages load with no console errors, the numbers a filled form shows equal
the API's for the same plan, charts carry the expected traces and lines, bad input is shown next
to its field, and a pasted config is read. Screenshots of each page are saved under
``artifacts/screenshots/`` (docs/dashboard.md).

``make test`` installs chromium; outside CI the tests skip where it is missing, in CI
(``CI`` set) they fail instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from estimator import model_entry

SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
GIB = 2**30


class Tab:
    """A page that records console errors and uncaught exceptions."""

    def __init__(self, browser: Any, base: str) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path, wait_until="networkidle")
        return self.page

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def tab(browser: Any, server: str) -> Iterator[Tab]:
    t = Tab(browser, server)
    yield t
    t.context.close()


def figure(page: Any, name: str) -> dict[str, Any]:
    """The figure as Plotly drew it (its traces and layout in the page)."""
    return page.evaluate(  # type: ignore[no-any-return]
        """id => { const el = document.getElementById(id);
            return {metas: el.data.map(t => t.meta), names: el.data.map(t => t.name),
                    shapes: (el.layout.shapes || []).map(
                        s => ({name: s.name, x0: s.x0, y0: s.y0})),
                    drawn: el.querySelectorAll('.main-svg').length}; }""",
        f"fig-{name}",
    )


@pytest.mark.parametrize(
    "path", ["/", "/training", "/serving", "/sweep", "/compare", "/catalog", "/docs"]
)
def test_pages_load_without_console_errors(tab: Tab, path: str) -> None:
    page = tab.open(path)
    assert page.title()
    if path == "/docs":
        page.wait_for_selector(".swagger-ui .opblock", timeout=15000)
    assert tab.errors == []
    tab.shot({"/": "home"}.get(path, path.strip("/") + "-empty"))


def test_training_form_shows_the_api_numbers(tab: Tab, server: str) -> None:
    page = tab.open("/training?blank=1")  # the form as a first visit leaves it (no example)
    page.select_option("#f-model", "llama-3-70b")
    page.select_option("#f-accelerator", "h100-sxm-80gb")
    page.fill("#f-num_gpus", "64")
    page.fill("#f-tp", "8")
    page.fill("#f-pp", "2")
    page.fill("#f-global_batch_size", "1024")
    page.select_option("#f-recompute", "selective")
    page.fill("#f-tokens", "2e12")
    page.click("button[type=submit]")
    page.wait_for_selector("#kpi-memory")
    page.wait_for_load_state("networkidle")
    api = httpx.post(
        f"{server}/api/v1/training/estimate",
        json={
            "model": "llama-3-70b",
            "accelerator": "h100-sxm-80gb",
            "num_gpus": 64,
            "layout": {"tp": 8, "pp": 2},
            "global_batch_size": 1024,
            "recompute": "selective",
            "tokens": 2e12,
        },
    ).json()

    def shown(kpi: str) -> float:
        return float(page.get_attribute(f"#kpi-{kpi}", "data-value"))

    assert shown("memory") == api["memory_per_gpu"]["total_bytes"]
    assert shown("step") == api["time"]["step_s"]
    assert shown("mfu") == api["throughput"]["mfu"]
    assert shown("cost") == api["cost"]["usd"]
    assert (
        page.inner_text("#kpi-memory") == f"{api['memory_per_gpu']['total_bytes'] / GIB:,.1f} GiB"
    )
    assert "Fits" in page.inner_text("#verdict")
    mem = figure(page, "memory")
    assert mem["drawn"] >= 1
    assert {"weights", "gradients", "optimizer_states", "activations"} <= set(mem["metas"])
    capacity = [s for s in mem["shapes"] if s["name"] == "capacity"]
    assert capacity and capacity[0]["x0"] == pytest.approx(
        api["memory_per_gpu"]["capacity_bytes"] / GIB
    )
    time = figure(page, "time")
    assert "compute" in time["metas"] and "tp_comm" in time["metas"]
    timeline = figure(page, "timeline")  # memory through the step, capacity line
    assert "activations" in timeline["metas"]
    assert "capacity" in [s["name"] for s in timeline["shapes"]]
    comms = page.eval_on_selector_all(
        "#comms tbody tr td:first-child", "c => c.map(x => x.textContent)"
    )
    assert comms == ["TP", "TP", "PP", "DP", "DP"]  # SP all-gather + reduce-scatter, sends, ZeRO-1
    tree = page.text_content("#module-tree") or ""  # collapsed levels included
    assert "self_attn.q_proj" in tree and "lm_head" in tree
    ranks = figure(page, "ranks")  # 64 GPUs as 8 nodes x 8, coloured by TP, DP or PP group
    assert ranks["drawn"] >= 1 and ranks["names"] == ["tp", "dp", "pp"]
    assert tab.errors == []
    assert "tp=8" in page.url and "pp=2" in page.url  # the plan is in the address
    tab.shot("training")


def test_serving_page_charts_and_numbers(tab: Tab, server: str) -> None:
    query = "model=llama-3-70b&tp=4&concurrency=32&input_len=2048&output_len=256&tpot_target_s=0.05"
    page = tab.open(f"/serving?{query}")
    api = httpx.get(f"{server}/serving?{query}&format=json").json()
    direct = httpx.post(
        f"{server}/api/v1/inference/estimate",
        json={
            "model": "llama-3-70b",
            "layout": {"tp": 4},
            "concurrency": 32,
            "input_len": 2048,
            "output_len": 256,
            "tpot_target_s": 0.05,
        },
    ).json()
    assert api == direct  # the page's JSON twin is the API's answer
    assert float(page.get_attribute("#kpi-tpot", "data-value")) == direct["latency"]["tpot_s"]
    assert float(page.get_attribute("#kpi-ttft", "data-value")) == direct["latency"]["ttft_s"]
    curve = figure(page, "curve")
    names = [s["name"] for s in curve["shapes"]]
    assert "memory limit" in names and "TPOT target" in names
    tpot_line = next(s for s in curve["shapes"] if s["name"] == "TPOT target")
    assert tpot_line["y0"] == pytest.approx(50.0)
    mem = figure(page, "memory")
    assert {"weights", "kv_cache"} <= set(mem["metas"])
    assert tab.errors == []
    tab.shot("serving")


def test_bad_input_is_shown_next_to_its_field(tab: Tab) -> None:
    page = tab.open("/training?model=llama-3-70b&tp=3")
    assert "must divide num_attention_heads=64" in page.inner_text("#e-tp")
    assert page.get_attribute("#f-tp", "aria-invalid") == "true"
    page.fill("#f-tp", "eight")
    page.click("button[type=submit]")
    page.wait_for_selector("#e-tp")
    assert "whole number" in page.inner_text("#e-tp")
    assert "Traceback" not in page.content()
    assert tab.errors == [] or all("422" in e for e in tab.errors)
    tab.shot("training-error")


def test_pasting_a_config_reads_it(tab: Tab) -> None:
    page = tab.open("/catalog")
    page.fill("#f-config", json.dumps(model_entry("llama-3-8b")["config"]))
    page.click("#import button[type=submit]")
    page.wait_for_selector("#imported")
    assert int(page.get_attribute("#imported-total", "data-value")) == 8_030_261_248
    page.fill("#f-config", '{"hidden_size": 4096}')
    page.click("#import button[type=submit]")
    page.wait_for_selector("#e-config")
    assert "model_type" in page.inner_text("#e-config")
    tab.shot("catalog-import-error")


def test_sweep_explorer_charts_table_and_planner_link(tab: Tab, server: str) -> None:
    query = (
        "model=llama-3-70b&accelerator=h100-sxm-80gb&accelerator=h200-sxm-141gb"
        "&num_gpus=64,128&tp=4,8&pp=1,2,4&tokens=2e12"
    )
    page = tab.open(f"/sweep?{query}")
    api = httpx.post(
        f"{server}/api/v1/training/sweep",
        json={
            "model": "llama-3-70b",
            "accelerator": ["h100-sxm-80gb", "h200-sxm-141gb"],
            "num_gpus": [64, 128],
            "layout": {"tp": [4, 8], "pp": [1, 2, 4]},
            "tokens": 2e12,
        },
    ).json()
    assert page.inner_text("#feasible-count") == f"{api['counts']['feasible']:,}"
    scatter = figure(page, "scatter")
    names = set(scatter["names"])
    assert {"does not fit", "Pareto front"} <= names
    # a trace per accelerator (and, under stack auto, per stack its layouts are timed on:
    # "h100-sxm-80gb · megatron-core")
    for acc in ("h100-sxm-80gb", "h200-sxm-141gb"):
        assert any(n == acc or n.startswith(f"{acc} · ") for n in names), names
    assert figure(page, "heatmap")["drawn"] >= 1 and figure(page, "bars")["drawn"] >= 1
    # drawn as SVG points: WebGL traces need eval, which the CSP forbids (a grey box before)
    points = page.eval_on_selector_all("#fig-scatter .scatterlayer .point", "ps => ps.length")
    assert points > 0 and "WebGL is not supported" not in page.inner_text("body")
    shown = page.eval_on_selector_all(
        "#layouts tbody tr td[data-value]", "cells => cells.map(c => Number(c.dataset.value))"
    )
    assert shown == [r["tokens_per_s"] for r in api["rows"]]
    assert tab.errors == []
    tab.shot("sweep")
    best = api["recommendations"][0]["row"]
    page.click("#recommendations article:first-child a")
    page.wait_for_selector("#kpi-tps")
    assert float(page.get_attribute("#kpi-tps", "data-value")) == pytest.approx(
        best["tokens_per_s"], rel=1e-12
    )
    assert tab.errors == []


def test_compare_plans_side_by_side(tab: Tab, server: str) -> None:
    page = tab.open("/training?model=llama-3-70b&num_gpus=64&tp=8&pp=2&tokens=2e12")
    page.click("#compare-link")
    page.wait_for_selector('[id="f-a.tp"]', state="attached")  # plan 1 compared: collapsed
    assert page.input_value('[id="f-a.tp"]') == "8"
    page.select_option('[id="f-b.model"]', "llama-3-70b")
    page.select_option('[id="f-b.accelerator"]', "h200-sxm-141gb")
    page.fill('[id="f-b.num_gpus"]', "64")
    page.fill('[id="f-b.tp"]', "8")
    page.fill('[id="f-b.tokens"]', "2e12")
    page.click("#compare-submit")
    page.wait_for_selector("#comparison")
    page.wait_for_load_state("networkidle")
    twin = httpx.get(page.url + "&format=json").json()
    assert list(twin) == ["Plan A", "Plan B"]
    cells = page.eval_on_selector_all(
        "#comparison tr[data-label='Step time'] td",
        "cells => cells.map(c => Number(c.dataset.value))",
    )
    assert cells == [twin["Plan A"]["time"]["step_s"], twin["Plan B"]["time"]["step_s"]]
    memory = figure(page, "memory")
    assert "capacity" in memory["names"] and "weights" in memory["metas"]
    assert tab.errors == []
    tab.shot("compare")


def test_serving_sweep_explorer(tab: Tab, server: str) -> None:
    page = tab.open("/sweep?model=llama-3-70b")
    page.click("#to-serving")
    page.wait_for_selector("#f-tp")
    page.check('input[name=accelerator][value="h100-sxm-80gb"]')
    page.check('input[name=accelerator][value="h200-sxm-141gb"]')
    page.fill("#f-tp", "2,4,8")
    page.fill("#f-pp", "1")
    page.fill("#f-tpot_target_s", "0.05")
    page.click("form.plan button[type=submit]")
    page.wait_for_selector("#layouts")
    page.wait_for_load_state("networkidle")
    api = httpx.post(
        f"{server}/api/v1/inference/sweep",
        json={
            "model": "llama-3-70b",
            "accelerator": ["h100-sxm-80gb", "h200-sxm-141gb"],
            "layout": {"tp": [2, 4, 8], "pp": 1},
            "tpot_target_s": 0.05,
        },
    ).json()
    assert page.inner_text("#ok-count") == str(api["counts"]["ok"])
    shown = page.eval_on_selector_all(
        "#layouts tbody td[data-value]", "cells => cells.map(c => Number(c.dataset.value))"
    )
    assert shown == [r["output_tokens_per_s_per_gpu"] for r in api["rows"]]
    assert {"h100-sxm-80gb", "h200-sxm-141gb"} <= set(figure(page, "scatter")["names"])
    assert tab.errors == []
    tab.shot("sweep-serving")


def test_aggregated_against_disaggregated_fronts_draw_svg_points(tab: Tab, server: str) -> None:
    """The serving explorer with ``disaggregated``: the side-by-side table shows the API's
    fleets, and the two Pareto fronts are drawn as SVG points (no WebGL: the CSP forbids it)."""
    query = (
        "mode=serving&model=llama-3.1-70b&accelerator=h100-sxm-80gb&precision=fp8-serving"
        "&tp=2,4,8&pp=1&input_len=8192&output_len=1024&ttft_target_s=2&tpot_target_s=0.05"
        "&request_rate=10&disaggregated=true"
    )
    page = tab.open(f"/sweep?{query}")
    page.wait_for_selector("#disagg-compare")
    api = httpx.post(
        f"{server}/api/v1/inference/sweep",
        json={
            "model": "llama-3.1-70b",
            "accelerator": "h100-sxm-80gb",
            "precision": "fp8-serving",
            "layout": {"tp": [2, 4, 8], "pp": 1},
            "input_len": 8192,
            "output_len": 1024,
            "ttft_target_s": 2,
            "tpot_target_s": 0.05,
            "request_rate": 10,
            "disaggregated": True,
        },
        timeout=60,
    ).json()["disaggregated"]
    shown = page.eval_on_selector_all(
        "#disagg-compare td[data-value]", "cells => cells.map(c => Number(c.dataset.value))"
    )
    assert shown == [api["aggregated"]["fleet_gpus"], api["disaggregated"]["fleet_gpus"]]
    drawn = figure(page, "fronts")
    assert {"Aggregated front", "Disaggregated front"} <= set(drawn["names"])
    assert [s["name"] for s in drawn["shapes"]] == ["TPOT target"]
    points = page.eval_on_selector_all("#fig-fronts svg .scatterlayer .point", "ps => ps.length")
    fronts = len(api["pareto_aggregated"]) + len(api["pareto_disaggregated"])
    assert points >= fronts > 0
    assert page.eval_on_selector_all("#fig-fronts canvas", "cs => cs.length") == 0
    assert tab.errors == []
    tab.shot("sweep-serving-disaggregated")


def test_keyboard_and_narrow_screen(browser: Any, server: str) -> None:
    # Keyboard only: focus the GPU count, type, move on with Tab, submit with Enter.
    context = browser.new_context(viewport={"width": 390, "height": 844})  # a phone
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/training?model=llama-3-8b", wait_until="networkidle")
    page.focus("#f-num_gpus")
    page.keyboard.type("8")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("#kpi-memory")
    assert "num_gpus=8" in page.url
    # One column on a narrow screen: the answer comes first, the form below it (issue 23),
    # nothing wider than the screen.
    form, results = page.locator("aside").bounding_box(), page.locator(".results").bounding_box()
    assert form is not None and results is not None and results["y"] < form["y"]
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390 + 1
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "training-phone.png"), full_page=True)
    assert errors == []
    context.close()


def test_team_accelerator_in_picker_and_saving_a_plan(tab: Tab, server: str) -> None:
    """A team accelerator appears in the training planner's picker; the plan on it is saved
    from the page's form and opens at its share link with the negotiated price's cost."""
    team_gpu = {
        "id": "h100-browser-team",
        "name": "H100 (team)",
        "memory_gb": 80,
        "hbm_tb_per_s": 3.35,
        "dense_tflops": {"bf16": 989.4, "fp8": 1978.9},
        "scale_up_gb_per_s": 450,
        "scale_up_domain": 8,
        "price_usd_per_gpu_hour": 1.25,
    }
    created = httpx.post(f"{server}/api/v1/team/accelerators", json=team_gpu)
    assert created.status_code in (201, 409)  # 409: made by an earlier run of this session
    page = tab.open("/training?blank=1")
    label = page.inner_text('#f-accelerator option[value="h100-browser-team"]')
    assert label == "h100-browser-team (team)"
    page.select_option("#f-model", "llama-3-8b")
    page.select_option("#f-accelerator", "h100-browser-team")
    page.fill("#f-num_gpus", "8")
    page.fill("#f-tokens", "1e11")
    page.click("form.plan button[type=submit]")
    page.wait_for_selector("#save")
    page.fill("#s-name", "8B on our H100s")
    page.fill("#s-tags", "browser, team")
    page.click("#save button[type=submit]")
    page.wait_for_selector("#plan-name")
    assert page.inner_text("#plan-name") == "8B on our H100s"
    assert "/plans/" in page.url and "Nothing changed" in page.inner_text("#versions")
    opened = httpx.get(page.url + "?format=json").json()
    assert opened["request"]["accelerator"] == "h100-browser-team"
    assert opened["current_result"]["cost_usd"] == pytest.approx(
        httpx.post(f"{server}/api/v1/training/estimate", json=opened["request"]).json()["cost"][
            "usd"
        ]
    )
    page.click("#open-planner")
    page.wait_for_selector("#verdict")
    assert page.input_value("#f-accelerator") == "h100-browser-team"
    assert tab.errors == []
    tab.shot("saved-plan-planner")
    tab.open(f"/plans/{opened['id']}")
    tab.shot("saved-plan")


def test_compare_two_saved_plans(tab: Tab, server: str) -> None:
    ids = []
    for name, gpus in (("browser compare 8", 8), ("browser compare 16", 16)):
        body = {
            "name": name,
            "tags": ["browser-compare"],
            "kind": "training",
            "request": {"model": "llama-3-8b", "num_gpus": gpus, "layout": {"tp": 2}},
        }
        ids.append(httpx.post(f"{server}/api/v1/plans", json=body).json()["id"])
    page = tab.open("/plans?tag=browser-compare")
    for pid in ids:
        page.check(f'#plans input[value="{pid}"]')
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector("#comparison")
    page.wait_for_load_state("networkidle")
    header = page.eval_on_selector_all("#comparison thead th a", "a => a.map(x => x.textContent)")
    assert sorted(header) == ["browser compare 16", "browser compare 8"]
    memory = figure(page, "memory")
    assert "capacity" in memory["names"] and memory["drawn"] > 0
    assert tab.errors == []
    tab.shot("saved-plans-compare")


@pytest.mark.parametrize(("path", "kpi"), [("/training", "#kpi-tps"), ("/serving", "#kpi-otps")])
def test_first_visit_opens_on_a_worked_example(tab: Tab, server: str, path: str, kpi: str) -> None:
    """A first-time visitor sees an answer, labelled as a worked example, with its inputs in
    the form; the same numbers as the API gives for that plan; a link starts from blank."""
    page = tab.open(path)
    assert page.inner_text("#example").startswith("Worked example:")
    assert page.input_value("#f-model") == "llama-3.1-70b"
    assert page.is_visible(kpi) and page.is_visible("#accuracy")
    json_twin = httpx.get(server + page.get_attribute("a[href*='format=json']", "href")).json()
    assert float(page.get_attribute(kpi, "data-value")) == pytest.approx(
        json_twin["throughput"]["tokens_per_s" if path == "/training" else "output_tokens_per_s"]
    )
    page.click("#blank-form")
    page.wait_for_load_state("networkidle")
    assert page.locator("#example").count() == 0 and page.locator("#verdict").count() == 0
    assert tab.errors == []


def test_home_answers_three_questions(tab: Tab, server: str) -> None:
    page = tab.open("/")
    links = page.locator("#examples li a")
    assert links.count() == 3
    answers = page.locator("#examples .answer").all_inner_texts()
    assert answers[0].startswith(("Yes:", "No:")) and "TTFT" in answers[2]
    links.nth(2).click()
    page.wait_for_selector("#kpi-ttft")
    assert page.locator("#example").count() == 0  # a question's link is a plan, not the example
    assert tab.errors == []


# --- a first visit: gzip, caching and Plotly only where a page draws -----------------------------

RESOURCES = """() => performance.getEntriesByType("resource").map(e => ({url: e.name,
    transfer: e.transferSize, encoded: e.encodedBodySize, decoded: e.decodedBodySize}))"""


def test_first_visit_is_gzipped_then_cached_and_plotly_loads_only_where_drawn(
    browser: Any, server: str
) -> None:
    context = browser.new_context()  # an empty cache: a first visit
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # What the browser asks for (cache hits included) and what the server answers on the wire
    # (a revalidated file is a 304 there, a 200 to the page).
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    asked: dict[str, str] = {}
    wire: list[tuple[str, int]] = []
    cdp.on(
        "Network.requestWillBeSent",
        lambda e: asked.__setitem__(e["requestId"], e["request"]["url"]),
    )
    cdp.on(
        "Network.responseReceivedExtraInfo",
        lambda e: wire.append((asked.get(e["requestId"], ""), e["statusCode"])),
    )
    headers: dict[str, dict[str, str]] = {}
    page.on("response", lambda r: headers.setdefault(r.url, r.headers))

    for path in ("/", "/catalog", "/training?blank=1"):  # no figure on these
        page.goto(server + path, wait_until="load")
    assert asked and not [u for u in asked.values() if "plotly" in u or "charts.js" in u]

    page.goto(f"{server}/training?model=llama-3-8b&num_gpus=8", wait_until="load")
    (plotly,) = [r for r in page.evaluate(RESOURCES) if "plotly.min.js" in r["url"]]
    assert headers[plotly["url"]]["content-encoding"] == "gzip"
    assert headers[plotly["url"]]["cache-control"] == "public, max-age=31536000, immutable"
    assert plotly["transfer"] >= plotly["encoded"] > 0  # over the wire, not from a cache
    assert plotly["encoded"] < plotly["decoded"] / 3  # 1.5 of 4.8 MB
    assert figure(page, "memory")["drawn"] >= 1

    # The next page that draws takes every script and style from the cache, unasked.
    sent = len(wire)
    page.goto(f"{server}/serving?model=llama-3-8b", wait_until="load")
    cached = page.evaluate(RESOURCES)
    assert {r["url"].split("?")[0].rsplit("/", 1)[-1] for r in cached} >= {
        "plotly.min.js",
        "charts.js",
        "forms.js",
        "site.css",
    }
    assert all(r["transfer"] == 0 for r in cached), cached
    assert not [url for url, _ in wire[sent:] if "/static/" in url]
    assert figure(page, "memory")["drawn"] >= 1

    # A URL without a version is asked again each time, and answered 304 while it holds.
    page.goto(f"{server}/static/site.css")
    page.reload()
    assert [s for url, s in wire if url == f"{server}/static/site.css"] == [200, 304]
    assert errors == []
    context.close()


# --- busy state while a form's request runs ------------------------------------------------------

# Reports every form button's state to the test whenever it changes (an init script, which the
# page's CSP does not govern): a page cannot be queried while its form's navigation is held.
WATCH_BUTTONS = """document.addEventListener("DOMContentLoaded", () => {
  const report = () => window.buttonsSeen([...document.querySelectorAll("form button")].map(
    b => ({form: b.form.className || b.form.id, formBusy: b.form.getAttribute("aria-busy"),
           disabled: b.disabled, busy: b.getAttribute("aria-busy"), text: b.textContent})));
  new MutationObserver(report).observe(document.body, {subtree: true, childList: true,
    characterData: true, attributes: true, attributeFilter: ["disabled", "aria-busy"]});
});"""


class Watched:
    """A page whose form buttons report their state, and whose matching requests can be held."""

    def __init__(self, browser: Any, base: str) -> None:
        self.context = browser.new_context()
        self.seen: list[list[dict[str, Any]]] = []
        self.context.expose_function("buttonsSeen", lambda state: self.seen.append(state))
        self.context.add_init_script(WATCH_BUTTONS)
        self.page = self.context.new_page()
        self.base = base
        self.held: list[Any] = []

    def hold(self, part: str) -> None:
        """Hold every request whose URL contains ``part`` until ``release``."""
        self.page.route(lambda url: part in url, lambda route: self.held.append(route))

    def release(self) -> None:
        while self.held:
            self.held.pop().continue_()
        self.page.unroute_all()

    def buttons(self, form: str, wait_for: Any = None) -> list[dict[str, Any]]:
        """The buttons of ``form`` as last reported (once ``wait_for`` holds of them)."""
        for _ in range(200):
            last = [b for b in (self.seen[-1] if self.seen else []) if b["form"] == form]
            if last and (wait_for is None or wait_for(last)):
                return last
            self.page.wait_for_timeout(50)
        raise AssertionError(f"{form}: {self.seen[-1:] or 'nothing reported'}")

    def now(self, selector: str) -> list[list[Any]]:
        return self.page.eval_on_selector_all(  # type: ignore[no-any-return]
            f"{selector} button",
            "bs => bs.map(b => [b.disabled, b.getAttribute('aria-busy'), b.textContent])",
        )


@pytest.fixture
def watched(browser: Any, server: str) -> Iterator[Watched]:
    w = Watched(browser, server)
    yield w
    w.context.close()


def test_a_submitted_plan_is_busy_until_its_answer_comes(watched: Watched, server: str) -> None:
    page = watched.page
    page.goto(f"{server}/training?model=llama-3-8b", wait_until="networkidle")
    watched.hold("num_gpus=8")
    page.focus("#f-num_gpus")  # from the keyboard: type, then Enter in the field
    page.keyboard.type("8")
    page.keyboard.press("Enter")
    (busy,) = watched.buttons("plan", lambda b: b[0]["disabled"])
    assert busy == {
        "form": "plan",
        "formBusy": "true",
        "disabled": True,
        "busy": "true",
        "text": "Working…",
    }
    assert watched.buttons("saveform")[0]["disabled"] is False  # other forms stay usable
    page.keyboard.press("Escape")  # gave up waiting: the form is usable again
    (back,) = watched.buttons("plan", lambda b: not b[0]["disabled"])
    assert back["text"] == "Estimate" and back["busy"] is None and back["formBusy"] is None
    watched.release()
    page.wait_for_selector("#kpi-memory")
    assert "num_gpus=8" in page.url and watched.now("form.plan") == [[False, None, "Estimate"]]
    # Submitted again and left for the answer; back to it, its button is usable again.
    page.fill("#f-num_gpus", "16")
    page.click("form.plan button[type=submit]")
    page.wait_for_url("**num_gpus=16**")
    page.wait_for_selector("#kpi-memory")
    page.go_back(wait_until="load")
    assert "num_gpus=8" in page.url and watched.now("form.plan") == [[False, None, "Estimate"]]


def test_the_question_pressed_is_the_one_that_says_so(watched: Watched, server: str) -> None:
    page = watched.page
    page.goto(f"{server}/", wait_until="networkidle")
    watched.hold("/serving?")
    page.focus("text=Will serving fit")  # Tab to it and press Space (a click would wait)
    page.keyboard.press(" ")
    buttons = watched.buttons("pick", lambda b: b[1]["disabled"])
    assert [(b["disabled"], b["busy"], b["text"]) for b in buttons] == [
        (True, None, "Will training fit, how fast, how much?"),
        (True, "true", "Working…"),
        (True, None, "Find me the best layout"),
    ]
    watched.release()
    page.wait_for_url("**/serving?**")
    page.wait_for_load_state("load")
    assert watched.now("form.plan") == [[False, None, "Estimate"]]
