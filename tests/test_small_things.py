"""Small things a user trips on (issue 39, item 9): words of one-stage plans, the reason a TP
size is refused, the CLI's fit word at the sweep's free share, and an accuracy page that says
where the planner is weak."""

from __future__ import annotations

import contextlib
import io
import re

from fastapi.testclient import TestClient

from app.accuracy import NEAR_LIMITS, report_view
from app.cli import main
from app.main import app
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.memory.timeline import training_timeline
from estimator.memory.verdict import MIN_HEADROOM

client = TestClient(app)


def test_a_one_stage_timeline_has_no_pipeline_words() -> None:
    """pp = 1: no "1F1B", no "stage 1 of 1", and plurals spelled (micro-batches)."""
    m, acc, bf16 = get_model("llama-3-8b"), get_accelerator("h100-sxm-80gb"), get_precision("bf16")
    timeline = training_timeline(m, acc, Parallelism(dp=8), TrainingSetup(4096, 1, 64), bf16)
    words = " ".join([p.label for p in timeline.points] + list(timeline.notes))
    assert "1F1B" not in words and "Pipeline stage" not in words
    assert "batchs" not in words and "micro-batches" in words
    piped = training_timeline(
        get_model("llama-3-70b"), acc, Parallelism(tp=8, pp=4, dp=2), TrainingSetup(4096, 1, 64),
        bf16,
    )  # fmt: skip
    words = " ".join([p.label for p in piped.points] + list(piped.notes))
    assert "1F1B" in words and "Pipeline stage" in words and "batchs" not in words


def test_tp_3_on_64_gpus_is_refused_by_the_heads_rule() -> None:
    """The README promises "tp=3 must divide num_attention_heads=32"; the GPU count was blamed."""
    r = client.post(
        "/api/v1/training/estimate",
        json={"model": "llama-3-8b", "num_gpus": 64, "layout": {"tp": 3}},
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "layout.tp"
    assert "tp=3 must divide num_attention_heads=32" in r.json()["message"]
    r = client.post(  # a size the heads allow, that 64 GPUs do not: the GPU count's rule
        "/api/v1/training/estimate",
        json={"model": "llama-3-8b", "num_gpus": 64, "layout": {"tp": 4, "pp": 3}},
    )
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "num_gpus"


def _cli(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(list(args))
    return out.getvalue()


def test_the_cli_calls_a_plan_under_the_sweeps_free_share_tight() -> None:
    """The CLI said "fits: yes" at 3.5% free where the sweep calls under 5% tight."""
    from app.cli.tables import _headroom, _serving_fit

    loose = _cli("infer", "--model", "llama-3-8b", "--accelerator", "h100-sxm-80gb")
    assert loose.splitlines()[1].startswith("fits: yes")
    gib = 2**30
    snug = {"fits": True, "headroom_bytes": 0.035 * 80 * gib, "capacity_bytes": 80 * gib}
    assert MIN_HEADROOM == 0.05 and _serving_fit(snug) == "TIGHT"
    assert _headroom(snug) == "2.80 GiB free, 3.5%, tight: under the 5% the sweep keeps free"
    roomy = snug | {"headroom_bytes": 0.2 * 80 * gib}
    assert _serving_fit(roomy) == "yes" and "tight" not in _headroom(roomy)
    assert _serving_fit(snug | {"fits": False}) == "NO"


def test_the_accuracy_page_says_where_the_planner_is_weak() -> None:
    """Latency near a server run's limits (MLPerf) is summarized apart from the rest, and the
    page says in words where the planner is weak; every record is behind one disclosure."""
    view = report_view({})
    near = [s for s in view["by_condition"] if s["name"] == NEAR_LIMITS and "ttft" in s["kind"]]
    below = [s for s in view["by_condition"] if s["name"] != NEAR_LIMITS and "ttft" in s["kind"]]
    assert near and below and near[0]["median_ape"] > below[0]["median_ape"]
    assert any(w.startswith("TTFT under load near a server run") for w in view["weak"])
    page = client.get("/accuracy").text
    weak = re.search(r'<section id="weak-spots">(.*?)</section>', page, re.S)
    assert weak is not None and "TTFT under load near" in weak.group(1)
    assert 'id="accuracy-by-condition"' in page
    assert re.search(r'<details id="records-details">', page)  # closed: 1,700 rows
    narrow = client.get("/accuracy", params={"kind": "training", "group": ""}).text
    assert "TTFT under load" not in re.search(  # type: ignore[union-attr]
        r'<section id="weak-spots">(.*?)</section>', narrow, re.S
    ).group(1)


def test_a_training_fp8_recipe_in_a_serving_plan_says_its_weights_are_not_fp8() -> None:
    """The "fp8" preset is Transformer Engine's training recipe (bf16 weights, fp8 GEMM copies):
    a serving plan given it counts bf16 weights in memory, which a served FP8 checkpoint does not
    hold; the answer says so and names the serving preset, which gets no such note."""

    def recipe_notes(precision: str, accelerator: str = "h100-sxm-80gb") -> list[str]:
        body = {"model": "llama-3.1-70b", "accelerator": accelerator, "layout": {"tp": 2},
                "precision": precision, "input_len": 2048, "output_len": 512}  # fmt: skip
        r = client.post("/api/v1/inference/estimate", json=body)
        assert r.status_code == 200, r.text
        return [n for n in r.json()["notes"] if "training recipe" in n]

    (note,) = recipe_notes("fp8")
    assert "bf16" in note and "as fp8-serving" in note
    # no mxfp8 serving preset: only the weights' format is named (on a B200: Hopper has no MXFP8)
    (note,) = recipe_notes("mxfp8", "b200")
    assert "-serving" not in note and '{"weights": "mxfp8"}' in note
    assert recipe_notes("fp8-serving") == [] and recipe_notes("bf16") == []
