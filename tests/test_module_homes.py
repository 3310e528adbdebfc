"""Each piece of the core lives in its own module: serving's steps take their per-layer kernel
timing from ``timing.layer`` and ``timing.gemms``, never from the training step's assembly
(``timing.training``, ``timing.stage_time``, ``timing.training_notes``); a layer's saved
tensors (``memory.activations``) are listed apart from their bytes (``memory.activation_bytes``)."""

from __future__ import annotations

import ast
from pathlib import Path

import estimator

SERVING = Path(estimator.__file__).parent / "serving"
TRAINING_STEP = "estimator.timing.training"
# The training step's other modules: its stages' micro-batch times and its notes.
TRAINING_STEP_PARTS = ("estimator.timing.stage_time", "estimator.timing.training_notes")


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports from, relative imports resolved against its package."""
    package = "estimator.serving"
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.append(module)
            # ``from estimator.timing import training`` names the module too
            out += [f"{module}.{a.name}" for a in node.names]
    return out


def test_serving_imports_nothing_from_the_training_step() -> None:
    sources = sorted(SERVING.rglob("*.py"))
    assert sources
    for path in sources:
        for name in _imports(path):
            assert name != TRAINING_STEP and not name.startswith(TRAINING_STEP + "."), (
                f"{path.relative_to(SERVING.parent)} imports {name}: per-layer timing lives in"
                " estimator.timing.layer / estimator.timing.gemms"
            )
            assert name not in TRAINING_STEP_PARTS, f"{path.relative_to(SERVING.parent)}: {name}"


def test_activation_bytes_and_items_are_apart() -> None:
    """What a layer saves (``memory.activations``) never reads its bytes
    (``memory.activation_bytes``), which reads the items: one direction."""
    items = Path(estimator.__file__).parent / "memory" / "activations.py"
    assert "estimator.memory.activation_bytes" not in _imports(items)
