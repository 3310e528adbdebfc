"""Megatron-Core's expert all-to-all overlap (``--overlap-moe-expert-parallel-comm``): the
forward of one micro-batch and the backward of another run as one merged pass, each one's
all-to-all behind the other's compute; the micro-batches without a partner (the first forward
and the last backward, a pipeline's warm-up and cool-down) keep theirs exposed."""

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
from estimator.context import Context
from estimator.errors import SpecError
from estimator.memory.training import in_flight_microbatches
from estimator.timing.comms import communication_plan
from estimator.timing.training import TimingOptions, estimate_training

H100 = get_accelerator("h100-sxm-80gb")
FP8 = get_precision("fp8")
QWEN = get_model("qwen3-30b-a3b")


def _times(p: Parallelism, gbs: int, overlap: bool, recompute: str = "selective") -> Any:
    setup = TrainingSetup(4096, 1, gbs, recompute)  # type: ignore[arg-type]
    options = TimingOptions.of_stack("megatron-core", ep_comm_overlap=overlap)
    return estimate_training(QWEN, H100, p, setup, FP8, options=options).time


@pytest.mark.parametrize(
    ("p", "gbs"),
    [
        (Parallelism(dp=16, ep=16), 128),  # all-to-all across two nodes: slower than compute
        (Parallelism(dp=8, ep=8), 64),  # inside one node: behind the other micro-batch
        (Parallelism(pp=2, vp=2, dp=8, ep=8), 128),  # interleaved pipeline
    ],
)
def test_each_all_to_all_hides_behind_the_other_micro_batch(p: Parallelism, gbs: int) -> None:
    plain, merged = _times(p, gbs, False), _times(p, gbs, True)
    m = plain.microbatches
    per_mb = plain.breakdown["ep_comm"] / m
    behind = plain.forward_s + plain.backward_s + plain.recompute_s
    unpaired = in_flight_microbatches(p.pp, p.vp, plain.stage, m)
    assert (p.pp == 1) == (unpaired == 1)
    expected = unpaired * per_mb + (m - unpaired) * max(per_mb - behind, 0.0)
    assert merged.breakdown["ep_comm"] == pytest.approx(expected, rel=1e-12)
    assert merged.breakdown["ep_comm"] < plain.breakdown["ep_comm"]
    others = {k: v for k, v in merged.breakdown.items() if k != "ep_comm"}
    assert others == {k: v for k, v in plain.breakdown.items() if k != "ep_comm"}
    if p.ep == 8:  # NVLink all-to-all shorter than a micro-batch's compute: one left exposed
        assert per_mb < behind
        assert merged.breakdown["ep_comm"] == pytest.approx(unpaired * per_mb)


def test_the_communication_plan_says_it_is_overlapped() -> None:
    p, setup = Parallelism(dp=8, ep=8), TrainingSetup(4096, 1, 64)
    memory = training_memory(QWEN, H100, p, setup, FP8)
    for overlap, says in ((False, "exposed"), (True, "ep_comm_overlap")):
        options = TimingOptions(ep_comm_overlap=overlap)
        plan = communication_plan(Context.of(QWEN, H100, p, FP8), setup, options, memory)
        (ep,) = [e for e in plan.events if e.dimension == "ep"]
        assert says in ep.overlap


@pytest.mark.parametrize(
    ("model", "layout", "recompute", "stack", "rule"),
    [
        ("qwen3-30b-a3b", {"dp": 8}, "selective", "megatron-core", "layout.ep > 1"),
        ("llama-3-8b", {"dp": 8}, "selective", "megatron-core", "layout.ep > 1"),
        ("qwen3-30b-a3b", {"pp": 2, "dp": 4, "ep": 4}, "selective", "megatron-core", "vp > 1"),
        ("qwen3-30b-a3b", {"dp": 8, "ep": 8}, "full", "megatron-core", "full recomputation"),
        ("qwen3-30b-a3b", {"dp": 8, "ep": 8}, "selective", "fsdp2", "Megatron-Core's"),
    ],
)
def test_refused_where_megatron_refuses_it(
    model: str, layout: dict[str, int], recompute: str, stack: str, rule: str
) -> None:
    setup = TrainingSetup(4096, 1, 64, recompute)  # type: ignore[arg-type]
    options = TimingOptions.of_stack(stack, ep_comm_overlap=True)
    with pytest.raises(SpecError, match=rule) as err:
        estimate_training(
            get_model(model), H100, Parallelism(**layout), setup, FP8, options=options
        )
    assert err.value.field == "ep_comm_overlap"


def test_api_page_and_refusal() -> None:
    client = TestClient(app)
    body = {
        "model": "qwen3-30b-a3b",
        "num_gpus": 16,
        "layout": {"dp": 16, "ep": 16},
        "seq_len": 4096,
        "global_batch_size": 128,
        "precision": "fp8",
    }
    plain = client.post("/api/v1/training/estimate", json=body).json()
    merged = client.post("/api/v1/training/estimate", json=body | {"ep_comm_overlap": True}).json()
    assert not plain["stack"]["ep_comm_overlap"] and merged["stack"]["ep_comm_overlap"]
    assert any("upper bound" in n for n in merged["notes"])
    assert not any("--overlap-moe-expert-parallel-comm" in n for n in plain["notes"])
    ep = [b["time"]["breakdown"]["ep_comm_s"] for b in (plain, merged)]
    assert ep[1] < ep[0]
    r = client.post(
        "/api/v1/training/estimate", json=body | {"ep_comm_overlap": True, "layout": {"dp": 16}}
    )
    assert r.status_code == 422 and "ep_comm_overlap" in r.text
    page = client.get(
        "/training?model=qwen3-30b-a3b&num_gpus=16&ep=16&seq_len=4096&global_batch_size=128"
        "&precision=fp8&ep_comm_overlap=true"
    )
    assert page.status_code == 200 and 'name="ep_comm_overlap"' in page.text


def test_a_sweep_overlaps_where_megatron_allows_it() -> None:
    """Every layout of a sweep with the overlap is its single estimate: with it where Megatron-Core
    allows it (EP, a virtual pipeline with a pipeline, no full recompute), without it elsewhere."""
    from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training
    from tests.test_sweep import _single

    workload = TrainingWorkload(seq_len=4096, global_batch_size=512, tokens=1e11)
    space = TrainingSearch(
        accelerators=("h100-sxm-80gb",),
        num_gpus=(16,),
        tp=(1,),
        pp=(1, 2),
        vp=(1, 2),
        ep=(1, 8),
        recompute=("selective", "full"),
    )
    options = TimingOptions.of_stack("megatron-core", ep_comm_overlap=True)
    sweep = sweep_training(QWEN, workload, space, options=options)
    assert any("--overlap-moe-expert-parallel-comm" in n for n in sweep.notes)
    seen = set()
    for i in range(len(sweep)):
        r = sweep.row(i)
        allowed = r["ep"] > 1 and r["recompute"] != "full" and (r["pp"] == 1 or r["vp"] > 1)
        plain = _single("qwen3-30b-a3b", r, workload).time  # type: ignore[attr-defined]
        assert r["ep_comm"] <= plain.breakdown["ep_comm"]
        if allowed:
            merged = _single("qwen3-30b-a3b", r, workload, options).time  # type: ignore[attr-defined]
            assert r["ep_comm"] == merged.breakdown["ep_comm"] < plain.breakdown["ep_comm"]
        else:
            assert r["ep_comm"] == plain.breakdown["ep_comm"]
        seen.add(allowed)
    assert seen == {True, False}
    client = TestClient(app)
    body = {
        "model": "qwen3-30b-a3b",
        "accelerator": ["h100-sxm-80gb"],
        "num_gpus": [16],
        "seq_len": 4096,
        "global_batch_size": 512,
        "ep_comm_overlap": True,
    }
    r = client.post("/api/v1/training/sweep", json=body)
    assert r.status_code == 200
    assert any("--overlap-moe-expert-parallel-comm" in n for n in r.json()["notes"])
    r = client.post("/api/v1/training/sweep", json=body | {"stack": "fsdp2"})
    assert r.status_code == 422 and "ep_comm_overlap" in r.text and "Megatron-Core's" in r.text
