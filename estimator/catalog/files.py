"""The bundled catalog files (JSON next to this module), each read once."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["load", "model_files"]

DIR = Path(__file__).parent


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed ``name`` (``models.json``, ``accelerators.json``, ``prices.json``,
    ``efficiency.json``); the same object on every call: never modify it."""
    data: dict[str, Any] = json.loads((DIR / name).read_text(encoding="utf-8"))
    return data


def model_files() -> tuple[str, ...]:
    """The catalog's extra model files (``models/*.json``), as ``load`` names, in name order."""
    return tuple(f"models/{p.name}" for p in sorted((DIR / "models").glob("*.json")))
