"""The audit's browser checks, in Chromium: a page on another site that posts the planner's
forms (and a no-cors ``fetch`` of JSON to its API) changes nothing; text a user saved or typed
(names, descriptions, tags, a pasted config, a search) is shown as text on every page that
echoes it, never run as script or markup."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from markupsafe import escape

API = "/api/v1"
HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '"><img src=x onerror="window.__pwned = 1">',
    "javascript:window.__pwned=1",
    "{{7*7}}{% raw %}",
    "</textarea><svg onload=window.__pwned=1>",
]


@pytest.fixture
def attacker() -> Iterator[tuple[str, dict[str, str]]]:
    """Another site (``localhost``, a different site from ``127.0.0.1``) serving whatever page
    the test puts in ``pages``."""
    pages: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}", pages
    finally:
        httpd.shutdown()


def _plans(server: str) -> dict[str, str]:
    return {p["id"]: p["name"] for p in httpx.get(f"{server}{API}/plans?limit=500").json()}


def test_another_site_cannot_write(
    browser: Any, server: str, attacker: tuple[str, dict[str, str]]
) -> None:
    site, pages = attacker
    body = {
        "name": "keep me",
        "kind": "training",
        "request": {"model": "llama-3-8b", "num_gpus": 8},
    }
    plan_id = httpx.post(f"{server}{API}/plans", json=body).json()["id"]
    before = _plans(server)
    forms = {
        "/delete": f'<form method="post" action="{server}/plans/{plan_id}/delete"></form>',
        "/edit": (
            f'<form method="post" action="{server}/plans/{plan_id}/edit">'
            '<input name="name" value="hacked"></form>'
        ),
        "/save": (
            f'<form method="post" action="{server}/plans"><input name="kind" value="training">'
            '<input name="name" value="planted"><input name="query" value="model=llama-3-8b">'
            "</form>"
        ),
    }
    for path, form in forms.items():
        pages[path] = f"<html><body>{form}<script>document.forms[0].submit()</script></body></html>"
    planted = json.dumps(body | {"name": "planted by fetch"})
    pages["/fetch"] = (
        "<html><body><script>"
        f"fetch('{server}{API}/plans', {{method: 'POST', mode: 'no-cors', "
        f"body: new Blob([{json.dumps(planted)}])}}).then(() => document.title = 'sent')"
        "</script></body></html>"
    )
    context = browser.new_context()
    page = context.new_page()
    statuses: list[int] = []
    page.on(
        "response",
        lambda r: (
            statuses.append(r.status)
            if r.url.startswith(server) and r.request.method == "POST"
            else None
        ),
    )
    for path in ("/delete", "/edit", "/save"):
        page.goto(site + path)
        page.wait_for_load_state("networkidle")
        assert "Refused" in page.content()
    page.goto(site + "/fetch")
    page.wait_for_function("document.title === 'sent'")
    time.sleep(0.3)
    context.close()
    assert statuses and set(statuses) == {403}
    assert _plans(server) == before


@pytest.mark.parametrize("text", HOSTILE)
def test_saved_and_typed_text_is_shown_as_text(browser: Any, server: str, text: str) -> None:
    body = {
        "name": text,
        "description": text,
        "tags": [text[:50]],
        "kind": "training",
        "request": {"model": "llama-3-8b", "num_gpus": 8},
    }
    made = httpx.post(f"{server}{API}/plans", json=body)
    assert made.status_code == 201, made.text
    plan_id = made.json()["id"]
    other = httpx.post(f"{server}{API}/plans", json={**body, "name": "plain"}).json()["id"]
    config = {"model_type": text, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}  # fmt: skip
    paths = [
        "/plans",
        f"/plans/{plan_id}",
        f"/plans/compare?ids={plan_id},{other}",
        "/plans?" + httpx.QueryParams({"q": text}).__str__(),
        "/training?" + httpx.QueryParams({"config": json.dumps(config)}).__str__(),
        "/catalog?" + httpx.QueryParams({"config": json.dumps(config)}).__str__(),
        "/training?" + httpx.QueryParams({"model": text}).__str__(),
        "/sweep?" + httpx.QueryParams({"model": text}).__str__(),
    ]
    context = browser.new_context()
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for path in paths:
        page.goto(server + path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__pwned") is None, path
        assert page.query_selector("img[src=x], svg[onload]") is None, path
        if "{{7*7}}" in text:
            assert "{{7*7}}" in page.inner_text("body") or path.startswith("/sweep"), path
    context.close()
    assert dialogs == []
    shown = httpx.get(f"{server}/plans/{plan_id}").text
    assert str(escape(text)) in shown  # the page carries it escaped
