"""The format x accelerator x engine support matrix (``estimator.inputs.support``): each refusal
and acceptance below is a row of ``catalog/support.json`` read from the vendor's or the engine's
own documentation (the row's source), checked through the core and the REST API."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator.catalog import accelerator_entry, accelerator_ids, get_accelerator, get_model
from estimator.errors import SpecError
from estimator.inputs.precision import DTYPES, get_precision
from estimator.inputs.support import (
    ENGINE_SCOPES,
    ROLES,
    SCOPES,
    check_support,
    support_row,
    support_rows,
)
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceSetup
from estimator.serving.estimate import estimate_inference, estimate_load
from estimator.serving.load import ENGINES

MXFP4_SERVING = {"weights": "mxfp4", "gemm_inputs": "mxfp4", "kv_cache": "fp8"}
MXFP8_SERVING = {"weights": "mxfp8", "gemm_inputs": "mxfp8"}


def _keys() -> set[str]:
    entries = [accelerator_entry(a) for a in accelerator_ids()]
    return (
        {e["id"] for e in entries}
        | {e.get("generation", "") for e in entries}
        | {e.get("vendor", "") for e in entries}
    )


def test_every_row_has_a_reason_a_source_and_known_keys() -> None:
    keys = _keys()
    rows = support_rows()
    assert len(rows) >= 40
    seen = set()
    for r in rows:
        where = (r.role, r.format, r.scope, r.accelerator)
        assert where not in seen, where
        seen.add(where)
        assert r.accelerator in keys, r
        assert r.role in ROLES and r.scope in SCOPES, r
        assert (r.format == "") == (r.role == "engine"), r
        assert r.role == "engine" or r.format in DTYPES, r
        assert len(r.reason) > 20 and r.source.startswith("https://"), r
        assert all(u.startswith("https://") for u in r.also), r
        assert r.encoding in (None, "e4m3fn", "e4m3fnuz"), r


def test_every_engine_preset_reads_its_engine_rows() -> None:
    assert set(ENGINE_SCOPES) == set(ENGINES)


REFUSED = [
    # (accelerator, precision, engine, training, field, words the reason must hold)
    ("h100-sxm-80gb", MXFP8_SERVING, None, False, "precision.gemm_inputs", "block-scaled"),
    ("h100-sxm-80gb", "mxfp8", None, True, "precision.gemm_inputs", "Hopper"),
    ("h200-sxm-141gb", "mxfp8-params", None, True, "precision.gemm_inputs", "Hopper"),
    ("h100-sxm-80gb", "nvfp4-serving", "trtllm", False, "precision.gemm_inputs", "FP4"),
    ("mi300x", MXFP4_SERVING, "vllm", False, "precision.gemm_inputs", "CDNA3"),
    ("mi325x", "mxfp8", None, True, "precision.gemm_inputs", "CDNA3"),
    ("mi355x", "nvfp4-serving", "vllm", False, "precision.gemm_inputs", "E4M3 scale per 16"),
    ("tpu-v5e", "fp8-serving", "vllm", False, "precision.gemm_inputs", "v5e"),
    ("tpu-v5e", "fp8", None, True, "precision.gemm_inputs", "v5e"),
    ("gaudi2", "nvfp4-serving", "vllm", False, "precision.gemm_inputs", "Gaudi"),
    ("trainium2", "mxfp8", None, True, "precision.gemm_inputs", "NeuronCore-v4"),
    ("mi300x", "bf16", "trtllm", False, "engine", "NVIDIA GPUs only"),
    ("mi355x", "fp8-serving", "trtllm", False, "engine", "NVIDIA GPUs only"),
    ("tpu-v6e", "bf16", "trtllm", False, "engine", "NVIDIA GPUs only"),
    ("gaudi3", "bf16", "trtllm", False, "engine", "NVIDIA GPUs only"),
    ("trainium2", "bf16", "sglang", False, "engine", "Neuron"),
    ("a100-sxm-80gb", {"kv_cache": "fp8"}, "trtllm", False, "precision.kv_cache", "Ampere"),
    ("rtx-pro-6000-bse", "mxfp8", None, True, "precision.gemm_inputs", "12.0"),
]


@pytest.mark.parametrize(("acc", "precision", "engine", "training", "field", "words"), REFUSED)
def test_unsupported_combinations_are_refused_with_the_field_and_reason(
    acc: str, precision: Any, engine: str | None, training: bool, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as err:
        check_support(get_accelerator(acc), get_precision(precision), engine, training=training)
    assert err.value.field == field
    assert words in err.value.rule and "source: https://" in err.value.rule


ACCEPTED = [
    ("h100-sxm-80gb", "fp8-serving", "trtllm", False),
    ("h100-sxm-80gb", "fp8-serving", "vllm", False),
    ("h100-sxm-80gb", "fp8", None, True),
    ("mi300x", "fp8-serving", "vllm", False),
    ("mi300x", "fp8", None, True),
    ("mi325x", "fp8-serving", "sglang", False),
    ("b200", "nvfp4-serving", "trtllm", False),
    ("b200", "mxfp8-params", None, True),
    ("gb300", "nvfp4", None, True),
    ("mi355x", "mxfp4-serving", "vllm", False),
    ("mi355x", MXFP4_SERVING, "sglang", False),
    ("mi355x", "mxfp8", None, True),
    ("b200", "mxfp4-serving", "trtllm", False),
    # MXFP4 experts dequantized into bf16 GEMMs (gpt-oss as shipped) where no FP4 MMA exists
    ("h100-sxm-80gb", "mxfp4-experts", "vllm", False),
    ("mi300x", "mxfp4-experts", "vllm", False),
    ("a100-sxm-80gb", {"kv_cache": "fp8"}, "vllm", False),
    ("gaudi2", "fp8-serving", "vllm", False),
    ("gaudi3", "fp8", None, True),
    ("tpu-v7", "fp8-serving", "vllm", False),
    ("tpu-v5e", "bf16", "vllm", False),
    ("tpu-v6e", "bf16", "sglang", False),
    ("trainium2", "fp8", None, True),
    ("trainium2", "bf16", "vllm", False),
    ("rtx-pro-6000-bse", "mxfp8-params", "vllm", False),
]


@pytest.mark.parametrize(("acc", "precision", "engine", "training"), ACCEPTED)
def test_supported_combinations_pass(
    acc: str, precision: Any, engine: str | None, training: bool
) -> None:
    check_support(get_accelerator(acc), get_precision(precision), engine, training=training)


def test_fp8_encoding_tells_fnuz_from_ocp() -> None:
    """CDNA3 runs FP8 as E4M3FNUZ; CDNA4 and NVIDIA as OCP E4M3FN."""
    for acc, encoding in (
        ("mi300x", "e4m3fnuz"),
        ("mi325x", "e4m3fnuz"),
        ("mi300a", "e4m3fnuz"),
        ("mi355x", "e4m3fn"),
        ("h100-sxm-80gb", "e4m3fn"),
        ("b200", "e4m3fn"),
    ):
        row = support_row(get_accelerator(acc), "gemm", "fp8")
        assert row is not None and row.supported and row.encoding == encoding, acc


def test_the_most_specific_row_wins() -> None:
    """An id's row over its generation's: TPU v5e has an fp8 row of its own, v7 no MX rows."""
    own = support_row(get_accelerator("tpu-v5e"), "gemm", "fp8")
    assert own is not None and own.accelerator == "tpu-v5e" and not own.supported
    row = support_row(get_accelerator("tpu-v7"), "gemm", "mxfp4")
    assert row is not None and row.accelerator == "tpu" and not row.supported
    assert support_row(get_accelerator("h100-sxm-80gb"), "gemm", "int8") is None


def test_the_serving_and_load_entries_refuse() -> None:
    model = get_model("llama-3-8b")
    setup = InferenceSetup(1024, 128, 8)
    one = Parallelism(tp=1)
    with pytest.raises(SpecError) as err:
        estimate_inference(
            model, get_accelerator("h100-sxm-80gb"), one, setup, get_precision(MXFP8_SERVING)
        )
    assert err.value.field == "precision.gemm_inputs"
    with pytest.raises(SpecError) as err:
        estimate_load(
            model, get_accelerator("mi300x"), one, setup, get_precision("bf16"), engine="trtllm"
        )
    assert err.value.field == "engine"
    point = estimate_load(
        model, get_accelerator("mi300x"), one, setup, get_precision("fp8-serving"), engine="vllm"
    )
    assert point.output_tokens_per_s > 0


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app, base_url="http://localhost")


SMALL_SERVING = {"model": "llama-3-8b", "num_gpus": 1, "input_len": 1024, "output_len": 128}
SMALL_TRAINING = {
    "model": "llama-3-8b",
    "num_gpus": 8,
    "seq_len": 4096,
    "global_batch_size": 64,
    "layout": {"tp": 1},
}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            {"accelerator": "h100-sxm-80gb", "precision": MXFP8_SERVING},
            "precision.gemm_inputs",
            "Hopper",
        ),
        (
            {"accelerator": "mi300x", "precision": MXFP4_SERVING},
            "precision.gemm_inputs",
            "CDNA3",
        ),
        ({"accelerator": "mi355x", "precision": "nvfp4-serving"}, "precision.gemm_inputs", "CDNA4"),
        ({"accelerator": "tpu-v5e", "precision": "fp8-serving"}, "precision.gemm_inputs", "v5e"),
        ({"accelerator": "mi300x", "engine": "trtllm"}, "engine", "NVIDIA GPUs only"),
    ],
)
def test_inference_api_answers_422_with_the_field_and_reason(
    client: TestClient, body: dict[str, Any], field: str, words: str
) -> None:
    response = client.post("/api/v1/inference/estimate", json={**SMALL_SERVING, **body})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["field"] == field and words in detail["rule"], detail


def test_inference_api_accepts_what_the_chips_run(client: TestClient) -> None:
    for body in (
        {"accelerator": "h100-sxm-80gb", "precision": "fp8-serving", "engine": "trtllm"},
        {"accelerator": "mi300x", "precision": "fp8-serving"},
        {"accelerator": "b200", "precision": "nvfp4-serving", "engine": "trtllm"},
        {"accelerator": "mi355x", "precision": "mxfp4-serving"},
    ):
        response = client.post("/api/v1/inference/estimate", json={**SMALL_SERVING, **body})
        assert response.status_code == 200, (body, response.text)


def test_training_api_answers_422_with_the_field_and_reason(client: TestClient) -> None:
    refused = client.post(
        "/api/v1/training/estimate",
        json={**SMALL_TRAINING, "accelerator": "h100-sxm-80gb", "precision": "mxfp8"},
    )
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"][0]
    assert detail["field"] == "precision.gemm_inputs" and "Hopper" in detail["rule"]
    accepted = client.post(
        "/api/v1/training/estimate",
        json={**SMALL_TRAINING, "accelerator": "b200", "precision": "mxfp8"},
    )
    assert accepted.status_code == 200, accepted.text
