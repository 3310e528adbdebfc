"""Hybrid and recurrent families (Mamba-2 and attention, MLP and MoE layers): parameters and
forward FLOPs exact against transformers on the meta device, caches and states against a real
prefill, and the layout rules recurrent layers bring."""

from __future__ import annotations

from typing import Any

import pytest

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    count_params,
    forward_flops,
    get_accelerator,
    get_model,
    get_precision,
    inference_memory,
    model_from_config,
)
from estimator.memory.inference import kv_cache_bytes_per_sequence, state_bytes_per_sequence

FP32 = get_precision({"weights": "fp32", "activations": "fp32", "kv_cache": "fp32"})

# A small Nemotron-H: every block type, grouped B/C, a chunk shorter than the sequences below.
NEMOTRON_H: dict[str, Any] = {
    "model_type": "nemotron_h",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "mamba_num_heads": 8,
    "mamba_head_dim": 8,
    "n_groups": 2,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "chunk_size": 16,
    "hybrid_override_pattern": "M*-EM",
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 48,
    "intermediate_size": 96,
    "vocab_size": 512,
}
VARIANTS = {
    "base": {},
    "latent-moe": {"moe_latent_size": 32},
    "biases": {"use_bias": True, "mlp_bias": True, "attention_bias": True},
    "no-conv-bias": {"use_conv_bias": False},
    "block-list": {
        "hybrid_override_pattern": None,
        "layers_block_type": ["mamba", "attention", "moe", "mlp"],  # legacy names
    },
    "tied": {"tie_word_embeddings": True},
}


def _config(variant: str) -> dict[str, Any]:
    merged = {**NEMOTRON_H, **VARIANTS[variant]}
    return {k: v for k, v in merged.items() if v is not None}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_nemotron_h_params_equal_transformers(variant: str, gt: Any) -> None:
    config = _config(variant)
    counts = count_params(model_from_config(config))
    assert counts.total == gt.param_count(config)
    assert sum(counts.by_component().values()) == counts.total


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("seq", [16, 45, 100])
def test_nemotron_h_forward_flops_equal_flop_counter(variant: str, seq: int, gt: Any) -> None:
    config = _config(variant)
    expected = gt.forward_flops(config, 2, seq)["total"]
    assert forward_flops(model_from_config(config), seq, 2).total == expected


def test_nemotron_h_cache_and_state_equal_a_real_prefill(gt: Any) -> None:
    # transformers keeps conv_kernel inputs of the convolution; serving engines (vLLM) keep the
    # conv_kernel - 1 the next step needs: the planner counts those, one token fewer per layer.
    config = {**_config("base"), "mamba_ssm_cache_dtype": "float32"}
    model = model_from_config(config)
    batch, seq = 2, 40
    kv = kv_cache_bytes_per_sequence(model, FP32, seq)
    state = state_bytes_per_sequence(model, FP32)
    mamba_layers = [k for k in model.layer_kinds if model.kinds[k].mixer is not None]
    conv_channels = 8 * 8 + 2 * 2 * 16
    hf = gt.kv_cache_bytes(config, batch, seq)
    assert batch * (kv + state) == hf - batch * len(mamba_layers) * conv_channels * 4


def test_state_does_not_grow_with_context() -> None:
    model = get_model("nemotron-3-nano-30b-a3b")
    bf16 = get_precision("bf16")
    short = state_bytes_per_sequence(model, bf16)
    assert short > 0
    kv_short = kv_cache_bytes_per_sequence(model, bf16, 1024)
    kv_long = kv_cache_bytes_per_sequence(model, bf16, 8192)
    assert kv_long == 8 * kv_short  # only the attention layers' cache grows
    setup = InferenceSetup(input_len=8000, output_len=192, concurrency=4)
    memory = inference_memory(
        model, get_accelerator("h100-sxm-80gb"), Parallelism(tp=2), setup, bf16
    )
    assert memory.state_bytes == 4 * state_bytes_per_sequence(model, bf16, tp=2)
    assert memory.state_bytes_per_sequence == short / 2


def test_nemotron_h_scan_state_is_fp32_as_configured() -> None:
    bf16 = get_precision("bf16")
    fp32_state = model_from_config({**_config("base"), "mamba_ssm_cache_dtype": "float32"})
    model_dtype = model_from_config({**_config("base"), "mamba_ssm_cache_dtype": "bfloat16"})
    scan = 8 * 8 * 16  # heads x head_dim x state
    difference = state_bytes_per_sequence(fp32_state, bf16) - state_bytes_per_sequence(
        model_dtype, bf16
    )
    assert difference == 2 * scan * 2  # two mamba layers, 4 - 2 bytes each


def test_published_nemotron_h_56b() -> None:
    # arXiv:2504.03624 (Nemotron-H) abstract: "56B"; the checkpoint's count is 56.3B.
    assert count_params(get_model("nemotron-h-56b")).total / 1e9 == pytest.approx(56, rel=0.01)


def test_recurrent_layers_refuse_context_parallelism() -> None:
    model = get_model("nemotron-3-nano-30b-a3b")
    with pytest.raises(SpecError, match="context parallelism"):
        from estimator.layout.parallel import validate_layout

        validate_layout(model, Parallelism(tp=1, cp=2, dp=1), training=True)


def test_tp_must_divide_mamba_groups() -> None:
    from estimator.layout.parallel import validate_layout

    model = model_from_config(_config("base"))  # 8 heads in 2 groups
    validate_layout(model, Parallelism(tp=2), training=True)
    with pytest.raises(SpecError, match="mamba2 groups"):
        validate_layout(model, Parallelism(tp=4), training=False)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"hybrid_override_pattern": "M*X"}, "config.hybrid_override_pattern"),
        ({"hybrid_override_pattern": None, "layers_block_type": ["rnn"]}, "layers_block_type"),
        ({"mamba_num_heads": 7}, "config.mamba_num_heads"),
        ({"num_experts_per_tok": 9}, "config.num_experts_per_tok"),
    ],
)
def test_nemotron_h_bad_configs_are_refused(bad: dict[str, Any], field: str) -> None:
    config = {k: v for k, v in {**NEMOTRON_H, **bad}.items() if v is not None}
    with pytest.raises(SpecError) as refused:
        model_from_config(config)
    assert field in refused.value.field
