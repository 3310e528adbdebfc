"""Hybrid and recurrent families (Nemotron-H, Mamba-2, Bamba, GraniteMoeHybrid, FalconH1, Jamba,
Qwen3-Next, LFM2: Mamba-1/2, gated DeltaNet and short-convolution mixers beside attention, MLP
and MoE layers): parameters and forward FLOPs exact against transformers on the meta device,
caches and states against a real prefill, and the layout rules recurrent layers bring."""

from __future__ import annotations

from typing import Any

import pytest

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    TrainingSetup,
    count_params,
    forward_flops,
    get_accelerator,
    get_model,
    get_precision,
    inference_memory,
    model_from_config,
)
from estimator.counts.flops import mixer_flops
from estimator.memory.inference import kv_cache_bytes_per_sequence, state_bytes_per_sequence
from estimator.serving.estimate import estimate_inference
from estimator.timing.training import estimate_training

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
VARIANTS: dict[str, dict[str, Any]] = {
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


def test_nemotron_h_8b_47b_and_lightning() -> None:
    # arXiv:2504.03624: "8B" and "47B"; the counts as read (both checked against transformers
    # in tests/test_params.py with every catalog model).
    assert count_params(get_model("nemotron-h-8b")).total == 8_100_852_736
    assert count_params(get_model("nemotron-h-47b")).total == 46_791_554_816
    kinds = get_model("nemotron-h-47b").layer_kinds
    assert len(kinds) == 98
    # Nemotron 3.5 Lightning is Nemotron 3 Nano's architecture, its layers written as
    # layers_block_type instead of hybrid_override_pattern: the same model, counted the same.
    lightning, nano = (
        get_model("nemotron-3.5-lightning-30b-a3b"),
        get_model("nemotron-3-nano-30b-a3b"),
    )
    assert count_params(lightning).total == count_params(nano).total == 31_577_937_344
    assert lightning.layer_kinds == nano.layer_kinds


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


# --- Mamba-2, Bamba, GraniteMoeHybrid, FalconH1, Jamba, Qwen3-Next, LFM2 --------------------------
# Small configs of each family and the variants their readers branch on: grouped B/C, chunks
# shorter than the sequences below, attention where a cached forward needs one (transformers
# 5.23 cannot run a cached forward of a hybrid config without an attention layer).
SMALL_MAMBA = {  # Bamba's, Granite's and Falcon-H1's mamba_* fields, and their attention
    "hidden_size": 64,
    "mamba_n_heads": 8,
    "mamba_d_state": 16,
    "mamba_n_groups": 2,
    "mamba_chunk_size": 16,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
}
HYBRIDS: dict[str, dict[str, Any]] = {
    "mamba2": {
        "model_type": "mamba2",
        "hidden_size": 64,
        "num_heads": 8,
        "head_dim": 16,
        "expand": 2,
        "state_size": 16,
        "n_groups": 2,
        "chunk_size": 16,
        "conv_kernel": 4,
        "num_hidden_layers": 2,
        "vocab_size": 512,
    },
    "bamba": {
        **SMALL_MAMBA,
        "model_type": "bamba",
        "num_hidden_layers": 3,
        "attn_layer_indices": [1],
        "intermediate_size": 96,
    },
    "granitemoehybrid": {
        **SMALL_MAMBA,
        "model_type": "granitemoehybrid",
        "num_hidden_layers": 3,
        "layer_types": ["mamba", "attention", "mamba"],  # the names granite-4.0 configs use
        "intermediate_size": 32,
        "shared_intermediate_size": 48,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "position_embedding_type": "rope",
        "vocab_size": 512,
    },
    "falcon_h1": {
        **SMALL_MAMBA,
        "model_type": "falcon_h1",
        "mamba_d_ssm": 96,  # not expand x hidden
        "mamba_n_heads": 6,
        "num_hidden_layers": 2,
        "intermediate_size": 96,
        "mamba_rms_norm": True,
    },
    "jamba": {
        "model_type": "jamba",
        "hidden_size": 64,
        "mamba_d_state": 8,
        "mamba_dt_rank": 8,
        "num_hidden_layers": 4,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 96,
        "vocab_size": 512,
    },
    "qwen3_next": {
        "model_type": "qwen3_next",
        "hidden_size": 64,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
        "num_hidden_layers": 4,
        "full_attention_interval": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 40,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 512,
    },
    "lfm2": {
        "model_type": "lfm2",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "full_attn_idxs": [1],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 96,
        "conv_L_cache": 3,
        "vocab_size": 512,
    },
}
HYBRID_VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "mamba2": {
        "base": {},
        "one-group": {"num_heads": 4, "head_dim": 32, "state_size": 8, "n_groups": 1},
        "biases-k3": {"use_bias": True, "use_conv_bias": False, "conv_kernel": 3},
        "tied": {"tie_word_embeddings": True},
    },
    "bamba": {
        "base": {},
        "all-mamba": {"attn_layer_indices": None, "mamba_n_heads": 4},  # the class default
        "biases": {
            "attn_layer_indices": [0, 2],
            "mamba_proj_bias": True,
            "mamba_conv_bias": False,
            "mamba_d_conv": 2,
            "attention_bias": True,
            "mlp_bias": True,
        },
        "explicit-head-dims": {"mamba_d_head": 16, "head_dim": 24, "num_key_value_heads": None},
    },
    "granitemoehybrid": {
        "base": {},
        "dense": {
            "num_local_experts": 0,
            "layer_types": ["linear_attention", "full_attention"] * 2,
            "num_hidden_layers": 4,
        },
        "one-group-biases": {
            "mamba_n_groups": 1,
            "mamba_d_state": 32,
            "mamba_d_conv": 3,
            "mamba_chunk_size": 8,
            "mamba_proj_bias": True,
            "attention_bias": True,
        },
        "alias-all-mha": {
            "layer_types": None,
            "layers_block_type": ["mamba", "attention", "mamba"],  # layer_types' alias
            "num_key_value_heads": None,  # every query head
        },
    },
    "falcon_h1": {
        "base": {},
        "expand-no-norm": {"mamba_rms_norm": False, "mamba_d_ssm": None, "mamba_n_heads": 8},
        "biases": {
            "head_dim": 24,
            "projectors_bias": True,
            "mamba_proj_bias": True,
            "attention_bias": True,
            "mlp_bias": True,
            "mamba_conv_bias": False,
        },
        "one-group": {"mamba_n_groups": 1, "mamba_d_state": 32, "mamba_d_conv": 3},
    },
    "jamba": {
        "base": {},
        "dense-auto-rank": {"mamba_dt_rank": "auto", "mamba_d_state": 16, "num_experts": 1},
        "default-pattern": {
            "num_hidden_layers": 8,
            "attn_layer_period": 8,
            "attn_layer_offset": 4,
            "mamba_proj_bias": True,
            "mamba_d_conv": 3,
        },
        "expand-1": {"mamba_expand": 1, "mamba_conv_bias": False},
    },
    "qwen3_next": {
        "base": {},
        "dense-gqa-free": {"linear_num_value_heads": 2, "mlp_only_layers": [0, 1, 2, 3]},
        "sparse-step-k3": {"decoder_sparse_step": 2, "linear_conv_kernel_dim": 3},
        "layer-types": {
            "layer_types": [
                "full_attention",
                "linear_attention",
                "linear_attention",
                "full_attention",
            ],
            "attention_bias": True,
        },
    },
    "lfm2": {
        "base": {},
        "biases-k4-fixed-ff": {
            "conv_bias": True,
            "conv_L_cache": 4,
            "block_auto_adjust_ff_dim": False,
        },
        "layer-types": {
            "layer_types": ["conv", "full_attention", "conv", "conv"],
            "num_hidden_layers": 4,
            "block_ff_dim": 160,  # the older name, which wins over intermediate_size
            "block_ffn_dim_multiplier": 1.5,
            "block_multiple_of": 32,
        },
        "untied": {"tie_embedding": False, "tie_word_embeddings": True},  # the older name wins
    },
}
HYBRID_CASES = [(family, v) for family, vs in HYBRID_VARIANTS.items() for v in vs]


def _hybrid(family: str, variant: str = "base") -> dict[str, Any]:
    merged = {**HYBRIDS[family], **HYBRID_VARIANTS[family][variant]}
    return {k: v for k, v in merged.items() if v is not None or k in NULL_MEANS_SOMETHING}


# keys whose null a config class reads differently from their absence
NULL_MEANS_SOMETHING = {
    "num_key_value_heads",
    "mamba_d_ssm",
}


@pytest.mark.parametrize(("family", "variant"), HYBRID_CASES)
def test_hybrid_params_equal_transformers(family: str, variant: str, gt: Any) -> None:
    config = _hybrid(family, variant)
    counts = count_params(model_from_config(config))
    assert counts.total == gt.param_count(config)
    assert sum(counts.by_component().values()) == counts.total


@pytest.mark.parametrize("family", sorted(HYBRIDS))
@pytest.mark.parametrize("tie", [True, False])
def test_hybrid_heads_tie_as_configured(family: str, tie: bool, gt: Any) -> None:
    config = {**_hybrid(family), "tie_word_embeddings": tie}
    model = model_from_config(config)
    assert model.tie_embeddings is tie
    assert count_params(model).total == gt.param_count(config)


@pytest.mark.parametrize(("family", "variant"), HYBRID_CASES)
@pytest.mark.parametrize("seq", [1, 45, 130])
def test_hybrid_forward_flops_equal_flop_counter(
    family: str, variant: str, seq: int, gt: Any
) -> None:
    # 45 and 130 cross the 16-token Mamba-2 chunks and gated DeltaNet's 64-token ones
    config = _hybrid(family, variant)
    expected = gt.forward_flops(config, 2, seq)["total"]
    assert forward_flops(model_from_config(config), seq, 2).total == expected


@pytest.mark.parametrize("family", sorted(HYBRIDS))
def test_hybrid_cache_and_state_equal_a_real_prefill(family: str, gt: Any) -> None:
    # transformers keeps conv_kernel inputs of each convolution, the planner the conv_kernel - 1
    # a serving engine keeps (vLLM); transformers' recurrent states are fp32, as FP32 asks here.
    config = _hybrid(family)
    model = model_from_config(config)
    batch, seq = 2, 40
    kv = kv_cache_bytes_per_sequence(model, FP32, seq)
    state = state_bytes_per_sequence(model, FP32)
    recurrent = [model.kinds[k].mixer for k in model.layer_kinds]
    one_input = sum(r.conv_channels for r in recurrent if r is not None) * 4
    assert state > 0
    assert batch * (kv + state) == gt.kv_cache_bytes(config, batch, seq) - batch * one_input


def test_falcon_h1_layers_keep_a_kv_cache_and_a_state() -> None:
    model = model_from_config(_hybrid("falcon_h1"))
    (kind,) = model.kinds
    assert kind.attention is not None and kind.mixer is not None
    bf16 = get_precision("bf16")
    state = state_bytes_per_sequence(model, bf16)
    mamba = 96 * 16 + 3 * (96 + 2 * 2 * 16)  # heads x head_dim x state, conv_kernel - 1 inputs
    assert state == 2 * mamba * 2
    kv = 2 * 2 * 16  # K and V of 2 heads of 16, per token and layer
    assert kv_cache_bytes_per_sequence(model, bf16, 100) == 2 * 100 * kv * 2


def test_recurrent_states_do_not_grow_with_context() -> None:
    bf16 = get_precision("bf16")
    model = get_model("qwen3-next-80b-a3b")
    deltanet = 32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)  # Hv dk dv; conv_kernel - 1 inputs
    assert state_bytes_per_sequence(model, bf16) == 36 * deltanet * 2
    short = kv_cache_bytes_per_sequence(model, bf16, 1000)
    assert kv_cache_bytes_per_sequence(model, bf16, 4000) == 4 * short  # the 12 attention layers
    lfm2 = get_model("lfm2-1.2b")  # its convolutions keep conv_L_cache - 1 inputs, no scan state
    assert state_bytes_per_sequence(lfm2, bf16) == 10 * 2048 * 2 * 2


def test_kernel_and_reference_mixer_flops() -> None:
    seq = 1000
    jamba = model_from_config({"model_type": "jamba"})
    lfm2 = get_model("lfm2-2.6b")
    for model in (jamba, lfm2):  # the same algorithm: Mamba-1's scan, a short convolution
        core = next(k.mixer for k in model.kinds if k.mixer is not None)
        assert mixer_flops(core, seq, kernel=True) == mixer_flops(core, seq) > 0
    deltanet = next(k.mixer for k in get_model("qwen3-next-80b-a3b").kinds if k.mixer)
    chunks = -(-seq // 64)  # flash-linear-attention multiplies its WY w and u in
    wy = chunks * 32 * 2 * 64 * 64 * (128 + 128)
    assert mixer_flops(deltanet, seq, kernel=True) - mixer_flops(deltanet, seq) == wy


REPRESENTATIVES: dict[
    str, str | dict[str, Any]
] = {  # a catalog model where one is vendored, else the config class's defaults
    "mamba2": {"model_type": "mamba2"},
    "bamba": {"model_type": "bamba"},
    "granitemoehybrid": {"model_type": "granitemoehybrid"},
    "falcon_h1": {"model_type": "falcon_h1"},
    "jamba": {"model_type": "jamba"},
    "qwen3_next": "qwen3-next-80b-a3b",
    "lfm2": "lfm2-2.6b",
}


@pytest.mark.parametrize("family", ["mamba2", "bamba", "granitemoehybrid", "falcon_h1", "jamba"])
def test_class_defaults_equal_transformers(family: str, gt: Any) -> None:
    # no verbatim config.json of these families is vendored anywhere we could read: their
    # config classes' defaults (which describe the reference checkpoints' shapes) stand in
    config = {"model_type": family}
    model = model_from_config(config)
    assert count_params(model).total == gt.param_count(config)
    assert forward_flops(model, 96, 1).total == gt.forward_flops(config, 1, 96)["total"]


@pytest.mark.parametrize("family", sorted(REPRESENTATIVES))
def test_hybrid_serving_and_training_estimates_run(family: str) -> None:
    given = REPRESENTATIVES[family]
    model = get_model(given) if isinstance(given, str) else model_from_config(given, family)
    h100, bf16 = get_accelerator("h100-sxm-80gb"), get_precision("bf16")
    setup = InferenceSetup(input_len=2048, output_len=256, concurrency=4)
    memory = inference_memory(model, h100, Parallelism(), setup, bf16)
    assert memory.state_bytes == 4 * state_bytes_per_sequence(model, bf16) > 0
    serving = estimate_inference(model, h100, Parallelism(), setup, bf16)
    assert serving.ttft_s > 0 and serving.tpot_s > 0 and serving.output_tokens_per_s > 0
    training = estimate_training(
        model, h100, Parallelism(dp=8), TrainingSetup(seq_len=4096, global_batch_size=64), bf16
    )
    assert 0 < training.mfu < 1 and training.tokens_per_s > 0


def test_published_lfm2_counts() -> None:
    # LFM2 model cards, "Parameters" row (read at https://huface.ru/LiquidAI/LFM2-2.6B, a mirror
    # of huggingface.co/LiquidAI/LFM2-2.6B): LFM2-1.2B 1,170,340,608; LFM2-2.6B 2,569,272,320.
    assert count_params(get_model("lfm2-1.2b")).total == 1_170_340_608
    assert count_params(get_model("lfm2-2.6b")).total == 2_569_272_320


def test_published_qwen3_next_80b() -> None:
    # transformers docs, model_doc/qwen3_next.md: "80B total parameters, only 3B active".
    counts = count_params(get_model("qwen3-next-80b-a3b"))
    assert counts.total / 1e9 == pytest.approx(80, rel=0.01)
    embeddings = 2 * 151936 * 2048  # untied input embedding and head
    assert (counts.active - embeddings) / 1e9 == pytest.approx(3, rel=0.1)
    routed = 48 * 512 * 3 * 2048 * 512  # every layer routes: gate, up and down of 512 experts
    assert counts.total - counts.active == routed * (512 - 10) // 512


def test_jamba_tp_splits_channels_not_its_one_b_c_group() -> None:
    from estimator.layout.parallel import validate_layout

    model = model_from_config({"model_type": "jamba"})
    validate_layout(model, Parallelism(tp=8), training=False)
    deltanet = model_from_config(_hybrid("qwen3_next"))  # two key heads
    validate_layout(deltanet, Parallelism(tp=2), training=False)
    with pytest.raises(SpecError, match="gated_deltanet groups"):
        validate_layout(deltanet, Parallelism(tp=4), training=False)


@pytest.mark.parametrize(
    ("family", "bad", "field"),
    [
        ("mamba2", {"num_heads": 4}, "config.num_heads"),
        ("bamba", {"mamba_d_head": 4}, "config.mamba_d_head"),
        ("bamba", {"mamba_n_heads": 7}, "config.mamba_n_heads"),
        (
            "granitemoehybrid",
            {"layer_types": ["mamba", "sliding_attention", "mamba"]},
            "layer_types",
        ),
        ("granitemoehybrid", {"layer_types": ["mamba", "attention"]}, "config.layer_types"),
        ("granitemoehybrid", {"num_experts_per_tok": 5}, "config.num_experts_per_tok"),
        ("falcon_h1", {"mamba_n_heads": 5}, "config.mamba_n_heads"),
        ("jamba", {"attn_layer_offset": 2}, "config.attn_layer_offset"),
        ("qwen3_next", {"linear_num_value_heads": 3}, "config.linear_num_value_heads"),
        ("lfm2", {"layer_types": ["conv", "mamba", "conv"]}, "config.layer_types"),
        ("lfm2", {"block_ffn_dim_multiplier": None}, "config.block_ffn_dim_multiplier"),
    ],
)
def test_hybrid_bad_configs_are_refused(family: str, bad: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as refused:
        model_from_config({**HYBRIDS[family], **bad})
    assert field in refused.value.field
