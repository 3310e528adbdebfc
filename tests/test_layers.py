"""The per-layer table sums to what the memory estimate charges: each kind's modules to the
placement rules' per-layer parameters, its saved tensors to the layer's activation bytes, and
the unsharded modules to the exact parameter count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app
from estimator import (
    Parallelism,
    TrainingSetup,
    count_params,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.counts.layers import layer_table
from estimator.layout.sharding import layer_params
from estimator.memory.activation_bytes import ActivationShard, layer_activation_bytes

H100 = get_accelerator("h100-sxm-80gb")

CASES = [
    ("llama-3-70b", Parallelism(tp=8, pp=2, dp=4, sequence_parallel=True), "selective", "bf16"),
    ("llama-3-8b", Parallelism(tp=2, dp=4), "none", "fp8"),
    (
        "mixtral-8x7b",
        Parallelism(tp=4, pp=4, dp=8, ep=8, etp=1, sequence_parallel=True),
        "selective",
        "bf16",
    ),
    ("deepseek-v3", Parallelism(tp=8, dp=64, ep=64, etp=1, sequence_parallel=True), "none", "bf16"),
    ("qwen3-30b-a3b", Parallelism(tp=4, dp=2, ep=4, etp=1, sequence_parallel=True), "full", "bf16"),
    ("gemma-2-9b", Parallelism(tp=2, dp=2), "none", "bf16"),
]


@pytest.mark.parametrize(("name", "p", "recompute", "prec"), CASES, ids=[c[0] for c in CASES])
def test_rows_sum_to_the_estimate(name: str, p: Parallelism, recompute: str, prec: str) -> None:
    model, precision = get_model(name), get_precision(prec)
    setup = TrainingSetup(4096, 1, 8 * p.dp, recompute)  # type: ignore[arg-type]
    table = layer_table(model, H100, p, setup, precision)
    sp = p.sequence_parallel and p.tp > 1
    unsharded = 0
    for kind, rows, n in zip(model.kinds, table.layers, model.kind_counts, strict=True):
        placed = layer_params(model, kind, p.tp, p.ep, p.expert_tp)
        assert rows.params_per_gpu == pytest.approx(float(placed.total), rel=1e-12)
        shard = ActivationShard(4096, 4096, p.tp, sp, p.expert_tp, recompute)
        saved = layer_activation_bytes(model, kind, precision, shard, flash=True)
        assert rows.activation_bytes == pytest.approx(float(saved), rel=1e-12)
        unsharded += n * sum(m.params for m in rows.modules)
    head = table.head.params if table.head is not None else 0
    extras = count_params(model).total - unsharded - table.embedding.params - head
    assert 0 <= extras <= 2 * model.hidden_size  # only the final norm lies outside the layers
    assert table.memory.total_bytes > 0


def test_api_page_and_cli(tmp_path: Path) -> None:
    client = TestClient(app)
    req = {"model": "llama-3-70b", "num_gpus": 64, "layout": {"tp": 8, "pp": 2}}
    body = client.post("/api/v1/training/layers", json=req).json()
    est = client.post("/api/v1/training/estimate", json=req).json()
    assert body["gpu_bytes"]["total_bytes"] == est["memory_per_gpu"]["total_bytes"]
    q = next(m for m in body["layers"][0]["modules"] if m["name"] == "self_attn.q_proj")
    assert q["shape"] == [8192, 8192] and q["shard_shape"] == [1024, 8192]
    assert body["model_params"] == est["params"]["total"]
    page = client.get("/training?model=llama-3-70b&num_gpus=64&tp=8&pp=2").text
    assert "layer-modules" in page and "self_attn.q_proj" in page
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(req))
    assert main(["layers", str(plan)]) == 0


@pytest.mark.parametrize(
    "p",
    [
        Parallelism(tp=1, pp=1, dp=1024, zero_stage=3),
        Parallelism(tp=8, pp=1, dp=16, ep=8, etp=1, zero_stage=3, sequence_parallel=True),
        Parallelism(tp=8, pp=2, dp=4, zero_stage=1),
    ],
    ids=["zero3-dense", "zero3-experts", "zero1"],
)
def test_zero3_says_what_is_resident_and_what_is_gathered(p: Parallelism) -> None:
    """Under ZeRO-3 a GPU computes with whole (TP-sharded) weights but keeps only its slice
    between uses: the resident column sums to the memory estimate's weights term, the gathered
    column to the unsharded-over-DP layer. Below stage 3 both are the same."""
    name = "mixtral-8x7b" if p.ep > 1 else "llama-3-70b"
    model, precision = get_model(name), get_precision("bf16")
    table = layer_table(model, H100, p, TrainingSetup(4096, 1, p.dp), precision)
    q = next(m for m in table.layers[0].modules if m.name == "self_attn.q_proj")
    dense_shards = p.dp * p.cp if p.zero_stage >= 3 else 1
    assert q.resident_params_per_gpu == q.params_per_gpu / dense_shards
    first, last = table.memory.stage == 0, table.memory.stage == p.pp - 1
    resident = table.embedding.resident_bytes_per_gpu if first else 0.0
    if table.head is not None and last:
        resident += table.head.resident_bytes_per_gpu
    for rows in table.layers:
        n = rows.layers_on_gpu
        resident += n * sum(m.resident_bytes_per_gpu for m in rows.modules)
    final_norm = model.final_norm.params * 2 / dense_shards if model.final_norm and last else 0
    assert resident + final_norm == pytest.approx(table.memory.weights_bytes, rel=1e-9)
    if p.ep > 1:
        experts = next(m for m in table.layers[0].modules if m.copies > 1)
        expert_shards = p.tp * p.cp * p.dp // (p.ep * p.expert_tp)
        assert experts.resident_params_per_gpu == experts.params_per_gpu / expert_shards


def test_zero3_resident_column_on_api_and_page() -> None:
    client = TestClient(app)
    req = {"model": "llama-3-70b", "num_gpus": 1024, "layout": {"tp": 1, "zero_stage": 3}}
    body = client.post("/api/v1/training/layers", json=req).json()
    layer = body["layers"][0]
    assert layer["resident_params_per_gpu"] == pytest.approx(layer["params_per_gpu"] / 1024)
    page = client.get("/training?model=llama-3-70b&num_gpus=1024&tp=1&zero_stage=3").text
    assert "Resident at rest" in page and "kept between uses: ZeRO-3 gathers the rest" in page
