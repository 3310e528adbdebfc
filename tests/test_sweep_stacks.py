"""The software stack profile as a training sweep axis (issue 21, item 6): each layout timed
under each listed stack, each row the single estimate under that stack, the best layout of each
stack recommended, and the API, page and CLI saying which stack a row is."""

from __future__ import annotations

import html
import random
import re
from dataclasses import replace
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main as cli
from app.main import app
from estimator import SpecError, get_model
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training
from estimator.timing.stacks import STACKS
from estimator.timing.training import BREAKDOWN, TimingOptions
from tests.test_sweep import _single as single_estimate

API = "/api/v1"
# 64 sequences: dp 8 at micro-batch 8 is a single micro-batch, where FSDP2's gradients freed
# between steps lower the peak (a stack behaviour the sweep takes from the profile)
WORKLOAD = TrainingWorkload(seq_len=4096, global_batch_size=64, tokens=1e10)
SPACE = TrainingSearch(
    accelerators=("h100-sxm-80gb",), num_gpus=(8, 16), tp=(1, 2), pp=(1, 2), micro_batch=(1, 4, 8)
)
ALL = tuple(TimingOptions.of_stack(name) for name in STACKS)


def _single(r: dict[str, object], grads_freed: bool) -> object:
    """The single estimate of a row under its own stack's profile."""
    options = TimingOptions.of_stack(str(r["stack"]))
    return single_estimate("llama-3-8b", r, WORKLOAD, options, gradients_per_step=grads_freed)


def test_each_row_is_the_single_estimate_under_its_stack() -> None:
    sweep = sweep_training(get_model("llama-3-8b"), WORKLOAD, SPACE, options=ALL)
    assert sweep.stacks == tuple(STACKS)
    codes = sweep.column("stack")
    assert set(codes.tolist()) == set(range(len(STACKS)))
    rows = [sweep.row(i) for i in random.Random(7).sample(range(len(sweep)), 40)]
    # and every FSDP2 layout run as one micro-batch of a single stage, where its gradients are
    # freed between steps (TorchTitan's zero_grad(set_to_none=True))
    freed = np.flatnonzero(
        (codes == list(STACKS).index("fsdp2"))
        & (sweep.column("pp") == 1)
        & (sweep.column("microbatches") == 1)
    )
    assert freed.size
    rows += [sweep.row(int(i)) for i in freed]
    differs = 0
    for r in rows:
        grads_freed = STACKS[str(r["stack"])].gradients_per_step
        e = _single(r, grads_freed)
        assert r["memory_bytes"] == e.memory.total_bytes  # type: ignore[attr-defined]
        assert r["step_s"] == e.time.step_s  # type: ignore[attr-defined]
        for k in BREAKDOWN:
            assert r[k] == e.time.breakdown[k], k  # type: ignore[attr-defined]
        assert r["tokens_per_s"] == e.tokens_per_s  # type: ignore[attr-defined]
        kept = _single(r, False)
        differs += kept.memory.total_bytes != e.memory.total_bytes  # type: ignore[attr-defined]
    assert differs >= freed.size  # the profile's behaviour changed those rows' memory


def test_the_axis_is_each_stack_swept_alone_side_by_side() -> None:
    model = get_model("llama-3-8b")
    both = sweep_training(model, WORKLOAD, SPACE, options=ALL[:2])
    assert both.size == 2 * sweep_training(model, WORKLOAD, SPACE, options=ALL[0]).size
    evaluated = 0
    for k, opts in enumerate(ALL[:2]):
        alone = sweep_training(model, WORKLOAD, SPACE, options=opts)
        assert alone.stacks == (opts.stack,)
        mine = both.column("stack") == k
        evaluated += alone.counts["evaluated"]
        np.testing.assert_array_equal(both.column("step_s")[mine], alone.column("step_s"))
        np.testing.assert_array_equal(
            both.column("memory_bytes")[mine], alone.column("memory_bytes")
        )
    assert both.counts["evaluated"] == evaluated


def test_the_best_layout_of_each_stack_is_recommended() -> None:
    sweep = sweep_training(get_model("llama-3-8b"), WORKLOAD, SPACE, options=ALL, top_k=3)
    recs = sweep.recommendations
    assert {r.row["stack"] for r in recs} == set(STACKS)
    best = recs[0].row
    feasible = sweep.feasible
    for r in recs[3:]:
        assert r.why[0].startswith(f"the best layout under {r.row['stack']}:")
        assert f"of the best of all ({best['stack']})" in r.why[0]
        mine = feasible[sweep.column("stack")[feasible] == list(STACKS).index(r.row["stack"])]
        cheapest = np.nanmin(sweep.column("usd_per_1m_tokens")[mine])
        assert r.row["usd_per_1m_tokens"] == cheapest
    assert [r.rank for r in recs] == list(range(1, len(recs) + 1))


def test_stacks_are_checked() -> None:
    model = get_model("llama-3-8b")
    with pytest.raises(SpecError) as err:
        sweep_training(model, WORKLOAD, SPACE, options=(ALL[1], ALL[1]))
    assert err.value.field == "stack"
    with pytest.raises(SpecError) as err:
        sweep_training(model, WORKLOAD, SPACE, options=())
    assert err.value.field == "stack"
    overlap = replace(ALL[1], ep_comm_overlap=True)
    with pytest.raises(SpecError) as err:
        sweep_training(model, WORKLOAD, SPACE, options=(ALL[0], overlap))
    assert err.value.field == "ep_comm_overlap"


def test_api_page_and_cli_compare_stacks() -> None:
    client = TestClient(app)
    req = {
        "model": "qwen3-30b-a3b",
        "accelerator": "h100-sxm-80gb",
        "num_gpus": 16,
        "layout": {"tp": 1, "pp": [1, 2], "vp": [1, 2]},
        "micro_batch_size": 1,
        "recompute": "selective",
        "rows": "evaluated",
        "page_size": 1000,
    }
    out = client.post(f"{API}/training/sweep", json=req | {"stack": ["megatron-core", "fsdp2"]})
    assert out.status_code == 200, out.text
    body = out.json()
    assert body["stacks"] == ["megatron-core", "fsdp2"]
    assert {r["stack"] for r in body["rows"]} == {"megatron-core", "fsdp2"}
    # Megatron-Core's EP overlap, compared with FSDP2: applied to the Megatron-Core layouts only
    both = client.post(
        f"{API}/training/sweep",
        json=req | {"stack": ["megatron-core", "fsdp2"], "ep_comm_overlap": True},
    ).json()
    alone = client.post(f"{API}/training/sweep", json=req | {"stack": "fsdp2"}).json()
    mcore = client.post(
        f"{API}/training/sweep", json=req | {"stack": "megatron-core", "ep_comm_overlap": True}
    ).json()
    for stack, single in (("fsdp2", alone), ("megatron-core", mcore)):
        mine = [r for r in both["rows"] if r["stack"] == stack]
        assert sorted(r["step_s"] for r in mine) == sorted(r["step_s"] for r in single["rows"])
    assert any("Megatron-Core layouts" in n for n in both["notes"])
    refused = client.post(
        f"{API}/training/sweep",
        json=req | {"stack": ["fsdp2", "deepspeed"], "ep_comm_overlap": True},
    )
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["field"] == "ep_comm_overlap"
    bad = client.post(f"{API}/training/sweep", json=req | {"stack": ["megatron-core", "nemo"]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"].startswith("stack")

    params = {"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": "8",
              "tp": "1", "pp": "1", "stack": "megatron-core,llm-foundry"}  # fmt: skip
    page = client.get("/sweep", params=params)
    assert page.status_code == 200
    assert "<th>Stack</th>" in page.text
    assert "stack=llm-foundry" in page.text  # a row opens in the planner under its own stack
    assert "the best layout under llm-foundry" in page.text
    single = client.get("/sweep", params=params | {"stack": "fsdp2"}).text
    assert "<th>Stack</th>" not in single and "stack=fsdp2" in single

    csv = client.post(
        f"{API}/training/sweep?format=csv", json=req | {"stack": ["megatron-core", "fsdp2"]}
    ).text
    assert csv.splitlines()[0].startswith("accelerator,stack,")


def test_cli_lists_the_stack_of_each_row(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", "--model", "llama-3-8b", "--accelerator", "h100-sxm-80gb", "--gpus", "8",
            "--tp", "1", "--pp", "1", "--stack", "megatron-core,fsdp2"]  # fmt: skip
    assert cli(args) in (0, None)
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split() for line in lines if line.startswith("accelerator"))
    assert header[:3] == ["accelerator", "stack", "precision"]
    assert any("the best layout under fsdp2" in line for line in lines)
    assert any(line.split()[:2] == ["h100-sxm-80gb", "fsdp2"] for line in lines)


@pytest.mark.parametrize(
    "query",
    [
        # MoE: the dispatcher, the router's imbalance, recompute modules (selective rows only) and
        # Megatron-Core's EP overlap (the rows that allow it only: PP without VP, full recompute)
        {"model": "qwen3-30b-a3b", "num_gpus": "16", "tp": "1", "pp": "1,2", "vp": "1,2",
         "recompute": "selective,full", "micro_batch_size": "1", "moe_dispatcher": "alltoall",
         "ep_comm_overlap": "true", "moe_imbalance": "1.2",
         "recompute_modules": "core_attn,moe_act", "global_batch_size": "256"},
        # LoRA with the optimizer offloaded, under FSDP2 and Megatron-Core
        {"model": "llama-3-8b", "num_gpus": "8", "tp": "1", "pp": "1", "finetune": "lora",
         "lora_rank": "64", "stack": "fsdp2,megatron-core", "offload_optimizer": "true",
         "micro_batch_size": "1,2", "global_batch_size": "64"},
        # the network stated: a slower scale-out, oversubscribed, over two nodes
        {"model": "llama-3-8b", "num_gpus": "16", "tp": "1,2", "pp": "1", "zero_stage": "1,3",
         "scale_out_gbit_per_s": "100", "oversubscription": "2", "global_batch_size": "128"},
    ],
)  # fmt: skip
def test_a_row_opened_in_the_planner_is_the_plan_the_sweep_evaluated(
    query: dict[str, str],
) -> None:
    """Every link from the sweep page to the training planner carries the row's layout and the
    sweep's workload as the sweep applied it: the planner's answer equals the row."""
    client = TestClient(app)
    query = {"accelerator": "h100-sxm-80gb", "seq_len": "4096"} | query
    page = client.get("/sweep", params=query | {"rows": "evaluated", "page_size": "100"})
    assert page.status_code == 200
    links = [html.unescape(h) for h in re.findall(r'href="(/training\?[^"]+)"', page.text)]
    rows = client.get("/sweep", params=query | {"format": "json"}).json()["recommendations"]
    assert len(links) >= 20 and rows
    by_layout = {}
    for r in client.get(
        "/sweep", params=query | {"format": "json", "rows": "evaluated", "page_size": "1000"}
    ).json()["rows"]:
        by_layout[tuple(str(r[k]) for k in _ROW_KEYS)] = r
    for link in links:
        params = dict(parse_qsl(urlsplit(link).query))
        for key in ("finetune", "moe_dispatcher", "moe_imbalance", "offload_optimizer",
                    "scale_out_gbit_per_s", "oversubscription"):  # fmt: skip
            assert params.get(key) == query.get(key), key
        row = by_layout[tuple(params.get(k, "1") for k in _ROW_KEYS)]
        plan = client.get("/training", params=params | {"format": "json"})
        assert plan.status_code == 200, (params, plan.text[:300])
        answer = plan.json()
        assert answer["time"]["step_s"] == pytest.approx(row["step_s"], rel=1e-12)
        assert answer["memory_per_gpu"]["total_bytes"] == pytest.approx(
            row["memory_bytes"], rel=1e-12
        )


_ROW_KEYS = ("stack", "num_gpus", "tp", "pp", "vp", "ep", "zero_stage", "micro_batch_size",
             "recompute")  # fmt: skip
