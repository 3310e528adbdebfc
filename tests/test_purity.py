"""The core stays pure: no web, database or logging imports, no printing, no numpy at import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import estimator

FORBIDDEN = (
    "fastapi", "starlette", "jinja2", "plotly", "sqlalchemy", "logging", "app", "validation",
)  # fmt: skip
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


def test_the_app_never_imports_validation_to_answer() -> None:
    """The product reads its measured records from the core's catalog, never from its own dev
    tool: a training estimate, a serving estimate (their accuracy blocks and fit verdict), a
    training sweep (its peak ranges and tie band) and the accuracy report leave no
    ``validation`` module loaded."""
    code = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from app.main import app\n"
        "c = TestClient(app, base_url='http://localhost')\n"
        "t = c.post('/api/v1/training/estimate', json={'model': 'llama-3-8b',"
        " 'accelerator': 'h100-sxm-80gb', 'num_gpus': 8, 'stack': 'fsdp2'}).json()\n"
        "s = c.post('/api/v1/inference/estimate', json={'model': 'llama-3-8b',"
        " 'accelerator': 'h100-sxm-80gb', 'num_gpus': 1, 'request_rate': 2.0}).json()\n"
        "w = c.post('/api/v1/training/sweep', json={'model': 'llama-3-8b',"
        " 'accelerator': ['h100-sxm-80gb'], 'num_gpus': [8]})\n"
        "a = c.get('/api/v1/accuracy')\n"
        "ns = [m['n'] for m in t['accuracy']['metrics'] + s['accuracy']['metrics']]\n"
        "print(w.status_code, a.status_code, min(ns), t['memory_per_gpu']['fit'])\n"
        "print(','.join(n for n in sys.modules if n.split('.')[0] == 'validation'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    answered, loaded = out.stdout.splitlines()
    status_sweep, status_report, fewest, fit = answered.split()
    assert (status_sweep, status_report) == ("200", "200") and int(fewest) > 0, answered
    assert fit in {"fits", "tight", "does_not_fit"}
    assert loaded == ""
