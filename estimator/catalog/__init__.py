"""The bundled catalogs: models (Hugging Face configs) and accelerators, each entry with sources.

Files are read once, lazily, and never written. Nothing here touches the network.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any, NamedTuple

from estimator.catalog.files import load, model_files
from estimator.errors import UnknownIdError
from estimator.inputs.accelerator import Accelerator, accelerator_from_entry
from estimator.inputs.config import model_from_config
from estimator.inputs.model import ModelSpec

__all__ = [
    "Price",
    "accelerator_entry",
    "accelerator_ids",
    "get_accelerator",
    "get_model",
    "model_entry",
    "model_ids",
    "price",
]


@cache
def _models() -> dict[str, dict[str, Any]]:
    """``models.json``, then each file of ``models/`` in name order (one per family group)."""
    out = {m["id"]: m for m in load("models.json")["models"]}
    for name in model_files():
        for m in load(name)["models"]:
            if m["id"] in out:
                raise ValueError(f"catalog model id {m['id']!r} repeats in {name}")
            out[m["id"]] = m
    return out


@cache
def _accelerators() -> dict[str, dict[str, Any]]:
    return {a["id"]: a for a in load("accelerators.json")["accelerators"]}


def model_ids() -> tuple[str, ...]:
    return tuple(_models())


def accelerator_ids() -> tuple[str, ...]:
    return tuple(_accelerators())


def model_entry(model_id: str) -> dict[str, Any]:
    """The raw catalog entry: ``config``, ``hf_id``, ``sources`` ..."""
    try:
        return _models()[model_id]
    except KeyError:
        raise UnknownIdError("model", model_id, model_ids()) from None


def accelerator_entry(accelerator_id: str) -> dict[str, Any]:
    try:
        return _accelerators()[accelerator_id]
    except KeyError:
        raise UnknownIdError("accelerator", accelerator_id, accelerator_ids()) from None


@cache
def get_model(model_id: str) -> ModelSpec:
    """A catalog model's spec. ``checkpoint_quantization`` in the entry says how the checkpoint at
    ``hf_id`` ships its weights where the config copy kept here lacks its
    ``quantization_config`` (the entry's ``checkpoint_quantization_source`` says how that is
    known); the config's own wins."""
    entry = model_entry(model_id)
    model = model_from_config(entry["config"], model_id)
    shipped = entry.get("checkpoint_quantization")
    if shipped and model.checkpoint_quantization is None:
        model = replace(model, checkpoint_quantization=str(shipped))
    return model


@cache
def get_accelerator(accelerator_id: str) -> Accelerator:
    return accelerator_from_entry(accelerator_entry(accelerator_id))


class Price(NamedTuple):
    """A default price per GPU-hour, with where and when it was published."""

    usd_per_gpu_hour: float
    date: str
    source: str


@cache
def _prices() -> dict[str, Price]:
    return {
        p["accelerator"]: Price(p["usd_per_gpu_hour"], p["date"], p["source"])
        for p in load("prices.json")["prices"]
    }


def price(accelerator_id: str) -> Price | None:
    """The catalog's default on-demand price of an accelerator, or None where none is sourced."""
    accelerator_entry(accelerator_id)  # unknown ids raise
    return _prices().get(accelerator_id)
