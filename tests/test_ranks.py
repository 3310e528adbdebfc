"""Parallel groups follow Megatron-LM's rank order and cover every rank once per dimension."""

from __future__ import annotations

import pytest

from estimator import Parallelism
from estimator.errors import SpecError
from estimator.layout.ranks import DIMENSIONS, gpu_name, rank_layout


def test_megatron_docstring_example() -> None:
    # Megatron-LM parallel_state.initialize_model_parallel: 16 GPUs, tp=2, pp=4 (so dp=2).
    layout = rank_layout(Parallelism(tp=2, pp=4, dp=2), gpus_per_node=8)
    assert layout.groups["dp"] == (
        (0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)
    )  # fmt: skip
    assert layout.groups["tp"] == tuple((i, i + 1) for i in range(0, 16, 2))
    assert layout.groups["pp"] == ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15))


@pytest.mark.parametrize(
    "p",
    [
        Parallelism(tp=8, pp=4, dp=4),
        Parallelism(tp=2, cp=2, dp=3, pp=2),
        Parallelism(tp=4, dp=8, ep=8, etp=1),
        Parallelism(tp=2, cp=2, dp=4, pp=2, ep=4, etp=2),
    ],
)
def test_every_rank_once_per_dimension(p: Parallelism) -> None:
    layout = rank_layout(p, gpus_per_node=8)
    for dim in DIMENSIONS:
        ranks = [r for g in layout.groups[dim] for r in g]
        assert sorted(ranks) == list(range(p.num_gpus)), dim
        assert all(len(g) == layout.sizes[dim] for g in layout.groups[dim])
        for i, g in enumerate(layout.groups[dim]):
            assert all(layout.group_of(dim, r) == g for r in g)
            assert all(layout.group_index(dim, r) == i for r in g)
    # Ranks that share a TP, CP, DP and PP index are the same rank (the grid is a bijection).
    coords = {
        tuple(layout.coordinates(r)[d] for d in ("tp", "cp", "dp", "pp")) for r in range(p.num_gpus)
    }
    assert len(coords) == p.num_gpus


def test_expert_groups_regroup_the_dense_ones() -> None:
    # 32 GPUs, tp=4, dp=8, experts over ep=8 with etp=1: an EP group is 8 consecutive ranks
    # (two TP groups), expert data parallelism strides over them.
    layout = rank_layout(Parallelism(tp=4, dp=8, ep=8, etp=1), gpus_per_node=8)
    assert layout.groups["ep"][0] == tuple(range(8))
    assert layout.sizes["edp"] == 4 and layout.groups["edp"][0] == (0, 8, 16, 24)


def test_names_nodes_and_large_clusters() -> None:
    assert gpu_name(11, 8) == "n1_g3"
    layout = rank_layout(Parallelism(tp=8, pp=16, dp=128), gpus_per_node=8, listed=3)
    assert not layout.complete and layout.world == 16384
    assert layout.groups["pp"] == tuple(tuple(b + 1024 * i for i in range(16)) for b in range(3))
    assert layout.group_of("dp", 16383)[-1] == 16383
    assert layout.nodes_spanned("tp") == 1 and layout.nodes_spanned("pp") == 16
    with pytest.raises(SpecError):
        rank_layout(Parallelism(tp=2, dp=3, ep=4), gpus_per_node=8)


def test_api_page_and_cli_show_the_same_groups() -> None:
    from fastapi.testclient import TestClient

    from app.cli.commands import main
    from app.main import app

    client = TestClient(app)
    plan = {"model": "llama-3-70b", "num_gpus": 16, "layout": {"tp": 2, "pp": 4}}
    body = client.post("/api/v1/training/ranks", json=plan).json()
    dims = {d["dimension"]: d for d in body["dimensions"]}
    assert dims["dp"]["listed"][:2] == [["n0_g0", "n0_g2"], ["n0_g1", "n0_g3"]]
    assert dims["pp"]["listed"][0] == ["n0_g0", "n0_g4", "n1_g0", "n1_g4"]
    assert dims["pp"]["nodes_per_group"] == 2 and body["complete"]
    bad = client.post(
        "/api/v1/training/ranks", json={**plan, "num_gpus": 12, "layout": {"tp": 3, "pp": 4}}
    )
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "layout.tp"
    big = client.post(
        "/api/v1/training/ranks",
        json={"model": "llama-3-70b", "num_gpus": 2**20, "layout": {"tp": 8, "pp": 16}},
    ).json()
    assert not big["complete"]
    dp = next(d for d in big["dimensions"] if d["dimension"] == "dp")
    assert dp["size"] == 8192 and len(dp["listed"][0]) == 256  # listed, not all
    rows = client.post("/api/v1/training/ranks?format=csv", json=plan).text.splitlines()
    assert rows[0].startswith("rank,gpu,tp_group,cp_group,dp_group,pp_group")
    # rank 4: third TP group, its own CP group, third DP group [4, 6], first PP group [0, 4, 8, 12]
    assert len(rows) == 17 and rows[5] == "4,n0_g4,2,4,2,0,0,0,0,1"
    page = client.get("/training?model=llama-3-70b&num_gpus=16&tp=2&pp=4").text
    assert 'id="fig-ranks"' in page
    assert main(["ranks", "--tp", "2", "--pp", "4", "--dp", "2"]) == 0
