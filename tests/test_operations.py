"""Security headers, /metrics, access logs, CORS, settings, and hostile text shown as text (never
markup) on the pages."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.service.operations import JsonFormatter
from app.settings import Settings

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


def test_estimates_are_counted_by_kind() -> None:
    client = TestClient(create_app())
    client.post("/api/v1/training/estimate", json={"model": "llama-3-8b"})
    client.post("/api/v1/training/estimate", json={"model": "llama-3-8b", "layout": {"tp": 2}})
    client.post("/api/v1/training/estimate", json={"model": "llama-3-8b", "layout": {"tp": 3}})
    client.post("/api/v1/inference/estimate", json={"model": "llama-3-8b"})
    body = {"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "layout": {"tp": [1]}}
    client.post("/api/v1/inference/sweep", json={**body, "precision": "bf16"})
    text = client.get("/metrics").text
    assert "# TYPE planner_estimates_total counter" in text
    assert 'planner_estimates_total{kind="training"} 2' in text  # the refused one is not counted
    assert 'planner_estimates_total{kind="inference"} 1' in text
    assert 'planner_estimates_total{kind="serving_sweep"} 1' in text
    assert 'planner_estimates_total{kind="training_sweep"} 0' in text


def test_one_access_line_per_request_with_its_id(caplog: pytest.LogCaptureFixture) -> None:
    client = TestClient(create_app())
    with caplog.at_level(logging.INFO, logger="llm_planner.access"):
        given = client.get("/api/v1/models/llama-3-8b", headers={"X-Request-ID": "trace-42"})
        fresh = client.get("/api/v1/models/nope", headers={"X-Request-ID": "bad id; x=1"})
        refused = client.post("/api/v1/training/estimate", json={"model": 1})
    assert given.headers["x-request-id"] == "trace-42"
    assert re.fullmatch(r"[0-9a-f]{32}", fresh.headers["x-request-id"])  # not echoed: a new id
    lines = [r.fields for r in caplog.records if r.name == "llm_planner.access"]  # type: ignore[attr-defined]
    assert [(x["status"], x["request_id"]) for x in lines] == [
        (200, "trace-42"),
        (404, fresh.headers["x-request-id"]),
        (422, refused.headers["x-request-id"]),
    ]
    first = lines[0]
    assert first["method"] == "GET" and first["path"] == "/api/v1/models/llama-3-8b"
    assert first["route"] == "/api/v1/models/{model_id}"
    assert first["client"] == "testclient" and first["duration_ms"] > 0
    line = json.loads(JsonFormatter().format(caplog.records[0]))
    assert line["logger"] == "llm_planner.access" and line["level"] == "info"
    assert line["request_id"] == "trace-42" and line["status"] == 200
    assert line["ts"].endswith("+00:00")


def test_log_config_routes_uvicorn_and_the_service_through_json() -> None:
    """Applied in a child process: dictConfig replaces the process's handlers, pytest's too."""
    script = (
        "import logging, logging.config\n"
        "from app.service.operations import log_config\n"
        "logging.config.dictConfig(log_config('warning'))\n"
        "logging.getLogger('llm_planner.access').info('quiet at warning')\n"
        "logging.getLogger('llm_planner').error('shown', extra={'fields': {'k': 1}})\n"
        "logging.getLogger('uvicorn.error').warning('shown too')\n"
        "logging.getLogger('uvicorn.access').warning('uvicorn access log is off')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    lines = [json.loads(x) for x in done.stderr.splitlines()]
    assert [(x["logger"], x["level"], x["message"]) for x in lines] == [
        ("llm_planner", "error", "shown"),
        ("uvicorn.error", "warning", "shown too"),
    ]
    assert lines[0]["k"] == 1 and done.stdout == ""


def test_cors_is_off_by_default_and_allows_only_the_configured_origins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    preflight = {
        "Origin": "https://planner.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,authorization",
    }
    closed = TestClient(create_app())
    assert closed.options("/api/v1/training/estimate", headers=preflight).status_code == 405
    got = closed.get("/healthz", headers={"Origin": "https://planner.example"})
    assert "access-control-allow-origin" not in got.headers

    monkeypatch.setenv("PLANNER_CORS_ORIGINS", "https://planner.example, https://other.example/")
    client = TestClient(create_app())
    ok = client.options("/api/v1/training/estimate", headers=preflight)
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "https://planner.example"
    assert "authorization" in ok.headers["access-control-allow-headers"].lower()
    other = client.options(
        "/api/v1/plans", headers={**preflight, "Origin": "https://other.example"}
    )
    assert other.status_code == 200  # the trailing slash of the setting is not part of an origin
    refused = client.options(
        "/api/v1/training/estimate", headers={**preflight, "Origin": "https://evil.example"}
    )
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers
    got = client.get("/healthz", headers={"Origin": "https://planner.example"})
    assert got.headers["access-control-allow-origin"] == "https://planner.example"
    assert "x-request-id" in got.headers["access-control-expose-headers"].lower()


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in [
        ("PLANNER_PORT", "9001"),
        ("PLANNER_WORKERS", "4"),
        ("PLANNER_GRACEFUL_SHUTDOWN_S", "0"),
        ("PLANNER_LOG_LEVEL", "WARNING"),
        ("PLANNER_CORS_ORIGINS", " https://a.example ,,"),
    ]:
        monkeypatch.setenv(name, value)
    s = Settings.from_env()
    assert (s.port, s.workers, s.graceful_shutdown_s, s.log_level) == (9001, 4, 0, "warning")
    assert s.cors_origins == ("https://a.example",)
    assert not s.otel
    for name, value, rule in [
        ("PLANNER_PORT", "70000", "PLANNER_PORT='70000': must be an integer from 1 to 65535"),
        ("PLANNER_KEEP_ALIVE_S", "-1", "PLANNER_KEEP_ALIVE_S='-1': must be an integer"),
        ("PLANNER_LOG_LEVEL", "loud", "PLANNER_LOG_LEVEL='loud': must be one of debug, info"),
    ]:
        with monkeypatch.context() as mp:
            mp.setenv(name, value)
            with pytest.raises(ValueError, match=re.escape(rule)):
                Settings.from_env()


def test_fastapi_telemetry_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI's native OpenTelemetry is off unless PLANNER_OTEL turns it on (then FastAPI's
    defaults: spans, metrics and logs to whatever providers are configured)."""
    assert create_app()._telemetry["tracing"] is False  # FastAPI's own config of the app
    monkeypatch.setenv("PLANNER_OTEL", "1")
    config = create_app()._telemetry
    assert config["tracing"] and config["metrics"] and config["logs"]
