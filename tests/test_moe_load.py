"""MoE token imbalance and capacity factor (issue 21): the busiest expert-parallel rank sets
the experts' time and memory."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.context import Context
from estimator.errors import SpecError
from estimator.memory.training import training_memory
from estimator.timing.gemms import linear_gemm_time
from estimator.timing.kernels import kernel_profile
from estimator.timing.training import estimate_training

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
MIXTRAL = get_model("mixtral-8x7b")
LAYOUT = Parallelism(tp=2, dp=32, ep=8)


def _setup(**moe: float | None) -> TrainingSetup:
    return TrainingSetup(4096, 1, 256, "none", **moe)  # type: ignore[arg-type]


def test_expert_load_is_the_imbalance_capped_by_capacity() -> None:
    assert _setup().expert_load == 1.0
    assert _setup(moe_imbalance=1.5).expert_load == 1.5
    assert _setup(moe_imbalance=1.5, moe_capacity_factor=1.25).expert_load == 1.25
    assert _setup(moe_imbalance=1.2, moe_capacity_factor=2.0).expert_load == 1.2


def test_the_busiest_rank_sets_the_expert_gemms() -> None:
    """Routed-expert GEMM rows scale with the load; the attention and router GEMMs do not."""
    kind = MIXTRAL.kinds[0]
    prof = kernel_profile(H100.id)
    tokens = 4096 / LAYOUT.cp
    dense_only = [m for m in kind.linears if m.copies == 1]
    assert dense_only and len(dense_only) < len(kind.linears)
    c = Context.of(MIXTRAL, H100, LAYOUT, BF16, prof=prof)
    base = linear_gemm_time(c, kind, tokens)
    loaded = linear_gemm_time(c, kind, tokens, 1.5)
    assert 1.0 < loaded / base < 1.5
    slow = estimate_training(MIXTRAL, H100, LAYOUT, _setup(moe_imbalance=1.5), BF16)
    fast = estimate_training(MIXTRAL, H100, LAYOUT, _setup(), BF16)
    assert slow.time.forward_s > fast.time.forward_s
    assert slow.mfu < fast.mfu  # the same model FLOPs take longer


def test_routed_activations_scale_with_the_load() -> None:
    base = training_memory(MIXTRAL, H100, LAYOUT, _setup(), BF16)
    loaded = training_memory(MIXTRAL, H100, LAYOUT, _setup(moe_imbalance=2.0), BF16)
    capped = training_memory(
        MIXTRAL, H100, LAYOUT, _setup(moe_imbalance=2.0, moe_capacity_factor=1.0), BF16
    )
    assert loaded.activations_bytes > base.activations_bytes
    assert capped.activations_bytes == pytest.approx(base.activations_bytes, rel=1e-12)
    assert loaded.weights_bytes == base.weights_bytes
    assert any("dropped" in n for n in capped.notes)
    assert any("assumed balanced" in n for n in base.notes)


def test_bad_moe_settings_are_refused() -> None:
    for setup, field in (
        (_setup(moe_imbalance=0.5), "moe_imbalance"),
        (_setup(moe_capacity_factor=0.0), "moe_capacity_factor"),
    ):
        with pytest.raises(SpecError) as refused:
            training_memory(MIXTRAL, H100, LAYOUT, setup, BF16)
        assert refused.value.field == field
    with pytest.raises(SpecError, match="mixture-of-experts"):
        training_memory(
            get_model("llama-3-8b"), H100, Parallelism(dp=8), _setup(moe_imbalance=2), BF16
        )


def test_api_takes_the_moe_load() -> None:
    client = TestClient(app)
    # eight micro-batches a step: compute, not the experts' gradient sync across nodes, sets it
    req = {
        "model": "mixtral-8x7b",
        "num_gpus": 64,
        "layout": {"tp": 2, "ep": 8},
        "global_batch_size": 256,
    }
    base = client.post("/api/v1/training/estimate", json=req).json()
    loaded = client.post("/api/v1/training/estimate", json={**req, "moe_imbalance": 1.5}).json()
    assert loaded["time"]["step_s"] > base["time"]["step_s"]
    bad = client.post("/api/v1/training/estimate", json={**req, "moe_imbalance": 0.5})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "moe_imbalance"
    page = client.get("/training", params={"model": "mixtral-8x7b", "num_gpus": 64, "tp": 2,
                                           "ep": 8, "moe_imbalance": 1.5}).text  # fmt: skip
    assert 'name="moe_imbalance"' in page and "MoE load" in page
