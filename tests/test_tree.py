"""The analytical module tree against the exact one: transformers models on the meta device
under torch's FLOP counter, module by module; and its totals against the core."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app
from estimator import count_params, get_accelerator, get_model, get_precision, model_entry
from estimator.counts.flops import forward_flops
from estimator.counts.tree import module_tree

H100, BF16 = get_accelerator("h100-sxm-80gb"), get_precision("bf16")


@pytest.mark.parametrize(
    "name", ["llama-3-8b", "mixtral-8x7b", "deepseek-v3", "gpt2", "falcon-7b", "deepseek-v4-flash"]
)
def test_totals_equal_the_core(name: str) -> None:
    model = get_model(name)
    tree = module_tree(model, H100, BF16, 1024, 2)
    assert tree.params == count_params(model).total
    assert tree.flops == pytest.approx(float(forward_flops(model, 1024, 2).total_causal), rel=1e-12)
    leaves = [n for _, n in tree.walk() if not n.children]
    assert sum(n.shares["flops"] for n in leaves) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen2.5-7b", "mistral-7b-v0.1"])
def test_agrees_with_the_exact_tree(gt: Any, name: str) -> None:
    seq = 64
    exact = gt.forward_flops(model_entry(name)["config"], batch=1, seq=seq)["by_module"]
    tree = module_tree(get_model(name), H100, BF16, seq, 1, causal=False)  # eager: full s x s
    (layers,) = [n for n in tree.children if n.name.startswith("layers")]
    compared = 0
    for _, node in layers.walk():
        if node.children or not node.flops:
            continue
        if node.name.startswith("(attention core"):
            key = "model.layers.*.self_attn"
        else:
            key = f"model.layers.*.{node.name}"
        assert node.flops == exact[key], key
        compared += 1
    assert compared >= 8
    head = next(n for n in tree.children if n.name == "lm_head")
    assert head.flops == exact["lm_head"]


def test_api_and_cli() -> None:
    client = TestClient(app)
    body = client.post("/api/v1/models/tree", json={"model": "llama-3-8b", "seq_len": 512}).json()
    assert body["root"]["params"] == 8_030_261_248
    assert body["top"]["flops"]["1"][0] == "layers [dense]"
    bad = client.post("/api/v1/models/tree", json={"model": "llama-3-8b", "precision": "fp7"})
    assert bad.status_code == 422
    assert main(["tree", "llama-3-8b", "--depth", "1"]) == 0


def test_exact_source_over_the_api(gt: Any) -> None:
    client = TestClient(app)
    body = client.post(
        "/api/v1/models/tree", json={"model": "llama-3-8b", "seq_len": 64, "source": "exact"}
    ).json()
    exact = {m["module"]: m for m in body["exact"]}
    assert exact["model.layers.*.mlp.down_proj"]["flops"] == 32 * 2 * 64 * 14336 * 4096
    assert exact["model.layers.*.mlp.down_proj"]["params"] == 32 * 14336 * 4096
    assert sum(m["params"] for m in body["exact"]) == body["root"]["params"]


def test_module_profiler_times_every_module_on_cpu(gt: Any, tmp_path: Any) -> None:
    # The GPU command's machinery (hooks, per-module sums over layers) on a tiny CPU model; on
    # a GPU the same hooks record CUDA events.
    from app.service.exact import profile_modules

    tiny = gt.tiny_config(model_entry("llama-3-8b")["config"])
    times = profile_modules(tiny, 16, 1, device="cpu", dtype="float32", repeats=2, warmup=1)
    assert {"model.layers.*.self_attn.q_proj", "model.layers.*.mlp", "lm_head"} <= set(times)
    assert all(ms >= 0 for ms in times.values())
    assert times["<model>"] >= times["model.layers.*.mlp"]
    config = tmp_path / "tiny.json"
    import json

    config.write_text(json.dumps(tiny))
    assert main(["profile-modules", str(config), "--device", "cpu", "--dtype", "float32",
                 "--seq-len", "8", "--repeats", "1"]) == 0  # fmt: skip
    # Without a GPU the command refuses in words (exit 2); with one it profiles the tiny model.
    assert main(["profile-modules", str(config), "--device", "cuda", "--seq-len", "8"]) in (0, 2)
