"""Gradient accumulation without the reduction until the last micro-batch (FSDP1's ``no_sync``,
FSDP2's ``set_requires_gradient_sync(False)``; Lightning Fabric's ``no_backward_sync`` as LitGPT
runs it): "FSDP will accumulate the full model gradients (instead of gradient shards) until the
eventual sync" (torch ``FullyShardedDataParallel.no_sync``), so each rank holds its stage's
gradients unsharded and the ZeRO-3 reduce-scatters run in the last micro-batch only."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import (
    Parallelism,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    training_memory,
)
from estimator.errors import SpecError
from estimator.memory.timeline import training_timeline
from estimator.offload import Offload
from estimator.timing.training import estimate_training

A100 = get_accelerator("a100-sxm-80gb")
LLAMA = get_model("llama-3.1-8b")
BF16 = get_precision("bf16")
FSDP8 = Parallelism(dp=8, zero_stage=3)


def _setup(**kw: Any) -> TrainingSetup:
    # 4 micro-batches of 1 a step on each of the 8 ranks
    given = {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 32, "recompute": "full"}
    return TrainingSetup(**(given | kw))


def test_the_gradients_stay_unsharded_until_the_last_micro_batch() -> None:
    """ZeRO-3 over 8 ranks with 4 micro-batches a step: the gradients term is the unsharded
    one (ZeRO-1's, which never shards them); weights and optimizer states stay sharded."""
    plain = training_memory(LLAMA, A100, FSDP8, _setup(), BF16)
    no_sync = training_memory(LLAMA, A100, FSDP8, _setup(no_sync_accumulation=True), BF16)
    unsharded = training_memory(LLAMA, A100, Parallelism(dp=8, zero_stage=1), _setup(), BF16)
    assert no_sync.gradients_bytes == unsharded.gradients_bytes
    assert no_sync.gradients_bytes == pytest.approx(8 * plain.gradients_bytes, rel=1e-3)
    assert no_sync.weights_bytes == plain.weights_bytes
    assert no_sync.optimizer_states_bytes == plain.optimizer_states_bytes
    assert no_sync.total_bytes > plain.total_bytes
    assert any("no_sync over 4 micro-batches" in n for n in no_sync.notes)


def test_expert_gradients_stay_unsharded_too() -> None:
    moe = get_model("qwen3-30b-a3b")
    layout = Parallelism(dp=8, ep=8, zero_stage=3)
    no_sync = training_memory(moe, A100, layout, _setup(no_sync_accumulation=True), BF16)
    unsharded = training_memory(moe, A100, Parallelism(dp=8, ep=8, zero_stage=1), _setup(), BF16)
    assert no_sync.gradients_bytes == unsharded.gradients_bytes


@pytest.mark.parametrize(
    ("layout", "setup"),
    [
        (FSDP8, {"global_batch_size": 8}),  # one micro-batch a step: nothing to accumulate
        (Parallelism(dp=8, zero_stage=1), {}),  # the gradients are not sharded anyway
    ],
)
def test_without_accumulation_or_sharded_gradients_it_changes_nothing(
    layout: Parallelism, setup: dict[str, Any]
) -> None:
    plain = estimate_training(LLAMA, A100, layout, _setup(**setup), BF16)
    flag = estimate_training(LLAMA, A100, layout, _setup(no_sync_accumulation=True, **setup), BF16)
    assert flag.memory.total_bytes == plain.memory.total_bytes
    assert flag.time.step_s == plain.time.step_s
    assert any("no_sync_accumulation has no effect here" in n for n in flag.memory.notes)


def test_the_reduce_scatters_run_in_the_last_micro_batch_only() -> None:
    """A 400 Gbit/s-per-GPU cluster of 8 x 8 A100s where ZeRO-3's collectives are exposed:
    skipping three of four micro-batches' reduce-scatters takes some of that time off, never
    more than the reduce-scatters' share."""
    layout = Parallelism(dp=64, zero_stage=3)
    setup = {"global_batch_size": 256, "recompute": "none", "seq_len": 1024}
    plain = estimate_training(LLAMA, A100, layout, _setup(**setup), BF16)
    no_sync = estimate_training(
        LLAMA, A100, layout, _setup(no_sync_accumulation=True, **setup), BF16
    )
    exposed, skipped = plain.time.breakdown["zero3_comm"], no_sync.time.breakdown["zero3_comm"]
    assert exposed > 0
    assert exposed / 4 < skipped < exposed
    assert no_sync.time.breakdown["compute"] == plain.time.breakdown["compute"]


def test_the_timeline_peaks_at_the_estimate_and_says_so() -> None:
    setup = _setup(no_sync_accumulation=True)
    memory = training_memory(LLAMA, A100, FSDP8, setup, BF16)
    timeline = training_timeline(LLAMA, A100, FSDP8, setup, BF16)
    assert max(p.total_bytes for p in timeline.points) == pytest.approx(memory.total_bytes)
    assert any("no_sync" in n for n in timeline.notes)


def test_cpu_offload_with_it_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        training_memory(
            LLAMA,
            A100,
            FSDP8,
            _setup(no_sync_accumulation=True, offload=Offload(optimizer=True)),
            BF16,
        )
    assert err.value.field == "no_sync_accumulation"


client = TestClient(app)
BODY = {
    "model": "llama-3.1-8b",
    "accelerator": "a100-sxm-80gb",
    "num_gpus": 8,
    "layout": {"tp": 1, "pp": 1, "zero_stage": 3},
    "seq_len": 4096,
    "micro_batch_size": 1,
    "global_batch_size": 32,
    "recompute": "full",
    "no_sync_accumulation": True,
}


def test_the_api_and_the_page_take_it() -> None:
    r = client.post("/api/v1/training/estimate", json=BODY)
    assert r.status_code == 200, r.text
    core = training_memory(LLAMA, A100, FSDP8, _setup(no_sync_accumulation=True), BF16)
    assert r.json()["memory_per_gpu"]["gradients_bytes"] == core.gradients_bytes
    refused = client.post("/api/v1/training/estimate", json=BODY | {"offload_optimizer": True})
    assert refused.status_code == 422
    assert [d["field"] for d in refused.json()["detail"]] == ["no_sync_accumulation"]
    page = client.get(
        "/training?model=llama-3.1-8b&accelerator=a100-sxm-80gb&num_gpus=8&zero_stage=3"
        "&seq_len=4096&micro_batch_size=1&global_batch_size=32&recompute=full"
        "&no_sync_accumulation=true"
    )
    assert page.status_code == 200 and "no_sync over 4 micro-batches" in page.text
