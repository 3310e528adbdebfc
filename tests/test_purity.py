"""The core stays pure: no web, database or logging imports, no printing, no numpy at import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import estimator

FORBIDDEN = ("fastapi", "starlette", "jinja2", "plotly", "sqlalchemy", "logging", "app")
CORE = Path(estimator.__file__).parent


def test_fresh_interpreter_imports_nothing_forbidden() -> None:
    code = (
        "import sys, estimator\n"
        "from estimator import *\n"
        "m = get_model('llama-3-70b'); a = get_accelerator('h100-sxm-80gb')\n"
        "training_memory(m, a, Parallelism(tp=8, pp=2), TrainingSetup(4096),"
        " get_precision('bf16'))\n"
        f"bad = [n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r}]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_import_does_not_load_numpy() -> None:
    code = "import sys, estimator; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _sources() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_no_forbidden_import_statements() -> None:
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path}: imports {name}"


def test_core_never_prints() -> None:
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "print", f"{path}:{node.lineno} prints"
