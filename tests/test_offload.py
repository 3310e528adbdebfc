"""CPU offload (issue 21): what moves to the host, what the GPU keeps, what the moves cost."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import app
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.errors import SpecError
from estimator.memory.training import FRAGMENTATION_FRACTION, training_memory
from estimator.offload import CPU_ADAM_BYTES_PER_PARAM, NO_OFFLOAD, Offload, host_of
from estimator.timing.training import estimate_training

H100 = get_accelerator("h100-sxm-80gb")
BF16 = get_precision("bf16")
MODEL = get_model("llama-3-70b")
ZERO3 = Parallelism(tp=1, dp=8, zero_stage=3)


def _setup(offload: Offload = NO_OFFLOAD) -> TrainingSetup:
    return TrainingSetup(4096, 1, 64, "full", offload=offload)


def test_optimizer_offload_moves_master_weights_and_states_to_the_host() -> None:
    base = training_memory(MODEL, H100, ZERO3, _setup(), BF16)
    off = training_memory(MODEL, H100, ZERO3, _setup(Offload(optimizer=True)), BF16)
    # with ZeRO-3 (FSDP / ZeRO-Offload) the gradient shard goes to the host with them
    moved = base.master_weights_bytes + base.optimizer_states_bytes + base.gradients_bytes
    assert off.master_weights_bytes == off.optimizer_states_bytes == off.gradients_bytes == 0
    assert off.host_optimizer_bytes == pytest.approx(moved, rel=1e-12)
    assert base.total_bytes - off.total_bytes == pytest.approx(
        moved * (1 + FRAGMENTATION_FRACTION), rel=1e-12
    )
    assert not base.fits and off.fits  # 70B on 8 x H100 under ZeRO-3 only with the offload
    assert off.host_capacity_bytes == 256e9 and off.host_bytes < off.host_capacity_bytes


def test_parameter_offload_needs_zero3_and_moves_the_shard() -> None:
    with pytest.raises(SpecError, match="ZeRO-3") as refused:
        training_memory(
            MODEL, H100, Parallelism(tp=8, zero_stage=1), _setup(Offload(params=True)), BF16
        )
    assert refused.value.field == "offload_params"
    base = training_memory(MODEL, H100, ZERO3, _setup(), BF16)
    off = training_memory(MODEL, H100, ZERO3, _setup(Offload(params=True)), BF16)
    assert off.weights_bytes == 0 and off.host_weights_bytes == base.weights_bytes
    assert off.zero3_gather_bytes == base.zero3_gather_bytes  # the layers in use stay


def test_activation_offload_keeps_two_layers_on_the_gpu() -> None:
    p = Parallelism(tp=8, dp=1)
    setup = TrainingSetup(8192, 4, 4, "none")
    base = training_memory(MODEL, H100, p, setup, BF16)
    setup_off = TrainingSetup(8192, 4, 4, "none", offload=Offload(activations=True))
    off = training_memory(MODEL, H100, p, setup_off, BF16)
    per_layer = base.activations_bytes / MODEL.num_layers
    assert off.activations_bytes == pytest.approx(2 * per_layer, rel=0.02)
    assert off.host_activations_bytes == pytest.approx(
        base.activations_bytes - off.activations_bytes, rel=1e-12
    )


def test_layer_wise_activation_offload_moves_the_first_layers() -> None:
    """Megatron-Core's --cpu-offloading-num-layers: the first N layers' saved tensors on the
    host, the others' (at least two layers' worth) on the GPU; refused where Megatron-Core
    refuses it (pipeline parallelism, recomputation, as many layers as the model has)."""
    p = Parallelism(tp=8, dp=1)
    layers = MODEL.num_layers  # 80

    def setup(n: int | None, recompute: str = "none") -> TrainingSetup:
        off = Offload(activations=True, activation_layers=n)
        return TrainingSetup(8192, 4, 4, recompute, offload=off)  # type: ignore[arg-type]

    base = training_memory(MODEL, H100, p, TrainingSetup(8192, 4, 4, "none"), BF16)
    one = training_memory(MODEL, H100, p, setup(1), BF16).host_activations_bytes  # a layer's
    for n in (1, 20, 40, 78, 79):
        off = training_memory(MODEL, H100, p, setup(n), BF16)
        assert off.host_activations_bytes == pytest.approx(min(n, layers - 2) * one, rel=1e-12)
        assert base.activations_bytes - off.activations_bytes == pytest.approx(
            off.host_activations_bytes, rel=1e-12
        )
    # every layer's (the default) also moves the embedding's output, which the first layer
    # reads: the same two layers kept
    every = training_memory(MODEL, H100, p, setup(None), BF16).host_activations_bytes
    assert 0 < every - (layers - 2) * one < 0.01 * every
    for bad, layout, recompute in (
        (80, p, "none"),  # as many layers as the model has
        (0, p, "none"),
        (20, Parallelism(tp=8, pp=2), "none"),  # Megatron-Core: no pipeline parallelism
        (20, p, "selective"),  # Megatron-Core: no recomputation
    ):
        with pytest.raises(SpecError) as refused:
            training_memory(MODEL, H100, layout, setup(bad, recompute), BF16)
        assert refused.value.field == "offload_activation_layers", (bad, layout, recompute)
    with pytest.raises(SpecError) as without:
        training_memory(
            MODEL, H100, p,
            TrainingSetup(8192, 4, 4, "none", offload=Offload(activation_layers=20)), BF16,
        )  # fmt: skip
    assert without.value.field == "offload_activation_layers"
    # the API takes it, says it, and refuses a bad one as a 422 naming the field
    client = TestClient(app)
    req = {"model": "llama-3-70b", "num_gpus": 8, "layout": {"tp": 8}, "seq_len": 8192,
           "micro_batch_size": 4, "global_batch_size": 4, "recompute": "none",
           "offload_activations": True, "offload_activation_layers": 20}  # fmt: skip
    body = client.post("/api/v1/training/estimate", json=req).json()
    single = client.post(
        "/api/v1/training/estimate", json={**req, "offload_activation_layers": 1}
    ).json()
    assert body["offload"]["activation_layers"] == 20
    assert body["offload"]["host_activations_bytes"] == pytest.approx(
        20 * single["offload"]["host_activations_bytes"], rel=1e-12
    )
    bad = client.post("/api/v1/training/estimate", json={**req, "layout": {"tp": 4, "pp": 2}})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["field"] == "offload_activation_layers"


def test_offload_time_is_the_link_and_the_cpu_step() -> None:
    """The optimizer offload's exposed time: the larger transfer (gradients down, weights up)
    over the host link, then the CPU's Adam at the host's memory bandwidth; no GPU step."""
    est = estimate_training(MODEL, H100, ZERO3, _setup(Offload(optimizer=True)), BF16)
    host = host_of(H100.id)
    params = est.memory.params_on_gpu / 8  # the optimizer's shard: ZeRO over dp = 8
    expected = (
        params * BF16.bytes("gradients") / host.link_bytes_per_s
        + params * CPU_ADAM_BYTES_PER_PARAM / host.memory_bytes_per_s
    )
    assert est.time.breakdown["optimizer"] == 0.0
    assert est.time.breakdown["offload"] == pytest.approx(expected, rel=1e-9)
    base = estimate_training(MODEL, H100, ZERO3, _setup(), BF16)
    assert base.time.breakdown["offload"] == 0.0
    assert base.time.breakdown["compute"] == est.time.breakdown["compute"]


def test_a_host_too_small_does_not_fit_and_says_so() -> None:
    small = Offload(optimizer=True, host_memory_gb_per_gpu=32)
    mem = training_memory(MODEL, H100, ZERO3, _setup(small), BF16)
    assert mem.total_bytes <= mem.capacity_bytes and not mem.fits
    assert any("does not fit in host memory" in n for n in mem.notes)
    with pytest.raises(SpecError) as bad:
        host_of(H100.id, Offload(host_link_gb_per_s=-1))
    assert bad.value.field == "host_link_gb_per_s"
    assumed = host_of("l40s", Offload(optimizer=True))
    assert assumed.assumed and "assumed" in assumed.note()


def test_api_page_and_cli_take_the_offload() -> None:
    client = TestClient(app)
    req = {
        "model": "llama-3-70b",
        "num_gpus": 8,
        "layout": {"tp": 1, "zero_stage": 3},
        "global_batch_size": 64,
        "recompute": "full",
        "offload_optimizer": True,
    }
    body = client.post("/api/v1/training/estimate", json=req).json()
    assert body["offload"]["optimizer"] and body["offload"]["host_optimizer_bytes"] > 0
    assert body["memory_per_gpu"]["fits"] and body["time"]["breakdown"]["offload_s"] > 0
    bad = client.post("/api/v1/training/estimate", json={**req, "offload_params": True,
                                                         "layout": {"tp": 8}})  # fmt: skip
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "offload_params"
    page = client.get(
        "/training",
        params={"model": "llama-3-70b", "num_gpus": 8, "tp": 1, "zero_stage": 3,
                "offload_optimizer": "true"},
    ).text  # fmt: skip
    assert 'name="offload_optimizer"' in page and "Offload over PCIe 5.0 x16" in page


def test_a_sweep_with_the_optimizer_offloaded_answers_every_block() -> None:
    """With the optimizer in host memory its device terms are one value for every layout of a
    block (zero): the sweep broadcast them (it was a 500: "zero-dimensional arrays cannot be
    concatenated" for DeepSeek-V3 over 8 and 16 A100s)."""
    from fastapi.testclient import TestClient

    from app.main import app

    client = TestClient(app)
    body = {"model": "deepseek-v3", "accelerator": ["a100-sxm-40gb"], "num_gpus": [8, 16],
            "offload_optimizer": True}  # fmt: skip
    r = client.post("/api/v1/training/sweep", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["counts"]["evaluated"] > 0
