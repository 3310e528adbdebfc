"""Records filled in one step (``estimator.records``) are the dataclasses they claim to be."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

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
from estimator.memory.training import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_FRACTION,
    NCCL_BUFFER_BYTES_PER_GROUP,
    most_loaded_terms,
    training_memory_terms,
)
from estimator.memory.training_stage import Layout, Stack, Stage, layout_of, stages_of
from estimator.terms import TRAINING_MEMORY

TERMS = tuple(t.key for t in TRAINING_MEMORY)  # the registry's training memory terms

BF16 = get_precision("bf16")


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
    assert list(memory.terms_bytes) == list(TERMS)
    assert memory.activations_bytes == memory.terms_bytes["activations_bytes"]
    fewer = {**memory.terms_bytes, "activations_bytes": 0.0}
    assert dataclasses.replace(memory, terms_bytes=fewer).total_bytes < memory.total_bytes
    with pytest.raises(AttributeError):
        memory.no_such_bytes  # noqa: B018 (a term by a key the registry does not have)
    # The shared records the terms are computed from hold exactly their fields, as filled.
    parallel = Parallelism(tp=2, pp=4, dp=8, ep=8, sequence_parallel=True, zero_stage=1)
    setup = TrainingSetup(4096, global_batch_size=64, recompute=recompute)  # type: ignore[arg-type]
    layout = layout_of(get_model("mixtral-8x7b"), BF16, parallel, setup, 8)
    stage = stages_of(layout, (0, 3))[1]
    for record, cls in ((layout, Layout), (stage.stack, Stack), (stage, Stage)):
        assert sorted(vars(record)) == sorted(f.name for f in dataclasses.fields(cls))


@pytest.mark.parametrize(
    ("model_id", "layout"),
    [
        ("llama-3-70b", dict(tp=8, pp=4, dp=4, sequence_parallel=True, zero_stage=1)),
        ("llama-3-8b", dict(tp=2, pp=1, dp=8, zero_stage=3)),
        ("mixtral-8x7b", dict(tp=2, pp=2, dp=8, ep=8, vp=2, sequence_parallel=True)),
        ("deepseek-v3", dict(tp=8, pp=1, dp=8, ep=64, etp=1, distributed_optimizer=True)),
    ],
)
def test_training_memory_reads_the_stage_terms_in_their_order(
    model_id: str, layout: dict[str, Any]
) -> None:
    """``training_memory``'s terms are ``most_loaded_terms``' of the same name, and its total the
    stage's."""
    model, parallel = get_model(model_id), Parallelism(**layout)
    setup = TrainingSetup(4096, global_batch_size=8 * parallel.dp, recompute="selective")
    memory = training_memory(model, get_accelerator("h100-sxm-80gb"), parallel, setup, BF16)
    terms = most_loaded_terms(model, parallel, setup, BF16)
    assert memory.terms() == {name: terms[name] for name in TERMS}
    assert (memory.stage, memory.params_on_gpu) == (terms["stage"], terms["params_on_gpu"])
    assert memory.total_bytes == terms["total_bytes"]  # one sum, in one order
    assert len(set(memory.terms().values())) >= 7  # distinct values: a swap would show


def test_stage_terms_are_where_their_names_say() -> None:
    """Each term is where its name says, pinned by what it must be: bf16 weights, fp32 gradients,
    master weights and two AdamW moments (2, 4, 4, 8 bytes a parameter, nothing sharded)."""
    model = get_model("llama-3-8b")
    terms = training_memory_terms(
        model,
        BF16,
        Parallelism(tp=2),
        TrainingSetup(4096),
        stages=(0,),
        microbatches=1,
    )[0]
    params, weights = terms["params_on_gpu"], terms["weights_bytes"]
    assert weights == 2 * params
    assert (terms["gradients_bytes"], terms["master_weights_bytes"]) == (4 * params, 4 * params)
    assert terms["optimizer_states_bytes"] == 8 * params
    assert terms["weight_cache_bytes"] == terms["zero3_gather_bytes"] == 0
    assert terms["cuda_context_bytes"] == CUDA_CONTEXT_BYTES
    assert terms["comm_buffers_bytes"] == NCCL_BUFFER_BYTES_PER_GROUP  # the TP group
    assert terms["in_flight"] == 1 and terms["logits_bytes"] > 0
    assert terms["activations_bytes"] == terms["microbatch_activations_bytes"] > 0
    assert terms["fragmentation_bytes"] == pytest.approx(
        FRAGMENTATION_FRACTION * sum(terms[k] for k in TERMS[:8]), rel=1e-12
    )
