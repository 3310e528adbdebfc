"""The communication plan: message sizes from first principles, call counts, and times that are
the ones the step-time breakdown charges (one source for both)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.context import Context
from estimator.timing.collectives import wire_factor
from estimator.timing.comms import communication_plan
from estimator.timing.training import estimate_training

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
MIB = 2**20


def _both(model: str, p: Parallelism, setup: TrainingSetup):  # type: ignore[no-untyped-def]
    m = get_model(model)
    plan = communication_plan(Context.of(m, H100, p, BF16), setup)
    est = estimate_training(m, H100, p, setup, BF16)
    return plan, est


def _time(plan, dim: str) -> float:  # type: ignore[no-untyped-def]
    return sum(e.time_per_iteration_s for e in plan.events if e.dimension == dim)


@pytest.mark.parametrize("sp", [True, False])
def test_llama_70b_messages_counts_and_times(sp: bool) -> None:
    p = Parallelism(tp=8, pp=2, dp=4, sequence_parallel=sp, zero_stage=1)
    setup = TrainingSetup(
        seq_len=4096, micro_batch_size=1, global_batch_size=1024, recompute="selective"
    )
    plan, est = _both("llama-3-70b", p, setup)
    assert plan.microbatches == 256 == est.time.microbatches
    tp = [e for e in plan.events if e.dimension == "tp"]
    # A layer's activations: 4096 tokens x 8192 hidden x 2 bytes = 64 MiB.
    assert all(e.message_bytes == 64 * MIB and e.message_shape == (4096, 8192) for e in tp)
    assert [e.collective for e in tp] == (
        ["all_gather", "reduce_scatter"] if sp else ["all_reduce"]
    )
    # 40 layers per stage x (attention + MLP) x (forward + backward) per micro-batch.
    assert all(e.calls_per_microbatch == 160 and e.calls_per_iteration == 160 * 256 for e in tp)
    assert all(e.group_size == 8 and e.nodes_per_group == 1 for e in tp)
    (pp,) = [e for e in plan.events if e.dimension == "pp"]
    assert pp.message_bytes == (8 if sp else 64) * MIB and pp.nodes_per_group == 2
    # The step time charges exactly these collectives for TP and PP (nothing overlapped).
    assert _time(plan, "tp") == pytest.approx(est.time.breakdown["tp_comm"], rel=1e-12)
    assert _time(plan, "pp") == pytest.approx(est.time.breakdown["pp_comm"], rel=1e-12)
    grads = [e for e in plan.events if e.dimension == "dp" and e.collective == "reduce_scatter"]
    assert grads[0].message_bytes == est.memory.params_on_gpu * 4  # fp32 main_grad
    assert grads[0].group_size == 4 and grads[0].calls_per_iteration == 1


def test_moe_all_to_all_is_what_the_step_charges() -> None:
    p = Parallelism(tp=4, pp=4, dp=8, ep=8, etp=1, sequence_parallel=True, zero_stage=1)
    setup = TrainingSetup(seq_len=4096, micro_batch_size=1, global_batch_size=256)
    plan, est = _both("mixtral-8x7b", p, setup)
    (ep,) = [e for e in plan.events if e.dimension == "ep"]
    # Routed copies one TP rank dispatches: 4096 / 4 tokens x top-2 x 4096 hidden x 2 bytes.
    assert ep.message_bytes == 4096 / 4 * 2 * 4096 * 2
    assert ep.calls_per_microbatch == 2 * 8 * 2  # dispatch + combine, 8 layers, fwd + bwd
    assert _time(plan, "ep") == pytest.approx(est.time.breakdown["ep_comm"], rel=1e-12)


def test_experts_synchronize_over_the_expert_data_parallel_ranks() -> None:
    """Megatron-Core reduces the routed experts' gradients over its expert data-parallel group
    (tp cp dp / (ep etp) GPUs, ep etp apart), the rest over dp x cp. Mixtral 8x7B on 64 H100s
    with EP 8 inside each node: the dense gradients reduce over all 64 GPUs (8 per node, the
    hierarchy's 1/8 share crossing the NICs), the experts' over the 8 GPUs that hold the same
    experts, one per node, so their whole gradient crosses a NIC. The plan lists both and the
    step charges exactly them (2 micro-batches: the last backward hides what it can)."""
    from estimator.inputs.cluster import cluster_of
    from estimator.timing.kernels import collective_time, kernel_profile

    p = Parallelism(tp=1, dp=64, ep=8, zero_stage=1)
    setup = TrainingSetup(seq_len=4096, micro_batch_size=1, global_batch_size=128)
    plan, est = _both("mixtral-8x7b", p, setup)
    mem = est.memory
    experts = mem.expert_params_on_gpu
    # 32 layers x 8 experts / EP 8 x 3 linears of 4096 x 14336 each
    assert experts == 32 * 1 * 3 * 4096 * 14336
    syncs = [e for e in plan.events if e.dimension == "dp" and e.collective == "reduce_scatter"]
    dense, routed = syncs
    assert (dense.group_size, dense.nodes_per_group) == (64, 8)
    assert (routed.group_size, routed.nodes_per_group) == (8, 8)
    assert dense.message_bytes == (mem.params_on_gpu - experts) * 4  # fp32 main_grad
    assert routed.message_bytes == experts * 4 and "routed experts'" in routed.when
    prof, net = kernel_profile(H100.id), cluster_of(H100)
    whole = (
        routed.message_bytes
        * 7
        / 8
        / (net.scale_out_bytes_per_s * prof.scale_out.bandwidth_fraction)
    )
    assert routed.time_per_call_s == pytest.approx(
        whole + prof.scale_out.latency_s + 3 * prof.scale_out.latency_per_doubling_s, rel=1e-12
    )
    assert routed.time_per_call_s == collective_time(
        H100, prof, "reduce_scatter", routed.message_bytes, 8, 8, net
    )
    gathers = [e for e in plan.events if e.dimension == "dp" and e.collective == "all_gather"]
    sync = sum(e.time_per_call_s for e in syncs)
    gather = sum(e.time_per_call_s for e in gathers)
    exposed = max(sync - est.time.backward_s, 0.0) + max(gather - est.time.forward_s, 0.0)
    assert exposed > 0 and est.time.breakdown["dp_comm"] == pytest.approx(exposed, rel=1e-12)
    # With the experts split over TP as well (etp = tp = 8) no expert has a replica: nothing
    # of theirs to reduce, gather or shard.
    p8 = Parallelism(tp=8, dp=8, ep=8, zero_stage=1)
    plan8, _ = _both("mixtral-8x7b", p8, setup)
    assert p8.expert_dp == 1
    assert not [e for e in plan8.events if "routed experts'" in e.when]


def test_an_all_to_all_across_domains_sends_its_remote_share_whole() -> None:
    """Nothing combines on the way: 64 ranks over 8 NVLink domains send 56/64 of each rank's
    payload through its NIC (7 of every 8 copies), at the same time as 7/64 over NVLink; no
    1/k share as a reduction's hierarchy has. A domain-deduplicating dispatcher (DeepEP,
    HybridEP) sends a top-4 token once to each other domain holding one of its experts:
    8 (1 - (7/8)^4) / 4 of the copies."""
    from estimator.inputs.cluster import cluster_of
    from estimator.timing.collectives import domain_dedup
    from estimator.timing.kernels import collective_time, kernel_profile

    prof, net = kernel_profile(H100.id), cluster_of(H100)
    payload = 64e6
    t = collective_time(H100, prof, "all_to_all", payload, 64, 1, net)
    link = prof.scale_out
    nic = payload * 56 / 64 / (net.scale_out_bytes_per_s * link.bandwidth_fraction)
    lat = link.latency_s + link.latency_per_doubling_s * 3  # log2 of the 8 domains
    assert t == pytest.approx(nic + lat, rel=1e-12)
    share = domain_dedup(4, 64, 1, 8)
    assert share == pytest.approx(8 * (1 - (7 / 8) ** 4) / 4)
    deduped = collective_time(H100, prof, "all_to_all", payload, 64, 1, net, share)
    assert deduped == pytest.approx(nic * share + lat, rel=1e-12)
    assert domain_dedup(8, 8, 1, 8) == 1.0  # inside one domain: every copy over NVLink


def test_wire_factors_follow_nccl_rings() -> None:
    assert wire_factor("all_reduce", 8) == 2 * 7 / 8
    assert wire_factor("all_gather", 8) == wire_factor("reduce_scatter", 8) == 7 / 8
    assert wire_factor("send_recv", 2) == 1 and wire_factor("all_reduce", 1) == 0


def test_zero3_gathers_every_layer() -> None:
    p = Parallelism(tp=1, pp=1, dp=64, zero_stage=3)
    setup = TrainingSetup(seq_len=4096, micro_batch_size=1, global_batch_size=64)
    plan, _ = _both("llama-3-8b", p, setup)
    gathers = [e for e in plan.events if e.dimension == "zero3" and e.collective == "all_gather"]
    assert gathers and gathers[0].calls_per_microbatch == 2 * 32
    assert not [e for e in plan.events if e.dimension == "dp"]


def test_api_page_and_cli(tmp_path: Path) -> None:
    client = TestClient(app)
    req = {"model": "llama-3-70b", "num_gpus": 64, "layout": {"tp": 8, "pp": 2}}
    body = client.post("/api/v1/training/comms", json=req).json()
    assert {e["dimension"] for e in body["events"]} == {"tp", "pp", "dp"}
    assert body["sent_bytes_per_gpu"] == pytest.approx(
        sum(e["sent_bytes_per_iteration"] for e in body["events"])
    )
    assert body["cluster_bytes_per_iteration"] == pytest.approx(body["sent_bytes_per_gpu"] * 64)
    page = client.get("/training?model=llama-3-70b&num_gpus=64&tp=8&pp=2").text
    assert 'id="comms"' in page
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(req))
    assert main(["comms", str(plan)]) == 0
    plan.write_text(json.dumps({**req, "layout": {"tp": 3}}))
    assert main(["comms", str(plan)]) == 2
