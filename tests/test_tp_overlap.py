"""TP communication overlapped with the GEMMs (``tp_comm_overlap``) as Transformer Engine's
userbuffers run it (``estimator.timing.tp_overlap``): a chunk of the traffic stays exposed (ring
exchange over tp chunks, BF16's pipelined reduce-scatter in 4 splits), whatever a GEMM cannot
cover stays exposed, and the GEMMs that share their SMs with the communication kernels slow
down by ``S / (N - S)``."""

from __future__ import annotations

import pytest

from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.timing.tp_overlap import (
    DGRAD_SMS,
    FORWARD_RS_SMS_BF16,
    FORWARD_RS_SMS_FP8,
    PIPELINE_SPLITS,
    SMS_BY_GENERATION,
    WGRAD_SMS,
    _shares,
    overlapped_tp,
)
from estimator.timing.training import TimingOptions, estimate_training

H100 = get_accelerator("h100-sxm-80gb")
LLAMA = get_model("llama-3-70b")


def test_the_shares_are_the_layers_own_linears() -> None:
    """Llama-3-70B (h 8,192, 64 heads of 128, 8 KV heads, MLP 28,672): the row-parallel GEMMs
    are the attention output (h x h) and the MLP's down projection (28,672 x h); the
    column-parallel ones QKV (h x 10,240) and gate/up (h x 57,344)."""
    h, ffn = 8192, 28672
    qkv, out, gate_up, down = h * (h + 2 * 1024), h * h, h * 2 * ffn, ffn * h
    total = qkv + out + gate_up + down
    row, attention, mlp = _shares(LLAMA, 0)
    assert row == pytest.approx((out + down) / total)
    assert attention == pytest.approx(qkv / total)
    assert mlp == pytest.approx(gate_up / total)


def test_a_chunk_stays_exposed_and_the_shared_sms_slow_the_gemms() -> None:
    n = SMS_BY_GENERATION["hopper"]
    assert n == 132
    row, attention, mlp = _shares(LLAMA, 0)
    backward_cost = attention * (
        WGRAD_SMS["attention"] / (n - WGRAD_SMS["attention"])
        + DGRAD_SMS["attention"] / (n - DGRAD_SMS["attention"])
    ) + mlp * (
        WGRAD_SMS["mlp"] / (n - WGRAD_SMS["mlp"]) + DGRAD_SMS["mlp"] / (n - DGRAD_SMS["mlp"])
    )
    c, g = 1.0, 10.0  # the GEMMs could hide it all: a chunk stays
    fwd, bwd = overlapped_tp(LLAMA, 0, H100, "bf16", 4, c, g)
    floor = (1 / 4 + 1 / PIPELINE_SPLITS) / 2
    sixteen = row * FORWARD_RS_SMS_BF16 / (n - FORWARD_RS_SMS_BF16)
    assert fwd == pytest.approx(floor * c + sixteen * g)
    assert bwd == pytest.approx(c / 8 + backward_cost * g)
    # FP8: every exchange ring-exchanged over the tp chunks, on 1 SM
    fwd8, _ = overlapped_tp(LLAMA, 0, H100, "fp8", 4, c, g)
    assert fwd8 == pytest.approx(c / 4 + row * FORWARD_RS_SMS_FP8 / (n - 1) * g)
    # more traffic than GEMM time: what the GEMMs cannot cover stays exposed
    fwd_big, bwd_big = overlapped_tp(LLAMA, 0, H100, "bf16", 4, 30.0, g)
    assert fwd_big == pytest.approx(30.0 - g + sixteen * g)
    assert bwd_big == pytest.approx(30.0 - 2 * g + backward_cost * g)
    assert overlapped_tp(LLAMA, 0, H100, "bf16", 1, 0.0, g) == (0.0, 0.0)  # nothing to overlap


def _train(tp: int, options: TimingOptions | None = None, precision: str = "bf16") -> object:
    return estimate_training(
        LLAMA,
        H100,
        Parallelism(tp=tp, pp=4, dp=64 // (4 * tp), sequence_parallel=tp > 1),
        TrainingSetup(8192, 1, 128, "selective"),
        get_precision(precision),
        options=options,
    )


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_overlap_exposes_less_than_none_and_more_than_hiding_it_all(precision: str) -> None:
    """Against the exposed traffic and against the old upper bound (all of it behind the GEMMs,
    free): between the two, and the compute itself unchanged (the slowdown is charged to TP)."""
    plain = _train(4, precision=precision).time  # type: ignore[attr-defined]
    over = _train(4, TimingOptions(tp_comm_overlap=True), precision).time  # type: ignore[attr-defined]
    assert 0 < over.breakdown["tp_comm"] < plain.breakdown["tp_comm"]
    assert over.breakdown["compute"] == plain.breakdown["compute"]
    assert over.step_s < plain.step_s


def test_a_sweep_row_is_its_single_estimate_with_the_overlap() -> None:
    from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training
    from tests.test_sweep import _single

    workload = TrainingWorkload(seq_len=8192, global_batch_size=128, tokens=1e11)
    space = TrainingSearch(
        accelerators=("h100-sxm-80gb",), num_gpus=(64,), tp=(1, 2, 4, 8), pp=(4,), vp=(1,)
    )
    options = TimingOptions.of_stack("megatron-core", tp_comm_overlap=True)
    sweep = sweep_training(get_model("llama-3-70b"), workload, space, options=options)
    checked = 0
    for i in range(len(sweep)):
        r = sweep.row(i)
        single = _single("llama-3-70b", r, workload, options).time  # type: ignore[attr-defined]
        assert r["tp_comm"] == pytest.approx(single.breakdown["tp_comm"], rel=1e-9)
        checked += r["tp"] > 1
    assert checked
