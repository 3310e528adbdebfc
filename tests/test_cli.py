"""The ``llm-planner`` CLI: ``--json`` is exactly what the REST API answers for the same request,
the tables and CSV show the same numbers, and bad input exits 2 with one line naming the field."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import create_app

TRAINING = {
    "model": "llama-3-70b",
    "num_gpus": 64,
    "layout": {"tp": 8, "pp": 2},
    "global_batch_size": 512,
    "recompute": "selective",
    "tokens": 1e12,
}
INFERENCE = {"model": "llama-3-8b", "layout": {"tp": 2}, "concurrency": 16, "input_len": 2048}
TRAINING_SWEEP = {
    "model": "llama-3-8b",
    "accelerator": ["h100-sxm-80gb", "a100-sxm-80gb"],
    "num_gpus": [8, 16],
    "layout": {"tp": [1, 2], "pp": [1, 2]},
    "recompute": "selective",
    "page_size": 7,
}
SERVING_SWEEP = {
    "model": "llama-3-8b",
    "accelerator": ["h100-sxm-80gb", "l4"],
    "layout": {"tp": [1, 2], "pp": [1]},
    "rows": "all",
}
# The web service's packages: an estimate on the command line needs none of them.
SERVICE_PACKAGES = ("fastapi", "starlette", "sqlalchemy", "alembic", "jinja2", "uvicorn")
CONFIG = {
    "model_type": "llama",
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "intermediate_size": 2816,
    "vocab_size": 32000,
}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app())


def run(capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = "") -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", io.StringIO(stdin))
        code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, body: Any, name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


@pytest.mark.parametrize(
    ("command", "route", "body"),
    [
        ("train", "/api/v1/training/estimate", TRAINING),
        ("infer", "/api/v1/inference/estimate", INFERENCE),
        ("sweep", "/api/v1/training/sweep", TRAINING_SWEEP),
        ("sweep --serving", "/api/v1/inference/sweep", SERVING_SWEEP),
    ],
)
def test_json_is_the_apis_answer(
    client: TestClient,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: str,
    route: str,
    body: dict[str, Any],
) -> None:
    api = client.post(route, json=body)
    assert api.status_code == 200
    code, out, err = run(capsys, *command.split(), write(tmp_path, body), "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == api.json()
    # the same request on stdin
    code, out, _ = run(capsys, *command.split(), "-", "--json", stdin=json.dumps(body))
    assert code == 0 and json.loads(out) == api.json()


def test_flags_fill_the_request_like_its_json(
    client: TestClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flags = ["--model", "llama-3-70b", "--gpus", "64", "--tp", "8", "--pp", "2"]
    flags += ["--global-batch-size", "512", "--recompute", "selective", "--tokens", "1e12"]
    code, out, _ = run(capsys, "train", *flags, "--json")
    assert code == 0
    assert json.loads(out) == client.post("/api/v1/training/estimate", json=TRAINING).json()
    # flags override the file's fields, nested ones included, and keep the rest
    base = write(tmp_path, {**TRAINING, "layout": {"tp": 4, "pp": 2}, "seq_len": 2048})
    code, out, _ = run(capsys, "train", base, "--tp", "8", "--seq-len", "4096", "--json")
    assert json.loads(out) == client.post("/api/v1/training/estimate", json=TRAINING).json()
    flags = ["--model", "llama-3-8b", "--tp", "2", "--concurrency", "16", "--input-len", "2048"]
    code, out, _ = run(capsys, "infer", *flags, "--json")
    assert json.loads(out) == client.post("/api/v1/inference/estimate", json=INFERENCE).json()
    flags = ["--model", "llama-3-8b", "--accelerator", "h100-sxm-80gb,a100-sxm-80gb"]
    flags += ["--gpus", "8,16", "--tp", "1,2", "--pp", "1,2", "--recompute", "selective"]
    code, out, _ = run(capsys, "sweep", *flags, "--page-size", "7", "--json")
    assert json.loads(out) == client.post("/api/v1/training/sweep", json=TRAINING_SWEEP).json()


def test_a_pasted_config_as_the_model(
    client: TestClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = write(tmp_path, CONFIG, "config.json")
    code, out, _ = run(capsys, "train", "--model", config, "--json")
    assert code == 0
    assert (
        json.loads(out) == client.post("/api/v1/training/estimate", json={"model": CONFIG}).json()
    )


def test_import_model_is_the_apis_spec(
    client: TestClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "import-model", write(tmp_path, CONFIG, "config.json"), "--json")
    assert code == 0
    assert json.loads(out) == client.post("/api/v1/models/import", json=CONFIG).json()
    code, out, _ = run(capsys, "import-model", "-", "--json", stdin=json.dumps(CONFIG))
    assert json.loads(out) == client.post("/api/v1/models/import", json=CONFIG).json()
    code, out, _ = run(capsys, "import-model", "llama-3-8b", "--json")
    assert json.loads(out) == client.get("/api/v1/models/llama-3-8b").json()
    code, out, _ = run(capsys, "import-model", "llama-3-8b")
    assert "llama-3-8b (llama): 8,030,261,248 parameters" in out


def test_tables_show_the_apis_numbers(
    client: TestClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    api = client.post("/api/v1/training/estimate", json=TRAINING).json()
    code, out, _ = run(capsys, "train", write(tmp_path, TRAINING))
    m, t = api["memory_per_gpu"], api["time"]
    assert code == 0
    assert f"{m['total_bytes'] / 2**30:,.2f} of {m['capacity_bytes'] / 2**30:,.2f} GiB" in out
    assert f"step {t['step_s']:,.3f} s" in out
    assert f"MFU {api['throughput']['mfu']:.1%}" in out
    weights = [line.split() for line in out.splitlines() if line.strip().startswith("weights ")]
    assert weights == [["weights", f"{m['weights_bytes'] / 2**30:,.2f}", weights[0][2]]]
    compute = [line.split() for line in out.splitlines() if line.strip().startswith("compute ")]
    assert compute[0][1] == f"{t['breakdown']['compute_s'] * 1e3:,.2f}"

    api = client.post("/api/v1/inference/estimate", json=INFERENCE).json()
    code, out, _ = run(capsys, "infer", write(tmp_path, INFERENCE))
    assert f"TTFT {api['latency']['ttft_s'] * 1e3:,.2f} ms" in out
    assert "time per output token" in out and "kv_cache" in out

    api = client.post("/api/v1/training/sweep", json=TRAINING_SWEEP).json()
    code, out, _ = run(capsys, "sweep", write(tmp_path, TRAINING_SWEEP))
    assert f"{api['counts']['feasible']:,} feasible" in out
    assert f"feasible rows 1-7 of {api['total_rows']:,}:" in out
    assert len([line for line in out.splitlines() if line.startswith(("h100", "a100"))]) == 7


def test_csv(client: TestClient, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "sweep", write(tmp_path, TRAINING_SWEEP), "--csv")
    api = client.post("/api/v1/training/sweep?format=csv", json=TRAINING_SWEEP)
    assert code == 0 and out == api.text
    code, out, _ = run(capsys, "sweep", "--serving", write(tmp_path, SERVING_SWEEP), "--csv")
    assert out == client.post("/api/v1/inference/sweep?format=csv", json=SERVING_SWEEP).text
    # an estimate as key,value rows: every number of the JSON under its dotted key
    api = client.post("/api/v1/training/estimate", json=TRAINING).json()
    code, out, _ = run(capsys, "train", write(tmp_path, TRAINING), "--csv")
    rows = dict(csv.reader(io.StringIO(out)))
    assert rows.pop("key") == "value"
    assert float(rows["memory_per_gpu.weights_bytes"]) == api["memory_per_gpu"]["weights_bytes"]
    assert float(rows["time.breakdown.tp_comm_s"]) == api["time"]["breakdown"]["tp_comm_s"]
    assert rows["notes.0"] == api["notes"][0]


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["train", "--model", "nope"], "", "model: unknown model id 'nope'"),
        (["train", "-"], '{"model": "llama-3-70b", "layout": {"tp": 3}}', "layout.tp=3: tp=3 "),
        (["train", "-"], '{"model": "llama-3-8b",', "stdin: not valid JSON"),
        (["train", "-"], "[1, 2]", "must hold a JSON object"),
        (["train", "no-such-plan.json"], "", "no-such-plan.json: No such file or directory"),
        (["train", "--model", "llama-3-8b", "--tp", "0"], "", "layout.tp=0: Input should be"),
        (["train", "-"], '{"model": "llama-3-8b", "tpp": 2}', "tpp"),
        (["infer", "--model", "llama-3-8b", "--precision", "fp7"], "", "precision"),
        (["infer", "--model", "llama-3-8b", "--accelerator", "h1000"], "", "accelerator: "),
        (["sweep", "--serving", "--model", "llama-3-8b", "--gpus", "8"], "", "--gpus: not an"),
        (["import-model", "-"], '{"hidden_size": 4096}', "config.model_type"),
        (["import-model", "missing.json"], "", "missing.json: No such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], stdin: str, message: str
) -> None:
    code, out, err = run(capsys, *argv, stdin=stdin)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


def test_argument_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--model", "llama-3-8b", "--tp", "1,x"])
    assert exc.value.code == 2
    assert "'1,x': a comma-separated list of integers" in capsys.readouterr().err


def test_bad_settings_are_bad_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANNER_WORKERS", "many")
    code, _, err = run(capsys, "serve")
    assert code == 2
    assert err == "error: PLANNER_WORKERS='many': must be an integer from 1 to 256\n"


def test_migrate_creates_the_plan_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from sqlalchemy import create_engine, inspect

    url = f"sqlite:///{tmp_path / 'plans.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    assert run(capsys, "migrate")[0] == 0
    engine = create_engine(url)
    assert "plans" in inspect(engine).get_table_names()
    engine.dispose()


@pytest.mark.parametrize("command", ["train", "infer", "sweep"])
def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """A field's help text may hold a % ("5%"): argparse must not read it as a format."""
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "--price" in out


def test_an_estimate_imports_none_of_the_web_service() -> None:
    """A catalog estimate on the command line loads the core, pydantic for its request and the
    tables; the web framework, the store and the templates stay unimported (they took half a
    second of each call: benchmarks/bench_cli.py), and a training estimate needs no numpy (the
    serving and sweep engines' own). ``--help`` needs no request model at all."""
    code = (
        "import sys\n"
        "from app.cli.commands import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    root = Path(__file__).resolve().parents[1]
    for argv, absent in (
        (["train", "--model", "llama-3-70b", "--gpus", "64"], (*SERVICE_PACKAGES, "numpy")),
        (["infer", "--model", "llama-3-8b"], SERVICE_PACKAGES),
        (["--help"], (*SERVICE_PACKAGES, "pydantic")),
    ):
        done = subprocess.run(
            [sys.executable, "-c", code, *argv], cwd=root, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        loaded = set(done.stdout.splitlines()[-1].split())
        assert "estimator" in loaded and not loaded & set(absent), (argv, loaded & set(absent))
