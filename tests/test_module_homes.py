"""Each piece of the core lives in its own module: serving's steps take their per-layer kernel
timing from ``timing.layer`` and ``timing.gemms``, never from the training step's assembly."""

from __future__ import annotations

import ast
from pathlib import Path

import estimator

SERVING = Path(estimator.__file__).parent / "serving"
TRAINING_STEP = "estimator.timing.training"


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
