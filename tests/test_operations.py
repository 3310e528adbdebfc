"""Security headers, /metrics, and hostile text shown as text (never markup) on the pages."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient

from app.main import create_app

HOSTILE = '<script>alert("x")</script>'


def test_security_headers_and_a_csp_that_lets_the_local_scripts_run() -> None:
    client = TestClient(create_app())
    page = client.get("/training")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "object-src 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    assert "'unsafe-inline'" in client.get("/docs").headers["content-security-policy"]
    assert re.findall(r"<script(?![^>]*\bsrc=)", page.text) == []  # no inline script to allow


def test_metrics_in_prometheus_format() -> None:
    client = TestClient(create_app())
    for _ in range(3):
        client.get("/api/v1/models/llama-3-8b")
    client.get("/api/v1/models/nope")
    client.post("/api/v1/training/estimate", json={"model": "llama-3-8b"})
    text = client.get("/metrics").text
    assert (
        'planner_requests_total{method="GET",route="/api/v1/models/{model_id}",status="200"} 3'
        in text
    )
    assert 'route="/api/v1/models/{model_id}",status="404"} 1' in text
    assert (
        'planner_request_seconds_count{method="POST",route="/api/v1/training/estimate"} 1' in text
    )
    assert 'le="+Inf"' in text and "# TYPE planner_request_seconds histogram" in text


def test_hostile_text_is_escaped() -> None:
    client = TestClient(create_app())
    config = json.dumps({"model_type": "llama", "hidden_size": HOSTILE})
    for url in (
        f"/catalog?config={config}",
        f"/training?model={HOSTILE}",
        f"/training?model=llama-3-8b&tp={HOSTILE}",
        f"/sweep?model=llama-3-8b&num_gpus={HOSTILE}",
        f"/compare?a.model=llama-3-8b&a.tokens={HOSTILE}",
    ):
        page = client.get(url, params=None)
        assert page.status_code in (200, 422)
        assert HOSTILE not in page.text, url
        assert "&lt;script&gt;" in page.text or "%3Cscript" in page.text, url
