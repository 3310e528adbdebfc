"""Software stack profiles: named behaviours, one fitted factor per stack, named in answers."""

from __future__ import annotations

import typing

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.schemas.common import Stack, StackChoice
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.errors import SpecError
from estimator.timing.stacks import DEFAULT_STACK, STACKS
from estimator.timing.training import TimingOptions, estimate_training
from validation.fit_stacks import GROUP_OF_STACK, fit_by_generation, fit_scale
from validation.records import TrainingCase, all_training_cases

H100 = get_accelerator("h100-sxm-80gb")
API = "/api/v1"


def _estimate(options: TimingOptions | None) -> typing.Any:
    return estimate_training(
        get_model("llama-3-8b"),
        H100,
        Parallelism(tp=2, pp=2, dp=4, zero_stage=1),
        TrainingSetup(4096, 1, 64, "selective"),
        get_precision("bf16"),
        options=options,
    )


def test_the_api_offers_every_profile() -> None:
    assert set(typing.get_args(Stack)) == set(STACKS)
    assert set(typing.get_args(StackChoice)) == {"auto", *STACKS}
    assert DEFAULT_STACK == "megatron-core"


def test_the_default_profile_is_the_default_options() -> None:
    """Megatron-Core's profile is what the step time always assumed: same numbers to the bit."""
    assert _estimate(TimingOptions.of_stack(DEFAULT_STACK)) == _estimate(None)


def test_compute_scale_multiplies_compute_only() -> None:
    base = _estimate(TimingOptions())
    scaled = _estimate(TimingOptions(compute_scale=1.25))
    assert scaled.time.forward_s == pytest.approx(1.25 * base.time.forward_s, rel=1e-12)
    assert scaled.time.breakdown["compute"] == pytest.approx(
        1.25 * base.time.breakdown["compute"], rel=1e-12
    )
    assert scaled.time.breakdown["optimizer"] == base.time.breakdown["optimizer"]


def test_each_profile_applies_its_behaviours_and_says_so() -> None:
    for name, profile in STACKS.items():
        options = TimingOptions.of_stack(name)
        assert options.attention_kernel == profile.attention_kernel
        assert options.compute_scale == profile.compute_scale
        assert profile.sources and profile.fitted_on
        assert any(profile.label in n for n in _estimate(options).notes)
    assert TimingOptions.of_stack("fsdp2", attention_kernel="fused").attention_kernel == "fused"
    with pytest.raises(SpecError, match="must be one of"):
        TimingOptions.of_stack("nemo")


def test_fitted_factors_are_what_the_fit_gives() -> None:
    """Each fitted constant is the whole group's fit (validation/fit_stacks.py), to the third
    decimal; unfitted profiles stay at 1.0 and say why."""
    cases = [c for c in all_training_cases() if isinstance(c, TrainingCase)]
    for stack, group in GROUP_OF_STACK.items():
        runs = [c for c in cases if c.group == group]
        assert {c.stack for c in runs} == {stack}
        assert len(runs) >= 20
        assert STACKS[stack].compute_scale == pytest.approx(fit_scale(runs, stack), abs=6e-4)
        fitted = fit_by_generation(runs, stack)
        shipped = dict(STACKS[stack].compute_scale_by_generation)
        assert set(shipped) == set(fitted)
        for generation, scale in fitted.items():
            assert shipped[generation] == pytest.approx(scale, abs=6e-4), generation
    for name, profile in STACKS.items():
        if name not in GROUP_OF_STACK:
            assert profile.compute_scale == 1.0 and "not" in profile.fitted_on
            assert not profile.compute_scale_by_generation


def test_a_generations_own_factor_applies_on_its_accelerators_only() -> None:
    """llm-foundry on H100 (Hopper) takes the Hopper runs' factor, on A100 the Ampere runs',
    elsewhere the whole group's; the answer names the one applied."""
    foundry = TimingOptions.of_stack("llm-foundry")
    by = dict(STACKS["llm-foundry"].compute_scale_by_generation)
    assert foundry.scale_for("hopper") == by["hopper"] != foundry.scale_for("ampere")
    assert foundry.scale_for("blackwell") == STACKS["llm-foundry"].compute_scale
    plain = _estimate(TimingOptions(attention_kernel="flash2"))
    scaled = _estimate(foundry)
    assert scaled.time.breakdown["compute"] == pytest.approx(
        by["hopper"] * plain.time.breakdown["compute"], rel=1e-12
    )
    client = TestClient(app)
    req = {"model": "llama-3-8b", "num_gpus": 8, "stack": "llm-foundry"}
    on_a100 = client.post(f"{API}/training/estimate", json=req | {"accelerator": "a100-sxm-80gb"})
    assert on_a100.json()["stack"]["compute_scale"] == by["ampere"]


def test_api_page_sweep_and_cli_name_the_stack() -> None:
    client = TestClient(app)
    req = {"model": "llama-3-8b", "num_gpus": 8}
    default = client.post(f"{API}/training/estimate", json=req).json()
    assert default["stack"]["name"] == "megatron-core"
    foundry = client.post(f"{API}/training/estimate", json={**req, "stack": "llm-foundry"}).json()
    assert foundry["stack"]["attention_kernel"] == "flash2"
    # on the default H100: the Hopper runs' own factor
    hopper = dict(STACKS["llm-foundry"].compute_scale_by_generation)["hopper"]
    assert foundry["stack"]["compute_scale"] == hopper
    assert (
        foundry["throughput"]["tokens_per_s_per_gpu"]
        < default["throughput"]["tokens_per_s_per_gpu"]
    )
    kernel = client.post(
        f"{API}/training/estimate", json={**req, "stack": "fsdp2", "attention_kernel": "fused"}
    ).json()
    assert kernel["stack"]["attention_kernel"] == "fused"
    bad = client.post(f"{API}/training/estimate", json={**req, "stack": "nemo"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "stack"
    page = client.get("/training", params={**req, "stack": "fsdp2"}).text
    assert "Across software stacks" in page
    assert "PyTorch FSDP2 / TorchTitan (this plan)" in page
    assert all(p.label in page for p in STACKS.values())
    sweep = client.post(
        f"{API}/training/sweep",
        json={"model": "llama-3-8b", "accelerator": ["h100-sxm-80gb"], "num_gpus": [8],
              "stack": "llm-foundry"},
    ).json()  # fmt: skip
    assert any("llm-foundry" in n for n in sweep["notes"])


def _moe(cuda_graphs: str | None, model: str = "qwen3-30b-a3b", pp: int = 1) -> typing.Any:
    options = TimingOptions.of_stack(DEFAULT_STACK, cuda_graphs=cuda_graphs)
    return estimate_training(
        get_model(model),
        H100,
        Parallelism(pp=pp, dp=8 // pp, ep=8 // pp),
        TrainingSetup(4096, 1, 64),
        get_precision("bf16"),
        options=options,
    )


def test_without_cuda_graphs_each_moe_layer_exposes_its_host_time() -> None:
    """Megatron-Core's profile assumes its recipes' partial CUDA graphs (the host's part counted
    hidden); without graphs each MoE layer of the slowest stage exposes the fitted host time per
    micro-batch, in its own breakdown term, and the pipeline's fill and drain with it."""
    from estimator.timing.stacks import MOE_EAGER_HOST_S

    assert STACKS[DEFAULT_STACK].cuda_graphs == "partial"
    assert all(STACKS[s].cuda_graphs == "none" for s in STACKS if s != DEFAULT_STACK)
    hidden, eager = _moe(None), _moe("none")
    assert hidden.time.breakdown["host"] == 0.0 == _moe("full").time.breakdown["host"]
    layers = get_model("qwen3-30b-a3b").num_layers  # every layer a MoE layer
    expected = eager.time.microbatches * layers * MOE_EAGER_HOST_S
    assert eager.time.breakdown["host"] == pytest.approx(expected)
    assert eager.time.step_s == pytest.approx(hidden.time.step_s + expected)
    assert any("without CUDA graphs" in n for n in eager.notes)
    assert not any("without CUDA graphs" in n for n in hidden.notes)
    # two stages: the slowest stage's layers, and its host time in the bubble too
    staged, staged_hidden = _moe("none", pp=2), _moe("partial", pp=2)
    grown = staged.time.step_s - staged_hidden.time.step_s
    per_mb = layers / 2 * MOE_EAGER_HOST_S
    assert grown == pytest.approx(per_mb * (staged.time.microbatches + 1))
    # a dense model has no MoE layer to expose
    dense = _estimate(TimingOptions.of_stack(DEFAULT_STACK, cuda_graphs="none"))
    assert dense.time.breakdown["host"] == 0.0


def test_the_moe_host_time_is_what_the_fit_gives() -> None:
    """Fitted on the compared Megatron-Core MoE runs whose recipes set no CUDA graphs, as the
    compute factors are on their groups: never per record."""
    from estimator.timing.stacks import MOE_EAGER_HOST_S
    from validation.fit_stacks import eager_moe_runs, fit_moe_host

    runs = eager_moe_runs()
    assert len(runs) == 33  # 30, before three 25.11 runs had their recipes read
    assert fit_moe_host(runs) == pytest.approx(MOE_EAGER_HOST_S, abs=1e-6)


def test_cuda_graphs_through_the_api() -> None:
    client = TestClient(app)
    body = {
        "model": "qwen3-30b-a3b",
        "accelerator": "h100-sxm-80gb",
        "num_gpus": 8,
        "layout": {"ep": 8},
        "seq_len": 4096,
        "global_batch_size": 64,
    }
    default = client.post(f"{API}/training/estimate", json=body).json()
    eager = client.post(f"{API}/training/estimate", json=body | {"cuda_graphs": "none"}).json()
    assert default["stack"]["cuda_graphs"] == "partial"
    assert eager["stack"]["cuda_graphs"] == "none"
    assert default["time"]["breakdown"]["host_s"] == 0.0 < eager["time"]["breakdown"]["host_s"]
    bad = client.post(f"{API}/training/estimate", json=body | {"cuda_graphs": "some"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "cuda_graphs"
    sweep = {k: v for k, v in body.items() if k not in ("accelerator", "num_gpus", "layout")}
    sweep |= {"accelerator": ["h100-sxm-80gb"], "num_gpus": [8], "cuda_graphs": "none"}
    rows = client.post(f"{API}/training/sweep", json=sweep).json()["rows"]
    assert rows and all(r["host_s"] > 0 for r in rows if r.get("ok", True) and r["ep"] > 1)
