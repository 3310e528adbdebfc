"""Whether a plan fits, said with how sure the planner can be (estimator/memory/verdict.py): the
verdict's rules, the training answer that reads it with its peak-memory accuracy (the measured
peaks of the plan's own stack only: tests/test_accuracy.py), its page and the CLI."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli.tables import training_text
from app.main import app
from estimator import get_accelerator, get_model, get_precision
from estimator.layout.parallel import Parallelism
from estimator.memory.training import TrainingSetup, training_memory
from estimator.memory.verdict import FIT_VERDICTS, fit_verdict, training_fit
from estimator.offload import Offload

client = TestClient(app)
GIB = 2**30


def test_with_a_likely_range_the_range_decides() -> None:
    assert fit_verdict(70.0, 80.0, 4.0, (68.0, 79.0))[0] == "fits"
    assert fit_verdict(70.0, 80.0, 4.0, (68.0, 81.0))[0] == "tight"  # its top is over
    assert fit_verdict(82.0, 80.0, 4.0, (79.0, 90.0))[0] == "tight"  # its bottom is under
    assert fit_verdict(82.0, 80.0, 4.0, (80.5, 90.0))[0] == "does_not_fit"
    note = fit_verdict(70.0, 80.0, 4.0, (68.0, 81.0))[1]
    assert "likely 68.0 - 81.0 GiB" in note and "80.0 GiB" in note and "headroom" in note


def test_without_a_range_the_named_overheads_decide() -> None:
    """The overheads (fragmentation, CUDA context, NCCL buffers) are estimates: a plan whose
    tensors fit but not with them on top is tight, not refused."""
    assert fit_verdict(79.0, 80.0, 5.0)[0] == "fits"
    assert fit_verdict(80.0, 80.0, 5.0)[0] == "fits"  # at capacity exactly
    assert fit_verdict(84.0, 80.0, 5.0)[0] == "tight"  # 79 GiB of tensors
    assert fit_verdict(86.0, 80.0, 5.0)[0] == "does_not_fit"  # 81 GiB of tensors
    for total in (79.0, 84.0, 86.0):
        assert "no published peak-memory measurements" in fit_verdict(total, 80.0, 5.0)[1]


def test_a_training_estimates_verdict_follows_its_terms() -> None:
    model, acc = get_model("llama-3.1-8b"), get_accelerator("h100-sxm-80gb")
    p = Parallelism(tp=1, pp=1, dp=8, zero_stage=1)  # the API's default layout on 8 GPUs
    seen = set()
    for seq in (2048, 4096, 8192):
        setup = TrainingSetup(
            seq_len=seq, micro_batch_size=1, global_batch_size=64, recompute="none"
        )
        m = training_memory(model, acc, p, setup, get_precision("bf16"))
        verdict, _ = training_fit(m)
        tensors = m.total_bytes - m.overhead_bytes
        expected = (
            "fits"
            if m.total_bytes <= m.capacity_bytes
            else "tight"
            if tensors <= m.capacity_bytes
            else "does_not_fit"
        )
        assert verdict == expected
        assert m.overhead_bytes == pytest.approx(
            m.fragmentation_bytes + m.cuda_context_bytes + m.comm_buffers_bytes
        )
        seen.add(verdict)
    assert seen == set(FIT_VERDICTS)  # the three sequence lengths give the three verdicts


def test_an_overflowing_host_does_not_fit_whatever_the_gpu_holds() -> None:
    model, acc = get_model("llama-3.1-70b"), get_accelerator("h100-sxm-80gb")
    setup = TrainingSetup(
        seq_len=2048, micro_batch_size=1, global_batch_size=8, recompute="full",
        offload=Offload(optimizer=True, host_memory_gb_per_gpu=1.0),
    )  # fmt: skip
    m = training_memory(model, acc, Parallelism(tp=8, dp=1), setup, get_precision("bf16"))
    assert m.host_bytes > m.host_capacity_bytes and not m.fits
    verdict, note = training_fit(m, (1.0, 2.0))  # the GPU side alone would fit
    assert verdict == "does_not_fit" and "host memory" in note


def _plan(seq: int, stack: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "accelerator": "h100-sxm-80gb",
        "num_gpus": 8,
        "seq_len": seq,
        "micro_batch_size": 1,
        "global_batch_size": 64,
        "recompute": "none",
    }
    if stack:
        body["stack"] = stack
    r = client.post("/api/v1/training/estimate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_training_answer_says_its_verdict() -> None:
    seen = {}
    for seq in (2048, 4096, 8192):
        body = _plan(seq)
        m = body["memory_per_gpu"]
        peak = body["accuracy"]["metrics"][1]
        assert peak["metric"] == "peak_memory" and peak["range_low"] is None  # Megatron-Core
        assert m["fits"] == (m["total_bytes"] <= m["capacity_bytes"])
        seen[m["fit"]] = m["fit_note"]
    assert set(seen) == set(FIT_VERDICTS)
    assert seen["tight"].startswith("Tight:") and "overheads" in seen["tight"]
    # An FSDP2 plan takes the range of the FSDP2 measurements
    fsdp2 = _plan(2048, "fsdp2")
    peak = fsdp2["accuracy"]["metrics"][1]
    low, high = peak["range_low"], peak["range_high"]
    assert low is not None and high is not None
    expected, note = fit_verdict(
        fsdp2["memory_per_gpu"]["total_bytes"] / GIB,
        fsdp2["memory_per_gpu"]["capacity_bytes"] / GIB,
        0.0,
        (low, high),
    )
    assert (fsdp2["memory_per_gpu"]["fit"], fsdp2["memory_per_gpu"]["fit_note"]) == (
        expected,
        note,
    )


def test_the_page_and_the_cli_show_the_verdict() -> None:
    page = client.get(
        "/training",
        params={"model": "llama-3.1-8b", "accelerator": "h100-sxm-80gb", "num_gpus": 8,
                "seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64,
                "recompute": "none"},
    )  # fmt: skip
    assert page.status_code == 200
    assert 'class="verdict warn" id="verdict" data-fit="tight"' in page.text
    assert 'id="fit-note"' in page.text and 'id="accuracy-peak_memory"' in page.text
    text = training_text(_plan(4096))
    assert "fits: TIGHT:" in text and "Tight: its tensors take" in text
