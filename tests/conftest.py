"""Shared fixtures: the catalog models and a lazily imported ground-truth harness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"


def load_data(name: str) -> Any:
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="session")
def gt() -> Any:
    """The transformers ground-truth harness; skipped where torch/transformers are absent
    (``make test`` installs them, so CI always runs these)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import groundtruth

    return groundtruth
