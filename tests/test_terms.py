"""Every term is defined once (``estimator.terms``): the records that hold them, the API's
response models, the sweep's columns and the charts' labels all follow the registry, in its
order."""

from __future__ import annotations

from dataclasses import fields

from app.schemas.inference import InferenceMemoryOut, LatencyBreakdown
from app.schemas.sweep import TrainingSweepRow
from app.schemas.training import StepBreakdown, TrainingMemoryOut
from app.web.charts import LABELS
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision, terms
from estimator.memory import training_terms
from estimator.memory.inference import InferenceMemory
from estimator.memory.training import training_memory, training_memory_terms
from estimator.sweep.training import COLUMNS, ROW_MEMORY
from estimator.timing.training import BREAKDOWN


def _keys(group: tuple[terms.Term, ...]) -> list[str]:
    return [t.key for t in group]


def test_records_hold_the_registry_terms_in_order() -> None:
    memory = _keys(terms.TRAINING_MEMORY)
    # one function a term, registered against its key: the allocated tensors, then the overheads
    assert [*training_terms.ALLOCATED, *training_terms.OVERHEADS] == memory
    assert list(training_terms.OVERHEAD_TERMS) == list(training_terms.OVERHEADS)
    model, p = get_model("llama-3-8b"), Parallelism(tp=2, pp=2, dp=2)
    setup = TrainingSetup(4096, global_batch_size=8)
    plan = training_memory(model, get_accelerator("h100-sxm-80gb"), p, setup, get_precision("bf16"))
    assert list(plan.terms()) == memory
    (stage,) = training_memory_terms(
        model, get_precision("bf16"), p, setup, stages=(1,), microbatches=4
    )
    assert list(stage)[: len(memory) + 1] == [*memory, "total_bytes"]
    serving = _keys(terms.INFERENCE_MEMORY)
    assert [f.name for f in fields(InferenceMemory)][: len(serving)] == serving
    assert list(BREAKDOWN) == [t.name for t in terms.STEP]


def test_response_models_follow_the_registry() -> None:
    for model, group in (
        (TrainingMemoryOut, terms.TRAINING_MEMORY),
        (InferenceMemoryOut, terms.INFERENCE_MEMORY),
        (StepBreakdown, terms.STEP),
        (LatencyBreakdown, terms.LATENCY),
    ):
        names = list(model.model_fields)
        assert names[: len(group)] == _keys(group), model.__name__
        for t in group:  # each described by what it counts
            assert t.includes in (model.model_fields[t.key].description or "")


def test_sweep_columns_and_chart_labels_follow_the_registry() -> None:
    assert set(ROW_MEMORY) <= set(_keys(terms.TRAINING_MEMORY))
    start = COLUMNS.index(ROW_MEMORY[0])
    assert list(COLUMNS[start : start + len(ROW_MEMORY)]) == list(ROW_MEMORY)
    row = list(TrainingSweepRow.model_fields)
    assert [k for k in row if k in ROW_MEMORY] == list(ROW_MEMORY)
    for group in (terms.TRAINING_MEMORY, terms.INFERENCE_MEMORY, terms.STEP, terms.LATENCY):
        for t in group:
            assert LABELS[t.name] == t.label
