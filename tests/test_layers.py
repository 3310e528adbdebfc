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
from estimator.memory.activations import layer_activation_bytes

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
        saved = layer_activation_bytes(
            model, kind, precision, tokens=4096, keys=4096, tp=p.tp, sp=sp,
            etp=p.expert_tp, flash=True, recompute=recompute,
        )  # fmt: skip
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
