"""Serving splits a model's layers over any ``pp`` as the engines do (issue 39, item 4).

The engines' rules, read from their source (``estimator/layout/pipeline.py`` cites each):

- vLLM ``vllm/distributed/utils.py`` ``get_pp_indices``: ``L // pp`` each, the remainder one
  each to ``partitions[-2]``, ``partitions[-3]``, ...
- SGLang ``python/sglang/srt/distributed/utils.py`` ``get_pp_indices`` (since PR #13977): the
  remainder one each to the last ranks.
- TensorRT-LLM ``tensorrt_llm/mapping.py`` ``pp_layers``: ``torch.tensor_split``, the first
  ranks one more.

The hand-worked splits below follow those lines of code; where the engines' own pull requests
print an example it is cited beside it.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.resolve import inference_plan
from app.schemas.inference import InferenceRequest
from estimator import get_accelerator, get_model
from estimator.errors import SpecError
from estimator.inputs.precision import get_precision
from estimator.layout.parallel import Parallelism, layout_violations, validate_layout
from estimator.layout.pipeline import (
    SERVING_SPLITS,
    serving_split,
    serving_stage_layers,
    sglang_stage_layers,
    trtllm_stage_layers,
    vllm_stage_layers,
)
from estimator.layout.sharding import distinct_stages, serving_layer_split
from estimator.memory.inference import InferenceSetup, inference_memory
from estimator.serving.estimate import estimate_inference
from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving

client = TestClient(app)
API = "/api/v1"
H100 = get_accelerator("h100-sxm-80gb")
# TP 8 x PP 2 on H100: two nodes, a standard DeepSeek-V3 deployment on vLLM and SGLang
DEEPSEEK_PP2 = {
    "model": "deepseek-v3",
    "accelerator": "h100-sxm-80gb",
    "layout": {"tp": 8, "pp": 2},
    "input_len": 2048,
    "output_len": 256,
    "concurrency": 32,
    "precision": {"weights": "fp8", "kv_cache": "fp8"},
}
# Names of layout fields a serving request does not have (training's only).
TRAINING_ONLY = re.compile(r"\bvp\b|pp\*vp|zero_stage|distributed_optimizer|pipeline_split|\betp\b")


def post(body: dict[str, Any]) -> Any:
    return client.post(f"{API}/inference/estimate", json=body)


# --- the engines' rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "pp", "split"),
    [
        (61, 2, (31, 30)),  # remainder 1 -> partitions[-2], the first of two
        (61, 3, (20, 21, 20)),
        (61, 4, (15, 15, 16, 15)),  # vLLM PR #46217's table, "before" (the current rule)
        (61, 8, (7, 7, 8, 8, 8, 8, 8, 7)),  # SGLang PR #6666 quotes it as vLLM's
        (94, 4, (23, 24, 24, 23)),  # vLLM PR #46217's table (Qwen3-235B)
        (11, 4, (3, 3, 3, 2)),  # remainder pp - 1: reaches partitions[-pp], the first
        (32, 4, (8, 8, 8, 8)),
    ],
)
def test_vllm_split_follows_get_pp_indices(layers: int, pp: int, split: tuple[int, ...]) -> None:
    assert vllm_stage_layers(layers, pp) == split


@pytest.mark.parametrize(
    ("layers", "pp", "split"),
    [
        (61, 2, (30, 31)),  # the remainder on the last rank
        (61, 3, (20, 20, 21)),
        (61, 4, (15, 15, 15, 16)),
        (61, 8, (7, 7, 7, 8, 8, 8, 8, 8)),
        (94, 4, (23, 23, 24, 24)),
        (32, 4, (8, 8, 8, 8)),
    ],
)
def test_sglang_split_follows_get_pp_indices(layers: int, pp: int, split: tuple[int, ...]) -> None:
    assert sglang_stage_layers(layers, pp) == split


@pytest.mark.parametrize(
    ("layers", "pp", "split"),
    [(61, 2, (31, 30)), (61, 4, (16, 15, 15, 15)), (61, 8, (8, 8, 8, 8, 8, 7, 7, 7))],
)
def test_trtllm_split_follows_pp_layers(layers: int, pp: int, split: tuple[int, ...]) -> None:
    assert trtllm_stage_layers(layers, pp) == split


def _sglang_ranges(layers: int, pp: int) -> list[tuple[int, int]]:
    """SGLang's ``get_pp_indices`` as it computes each rank's ``(start, end)``."""
    base, remainder = divmod(layers, pp)
    out = []
    for rank in range(pp):
        if rank >= pp - remainder:
            start = rank * (base + 1) - (pp - remainder)
            out.append((start, start + base + 1))
        else:
            out.append((rank * base, rank * base + base))
    return out


@pytest.mark.parametrize("layers", [*range(1, 40), 61, 62, 80, 94, 126, 128])
def test_every_rule_places_every_layer_once(layers: int) -> None:
    """For every pp up to the layers: one entry per rank, the layers in all, at most one
    apart; SGLang's counts tile its ranges end to end, TensorRT-LLM's are numpy's
    ``array_split`` (torch.tensor_split's rule)."""
    for pp in range(1, layers + 1):
        for rule, split_of in SERVING_SPLITS.items():
            split = split_of(layers, pp)
            assert len(split) == pp and sum(split) == layers, (rule, layers, pp)
            assert max(split) - min(split) <= 1 and min(split) >= 1, (rule, layers, pp)
            assert serving_split(layers, pp, rule).stage_layers == split
        bounds = np.cumsum((0, *sglang_stage_layers(layers, pp)))
        assert list(itertools.pairwise(bounds.tolist())) == _sglang_ranges(layers, pp)
        parts = np.array_split(np.arange(layers), pp)
        assert trtllm_stage_layers(layers, pp) == tuple(len(p) for p in parts)


def test_explicit_split_is_checked_as_the_engines_check_it() -> None:
    assert serving_split(61, 2, "vllm", (40, 21)).stage_layers == (40, 21)
    for partition, rule in [
        ((30, 30), "places 60 decoder layers"),
        ((61,), "gives 1 stages"),
        ((61, 0), "at least one layer"),
    ]:
        with pytest.raises(SpecError) as err:
            serving_split(61, 2, "sglang", partition)
        assert err.value.field == "layout.stage_layers" and rule in str(err.value)
    with pytest.raises(SpecError) as err:
        serving_split(61, 62)
    assert err.value.field == "layout.pp" and not TRAINING_ONLY.search(str(err.value))
    assert serving_stage_layers(get_model("llama-3-8b"), 4) is None  # 32 / 4: even


# --- DeepSeek-V3 at TP 8 x PP 2 -------------------------------------------------------------


def test_deepseek_v3_tp8_pp2_is_estimated_with_the_heavier_stage() -> None:
    """Refused before (pp*vp=2 must divide num_hidden_layers=61). vLLM puts 31 layers on the
    first rank, 30 on the second; the first three of DeepSeek-V3's layers are dense, so the
    second rank (30 MoE layers and the LM head) outweighs the first (28 MoE, 3 dense and the
    embedding): the memory is its."""
    r = post(DEEPSEEK_PP2)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["layout"]["stage_layers"] == [31, 30]
    memory = body["memory_per_gpu"]
    assert memory["stage"] == 1 and memory["fits"]
    assert any("Uneven pipeline split: 31 + 30" in n for n in body["notes"])
    plan = inference_plan(InferenceRequest.model_validate(DEEPSEEK_PP2))
    model, setup, precision = plan.model, plan.setup, plan.precision
    assert plan.parallel.stage_layers == (31, 30)

    def weights(split: tuple[int, int]) -> float:
        p = Parallelism(tp=8, pp=2, stage_layers=split)
        return inference_memory(model, H100, p, setup, precision).weights_bytes

    assert memory["weights_bytes"] == weights((31, 30))
    # each stage's own weights: the reported one is the larger
    shapes = distinct_stages(model, 2, (31, 30))
    assert [sum(s.counts) for s in shapes] == [31, 30]
    # one MoE layer more on the heavier stage weighs one MoE layer more (it stays the heavier)
    assert weights((30, 31)) - weights((31, 30)) == pytest.approx(
        weights((29, 32)) - weights((30, 31))
    )
    sglang = post({**DEEPSEEK_PP2, "engine": "sglang"}).json()
    assert sglang["layout"]["stage_layers"] == [30, 31]
    assert sglang["memory_per_gpu"]["weights_bytes"] == weights((30, 31))
    given = post({**DEEPSEEK_PP2, "layout": {"tp": 8, "pp": 2, "stage_layers": [29, 32]}})
    assert given.json()["memory_per_gpu"]["weights_bytes"] == weights((29, 32))


# --- the most loaded stage sets the memory and the step ---------------------------------------


def test_the_most_loaded_stage_sets_memory_and_step() -> None:
    """Llama-3-8B (32 alike layers) over pp 2, ``a`` layers on the first stage: from 19 on the
    first stage is the heaviest and the slowest, and each layer more on it adds one layer's
    weights to the memory and one layer's time to the TPOT (the pipeline runs at its slowest
    stage). Mirrored, the last stage (with the LM head) is heavier and slower still; and the
    head is why vLLM spares the last rank: 17 + 15 decodes faster than 16 + 16."""
    model = get_model("llama-3-8b")
    setup = InferenceSetup(1024, 128, 8)
    prec = get_precision("bf16")

    def run(stage_layers: tuple[int, int] | None) -> Any:
        p = Parallelism(pp=2, stage_layers=stage_layers)
        return estimate_inference(model, H100, p, setup, prec)

    firsts = (19, 20, 21, 22)
    runs = [run((a, 32 - a)) for a in firsts]
    assert [r.memory.stage for r in runs] == [0] * len(firsts)
    for values in ([r.memory.weights_bytes for r in runs], [r.tpot_s for r in runs]):
        steps = np.diff(values)
        assert steps[0] > 0 and steps == pytest.approx(np.full(len(steps), steps[0]), rel=1e-6)
    mirrored = run((10, 22))
    assert mirrored.memory.stage == 1
    assert mirrored.memory.weights_bytes > runs[-1].memory.weights_bytes
    assert mirrored.tpot_s > runs[-1].tpot_s
    assert run((17, 15)).tpot_s < run(None).tpot_s


# --- no serving refusal names a training-only field -------------------------------------------


@pytest.mark.parametrize(
    ("layout", "status", "field", "says"),
    [
        ({"tp": 8, "pp": 2}, 200, None, ""),
        ({"tp": 8, "pp": 62}, 422, "layout.pp", "pp=62 exceeds num_hidden_layers=61"),
        ({"tp": 8, "pp": 2, "stage_layers": [31, 31]}, 422, "layout.stage_layers", "places 62"),
        ({"tp": 8, "pp": 2, "stage_layers": [61]}, 422, "layout.stage_layers", "gives 1 stages"),
    ],
)
def test_serving_refusals_name_serving_fields(
    layout: dict[str, Any], status: int, field: str | None, says: str
) -> None:
    r = post({**DEEPSEEK_PP2, "layout": layout})
    assert r.status_code == status, r.text
    if field is not None:
        detail = r.json()["detail"][0]
        assert detail["field"] == field and says in detail["rule"], r.text
        assert not TRAINING_ONLY.search(r.text), r.text


@pytest.mark.parametrize("model_id", ["llama-3-70b", "deepseek-v3", "mixtral-8x7b", "gpt2"])
def test_no_serving_layout_rule_names_a_training_field(model_id: str) -> None:
    """Every serving layout of a grid: a pp that does not divide the layers is taken, and
    whatever is refused is worded with the serving request's own fields."""
    model = get_model(model_id)
    for tp in (1, 2, 3, 8, 16):
        for pp in (1, 2, 3, 5, 7, model.num_layers + 1):
            for ep in (1, 2, 8):
                layout = {"tp": tp, "pp": pp, "dp": 1, "cp": 1, "ep": ep, "etp": tp, "vp": 1}
                rules = layout_violations(model, Parallelism(**layout), training=False)
                for field, broken, rule, _ in rules:
                    if broken:
                        assert not TRAINING_ONLY.search(f"{field} {rule}"), (layout, rule)
                pipeline = [r for r in rules if r[0] == "layout.pp"]
                assert [bool(r[1]) for r in pipeline] == [pp > model.num_layers]
                try:
                    validate_layout(model, Parallelism(tp=tp, pp=pp, ep=ep), training=False)
                except SpecError as exc:
                    assert not TRAINING_ONLY.search(f"{exc.field} {exc}"), (layout, exc)


def test_the_serving_sweep_tries_an_uneven_pp() -> None:
    """Llama-3-8B's 32 layers over pp 3 (vLLM: 11, 11, 10; SGLang: 10, 11, 11) is a row the
    sweep serves, not one it refuses."""
    model = get_model("llama-3-8b")
    space = ServingSearch(accelerators=("h100-sxm-80gb",), tp=(1,), pp=(3,), precision=("bf16",))
    for engine in ("vllm", "sglang"):
        (row,) = sweep_serving(model, ServingWorkload(1024, 128, engine=engine), space).rows
        assert row["ok"], row
    assert serving_layer_split(model, 3) == (11, 11, 10)
