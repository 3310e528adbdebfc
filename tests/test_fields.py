"""Request fields are declared once (``app/schemas``): the pages' forms and the CLI's flags are
read off the request models, so each flag and each form input is a field the API takes, with
the API's name, type and help."""

from __future__ import annotations

import argparse

import pytest

from app.cli.commands import flags_of
from app.schemas.fields import leaves
from app.schemas.inference import InferenceRequest
from app.schemas.sweep import ServingSweepRequest, TrainingSweepRequest
from app.schemas.training import TrainingRequest
from app.web.forms import (
    SERVING_INPUTS,
    SERVING_SWEEP_INPUTS,
    SWEEP_INPUTS,
    TRAINING_INPUTS,
    request_body,
)

MODELS = (TrainingRequest, InferenceRequest, TrainingSweepRequest, ServingSweepRequest)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_field_has_one_flag(model: type) -> None:
    flags = flags_of(model)
    names = [f for f, _, _, _ in flags]
    assert len(names) == len(set(names))
    paths = {leaf.path for leaf in leaves(model) if leaf.kind != "object"}
    assert {path for _, path, _, _ in flags} == paths


@pytest.mark.parametrize(
    ("model", "inputs"),
    [
        (TrainingRequest, TRAINING_INPUTS),
        (InferenceRequest, SERVING_INPUTS),
        (TrainingSweepRequest, SWEEP_INPUTS),
        (ServingSweepRequest, SERVING_SWEEP_INPUTS),
    ],
    ids=["training", "serving", "sweep", "serving-sweep"],
)
def test_page_inputs_are_request_fields(model: type, inputs: tuple) -> None:
    by_path = {leaf.path: leaf for leaf in leaves(model)}
    for spec in inputs:
        if spec.kind == "textarea":  # the pasted config.json: the model field's other form
            assert spec.path == "model"
            continue
        leaf = by_path[spec.path]
        assert spec.label == leaf.label and spec.name == leaf.name
        assert spec.group == leaf.hints.get("group", "Plan")


def test_a_form_query_reads_back_into_the_request() -> None:
    query = {
        "model": "llama-3-70b",
        "num_gpus": "64",
        "tp": "8",
        "zero_stage": "3",
        "recompute": "selective",
        "tokens": "2e12",
    }
    body = request_body(TRAINING_INPUTS, query)
    req = TrainingRequest.model_validate(body)
    assert (req.num_gpus, req.layout.tp, req.layout.zero_stage) == (64, 8, 3)
    assert req.recompute == "selective" and req.tokens == 2e12


def test_flags_parse_as_their_field_types() -> None:
    parser = argparse.ArgumentParser()
    for flag, path, parse, text in flags_of(TrainingSweepRequest):
        parser.add_argument(flag, dest=path, type=parse, help=text or None)
    args = parser.parse_args(
        ["--gpus", "64,128", "--tp", "4,8", "--zero", "1,3", "--recompute", "none,full"]
    )
    assert args.num_gpus == [64, 128] and getattr(args, "layout.tp") == [4, 8]
    assert getattr(args, "layout.zero_stage") == [1, 3]
    assert args.recompute == ["none", "full"]
