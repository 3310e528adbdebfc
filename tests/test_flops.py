"""Forward FLOPs: exact against torch's FlopCounterMode on transformers models (meta device)."""

from __future__ import annotations

from typing import Any

import pytest

from estimator import (
    forward_flops,
    get_model,
    model_entry,
    model_from_config,
    model_ids,
    training_flops,
)
from tests.conftest import load_data

# transformers' Llama4TextMoe sends every token through every routed expert (the unchosen scaled
# by a zero router score): torch counts num_experts / top_k times the routed work the planner
# counts (spec/families/llama4.py; tests/test_families_moe_a.py checks each part).
EVERY_EXPERT_REFERENCE = ("llama4", "llama4_text")


@pytest.mark.parametrize("model_id", model_ids())
def test_forward_flops_equal_flop_counter(model_id: str, gt: Any) -> None:
    config = model_entry(model_id)["config"]
    batch, seq = 2, 96
    expected = gt.forward_flops(config, batch, seq)["total"]
    model = get_model(model_id)
    flops = forward_flops(model, seq, batch)
    unrouted = 0
    if model.model_type in EVERY_EXPERT_REFERENCE and model.moe is not None:
        unrouted = flops.experts * (model.moe.num_experts - model.moe.top_k) // model.moe.top_k
    assert flops.total + unrouted == expected


def test_causal_attention_is_about_half() -> None:
    f = forward_flops(get_model("llama-3-8b"), 4096)
    assert f.attention_core_causal / f.attention_core == pytest.approx(4097 / 8192)


def test_sliding_window_caps_causal_attention() -> None:
    mistral = get_model("mistral-7b-v0.1")  # 4096-token window on every layer
    short, long = forward_flops(mistral, 4096), forward_flops(mistral, 8192)
    per_layer_window = 4096 * 4097 // 2
    extra_pairs = (8192 - 4096) * 4096
    ratio = (per_layer_window + extra_pairs) / per_layer_window
    assert long.attention_core_causal / short.attention_core_causal == pytest.approx(ratio)


def test_six_n_rule_for_dense_models() -> None:
    # Training FLOPs per token approach 6 x params (Kaplan et al. 2020) when attention is small.
    model = get_model("llama-2-7b")
    flops = training_flops(model, 128).model / 128
    params = 6_738_415_616 - 32000 * 4096  # embedding lookups do no matmul
    assert flops == pytest.approx(6 * params, rel=0.01)


def test_recompute_adds_hardware_flops() -> None:
    model = get_model("llama-3-8b")
    none, sel, full = (training_flops(model, 8192, 1, r) for r in ("none", "selective", "full"))
    assert none.hardware == none.model == sel.model == full.model
    assert none.hardware < sel.hardware < full.hardware
    fwd = forward_flops(model, 8192)
    assert full.hardware - full.model == fwd.total_causal - fwd.output_head
    assert sel.hardware - sel.model == fwd.attention_core_causal


def test_moe_counts_only_routed_experts() -> None:
    f = forward_flops(get_model("mixtral-8x7b"), 1)
    assert f.experts == 32 * 2 * 3 * 4096 * 14336 * 2


@pytest.mark.parametrize("name", ["tiny", "tiny-untied-biased", "mpt-7b"])
def test_mpt_forward_flops_equal_flop_counter(name: str, gt: Any) -> None:
    config = load_data("mpt_configs.json")["configs"][name]["config"]
    batch, seq = 2, 96
    expected = gt.forward_flops(config, batch, seq)["total"]
    assert forward_flops(model_from_config(config, name), seq, batch).total == expected
