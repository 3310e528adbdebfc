"""The pipeline schedule (``estimator.timing.schedule``): Megatron-Core's 1F1B and interleaved
orders simulated, against the closed-form bubble ``timing.training`` adds."""

from __future__ import annotations

import itertools

import pytest

from estimator.errors import SpecError
from estimator.timing.schedule import pipeline_schedule

CASES = [(4, 8, 1), (4, 16, 1), (8, 8, 1), (4, 8, 2), (4, 16, 4), (8, 32, 5), (2, 1, 1), (4, 3, 1)]


@pytest.mark.parametrize(("pp", "m", "vp"), CASES)
def test_makespan_is_the_work_plus_the_closed_form_bubble(pp: int, m: int, vp: int) -> None:
    f, b = 1.0, 2.0
    s = pipeline_schedule(pp, m, f, b, vp)
    assert s.step_s == pytest.approx(m * (f + b) + (pp - 1) * (f + b) / vp)
    assert s.bubble_fraction == pytest.approx(1 - m * (f + b) / s.step_s)


@pytest.mark.parametrize(("pp", "m", "vp"), CASES)
def test_every_operation_once_in_dependency_order(pp: int, m: int, vp: int) -> None:
    s = pipeline_schedule(pp, m, 1.0, 2.0, vp)
    assert len(s.operations) == 2 * pp * m * vp
    ends = {(op.kind, op.chunk * pp + op.stage, op.microbatch): op for op in s.operations}
    assert len(ends) == len(s.operations)
    last = pp * vp - 1
    for (kind, v, mb), op in ends.items():
        if kind == "F" and v > 0:
            assert op.start_s >= ends[("F", v - 1, mb)].end_s
        if kind == "B":
            assert op.start_s >= ends[("F", v, mb)].end_s
            if v < last:
                assert op.start_s >= ends[("B", v + 1, mb)].end_s
    for stage in range(pp):  # a stage runs one operation at a time
        ops = sorted((o for o in s.operations if o.stage == stage), key=lambda o: o.start_s)
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in itertools.pairwise(ops))


def test_first_stage_warms_up_as_megatron_does() -> None:
    s = pipeline_schedule(4, 8, 1.0, 2.0)
    first = [o.kind for o in sorted(s.operations, key=lambda o: o.start_s) if o.stage == 0]
    assert first[:4] == ["F", "F", "F", "F"] and first[4] == "B"  # p - 1 warm-up forwards
    last = [o.kind for o in sorted(s.operations, key=lambda o: o.start_s) if o.stage == 3]
    assert last[:2] == ["F", "B"]


def test_interleaving_needs_whole_groups_of_microbatches() -> None:
    with pytest.raises(SpecError) as err:
        pipeline_schedule(4, 6, 1.0, 2.0, vp=2)
    assert err.value.field == "layout.vp"
