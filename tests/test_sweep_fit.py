"""The training sweep's fit verdict is the single plan's (issue 21: "fits" called with the
estimate's error): where published peak-memory measurements of the stack bound the estimate
(FSDP2's), a layout whose likely peak crosses its GPU's memory is `tight` and not recommended;
a layout whose offloaded state overflows its host does not fit, as a single plan does not."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.web.planners import _planner_url
from estimator import get_model
from estimator.offload import Offload
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training

API = "/api/v1"


def _verdicts(client: TestClient, query: dict[str, str]) -> list[tuple[dict, dict]]:
    """Every evaluated row of a sweep with the planner's answer behind the link its page gives
    it."""
    body = {"model": query["model"], "accelerator": query["accelerator"],
            "num_gpus": int(query["num_gpus"]), "stack": query["stack"],
            "layout": {"tp": int(query["tp"]), "pp": int(query["pp"])},
            "min_headroom": float(query["min_headroom"]), "rows": "evaluated",
            "page_size": 1000}  # fmt: skip
    rows = client.post(f"{API}/training/sweep", json=body).json()["rows"]
    out = []
    for row in rows:
        params = dict(parse_qsl(urlsplit(_planner_url(row, query)).query))
        out.append((row, client.get("/training", params=params | {"format": "json"}).json()))
    return out


def test_a_rows_verdict_is_the_planners_and_tight_rows_are_not_recommended() -> None:
    client = TestClient(app)
    query = {"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": "8",
             "tp": "1", "pp": "1", "stack": "fsdp2", "min_headroom": "0.02"}  # fmt: skip
    pairs = _verdicts(client, query)
    assert len(pairs) > 20
    seen = set()
    for row, plan in pairs:
        assert row["fit"] == plan["memory_per_gpu"]["fit"], (row, plan["memory_per_gpu"])
        assert row["memory_bytes"] == plan["memory_per_gpu"]["total_bytes"]
        seen.add(row["fit"])
    assert {"fits", "tight"} <= seen  # FSDP2's measured peaks put some in between
    body = client.post(
        f"{API}/training/sweep",
        json={"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": 8,
              "layout": {"tp": 1, "pp": 1}, "stack": "fsdp2", "min_headroom": 0.02},
    ).json()  # fmt: skip
    counts = body["counts"]
    assert counts["tight"] > 0
    assert counts["evaluated"] == sum(
        counts[k]
        for k in ("out_of_memory", "tight", "under_headroom", "past_deadline", "over_budget",
                  "feasible")
    )  # fmt: skip
    assert all(r["row"]["fit"] == "fits" for r in body["recommendations"])
    page = client.get("/sweep", params=query).text
    assert 'id="tight-count"' in page and "tight (their likely peak" in page
    # without measurements of the stack near the plan, the named overheads decide, as before
    mcore = client.post(
        f"{API}/training/sweep",
        json={"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": 8,
              "layout": {"tp": 1, "pp": 1}, "stack": "megatron-core", "rows": "evaluated",
              "page_size": 1000},
    ).json()  # fmt: skip
    assert mcore["counts"]["tight"] == 0
    for r in mcore["rows"]:
        assert (r["fit"] == "fits") == r["fits"]


def test_the_core_sweep_takes_the_range_as_factors_and_the_host_decides_too() -> None:
    model = get_model("llama-3-8b")
    work = TrainingWorkload(seq_len=4096, global_batch_size=64)
    space = TrainingSearch(accelerators=("h100-sxm-80gb",), num_gpus=(8,), tp=(1,), pp=(1,))
    plain = sweep_training(model, work, space)
    ranged = sweep_training(model, work, space, peak_range=lambda acc, stack, gpus: (1.0, 1.2))
    total, cap = plain.column("memory_bytes"), plain.column("capacity_bytes")
    codes = ranged.column("fit")
    np.testing.assert_array_equal(codes == 0, (total * 1.2 <= cap) & (total <= cap))
    assert ranged.counts["tight"] == int(((codes == 1) & (total <= cap)).sum()) > 0
    assert ranged.counts["feasible"] < plain.counts["feasible"]
    # a host too small for the offloaded optimizer: no layout fits, as no single plan would
    small = Offload(optimizer=True, host_memory_gb_per_gpu=1)
    starved = sweep_training(model, TrainingWorkload(4096, 64, offload=small), space)
    assert starved.counts["feasible"] == 0
    assert set(starved.column("fit").tolist()) == {2}
    assert not starved.column("fits").any()


@pytest.mark.parametrize("stack", ["fsdp2", "megatron-core"])
def test_verdict_columns_are_in_the_csv(stack: str) -> None:
    client = TestClient(app)
    csv = client.post(
        f"{API}/training/sweep?format=csv",
        json={"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": 8,
              "layout": {"tp": 1, "pp": 1}, "stack": stack},
    ).text  # fmt: skip
    header = csv.splitlines()[0].split(",")
    assert "fit" in header
    values = {line.split(",")[header.index("fit")] for line in csv.splitlines()[1:]}
    assert values <= {"fits", "tight", "does_not_fit"} and "fits" in values


def test_a_tight_plan_gets_the_nearest_layouts_that_surely_fit() -> None:
    """A plan whose likely peak crosses its GPU's memory is offered the nearest layouts whose
    own verdict is fits (not merely under the card by the planner's figure), page and API."""
    client = TestClient(app)
    req = {"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": 8,
           "layout": {"tp": 1, "pp": 1, "zero_stage": 2}, "micro_batch_size": 2,
           "global_batch_size": 1024, "recompute": "none", "stack": "fsdp2"}  # fmt: skip
    answer = client.post(f"{API}/training/estimate", json=req).json()
    assert answer["memory_per_gpu"]["fit"] == "tight" and answer["memory_per_gpu"]["fits"]
    suggestions = answer["fit_suggestions"]
    assert suggestions
    for s in suggestions:
        layout_keys = {"tp", "pp", "zero_stage"}
        layout = req["layout"] | {k: v for k, v in s["changes"].items() if k in layout_keys}
        rest = {k: v for k, v in s["changes"].items() if k not in layout_keys}
        other = client.post(f"{API}/training/estimate", json=req | rest | {"layout": layout})
        assert other.json()["memory_per_gpu"]["fit"] == "fits", s
    query = {"model": "llama-3-8b", "accelerator": "h100-sxm-80gb", "num_gpus": "8", "tp": "1",
             "pp": "1", "zero_stage": "2", "micro_batch_size": "2", "global_batch_size": "1024",
             "recompute": "none", "stack": "fsdp2"}  # fmt: skip
    page = client.get("/training", params=query).text
    assert "Nearest layouts that fit within the estimate&#39;s error" in page or (
        "Nearest layouts that fit within the estimate's error" in page
    )
    assert "if it fits: it may not" in page
    # a plan that surely fits gets none
    sure = client.post(f"{API}/training/estimate", json=req | {"micro_batch_size": 1}).json()
    assert sure["memory_per_gpu"]["fit"] == "fits" and sure["fit_suggestions"] is None


def test_the_cli_lists_the_nearest_layouts_as_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli.commands import main

    args = ["train", "--model", "llama-3-8b", "--accelerator", "h100-sxm-80gb", "--gpus", "8",
            "--tp", "1", "--pp", "1", "--zero", "2", "--micro-batch-size", "2",
            "--global-batch-size", "1024", "--recompute", "none", "--stack", "fsdp2"]  # fmt: skip
    assert main(args) in (0, None)
    text = capsys.readouterr().out
    assert "fits: TIGHT" in text
    assert "nearest layouts that fit (the flags to change):" in text
    suggested = [
        line.split(":")[0].split() for line in text.splitlines() if line.startswith("  --")
    ]
    assert suggested and all(len(s) % 2 == 0 for s in suggested)  # flag, value pairs
    # each suggestion, run with its flags, surely fits
    for flags in suggested:
        changed = list(args)
        for name, value in zip(flags[::2], flags[1::2], strict=True):
            if name in changed:
                changed[changed.index(name) + 1] = value
            else:
                changed += [name, value]
        assert main(changed) in (0, None)
        assert "fits: yes" in capsys.readouterr().out, flags


def test_tight_layouts_are_drawn_apart_on_the_scatter() -> None:
    from app.web.charts import sweep_scatter_figure

    model = get_model("llama-3-8b")
    space = TrainingSearch(accelerators=("h100-sxm-80gb",), num_gpus=(8,), tp=(1,), pp=(1,))
    ranged = sweep_training(
        model, TrainingWorkload(4096, 64), space, peak_range=lambda acc, stack, gpus: (1.0, 1.2)
    )
    traces = {t["name"]: t for t in sweep_scatter_figure(ranged)["data"]}
    assert len(traces["tight"]["x"]) == ranged.counts["tight"] > 0
