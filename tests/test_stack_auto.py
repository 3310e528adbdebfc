"""Stack auto: each layout timed on the stack that runs it (issue 45 item 1), the sweep limited
to the layouts a stack runs, and a hidden ZeRO-3 exchange explained with its numbers."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator.errors import SpecError
from estimator.timing.stacks import (
    AUTO_STACKS,
    FSDP2_COMPUTE_SCALE,
    STACKS,
    auto_stack,
    auto_takes,
    stack_choice,
    sweep_stacks,
)

API = "/api/v1"


@pytest.mark.parametrize(
    ("layout", "stack"),
    [
        ((1, 1, 1, 1, 1, 3), "fsdp2"),
        ((1, 1, 1, 1, 1, 2), "deepspeed"),
        ((1, 1, 1, 1, 1, 1), "megatron-core"),
        ((1, 1, 1, 1, 1, 0), "megatron-core"),
        ((8, 1, 1, 1, 1, 3), "megatron-core"),
        ((1, 2, 1, 1, 1, 3), "megatron-core"),
        ((1, 1, 2, 1, 1, 1), "megatron-core"),
    ],
)
def test_auto_follows_the_stated_precedence(layout: tuple[int, ...], stack: str) -> None:
    assert auto_stack(*layout) == stack
    assert stack_choice("auto", *layout)[0] == stack


def test_auto_gives_every_layout_to_exactly_one_stack() -> None:
    rng = np.random.default_rng(0)
    axes = [rng.choice([1, 2, 8], 400) for _ in range(5)] + [rng.integers(0, 4, 400)]
    taken = sum(np.asarray(auto_takes(s, *axes), dtype=int) for s in AUTO_STACKS)
    assert bool(np.all(np.asarray(taken) == 1))


def test_a_data_parallel_stack_refuses_model_parallelism_with_the_field() -> None:
    with pytest.raises(SpecError) as err:
        stack_choice("deepspeed", 8, 1, 1, 1, 1, 1)
    assert err.value.field == "stack"
    with pytest.raises(SpecError, match="list it alone"):
        sweep_stacks(("auto", "fsdp2"))
    client = TestClient(app, base_url="http://localhost")
    bad = client.post(
        f"{API}/training/estimate",
        json={"model": "llama-3-8b", "num_gpus": 8, "layout": {"tp": 8}, "stack": "llm-foundry"},
    )
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "stack"


def test_the_answer_says_which_stack_and_why_and_why_zero3_is_hidden() -> None:
    client = TestClient(app, base_url="http://localhost")
    body = {"model": "llama-3-70b", "num_gpus": 512, "accelerator": "h100-sxm-80gb",
            "layout": {"zero_stage": 3}, "micro_batch_size": 2, "recompute": "full",
            "seq_len": 4096, "global_batch_size": 1024}  # fmt: skip
    out = client.post(f"{API}/training/estimate", json=body).json()
    assert out["stack"]["name"] == "fsdp2" and "stack auto" in out["stack"]["chosen"]
    assert out["stack"]["compute_scale"] == FSDP2_COMPUTE_SCALE == STACKS["fsdp2"].compute_scale
    hidden = [n for n in out["notes"] if n.startswith("ZeRO-3 / FSDP communication fully hidden")]
    assert len(hidden) == 1 and " ms " in hidden[0]
    asked = client.post(f"{API}/training/estimate", json={**body, "stack": "megatron-core"}).json()
    assert asked["stack"]["chosen"].endswith("as requested.")


def test_the_sweep_times_each_layout_once_under_auto() -> None:
    client = TestClient(app, base_url="http://localhost")
    body = {"model": "llama-3-8b", "accelerator": ["h100-sxm-80gb"], "num_gpus": [16]}
    auto = client.post(f"{API}/training/sweep", json=body).json()
    one = client.post(f"{API}/training/sweep", json={**body, "stack": "megatron-core"}).json()
    assert auto["counts"]["enumerated"] == one["counts"]["enumerated"]
    assert auto["counts"]["evaluated"] == one["counts"]["evaluated"]
    assert set(auto["stacks"]) == set(AUTO_STACKS)
    assert any("stack auto" in n for n in auto["notes"])
    for rec in auto["recommendations"]:
        r = rec["row"]
        layout = (r["tp"], r["pp"], r["cp"], r["ep"], r["vp"], r["zero_stage"])
        assert r["stack"] == auto_stack(*layout)
    ds = client.post(f"{API}/training/sweep", json={**body, "stack": "deepspeed"}).json()
    assert all(rec["row"]["tp"] == rec["row"]["pp"] == 1 for rec in ds["recommendations"])
