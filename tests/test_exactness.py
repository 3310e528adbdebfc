"""Never silently wrong: a family is read exactly, or its answers say ``exact: false``, or its
config is refused naming the blocks the planner would get wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from estimator import SpecError, get_model, model_entry, model_from_config, model_ids
from estimator.inputs.config import supported_model_types
from estimator.inputs.families import EXACT
from tests.conftest import load_data

API = "/api/v1"
# A dense decoder no family module claims (the Llama-style reading fits it): read, not exact.
PLAIN = {**model_entry("llama-3-8b")["config"], "model_type": "some_new_dense_lm"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def test_catalog_models_are_exact() -> None:
    for model_id in model_ids():
        model = get_model(model_id)
        assert model.exact, model_id
        assert model.model_type in EXACT or model.model_type in supported_model_types()


def test_unknown_plain_decoder_is_read_but_not_exact() -> None:
    model = model_from_config(PLAIN)
    assert not model.exact
    assert any("exact: false" in note for note in model.notes)


def test_answers_say_exact_false(client: TestClient) -> None:
    bodies = {
        "/training/estimate": {"model": PLAIN, "num_gpus": 8, "layout": {"tp": 8}},
        "/inference/estimate": {"model": PLAIN, "num_gpus": 1},
        "/training/sweep": {"model": PLAIN, "num_gpus": [8], "accelerator": ["h100-sxm-80gb"]},
        "/inference/sweep": {"model": PLAIN, "accelerator": ["h100-sxm-80gb"]},
    }
    for path, body in bodies.items():
        answer = client.post(API + path, json=body)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.json()["exact"] is False, path
        assert any("exact: false" in n for n in answer.json()["notes"]), path
        exact = client.post(API + path, json={**body, "model": "llama-3-8b"}).json()
        assert exact["exact"] is True, path


def test_pages_say_approximate(client: TestClient) -> None:
    config = json.dumps(PLAIN)
    for path in ("/training", "/serving", "/sweep"):
        page = client.get(path, params={"config": config})
        assert page.status_code == 200, page.text
        assert 'id="approximate"' in page.text, path
        exact = client.get(path, params={"model": "llama-3-8b"})
        assert 'id="approximate"' not in exact.text, path


# Real configs of architectures the planner does not model, each with the block it must name.
# transformers' own defaults stand for their families (the configuration classes describe the
# published checkpoints' shapes); nemotron-nas is NVIDIA's Llama-3.3-Nemotron-Super-49B-v1.
UNSUPPORTED = {
    "zamba2": "state-space",
    "falcon_mamba": "state-space",
    "mamba": "state-space",
    "minimax": "experts",
    "recurrent_gemma": "hybrid layer pattern",
    "kimi_linear": "experts",
    "t5": "cross-attention",
    "lfm2_moe": "experts",
    "qwen3_5": "linear attention",
    "olmoe": "experts",
    "granitemoe": "experts",
    "phimoe": "experts",
    "longcat_flash": "experts",
}


@pytest.mark.parametrize("model_type", sorted(UNSUPPORTED))
def test_unsupported_families_are_refused_by_name(model_type: str, gt: Any) -> None:
    config = gt.hf_config({"model_type": model_type}).to_dict()
    with pytest.raises(SpecError) as refused:
        model_from_config(config)
    assert refused.value.field == "config.model_type"
    assert UNSUPPORTED[model_type] in refused.value.rule


def test_nemotron_nas_is_refused() -> None:
    config = load_data("unsupported_configs.json")["nvidia/Llama-3_3-Nemotron-Super-49B-v1"]
    with pytest.raises(SpecError, match="block_configs"):
        model_from_config(config["config"])


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"ssm_state_size": 128, "mamba_num_heads": 64}, "ssm_state_size"),
        ({"hybrid_override_pattern": "M*M-"}, "hybrid_override_pattern"),
        ({"linear_num_key_heads": 16}, "linear_num_key_heads"),
        ({"index_topk": 2048}, "index_topk"),
        ({"kv_lora_rank": 512}, "kv_lora_rank"),
        ({"attention_chunk_size": 8192}, "attention_chunk_size"),
        ({"num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts"),
        ({"layer_types": ["full_attention", "linear_attention"]}, "linear_attention"),
    ],
)
def test_unknown_family_naming_unmodelled_blocks_is_refused(
    extra: dict[str, Any], named: str
) -> None:
    with pytest.raises(SpecError) as refused:
        model_from_config({**PLAIN, **extra})
    assert named in refused.value.rule


def test_known_family_refuses_unknown_layer_types() -> None:
    config = {**model_entry("llama-3-8b")["config"], "layer_types": ["linear_attention"] * 32}
    with pytest.raises(SpecError) as refused:
        model_from_config(config)
    assert refused.value.field == "config.layer_types"


def test_refusal_reaches_the_api_as_422(client: TestClient) -> None:
    body = {"model": {**PLAIN, "ssm_state_size": 16}, "num_gpus": 1}
    answer = client.post(API + "/inference/estimate", json=body)
    assert answer.status_code == 422
    assert "state-space" in answer.json()["message"]
