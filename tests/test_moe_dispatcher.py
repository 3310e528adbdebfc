"""Megatron-Core's MoE token dispatchers (``moe_dispatcher``): ``alltoall`` (NCCL all-to-all of
every routed copy; permute, sort the received chunks by local expert, and both reversed) and
``flex`` (DeepEP / HybridEP: a token sent once to each other scale-up domain holding one of its
experts, permuted once each way). The request field overrides the stack's."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.context import Context
from estimator.inputs.cluster import cluster_of
from estimator.inputs.precision import DTYPES
from estimator.timing import collectives as rules
from estimator.timing.kernels import copy_time, kernel_profile
from estimator.timing.layer import LayerRun, layer_time, training_attention_format
from estimator.timing.training import TimingOptions, estimate_training
from estimator.timing.training_notes import DISPATCHER_NOTES

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
QWEN = get_model("qwen3-30b-a3b")  # 128 experts, top-8
SEQ, MBS = 4096, 1


def _layer(p: Parallelism, flex: bool) -> Any:
    kind = next(k for k in QWEN.kinds if any(m.copies > 1 for m in k.linears))
    index = QWEN.kinds.index(kind)
    c = Context(QWEN, H100, kernel_profile(H100.id), p, BF16, cluster_of(H100))
    run = LayerRun(attention_format=training_attention_format(BF16), dedup_domains=flex)
    return layer_time(c, index, SEQ, MBS, run)


def _copies(p: Parallelism, passes: int) -> float:
    """``passes`` reads and writes of every routed copy, one kernel each."""
    act_b = DTYPES[BF16.activations].bytes
    moved = passes * 2 * SEQ * MBS / p.tp * QWEN.moe.top_k * QWEN.hidden_size * act_b
    return float(copy_time(H100, kernel_profile(H100.id), moved, passes))


@pytest.mark.parametrize("p", [Parallelism(dp=8, ep=8), Parallelism(dp=16, ep=16)])
def test_alltoall_sorts_the_received_chunks_the_flex_dispatcher_does_not(p: Parallelism) -> None:
    flex, alltoall = _layer(p, True), _layer(p, False)
    extra = _copies(p, 4) - _copies(p, 2)
    assert extra > 0
    assert alltoall.elementwise - flex.elementwise == pytest.approx(extra, rel=1e-9)
    assert alltoall.gemm == flex.gemm and alltoall.attention == flex.attention


def test_one_expert_a_rank_needs_no_chunk_sort() -> None:
    p = Parallelism(dp=128, ep=128)  # 128 experts over 128 ranks
    assert _layer(p, False).elementwise == pytest.approx(_layer(p, True).elementwise, rel=1e-12)


def test_flex_sends_a_token_once_per_other_domain() -> None:
    inside, across = Parallelism(dp=8, ep=8), Parallelism(dp=16, ep=16)  # one node, two nodes
    assert _layer(inside, True).ep_comm == pytest.approx(_layer(inside, False).ep_comm)
    share = rules.domain_dedup(QWEN.moe.top_k, 16, 1, cluster_of(H100).scale_up_domain)
    assert 0 < share < 1  # top-8 over two nodes: ~1.99 of 8 copies' worth crosses, not 4
    assert _layer(across, True).ep_comm < _layer(across, False).ep_comm


def test_the_dispatcher_of_the_request_overrides_the_stacks() -> None:
    setup = TrainingSetup(SEQ, MBS, 256, "selective")
    p = Parallelism(dp=16, ep=16)

    def speed(**fields: Any) -> float:
        options = TimingOptions.of_stack("megatron-core", **fields)
        return estimate_training(QWEN, H100, p, setup, BF16, options=options).tokens_per_s_per_gpu

    assert TimingOptions.of_stack("megatron-core").moe_dispatcher == "flex"
    assert TimingOptions.of_stack("fsdp2").moe_dispatcher == "alltoall"
    assert speed() == speed(moe_dispatcher="flex") > speed(moe_dispatcher="alltoall")
    for dispatcher in ("flex", "alltoall"):  # the answer says which it assumed
        options = TimingOptions.of_stack("megatron-core", moe_dispatcher=dispatcher)
        notes = estimate_training(QWEN, H100, p, setup, BF16, options=options).notes
        assert [n for n in notes if "token dispatcher" in n] == [DISPATCHER_NOTES[dispatcher]]
    dense = estimate_training(get_model("llama-3-8b"), H100, Parallelism(dp=8), setup, BF16)
    assert not any("token dispatcher" in n for n in dense.notes)


BODY = {
    "model": "qwen3-30b-a3b",
    "accelerator": "h100-sxm-80gb",
    "num_gpus": 16,
    "layout": {"dp": 16, "ep": 16},
    "seq_len": 4096,
    "micro_batch_size": 1,
    "global_batch_size": 256,
}


def test_api_page_and_sweep_take_the_dispatcher() -> None:
    client = TestClient(app)
    answers = {
        d: client.post(
            "/api/v1/training/estimate", json=BODY | ({"moe_dispatcher": d} if d else {})
        )
        for d in (None, "flex", "alltoall")
    }
    assert all(r.status_code == 200 for r in answers.values())
    said = {d: r.json()["stack"]["moe_dispatcher"] for d, r in answers.items()}
    assert said == {None: "flex", "flex": "flex", "alltoall": "alltoall"}
    speed = {d: r.json()["throughput"]["tokens_per_s_per_gpu"] for d, r in answers.items()}
    assert speed[None] == speed["flex"] > speed["alltoall"]

    bad = client.post("/api/v1/training/estimate", json=BODY | {"moe_dispatcher": "deepep"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["field"] == "moe_dispatcher"

    page = client.get("/training?model=qwen3-30b-a3b&layout.ep=16&moe_dispatcher=alltoall")
    assert page.status_code == 200 and 'name="moe_dispatcher"' in page.text

    sweep = {
        "model": "qwen3-30b-a3b",
        "accelerator": ["h100-sxm-80gb"],
        "num_gpus": [16],
        "layout": {"tp": [1], "pp": [1], "ep": [16]},
        "global_batch_size": 256,
        "recompute": "selective",
    }
    best = {}
    for d in ("flex", "alltoall"):
        r = client.post("/api/v1/training/sweep", json=sweep | {"moe_dispatcher": d})
        assert r.status_code == 200
        best[d] = max(row["tokens_per_s_per_gpu"] for row in r.json()["rows"])
    assert best["flex"] > best["alltoall"]


def test_an_moe_plan_says_its_host_overhead_is_counted_hidden() -> None:
    """The host's part of an MoE step (launches, the dispatcher's device-to-host syncs) is
    not modelled: every MoE estimate says so, with what the Megatron-LM MoE recipes measured
    without full-iteration CUDA graphs; a dense one does not."""
    from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
    from estimator.timing.training import estimate_training
    from estimator.timing.training_notes import MOE_HOST_NOTE

    acc, bf16 = get_accelerator("h100-sxm-80gb"), get_precision("bf16")
    setup = TrainingSetup(4096, 1, 64, "full")
    moe = estimate_training(get_model("qwen3-30b-a3b"), acc, Parallelism(ep=8, dp=8), setup, bf16)
    dense = estimate_training(get_model("llama-3-8b"), acc, Parallelism(dp=8), setup, bf16)
    assert MOE_HOST_NOTE in moe.notes and MOE_HOST_NOTE not in dense.notes
    assert "12%" in MOE_HOST_NOTE and "21%" in MOE_HOST_NOTE
