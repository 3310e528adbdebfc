"""Records filled in one step (``estimator.records``) are the dataclasses they claim to be."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from estimator import (
    Parallelism,
    TrainingFlops,
    TrainingMemory,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    training_flops,
    training_memory,
)


@pytest.mark.parametrize("cls", [Parallelism, TrainingSetup])
def test_hand_written_init_takes_the_fields_with_their_defaults(cls: type) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in params] == [
        (f.name, inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(cls)
    ]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)


def test_specs_are_frozen_values() -> None:
    a = Parallelism(tp=8, pp=2, sequence_parallel=True)
    assert a == Parallelism(8, 2, sequence_parallel=True) and hash(a) == hash(
        Parallelism(8, 2, sequence_parallel=True)
    )
    assert dataclasses.replace(a, tp=4).tp == 4 and a.tp == 8
    assert vars(a) == {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.tp = 2  # type: ignore[misc]
    setup = TrainingSetup(4096, 2)
    assert (setup.seq_len, setup.micro_batch_size, setup.recompute) == (4096, 2, "none")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setup.seq_len = 1  # type: ignore[misc]


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_results_filled_from_dicts_have_exactly_their_fields(recompute: str) -> None:
    memory = training_memory(
        get_model("mixtral-8x7b"),
        get_accelerator("h100-sxm-80gb"),
        Parallelism(tp=2, pp=4, dp=8, ep=8, sequence_parallel=True, zero_stage=1),
        TrainingSetup(4096, global_batch_size=64, recompute=recompute),  # type: ignore[arg-type]
        get_precision("bf16"),
    )
    flops = training_flops(get_model("mixtral-8x7b"), 4096, 8, recompute)  # type: ignore[arg-type]
    for record, cls in ((memory, TrainingMemory), (flops, TrainingFlops)):
        assert type(record) is cls
        assert list(vars(record)) == [f.name for f in dataclasses.fields(cls)]
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.notes = ()  # type: ignore[misc]
    assert dataclasses.replace(memory, activations_bytes=0.0).total_bytes < memory.total_bytes
