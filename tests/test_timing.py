"""The performance model: kernels against measured tables, step-time structure, serving."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.context import Context
from estimator.inputs.cluster import cluster_of
from estimator.layout.sharding import (
    StageShape,
    distinct_stages,
    serving_layer_split,
    stage_kind_counts,
)
from estimator.serving.estimate import estimate_inference
from estimator.serving.steps import decode_kinds, pipeline, stage_times
from estimator.timing.eager_ops import EagerExpertOps, expert_eager_ops
from estimator.timing.kernels import collective_time, gemm_time, kernel_profile
from estimator.timing.layer import LayerRun, layer_time, training_attention_format
from estimator.timing.training import TimingOptions, calibrate, estimate_training

ROOT = Path(__file__).resolve().parents[1]
H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")


def _train(layout: Parallelism, model: str = "llama-3-70b", **kw: object) -> object:
    setup = TrainingSetup(4096, micro_batch_size=1, global_batch_size=kw.pop("gbs", 128))  # type: ignore[arg-type]
    return estimate_training(get_model(model), H100, layout, setup, BF16, **kw)  # type: ignore[arg-type]


def test_layouts_of_equal_gpu_count_get_different_step_times() -> None:
    """The failure this model exists to avoid: TP8xPP4, TP4xPP8 and ZeRO-3 data parallelism on
    the same 32 GPUs are not the same plan."""
    a = _train(Parallelism(tp=8, pp=4, dp=1, sequence_parallel=True), gbs=64)
    b = _train(Parallelism(tp=4, pp=8, dp=1, sequence_parallel=True), gbs=64)
    c = _train(Parallelism(tp=1, pp=1, dp=32, zero_stage=3), model="llama-2-7b", gbs=64)
    steps = {round(x.time.step_s, 6) for x in (a, b, c)}  # type: ignore[attr-defined]
    assert len(steps) == 3
    assert a.time.breakdown["tp_comm"] > b.time.breakdown["tp_comm"]  # type: ignore[attr-defined]
    assert b.time.breakdown["bubble"] > a.time.breakdown["bubble"]  # type: ignore[attr-defined]
    assert c.time.breakdown["zero3_comm"] >= 0  # type: ignore[attr-defined]


def test_breakdown_sums_to_step_and_throughput_follows() -> None:
    est = _train(Parallelism(tp=8, pp=2, dp=4, sequence_parallel=True, zero_stage=1))
    t = est.time  # type: ignore[attr-defined]
    assert sum(t.breakdown.values()) == pytest.approx(t.step_s, rel=1e-12)
    assert est.tokens_per_s == pytest.approx(128 * 4096 / t.step_s)  # type: ignore[attr-defined]
    assert 0.05 < est.mfu < 0.8  # type: ignore[attr-defined]
    assert est.hfu == pytest.approx(est.mfu)  # type: ignore[attr-defined]  # no recompute


def test_bubble_shrinks_with_more_microbatches_and_interleaving() -> None:
    def bubble_share(gbs: int, vp: int) -> float:
        e = _train(Parallelism(tp=8, pp=4, dp=1, vp=vp, sequence_parallel=True), gbs=gbs)
        return e.time.breakdown["bubble"] / e.time.step_s  # type: ignore[attr-defined, no-any-return]

    assert bubble_share(64, 1) < bubble_share(16, 1)
    assert bubble_share(16, 5) < bubble_share(16, 1)
    # 1F1B: the bubble is (pp - 1) micro-batch times against m of them.
    e = _train(Parallelism(tp=8, pp=4, dp=1, sequence_parallel=True), gbs=16)
    b = e.time.breakdown  # type: ignore[attr-defined]
    per_microbatch = sum(b[k] for k in ("compute", "tp_comm", "ep_comm", "cp_comm", "pp_comm"))
    assert b["bubble"] / per_microbatch == pytest.approx(3 / 16, rel=1e-9)


def test_recompute_costs_time_and_raises_hfu_over_mfu() -> None:
    layout = Parallelism(tp=8, pp=1, dp=4, sequence_parallel=True)
    model = get_model("llama-3-70b")
    results = {}
    for policy in ("none", "selective", "full"):
        setup = TrainingSetup(4096, global_batch_size=32, recompute=policy)  # type: ignore[arg-type]
        results[policy] = estimate_training(model, H100, layout, setup, BF16)
    assert (
        results["none"].time.step_s < results["selective"].time.step_s < results["full"].time.step_s
    )
    assert results["full"].hfu > results["full"].mfu
    # Full recompute repeats the forward: about a third more compute than none.
    ratio = results["full"].time.breakdown["compute"] / results["none"].time.breakdown["compute"]
    assert 1.25 < ratio < 1.4


def test_cost_time_to_train_and_user_calibration() -> None:
    layout = Parallelism(tp=8, pp=1, dp=8, sequence_parallel=True, zero_stage=1)
    setup = TrainingSetup(4096, global_batch_size=256)
    plain = estimate_training(
        get_model("llama-3-8b"), H100, layout, setup, BF16, tokens=1e12, price_usd_per_gpu_hour=2.0
    )
    assert plain.calibrated is None and calibrate(plain, H100).calibrated is None
    est = calibrate(plain, H100, measured_mfu=0.4)
    assert est.time_to_train_s == pytest.approx(1e12 / est.tokens_per_s)
    assert est.gpu_hours == pytest.approx(est.time_to_train_s * 64 / 3600)  # type: ignore[operator]
    assert est.cost_usd == pytest.approx(est.gpu_hours * 2.0)  # type: ignore[operator]
    assert est.calibrated is not None and est.calibrated["mfu"] == pytest.approx(0.4)
    assert est.calibrated["step_s"] == pytest.approx(est.time.step_s * est.mfu / 0.4)
    with pytest.raises(SpecError, match="measured_mfu"):
        calibrate(est, H100, measured_mfu=1.5)
    with pytest.raises(SpecError, match="measured_step_s"):
        calibrate(est, H100, measured_step_s=0.0)


def test_tp_comm_overlap_hides_tp_traffic() -> None:
    layout = Parallelism(tp=8, pp=1, dp=2, sequence_parallel=True)
    plain = _train(layout, gbs=16)
    hidden = _train(layout, gbs=16, options=TimingOptions(tp_comm_overlap=True))
    assert hidden.time.breakdown["tp_comm"] < plain.time.breakdown["tp_comm"]  # type: ignore[attr-defined]


# --- kernels against the measured tables (tolerances from validation/report.md) ------------


@pytest.mark.parametrize(
    ("m", "n", "k", "measured_ms", "tolerance"),
    [
        # aiconfigurator's TensorRT-LLM table
        (8192, 8192, 8192, 1.40478, 0.10),
        # +13.5% since the fit also holds the GEMMs timed on the lent H100 (+2% on this table
        # alone), whose mid-size shapes ran ~10% slower than this table's curve predicted
        (1024, 4096, 4096, 0.0453413, 0.15),
        (1, 8192, 8192, 0.049184, 0.10),
        # timed on the lent H100 (validation/data/kernels/h100_lent.json): a gpt-oss expert's
        # fc1 over 1,024 tokens, one of a 4,096 x 2,048 x 2,048 grid shape
        (1024, 5760, 2880, 0.8179 / 16, 0.10),
        (4096, 2048, 2048, 0.049644, 0.10),
    ],
)
def test_h100_gemm_matches_measurements(
    m: int, n: int, k: int, measured_ms: float, tolerance: float
) -> None:
    t = gemm_time(H100, kernel_profile(H100.id), 2 * m * n * k, 2 * (m * k + k * n + m * n), "bf16")
    assert t * 1e3 == pytest.approx(measured_ms, rel=tolerance)


def test_h100_allreduce_within_a_node_and_across_nodes() -> None:
    prof = kernel_profile(H100.id)
    node = cluster_of(H100)  # 8 GPUs on NVLink, 400 Gbit/s per GPU out
    measured_8gpu_128mib = 0.57874e-3  # nccl-tests, aiconfigurator h100_sxm nccl_perf
    t8 = collective_time(H100, prof, "all_reduce", 134217728, 8, 1, node)
    assert t8 == pytest.approx(measured_8gpu_128mib, rel=0.4)
    t16 = collective_time(H100, prof, "all_reduce", 134217728, 16, 1, node)
    assert t16 > 1.3 * t8  # the scale-out network is the bottleneck
    # A group whose ranks sit in different nodes (stride 8) never uses NVLink.
    assert collective_time(H100, prof, "all_reduce", 134217728, 2, 8, node) > collective_time(
        H100, prof, "all_reduce", 134217728, 2, 1, node
    )


@pytest.mark.slow
def test_calibration_reproduces_the_shipped_table() -> None:
    from validation import calibrate

    shipped = json.loads((ROOT / "estimator" / "catalog" / "efficiency.json").read_text())
    for system in calibrate.SYSTEMS:
        prof = shipped["profiles"][system]
        assert calibrate.fit_gemm(system) == prof["gemm"]
        assert calibrate.fit_decode(system) == prof["attention_decode"]
        assert calibrate.fit_allreduce(system) == prof["scale_up"]
        assert calibrate.fit_elementwise(system) == prof["elementwise"]
    h100 = shipped["profiles"]["h100_sxm"]
    assert calibrate.fit_gemm("h100_sxm", lent=False) == h100["gemm_aiconfigurator"]
    assert calibrate.fit_head_dims() == h100["attention_head_dim"]["time_per_flop"]


def test_elementwise_kernels_stream_slower_than_copies() -> None:
    """Vidur's measured PyTorch norm/activation/rotary kernels reach under half of HBM bandwidth;
    casts and token copies stream like a weight-bound GEMM (84% on H100)."""
    from estimator.timing.kernels import copy_time, memory_time

    prof = kernel_profile(H100.id)
    assert 0.35 < prof.elementwise_memory_efficiency < 0.55 < prof.memory_efficiency
    assert memory_time(H100, prof, 1e9) > 1.5 * copy_time(H100, prof, 1e9)


def test_unmeasured_accelerators_say_which_curves_they_borrow() -> None:
    assert kernel_profile("h100-sxm-80gb").measured
    b200 = kernel_profile("b200")
    assert not b200.measured and any("aiconfigurator" in n for n in b200.notes)
    # aiconfigurator's typical compute-bound bf16 GEMM on B200 (65% of peak) is well below the
    # MAMF sweep's best shape (77.6%); the H100 fit on aiconfigurator's table (80%) carried over
    # by the medians' ratio.
    assert b200.gemm_efficiency_max == pytest.approx(0.80 * 0.6536 / 0.7794, abs=1e-3)
    gb200 = kernel_profile("gb200")
    # scaled by the measured MAMF TFLOPS (GB200 1,822, B200 1,745), on the catalog's own peaks
    # (GB200 2,450: the MAMF table's 72.9% is of 2,500)
    b200_peak = get_accelerator("b200").peak("bf16")
    expected = (
        b200.gemm_efficiency_max * b200_peak * (1822 / 1745) / get_accelerator("gb200").peak("bf16")
    )
    assert gb200.gemm_efficiency_max == pytest.approx(expected, abs=2e-3)
    assert any("MAMF" in n for n in gb200.notes)
    assert any("documented default" in n for n in kernel_profile("l4").notes)


def test_blackwell_profile_is_the_derivation_from_measured_medians() -> None:
    from validation import calibrate

    shipped = json.loads((ROOT / "estimator" / "catalog" / "efficiency.json").read_text())
    derived = calibrate.derive_b200(shipped["profiles"]["h100_sxm"])
    for key, value in derived.items():
        assert shipped["profiles"]["b200_sxm"][key] == value, key
    # B200's NCCL bus bandwidth is a smaller share of its (twice as fast) NVLink than H100's.
    assert (
        derived["scale_up"]["bandwidth_fraction"]
        < shipped["profiles"]["h100_sxm"]["scale_up"]["bandwidth_fraction"]
    )


def test_fp8_training_runs_attention_at_the_bf16_rate() -> None:
    """Low-precision recipes quantize the linears only: the attention core keeps the bf16 rate
    (Megatron-Core fp8_dot_product_attention=False), so fp8 speeds up the GEMMs and not it."""
    model = get_model("llama-3-8b")
    setup = TrainingSetup(seq_len=8192, micro_batch_size=1, global_batch_size=8)
    layout = Parallelism(dp=8)
    prof = kernel_profile(H100.id)
    times = {}
    for name in ("bf16", "fp8"):
        prec = get_precision(name)
        c = Context(model, H100, prof, layout, prec, cluster_of(H100))
        run = LayerRun(attention_format=training_attention_format(prec))
        lt = layer_time(c, 0, setup.seq_len, 1, run)
        times[name] = lt
    assert times["fp8"].attention == pytest.approx(times["bf16"].attention)
    assert times["fp8"].gemm < 0.7 * times["bf16"].gemm


# --- serving --------------------------------------------------------------------------------


def test_decode_latency_and_throughput_grow_with_concurrency() -> None:
    model = get_model("llama-3-8b")
    prec = get_precision("fp8-serving")
    points = [
        estimate_inference(model, H100, Parallelism(tp=1), InferenceSetup(1000, 1000, c), prec)
        for c in (1, 16, 128)
    ]
    tpots = [p.tpot_s for p in points]
    tputs = [p.output_tokens_per_s for p in points]
    assert tpots == sorted(tpots) and tputs == sorted(tputs)
    # Batch 1 decode is weight-read bound: about 8 GB of fp8 weights at ~3 TB/s.
    assert 2.5e-3 < tpots[0] < 5e-3


def test_moe_decode_reads_only_the_selected_experts() -> None:
    model = get_model("mixtral-8x7b")
    prec = get_precision("bf16")
    one = estimate_inference(model, H100, Parallelism(tp=2), InferenceSetup(512, 128, 1), prec)
    many = estimate_inference(model, H100, Parallelism(tp=2), InferenceSetup(512, 128, 64), prec)
    # top-2 of 8 experts at batch 1: a quarter of the expert weights; at batch 64 all of them.
    assert many.tpot_breakdown["gemm"] > 2.5 * one.tpot_breakdown["gemm"]


def test_serving_cost_splits_prefill_and_decode() -> None:
    est = estimate_inference(
        get_model("llama-3-70b"),
        H100,
        Parallelism(tp=4),
        InferenceSetup(2000, 200, 64),
        get_precision("fp8-serving"),
        price_usd_per_gpu_hour=3.0,
        tpot_target_s=0.05,
    )
    assert est.usd_per_1m_output_tokens is not None and est.usd_per_1m_input_tokens is not None
    assert est.usd_per_1k_output_tokens == pytest.approx(est.usd_per_1m_output_tokens / 1e3)
    assert est.best_concurrency is not None
    best = next(p for p in est.curve if p.concurrency == est.best_concurrency)
    assert best.tpot_s <= 0.05


@pytest.mark.parametrize("model_id", ["llama-3.1-405b", "deepseek-v3", "gemma-2-9b", "gpt2"])
def test_pipeline_ranks_alike_are_timed_once(model_id: str) -> None:
    """Each distinct rank shape stands for every rank like it (first of equals, stage order),
    and timing the shapes gives the slowest stage that timing every rank gives. A pp that
    does not divide the layers (DeepSeek-V3's 61) takes vLLM's split."""
    model = get_model(model_id)
    layers = model.num_layers
    for pp in sorted({2, 3, layers // 2, layers} - {0}):
        shapes = distinct_stages(model, pp)
        split = serving_layer_split(model, pp)
        assert sum(split) == layers
        assert [s.stage for s in shapes] == sorted(s.stage for s in shapes)
        assert sum(sum(s.counts) * s.ranks for s in shapes) == layers
        every = []
        for stage in range(pp):
            counts = tuple(int(n) for n in stage_kind_counts(model, pp, 1, stage, split))
            key = (counts, stage == 0, stage == pp - 1)
            twin = next(s for s in shapes if (s.counts, s.first, s.last) == key)
            assert twin.stage <= stage
            every.append(StageShape(stage, *key))
        if len(model.kinds) == 1:
            assert len(shapes) <= 2 + len(set(split))  # first, last, a middle per layer count
        p = Parallelism(tp=8, pp=pp)
        prec = get_precision("bf16")
        batch = np.array([1, 8, 64])
        prof = kernel_profile(H100.id)
        kinds = decode_kinds(Context(model, H100, prof, p, prec, cluster_of(H100)), batch, 2048.0)
        head = 1e-4 * batch  # any head time; the last rank carries it
        fast = pipeline(stage_times(kinds, shapes, head), pp)
        slow = pipeline(stage_times(kinds, tuple(every), head), pp)
        for part in fast:
            assert np.array_equal(fast[part], slow[part]), (pp, part)


def test_attention_kernel_and_eager_attention_change_the_step() -> None:
    """FlashAttention-2 is capped at 35% of peak on Hopper (FlashAttention-3 paper), below the
    fused kernel the curves were fitted on; unfused attention materializes s x s scores."""
    prof = kernel_profile("h100-sxm-80gb")
    assert prof.attention_efficiency("flash2") == 0.35 < prof.attention_efficiency("fused")
    assert kernel_profile("a100-sxm-80gb").attention_efficiency("flash2") == pytest.approx(
        kernel_profile("a100-sxm-80gb").attention_efficiency("fused")
    )
    assert prof.attention_backward_ratio == pytest.approx(63 / 73, abs=1e-4)

    model = get_model("llama-3-8b")
    layout = Parallelism(tp=1, pp=1, dp=8, zero_stage=1)

    def step(seq: int, **kw: object) -> float:
        flash = bool(kw.pop("flash", True))
        setup = TrainingSetup(seq, micro_batch_size=1, global_batch_size=8, flash_attention=flash)
        opts = TimingOptions(**kw)  # type: ignore[arg-type]
        return estimate_training(model, H100, layout, setup, BF16, options=opts).time.step_s

    assert step(8192, attention_kernel="flash2") > step(8192)
    # Eager attention's extra cost grows quadratically with the sequence, flash's much less.
    extra_4k = step(4096, flash=False) - step(4096)
    extra_8k = step(8192, flash=False) - step(8192)
    assert extra_4k > 0 and extra_8k > 3 * extra_4k


def test_moe_dispatcher_copies_are_timed() -> None:
    """Routed tokens are copied by permute/unpermute (and, by the all-to-all dispatcher, the
    chunk sort around the all-to-all when a rank holds several of the experts EP splits):
    memory-bound work that grows with top-k."""
    model = get_model("mixtral-8x7b")
    setup = TrainingSetup(4096, micro_batch_size=1, global_batch_size=8)
    ep1 = estimate_training(model, H100, Parallelism(tp=1, pp=1, dp=8), setup, BF16)
    ep8 = estimate_training(model, H100, Parallelism(tp=1, pp=1, dp=8, ep=8), setup, BF16)
    assert ep1.time.forward_s > 0 and ep8.time.breakdown["ep_comm"] > 0
    prof = kernel_profile(H100.id)
    c = Context(model, H100, prof, Parallelism(tp=1, pp=1, dp=8), BF16, cluster_of(H100))
    base = layer_time(c, 0, 4096, 1)
    split = layer_time(c.with_layout(Parallelism(tp=1, pp=1, dp=8, ep=4)), 0, 4096, 1)
    routed_bytes = 4096 * model.moe.top_k * model.hidden_size * 2  # type: ignore[union-attr]
    # Two more passes (read + write) of the routed tokens once experts are split over ranks
    # that hold two each (8 experts over EP 4).
    extra = split.elementwise - base.elementwise
    assert extra > 2 * 2 * routed_bytes / (H100.hbm_bytes_per_s * prof.memory_efficiency) * 0.5
    # One expert a rank (EP 8): nothing to sort (token_dispatcher.py: num_local_experts > 1).
    one = layer_time(c.with_layout(Parallelism(tp=1, pp=1, dp=8, ep=8)), 0, 4096, 1)
    assert one.elementwise == base.elementwise


def test_attention_head_dims_run_at_their_measured_rates() -> None:
    """Fused attention at 64-, 80- and 96-dimension heads takes longer per FLOP than at 128 (the
    prefill tables' dim), as timed on the lent H100: 80 runs the 96 kernel, padded."""
    from estimator.timing.kernels import attention_prefill_time

    prof = kernel_profile(H100.id)
    assert prof.head_dim_time("fused", 128) == (1.0, 1.0)
    fwd64, bwd64 = prof.head_dim_time("fused", 64)
    assert 1.2 < fwd64 < 1.6 and 1.1 < bwd64 < 1.4
    # padded: 112 costs what 128 does, so 128/112 per FLOP; 80 is measured itself
    assert prof.head_dim_time("flash2", 112) == pytest.approx((128 / 112, 128 / 112))
    fwd80 = prof.head_dim_time("fused", 80)[0]
    assert fwd80 > prof.head_dim_time("fused", 96)[0]
    # the same FLOPs on 64-dim heads take longer than on 128-dim ones
    flops, moved = 1e12, 1e9
    t128 = attention_prefill_time(H100, prof, flops, moved, 4096, "bf16", "fused", 128)
    t64 = attention_prefill_time(H100, prof, flops, moved, 4096, "bf16", "fused", 64)
    assert t64 > 1.2 * t128
    assert prof.head_dim_time("fused", 0) == (1.0, 1.0)  # a pasted config without heads
    # Blackwell's kernels were not measured: heads up to 128 take Hopper's factors, a lower
    # bound (tensor cores doubled, exponential units not); larger ones keep the 128-dim curve
    for blackwell in ("b200", "gb200", "b300", "gb300"):
        bw = kernel_profile(blackwell)
        assert bw.head_dim_time("fused", 64) == (fwd64, bwd64)
        assert bw.head_dim_time("fused", 80) == prof.head_dim_time("fused", 80)
        assert bw.head_dim_time("fused", 192) == bw.head_dim_time("fused", 256) == (1.0, 1.0)
    assert kernel_profile("a100-sxm-80gb").head_dim_time("fused", 64) == (1.0, 1.0)


def test_lent_h100_kernels_are_within_the_kernel_target() -> None:
    """The GEMMs and attention timed on the lent H100 (validation/data/kernels/h100_lent.json)
    against the model: each group's median error within the kernels' 15% target."""
    import statistics
    from collections import defaultdict

    from validation.report import lent_kernel_rows

    groups: dict[str, list[float]] = defaultdict(list)
    for row in lent_kernel_rows():
        groups[row.group].append(abs(row.error))
    assert len(groups) == 7 and sum(map(len, groups.values())) >= 700
    for name, errors in groups.items():
        assert statistics.median(errors) <= 0.15, name


@pytest.mark.slow
def test_the_kernel_timing_script_runs(tmp_path: Path) -> None:
    """validation/measure_kernels.py, which timed h100_lent.json on a lent GPU, still runs: its
    CPU dry run with tiny shapes writes every part's rows."""
    import subprocess
    import sys

    out = tmp_path / "rows.json"
    script = ROOT / "validation" / "measure_kernels.py"
    parts = "gemm,attention,elementwise,moe_host"
    subprocess.run(
        [sys.executable, str(script), "--dry", "--parts", parts, "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    ops = {r["op"] for r in json.loads(out.read_text())["rows"]}
    assert {"gemm", "gemm_grid", "attention", "activation", "rmsnorm", "moe_host"} <= ops


def test_gpt_oss_eager_expert_ops_are_timed() -> None:
    """Megatron-Core's grouped experts run gpt-oss's clamp (two clamps and a cat before the fused
    activation) and its down-projection bias (``bias x prob`` per local expert added to its
    rows, then a cat) as eager kernels (moe/experts.py, fusions/fused_bias_geglu.py @
    core_v0.16.0): per routed row 4 reads and writes of the up-projection's 5,760 outputs in 3
    kernels, 6 of the down-projection's 2,880 in 2 per local expert and 1; backward 5/4 and 4/3
    of those bytes. The moe_act recomputation runs the clamp again; serving steps (fused MoE
    kernels) and models without a clamp or expert biases add nothing."""
    from dataclasses import replace

    model = get_model("gpt-oss-120b")
    p = Parallelism(dp=8, ep=8)  # 16 local experts, as the H100 recipe
    rows = 4096 * 4  # a micro-batch of 4,096 tokens, top-4
    ops = expert_eager_ops(model, model.kinds[0], p, 4096, 2.0)
    assert (ops.clamp_bytes, ops.clamp_kernels) == (rows * 5760 * 4 * 2, 3)
    assert (ops.bias_bytes, ops.bias_kernels) == (rows * 2880 * 6 * 2, 2 * 16 + 1)
    qwen = get_model("qwen3-30b-a3b")
    assert expert_eager_ops(qwen, qwen.kinds[0], p, 4096, 2.0) == EagerExpertOps()

    prof = kernel_profile(H100.id)
    clamp_f, clamp_b, clamp_again = EagerExpertOps(ops.clamp_bytes, 3).times(H100, prof)
    assert clamp_again == clamp_f
    gb = 1e9 / (H100.hbm_bytes_per_s * prof.memory_efficiency)  # seconds per GB streamed
    assert clamp_b - 3 * prof.floor_s == pytest.approx(1.25 * ops.clamp_bytes / 1e9 * gb)
    model = replace(model, rope_mscale=1.0)  # the experts' ops alone (the RoPE's: below)
    unclamped = replace(model, moe=replace(model.moe, activation_clamp=None))  # type: ignore[type-var]
    setup = TrainingSetup(4096, micro_batch_size=1, global_batch_size=64)
    with_clamp = estimate_training(model, H100, p, setup, BF16).time
    without = estimate_training(unclamped, H100, p, setup, BF16).time
    assert with_clamp.forward_s - without.forward_s == pytest.approx(36 * clamp_f)
    assert with_clamp.backward_s - without.backward_s == pytest.approx(36 * clamp_b)
    moe_act = replace(setup, recompute="selective", recompute_modules=("moe_act",))
    rec = estimate_training(model, H100, p, moe_act, BF16).time.recompute_s
    rec_without = estimate_training(unclamped, H100, p, moe_act, BF16).time.recompute_s
    assert rec - rec_without == pytest.approx(36 * clamp_f)

    args = (Context(model, H100, prof, p, BF16, cluster_of(H100)), 0, 4096, 1)
    assert layer_time(*args).eager_forward > 0
    assert layer_time(*args, LayerRun(grouped_experts=True)).eager_forward == 0
    notes = estimate_training(get_model("gpt-oss-120b"), H100, p, setup, BF16).notes
    said = [n for n in notes if n.startswith("Routed experts: the eager PyTorch kernels")]
    assert any(n.startswith("YaRN rotary embedding scaled by 1.347") for n in notes)
    assert len(said) == 1 and "two clamps and a cat" in said[0] and "0.61 ms forward" in said[0]
    qwen_notes = estimate_training(qwen, H100, p, setup, BF16).notes
    assert not any(n.startswith("Routed experts: the eager") for n in qwen_notes)


def test_yarn_attention_factor_runs_the_unfused_rope() -> None:
    """Megatron-Core's fused RoPE takes no YaRN attention factor but 1 (rope_utils.py @
    core_v0.16.0: "mscale ... is not supported by TE's fused RoPE. Using unfused
    implementation."): gpt-oss (factor 32, cos and sin scaled by 1.347) runs the unfused one,
    12 reads and writes of each query and key element forward in 6 kernels per tensor and 13
    backward in 7, where the fused one moves 2 (4 backward)."""
    from dataclasses import replace

    model = get_model("gpt-oss-120b")
    plain = replace(model, rope_mscale=1.0)
    p = Parallelism(dp=8, ep=8)
    setup = TrainingSetup(4096, micro_batch_size=1, global_batch_size=64)
    yarn = estimate_training(model, H100, p, setup, BF16).time
    fused = estimate_training(plain, H100, p, setup, BF16).time
    elems = 4096 * (64 + 8) * 64  # q and k of one micro-batch, one layer
    prof = kernel_profile(H100.id)
    per_gb = 1e9 / (H100.hbm_bytes_per_s * prof.memory_efficiency)
    fwd = elems * 10 * 2 / 1e9 * per_gb + 12 * prof.floor_s
    bwd = elems * 9 * 2 / 1e9 * per_gb + 14 * prof.floor_s
    assert yarn.forward_s - fused.forward_s == pytest.approx(36 * fwd)
    assert yarn.backward_s - fused.backward_s == pytest.approx(36 * bwd)
    # serving engines take the factor into their rotary kernels' cos and sin
    args = (Context(model, H100, prof, p, BF16, cluster_of(H100)), 0, 4096, 1)
    assert layer_time(*args, LayerRun(grouped_experts=True)).eager_forward == 0
