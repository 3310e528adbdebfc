"""Charts that stay readable (issue 39, item 9): a diverging queue's latencies are cut off, the
rest of the axis marked "overloaded", instead of a log axis running to 1e42 ms; every axis of
the serving, training and sweep pages' charts grows its margin for its tick labels and keeps its
title clear of them; the memory timeline leaves its first slanted labels room."""

from __future__ import annotations

import json
import math
import re
from html import unescape
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.web import charts

client = TestClient(app)


def load_point(n: float, ttft_s: float, p99_s: float, tpot_s: float, regime: str = "shared") -> Any:
    return SimpleNamespace(
        concurrency=n, ttft_s=ttft_s, ttft_p99_s=p99_s, tpot_s=tpot_s, regime=regime,
        num_prompts=None,
    )  # fmt: skip


def drawn_ms(figure: dict[str, Any]) -> list[float]:
    return [y for trace in figure["data"] for y in trace["y"] if y is not None]


def overloaded_notes(figure: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in figure["layout"]["annotations"] if a.get("name") == "overloaded"]


BOUNDED = [load_point(n, 0.2 + 0.01 * n, 0.5 + 0.02 * n, 0.02) for n in (1, 2, 4, 8)]


@pytest.mark.parametrize(
    "tail",
    [
        # past the slots the p99 diverges (1e39 s: an axis to 1e42 ms before)
        [load_point(16, 2.0, 1e39, 0.03), load_point(32, 5.0, math.inf, 0.03)],
        # the core says the queue grows without bound
        [load_point(16, math.inf, math.inf, 0.03, "overloaded")],
    ],
)
def test_a_diverging_queue_is_cut_off_and_marked_overloaded(tail: list[Any]) -> None:
    figure = charts.serving_load_figure([*BOUNDED, *tail], 8, None, None)
    largest = max(1e3 * max(p.ttft_s, p.ttft_p99_s, p.tpot_s) for p in BOUNDED)
    assert max(drawn_ms(figure)) <= charts.OVERLOAD_FACTOR * largest
    assert all(trace["x"] == [1, 2, 4, 8] for trace in figure["data"])  # the last bounded: 8
    (note,) = overloaded_notes(figure)
    assert note["text"] == "overloaded from 16 in flight"
    (band,) = [s for s in figure["layout"]["shapes"] if s.get("name") == "overloaded"]
    assert (band["x0"], band["x1"]) == (8, tail[-1].concurrency)
    json.loads(charts.figure_json(figure))  # still strict JSON


def test_queueing_past_the_slots_is_still_drawn() -> None:
    """Requests queueing for a slot wait longer, boundedly: those points stay on the chart."""
    queued = [load_point(16, 20.0, 40.0, 0.03, "slot-limited")]  # 40x the in-range largest
    figure = charts.serving_load_figure([*BOUNDED, *queued], 8, None, None)
    assert all(trace["x"] == [1, 2, 4, 8, 16] for trace in figure["data"])
    assert overloaded_notes(figure) == []


def test_the_concurrency_curve_cuts_a_diverging_point() -> None:
    curve = [
        {"concurrency": n, "ttft_s": 0.1 * n, "tpot_s": 0.02, "output_tokens_per_s": 50.0 * n,
         "fits": True}
        for n in (1, 2, 4, 8)
    ] + [{"concurrency": 16, "ttft_s": 1e39, "tpot_s": 0.03, "output_tokens_per_s": 0.0,
          "fits": False}]  # fmt: skip
    figure = charts.serving_curve_figure({"curve": curve, "max_concurrency": 8}, None, None)
    assert figure["layout"]["yaxis2"]["range"][1] < 1e4  # ms: 1.1x the largest bounded TTFT
    assert all(trace["x"] == [1, 2, 4, 8] for trace in figure["data"])
    assert [a["text"] for a in overloaded_notes(figure)] == ["overloaded from 16 in flight"]


def test_a_target_label_sits_at_its_line_on_the_log_latency_axis() -> None:
    """plotly.js places an annotation on a log axis in log10 units: a 42 ms TPOT target's label
    at y=42 put it at 1e42 ms, and the load chart's axis ran there (the issue's 10^42 ms)."""
    figure = charts.serving_load_figure(BOUNDED, 8, 0.042, 2.0)
    lines = {s["name"]: s["y0"] for s in figure["layout"]["shapes"] if "target" in s["name"]}
    notes = {a["text"]: a["y"] for a in figure["layout"]["annotations"] if a.get("yref") == "y"}
    assert lines == {"TPOT target": 42.0, "TTFT target": 2000.0}
    for name, ms in lines.items():
        assert 10 ** notes[name] == pytest.approx(ms)
    # the concurrency curve's latency axis is linear: its labels stay in ms
    curve = [{"concurrency": 1, "ttft_s": 0.1, "tpot_s": 0.02, "output_tokens_per_s": 50.0,
              "fits": True}]  # fmt: skip
    figure = charts.serving_curve_figure({"curve": curve, "max_concurrency": 8}, 0.042, None)
    (note,) = [a for a in figure["layout"]["annotations"] if a.get("yref") == "y2"]
    assert note["y"] == pytest.approx(42.0)


def test_bounded_count_leaves_gaps_alone() -> None:
    """A missing latency (NaN) is a gap in the line, not a diverging queue."""
    assert charts.bounded_count([[1.0, math.nan, 2.0]], [True] * 3, [False] * 3) == 3
    assert charts.bounded_count([[1.0, 2.0, 201.0]], [True, True, False], [False] * 3) == 2
    assert charts.bounded_count([[1.0, 2.0]], [True, True], [False, True]) == 1


# --- axes -------------------------------------------------------------------------------------

PAGES = (
    "/training",
    "/serving",
    "/sweep?model=llama-3-8b&num_gpus=8,16&tp=1,2",
    "/sweep?" + urlencode({"mode": "serving", "model": "llama-3-8b"}),
)


def page_figures(path: str) -> dict[str, dict[str, Any]]:
    html = client.get(path).text
    found = re.findall(r'id="fig-([\w-]+)" data-figure="([^"]*)"', html)
    assert found, path
    return {name: json.loads(unescape(raw)) for name, raw in found}


def axis_setting(layout: dict[str, Any], axis: str, *path: str) -> Any:
    """An axis' setting as Plotly resolves it: the axis' own, else its template's (the
    template's ``xaxis`` stands for ``xaxis2`` ... too)."""
    kind = re.match(r"[xy]axis", axis)
    assert kind is not None
    for node in (layout[axis], layout.get("template", {}).get("layout", {}).get(kind.group(0))):
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            return node
    return None


@pytest.mark.parametrize("path", PAGES)
def test_every_axis_makes_room_for_its_labels_and_title(path: str) -> None:
    for name, figure in page_figures(path).items():
        layout = figure["layout"]
        for axis in [k for k in layout if re.fullmatch(r"[xy]axis\d*", k)]:
            assert axis_setting(layout, axis, "automargin") is True, (path, name, axis)
            if axis_setting(layout, axis, "title", "text"):
                assert axis_setting(layout, axis, "title", "standoff") > 0, (path, name, axis)


def test_the_timeline_leaves_room_for_its_first_slanted_labels() -> None:
    labels = ["step starts", "forward micro-batch 1", *["backward"] * 10]
    margin = charts._slant_margin(labels)
    slant = math.cos(math.radians(charts.TICK_ANGLE)) * charts.TICK_CHAR_PX
    spacing = charts.TIMELINE_MIN_PLOT_PX / (len(labels) - 1)
    assert margin >= slant * len("forward micro-batch 1") - spacing  # ~98 px, not 60
    assert charts._slant_margin(["a", "b"]) == 60
