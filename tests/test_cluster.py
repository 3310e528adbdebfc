"""The cluster stated as it is: GPUs per node, the scale-up domain and the scale-out network,
each defaulting to the accelerator's catalog value, and what each changes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from estimator import SpecError, get_accelerator
from estimator.inputs.cluster import DEFAULT_SCALE_OUT_BYTES_PER_S, cluster_of
from estimator.timing.kernels import collective_time, kernel_profile

API = "/api/v1"
client = TestClient(create_app())


def _train(**extra: Any) -> dict[str, Any]:
    body = {
        "model": "qwen3-235b-a22b",
        "accelerator": "gb200",
        "num_gpus": 64,
        "layout": {"tp": 1, "pp": 1, "ep": 64},
        "seq_len": 4096,
        "global_batch_size": 512,
        **extra,
    }
    answer = client.post(API + "/training/estimate", json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_defaults_come_from_the_catalog() -> None:
    gb200 = get_accelerator("gb200")
    c = cluster_of(gb200)
    assert (c.gpus_per_node, c.scale_up_domain) == (4, 72)
    # one ConnectX-7 NDR 400 Gb/s InfiniBand port per GPU (the catalog's sources)
    assert not c.scale_out_assumed and c.scale_out_bytes_per_s == 50e9
    mi300x = cluster_of(get_accelerator("mi300x"))  # no scale-out figure in the catalog
    assert mi300x.scale_out_assumed
    assert mi300x.scale_out_bytes_per_s == DEFAULT_SCALE_OUT_BYTES_PER_S
    h100 = cluster_of(get_accelerator("h100-sxm-80gb"))
    assert (h100.gpus_per_node, h100.scale_up_domain, h100.scale_out_bytes_per_s) == (8, 8, 50e9)
    assert not h100.scale_out_assumed
    half = cluster_of(get_accelerator("h100-sxm-80gb"), oversubscription=2)
    assert half.scale_out_bytes_per_s == 25e9
    with pytest.raises(SpecError, match="oversubscription"):
        cluster_of(get_accelerator("h100-sxm-80gb"), oversubscription=0.5)


def test_gpus_per_node_no_longer_shrinks_the_nvlink_domain() -> None:
    # A GB200 NVL72 user who types the truth (4 GPUs per compute tray) keeps the 72-GPU NVLink
    # domain: the expert all-to-all stays on NVLink. Only the domain itself changes it.
    default = _train()
    trays = _train(gpus_per_node=4)
    assert trays["throughput"]["tokens_per_s"] == default["throughput"]["tokens_per_s"]
    assert trays["cluster"]["scale_up_domain"] == 72 and trays["cluster"]["gpus_per_node"] == 4
    small = _train(scale_up_domain=4)
    assert small["time"]["breakdown"]["ep_comm_s"] > 2 * default["time"]["breakdown"]["ep_comm_s"]
    assert small["throughput"]["tokens_per_s"] < default["throughput"]["tokens_per_s"]


def test_scale_out_bandwidth_and_oversubscription_price_cross_node_traffic() -> None:
    body = {
        "model": "llama-3-70b",
        "num_gpus": 256,
        "layout": {"tp": 8, "pp": 1, "zero_stage": 3},
        "global_batch_size": 256,
    }
    answers = {
        name: client.post(API + "/training/estimate", json={**body, **extra}).json()
        for name, extra in {
            "400G": {},
            "100G": {"scale_out_gbit_per_s": 100},
            "2:1": {"oversubscription": 2},
        }.items()
    }
    step = {k: v["time"]["step_s"] for k, v in answers.items()}
    assert step["100G"] > step["2:1"] > step["400G"]
    assert answers["2:1"]["cluster"]["scale_out_gbit_per_s"] == 200


def test_scale_out_is_bounded_by_the_nics_there() -> None:
    # An all-gather over 128 nodes of 8: each GPU's NIC carries its 1/8 share of every other
    # node's data; the time cannot beat that share at the NIC's rate.
    h100 = get_accelerator("h100-sxm-80gb")
    net = cluster_of(h100)
    payload, n = 1.76e9, 1024
    t = collective_time(h100, kernel_profile(h100.id), "all_gather", payload, n, 1, net)
    nic_share = payload / 8 * (128 - 1) / 128
    assert t >= nic_share / net.scale_out_bytes_per_s
    slower = cluster_of(h100, scale_out_gbit_per_s=100)
    t100 = collective_time(h100, kernel_profile(h100.id), "all_gather", payload, n, 1, slower)
    assert t100 >= nic_share / 12.5e9 > t


def test_an_assumed_scale_out_is_said() -> None:
    # MI300X: the catalog gives no scale-out figure
    plan = {"model": "llama-3-8b", "accelerator": "mi300x", "layout": {"tp": 1, "pp": 1}}
    notes = _train(**plan, num_gpus=16)["notes"]  # data parallelism over two nodes
    assert any("no scale-out bandwidth" in n for n in notes)
    inside = _train(**plan, num_gpus=8)["notes"]  # one 8-GPU domain: no scale-out traffic
    assert not any("no scale-out bandwidth" in n for n in inside)
    gb200 = _train(num_gpus=128, layout={"tp": 1, "pp": 1, "ep": 16})["notes"]
    assert not any("no scale-out bandwidth" in n for n in gb200)  # the catalog's 400 Gb/s


def test_ranks_fill_nodes_of_gpus_per_node() -> None:
    body = {"model": "llama-3-8b", "accelerator": "gb200", "num_gpus": 16, "gpus_per_node": 4}
    ranks = client.post(API + "/training/ranks", json=body).json()
    assert ranks["gpus_per_node"] == 4
