"""Every chart on every page draws, with WebGL and without it (issue 23, item 1): Plotly's WebGL
traces need ``eval``, which the site's CSP forbids, so every trace is SVG; a browser started
with WebGL disabled must still draw each figure (no grey 'WebGL is not supported' box)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from app.web.planners import COMPARE_EXAMPLE, COMPARE_SERVING_EXAMPLE
from tests.conftest import CHROMIUM

PAGES = (
    "/training",  # the worked example
    "/serving",
    "/sweep?model=llama-3-8b&num_gpus=8,16&tp=1,2",
    "/sweep?mode=serving&model=llama-3-8b&accelerator=h100-sxm-80gb",
    "/compare?" + urlencode(COMPARE_EXAMPLE),
    "/compare?" + urlencode(COMPARE_SERVING_EXAMPLE),
    "/accuracy?kind=load",
)


@pytest.fixture(scope="module", params=["webgl", "no-webgl"])
def chromium(request: pytest.FixtureRequest) -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    args = ["--no-sandbox"] + (
        ["--disable-webgl", "--disable-3d-apis"] if request.param == "no-webgl" else []
    )
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=args)
        yield b
        b.close()


@pytest.mark.parametrize("path", PAGES)
def test_every_figure_draws(chromium: Any, server: str, path: str) -> None:
    page = chromium.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(server + path, wait_until="networkidle")
    figures = page.eval_on_selector_all(
        "[data-figure]",
        """els => els.map(el => ({id: el.id,
            svg: el.querySelectorAll('.main-svg').length,
            gl: el.querySelectorAll('canvas').length,
            text: el.innerText.includes('WebGL')}))""",
    )
    assert figures, path
    for f in figures:
        assert f["svg"] > 0 and not f["text"], (path, f)
        assert f["gl"] == 0, (path, f)  # no WebGL canvas anywhere
    assert errors == [], (path, errors)
    page.close()
