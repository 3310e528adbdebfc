"""The sweep engine: validity rules, exactness against single estimates, Pareto fronts,
recommendations and the refusal of oversize sweeps."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from estimator import (
    Parallelism,
    SpecError,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.catalog import price
from estimator.layout.pipeline import model_split
from estimator.offload import Offload
from estimator.sweep.training import (
    SweepTooLarge,
    TrainingSearch,
    TrainingSweep,
    TrainingWorkload,
    sweep_size,
    sweep_training,
)
from estimator.timing.training import BREAKDOWN, TimingOptions, estimate_training

WORKLOAD = TrainingWorkload(seq_len=4096, global_batch_size=512, tokens=1e11)


def _single(
    model_id: str,
    r: dict[str, object],
    workload: TrainingWorkload = WORKLOAD,
    options: TimingOptions | None = None,
    gradients_per_step: bool = False,
) -> object:
    tp = int(r["tp"])  # type: ignore[call-overload]
    pp, vp = int(r["pp"]), int(r["vp"])  # type: ignore[call-overload]
    split = model_split(get_model(model_id), pp, vp)  # the single estimate's default: auto
    layout = Parallelism(
        tp=tp,
        pp=int(r["pp"]),  # type: ignore[call-overload]
        dp=int(r["dp"]),  # type: ignore[call-overload]
        cp=int(r["cp"]),  # type: ignore[call-overload]
        ep=int(r["ep"]),  # type: ignore[call-overload]
        vp=int(r["vp"]),  # type: ignore[call-overload]
        sequence_parallel=tp > 1,
        zero_stage=int(r["zero"]),  # type: ignore[call-overload]
        stage_layers=None if split is None else split.stage_layers,
    )
    setup = TrainingSetup(
        workload.seq_len,
        int(r["micro_batch"]),  # type: ignore[call-overload]
        workload.global_batch_size,
        r["recompute"],  # type: ignore[arg-type]
        gradients_per_step=gradients_per_step,
        mtp_layers=workload.mtp_layers,
    )
    return estimate_training(
        get_model(model_id),
        get_accelerator(str(r["accelerator"])),
        layout,
        setup,
        get_precision(str(r["precision"])),
        tokens=workload.tokens,
        price_usd_per_gpu_hour=r["usd_per_gpu_hour"],  # type: ignore[arg-type]
        options=options,
    )


@pytest.mark.parametrize(
    ("model_id", "space"),
    [
        ("llama-3-70b", TrainingSearch(accelerators=("h100-sxm-80gb", "a100-sxm-80gb"))),
        ("mixtral-8x7b", TrainingSearch(accelerators=("h200-sxm-141gb",), vp=(1, 2))),
        ("gemma-2-9b", TrainingSearch(accelerators=("b200",), pp=(1, 2, 3, 6), cp=(1, 2))),
        ("qwen3-30b-a3b", TrainingSearch(accelerators=("gb200",), num_gpus=(8, 16, 64))),
        # clamped experts with biases: their eager ops per local expert count, layout by layout
        ("gpt-oss-20b", TrainingSearch(accelerators=("h100-sxm-80gb",), num_gpus=(8, 16, 32))),
        # 61 layers: every pp > 1 takes an uneven Megatron-Core split
        ("deepseek-v3", TrainingSearch(accelerators=("h100-sxm-80gb",), pp=(2, 8, 16), vp=(1, 2))),
        (
            "llama-3-70b",
            TrainingSearch(
                accelerators=("h100-sxm-80gb",), num_gpus=(48, 168, 336), pp=(3, 6, 7), vp=(1, 3)
            ),
        ),
    ],
)
def test_every_sampled_layout_equals_its_single_estimate(
    model_id: str, space: TrainingSearch
) -> None:
    """Property: a sweep row is the single estimate of that layout, to the last bit."""
    sweep = sweep_training(get_model(model_id), WORKLOAD, space)
    assert len(sweep) > 50
    rng = random.Random(model_id)
    for i in rng.sample(range(len(sweep)), 30):
        r = sweep.row(i)
        e = _single(model_id, r)
        even = get_model(model_id).num_layers % (r["pp"] * r["vp"]) == 0  # type: ignore[operator]
        assert (r["pipeline_split"] == "even") == even
        assert r["memory_bytes"] == e.memory.total_bytes  # type: ignore[attr-defined]
        assert r["memory_stage"] == e.memory.stage  # type: ignore[attr-defined]
        assert r["fits"] == e.memory.fits  # type: ignore[attr-defined]
        assert r["step_s"] == e.time.step_s  # type: ignore[attr-defined]
        for k in BREAKDOWN:
            assert r[k] == e.time.breakdown[k], k  # type: ignore[attr-defined]
        for k in ("tokens_per_s", "mfu", "hfu", "time_to_train_s", "gpu_hours"):
            assert r[k] == getattr(e, k), k
        assert r["cost_usd"] == e.cost_usd or (r["cost_usd"] is None and e.cost_usd != e.cost_usd)  # type: ignore[attr-defined]


def test_size_is_known_before_running_and_oversize_sweeps_are_refused() -> None:
    model = get_model("llama-3-70b")
    space = TrainingSearch()
    assert sweep_size(model, space) == 10 * 1 * 3 * 8 * 4 * 5 * 1 * 1 * 1 * 4 * 4
    with pytest.raises(SweepTooLarge) as err:
        sweep_training(model, WORKLOAD, space, max_layouts=1000)
    assert err.value.size == 76_800 and err.value.field == "space"
    assert "76,800 layouts exceed the maximum of 1,000" in str(err.value)
    assert "accelerators (10 values)" in str(err.value)


def test_invalid_layouts_are_kept_with_the_single_estimate_reason() -> None:
    model = get_model("llama-3-70b")
    space = TrainingSearch(
        accelerators=("h100-sxm-80gb",), num_gpus=(24,), tp=(3, 8, 16), pp=(1, 3), zero=(1,)
    )
    sweep = sweep_training(model, WORKLOAD, space, keep_rejected=True)
    reasons = {(r["tp"], r["pp"], r["recompute"], r["micro_batch"]): r for r in sweep.rejected}
    r = reasons[(3, 1, "none", 1)]
    assert r["field"] == "layout.tp" and r["reason"] == "tp=3 must divide num_attention_heads=64"
    with pytest.raises(SpecError, match="tp=3 must divide num_attention_heads=64"):
        _single("llama-3-70b", {**r, "dp": 8, "usd_per_gpu_hour": None})
    assert reasons[(16, 1, "none", 1)]["reason"] == "tp*pp*cp must divide num_gpus=24"
    assert reasons[(16, 1, "none", 1)]["field"] == "layout.num_gpus"
    # 80 layers over pp=3 split (Megatron-Core counts the embedding as a layer: 26, 27, 27);
    # this layout is refused for its ZeRO stage, not for its pipeline.
    assert reasons[(8, 3, "none", 1)]["field"] == "layout.zero_stage"
    counts = sweep.counts
    assert counts["enumerated"] == counts["invalid"] + counts["evaluated"]
    assert len(sweep.rejected) == counts["invalid"] + counts["out_of_memory"]
    oom = [r for r in sweep.rejected if r["field"] == "memory"]
    assert all(r["reason"].startswith("out of memory: needs") for r in oom)


def test_tp_stays_in_a_node_and_global_batch_must_split() -> None:
    model = get_model("llama-2-7b")
    workload = TrainingWorkload(seq_len=4096, global_batch_size=96)
    space = TrainingSearch(
        accelerators=("h100-sxm-80gb",), num_gpus=(16,), tp=(1, 16), pp=(1,), micro_batch=(1, 4)
    )
    sweep = sweep_training(model, workload, space, keep_rejected=True)
    why = {(r["tp"], r["micro_batch"]): r["reason"] for r in sweep.rejected}
    assert why[(16, 1)] == "tp=16 must stay within a node of 8 GPUs"
    assert why[(1, 4)] == "global_batch_size=96 must be a multiple of micro_batch x dp = 64"


def _dominated(s: np.ndarray, o: np.ndarray, i: int) -> bool:
    return bool(np.any((s >= s[i]) & (o >= o[i]) & ((s > s[i]) | (o > o[i]))))


def test_pareto_fronts_are_exactly_the_non_dominated_layouts() -> None:
    sweep = sweep_training(get_model("llama-3-8b"), WORKLOAD, TrainingSearch(num_gpus=(8, 16)))
    c = sweep.columns
    priced = sweep.feasible[np.isfinite(c["usd_per_1m_tokens"][sweep.feasible])]
    speed, cheap = c["tokens_per_s"][priced], -c["usd_per_1m_tokens"][priced]
    brute = {int(priced[k]) for k in range(priced.size) if not _dominated(speed, cheap, k)}
    assert set(sweep.pareto_cost.tolist()) == brute
    assert np.all(np.diff(c["tokens_per_s"][sweep.pareto_cost]) <= 0)  # fastest first
    idx = sweep.feasible
    speed, room = c["tokens_per_s"][idx], c["headroom_bytes"][idx]
    brute = {int(idx[k]) for k in range(idx.size) if not _dominated(speed, room, k)}
    assert set(sweep.pareto_memory.tolist()) == brute


def test_recommendations_rank_by_objective_and_explain_themselves() -> None:
    workload = TrainingWorkload(seq_len=4096, global_batch_size=1024, tokens=1e12)
    sweep = sweep_training(get_model("llama-3-70b"), workload, TrainingSearch())
    assert sweep.objective == "cost" and len(sweep.recommendations) == 5
    costs = [r.row["usd_per_1m_tokens"] for r in sweep.recommendations]
    assert costs == sorted(costs)
    c = sweep.columns
    assert costs[0] == pytest.approx(np.nanmin(c["usd_per_1m_tokens"][sweep.feasible]))
    top = sweep.recommendations[0]
    assert top.why[0] == "lowest cost per token"
    assert any("GiB per GPU" in line for line in top.why)
    shapes = {
        tuple(r.row[k] for k in ("accelerator", "tp", "pp", "zero", "recompute", "micro_batch"))
        for r in sweep.recommendations
    }
    assert len(shapes) == 5  # one per shape, not the same layout at five GPU counts
    fast = sweep_training(
        get_model("llama-3-70b"), workload, TrainingSearch(), objective="time", top_k=3
    )
    speeds = [r.row["tokens_per_s"] for r in fast.recommendations]
    assert speeds == sorted(speeds, reverse=True)
    assert speeds[0] == np.max(fast.columns["tokens_per_s"][fast.feasible])


def test_deadline_budget_prices_and_progress() -> None:
    model = get_model("llama-3-8b")
    space = TrainingSearch(accelerators=("h100-sxm-80gb", "mi355x"), num_gpus=(8, 64))
    calls: list[tuple[int, int]] = []
    base = sweep_training(model, WORKLOAD, space, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (6, 6) and [d for d, _ in calls] == list(range(1, 7))
    assert any("mi355x" in n for n in base.notes)  # no sourced default price
    mi = base.columns["accelerator"] == 1
    assert np.all(np.isnan(base.columns["cost_usd"][mi]))
    h100 = price("h100-sxm-80gb")
    assert h100 is not None and h100.usd_per_gpu_hour == 3.0 and h100.date and h100.source
    deadline = float(np.median(base.columns["time_to_train_s"][base.feasible]))
    quick = sweep_training(
        model, TrainingWorkload(**{**WORKLOAD.__dict__, "deadline_s": deadline}), space
    )
    assert 0 < quick.counts["feasible"] < base.counts["feasible"]
    assert np.all(quick.columns["time_to_train_s"][quick.feasible] <= deadline)
    priced = TrainingWorkload(**{**WORKLOAD.__dict__, "prices": {"mi355x": 2.0}})
    with_price = sweep_training(model, priced, space)
    assert np.all(with_price.columns["usd_per_gpu_hour"][mi] == 2.0)


def test_bad_spaces_name_the_field() -> None:
    model = get_model("llama-3-8b")
    with pytest.raises(SpecError, match=r"space\.tp"):
        sweep_training(model, WORKLOAD, TrainingSearch(tp=(0, 2)))
    with pytest.raises(SpecError, match=r"space\.recompute"):
        sweep_training(model, WORKLOAD, TrainingSearch(recompute=("some",)))
    with pytest.raises(SpecError, match=r"workload\.seq_len"):
        sweep_training(model, TrainingWorkload(seq_len=10**6, global_batch_size=8))
    with pytest.raises(SpecError, match=r"workload\.deadline_s"):
        sweep_training(model, TrainingWorkload(4096, 8, deadline_s=10.0))
    with pytest.raises(KeyError):
        sweep_training(model, WORKLOAD, TrainingSearch(accelerators=("no-such-gpu",)))
    empty = sweep_training(
        model, WORKLOAD, TrainingSearch(accelerators=("h100-sxm-80gb",), tp=(3,))
    )
    assert isinstance(empty, TrainingSweep) and len(empty) == 0 and empty.recommendations == []


def test_serving_sweep_ranks_replicas_by_cost_under_the_targets() -> None:
    from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving

    workload = ServingWorkload(
        1000, 1000, ttft_target_s=2.0, tpot_target_s=0.05, output_tokens_per_s=1e5
    )
    space = ServingSearch(accelerators=("h100-sxm-80gb", "a100-pcie-40gb"), tp=(1, 2, 4, 8))
    result = sweep_serving(get_model("llama-3-70b"), workload, space)
    rows = list(result.rows)
    assert len(rows) == 2 * 4 * 3 * 2
    assert result.counts["evaluated"] == len(rows)
    assert result.counts["ok"] == sum(r["ok"] for r in rows)
    front = result.pareto_cost  # cheapest first, each faster per GPU than the cheaper ones
    assert front and [r["usd_per_1m_output_tokens"] for r in front] == sorted(
        r["usd_per_1m_output_tokens"] for r in front
    )
    speeds = [r["output_tokens_per_s_per_gpu"] for r in front]
    assert speeds == sorted(speeds) and len(set(speeds)) == len(speeds)
    ok = [r for r in rows if r["ok"]]
    assert ok and rows[: len(ok)] == ok  # feasible first
    costs = [r["usd_per_1m_output_tokens"] for r in ok]
    priced = [c for c in costs if c is not None]
    assert priced and costs[: len(priced)] == sorted(priced)  # a100-pcie-40gb: no price, last
    for r in ok:
        assert r["tpot_s"] <= 0.05 and r["ttft_s"] <= 2.0
        assert r["replicas"] * r["output_tokens_per_s"] >= 1e5
    bad = {(r["accelerator"], r["precision"], r["tp"], r["pp"]): r for r in rows if not r["ok"]}
    assert bad[("a100-pcie-40gb", "bf16", 1, 1)]["reason"].startswith("out of memory: weights")
    with pytest.raises(SweepTooLarge):
        sweep_serving(get_model("llama-3-70b"), workload, space, max_layouts=10)


def test_offload_and_expert_load_as_sweep_inputs() -> None:
    """Property: with CPU offload and an uneven router (issue 21, item 5 as sweep inputs), a
    sweep row is still the single estimate of its layout: step time to the last bit, memory to
    the last rounding of the float sum (the offloaded terms are added in another order)."""
    model = get_model("qwen3-30b-a3b")
    offload = Offload(optimizer=True)
    workload = replace(WORKLOAD, offload=offload, moe_imbalance=1.3)
    space = TrainingSearch(accelerators=("h100-sxm-80gb",), num_gpus=(8, 16), zero=(1, 3))
    sweep = sweep_training(model, workload, space)
    plain = sweep_training(model, WORKLOAD, space)
    assert len(sweep) == len(plain) > 50
    acc = get_accelerator("h100-sxm-80gb")
    for i in random.Random(7).sample(range(len(sweep)), 25):
        r = sweep.row(i)
        p = Parallelism(tp=r["tp"], pp=r["pp"], dp=r["dp"], cp=r["cp"], ep=r["ep"], vp=r["vp"],
                        sequence_parallel=r["tp"] > 1, zero_stage=r["zero"])  # type: ignore[operator, arg-type]  # fmt: skip
        setup = TrainingSetup(WORKLOAD.seq_len, micro_batch_size=r["micro_batch"],  # type: ignore[arg-type]
                              global_batch_size=WORKLOAD.global_batch_size,
                              recompute=r["recompute"], offload=offload, moe_imbalance=1.3)  # type: ignore[arg-type]  # fmt: skip
        e = estimate_training(model, acc, p, setup, get_precision("bf16"), tokens=WORKLOAD.tokens)
        assert r["step_s"] == e.time.step_s
        assert r["memory_bytes"] == pytest.approx(e.memory.total_bytes, rel=1e-12)
    # offloading the optimizer frees GPU memory; the uneven router slows the step
    assert (
        sweep.column("optimizer_states_bytes").max() < plain.column("optimizer_states_bytes").max()
    )
    assert np.median(sweep.column("step_s")) > np.median(plain.column("step_s"))


def test_serving_sweep_tries_expert_parallel_degrees() -> None:
    """The serving sweep's EP axis (issue 22, item 2): each degree is a row equal to the single
    estimate of that layout; the default (ep = tp for MoE, 1 for dense) is what it was; a dense
    model refuses ep > 1 with the estimator's reason."""
    from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving

    moe = get_model("qwen3-30b-a3b")
    work = ServingWorkload(input_len=2048, output_len=256)
    space = ServingSearch(accelerators=("h100-sxm-80gb",), tp=(4,), pp=(1,), precision=("bf16",))
    default = sweep_serving(moe, work, space)
    swept = sweep_serving(moe, work, replace(space, ep=(1, 2, 4)))
    assert [r["ep"] for r in default.rows] == [4]
    by_ep = {r["ep"]: r for r in swept.rows}
    assert set(by_ep) == {1, 2, 4} and all(r["ok"] for r in by_ep.values())
    assert by_ep[4]["output_tokens_per_s"] == default.rows[0]["output_tokens_per_s"]
    assert len({r["output_tokens_per_s"] for r in swept.rows}) == 3  # the degree matters
    with pytest.raises(SpecError, match="mixture-of-experts") as refused:
        sweep_serving(get_model("llama-3-8b"), work, replace(space, ep=(1, 2)))
    assert refused.value.field == "layout.ep"
    # a degree the layout cannot take is a refused row with the estimator's reason
    odd = sweep_serving(moe, work, replace(space, ep=(3,)))
    assert not odd.rows[0]["ok"] and odd.rows[0]["field"] == "layout.ep"


def test_the_network_stated_times_every_layout_as_a_plan_on_that_cluster() -> None:
    """Issue 21, item 2 in the sweep: the scale-up domain, scale-out bandwidth and
    oversubscription a sweep states time each layout as a single plan on that cluster does."""
    from estimator.inputs.cluster import cluster_of

    model = get_model("llama-3-70b")
    space = TrainingSearch(
        accelerators=("h100-sxm-80gb",), num_gpus=(64, 128), tp=(2, 8), pp=(1, 2), zero=(1, 3),
        scale_out_gbit_per_s=100.0, oversubscription=2.0,
    )  # fmt: skip
    slow = sweep_training(model, WORKLOAD, space)
    fast = sweep_training(
        model, WORKLOAD, replace(space, scale_out_gbit_per_s=None, oversubscription=1.0)
    )
    assert np.all(slow.column("step_s") >= fast.column("step_s"))
    assert np.any(slow.column("step_s") > 1.2 * fast.column("step_s"))
    cluster = cluster_of(
        get_accelerator("h100-sxm-80gb"), scale_out_gbit_per_s=100.0, oversubscription=2.0
    )
    for i in random.Random(3).sample(range(len(slow)), 20):
        r = slow.row(i)
        e = _single("llama-3-70b", r, options=TimingOptions(cluster=cluster))
        assert r["step_s"] == e.time.step_s  # type: ignore[attr-defined]
    with pytest.raises(SpecError) as err:
        sweep_training(model, WORKLOAD, replace(space, oversubscription=0.5))
    assert err.value.field == "oversubscription"
