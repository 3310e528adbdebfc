"""The memory timeline: its peak is the memory estimate's total, for every schedule and
sharding, and its shape follows 1F1B (training) and KV-cache growth (serving)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import (
    InferenceSetup,
    Parallelism,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    inference_memory,
    training_memory,
)
from estimator.memory.timeline import inference_timeline, training_timeline
from estimator.memory.training import most_loaded_terms

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")

CASES = [
    (
        "llama-3-70b",
        Parallelism(tp=8, pp=4, dp=2, sequence_parallel=True, zero_stage=1),
        "selective",
    ),
    ("llama-3-70b", Parallelism(tp=8, pp=4, dp=2, vp=5, sequence_parallel=True), "full"),
    ("llama-3-8b", Parallelism(tp=1, dp=8, zero_stage=3), "full"),
    ("mixtral-8x7b", Parallelism(tp=4, pp=4, dp=8, ep=8, etp=1, sequence_parallel=True), "none"),
    (
        "deepseek-v3",
        Parallelism(tp=8, pp=1, dp=64, ep=64, etp=1, sequence_parallel=True, zero_stage=1),
        "selective",
    ),
    ("gemma-2-9b", Parallelism(tp=2, pp=2, dp=2, sequence_parallel=True), "none"),
]


@pytest.mark.parametrize(("model", "p", "recompute"), CASES, ids=[c[0] for c in CASES])
def test_training_peak_is_the_estimate(model: str, p: Parallelism, recompute: str) -> None:
    m = get_model(model)
    setup = TrainingSetup(4096, 1, 64 * p.dp, recompute)  # type: ignore[arg-type]
    timeline = training_timeline(m, H100, p, setup, BF16)
    memory = training_memory(m, H100, p, setup, BF16)
    assert timeline.peak.total_bytes == pytest.approx(memory.total_bytes, rel=1e-12)
    first, last = timeline.points[0], timeline.points[-1]
    assert first.parts["activations_bytes"] == last.parts["activations_bytes"] == 0
    # the step ends where it began, but for the loss blocks the allocator keeps (last stage,
    # with a recomputed layer that came after them)
    held = most_loaded_terms(m, p, setup, BF16)["loss_cache_bytes"]
    assert last.total_bytes - first.total_bytes == pytest.approx(float(held), abs=1.0)
    warm = [pt.parts["activations_bytes"] for pt in timeline.points if pt.phase == "warm-up"]
    assert warm == sorted(warm) and warm[-1] > 0
    assert sum(pt.phase == "cool-down" for pt in timeline.points) == len(warm)


def test_serving_peak_is_the_estimate_and_kv_grows() -> None:
    m = get_model("llama-3-70b")
    p, setup = Parallelism(tp=4), InferenceSetup(2048, 512, 48)
    timeline = inference_timeline(m, H100, p, setup, BF16)
    memory = inference_memory(m, H100, p, setup, BF16)
    assert timeline.peak.total_bytes == pytest.approx(memory.total_bytes, rel=1e-12)
    kv = [pt.parts["kv_cache_bytes"] for pt in timeline.points]
    assert kv == sorted(kv) and kv[-1] == pytest.approx(memory.kv_cache_bytes, rel=1e-12)


def test_api_and_pages() -> None:
    client = TestClient(app)
    plan = {"model": "llama-3-70b", "num_gpus": 64, "layout": {"tp": 8, "pp": 2}}
    tl = client.post("/api/v1/training/timeline", json=plan).json()
    est = client.post("/api/v1/training/estimate", json=plan).json()
    assert tl["peak_bytes"] == pytest.approx(est["memory_per_gpu"]["total_bytes"], rel=1e-12)
    assert tl["points"][tl["peak_index"]]["total_bytes"] == tl["peak_bytes"]
    serve = {"model": "llama-3-8b", "concurrency": 16}
    stl = client.post("/api/v1/inference/timeline", json=serve).json()
    sest = client.post("/api/v1/inference/estimate", json=serve).json()
    assert stl["peak_bytes"] == pytest.approx(sest["memory_per_gpu"]["total_bytes"], rel=1e-12)
    assert 'id="fig-timeline"' in client.get("/training?model=llama-3-8b&num_gpus=8").text
    assert 'id="fig-timeline"' in client.get("/serving?model=llama-3-8b").text


def test_cli(tmp_path: object) -> None:
    import json
    from pathlib import Path

    from app.cli.commands import main

    plan = Path(str(tmp_path)) / "plan.json"
    plan.write_text(json.dumps({"model": "llama-3-8b", "num_gpus": 8, "layout": {"pp": 2}}))
    assert main(["timeline", str(plan)]) == 0
    plan.write_text(json.dumps({"model": "llama-3-8b", "concurrency": 8}))
    assert main(["timeline", str(plan), "--serving"]) == 0
    assert main(["timeline", str(plan)]) == 2  # a serving request is refused as a training one
