"""Models by their Hugging Face id, against a Hub on loopback (tests/hub_server.py) that
serves the Hub's file layout and headers: catalog-known ids offline, fetched ids with their
quantization and parameter cross-check, saved plans that reopen from their snapshot, the team
catalog, and every refusal (404, 403, 422, 424) naming the field, none of them hanging."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import hub
from app.cli.commands import main
from app.main import app
from app.settings import current
from estimator import count_params, model_from_config
from tests.hub_server import HubServer, Repo

API = "/api/v1"
TOKEN = "hf_test_secret_token_123"
LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "intermediate_size": 2816,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
}
PARAMS = count_params(model_from_config(LLAMA)).total
NAMES = [f"model.layers.{i}.mlp.down_proj.weight" for i in range(4)] + ["lm_head.weight"]


def index(total_bytes: int, names: list[str] = NAMES) -> dict[str, Any]:
    return {
        "metadata": {"total_size": total_bytes},
        "weight_map": {n: "m.safetensors" for n in names},
    }


def repos() -> dict[str, Repo]:
    fp8 = {**LLAMA, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    scales = [n.replace(".weight", ".weight_scale_inv") for n in NAMES[:4]]
    return {
        "org/tiny": Repo({"config.json": LLAMA, "model.safetensors.index.json": index(2 * PARAMS)}),
        "org/tiny-v2": Repo(
            {"config.json": {**LLAMA, "num_hidden_layers": 6}},
            commit="b" * 40,
            revisions=("main", "v2"),
        ),
        "org/tiny-fp8": Repo(
            {"config.json": fp8, "model.safetensors.index.json": index(PARAMS, NAMES + scales)}
        ),
        "org/tiny-nvfp4": Repo(
            {
                "config.json": LLAMA,
                "hf_quant_config.json": {
                    "producer": {"name": "modelopt"},
                    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"},
                },
            }
        ),
        "org/tiny-mtp": Repo(
            {
                "config.json": LLAMA,
                "model.safetensors.index.json": index(
                    int(2 * PARAMS * 1.2), [*NAMES, "model.layers.4.mlp.down_proj.weight"]
                ),
            }
        ),
        "org/remote-code": Repo({"config.json": {**LLAMA, "auto_map": {"AutoModel": "x.Model"}}}),
        "org/gated": Repo({"config.json": LLAMA}, gated_token=TOKEN),
        "org/no-config": Repo({"README.md": b"# a dataset, not a model"}),
        "org/huge": Repo({"config.json": 50_000_000}),
        "org/broken": Repo({"config.json": b'{"model_type": "llama", '}),
        "org/slow": Repo({"config.json": LLAMA}, slow_s=3.0),
    }


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubServer]:
    hub_server = HubServer(repos())
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("PLANNER_HF_CACHE_DIR", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("PLANNER_HF_TIMEOUT_S", "1")
    for name in ("PLANNER_HF_TOKEN", "PLANNER_HF_OFFLINE", "PLANNER_HF_FETCH", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    current.cache_clear()
    hub.forget()
    yield hub_server
    hub_server.stop()
    monkeypatch.undo()
    current.cache_clear()
    hub.forget()


def settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    current.cache_clear()
    hub.forget()


client = TestClient(app)


def estimate(model: str, **body: Any) -> Any:
    return client.post(f"{API}/inference/estimate", json={"model": model, **body})


def refusal(r: Any, status: int, words: str) -> None:
    assert r.status_code == status, r.text
    detail = r.json()["detail"][0]
    assert detail["field"] in ("model", "hf_id") and words in detail["rule"], detail


def test_a_catalog_id_resolves_offline(server: HubServer) -> None:
    r = client.get(f"{API}/hub/model", params={"model": "meta-llama/Llama-2-7b-hf"})
    assert r.status_code == 200
    body = r.json()
    assert (body["origin"], body["catalog_id"], body["commit"]) == ("catalog", "llama-2-7b", None)
    assert "read offline from its bundled config" in body["notes"][-1]
    assert estimate("meta-llama/Llama-2-7b-hf").status_code == 200
    assert server.requests == []  # nothing asked of the hub
    # DeepSeek-V3's checkpoint is FP8: named by its id, a serving plan defaults to it
    r = client.get(f"{API}/hub/model", params={"model": "deepseek-ai/DeepSeek-V3"})
    assert r.json()["default_precision"] == "fp8-params"


def test_a_fetched_id_is_read_cross_checked_and_cached(server: HubServer) -> None:
    r = client.get(f"{API}/hub/model", params={"model": "org/tiny"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["origin"], body["commit"], body["endpoint"]) == (
        "hub",
        "0" * 0 + Repo({}).commit,
        server.url,
    )
    check = body["cross_check"]
    assert check["ours"] == PARAMS == body["model"]["params"]["total"]
    assert (check["implied"], check["verdict"]) == (PARAMS, "matches")
    assert any("cross-check" in n and "matches" in n for n in body["notes"])
    answer = estimate("org/tiny")
    assert answer.status_code == 200
    assert any("fetched from " + server.url in n for n in answer.json()["notes"])
    # the second answer came from memory, and the launch commands name the repository
    assert "vllm serve org/tiny" in answer.json()["launch"]["vllm"]
    asked = len(server.requests)
    assert estimate("org/tiny").status_code == 200 and len(server.requests) == asked


def test_a_revision_is_fetched_and_a_commit_read_from_the_cache(server: HubServer) -> None:
    r = client.get(f"{API}/hub/model", params={"model": "org/tiny-v2@v2"})
    assert r.status_code == 200 and r.json()["model"]["num_layers"] == 6
    assert r.json()["cross_check"] is None
    assert any("not cross-checked" in n for n in r.json()["notes"])
    refusal(client.get(f"{API}/hub/model", params={"model": "org/tiny-v2@v9"}), 404, "revision")
    hub.forget()
    server.requests.clear()
    assert (
        client.get(f"{API}/hub/model", params={"model": f"org/tiny-v2@{'b' * 40}"}).status_code
        == 200
    )
    assert server.requests == []  # a commit the cache holds is read with no request


def test_the_quantization_found_sets_the_default_precision(server: HubServer) -> None:
    fp8 = client.get(f"{API}/hub/model", params={"model": "org/tiny-fp8"}).json()
    assert fp8["quantization"]["method"] == "fp8" and fp8["default_precision"] == "fp8-params"
    assert fp8["cross_check"]["verdict"] == "differs"
    assert "quantization scales" in fp8["cross_check"]["explanations"][0]
    default = estimate("org/tiny-fp8").json()["memory_per_gpu"]["weights_bytes"]
    bf16 = estimate("org/tiny-fp8", precision="bf16").json()["memory_per_gpu"]["weights_bytes"]
    fp8_given = estimate("org/tiny-fp8", precision="fp8-params").json()["memory_per_gpu"]
    assert default == fp8_given["weights_bytes"] < bf16  # FP8 unless the request says otherwise
    nvfp4 = client.get(f"{API}/hub/model", params={"model": "org/tiny-nvfp4"}).json()
    assert nvfp4["quantization"]["source"] == "hf_quant_config.json"
    assert nvfp4["default_precision"] == "nvfp4-serving"  # NVFP4 weights, an FP8 KV cache


def test_a_mismatch_is_explained(server: HubServer) -> None:
    check = client.get(f"{API}/hub/model", params={"model": "org/tiny-mtp"}).json()["cross_check"]
    assert check["verdict"] == "differs" and check["ratio"] == pytest.approx(0.2, abs=1e-6)
    assert "past num_hidden_layers (4): multi-token-prediction" in check["explanations"][0]


def test_remote_code_is_read_as_data(server: HubServer) -> None:
    notes = client.get(f"{API}/hub/model", params={"model": "org/remote-code"}).json()["notes"]
    assert any("no code is fetched or run" in n for n in notes)


@pytest.mark.parametrize(
    ("model", "status", "words"),
    [
        ("org/missing", 404, "is not a repository"),
        ("org/no-config", 422, "has no config.json"),
        ("org/huge", 422, "50,000,000 bytes, over the 1,000,000-byte limit"),
        ("org/broken", 422, "not readable"),
        ("org/gated", 403, "set PLANNER_HF_TOKEN"),
        ("org/slow", 424, "could not be read"),
        ("org/a/b", 422, "Hugging Face id 'org/name'"),
        ("../etc/passwd", 422, "Hugging Face id 'org/name'"),
    ],
)
def test_refusals_name_the_field(server: HubServer, model: str, status: int, words: str) -> None:
    started = time.monotonic()
    refusal(estimate(model), status, words)
    assert time.monotonic() - started < 10  # bounded by PLANNER_HF_TIMEOUT_S=1, never a hang
    if model == "org/huge":
        assert ("GET", "/org/huge/resolve/main/config.json") not in server.requests


def test_a_token_opens_a_gated_repository_and_is_never_kept(
    server: HubServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings(monkeypatch, PLANNER_HF_TOKEN="wrong")
    refusal(estimate("org/gated"), 403, "has no access")
    settings(monkeypatch, PLANNER_HF_TOKEN=TOKEN)
    assert estimate("org/gated").status_code == 200
    plan = client.post(
        f"{API}/plans",
        json={"name": "gated", "kind": "inference", "request": {"model": "org/gated"}},
    )
    assert plan.status_code == 201, plan.text
    assert TOKEN not in plan.text and TOKEN not in caplog.text and TOKEN not in repr(current())


def test_the_cache_answers_when_the_hub_is_down_or_offline(
    server: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert estimate("org/tiny").status_code == 200
    server.stop()
    hub.forget()
    r = client.get(f"{API}/hub/model", params={"model": "org/tiny"})
    assert r.status_code == 200 and r.json()["origin"] == "cache"
    assert r.json()["cross_check"]["verdict"] == "matches"  # the index came from the cache too
    refusal(estimate("org/tiny-fp8"), 424, "not in the cache")
    settings(monkeypatch, PLANNER_HF_OFFLINE="1")
    assert client.get(f"{API}/hub/model", params={"model": "org/tiny"}).json()["origin"] == "cache"
    refusal(estimate("org/tiny-fp8"), 424, "offline")


def test_fetching_can_be_turned_off(server: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    settings(monkeypatch, PLANNER_HF_FETCH="0")
    refusal(estimate("org/tiny"), 422, "PLANNER_HF_FETCH=0")
    assert estimate("meta-llama/Llama-2-7b-hf").status_code == 200  # the catalog still answers
    assert server.requests == []


def test_a_saved_plan_reopens_from_its_snapshot(server: HubServer) -> None:
    request = {"model": "org/tiny-fp8", "concurrency": 4}
    saved = client.post(
        f"{API}/plans", json={"name": "fp8", "kind": "inference", "request": request}
    )
    assert saved.status_code == 201, saved.text
    source = saved.json()["saved_result"]["model_source"]
    assert source["commit"] == Repo({}).commit and source["config"]["quantization_config"]
    server.stop()  # the repository is gone (or gated): the plan still reopens
    hub.forget()
    opened = client.get(f"{API}/plans/{saved.json()['id']}").json()
    assert opened["current_error"] is None and opened["changed"] == {}
    page = client.get(f"/plans/{saved.json()['id']}")
    assert page.status_code == 200 and "model_source" not in page.text


def test_a_fetched_model_is_saved_to_the_team_catalog(server: HubServer) -> None:
    body = {"id": "tiny-fp8-team", "hf_id": "org/tiny-fp8"}
    r = client.post(f"{API}/team/hub-models", json=body)
    assert r.status_code == 201, r.text
    assert f"org/tiny-fp8 at commit {Repo({}).commit}" in r.json()["source"]
    server.stop()
    assert estimate("tiny-fp8-team").status_code == 200  # a team id: no hub needed
    taken = client.post(
        f"{API}/team/hub-models", json={"id": "x1", "hf_id": "meta-llama/Llama-2-7b-hf"}
    )
    refusal(taken, 409, "is the catalog's 'llama-2-7b'")
    client.delete(f"{API}/team/models/tiny-fp8-team")


def test_the_cli_and_the_page_take_an_id(
    server: HubServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code = main(["infer", "--model", "org/tiny", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out) == estimate("org/tiny").json()
    code = main(["infer", "--model", "org/missing"])
    _, err = capsys.readouterr()
    assert code == 2 and "org/missing is not a repository" in err and "Traceback" not in err
    page = client.get("/serving", params={"model": "org/tiny"})
    assert page.status_code == 200 and "fetched from" in page.text
    bad = client.get("/serving", params={"model": "org/gated"})
    assert bad.status_code == 403 or 'id="e-model"' in bad.text


def test_startup_does_not_import_huggingface_hub() -> None:
    import subprocess
    import sys

    code = "import sys, app.main; print('huggingface_hub' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
