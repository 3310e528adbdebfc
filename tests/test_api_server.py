"""The API against a real server: uvicorn on a loopback port, real HTTP requests to every
endpoint, and a slow sweep that must not hold up other requests (CPU-bound routes run off the
event loop)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx

from estimator import model_entry


def test_every_endpoint_over_http(server: str) -> None:
    api = f"{server}/api/v1"
    with httpx.Client(timeout=60) as c:
        assert c.get(f"{server}/version").json()["api"] == "v1"
        assert c.get(f"{server}/openapi.json").json()["info"]["title"] == "LLM Planner"
        assert c.get(f"{server}/docs").status_code == 200
        assert len(c.get(f"{api}/models").json()) >= 24
        assert c.get(f"{api}/models/llama-3-8b").json()["params"]["total"] == 8_030_261_248
        assert c.get(f"{api}/accelerators").status_code == 200
        assert c.get(f"{api}/accelerators/b200").json()["id"] == "b200"
        assert c.get(f"{api}/precisions").status_code == 200
        config = json.dumps(model_entry("llama-3-8b")["config"]).encode()
        upload = c.post(f"{api}/models/import", files={"file": ("config.json", config)})
        assert upload.json()["params"]["total"] == 8_030_261_248
        train = c.post(f"{api}/training/estimate", json={"model": "llama-3-8b", "num_gpus": 8})
        assert train.status_code == 200 and train.json()["layout"]["dp"] == 8
        serve = c.post(f"{api}/inference/estimate", json={"model": "llama-3-8b"})
        assert serve.status_code == 200 and serve.json()["memory_per_gpu"]["fits"]
        sweep = c.post(
            f"{api}/training/sweep",
            json={"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": [8, 16]},
        )
        assert sweep.status_code == 200 and sweep.json()["counts"]["feasible"] > 0
        csv = c.post(
            f"{api}/inference/sweep?format=csv",
            json={
                "model": "llama-3-8b",
                "accelerator": "h100-sxm-80gb",
                "layout": {"tp": 1, "pp": 1},
            },
        )
        assert csv.headers["content-type"].startswith("text/csv") and csv.text.count("\n") == 3
        bad = c.post(f"{api}/training/estimate", json={"model": "llama-3-8b", "layout": {"tp": 3}})
        assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "layout.tp"


def test_slow_sweep_does_not_block_other_requests(server: str, slow_sweep: dict[str, Any]) -> None:
    # A serving sweep of 960 replica layouts (seconds); a health check sent while it runs must
    # come back before it does.
    done = threading.Event()

    def slow() -> None:
        httpx.post(f"{server}/api/v1/inference/sweep", json=slow_sweep, timeout=120)
        done.set()

    worker = threading.Thread(target=slow)
    worker.start()
    time.sleep(0.3)
    health = httpx.get(f"{server}/healthz", timeout=60)
    answered_first = not done.is_set()
    worker.join()
    assert health.status_code == 200
    assert answered_first, "the health check waited for the sweep"
