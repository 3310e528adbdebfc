"""The bundled catalog files (JSON next to this module), each read once."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["load"]

DIR = Path(__file__).parent


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed ``name`` (``models.json``, ``accelerators.json``, ``prices.json``,
    ``efficiency.json``); the same object on every call: never modify it."""
    data: dict[str, Any] = json.loads((DIR / name).read_text(encoding="utf-8"))
    return data
