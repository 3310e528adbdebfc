"""The AMD Instinct records (validation/data/amd_measured.json) and the planner against them
(validation/amd.py).

Every record carries its source and the configuration it ran; the throughputs are consistent
with what each record says it read. The achieved median APE per kind is pinned as a ceiling (a
point above validation/amd.py's output), so a change that drifts is seen; the vendor constants in
use (estimator/timing/vendor.py) are checked to be a fresh fit, and the fit on rows whose answer
is known.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from estimator.timing import vendor
from validation import amd, report
from validation.report import Row

_SERVING_LOAD = amd.DATA.parent / "serving_load_measured.json"


@pytest.fixture(scope="module")
def section() -> dict[str, Any]:
    return amd.build()


def _summary(section: dict[str, Any], table: str) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in section["summary"][table]}


def test_every_record_carries_its_source_and_configuration() -> None:
    recs = amd.records()
    assert len({r["id"] for r in recs}) == len(recs)
    for r in recs:
        for key in ("source", "url", "config_source", "system_source", "reliability"):
            assert str(r.get(key) or "").strip(), (r["id"], key)
        assert "@" in r["source"] and r["url"].startswith("https://github.com/"), r["id"]
        assert r["accelerator"] in ("mi250x", "mi300x", "mi325x", "mi355x"), r["id"]
        assert r["model"] and r["precision"] and r["num_gpus"] >= 1, r["id"]
        if r["kind"] == "training":
            p = r["parallel"]
            assert p["tp"] * p["pp"] * p["cp"] * p["dp"] == r["num_gpus"], r["id"]
            assert r["seq_len"] and r["micro_batch_size"] and r["global_batch_size"], r["id"]
            assert r["framework"] and r["stack_version"], r["id"]
            m = r["measured"]
            tokens = m["samples_per_s"] * r["seq_len"] / r["num_gpus"]
            assert m["tokens_per_s_per_gpu"] == pytest.approx(tokens, rel=1e-4), r["id"]
        else:
            assert r["kind"] == "serving", r["id"]
            assert r["tp"] * r["pp"] * r["instances"] == r["num_gpus"], r["id"]
            assert r["engine"] and r["engine_version"] and r["length_distribution"], r["id"]
            m = r["measured"]
            assert r["quote"] == f"Tokens per second: {_tokens(m)}", r["id"]
            assert m["result_validity"] == "VALID", r["id"]


def _tokens(measured: dict[str, Any]) -> str:
    value = measured["output_tokens_per_s"]
    return f"{value:g}" if value != int(value) else f"{int(value)}"


def test_at_least_ten_runs_of_each_kind_on_three_generations() -> None:
    recs = amd.records()
    for kind in amd.KINDS:
        mine = [r for r in recs if r["kind"] == kind]
        assert len(mine) >= 10, kind
    training = {r["accelerator"] for r in recs if r["kind"] == "training"}
    assert training == {"mi300x", "mi325x", "mi355x"}


def test_offline_runs_do_not_repeat_the_serving_load_records() -> None:
    load = json.loads(_SERVING_LOAD.read_text(encoding="utf-8"))["records"]
    load_sources = {str(r["source"]).split(":")[1] for r in load}
    for r in amd.records():
        if r["kind"] == "serving":
            assert r["source"].split(":")[1] not in load_sources, r["id"]
            assert "/Offline/" in r["source"], r["id"]


def test_every_record_is_compared(section: dict[str, Any]) -> None:
    assert not section["skipped"], section["skipped"]
    kinds = _summary(section, "AMD by kind")
    assert kinds["training"]["n"] >= 24 and kinds["serving"]["n"] >= 25


def test_median_ape_per_kind_does_not_rise(section: dict[str, Any]) -> None:
    kinds = _summary(section, "AMD by kind")
    # amd.py with timing.vendor's CDNA 3 factors: training 7.5% (30.2% without), serving 3.5%
    # (35.3% without); per part training MI300X 2.2% (46.7%), MI325X 15.9% (20.8%), MI355X 9.4%
    # (no factor: CDNA 4 has 6 runs), serving MI300X 11.7% (51.2%), MI325X 2.8% (31.5%)
    assert kinds["training"]["median_ape"] <= 0.08
    assert kinds["serving"]["median_ape"] <= 0.04
    assert abs(kinds["serving"]["median_signed"]) < 0.01  # its one group is all fitted
    by_acc = _summary(section, "AMD by kind and accelerator")
    ceilings = {
        "training / mi300x": 0.03,
        "training / mi325x": 0.17,
        "training / mi355x": 0.10,
        "serving / mi300x": 0.125,
        "serving / mi325x": 0.03,
    }
    for name, ceiling in ceilings.items():
        assert by_acc[name]["median_ape"] <= ceiling, name
    # MI355X is left unscaled: still over-predicted as the kernel model stands
    assert by_acc["training / mi355x"]["median_signed"] > 0


def test_vendor_constant_reported_with_its_leave_one_source_out_error(
    section: dict[str, Any],
) -> None:
    constants = {(c.kind, c.generation): c for c in section["vendor constants"]}
    assert set(constants) == {("training", "cdna3"), ("serving", "cdna3")}
    for c in constants.values():
        assert c.factor > 1  # the borrowed H100 curves are fast on CDNA 3: time scales up
        assert c.n >= vendor.MIN_GROUP_RUNS and c.sources >= 10
        assert c.median_ape <= c.loso_median_ape <= c.loso_p90_ape
        assert c.median_ape < c.unscaled_median_ape


def test_constants_in_use_are_a_fresh_fit(section: dict[str, Any]) -> None:
    """timing.vendor's constants are what amd.py fits now (to the third decimal), with the
    group size, sources and held-out error their notes quote."""
    tables = {"training": vendor.TRAINING_COMPUTE_SCALE, "serving": vendor.SERVING_STEP_SCALE}
    for c in section["vendor constants"]:
        used = tables[c.kind][("amd", c.generation)]
        assert used.scale == c.adopted
        assert round(c.factor, 3) == pytest.approx(used.scale, abs=1e-9), c.kind
        assert (used.n, used.sources) == (c.n, c.sources), c.kind
        assert round(c.loso_median_ape, 3) == pytest.approx(used.loso_median_ape), c.kind


def _row(ident: str, measured: float, predicted: float) -> Row:
    return Row("serving", "g", "mi300x", "llama", ident, measured, predicted, "tokens/s")


def test_vendor_constant_on_known_rows() -> None:
    # predicted / measured: 2, 2 (source a), 1 (source b): the time factor is their median, 2;
    # without a it is 1 (a's rows then err by +100%), without b it is 2 (b errs by -50%)
    rows = [_row("a1", 1, 2), _row("a2", 2, 4), _row("b1", 3, 3)]
    c = amd.vendor_constant(rows, "serving", {"a1": "a", "a2": "a", "b1": "b"})
    assert c.factor == pytest.approx(2.0)
    assert c.median_ape == pytest.approx(0.0)
    assert c.unscaled_median_ape == pytest.approx(1.0)
    assert c.loso_median_ape == pytest.approx(1.0)
    assert c.loso_p90_ape == pytest.approx(1.0)
    # rows already carrying a factor of 2: the fit on top of it says 2 again
    exact = [_row("a1", 1, 1), _row("b1", 1, 1)]
    c = amd.vendor_constant(exact, "serving", {"a1": "a", "b1": "b"}, adopted=2.0)
    assert c.factor == pytest.approx(2.0) and c.unscaled_median_ape == pytest.approx(1.0)
    with pytest.raises(ValueError):
        amd.vendor_constant(rows, "serving", dict.fromkeys(("a1", "a2", "b1"), "a"))


def test_source_is_the_submitters_round() -> None:
    by_id = {r["id"]: r for r in amd.records()}
    names = {amd.source_of(r) for r in by_id.values()}
    assert "mlperf_training_v5.1_closed / AMD" in names
    assert "mlperf_inference_v5.1_closed_offline / Dell" in names


def test_report_carries_the_amd_section(section: dict[str, Any]) -> None:
    stored = amd.to_json(section)
    assert stored["summary"] == section["summary"]
    assert len(stored["rows"]) == len(section["rows"])
    assert {c["kind"] for c in stored["vendor constants"]} == set(amd.KINDS)
    assert all(c["generation"] == "cdna3" for c in stored["vendor constants"])
    lines = amd.render(section)
    assert any("AMD Instinct" in line for line in lines)
    assert report.amd_section()["summary"] == section["summary"]
