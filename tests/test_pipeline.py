"""Uneven pipeline splits as Megatron-Core and DeepSpeed make them, and what follows them:
memory on the most-loaded stage, the bubble, the per-layer table and the API answer."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from estimator import (
    Parallelism,
    SpecError,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.layout.pipeline import SplitSettings, model_split, parse_layout, pipeline_split
from estimator.layout.sharding import stage_kind_counts
from estimator.timing.training import estimate_training

API = "/api/v1"


@pytest.mark.parametrize(
    ("layers", "pp", "vp", "rule", "stages"),
    [
        # Llama-3.1-405B, 126 layers at pp=8 vp=8: embedding and loss counted, 2 per chunk.
        (126, 8, 8, "embedding_loss", (1, *([2] * 62), 1)),
        # 80 layers over 3 ranks: the embedding alone makes 81 = 3 x 27.
        (80, 3, 1, "embedding_loss", (26, 27, 27)),
        # DeepSeek-V3, 61 layers over 16: first/last layers with 4 on every middle rank.
        (61, 16, 1, "first_last", (1, *([4] * 14), 4)),
        (61, 8, 1, "first_last", (5, *([8] * 7))),
        (32, 4, 2, "even", (4,) * 8),
    ],
)
def test_auto_takes_the_first_megatron_rule_that_fits(
    layers: int, pp: int, vp: int, rule: str, stages: tuple[int, ...]
) -> None:
    split = pipeline_split(layers, pp, vp)
    assert split.rule == rule and split.stage_layers == stages
    assert sum(split.stage_layers) == layers


def test_megatron_rules_refuse_what_megatron_refuses() -> None:
    with pytest.raises(SpecError, match="divisible"):
        pipeline_split(80, 3, 1, "even")
    with pytest.raises(SpecError, match="middle stages"):
        pipeline_split(61, 4, 1, "first_last", SplitSettings(first_stage_layers=11))
    with pytest.raises(SpecError, match="vp=4"):
        pipeline_split(
            61, 4, 4, "first_last", SplitSettings(first_stage_layers=13, last_stage_layers=16)
        )
    with pytest.raises(SpecError, match="exceed the 61 layers"):
        pipeline_split(61, 32, 2)  # 64 virtual stages for 63 items


def test_auto_falls_back_to_a_balanced_layout() -> None:
    # 61 layers over 4 ranks of 4 chunks: no rule divides (each rank's layers must divide by
    # vp), so auto writes a layout, as Megatron-Bridge's DeepSeek-V3 recipes do.
    split = pipeline_split(61, 4, 4)
    assert split.rule == "layout" and sum(split.stage_layers) == 61
    assert max(split.stage_layers) - min(split.stage_layers) <= 2  # E and L take a slot each
    text = split.description.rsplit(": ", 1)[1]
    assert (
        pipeline_split(61, 4, 4, "layout", SplitSettings(layout=text)).stage_layers
        == split.stage_layers
    )


def test_explicit_first_and_last_stage_layers() -> None:
    split = pipeline_split(126, 8, 1, "first_last", SplitSettings(first_stage_layers=14))
    assert split.stage_layers == (14, *([16] * 7))
    split = pipeline_split(
        64, 4, 2, "first_last", SplitSettings(first_stage_layers=8, last_stage_layers=8)
    )
    # per rank 8, 24, 24, 8; two chunks each, in virtual-stage order (chunk-major)
    assert split.stage_layers == (4, 12, 12, 4, 4, 12, 12, 4)


def test_layout_string_as_megatron_parses_it() -> None:
    assert parse_layout("Et|(tt|)*2,L") == ["Et", "tt", "tt", "L"]
    split = pipeline_split(61, 16, 2, "layout", SplitSettings(layout="Et|(tt|)*30,L"))
    assert split.stage_layers == (1, *([2] * 30), 0)
    with pytest.raises(SpecError, match="places 62 decoder layers"):
        pipeline_split(61, 16, 2, "layout", SplitSettings(layout="Et|(tt|)*30,tL"))
    with pytest.raises(SpecError, match="multiple of pp"):
        pipeline_split(61, 3, 1, "layout", SplitSettings(layout="Et|(tt|)*30,L"))
    with pytest.raises(SpecError, match="unknown layer characters"):
        pipeline_split(2, 1, 2, "layout", SplitSettings(layout="Ex|tL"))


def test_deepspeed_partitions() -> None:
    assert pipeline_split(10, 3, 1, "uniform").stage_layers == (4, 3, 3)
    # parameters: a heavy embedding and head take layers off the first and last ranks
    weights = [50, *([10] * 10), 50]
    split = pipeline_split(10, 3, 1, "parameters", layer_weights=weights)
    assert split.stage_layers == (2, 7, 1)
    loads = [50 + 2 * 10, 7 * 10, 10 + 50]
    assert max(loads) == 70  # the lightest heaviest rank: 200 over 3 needs at least 67 -> 70
    with pytest.raises(SpecError, match="vp must be 1"):
        pipeline_split(10, 2, 2, "uniform")


def test_stage_counts_follow_the_split() -> None:
    model = get_model("deepseek-v3")  # 3 dense layers, then 58 MoE layers
    split = model_split(model, 8, 1)
    assert split is not None and split.stage_layers == (5, *([8] * 7))
    counts = [stage_kind_counts(model, 8, 1, r, split.stage_layers) for r in range(8)]
    assert [sum(c) for c in counts] == [5, *([8] * 7)]
    assert counts[0] == [3, 2] and counts[1] == [0, 8]  # dense layers on the first rank


def test_uneven_layouts_estimate_on_their_most_loaded_stage() -> None:
    model = get_model("llama-3-70b")
    setup = TrainingSetup(seq_len=4096, micro_batch_size=1, global_batch_size=64)
    h100, bf16 = get_accelerator("h100-sxm-80gb"), get_precision("bf16")
    split = model_split(model, 3, 1)
    assert split is not None and split.stage_layers == (26, 27, 27)
    uneven = Parallelism(tp=8, pp=3, dp=2, stage_layers=split.stage_layers)
    e = estimate_training(model, h100, uneven, setup, bf16)
    # 1F1B keeps pp micro-batches in flight on the first stage: it stays the most loaded with
    # a layer fewer; its 26 layers' weights are what it holds.
    assert e.memory.stage == 0
    per_layer = e.memory.params_on_gpu  # one stage's share
    whole = estimate_training(model, h100, Parallelism(tp=8, pp=1, dp=2), setup, bf16)
    assert per_layer < whole.memory.params_on_gpu * 27 / 80
    # A split with one heavy stage is slower than its even counterpart: the heavy stage sets
    # the pace and the others fill and drain around it.
    even = estimate_training(model, h100, Parallelism(tp=8, pp=4, dp=2), setup, bf16)
    lopsided = Parallelism(tp=8, pp=4, dp=2, stage_layers=(10, 10, 10, 50))
    heavy = estimate_training(model, h100, lopsided, setup, bf16)
    assert heavy.time.step_s > even.time.step_s
    assert heavy.memory.total_bytes > even.memory.total_bytes
    with pytest.raises(SpecError, match="pipeline split"):
        bad = Parallelism(tp=8, pp=4, dp=2, stage_layers=(10, 10, 10))
        estimate_training(model, h100, bad, setup, bf16)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def _estimate(client: TestClient, layout: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {"model": "deepseek-v3", "num_gpus": 1024, "layout": layout, **extra}
    answer = client.post(API + "/training/estimate", json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_api_answers_name_the_split(client: TestClient) -> None:
    auto = _estimate(client, {"pp": 16, "ep": 64}, global_batch_size=1024)
    assert auto["layout"]["pipeline_split"] == "first_last"
    assert auto["layout"]["stage_layers"] == [1, *([4] * 15)]
    assert "decoder_first_pipeline_num_layers=1" in auto["notes"][0]
    layout = _estimate(
        client,
        {
            "pp": 16,
            "vp": 2,
            "ep": 64,
            "pipeline_split": "layout",
            "pipeline_layout": "Et|(tt|)*30,L",
        },
        global_batch_size=1024,
    )
    assert layout["layout"]["stage_layers"] == [1, *([2] * 30), 0]
    ranks = client.post(
        API + "/training/ranks",
        json={"model": "deepseek-v3", "num_gpus": 1024, "layout": {"pp": 16, "ep": 64}},
    )
    assert ranks.status_code == 200
    for path in ("/training/layers", "/training/comms", "/training/timeline"):
        body = {"model": "deepseek-v3", "num_gpus": 1024, "layout": {"pp": 16, "ep": 64}}
        assert client.post(API + path, json=body).status_code == 200, path


def test_page_and_cli_take_the_split_fields(client: TestClient) -> None:
    page = client.get(
        "/training",
        params={"model": "llama-3-70b", "num_gpus": "24", "tp": "8", "pp": "3"},
    )
    assert page.status_code == 200 and 'id="verdict"' in page.text
    assert "account_for_embedding_in_pipeline_split" in page.text
    assert 'name="pipeline_split"' in client.get("/training").text


def test_zero3_with_a_stage_of_the_embedding_alone() -> None:
    """A stage holding only the embedding (0 decoder layers, an uneven split) under ZeRO-3 has
    no layer to gather: the step time counts none there instead of dividing by zero (the API
    fuzz test found a layout whose slowest stage was such a stage)."""
    from estimator.context import Context
    from estimator.timing.training import Held, TimingOptions, training_time_terms

    model = get_model("llama-3-8b")
    p = Parallelism(tp=1, pp=2, dp=2, zero_stage=3, stage_layers=(0, model.num_layers))
    setup = TrainingSetup(4096, 1, 2)
    c = Context.of(model, get_accelerator("h100-sxm-80gb"), p, get_precision("bf16"))
    t = training_time_terms(c, setup, Held(1e9, 8e9), (0,), TimingOptions())
    assert t["stage"] == 0 and t["zero3_comm"] == 0.0 and t["step_s"] > 0
