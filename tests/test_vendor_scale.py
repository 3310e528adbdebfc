"""The per-vendor time factors (estimator/timing/vendor.py): they scale what they say on the
generation they were fitted on and nothing else, and every answer on that vendor's parts says
how approximate it is."""

from __future__ import annotations

import pytest

from estimator import (
    InferenceSetup,
    Parallelism,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.serving.estimate import estimate_inference
from estimator.timing import vendor
from estimator.timing.training import estimate_training

_CDNA3 = ("amd", "cdna3")


def _training(acc: str) -> tuple[float, tuple[str, ...]]:
    est = estimate_training(
        get_model("llama-3.1-8b"),
        get_accelerator(acc),
        Parallelism(tp=1, pp=1, dp=8),
        TrainingSetup(seq_len=4096, micro_batch_size=1, global_batch_size=32),
        get_precision("bf16"),
    )
    return est.time.breakdown["compute"], est.notes


def _serving(acc: str, engine: str | None = None) -> tuple[float, tuple[str, ...]]:
    est = estimate_inference(
        get_model("llama-3.1-8b"),
        get_accelerator(acc),
        Parallelism(tp=1),
        InferenceSetup(input_len=1024, output_len=256, concurrency=16),
        get_precision("bf16"),
        engine=engine,
    )
    return est.output_tokens_per_s, est.notes


def test_training_compute_on_cdna3_carries_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    scaled, notes = _training("mi300x")
    monkeypatch.delitem(vendor.TRAINING_COMPUTE_SCALE, _CDNA3)
    plain, plain_notes = _training("mi300x")
    factor = 1.436  # the value in vendor.py, restated: a change to it is seen here too
    assert scaled / plain == pytest.approx(factor, rel=1e-9)
    note = next(n for n in notes if n.startswith("AMD Instinct CDNA 3"))
    assert "1.436" in note and "18 MLPerf Training" in note
    assert "leave-one-source-out median error 4.6%" in note
    assert not any(n.startswith("AMD Instinct CDNA 3") for n in plain_notes)


def test_serving_throughput_on_cdna3_divides_by_the_factor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scaled, notes = _serving("mi325x")
    monkeypatch.delitem(vendor.SERVING_STEP_SCALE, _CDNA3)
    plain, _ = _serving("mi325x")
    assert plain / scaled == pytest.approx(1.353, rel=1e-9)
    note = next(n for n in notes if n.startswith("AMD Instinct CDNA 3"))
    assert "1.353" in note and "25 MLPerf Inference" in note and "3.5%" in note


def test_serving_under_load_says_what_the_factor_leaves() -> None:
    _, offline = _serving("mi300x")
    _, loaded = _serving("mi300x", engine="vllm")
    load_note = vendor.SERVING_LOAD_NOTES[_CDNA3]
    assert load_note in loaded and load_note not in offline


@pytest.mark.parametrize("acc", ["h100-sxm-80gb", "gaudi3", "mi355x", "mi250x"])
def test_no_factor_off_the_fitted_generation(acc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trained, notes = _training(acc)
    served, _ = _serving(acc)
    monkeypatch.setattr(vendor, "TRAINING_COMPUTE_SCALE", {})
    monkeypatch.setattr(vendor, "SERVING_STEP_SCALE", {})
    assert _training(acc)[0] == trained and _serving(acc)[0] == served
    unfitted = vendor.UNFITTED_NOTES.get(
        (get_accelerator(acc).vendor, get_accelerator(acc).generation)
    )
    assert (unfitted in notes) if unfitted else not any("AMD Instinct" in n for n in notes)


def test_mi355x_says_why_it_has_no_factor() -> None:
    _, notes = _training("mi355x")
    assert any("CDNA 4 (MI355X): no fitted time factor" in n and "+9.4%" in n for n in notes)
