"""A new training memory term is its registry line (``estimator.terms.TRAINING_MEMORY``) plus its
function (``estimator.memory.training_terms.ALLOCATED``): added at runtime here, it is in the
training estimate's breakdown and total, in the sweep's totals, in the API's response model and
in a chart's labels (CONTRIBUTING.md, "A new memory or step term").

What is built at import time from the registry is rebuilt in the test, as a term added in the
source would have it built: the API's response models (``terms_model``), the charts' labels
(``charts.LABELS``). The sweep's per-term columns are a chosen few (``ROW_MEMORY``), so a new
term reaches the sweep through ``memory_bytes`` and ``most_loaded_terms``, not as a column.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.answers import training_answer
from app.schemas.common import terms_model
from app.schemas.training import TrainingRequest
from app.web import charts
from estimator import (
    Parallelism,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    terms,
    training_memory,
)
from estimator.inputs.accelerator import GIB
from estimator.memory import training_terms
from estimator.memory.training import FRAGMENTATION_FRACTION, most_loaded_terms
from estimator.memory.training_stage import Stage
from estimator.sweep.training import TrainingSearch, TrainingWorkload, sweep_training
from estimator.timing.training import estimate_training
from tests.test_sweep import _single

TOY = terms.Term("toy_buffer_bytes", "Toy buffer", "a test's 1 GiB buffer on every stage")
TOY_BYTES = 1.0 * GIB


def toy_buffer_bytes(s: Stage) -> float:
    """A made-up buffer of ``TOY_BYTES`` on every stage (no source: a test's)."""
    return TOY_BYTES


def _add_the_toy(mp: pytest.MonkeyPatch) -> None:
    """The toy term's registry line, before the overheads as the recipe adds an allocated
    term, and its function; ``mp`` restores both afterwards."""
    allocated = len(training_terms.ALLOCATED)
    group = terms.TRAINING_MEMORY
    mp.setattr(terms, "TRAINING_MEMORY", (*group[:allocated], TOY, *group[allocated:]))
    mp.setitem(training_terms.ALLOCATED, TOY.key, toy_buffer_bytes)


@pytest.fixture
def toy_term(monkeypatch: pytest.MonkeyPatch) -> None:
    _add_the_toy(monkeypatch)


MODEL = "llama-3-8b"
LAYOUT = {"tp": 2, "pp": 2, "dp": 2, "sequence_parallel": True, "zero_stage": 1}
SETUP = TrainingSetup(4096, global_batch_size=16, recompute="selective")
REQUEST = TrainingRequest(
    model=MODEL,
    num_gpus=8,
    layout=LAYOUT,  # type: ignore[arg-type]
    seq_len=4096,
    global_batch_size=16,
    recompute="selective",
)
SPACE = TrainingSearch(accelerators=("h100-sxm-80gb",), num_gpus=(8, 16), micro_batch=(1, 2))
WORKLOAD = TrainingWorkload(seq_len=4096, global_batch_size=64)


def _plan() -> tuple[object, ...]:
    return (
        get_model(MODEL),
        get_accelerator("h100-sxm-80gb"),
        Parallelism(**LAYOUT),  # type: ignore[arg-type]
        SETUP,
        get_precision("bf16"),
    )


def _with_the_toy(total: float) -> float:
    """A total with the toy term on top, and fragmentation's share of it."""
    return total + TOY_BYTES * (1 + FRAGMENTATION_FRACTION)


def test_the_registry_and_the_table_agree_while_the_toy_is_added(toy_term: None) -> None:
    keys = [t.key for t in terms.TRAINING_MEMORY]
    assert [*training_terms.ALLOCATED, *training_terms.OVERHEADS] == keys
    assert terms.labels()["toy_buffer"] == "Toy buffer"


def test_the_estimate_breaks_down_into_the_new_term() -> None:
    before = training_memory(*_plan())  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        _add_the_toy(mp)
        after = training_memory(*_plan())  # type: ignore[arg-type]
        full = estimate_training(*_plan())  # type: ignore[arg-type]
    assert list(after.terms()) == [*training_terms.ALLOCATED, TOY.key, *training_terms.OVERHEADS]
    assert after.terms()[TOY.key] == after.toy_buffer_bytes == TOY_BYTES
    assert after.total_bytes == pytest.approx(_with_the_toy(before.total_bytes), rel=1e-12)
    assert after.fragmentation_bytes > before.fragmentation_bytes  # a share of the toy too
    assert full.memory.terms() == after.terms()
    # and gone again once the registry and the table are restored
    assert TOY.key not in training_memory(*_plan()).terms()  # type: ignore[arg-type]


def test_the_response_model_and_the_chart_carry_the_new_term(
    toy_term: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = training_answer(REQUEST)
    memory = answer["memory_per_gpu"]
    assert memory[TOY.key] == TOY_BYTES
    # the response model as the registry builds it at import (app/schemas/training.py)
    model = terms_model("TrainingMemoryTerms", terms.TRAINING_MEMORY, memory=True)
    field = model.model_fields[TOY.key]
    assert TOY.includes in (field.description or "")
    assert model.model_validate(memory).model_dump()[TOY.key] == TOY_BYTES  # type: ignore[attr-defined]
    # the charts' labels as the registry builds them at import (app/web/charts.py)
    monkeypatch.setattr(charts, "LABELS", {**charts.LABELS, **terms.labels()})
    bars = charts.training_memory_figure(answer)["data"]
    toy = [bar for bar in bars if bar["meta"] == "toy_buffer"]
    assert [bar["name"] for bar in toy] == ["Toy buffer"]
    assert toy[0]["x"] == [TOY_BYTES / GIB]


def test_the_sweep_totals_carry_the_new_term() -> None:
    model = get_model(MODEL)
    before = sweep_training(model, WORKLOAD, SPACE)
    p = Parallelism(tp=np.array([1, 2]), pp=np.array([1, 2]), dp=np.array([8, 4]))
    setup = TrainingSetup(4096, global_batch_size=64)
    with pytest.MonkeyPatch.context() as mp:
        _add_the_toy(mp)
        after = sweep_training(model, WORKLOAD, SPACE)
        arrays = most_loaded_terms(model, p, setup, get_precision("bf16"))
        rows = [after.row(i) for i in range(0, len(after), 7)]
        singles = [_single(MODEL, r, WORKLOAD) for r in rows]
    assert TOY.key not in after.columns  # ROW_MEMORY's few terms are columns, not every term
    assert len(after) == len(before)
    assert after.column("memory_bytes") == pytest.approx(
        _with_the_toy(before.column("memory_bytes")), rel=1e-12
    )
    for r, e in zip(rows, singles, strict=True):  # a row is its single estimate, toy and all
        assert r["memory_bytes"] == e.memory.total_bytes  # type: ignore[attr-defined]
    assert np.all(np.asarray(arrays[TOY.key]) == TOY_BYTES)
    assert np.all(arrays["total_bytes"] > TOY_BYTES)
