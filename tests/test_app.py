"""The service starts and its health endpoint answers."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.main import app


def test_health() -> None:
    body = TestClient(app).get("/health").json()
    assert body["status"] == "ok"
    assert body["models"] >= 24 and body["accelerators"] >= 23
