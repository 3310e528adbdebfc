"""Multi-token prediction in training (``TrainingSetup.mtp_layers``, Megatron-Core's
``--mtp-num-layers``): each depth's decoder layers, 2h x h projection, norms and second pass
through the head counted in FLOPs, memory and time on the last pipeline stage, the layout
string's ``m`` read, bad values refused by field, the sweep equal to single estimates, and the
REST API taking the field. NVIDIA's published FLOPs per token of the DeepSeek-V3 and V4 runs
that train one depth are matched in ``test_validation_records``."""

from __future__ import annotations

import json
import random
from dataclasses import replace

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
    training_flops,
)
from estimator.finetune import FineTune
from estimator.layout.pipeline import SplitSettings, check_layout_mtp, model_split
from estimator.memory.training import training_memory_terms
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training
from estimator.timing.training import estimate_training

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
LLAMA = get_model("llama-3-8b")


def _setup(mtp: int, **kw: object) -> TrainingSetup:
    return TrainingSetup(4096, 1, 64, mtp_layers=mtp, **kw)  # type: ignore[arg-type]


def test_flops_add_a_layer_a_projection_and_a_head_per_depth() -> None:
    """Llama 3 8B, by hand from its shapes: a decoder layer's linears 2 x 218,103,808 per token
    (q, o 4096^2; k, v 4096 x 1024; gate, up, down 4096 x 14336), the 2h x h projection
    2 x 2 x 4096^2, the head 2 x 128,256 x 4096, and one layer's causal attention core (32
    heads, 2 x 32 x 256 per pair, s (s + 1) / 2 pairs); forward, twice that backward."""
    seq, batch = 4096, 2
    layer = 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    per_token = layer + 2 * 2 * 4096 * 4096 + 2 * 128256 * 4096
    core = 2 * 32 * 256 * seq * (seq + 1) // 2
    depth = seq * batch * per_token + batch * core
    base = training_flops(LLAMA, seq, batch)
    for mtp in (1, 2):
        with_mtp = training_flops(LLAMA, seq, batch, mtp=mtp)
        assert with_mtp.forward - base.forward == mtp * depth
        assert with_mtp.backward - base.backward == 2 * mtp * depth
        assert with_mtp.recompute == base.recompute == 0
    # full recompute repeats the depth's projection and layer, not its head
    full = training_flops(LLAMA, seq, batch, "full", mtp=1)
    plain = training_flops(LLAMA, seq, batch, "full")
    assert (
        full.recompute - plain.recompute == seq * batch * (layer + 4 * 4096 * 4096) + batch * core
    )


def test_memory_on_the_last_stage_only() -> None:
    """pp=2: the last stage holds the depth's layer, projection and three norms, and a second
    copy of the untied embedding (Megatron-Core's LanguageModule keeps one for the MTP stage);
    a second depth adds no second copy; the first stage is unchanged; its logits double."""
    p = Parallelism(pp=2, dp=1)
    terms = {
        mtp: training_memory_terms(LLAMA, BF16, p, _setup(mtp), stages=(0, 1), microbatches=64)
        for mtp in (0, 1, 2)
    }
    layer = LLAMA.kinds[0].params
    depth = layer + 2 * 4096 * 4096 + 3 * 4096
    embedding_copy = 128256 * 4096
    assert terms[1][0]["params_on_gpu"] == terms[0][0]["params_on_gpu"]
    assert terms[1][1]["params_on_gpu"] - terms[0][1]["params_on_gpu"] == depth + embedding_copy
    assert terms[2][1]["params_on_gpu"] - terms[1][1]["params_on_gpu"] == depth
    assert terms[1][1]["logits_bytes"] == 2 * terms[0][1]["logits_bytes"] > 0
    assert terms[1][0]["activations_bytes"] == terms[0][0]["activations_bytes"]
    assert terms[1][1]["activations_bytes"] > terms[0][1]["activations_bytes"]
    # one stage: the embedding is already there, no copy
    one = {
        mtp: training_memory_terms(LLAMA, BF16, Parallelism(dp=1), _setup(mtp), stages=(0,),
                                   microbatches=64)[0]["params_on_gpu"]
        for mtp in (0, 1)
    }  # fmt: skip
    assert one[1] - one[0] == depth


def test_time_grows_by_the_same_work_per_depth_and_the_pipeline_waits_for_the_last_stage() -> None:
    p = Parallelism(dp=8)
    fwd = [estimate_training(LLAMA, H100, p, _setup(m), BF16).time.forward_s for m in (0, 1, 2)]
    assert fwd[2] - fwd[1] == pytest.approx(fwd[1] - fwd[0], rel=1e-9)
    assert fwd[1] - fwd[0] > fwd[0] / LLAMA.num_layers  # at least a layer's time, and a head
    full = [
        estimate_training(LLAMA, H100, p, _setup(m, recompute="full"), BF16).time.recompute_s
        for m in (0, 1)
    ]
    assert full[1] > full[0]  # the checkpointed MTP layer and its projection run again
    piped = Parallelism(pp=2, dp=4)
    plain = estimate_training(LLAMA, H100, piped, _setup(0), BF16)
    mtp = estimate_training(LLAMA, H100, piped, _setup(1), BF16)
    assert mtp.time.stage == mtp.memory.stage == 1
    assert any("second copy of the untied embedding" in n for n in mtp.memory.notes)
    assert mtp.time.step_s > plain.time.step_s
    assert mtp.model_flops_per_step > plain.model_flops_per_step


def test_a_models_own_mtp_module_sets_the_layers_it_trains() -> None:
    """DeepSeek-V3's depth is an MoE layer (its last), DeepSeek-V4's a sliding-window one,
    Nemotron 3 Super's an attention and an MoE layer (its config's ``*E``)."""
    v3 = get_model("deepseek-v3")
    assert v3.kinds[v3.mtp_module[0]].routed and len(v3.mtp_module) == 1
    v4 = get_model("deepseek-v4-flash")
    core = v4.kinds[v4.mtp_module[0]].attention
    assert core is not None and core.window is not None and core.compressor is None
    p = Parallelism(ep=8, dp=8)
    for model in (v3, get_model("nemotron-3-super-120b-a12b")):
        gb200 = get_accelerator("gb200")
        setup = TrainingSetup(4096, 1, 64, mtp_layers=1)
        one = estimate_training(model, gb200, p, setup, BF16)
        none = estimate_training(model, gb200, p, replace(setup, mtp_layers=0), BF16)
        assert one.memory.params_on_gpu > none.memory.params_on_gpu
        assert one.time.step_s > none.time.step_s


@pytest.mark.parametrize(
    ("setup", "rule"),
    [
        (TrainingSetup(4096, mtp_layers=-1), "whole number from 0 to 8"),
        (TrainingSetup(4096, mtp_layers=9), "whole number from 0 to 8"),
        (TrainingSetup(4096, mtp_layers=True), "whole number from 0 to 8"),  # type: ignore[arg-type]
        (TrainingSetup(4096, mtp_layers=1, activation_convention="hf"), "Megatron-Core"),
        (TrainingSetup(4096, mtp_layers=1, finetune=FineTune(method="lora")), "frozen base"),
    ],
)
def test_refusals_name_the_field(setup: TrainingSetup, rule: str) -> None:
    with pytest.raises(SpecError) as err:
        estimate_training(LLAMA, H100, Parallelism(dp=8), setup, BF16)
    assert err.value.field == "mtp_layers" and rule in err.value.rule


def test_a_layouts_mtp_layers_are_the_plans() -> None:
    """Megatron-Core's layout string may place the MTP depths (m) on its last stage; a plan
    must then train that many, and m elsewhere is refused."""
    v3 = get_model("deepseek-v3")
    split = model_split(v3, 16, 1, "layout", SplitSettings(layout="Et*4|(t*4|)*14tmL"))
    assert split is not None and split.mtp_layers == 1
    assert split.stage_layers == (4,) * 15 + (1,)
    check_layout_mtp(split, 1)
    with pytest.raises(SpecError) as err:
        check_layout_mtp(split, 0)
    assert err.value.field == "mtp_layers" and "set mtp_layers to 1" in err.value.rule
    with pytest.raises(SpecError) as err:
        model_split(v3, 16, 1, "layout", SplitSettings(layout="Et*4m|(t*4|)*14tL"))
    assert err.value.field == "layout.pipeline_layout" and "last stage" in err.value.rule


@pytest.mark.parametrize(
    ("model_id", "space"),
    [
        ("llama-3-8b", TrainingSearch(accelerators=("h100-sxm-80gb",), num_gpus=(8, 16))),
        ("deepseek-v3", TrainingSearch(accelerators=("h100-sxm-80gb",), pp=(2, 8, 16), vp=(1, 2))),
    ],
)
def test_a_sweep_with_mtp_equals_its_single_estimates(model_id: str, space: TrainingSearch) -> None:
    from tests.test_sweep import _single

    workload = TrainingWorkload(seq_len=4096, global_batch_size=512, tokens=1e11, mtp_layers=1)
    sweep = sweep_training(get_model(model_id), workload, space)
    plain = sweep_training(get_model(model_id), replace(workload, mtp_layers=0), space)
    assert len(sweep) == len(plain) > 20
    for i in random.Random(model_id).sample(range(len(sweep)), 20):
        r = sweep.row(i)
        e = _single(model_id, r, workload)
        assert r["memory_bytes"] == e.memory.total_bytes  # type: ignore[attr-defined]
        assert r["step_s"] == e.time.step_s  # type: ignore[attr-defined]
        assert r["mfu"] == e.mfu  # type: ignore[attr-defined]
        assert r["step_s"] > plain.row(i)["step_s"]  # type: ignore[operator]


def test_the_api_takes_the_depths_and_refuses_a_bad_value() -> None:
    client = TestClient(app)
    body = {"model": "deepseek-v3", "accelerator": "gb200", "num_gpus": 64,
            "layout": {"ep": 64}, "mtp_layers": 1}  # fmt: skip
    one = client.post("/api/v1/training/estimate", json=body)
    none = client.post("/api/v1/training/estimate", json={**body, "mtp_layers": 0})
    assert one.status_code == none.status_code == 200, one.text
    flops = [r.json()["throughput"]["model_flops_per_step"] for r in (one, none)]
    assert flops[0] > flops[1]
    assert any("Multi-token prediction: 1 depth(s) trained" in n for n in one.json()["notes"])
    assert any("set mtp_layers to count them" in n for n in none.json()["notes"])
    bad = client.post("/api/v1/training/estimate", json={**body, "mtp_layers": 9})
    assert bad.status_code == 422 and "mtp_layers" in bad.text
    mismatch = client.post(
        "/api/v1/training/estimate",
        json={**body, "layout": {"pp": 16, "ep": 4, "pipeline_split": "layout",
                                 "pipeline_layout": "Et*4|(t*4|)*14tmL"}, "mtp_layers": 0},
    )  # fmt: skip
    assert mismatch.status_code == 422 and mismatch.json()["error"] == "invalid_plan"
    assert "mtp_layers" in mismatch.text


def test_the_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_cli import run

    argv = ["train", "--model", "deepseek-v3", "--accelerator", "gb200", "--gpus", "64",
            "--ep", "64", "--json"]  # fmt: skip
    code, out, _ = run(capsys, *argv, "--mtp-layers", "1")
    assert code == 0
    assert any("1 depth(s) trained" in n for n in json.loads(out)["notes"])
    code, out, err = run(capsys, *argv, "--mtp-layers", "9")
    assert code == 2 and "mtp_layers" in err and out == ""


def test_the_training_page_takes_the_depths() -> None:
    client = TestClient(app)
    page = client.get("/training")
    assert page.status_code == 200 and 'name="mtp_layers"' in page.text
    query = "model=deepseek-v3&accelerator=gb200&num_gpus=64&layout.ep=64"
    answered = client.get(f"/training?{query}&mtp_layers=1")
    assert answered.status_code == 200 and "Multi-token prediction: 1 depth" in answered.text
    refused = client.get(f"/training?{query}&mtp_layers=12")
    assert refused.status_code == 422 and "mtp_layers" in refused.text
    assert "Traceback" not in refused.text
    assert 'name="mtp_layers"' in client.get("/sweep").text


def test_a_repeated_module_holds_one_depths_weights_and_every_depths_activations() -> None:
    """Megatron-Core's mtp_use_repeated_layer (Nemotron 3 Super's recipes: two depths): the
    parameters of one depth, the activations and the time of two."""
    super_ = get_model("nemotron-3-super-120b-a12b")
    p = Parallelism(ep=8, dp=8)
    gb200 = get_accelerator("gb200")

    def estimate(mtp: int, repeated: bool) -> object:
        setup = TrainingSetup(4096, 1, 64, mtp_layers=mtp, mtp_repeated=repeated)
        return estimate_training(super_, gb200, p, setup, BF16)

    none, one, two, repeated = (
        estimate(0, False),
        estimate(1, False),
        estimate(2, False),
        estimate(2, True),
    )
    assert repeated.memory.params_on_gpu == one.memory.params_on_gpu  # type: ignore[attr-defined]
    assert two.memory.params_on_gpu > one.memory.params_on_gpu > none.memory.params_on_gpu  # type: ignore[attr-defined]
    assert repeated.memory.activations_bytes == two.memory.activations_bytes  # type: ignore[attr-defined]
    assert repeated.time.forward_s == two.time.forward_s  # type: ignore[attr-defined]
    assert any("one module's weights run for each" in n for n in repeated.notes)  # type: ignore[attr-defined]
    with pytest.raises(SpecError) as err:
        estimate(0, True)
    assert err.value.field == "mtp_repeated"


def test_a_configs_block_type_list_names_the_module() -> None:
    """Newer Nemotron configs list the module's blocks by name (``mtp_layers_block_type``)."""
    for model_id in ("nemotron-3-ultra-550b-a55b", "nemotron-3.5-lightning-30b-a3b"):
        model = get_model(model_id)
        assert model.config["mtp_layers_block_type"] == ["attention", "moe"]
        assert [model.kinds[k].name for k in model.mtp_module] == ["attention", "moe"]
