"""Memory of PyTorch-native training stacks: the loss's backward buffers, chunked and compiled
losses, FSDP2 under a pipeline, gradients offloaded with the optimizer, and the API fields."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import (
    GIB,
    Parallelism,
    SpecError,
    TrainingMemory,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    training_memory,
)
from estimator.memory.activation_bytes import head_activation_bytes, loss_backward_bytes
from estimator.memory.training import most_loaded_terms
from estimator.offload import Offload

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
LLAMA = get_model("llama-3.1-8b")


NO_PARALLELISM = Parallelism()


def _memory(p: Parallelism = NO_PARALLELISM, **setup: Any) -> TrainingMemory:
    return training_memory(LLAMA, H100, p, TrainingSetup(**{"seq_len": 4096, **setup}), BF16)


def test_eager_loss_backward_holds_two_more_fp32_logit_buffers() -> None:
    tokens, vocab = 4096, LLAMA.vocab_size
    eager = _memory(activation_convention="hf")
    chunked = _memory(activation_convention="hf", chunked_loss=True)
    assert eager.logits_bytes - chunked.logits_bytes == 2 * 4 * tokens * vocab
    assert loss_backward_bytes(tokens, vocab, "hf", BF16) == 2 * 4 * tokens * vocab
    # compiled: one fused kernel writes the bf16 gradient; Megatron's fused loss adds nothing
    assert loss_backward_bytes(tokens, vocab, "compiled", BF16) == 2 * tokens * vocab
    assert loss_backward_bytes(tokens, vocab, "megatron", BF16) == 0
    assert _memory().logits_bytes == _memory(chunked_loss=False).logits_bytes


def test_compiled_loss_follows_the_layers_unless_stated() -> None:
    compiled = _memory(activation_convention="compiled")
    eager_loss = _memory(activation_convention="compiled", compiled_loss=False)
    hf_compiled_loss = _memory(activation_convention="hf", compiled_loss=True)
    tokens, vocab = 4096, LLAMA.vocab_size
    head = {
        c: head_activation_bytes(LLAMA, BF16, tokens, 1, False, vocab, c)
        for c in ("hf", "compiled")
    }
    assert eager_loss.logits_bytes - compiled.logits_bytes == pytest.approx(
        head["hf"] - head["compiled"] + (8 - 2) * tokens * vocab
    )
    assert hf_compiled_loss.logits_bytes == compiled.logits_bytes
    # the compiled layers keep less than the eager ones
    assert compiled.activations_bytes < 0.75 * _memory(activation_convention="hf").activations_bytes


def test_loss_options_need_a_pytorch_convention() -> None:
    for field, value in (("chunked_loss", True), ("compiled_loss", True)):
        with pytest.raises(SpecError, match=field):
            _memory(**{field: value})


def test_op_recompute_keeps_inputs_and_every_other_projection() -> None:
    full = _memory(recompute="full", activation_convention="hf")
    op = _memory(recompute="op", activation_convention="hf")
    none = _memory(recompute="none", activation_convention="hf")
    assert full.activations_bytes < op.activations_bytes < none.activations_bytes
    # per layer, besides the input full recompute keeps too: q h, v kv, gate i, down h and the
    # attention output h (bf16), the log-sum-exp (fp32)
    h, kv, i = 4096, 1024, 14336
    per_token = 2 * (h + kv + i + h + h) + 4 * 32
    assert op.activations_bytes - full.activations_bytes == pytest.approx(
        LLAMA.num_layers * 4096 * per_token, rel=1e-9
    )


def test_fsdp_under_a_pipeline_keeps_the_stage_gathered() -> None:
    """ZeRO-3 / FSDP2 with pp > 1 (TorchTitan): the stage's weights stay gathered and its
    gradients unsharded until the last micro-batch's backward."""
    setup = {"micro_batch_size": 1, "global_batch_size": 64, "recompute": "full"}
    piped = _memory(Parallelism(pp=4, dp=8, zero_stage=3), **setup)
    flat = _memory(Parallelism(pp=4, dp=8, zero_stage=1), **setup)
    stage_params = piped.params_on_gpu
    assert piped.zero3_gather_bytes == pytest.approx(stage_params * 2, rel=0.02)
    assert piped.gradients_bytes == pytest.approx(stage_params * 4, rel=0.02)
    assert flat.zero3_gather_bytes == 0
    no_pipe = _memory(Parallelism(dp=32, zero_stage=3), **setup)
    # without a pipeline FSDP gathers two blocks at a time
    assert no_pipe.zero3_gather_bytes < 0.25 * piped.zero3_gather_bytes


def test_optimizer_offload_moves_the_gradient_shard_with_zero_2_and_3() -> None:
    off = Offload(optimizer=True)
    zero3 = _memory(Parallelism(dp=8, zero_stage=3), offload=off)
    zero1 = _memory(Parallelism(dp=8, zero_stage=1), offload=off)
    assert zero3.gradients_bytes == 0 and zero3.host_optimizer_bytes > 0
    assert zero1.gradients_bytes > 0  # Megatron-style: the gradient buffer stays on the GPU
    on_gpu = _memory(Parallelism(dp=8, zero_stage=3))
    assert zero3.host_optimizer_bytes == pytest.approx(
        on_gpu.gradients_bytes + on_gpu.master_weights_bytes + on_gpu.optimizer_states_bytes
    )


def test_api_takes_the_new_fields_and_refuses_op_on_moe() -> None:
    client = TestClient(app)
    body = {
        "model": "llama-3.1-8b",
        "accelerator": "h100-sxm-80gb",
        "num_gpus": 8,
        "layout": {"dp": 8, "zero_stage": 3},
        "seq_len": 8192,
        "micro_batch_size": 2,
        "recompute": "op",
        "activation_convention": "compiled",
        "chunked_loss": False,
    }
    r = client.post("/api/v1/training/estimate", json=body)
    assert r.status_code == 200, r.text
    total = r.json()["memory_per_gpu"]["total_bytes"]
    assert 40 * GIB < total < 80 * GIB
    moe = {**body, "model": "qwen3-30b-a3b", "activation_convention": "megatron"}
    r = client.post("/api/v1/training/estimate", json=moe)
    assert r.status_code == 422 and "per-op policy" in r.text


def test_gradients_freed_between_steps_come_back_as_activations_go() -> None:
    """PyTorch's zero_grad(set_to_none=True): with one micro-batch a step and no pipeline the
    peak holds the larger of the first backward's activations (and logits) and the gradients;
    the timeline shows none during the forward and all of them at the optimizer step."""
    from estimator.memory.timeline import training_timeline

    pure = get_precision({"gradients": "bf16", "master_weights": None, "optimizer_states": "bf16"})
    small = get_model("llama-3.2-3b")
    a100 = get_accelerator("a100-sxm-80gb")
    for recompute in ("full", "none"):
        given = {
            "seq_len": 4096,
            "micro_batch_size": 2,
            "recompute": recompute,
            "activation_convention": "compiled",
            "chunked_loss": True,
        }
        kept = training_memory(small, a100, NO_PARALLELISM, TrainingSetup(**given), pure)
        freed_setup = TrainingSetup(**given, gradients_per_step=True)
        freed = training_memory(small, a100, NO_PARALLELISM, freed_setup, pure)
        held = kept.activations_bytes + kept.logits_bytes
        g = kept.gradients_bytes
        assert freed.gradients_bytes == pytest.approx(max(g - held, 0.0))
        allocated_drop = g - freed.gradients_bytes
        # the loss blocks freed before the recomputed layer stay reserved; the gradients are
        # served from them first, and what they do not take stays as fragmentation
        reused = float(
            most_loaded_terms(small, NO_PARALLELISM, freed_setup, pure)["loss_cache_bytes"]
        )
        still_cached = max(min(reused, held + reused - g), 0.0)
        assert (recompute == "full") == (reused > 0)
        assert kept.total_bytes - freed.total_bytes == pytest.approx(
            allocated_drop * 1.05 + reused - still_cached
        )
        timeline = training_timeline(small, a100, NO_PARALLELISM, freed_setup, pure)
        assert timeline.peak.total_bytes == pytest.approx(freed.total_bytes)
        by_phase = {p.phase: p.parts["gradients_bytes"] for p in timeline.points}
        assert by_phase["warm-up"] == 0 and by_phase["optimizer"] == pytest.approx(g)
    # gradient accumulation or a pipeline keep them: they outlive the next micro-batch's forward
    accumulated = TrainingSetup(
        4096, micro_batch_size=1, global_batch_size=4, gradients_per_step=True
    )
    assert _memory(micro_batch_size=1, global_batch_size=4).gradients_bytes == pytest.approx(
        training_memory(LLAMA, H100, NO_PARALLELISM, accumulated, BF16).gradients_bytes
    )


def test_the_fsdp2_stack_frees_gradients_between_steps() -> None:
    client = TestClient(app)
    body = {
        "model": "llama-3.1-8b",
        "num_gpus": 8,
        "layout": {"dp": 8, "zero_stage": 3},
        "seq_len": 8192,
        "micro_batch_size": 2,
        "global_batch_size": 16,
        "activation_convention": "hf",
    }
    grads = {}
    for stack in ("megatron-core", "fsdp2"):
        r = client.post("/api/v1/training/estimate", json={**body, "stack": stack})
        assert r.status_code == 200, r.text
        grads[stack] = r.json()["memory_per_gpu"]["gradients_bytes"]
    assert grads["megatron-core"] > 0 and grads["fsdp2"] == 0  # the activations dwarf them
    r = client.post(
        "/api/v1/training/estimate",
        json={**body, "stack": "fsdp2", "gradients_per_step": False},
    )
    assert r.json()["memory_per_gpu"]["gradients_bytes"] == grads["megatron-core"]
