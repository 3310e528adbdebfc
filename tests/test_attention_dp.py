"""Attention data parallel with wide expert parallelism in serving (issue 22): ``dp`` groups of
``tp`` GPUs each with its own sequences, KV cache and attention, the routed experts over ``ep``
of all ``dp x tp`` GPUs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import Parallelism, count_params, get_accelerator, get_model, get_precision
from estimator.context import Context
from estimator.errors import SpecError
from estimator.inputs.cluster import cluster_of
from estimator.layout.ranks import group_shapes
from estimator.memory.inference import InferenceSetup, inference_memory
from estimator.serving.estimate import estimate_inference, estimate_load
from estimator.serving.launch import EngineSettings, launch_commands
from estimator.serving.steps import decode_kinds, expert_exchange, serving_layout
from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving
from estimator.timing.kernels import collective_time, kernel_profile

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
QWEN = get_model("qwen3-30b-a3b")  # 128 experts, 8 routed per token, 48 layers
DP4 = Parallelism(tp=1, dp=4, ep=4)
client = TestClient(app)


def test_each_gpu_holds_the_attention_and_a_share_of_the_experts() -> None:
    """Against one GPU holding everything: the same non-expert weights (no TP), a quarter of
    the routed experts; a sequence's KV cache unchanged (no TP), the sequences spread over the
    groups, and four groups' worth of slots."""
    setup = InferenceSetup(1024, 256, concurrency=10)
    one = inference_memory(QWEN, H100, Parallelism(), setup, BF16)
    dp4 = inference_memory(QWEN, H100, DP4, setup, BF16)
    experts = count_params(QWEN).experts
    assert one.weights_bytes - dp4.weights_bytes == pytest.approx(experts * 2 * 3 / 4, rel=1e-12)
    assert dp4.kv_cache_bytes_per_sequence == one.kv_cache_bytes_per_sequence
    assert dp4.kv_cache_bytes == 3 * dp4.kv_cache_bytes_per_sequence  # ceil(10 / 4) on a GPU
    free = (
        H100.memory_bytes
        - dp4.weights_bytes
        - dp4.activation_peak_bytes
        - dp4.runtime_overhead_bytes
    )
    assert dp4.max_concurrency == 4 * int(free // dp4.kv_cache_bytes_per_sequence)
    assert any("Attention data parallel: 4 groups" in n for n in dp4.notes)


def test_experts_route_every_groups_tokens_and_exchange_them() -> None:
    """A group's decode step: by default the four groups alike (the experts see 4x its rows);
    its MoE layers add a dispatch (the GEMM input format) and a combine (the activations')
    all-to-all over the EP group, which a TP-only replica does not move."""
    prof = kernel_profile(H100.id)
    net = cluster_of(H100)
    p = serving_layout(QWEN, DP4)
    c = Context(QWEN, H100, prof, p, BF16, net)
    alike = decode_kinds(c, 16, 1500)
    stated = decode_kinds(c, 16, 1500, expert_batch=64)
    alone = decode_kinds(c, 16, 1500, expert_batch=16)
    assert [float(t) for t in alike[0]] == [float(t) for t in stated[0]]
    assert float(alone[0][0]) < float(alike[0][0])  # fewer routed rows: fewer expert weights read
    size, stride = group_shapes(p)["ep"]
    copies = 16 * 8 * QWEN.hidden_size  # 16 tokens, top-8 copies of h values each
    by_hand = 2 * collective_time(H100, prof, "all_to_all", copies * 2, size, stride, net)
    assert float(expert_exchange(c, 16)) == pytest.approx(by_hand, rel=1e-12)
    tp_only = c.with_layout(serving_layout(QWEN, Parallelism(tp=4, ep=4)))
    assert expert_exchange(tp_only, 16) == 0.0


def test_a_lone_prompt_routes_only_its_own_tokens() -> None:
    """Light load on four groups: one prompt's prefill is its own (not four groups' alike), so
    the loaded replica's TTFT exceeds it and its throughput is the busy groups' together."""
    setup = InferenceSetup(2048, 256)
    lone = estimate_inference(QWEN, H100, DP4, setup, BF16)
    one_gpu = estimate_inference(QWEN, H100, Parallelism(), setup, BF16)
    # the lone prompt runs on one GPU's attention either way; its experts are spread over four
    # GPUs with DP (fewer expert bytes per GPU), plus the token exchange
    assert lone.ttft_s == pytest.approx(one_gpu.ttft_s, rel=0.35)
    loaded = estimate_load(QWEN, H100, DP4, InferenceSetup(2048, 256, concurrency=64), BF16)
    light = estimate_load(QWEN, H100, DP4, InferenceSetup(2048, 256, concurrency=1), BF16)
    assert loaded.ttft_s > light.ttft_s and loaded.tpot_s > light.tpot_s
    assert light.running == pytest.approx(1.0, rel=1e-6)
    assert loaded.running == pytest.approx(64.0, rel=1e-6)
    # Little's law over the replica: requests in flight = throughput x time in the system
    assert loaded.requests_per_s * loaded.e2e_s == pytest.approx(64.0, rel=0.05)


def test_sglang_splits_its_budget_over_the_groups_and_vllm_does_not() -> None:
    setup = InferenceSetup(8000, 64, concurrency=4)
    sglang = estimate_load(QWEN, H100, DP4, setup, BF16, engine="sglang")
    vllm = estimate_load(QWEN, H100, DP4, setup, BF16, engine="vllm")
    assert sglang.prefill_steps >= 8000 / (8192 / 4)  # chunked_prefill_size // dp per group
    assert vllm.prefill_steps < 1.01
    assert sglang.ttft_s > vllm.ttft_s


@pytest.mark.parametrize(
    ("model", "layout", "field"),
    [
        ("llama-3-8b", Parallelism(tp=1, dp=2), "layout.dp"),  # dense: replicas instead
        ("qwen3-30b-a3b", Parallelism(tp=2, dp=2, ep=3), "layout.ep"),  # 3 does not divide 4
        ("qwen3-30b-a3b", Parallelism(tp=1, dp=2, pp=2, ep=2), "layout.dp"),
        ("qwen3-30b-a3b", Parallelism(tp=4, ep=8), "layout.ep"),  # past the TP group, no DP
    ],
)
def test_layouts_the_engines_do_not_run_are_refused(
    model: str, layout: Parallelism, field: str
) -> None:
    with pytest.raises(SpecError) as err:
        inference_memory(get_model(model), H100, layout, InferenceSetup(128, 128), BF16)
    assert err.value.field == field


def test_a_finite_run_is_refused_with_attention_dp() -> None:
    with pytest.raises(SpecError) as err:
        estimate_load(QWEN, H100, DP4, InferenceSetup(128, 128, 8, num_prompts=100), BF16)
    assert err.value.field == "num_prompts"


def test_launch_commands_name_the_engines_dp_flags() -> None:
    settings = EngineSettings(max_model_len=2048, max_seqs=256, token_budget=2048)
    c = launch_commands("Qwen/Qwen3-30B-A3B", DP4, BF16, settings)
    assert "--tensor-parallel-size 1 --data-parallel-size 4 --enable-expert-parallel" in c.vllm
    assert "--max-num-seqs 256 --max-num-batched-tokens 2048" in c.vllm  # per DP rank
    # SGLang: tp-size is the replica's GPUs, its limits the replica's (it divides them by dp)
    assert "--tp-size 4 --dp-size 4 --enable-dp-attention --ep-size 4" in c.sglang
    assert "--max-running-requests 1024 --chunked-prefill-size 8192" in c.sglang
    assert "--tp_size 4" in c.trtllm and "enable_attention_dp: true" in c.trtllm
    wider = launch_commands("Qwen/Qwen3-30B-A3B", Parallelism(tp=2, dp=2, ep=2), BF16, settings)
    assert any("no flag for the plan's ep = 2" in n for n in wider.notes)
    assert any("no flag for the plan's 2-GPU attention groups" in n for n in wider.notes)


def test_the_serving_sweep_takes_an_attention_dp_axis() -> None:
    space = ServingSearch(
        accelerators=("h100-sxm-80gb",), tp=(1, 2), pp=(1,), dp=(1, 4), precision=("bf16",)
    )
    sweep = sweep_serving(QWEN, ServingWorkload(1024, 256), space)
    layouts = {(r["tp"], r["dp"], r["ep"], r["num_gpus"]) for r in sweep.rows}
    assert layouts == {(1, 1, 1, 1), (2, 1, 2, 2), (1, 4, 4, 4), (2, 4, 8, 8)}
    assert all(r["ok"] for r in sweep.rows)
    with pytest.raises(SpecError) as err:
        sweep_serving(get_model("llama-3-8b"), ServingWorkload(1024, 256), space)
    assert err.value.field == "layout.dp"


def test_the_api_and_the_page_take_attention_dp() -> None:
    body = {"model": "qwen3-30b-a3b", "layout": {"tp": 1, "dp": 4, "ep": 4}, "concurrency": 32}
    r = client.post("/api/v1/inference/estimate", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["num_gpus"] == 4 and out["layout"]["dp"] == 4
    assert "--data-parallel-size 4" in out["launch"]["vllm"]
    dense = client.post(
        "/api/v1/inference/estimate", json={"model": "llama-3-8b", "layout": {"dp": 2}}
    )
    assert dense.status_code == 422 and dense.json()["detail"][0]["field"] == "layout.dp"
    wrong = client.post("/api/v1/inference/estimate", json={**body, "num_gpus": 2})
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["field"] == "num_gpus"
    page = client.get("/serving?model=qwen3-30b-a3b&tp=1&dp=4&ep=4&concurrency=32")
    assert page.status_code == 200
    assert "attention dp 4" in page.text
    sweep = client.get("/sweep?mode=serving&model=qwen3-30b-a3b&accelerator=h100-sxm-80gb&tp=1&pp=1"
                       "&dp=1,4&precision=bf16")  # fmt: skip
    assert sweep.status_code == 200
    assert '<th class="num">DP</th>' in sweep.text


def test_concurrency_below_the_groups_leaves_groups_idle() -> None:
    """Two requests on four groups: two busy groups with one sequence each, whose steps share
    the experts (two tokens touch about twice the experts one does: more weight bytes a step),
    so the replica completes more requests than with one, and fewer than twice as many."""
    two = estimate_load(QWEN, H100, DP4, InferenceSetup(1024, 256, concurrency=2), BF16)
    one = estimate_load(QWEN, H100, DP4, InferenceSetup(1024, 256, concurrency=1), BF16)
    assert one.requests_per_s < two.requests_per_s < 2 * one.requests_per_s
    assert two.tpot_s > one.tpot_s
    assert math.isfinite(two.ttft_p99_s)
    assert np.isclose(two.running, 2.0)


def test_disaggregated_decode_pools_take_attention_dp() -> None:
    """A MoE model's decode pool also as attention data parallel with wide EP on the same GPUs:
    one group's scheduler stepped, the replica decoding dp times its sequences."""
    from estimator.serving.disagg import PoolReplica, decode_curve
    from estimator.serving.engine_step import engine_step_time
    from estimator.serving.load import ENGINES

    model, h200 = get_model("deepseek-v3"), get_accelerator("h200-sxm-141gb")
    fp8 = get_precision("fp8-serving")
    wide = Parallelism(tp=1, dp=8, ep=8)
    replica = PoolReplica(model, h200, wide, 1024, 1024, fp8, ENGINES["sglang"], cluster_of(h200))
    curve = decode_curve(replica)
    per_group = curve.decoding / 8
    step = engine_step_time(
        model, h200, wide, InferenceSetup(1024, 1024), fp8, mixed=False, cluster=cluster_of(h200)
    )
    assert np.allclose(curve.tpot_s, step(per_group, 0.0))
    assert np.allclose(curve.rate, curve.decoding / (1024 * curve.tpot_s))
    assert curve.slots % 8 == 0
    workload = ServingWorkload(
        1024, 1024, ttft_target_s=2.0, tpot_target_s=0.1, request_rate=20.0,
        disaggregated=True, engine="sglang",
    )  # fmt: skip
    space = ServingSearch(accelerators=("h200-sxm-141gb",), tp=(8,), pp=(1,),
                          precision=("fp8-serving",))  # fmt: skip
    comparison = sweep_serving(model, workload, space).disaggregated
    assert comparison is not None
    assert {p["decode_dp"] for p in comparison.plans} == {1, 8}
