"""Megatron-Core's selective recompute modules (``recompute_modules``, its
``--recompute-modules``): the tensors each module discards are not kept, its forward runs again
in the backward (projections, the token dispatcher's copies and all-to-alls of a recomputed MoE
layer, the norms and the experts' activation), its FLOPs count in the HFU, and what Megatron-Core
refuses (or what would recompute nothing) is refused with the field named."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import (
    Parallelism,
    SpecError,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    training_memory,
)
from estimator.context import Context
from estimator.inputs.cluster import cluster_of
from estimator.inputs.precision import DTYPES
from estimator.memory.activation_bytes import item_bytes
from estimator.memory.activations import layer_items, recomputed_items
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training
from estimator.timing.kernels import kernel_profile, memory_time
from estimator.timing.layer import LayerRun, layer_time, training_attention_format
from estimator.timing.training import TimingOptions, estimate_training

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
QWEN = get_model("qwen3-30b-a3b")  # one kind: GQA attention + 128 routed experts, top-8
DSV3 = get_model("deepseek-v3")  # MLA, 3 dense layers then MoE with a shared expert
P = Parallelism(dp=8, ep=8)  # one node, no pipeline: one micro-batch in flight
SEQ = 4096


def _setup(modules: tuple[str, ...] = (), recompute: str = "selective", **kw: Any) -> TrainingSetup:
    return TrainingSetup(SEQ, 1, 64, recompute, recompute_modules=modules, **kw)  # type: ignore[arg-type]


def test_each_module_discards_what_megatron_discards() -> None:
    moe_kind = QWEN.kinds[0]
    assert recomputed_items(moe_kind, ("moe_act",)) == {"experts.down_input"}
    assert recomputed_items(moe_kind, ("layernorm",)) == {"mlp.input"}  # the pre-MLP norm's
    routed = {"experts.input", "experts.act_input", "experts.down_input", "router.probs"}
    assert recomputed_items(moe_kind, ("moe",)) == routed
    mla_moe = DSV3.kinds[-1]
    shared = {n for n in (i.name for i in layer_items(DSV3, mla_moe, True)) if "shared" in n}
    assert shared and recomputed_items(mla_moe, ("shared_experts",)) == shared
    assert recomputed_items(mla_moe, ("moe",)) == routed | shared
    assert recomputed_items(mla_moe, ("layernorm",)) == {"mlp.input", "attention.input"}
    assert recomputed_items(mla_moe, ("mla_up_proj",)) == {
        "attention.q",
        "attention.k",
        "attention.v",
    }
    dense = DSV3.kinds[0]
    assert recomputed_items(dense, ("mlp",)) == {
        n for n in (i.name for i in layer_items(DSV3, dense, True)) if n.startswith("mlp.down")
    }
    # every name is a tensor the layer saves
    for kind in (moe_kind, mla_moe, dense):
        names = {i.name for i in layer_items(QWEN if kind is moe_kind else DSV3, kind, True)}
        for module in ("moe", "layernorm", "mla_up_proj", "mlp", "shared_experts", "moe_act"):
            assert recomputed_items(kind, (module,)) <= names


@pytest.mark.parametrize("modules", [("moe_act",), ("layernorm",), ("moe",), ("moe", "layernorm")])
def test_activations_drop_exactly_the_discarded_tensors(modules: tuple[str, ...]) -> None:
    base = training_memory(QWEN, H100, P, _setup(), BF16)
    less = training_memory(QWEN, H100, P, _setup(modules), BF16)
    kind = QWEN.kinds[0]
    dropped = sum(
        item_bytes(it, BF16, tokens=SEQ, keys=SEQ, tp=1, sp=False, etp=1, recompute="selective")
        for it in layer_items(QWEN, kind, True)
        if it.name in recomputed_items(kind, modules)
    )
    assert dropped > 0
    layers = QWEN.num_layers
    assert base.activations_bytes - less.activations_bytes == pytest.approx(layers * dropped)
    assert less.weights_bytes == base.weights_bytes


def test_without_core_attn_the_score_matrices_stay() -> None:
    """Eager attention: the default module (core_attn) drops the score matrices; naming other
    modules without it keeps them, as Megatron-Core recomputes only what is named."""
    eager = {"flash_attention": False}
    default = training_memory(QWEN, H100, P, _setup(**eager), BF16)
    named = training_memory(QWEN, H100, P, _setup(("core_attn", "moe_act"), **eager), BF16)
    without = training_memory(QWEN, H100, P, _setup(("moe_act",), **eager), BF16)
    plain = training_memory(QWEN, H100, P, _setup(recompute="none", **eager), BF16)
    assert named.activations_bytes < default.activations_bytes < plain.activations_bytes
    assert without.activations_bytes > named.activations_bytes
    assert without.activations_bytes < plain.activations_bytes  # moe_act's tensor still dropped


def test_a_recomputed_moe_layer_runs_again_in_the_backward() -> None:
    kind = QWEN.kinds[0]
    prof = kernel_profile(H100.id)
    c = Context(QWEN, H100, prof, P, BF16, cluster_of(H100))
    run = LayerRun(attention_format=training_attention_format(BF16), dedup_domains=True)
    lt = layer_time(c, 0, SEQ, 1, run)
    flops = [(m.component, m.forward_flops_per_token()) for m in kind.linears]
    moe_flops = sum(f for part, f in flops if part in ("experts", "router"))
    share = moe_flops / sum(f for _, f in flops)
    act_b = DTYPES[BF16.activations].bytes
    experts_inter = sum(
        m.in_features * m.active for m in kind.linears if m.tp == "row" and m.component == "experts"
    )
    act = memory_time(H100, prof, SEQ * 3 * experts_inter * act_b, 1)
    options = TimingOptions.of_stack("megatron-core")
    base = estimate_training(QWEN, H100, P, _setup(("moe_act",)), BF16, options=options)
    again = estimate_training(QWEN, H100, P, _setup(("moe",)), BF16, options=options)
    layers = QWEN.num_layers
    assert base.time.recompute_s == pytest.approx(layers * act)
    assert again.time.recompute_s == pytest.approx(layers * (lt.gemm * share + lt.dispatch + act))
    # its dispatch and combine again: three passes instead of two
    ratio = again.time.breakdown["ep_comm"] / base.time.breakdown["ep_comm"]
    assert ratio == pytest.approx(1.5)
    # the communication table says the same: a third pass of each MoE layer's all-to-alls
    from estimator.timing.comms import communication_plan

    calls = {
        m: next(
            e.calls_per_microbatch
            for e in communication_plan(Context.of(QWEN, H100, P, BF16), _setup(m)).events
            if e.dimension == "ep"
        )
        for m in (("moe_act",), ("moe",))
    }
    assert calls[("moe",)] == 1.5 * calls[("moe_act",)]
    # the HFU counts the experts' and router's projections again, the MFU does not
    tokens = 64 * SEQ
    assert again.hardware_flops_per_step - again.model_flops_per_step == pytest.approx(
        tokens * layers * moe_flops
    )
    assert base.hardware_flops_per_step == base.model_flops_per_step


@pytest.mark.parametrize(
    ("model_id", "setup", "says"),
    [
        ("qwen3-30b-a3b", _setup(("moe",), recompute="full"), "needs recompute 'selective'"),
        ("qwen3-30b-a3b", _setup(("attention",)), "must be among"),
        ("qwen3-30b-a3b", _setup(("mla_up_proj",)), "mla_up_proj: nothing of that"),
        ("llama-3-8b", _setup(("moe",)), "moe: nothing of that"),
        ("llama-3-8b", _setup(("layernorm",)), "Transformer Engine fuses"),
        ("llama-3-8b", _setup(("mlp",), activation_convention="hf"), "Megatron-Core's modules"),
    ],
)
def test_refused_where_megatron_refuses_or_nothing_is_recomputed(
    model_id: str, setup: TrainingSetup, says: str
) -> None:
    with pytest.raises(SpecError) as err:
        training_memory(get_model(model_id), H100, Parallelism(dp=8), setup, BF16)
    assert err.value.field == "recompute_modules" and says in err.value.rule


def test_the_sweep_takes_them_in_its_selective_layouts() -> None:
    workload = TrainingWorkload(seq_len=SEQ, global_batch_size=64, recompute_modules=("moe",))
    space = TrainingSearch(
        accelerators=("h100-sxm-80gb",), num_gpus=(8,), tp=(1,), pp=(1,), ep=(8,), zero=(1,),
        recompute=("selective", "none"), micro_batch=(1,),
    )  # fmt: skip
    sweep = sweep_training(QWEN, workload, space)
    rows = {sweep.row(i)["recompute"]: sweep.row(i) for i in range(len(sweep))}
    single = estimate_training(
        QWEN, H100, Parallelism(dp=8, ep=8, zero_stage=1), _setup(("moe",)), BF16
    )
    assert rows["selective"]["step_s"] == pytest.approx(single.time.step_s)
    assert rows["selective"]["memory_bytes"] == pytest.approx(single.memory.total_bytes)
    plain = estimate_training(
        QWEN, H100, Parallelism(dp=8, ep=8, zero_stage=1), _setup(recompute="none"), BF16
    )
    assert rows["none"]["step_s"] == pytest.approx(plain.time.step_s)
    with pytest.raises(SpecError) as err:
        sweep_training(QWEN, workload, TrainingSearch(recompute=("full",)))
    assert err.value.field == "recompute_modules"


def test_api_page_and_cli_take_them() -> None:
    client = TestClient(app)
    body = {
        "model": "deepseek-v3",
        "accelerator": "h100-sxm-80gb",
        "num_gpus": 256,
        "layout": {"ep": 32},
        "global_batch_size": 4096,
        "recompute": "selective",
    }
    plain = client.post("/api/v1/training/estimate", json=body).json()
    listed = client.post(
        "/api/v1/training/estimate", json=body | {"recompute_modules": ["moe", "mla_up_proj"]}
    ).json()
    comma = client.post(
        "/api/v1/training/estimate", json=body | {"recompute_modules": "moe, mla_up_proj"}
    ).json()
    assert listed["memory_per_gpu"] == comma["memory_per_gpu"]
    less = listed["memory_per_gpu"]["activations_bytes"]
    assert less < plain["memory_per_gpu"]["activations_bytes"]
    assert listed["time"]["step_s"] > plain["time"]["step_s"]
    bad = client.post("/api/v1/training/estimate", json=body | {"recompute_modules": ["moe_layer"]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "recompute_modules"
    # Megatron-Core's empty list recomputes nothing: that is recompute "none", said so
    for empty in ([], " , "):
        r = client.post("/api/v1/training/estimate", json=body | {"recompute_modules": empty})
        assert r.status_code == 422 and "at least one module" in r.json()["detail"][0]["rule"]
    page = client.get(
        "/training?model=deepseek-v3&num_gpus=256&layout.ep=32&recompute=selective"
        "&recompute_modules=moe,mla_up_proj"
    )
    assert page.status_code == 200 and 'name="recompute_modules"' in page.text


def test_gpt_oss_clamped_activation_copy_is_kept_unless_moe_act() -> None:
    """gpt-oss's experts clamp the up-projection's output into a copy before the fused
    activation (Megatron-Core's weighted_bias_quick_geglu_impl): the fused function saves the
    copy and the clamps their input, one more tensor of the up-projection's width per routed
    row, which ``moe_act`` (and ``moe``) discard with the activation."""
    model = get_model("gpt-oss-120b")
    kind = model.kinds[0]
    items = {i.name: i for i in layer_items(model, kind, True)}
    assert items["experts.act_clamped"].elems == 4 * 2 * 2880  # top-4 rows of gate and up
    assert items["experts.act_clamped"].elems == items["experts.act_input"].elems
    assert "experts.act_clamped" in recomputed_items(kind, ("moe_act",), clamped=True)
    assert "experts.act_clamped" in recomputed_items(kind, ("moe",), clamped=True)
    assert "experts.act_clamped" not in recomputed_items(kind, ("layernorm",), clamped=True)
    kept = training_memory(model, H100, P, _setup(), BF16).activations_bytes
    dropped = training_memory(model, H100, P, _setup(("moe_act",)), BF16).activations_bytes
    down = items["experts.down_input"].elems + items["experts.act_clamped"].elems
    assert kept - dropped == pytest.approx(SEQ * down * 2 * 36)  # bf16, each of its 36 layers
    assert "experts.act_clamped" not in {i.name for i in layer_items(QWEN, QWEN.kinds[0], True)}
