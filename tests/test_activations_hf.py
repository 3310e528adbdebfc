"""Training activations against what real Hugging Face models save for backward.

The ground truth is measured with ``torch.autograd.graph.saved_tensors_hooks`` on small real CPU
models in train mode (deduplicated by storage, parameters excluded), forward with labels so the
loss is included. The estimator's ``hf`` convention must match within 1%.
"""

from __future__ import annotations

from typing import Any

import pytest

from estimator import (
    Parallelism,
    SpecError,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    model_entry,
    model_from_config,
    training_memory,
)
from estimator.memory.activation_bytes import loss_backward_bytes
from estimator.memory.training import most_loaded_terms

LLAMA_TINY = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 688,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
}


def _estimate(
    config: dict[str, Any], batch: int, seq: int, dtype: str, attn: str, checkpointing: bool
) -> float:
    model = model_from_config(config)
    recompute = "full" if checkpointing else "none"
    setup = TrainingSetup(
        seq_len=seq,
        micro_batch_size=batch,
        recompute=recompute,
        flash_attention=attn == "sdpa",
        activation_convention="hf",
    )
    precision = get_precision(dtype)
    r = training_memory(model, get_accelerator("h100-sxm-80gb"), Parallelism(), setup, precision)
    # the loss's backward buffers are transient, not saved by the forward; so is the recompute
    # working set (the part of it the freed loss blocks do not already cover)
    working = most_loaded_terms(model, Parallelism(), setup, precision)["working_layer_bytes"]
    saved = (
        r.activations_bytes
        + r.logits_bytes
        - loss_backward_bytes(batch * seq, model.vocab_size, "hf", precision)
        - float(working)
    )
    return saved


CASES = [
    (LLAMA_TINY, 2, 64),
    (
        {
            **LLAMA_TINY,
            "num_hidden_layers": 4,
            "hidden_size": 384,
            "num_attention_heads": 6,
            "num_key_value_heads": 6,
            "intermediate_size": 1024,
            "vocab_size": 3000,
        },
        1,
        256,
    ),
]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize(("config", "batch", "seq"), CASES, ids=["gqa-tiny", "mha-small"])
def test_llama_activations_within_one_percent(
    config: dict[str, Any],
    batch: int,
    seq: int,
    dtype: str,
    attn: str,
    checkpointing: bool,
    gt: Any,
) -> None:
    import torch

    torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    measured = gt.saved_activation_bytes(
        config, batch, seq, dtype=torch_dtype, attn_implementation=attn, checkpointing=checkpointing
    )["total"]
    assert _estimate(config, batch, seq, dtype, attn, checkpointing) == pytest.approx(
        measured, rel=0.01
    )


@pytest.mark.parametrize("model_id", ["qwen2.5-7b", "qwen3-8b", "mistral-7b-v0.1"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_other_llama_style_families(model_id: str, attn: str, gt: Any) -> None:
    import torch

    config = gt.tiny_config(model_entry(model_id)["config"])
    config["sliding_window"] = None
    measured = gt.saved_activation_bytes(
        config, 2, 64, dtype=torch.bfloat16, attn_implementation=attn
    )["total"]
    assert _estimate(config, 2, 64, "bf16", attn, False) == pytest.approx(measured, rel=0.01)


def test_hf_convention_refuses_unmodelled_families() -> None:
    with pytest.raises(SpecError) as err:
        training_memory(
            get_model("gpt2"),
            get_accelerator("h100-sxm-80gb"),
            Parallelism(),
            TrainingSetup(512, activation_convention="hf"),
            get_precision("bf16"),
        )
    assert err.value.field == "activation_convention"
