"""The REST API: happy paths whose numbers must equal the core's for the same plan (and the
published Llama-2-7B count), and a table of bad inputs with the status and field each must
name."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.responses import json_response
from app.main import app
from app.schemas.inference import InferenceRequest
from app.schemas.training import TrainingRequest
from estimator import (
    PRESETS,
    InferenceSetup,
    Parallelism,
    TrainingSetup,
    count_params,
    get_accelerator,
    get_model,
    get_precision,
    model_entry,
    model_ids,
)
from estimator.catalog import price
from estimator.serving.estimate import estimate_inference
from estimator.sweep.serving import ServingSearch, ServingWorkload, sweep_serving
from estimator.sweep.training import (
    TrainingSearch,
    TrainingWorkload,
    sweep_training,
)
from estimator.timing.training import BREAKDOWN, TimingOptions, estimate_training

API = "/api/v1"
client = TestClient(app)

# The documented examples of the OpenAPI schema are the plans these tests check.
TRAINING: dict[str, Any] = TrainingRequest.model_json_schema()["examples"][0]
INFERENCE: dict[str, Any] = InferenceRequest.model_json_schema()["examples"][0]
SWEEP = {
    "model": "llama-3-70b",
    "accelerator": ["h100-sxm-80gb", "h200-sxm-141gb"],
    "num_gpus": [64, 128],
    "layout": {"tp": [4, 8], "pp": [1, 2, 4], "zero_stage": [1, 3]},
    "micro_batch_size": [1, 2],
    "global_batch_size": 1024,
    "tokens": 2e12,
}


def post(path: str, body: Any, **kw: Any) -> Any:
    return client.post(API + path, json=body, **kw)


# --- catalog ----------------------------------------------------------------------------------


def test_models_list_has_exact_counts() -> None:
    body = client.get(f"{API}/models").json()
    assert [m["id"] for m in body] == list(model_ids())
    for m in body:
        assert m["params"]["total"] == count_params(get_model(m["id"])).total
    llama2 = next(m for m in body if m["id"] == "llama-2-7b")
    # Hugging Face's count for meta-llama/Llama-2-7b-hf (sum of its safetensors' tensor sizes).
    assert llama2["params"]["total"] == 6_738_415_616


def test_model_detail_and_import_agree() -> None:
    detail = client.get(f"{API}/models/mixtral-8x7b").json()
    c = count_params(get_model("mixtral-8x7b"))
    assert detail["params"] == {
        "total": c.total,
        "active": c.active,
        "by_component": c.by_component(),
    }
    assert detail["num_experts"] == 8 and detail["experts_per_token"] == 2
    assert detail["sources"] and detail["config"] == model_entry("mixtral-8x7b")["config"]
    config = model_entry("mixtral-8x7b")["config"]
    pasted = post("/models/import", config).json()
    uploaded = client.post(
        f"{API}/models/import", files={"file": ("config.json", json.dumps(config).encode())}
    ).json()
    assert pasted["params"] == uploaded["params"] == detail["params"]
    assert pasted["id"] == "custom"


def test_accelerators_and_precisions() -> None:
    h100 = client.get(f"{API}/accelerators/h100-sxm-80gb").json()
    acc = get_accelerator("h100-sxm-80gb")
    assert h100["memory_bytes"] == acc.memory_bytes
    assert h100["peak_flop_per_s"]["bf16"] == acc.peak("bf16")
    p = price("h100-sxm-80gb")
    assert p is not None and h100["price_usd_per_gpu_hour"] == p.usd_per_gpu_hour
    assert p.date in h100["price_source"] and h100["sources"]
    assert len(client.get(f"{API}/accelerators").json()) >= 23
    precisions = client.get(f"{API}/precisions").json()
    assert [p["name"] for p in precisions["presets"]] == list(PRESETS)
    assert precisions["dtypes"]["bf16"] == 2


# --- estimates --------------------------------------------------------------------------------


def _core_training() -> Any:
    model = get_model("llama-3-70b")
    return estimate_training(
        model,
        get_accelerator("h100-sxm-80gb"),
        Parallelism(tp=8, pp=2, dp=4, sequence_parallel=True, zero_stage=1),
        TrainingSetup(seq_len=4096, global_batch_size=1024, recompute="selective"),
        get_precision("bf16"),
        tokens=2e12,
        price_usd_per_gpu_hour=3.0,
        options=TimingOptions(),
    )


def test_training_estimate_equals_core() -> None:
    body = post("/training/estimate", {**TRAINING, "price_usd_per_gpu_hour": 3.0}).json()
    core = _core_training()
    mem = body["memory_per_gpu"]
    for name, value in core.memory.terms().items():
        assert mem[name] == value, name
    assert mem["total_bytes"] == core.memory.total_bytes and mem["fits"] is core.memory.fits
    assert body["layout"]["dp"] == 4 and body["num_gpus"] == 64
    t = body["time"]
    assert t["step_s"] == core.time.step_s
    assert t["breakdown"] == {f"{k}_s": core.time.breakdown[k] for k in BREAKDOWN}
    assert sum(t["breakdown"].values()) == pytest.approx(t["step_s"], rel=1e-12)
    assert body["throughput"]["mfu"] == core.mfu and body["throughput"]["hfu"] == core.hfu
    assert body["cost"]["usd"] == core.cost_usd == pytest.approx(core.gpu_hours * 3.0)
    assert body["cost"]["price_source"] == "request"
    assert body["params"]["total"] == count_params(get_model("llama-3-70b")).total


def test_training_estimate_defaults_price_and_inline_config() -> None:
    by_id = post("/training/estimate", TRAINING).json()
    p = price("h100-sxm-80gb")
    assert p is not None and by_id["cost"]["price_usd_per_gpu_hour"] == p.usd_per_gpu_hour
    assert p.date in by_id["cost"]["price_source"]
    inline = post(
        "/training/estimate", {**TRAINING, "model": model_entry("llama-3-70b")["config"]}
    ).json()
    assert inline["model"] == "custom"
    assert inline["memory_per_gpu"] == by_id["memory_per_gpu"]
    assert inline["time"] == by_id["time"]


def test_inference_estimate_equals_core() -> None:
    body = post("/inference/estimate", {**INFERENCE, "price_usd_per_gpu_hour": 2.0}).json()
    core = estimate_inference(
        get_model("llama-3-70b"),
        get_accelerator("h100-sxm-80gb"),
        Parallelism(tp=4),
        InferenceSetup(2048, 256, 32),
        get_precision({"weights": "fp8", "kv_cache": "fp8"}),
        price_usd_per_gpu_hour=2.0,
        engine="vllm",  # the request's default engine: the steady state under its load too
    )
    assert body["memory_per_gpu"]["kv_cache_bytes"] == core.memory.kv_cache_bytes
    assert body["kv_cache_bytes_per_token"] == core.memory.kv_cache_bytes_per_token
    assert body["max_concurrency"] == core.max_concurrency
    # the headline latency is the steady state at the load asked for, the lone request beside it
    lat = body["latency"]
    assert lat["ttft_lone_s"] == core.ttft_s and lat["tpot_lone_s"] == core.tpot_s
    assert core.load is not None
    assert lat["ttft_s"] == core.load.ttft_s and lat["tpot_s"] == core.load.tpot_s
    assert lat["ttft_p99_s"] == core.load.ttft_p99_s >= lat["ttft_s"]
    assert sum(body["latency"]["tpot_breakdown"].values()) == pytest.approx(core.tpot_s)
    assert body["throughput"]["output_tokens_per_s"] == core.output_tokens_per_s
    assert body["cost"]["usd_per_1m_output_tokens"] == core.usd_per_1m_output_tokens
    assert body["cost"]["usd_per_1k_output_tokens"] == pytest.approx(
        core.usd_per_1m_output_tokens / 1e3  # type: ignore[operator]
    )
    assert len(body["curve"]) == len(core.curve)


# --- sweeps -----------------------------------------------------------------------------------


def test_training_sweep_equals_core_and_pages() -> None:
    core = sweep_training(
        get_model("llama-3-70b"),
        TrainingWorkload(4096, 1024, tokens=2e12),
        TrainingSearch(
            accelerators=("h100-sxm-80gb", "h200-sxm-141gb"),
            num_gpus=(64, 128),
            tp=(4, 8),
            pp=(1, 2, 4),
            zero=(1, 3),
            micro_batch=(1, 2),
        ),
    )
    first = post("/training/sweep", {**SWEEP, "page_size": 7}).json()
    assert first["counts"] == core.counts and first["objective"] == core.objective == "cost"
    assert first["total_rows"] == core.counts["feasible"]
    costs = [r["usd_per_1m_tokens"] for r in first["rows"]]
    assert costs == sorted(costs) and len(costs) == 7
    cheapest = int(core.feasible[core.columns["usd_per_1m_tokens"][core.feasible].argmin()])
    assert first["rows"][0]["usd_per_1m_tokens"] == core.columns["usd_per_1m_tokens"][cheapest]
    second = post("/training/sweep", {**SWEEP, "page_size": 7, "page": 2}).json()
    assert second["rows"][0]["usd_per_1m_tokens"] >= costs[-1]
    # the first recommendation is the cheapest, or a tie within the measured band of it
    # (``estimator.accuracy.tie_band``), ranked first among the ties by the tie-breakers
    top = first["recommendations"][0]
    if top["tie"]:
        from estimator.accuracy import tie_band

        assert costs[0] <= top["row"]["usd_per_1m_tokens"] <= costs[0] * (1 + tie_band()[0])
    else:
        assert top["row"]["usd_per_1m_tokens"] == costs[0]
    assert len(first["pareto_cost"]) == core.pareto_cost.size
    text = client.post(f"{API}/training/sweep?format=csv", json=SWEEP).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == core.counts["feasible"]
    assert float(rows[0]["usd_per_1m_tokens"]) == costs[0]


def test_training_sweep_restricts_dp_and_sorts_by_speed() -> None:
    body = post(
        "/training/sweep",
        {**SWEEP, "layout": {**SWEEP["layout"], "dp": 4}, "sort": "tokens_per_s"},
    ).json()
    assert body["rows"] and {r["dp"] for r in body["rows"]} == {4}
    speeds = [r["tokens_per_s"] for r in body["rows"]]
    assert speeds == sorted(speeds, reverse=True)


def test_serving_sweep_equals_core() -> None:
    req = {
        "model": "llama-3-8b",
        "accelerator": ["h100-sxm-80gb", "a100-sxm-80gb"],
        "layout": {"tp": [1, 2], "pp": 1},
        "precision": "bf16",
        "input_len": 1024,
        "output_len": 128,
        "tpot_target_s": 0.05,
    }
    body = post("/inference/sweep", {**req, "rows": "all"}).json()
    core = sweep_serving(
        get_model("llama-3-8b"),
        ServingWorkload(1024, 128, tpot_target_s=0.05),
        ServingSearch(
            accelerators=("h100-sxm-80gb", "a100-sxm-80gb"), tp=(1, 2), pp=(1,), precision=("bf16",)
        ),
    )
    assert body["total_rows"] == len(core.rows) == 4
    for got, want in zip(body["rows"], core.rows, strict=True):
        assert {k: got[k] for k in want} == want
    assert body["counts"] == core.counts
    text = client.post(f"{API}/inference/sweep?format=csv", json=req).text
    assert len(text.strip().splitlines()) == 1 + body["counts"]["ok"]


def test_same_request_same_bytes() -> None:
    for path, body in (
        ("/training/estimate", TRAINING),
        ("/inference/estimate", INFERENCE),
        ("/training/sweep", SWEEP),
    ):
        assert post(path, body).content == post(path, body).content


# --- service ----------------------------------------------------------------------------------


def test_health_version_openapi_and_offline_docs() -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/version").json()["api"] == "v1"
    spec = client.get("/openapi.json").json()
    for path in (
        "/api/v1/models",
        "/api/v1/models/{model_id}",
        "/api/v1/models/import",
        "/api/v1/accelerators",
        "/api/v1/accelerators/{accelerator_id}",
        "/api/v1/precisions",
        "/api/v1/training/estimate",
        "/api/v1/training/sweep",
        "/api/v1/inference/estimate",
        "/api/v1/inference/sweep",
        "/healthz",
        "/version",
    ):
        assert path in spec["paths"], path
    html = client.get("/docs").text
    assert "cdn" not in html and "https://" not in html
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/static/vendor/swagger-ui/{asset}" in html
        assert client.get(f"/static/vendor/swagger-ui/{asset}").status_code == 200


# --- bad input --------------------------------------------------------------------------------

LLAMA_CONFIG = model_entry("llama-3-8b")["config"]

# (path, body, status, field): every refusal names the field it is about.
BAD: list[tuple[str, Any, int, str]] = [
    ("/training/estimate", {}, 422, "model"),
    ("/training/estimate", {"model": "llama-9b"}, 404, "model"),
    ("/training/estimate", {"model": "llama-3-8b", "accelerator": "h1000"}, 404, "accelerator"),
    ("/training/estimate", {"model": "llama-3-70b", "layout": {"tp": 3}}, 422, "layout.tp"),
    ("/training/estimate", {"model": "llama-3-70b", "layout": {"tp": 0}}, 422, "layout.tp"),
    ("/training/estimate", {"model": "llama-3-70b", "layout": {"tp": "8"}}, 422, "layout.tp"),
    ("/training/estimate", {"model": "llama-3-70b", "layout": {"xp": 2}}, 422, "layout.xp"),
    ("/training/estimate", {"model": "llama-3-70b", "colour": "red"}, 422, "colour"),
    (
        "/training/estimate",
        {"model": "llama-3-70b", "num_gpus": 63, "layout": {"tp": 8}},
        422,
        "num_gpus",
    ),
    (
        "/training/estimate",
        {"model": "llama-3-70b", "num_gpus": 64, "layout": {"tp": 8, "dp": 4}},
        422,
        "num_gpus",
    ),
    # 61 layers over 64 virtual stages: more stages than layers, embedding and loss.
    (
        "/training/estimate",
        {"model": "deepseek-v3", "num_gpus": 32, "layout": {"pp": 32, "vp": 2}},
        422,
        "layout.pp",
    ),
    (
        "/training/estimate",
        {"model": "llama-3-70b", "layout": {"pp": 3, "pipeline_split": "even"}},
        422,
        "layout.pp",
    ),
    (
        "/training/estimate",
        {"model": "llama-3-70b", "layout": {"pp": 2, "pipeline_split": "layout"}},
        422,
        "layout.pipeline_layout",
    ),
    ("/training/estimate", {"model": "llama-3-70b", "layout": {"vp": 2}}, 422, "layout.vp"),
    ("/training/estimate", {"model": "llama-3-70b", "layout": {"ep": 2}}, 422, "layout.ep"),
    (
        "/training/estimate",
        {"model": "llama-3-70b", "layout": {"zero_stage": 4}},
        422,
        "layout.zero_stage",
    ),
    ("/training/estimate", {"model": "llama-3-8b", "seq_len": 0}, 422, "seq_len"),
    ("/training/estimate", {"model": "llama-2-7b", "seq_len": 8192}, 422, "seq_len"),
    (
        "/training/estimate",
        {"model": "llama-3-8b", "micro_batch_size": 2, "global_batch_size": 3},
        422,
        "global_batch_size",
    ),
    ("/training/estimate", {"model": "llama-3-8b", "recompute": "some"}, 422, "recompute"),
    ("/training/estimate", {"model": "llama-3-8b", "precision": "fp7"}, 422, "precision"),
    (
        "/training/estimate",
        {"model": "llama-3-8b", "precision": {"weights": "fp3"}},
        422,
        "precision.weights",
    ),
    (
        "/training/estimate",
        {"model": "llama-3-8b", "precision": {"colour": "x"}},
        422,
        "precision.colour",
    ),
    (
        "/training/estimate",
        {"model": "llama-3-8b", "accelerator": "a100-sxm-80gb", "precision": "fp8"},
        422,
        "precision.gemm_inputs",  # the support matrix: Ampere has no fp8 tensor cores
    ),
    (
        "/training/estimate",
        {"model": "llama-3-8b", "flash_attention": False, "num_gpus": 2, "layout": {"cp": 2}},
        422,
        "layout.cp",
    ),
    ("/training/estimate", {"model": "llama-3-8b", "tokens": -1}, 422, "tokens"),
    (
        "/training/estimate",
        {"model": "llama-3-8b", "price_usd_per_gpu_hour": -1},
        422,
        "price_usd_per_gpu_hour",
    ),
    (
        "/training/estimate",
        {"model": {**LLAMA_CONFIG, "hidden_size": "big"}},
        422,
        "model.hidden_size",
    ),
    ("/training/estimate", {"model": {"hidden_size": 4096}}, 422, "model.model_type"),
    (
        "/training/estimate",
        {"model": {**LLAMA_CONFIG, "num_hidden_layers": 10**9}},
        422,
        "model.num_hidden_layers",
    ),
    ("/training/estimate", [1, 2], 422, "body"),
    (
        "/inference/estimate",
        {"model": "llama-3-70b", "num_gpus": 8, "layout": {"tp": 4}},
        422,
        "num_gpus",
    ),
    ("/inference/estimate", {"model": "llama-3-8b", "output_len": -1}, 422, "output_len"),
    (
        "/inference/estimate",
        {"model": "llama-2-7b", "input_len": 4000, "output_len": 200},
        422,
        "input_len",
    ),
    (
        "/inference/estimate",
        {"model": "mixtral-8x7b", "layout": {"tp": 4, "ep": 3}},
        422,
        "layout.ep",
    ),
    ("/inference/estimate", {"model": "llama-3-8b", "concurrency": 0}, 422, "concurrency"),
    ("/inference/estimate", {"model": "llama-3-8b", "ttft_target_s": 0}, 422, "ttft_target_s"),
    (
        "/training/sweep",
        {
            "model": "llama-3-70b",
            "num_gpus": list(range(1, 65)),
            "layout": {"tp": list(range(1, 65))},
        },
        422,
        "space",
    ),
    ("/training/sweep", {"model": "llama-3-70b", "layout": {"tp": []}}, 422, "layout.tp"),
    ("/training/sweep", {"model": "llama-3-70b", "deadline_s": 86400}, 422, "deadline_s"),
    (
        "/training/sweep",
        {"model": "llama-3-70b", "precision": {"weights": "fp8"}},
        422,
        "precision",
    ),
    (
        "/training/sweep",
        {"model": "llama-3-70b", "layout": {"sequence_parallel": False}},
        422,
        "layout.sequence_parallel",
    ),
    (
        "/training/sweep",
        {"model": "llama-3-70b", "accelerator": ["h100-sxm-80gb", "tpu"]},
        404,
        "accelerator",
    ),
    ("/training/sweep", {"model": "llama-3-70b", "precision": ["bf16", "fp9"]}, 422, "precision"),
    ("/training/sweep", {"model": "llama-3-70b", "page": 0}, 422, "page"),
    (
        "/inference/sweep",
        {"model": "llama-3-70b", "layout": {"tp": [1, 2], "ep": 2}},
        422,
        "layout.ep",
    ),
    ("/inference/sweep", {"model": "llama-3-70b", "page_size": 5000}, 422, "page_size"),
    ("/models/import", {"hidden_size": 4096}, 422, "model_type"),
    ("/models/import", [1], 422, "body"),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "field"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_bad_input_names_the_field(path: str, body: Any, status: int, field: str) -> None:
    r = post(path, body)
    assert r.status_code == status, r.text
    err = r.json()
    # invalid_request: the body breaks the schema; invalid_plan: it fits, a rule refuses it
    kinds = ("not_found",) if status == 404 else ("invalid_request", "invalid_plan")
    assert err["error"] in kinds
    assert field in [d["field"] for d in err["detail"]], err
    assert err["message"]
    if status == 404:
        assert err["suggestions"]


def test_bad_bodies_and_paths() -> None:
    broken = client.post(
        f"{API}/training/estimate",
        content=b'{"model": ',
        headers={"content-type": "application/json"},
    )
    assert broken.status_code == 422 and broken.json()["detail"][0]["field"] == "body"
    binary = client.post(
        f"{API}/training/estimate",
        content=b"\xff\xfe",
        headers={"content-type": "application/json"},
    )
    assert binary.status_code == 422
    big = client.post(
        f"{API}/models/import",
        content=b" " * 1_000_001,
        headers={"content-type": "application/json"},
    )
    assert big.status_code == 413 and big.json()["error"] == "too_large"
    no_file = client.post(f"{API}/models/import", files={"other": ("c.json", b"{}")})
    assert no_file.status_code == 422 and no_file.json()["detail"][0]["field"] == "file"
    not_json = client.post(f"{API}/models/import", files={"file": ("c.json", b"not json")})
    assert not_json.status_code == 422
    unknown = client.get(f"{API}/models/llama-3-70")
    assert unknown.status_code == 404 and unknown.json()["suggestions"][0] == "llama-3-70b"
    gpu = client.get(f"{API}/accelerators/h100-sxm")
    assert gpu.status_code == 404 and "h100-sxm-80gb" in gpu.json()["suggestions"]
    fmt = client.post(f"{API}/training/sweep?format=xml", json={"model": "llama-3-8b"})
    assert fmt.status_code == 422 and fmt.json()["detail"][0]["field"] == "format"
    oversized = next(b for b in BAD if b[0] == "/training/sweep" and b[3] == "space")
    oversize = post("/training/sweep", oversized[1]).json()
    assert oversize["detail"][0]["value"] == 64 * 64 * 5 * 4 * 4 * 3 * 10  # layouts counted


def test_json_responses_refuse_non_finite_numbers_but_not_the_words() -> None:
    """The encoder writes NaN/Infinity as bare words (invalid JSON): the service raises instead,
    while the same words inside strings pass through unchanged."""
    with pytest.raises(ValueError):
        json_response({"step_s": float("nan")})
    with pytest.raises(ValueError):
        json_response([1.0, float("inf")])
    words = {"name": "NaN-free Infinity", "x": [1.5e-7, 1e22, 0.1 + 0.2, -0.0, 2**70]}
    assert json.loads(json_response(words).body) == words


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/training/estimate", {"model": "llama-3-8b", "num_gpus": 8, "layout": {"tp": 8}}),
        ("/api/v1/inference/estimate", {"model": "llama-3-8b", "concurrency": 16}),
        ("/api/v1/inference/estimate", {"model": "llama-3-8b", "layout": {"tp": 3}}),
        ("/api/v1/inference/estimate", {"model": "llama-3-8b", "concurrency": "many"}),
        ("/api/v1/training/estimate", {"model": "no-such-model"}),
        ("/api/v1/training/estimate", {"model": "llama-3-8b", "layout": {"tp": 8}, "extra": 1}),
        ("/api/v1/training/estimate", "[1, 2"),  # not JSON
        ("/api/v1/inference/estimate", ""),  # no body
    ],
)
def test_estimates_answer_alike_on_the_lean_route_and_fastapis(path: str, body: Any) -> None:
    """A plain JSON body is served by the lean route; the same body under another JSON content
    type goes through FastAPI's own route. Answers and refusals are the same bytes."""
    data = body if isinstance(body, str) else json.dumps(body)
    lean = client.post(path, content=data, headers={"content-type": "application/json"})
    fastapi = client.post(
        path, content=data, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert lean.status_code == fastapi.status_code
    assert lean.content == fastapi.content
    assert lean.headers["content-type"] == fastapi.headers["content-type"]


def test_the_fast_path_is_in_place_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fast path on, a plain route answers each single estimate ahead of FastAPI's;
    with ``PLANNER_FAST_ESTIMATES=0`` only FastAPI's routes are there, and answer the same."""
    from starlette.routing import Route

    from app.main import create_app

    def plain_estimate_routes(a: Any) -> list[str]:
        return [r.path for r in a.router.routes if type(r) is Route and "estimate" in r.path]

    assert plain_estimate_routes(app) == [
        "/api/v1/training/estimate",
        "/api/v1/inference/estimate",
    ]
    monkeypatch.setenv("PLANNER_FAST_ESTIMATES", "0")
    plain = create_app()
    assert plain_estimate_routes(plain) == []
    body = {"model": "llama-3-8b", "num_gpus": 8, "layout": {"tp": 2}}
    slow = TestClient(plain).post(f"{API}/training/estimate", json=body)
    assert slow.status_code == 200 and slow.content == post("/training/estimate", body).content
