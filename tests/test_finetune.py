"""Fine-tuning (``estimator.finetune``): LoRA and QLoRA checked against real PEFT on CPU, full
fine-tuning against the numbers of the commit before fine-tuning was modelled, and the setting
through the REST API, the sweep, the pages and the CLI.

Against PEFT 0.21 (``get_peft_model(model, LoraConfig(r=..., target_modules=...))`` over tiny
transformers models of catalog families, fp32, CPU): the parameters PEFT trains and holds, the
forward and backward FLOPs ``torch.utils.flop_counter.FlopCounterMode`` counts over a real
forward and backward, and the bytes of the weights, of the gradients autograd leaves and of
AdamW's moments after one step, equal the planner's exactly.
"""

from __future__ import annotations

import json
import warnings
from functools import cache
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app
from estimator import (
    GIB,
    Parallelism,
    TrainingSetup,
    count_params,
    forward_flops,
    get_accelerator,
    get_model,
    get_precision,
    model_entry,
    model_from_config,
    training_flops,
    training_memory,
)
from estimator.errors import SpecError
from estimator.finetune import NF4, NF4_DOUBLE_QUANT, FineTune, adapters
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training
from estimator.timing.training import estimate_training
from tests.conftest import load_data

client = TestClient(app)

# (catalog family, targets as PEFT takes them (None: its default for the model type), rank,
# experts implementation). Qwen3-MoE runs its experts as ``batched_mm``, the implementation
# torch's counter has a formula for (validation/groundtruth.py, trap 5); phi-3 fuses q, k, v
# (one adapter over the fused qkv_proj); GPT-2's projections are Conv1D modules.
CASES = [
    ("llama-3-8b", None, 8, None),
    ("llama-3-8b", "all-linear", 4, None),
    ("qwen3-8b", ("q_proj", "k_proj", "o_proj", "down_proj"), 16, None),
    ("qwen3-8b", "all-linear", 8, None),
    ("qwen3-30b-a3b", ("q_proj", "v_proj"), 8, "batched_mm"),
    ("phi-3-mini-4k", ("qkv_proj", "o_proj"), 4, None),
    ("gpt2", None, 8, None),
]
BATCH, SEQ = 2, 24


def _finetune(targets: str | tuple[str, ...] | None, rank: int) -> FineTune:
    listed = (targets,) if isinstance(targets, str) else targets
    return FineTune("lora", rank, listed)


@cache
def _peft_run(model_id: str, targets: Any, rank: int, experts: str | None) -> dict[str, int]:
    """One real LoRA step of a tiny ``model_id`` under PEFT: trainable and total parameters,
    forward and backward FLOPs, bytes of weights, gradients and AdamW moments."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from torch.utils.flop_counter import FlopCounterMode

    from validation import groundtruth as gt

    config = gt.tiny_config(model_entry(model_id)["config"])
    model = gt.real_model(config, experts_implementation=experts)
    # Every frozen GEMM computes its input gradient, as under gradient checkpointing (the
    # convention estimator.finetune documents); without it autograd skips the first layer's.
    model.enable_input_require_grads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Conv1D fan_in_fan_out, deprecation notices
        lora = peft.LoraConfig(
            r=rank, target_modules=list(targets) if isinstance(targets, tuple) else targets
        )
        tuned = peft.get_peft_model(model, lora)
    ids = torch.randint(0, config["vocab_size"], (BATCH, SEQ))
    forward = FlopCounterMode(display=False)
    with forward:
        logits = tuned(input_ids=ids, use_cache=False).logits
    backward = FlopCounterMode(display=False)
    with backward:
        logits.sum().backward()
    trained = [p for p in tuned.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained)
    optimizer.step()
    moments = sum(
        state[k].nbytes for state in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")
    )
    return {
        "config": config,
        "trainable": sum(p.numel() for p in trained),
        "total": sum(p.numel() for p in tuned.parameters()),
        "forward": int(forward.get_total_flops()),
        "backward": int(backward.get_total_flops()),
        "weights_bytes": sum(p.nbytes for p in tuned.parameters()),
        "gradients_bytes": sum(p.grad.nbytes for p in trained),
        "optimizer_states_bytes": moments,
    }


def _spec(run: dict[str, Any]) -> Any:
    return model_from_config(run["config"], "tiny")


@pytest.mark.parametrize(("model_id", "targets", "rank", "experts"), CASES)
def test_trainable_params_equal_peft(model_id: str, targets: Any, rank: int, experts: Any) -> None:
    run = _peft_run(model_id, targets, rank, experts)
    resolved = adapters(_spec(run), _finetune(targets, rank))
    assert resolved.trainable_params == run["trainable"]
    assert resolved.total_params == run["total"]


@pytest.mark.parametrize(("model_id", "targets", "rank", "experts"), CASES)
def test_flops_equal_flop_counter(model_id: str, targets: Any, rank: int, experts: Any) -> None:
    """Forward and backward of a real step, as torch counts them. The planner's training FLOPs
    count causal attention (what a flash kernel computes); torch counts eager attention's full
    ``s x s`` square, once forward and twice backward, which is added back here."""
    run = _peft_run(model_id, targets, rank, experts)
    model = _spec(run)
    flops = training_flops(model, SEQ, BATCH, "none", _finetune(targets, rank))
    fwd = forward_flops(model, SEQ, BATCH)
    masked = fwd.attention_core - fwd.attention_core_causal
    assert flops.forward + masked == run["forward"]
    assert flops.backward + 2 * masked == run["backward"]


@pytest.mark.parametrize(("model_id", "targets", "rank", "experts"), CASES)
def test_state_bytes_equal_a_real_step(
    model_id: str, targets: Any, rank: int, experts: Any
) -> None:
    """fp32 weights (base and adapters), the gradients autograd leaves on the trainable
    parameters and AdamW's two moments, on one GPU (no sharding)."""
    run = _peft_run(model_id, targets, rank, experts)
    setup = TrainingSetup(SEQ, micro_batch_size=BATCH, finetune=_finetune(targets, rank))
    mem = training_memory(
        _spec(run), get_accelerator("h100-sxm-80gb"), Parallelism(), setup, get_precision("fp32")
    )
    assert mem.weights_bytes == run["weights_bytes"]
    assert mem.gradients_bytes == run["gradients_bytes"]
    assert mem.optimizer_states_bytes == run["optimizer_states_bytes"]
    assert mem.master_weights_bytes == 0
    assert (mem.params_on_gpu, mem.trainable_params_on_gpu) == (run["total"], run["trainable"])


# Full fine-tuning's numbers, bit for bit as before fine-tuning was modelled
# (tests/data/full_training_golden.json, written by the commit it names).
PLANS: dict[str, tuple[str, dict[str, Any], dict[str, Any], str]] = {
    "llama-3-70b": (
        "h100-sxm-80gb",
        {"tp": 8, "pp": 2, "dp": 4, "sequence_parallel": True, "zero_stage": 1},
        {"seq_len": 4096, "global_batch_size": 64, "recompute": "selective"},
        "bf16",
    ),
    "llama-3-8b": (
        "h100-sxm-80gb",
        {"dp": 8, "zero_stage": 3},
        {"seq_len": 8192, "micro_batch_size": 2, "recompute": "full", "optimizer": "adafactor"},
        "bf16",
    ),
    "deepseek-v3": (
        "h200-sxm-141gb",
        {"tp": 8, "dp": 8, "ep": 8, "sequence_parallel": True, "zero_stage": 3},
        {"seq_len": 4096, "global_batch_size": 512},
        "fp8",
    ),
    "mixtral-8x7b": (
        "a100-sxm-80gb",
        {"tp": 2, "pp": 4, "dp": 2, "ep": 2, "vp": 2, "sequence_parallel": True, "zero_stage": 2},
        {"seq_len": 4096, "global_batch_size": 32, "recompute": "selective"},
        "bf16",
    ),
    "qwen3-8b": (
        "h100-sxm-80gb",
        {"tp": 2, "cp": 2, "dp": 2},
        # chunked: the golden predates the eager loss's backward buffers (tested on their own
        # in test_memory_pytorch_stacks.py), which a chunked loss does not add
        {"seq_len": 8192, "activation_convention": "hf", "chunked_loss": True},
        "bf16",
    ),
    "jamba-1.5-mini": (
        "h100-sxm-80gb",
        {"tp": 2, "dp": 4, "ep": 2},
        {"seq_len": 4096, "recompute": "full"},
        "bf16",
    ),
    "gpt2": (
        "a100-sxm-40gb",
        {"dp": 2, "zero_stage": 0},
        {
            "seq_len": 1024,
            "micro_batch_size": 8,
            "flash_attention": False,
            "optimizer": "adam8bit",
        },
        "fp16",
    ),
}


@pytest.mark.parametrize("model_id", PLANS)
def test_full_finetuning_is_unchanged(model_id: str) -> None:
    acc, layout, setup, precision = PLANS[model_id]
    golden = load_data("full_training_golden.json")["plans"][model_id]
    e = estimate_training(
        get_model(model_id),
        get_accelerator(acc),
        Parallelism(**layout),
        TrainingSetup(**setup, finetune=FineTune("full")),
        get_precision(precision),
        tokens=1e12,
    )
    m = e.memory
    assert m.dequant_buffer_bytes == 0 and m.trainable_params_on_gpu == m.params_on_gpu
    memory = {k: v for k, v in m.terms().items() if k != "dequant_buffer_bytes"}
    assert (
        memory | {"total_bytes": m.total_bytes, "params_on_gpu": m.params_on_gpu}
        == golden["memory"]
    )
    t = e.time
    # terms added after the golden numbers: no offload, no host time (CUDA graphs: the stack's)
    assert t.breakdown["offload"] == 0.0 and t.breakdown["host"] == 0.0
    breakdown = {k: v for k, v in t.breakdown.items() if k not in ("offload", "host")}
    step = {"step_s": t.step_s, **breakdown, "forward_s": t.forward_s}
    step |= {"backward_s": t.backward_s, "recompute_s": t.recompute_s}
    assert step == golden["step"]
    assert {
        "model": e.model_flops_per_step,
        "hardware": e.hardware_flops_per_step,
        "mfu": e.mfu,
        "hfu": e.hfu,
    } == golden["flops"]


def _llama_70b(method: str, pp: int, **finetune: Any) -> Any:
    return training_memory(
        get_model("llama-3-70b"),
        get_accelerator("h100-sxm-80gb"),
        Parallelism(pp=pp),
        TrainingSetup(4096, recompute="full", finetune=FineTune(method, **finetune)),
        get_precision("bf16"),
    )


def test_qlora_70b_fits_one_h100_and_lora_does_not() -> None:
    """Llama-3-70B at seq 4096, micro-batch 1, gradient checkpointing (full recompute, as QLoRA
    trains), r=16 on q_proj and v_proj, H100 80GB:

    - QLoRA on 1 GPU: 48.91 GiB (weights 36.86: 68.45B linear weights in NF4 with double
      quantization at 0.5159 B, 2.10B embedding and head in bf16; adapters 32.8M with fp32
      gradients, master weights and Adam moments 0.47; checkpointed layer inputs 5.00; fp32
      logits 2.08, whose freed blocks the recomputed layer's 1.05 then reuse (kept reserved,
      with fragmentation); dequantization buffer 0.44, the 8192 x 28672 MLP weight in bf16):
      fits, as the QLoRA paper's 65B on one 48 GB GPU.
    - QLoRA on 2 GPUs (pp=2): 26.93 GiB a GPU.
    - LoRA in bf16 on 1 GPU: 147.8 GiB (131.5 of bf16 weights): does not fit; on 2 (pp=2)
      76.1 GiB, just under the card's 79.6 GiB.
    """
    qlora = _llama_70b("qlora", 1)
    model = get_model("llama-3-70b")
    params = count_params(model)
    linear = params.total - params.embeddings - params.output_head - params.norms
    assert qlora.weights_bytes == pytest.approx(
        linear * NF4_DOUBLE_QUANT.bytes
        + (params.total - linear) * 2
        + adapters(model, FineTune("qlora")).trainable_params * 2,
        rel=1e-12,
    )
    assert NF4_DOUBLE_QUANT.bytes == 0.5 + 1 / 64 + 4 / (64 * 256)
    assert qlora.dequant_buffer_bytes == 8192 * 28672 * 2
    assert qlora.fits and qlora.total_bytes / GIB == pytest.approx(48.91, abs=0.01)
    assert _llama_70b("qlora", 2).total_bytes / GIB == pytest.approx(26.93, abs=0.01)
    single = _llama_70b("qlora", 1, double_quant=False)
    saved = linear * (NF4.bytes - NF4_DOUBLE_QUANT.bytes)
    assert single.weights_bytes - qlora.weights_bytes == pytest.approx(saved, rel=1e-9)
    lora = _llama_70b("lora", 1)
    assert not lora.fits and lora.total_bytes / GIB == pytest.approx(147.80, abs=0.01)
    assert _llama_70b("lora", 2).fits


def test_adapter_states_shard_like_trainable_params() -> None:
    """ZeRO-1 divides the adapters' master weights and moments over dp, ZeRO-2 their gradients
    too; TP splits B of a column-parallel base (q_proj, v_proj) and keeps A whole."""
    model = get_model("llama-3-8b")
    acc, bf16 = get_accelerator("h100-sxm-80gb"), get_precision("bf16")
    lora = FineTune("lora")
    setup = TrainingSetup(4096, finetune=lora)
    one = training_memory(model, acc, Parallelism(zero_stage=0), setup, bf16)
    trained = adapters(model, lora).trainable_params
    assert one.trainable_params_on_gpu == trained == 32 * 16 * (4096 + 4096 + 4096 + 1024)
    assert one.gradients_bytes == trained * 4 and one.optimizer_states_bytes == trained * 8
    z1 = training_memory(model, acc, Parallelism(dp=4, zero_stage=1), setup, bf16)
    assert z1.optimizer_states_bytes == trained * 8 / 4 and z1.gradients_bytes == trained * 4
    z2 = training_memory(model, acc, Parallelism(dp=4, zero_stage=2), setup, bf16)
    assert z2.gradients_bytes == trained * 4 / 4
    tp2 = training_memory(model, acc, Parallelism(tp=2), setup, bf16)
    assert tp2.trainable_params_on_gpu == 32 * 16 * (4096 + 4096 / 2 + 4096 + 1024 / 2)


def test_lora_step_is_cheaper_and_qlora_pays_for_dequantization() -> None:
    model, acc = get_model("llama-3-8b"), get_accelerator("h100-sxm-80gb")
    bf16 = get_precision("bf16")

    def step(method: str) -> Any:
        setup = TrainingSetup(4096, recompute="full", finetune=FineTune(method))
        return estimate_training(model, acc, Parallelism(dp=8), setup, bf16)

    full, lora, qlora = step("full"), step("lora"), step("qlora")
    assert lora.time.backward_s < full.time.backward_s
    assert lora.time.forward_s < qlora.time.forward_s
    assert lora.time.breakdown["optimizer"] < full.time.breakdown["optimizer"] / 100
    assert lora.model_flops_per_step < 0.7 * full.model_flops_per_step
    assert any("backward without the frozen weights' gradients" in n for n in lora.notes)


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"model": "llama-3-8b", "lora_rank": 8}, "lora_rank", "finetune=lora or qlora"),
        (
            {"model": "llama-3-8b", "finetune": "lora", "lora_targets": "q_proj,query"},
            "lora_targets",
            "self_attn.q_proj, self_attn.k_proj, self_attn.v_proj, self_attn.o_proj, mlp.gate_proj",
        ),
        (
            {"model": "qwen3-30b-a3b", "finetune": "lora", "lora_targets": "all-linear"},
            "lora_targets",
            "routed experts",
        ),
        (
            {
                "model": "qwen3-30b-a3b",
                "finetune": "qlora",
                "lora_targets": ["mlp.experts.gate_up_proj"],
            },
            "lora_targets",
            "routed experts",
        ),
        (
            {"model": "mixtral-8x7b", "finetune": "lora", "lora_targets": ["gate"]},
            "lora_targets",
            "router",
        ),
        ({"model": "llama-3-8b", "finetune": "qlora", "precision": "fp8"}, "precision", "NF4"),
        (
            {"model": "llama-3-8b", "finetune": "lora", "qlora_double_quant": False},
            "qlora_double_quant",
            "finetune=qlora",
        ),
        ({"model": "llama-3-8b", "finetune": "lora", "lora_rank": 0}, "lora_rank", ""),
        ({"model": "llama-3-8b", "finetune": "dora"}, "finetune", ""),
    ],
)
def test_bad_settings_are_refused_naming_the_field(
    body: dict[str, Any], field: str, says: str
) -> None:
    r = client.post("/api/v1/training/estimate", json=body)
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["field"] == field and says in detail["rule"]


def test_core_refuses_a_rank_below_one() -> None:
    with pytest.raises(SpecError, match="lora_rank"):
        adapters(get_model("llama-3-8b"), FineTune("lora", 0))


def test_api_answer_says_what_is_trained() -> None:
    body = {
        "model": "llama-3-8b",
        "finetune": "qlora",
        "lora_rank": 64,
        "lora_targets": "All-Linear",
        "recompute": "full",
    }
    r = client.post("/api/v1/training/estimate", json=body)
    assert r.status_code == 200
    out = r.json()
    # 32 layers of r (in + out): q and o 4096 -> 4096, k and v 4096 -> 1024, the MLP 4096 <-> 14336
    trained = 32 * 64 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 3 * (4096 + 14336))
    assert out["finetune"] == {
        "method": "qlora",
        "lora_rank": 64,
        "lora_targets": [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ],
        "qlora_double_quant": True,
        "trainable_params": trained,
        "total_params": count_params(get_model("llama-3-8b")).total + trained,
    }
    assert any(f"{trained:,} of" in n and "QLoRA r=64" in n for n in out["notes"])
    assert out["memory_per_gpu"]["trainable_params_on_gpu"] == trained
    full = client.post("/api/v1/training/estimate", json={"model": "llama-3-8b"}).json()
    assert full["finetune"]["method"] == "full" and full["finetune"]["lora_targets"] == []


def test_sweep_rows_equal_single_lora_estimates() -> None:
    model, acc = get_model("llama-3-8b"), get_accelerator("h100-sxm-80gb")
    lora = FineTune("lora", 32, ("q_proj", "k_proj", "v_proj", "o_proj"))
    workload = TrainingWorkload(seq_len=4096, global_batch_size=64, finetune=lora)
    space = TrainingSearch(
        accelerators=("h100-sxm-80gb",),
        num_gpus=(8,),
        tp=(1, 2),
        pp=(1, 2),
        zero=(1, 3),
        recompute=("full",),
        micro_batch=(1,),
    )
    sweep = sweep_training(model, workload, space)
    assert len(sweep) == 8 and any("LoRA r=32" in n for n in sweep.notes)
    for i in range(len(sweep)):
        row = sweep.row(i)
        p = Parallelism(
            tp=row["tp"],
            pp=row["pp"],
            dp=row["dp"],
            sequence_parallel=row["tp"] > 1,
            zero_stage=row["zero"],
        )
        setup = TrainingSetup(4096, 1, 64, "full", finetune=lora)
        e = estimate_training(model, acc, p, setup, get_precision("bf16"))
        assert row["memory_bytes"] == pytest.approx(e.memory.total_bytes, rel=1e-12)
        assert row["gradients_bytes"] == pytest.approx(e.memory.gradients_bytes, rel=1e-12)
        assert row["step_s"] == pytest.approx(e.time.step_s, rel=1e-12)
        assert row["mfu"] == pytest.approx(e.mfu, rel=1e-12)


def test_sweep_request_passes_the_setting_through() -> None:
    body = {
        "model": "llama-3-8b",
        "accelerator": "h100-sxm-80gb",
        "num_gpus": 8,
        "finetune": "lora",
        "lora_targets": ["q_proj", "v_proj"],
    }
    r = client.post("/api/v1/training/sweep", json=body)
    assert r.status_code == 200 and any("LoRA r=16" in n for n in r.json()["notes"])
    bad = client.post("/api/v1/training/sweep", json=body | {"lora_targets": "nope"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "lora_targets"


def test_training_page_shows_the_fields_and_what_is_trained() -> None:
    query = "model=llama-3-8b&finetune=lora&lora_rank=8&lora_targets=q_proj,k_proj"
    page = client.get(f"/training?{query}")
    assert page.status_code == 200
    for name in ("finetune", "lora_rank", "lora_targets", "qlora_double_quant"):
        assert f'name="{name}"' in page.text
    assert "LoRA r=8 on self_attn.q_proj, self_attn.k_proj" in page.text
    twin = client.get(f"/training?{query}&format=json").json()
    api = client.post(
        "/api/v1/training/estimate",
        json={
            "model": "llama-3-8b",
            "finetune": "lora",
            "lora_rank": 8,
            "lora_targets": ["q_proj", "k_proj"],
        },
    ).json()
    assert twin == api


def test_cli_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--model", "llama-3-8b", "--finetune", "qlora", "--lora-rank", "32"]
    argv += ["--lora-targets", "q_proj,v_proj", "--qlora-double-quant", "false", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finetune"]["lora_rank"] == 32 and out["finetune"]["qlora_double_quant"] is False
    assert main(["train", "--model", "llama-3-8b", "--lora-rank", "8"]) == 2
    assert "lora_rank" in capsys.readouterr().err
