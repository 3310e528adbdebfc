"""The optimizer step fused into the backward (torchtune's ``optimizer_in_bwd``): each
parameter is stepped from its post-accumulate-grad hook and its gradient freed, so the
gradients never add up. Checked against the real modules' parameter shapes and against the
hooks' behaviour on a real (tiny) model."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from app.main import app
from estimator import (
    Parallelism,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    model_entry,
    training_memory,
)
from estimator.errors import SpecError
from estimator.finetune import FineTune
from estimator.memory.timeline import training_timeline
from estimator.offload import Offload
from validation import groundtruth as gt

A100 = get_accelerator("a100-sxm-80gb")
# torchtune's bf16: weights, gradients and AdamW states in bf16, no master copy
PURE_BF16 = get_precision({"gradients": "bf16", "master_weights": None, "optimizer_states": "bf16"})


def _setup(**kw: Any) -> TrainingSetup:
    given = {"seq_len": 4096, "micro_batch_size": 2, "recompute": "full"}
    return TrainingSetup(**(given | {"activation_convention": "compiled"} | kw))


def _largest_layer_linear(config: dict[str, Any]) -> tuple[int, int]:
    """(the largest nn.Linear in a decoder layer, the embedding) of the real module, built on
    the meta device."""
    model = gt.meta_model(config)
    layer = model.model.layers[0]
    largest = max(m.weight.numel() for m in layer.modules() if isinstance(m, torch.nn.Linear))
    return largest, model.get_input_embeddings().weight.numel()


@pytest.mark.parametrize("model_id", ["llama-3.2-3b", "llama-3.1-8b"])
def test_gradients_are_one_linear_and_a_tied_embedding(model_id: str) -> None:
    """Tied (Llama-3.2-3B): the head's gradient waits in autograd for the embedding's, so the
    embedding's gradient is held all backward, besides the linear being stepped. Untied
    (Llama-3.1-8B): one parameter at a time, the head or the embedding the largest."""
    config = model_entry(model_id)["config"]
    largest, embedding = _largest_layer_linear(config)
    model = get_model(model_id)
    r = training_memory(model, A100, Parallelism(), _setup(optimizer_in_backward=True), PURE_BF16)
    if model.tie_embeddings:
        assert r.gradients_bytes == (embedding + largest) * 2
    else:
        assert r.gradients_bytes == max(embedding, largest) * 2
    full = training_memory(model, A100, Parallelism(), _setup(), PURE_BF16)
    assert full.gradients_bytes == r.params_on_gpu * 2 > 5 * r.gradients_bytes
    assert r.optimizer_states_bytes == full.optimizer_states_bytes  # the states stay
    assert any("optimizer_in_bwd" in n for n in r.notes)


def test_hooks_free_each_gradient_as_it_is_stepped() -> None:
    """What the estimate assumes, on a real tiny Llama with torchtune's mechanism: an optimizer
    per parameter, stepped from ``register_post_accumulate_grad_hook``, then the gradient set
    to None. No hook ever sees more than one parameter's gradient alive, and every parameter
    is stepped once."""
    config = gt.tiny_config(model_entry("llama-3.2-3b")["config"])
    model = gt.real_model(config)
    optimizers = {p: torch.optim.AdamW([p], lr=1e-3) for p in model.parameters()}
    alive: list[int] = []

    def step(p: torch.Tensor) -> None:
        alive.append(sum(q.grad is not None for q in model.parameters()))
        optimizers[p].step()
        optimizers[p].zero_grad(set_to_none=True)

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step)
    ids = torch.randint(0, int(config["vocab_size"]), (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    assert max(alive) == 1
    assert len(alive) == sum(1 for _ in model.parameters())
    assert all(p.grad is None for p in model.parameters())


def test_timeline_holds_gradients_only_in_the_backward() -> None:
    model, p = get_model("llama-3.2-3b"), Parallelism()
    setup = _setup(optimizer_in_backward=True, gradients_per_step=True)
    timeline = training_timeline(model, A100, p, setup, PURE_BF16)
    memory = training_memory(model, A100, p, setup, PURE_BF16)
    assert timeline.peak.total_bytes == pytest.approx(memory.total_bytes, rel=1e-12)
    grads = {pt.phase: pt.parts["gradients_bytes"] for pt in timeline.points}
    assert grads["warm-up"] == grads["optimizer"] == grads["resident"] == 0
    assert grads["first backward"] == memory.gradients_bytes > 0


@pytest.mark.parametrize(
    ("layout", "setup", "rule"),
    [
        ({"pp": 2, "dp": 1}, {}, "pp = 1"),
        ({"dp": 2}, {"global_batch_size": 8}, "one micro-batch a step"),
        ({}, {"finetune": FineTune("lora")}, "full training"),
        ({"dp": 2, "zero_stage": 2}, {"offload": Offload(optimizer=True)}, "optimizer offload"),
    ],
)
def test_refused_where_the_hooks_cannot_step(
    layout: dict[str, Any], setup: dict[str, Any], rule: str
) -> None:
    with pytest.raises(SpecError, match=rule) as err:
        training_memory(
            get_model("llama-3.2-3b"),
            A100,
            Parallelism(**layout),
            _setup(optimizer_in_backward=True, **setup),
            PURE_BF16,
        )
    assert err.value.field == "optimizer_in_backward"


def test_api_and_refusal() -> None:
    client = TestClient(app)
    body = {
        "model": "llama-3.2-3b",
        "accelerator": "a100-sxm-80gb",
        "seq_len": 4096,
        "micro_batch_size": 2,
        "recompute": "full",
        "activation_convention": "compiled",
    }
    plain = client.post("/api/v1/training/estimate", json=body)
    fused = client.post("/api/v1/training/estimate", json=body | {"optimizer_in_backward": True})
    assert plain.status_code == fused.status_code == 200
    grads = [r.json()["memory_per_gpu"]["gradients_bytes"] for r in (plain, fused)]
    assert grads[1] < grads[0] / 5
    piped = body | {"optimizer_in_backward": True, "num_gpus": 2, "layout": {"pp": 2}}
    r = client.post("/api/v1/training/estimate", json=piped)
    assert r.status_code == 422 and "optimizer_in_backward" in r.text and "pp = 1" in r.text
