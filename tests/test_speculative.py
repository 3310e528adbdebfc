"""Speculative decoding in serving estimates (issue 22, item 4): a step verifies k + 1 tokens
per sequence and drafts k, emits the acceptance length, and TPOT, throughput, memory, the load
model, the API, the page, the CLI and the launch commands follow."""

from __future__ import annotations

import io
import json
from dataclasses import fields
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli.commands import main
from app.main import app
from app.schemas.inference import InferenceRequest
from app.web.forms import SERVING_INPUTS, request_body
from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    count_params,
    get_accelerator,
    get_model,
    get_precision,
    inference_memory,
)
from estimator.inputs.speculative import Speculative, mtp_modules
from estimator.memory.inference import drafter_bytes
from estimator.serving.estimate import estimate_inference, estimate_load
from estimator.serving.load import budget_cap

client = TestClient(app)
H100 = get_accelerator("h100-sxm-80gb")
H200 = get_accelerator("h200-sxm-141gb")
FP8 = get_precision("fp8-serving")
BF16 = get_precision("bf16")
LLAMA = get_model("llama-3.1-70b")
DEEPSEEK = get_model("deepseek-v3")
TP4 = Parallelism(tp=4)
TP8_EP8 = Parallelism(tp=8, ep=8)


def _setup(concurrency: int = 1, spec: Speculative | None = None, **kw: Any) -> InferenceSetup:
    return InferenceSetup(1024, 256, concurrency, speculative=spec, **kw)


def _llama(concurrency: int = 1, spec: Speculative | None = None) -> Any:
    return estimate_inference(LLAMA, H100, TP4, _setup(concurrency, spec), FP8, engine="vllm")


# --- the core ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "layout", "accelerator", "spec"),
    [
        (LLAMA, TP4, H100, Speculative("eagle3", 0, 1.0)),
        (LLAMA, TP4, H100, Speculative("draft", 0, 1.0, get_model("llama-3.2-1b"))),
        (DEEPSEEK, TP8_EP8, H200, Speculative("mtp", 0, 1.0)),
    ],
    ids=["eagle3", "draft", "mtp"],
)
def test_no_drafts_and_acceptance_1_is_no_speculation_exactly(
    model: Any, layout: Parallelism, accelerator: Any, spec: Speculative
) -> None:
    """k = 0 verifies one token a step and loads no drafter: every number is today's."""
    plain = estimate_inference(model, accelerator, layout, _setup(8), FP8, engine="vllm")
    spec_e = estimate_inference(model, accelerator, layout, _setup(8, spec), FP8, engine="vllm")
    for f in fields(plain):
        if f.name not in ("speculative", "notes"):
            assert getattr(spec_e, f.name) == getattr(plain, f.name), f.name
    assert spec_e.speculative is not None and spec_e.speculative.tpot_speedup == 1.0
    rate = estimate_load(model, accelerator, layout, _setup(1, spec), FP8, request_rate=0.5)
    assert rate == estimate_load(model, accelerator, layout, _setup(1), FP8, request_rate=0.5)


def test_tpot_is_the_step_over_the_acceptance_length() -> None:
    e = _llama(1, Speculative("eagle3", 3, 2.5))
    s = e.speculative
    assert s is not None
    assert e.tpot_s == pytest.approx((s.verify_s_per_step + s.draft_s_per_step) / 2.5, rel=1e-12)
    assert sum(e.tpot_breakdown.values()) == pytest.approx(e.tpot_s, rel=1e-12)
    assert s.tpot_without_s == _llama(1).tpot_s


def test_memory_bound_tpot_falls_by_the_acceptance_length_less_the_overheads() -> None:
    """At one sequence a 70B decode step reads 17 GB of weights per GPU: verifying 4 tokens
    reads the same weights (a few % more time at most), and an EAGLE-3 layer and head cost
    under 10% of a step, so the speed-up is within 10% below the acceptance length."""
    s = _llama(1, Speculative("eagle3", 3, 2.5)).speculative
    assert s is not None
    assert s.tpot_without_s < s.verify_s_per_step < 1.02 * s.tpot_without_s
    assert 0 < s.draft_s_per_step < 0.1 * s.tpot_without_s
    assert 2.5 / 1.1 < s.tpot_speedup < 2.5


def test_the_gain_shrinks_as_the_batch_turns_compute_bound() -> None:
    spec = Speculative("eagle3", 3, 2.5)
    gains = [_llama(c, spec).speculative.tpot_speedup for c in (1, 32, 256)]  # type: ignore[union-attr]
    assert gains[0] > gains[1] > gains[2]


def test_mtp_needs_mtp_modules() -> None:
    assert mtp_modules(DEEPSEEK) == 1 and mtp_modules(LLAMA) == 0
    assert mtp_modules(get_model("minimax-m2")) == 3  # use_mtp with num_mtp_modules
    assert mtp_modules(get_model("kimi-k2-instruct")) == 0  # num_nextn_predict_layers 0
    with pytest.raises(SpecError) as exc:
        inference_memory(LLAMA, H100, TP4, _setup(1, Speculative("mtp", 1, 1.5)), FP8)
    assert exc.value.field == "speculative_method"


def test_deepseek_v3_mtp_module_is_its_published_size() -> None:
    """DeepSeek-V3's README_WEIGHTS.md: the MTP module has 11.5B unique parameters (the
    embedding and output head shared with the model): one MoE layer and eh_proj."""
    weights, per_seq = drafter_bytes(
        DEEPSEEK, Speculative("mtp", 1, 1.8), Parallelism(), BF16, 2048
    )
    assert weights / 2 == pytest.approx(11.5e9, rel=0.015)
    # one MLA layer's latent cache: (512 + 64) elements a token, 2 bytes each
    assert per_seq == 2048 * 576 * 2


def test_a_draft_model_holds_its_weights_and_cache_at_the_targets_tp() -> None:
    draft = get_model("llama-3.2-1b")
    spec = Speculative("draft", 4, 2.8, draft)
    weights, per_seq = drafter_bytes(LLAMA, spec, TP4, BF16, 2048)
    assert weights * 4 / 2 == pytest.approx(count_params(draft).total, rel=1e-3)
    # 16 layers x 2048 tokens x 8 KV heads x 64 x (K, V) x 2 bytes, over 4 ranks
    assert per_seq == 16 * 2048 * 8 * 64 * 2 * 2 / 4
    plain = inference_memory(LLAMA, H100, TP4, _setup(1), BF16)
    spec_m = inference_memory(LLAMA, H100, TP4, _setup(1, spec), BF16)
    assert spec_m.draft_weights_bytes == weights
    assert spec_m.max_concurrency < plain.max_concurrency
    assert spec_m.total_bytes == pytest.approx(plain.total_bytes + weights + per_seq * 1280 / 2048)


@pytest.mark.parametrize(
    ("spec", "pp", "field"),
    [
        (Speculative("eagle", 2, 3.5), 1, "acceptance_length"),
        (Speculative("eagle", 2, 0.9), 1, "acceptance_length"),
        (Speculative("draft", 2, 2.0), 1, "draft_model"),
        (Speculative("eagle", 2, 2.0, get_model("llama-3.2-1b")), 1, "draft_model"),
        (Speculative("eagle", 2, 2.0), 2, "layout.pp"),
        # 24 heads over the target's 16 ranks
        (Speculative("draft", 2, 2.0, get_model("llama-3.2-3b")), 1, "draft_model"),
    ],
)
def test_refusals_name_the_field(spec: Speculative, pp: int, field: str) -> None:
    layout = Parallelism(tp=16 if spec.draft and spec.draft.id == "llama-3.2-3b" else 4, pp=pp)
    with pytest.raises(SpecError) as exc:
        inference_memory(LLAMA, H100, layout, _setup(1, spec), FP8)
    assert exc.value.field == field


# --- the load model ---------------------------------------------------------------------------


def test_the_budget_counts_k_plus_1_tokens_per_decoding_sequence() -> None:
    dec = 499 / 2.5  # decode steps a request takes at acceptance length 2.5
    assert budget_cap(5000, 500, 8192, 2.5, 4) == pytest.approx(8192 * dec / (4 * dec + 5000))


def test_load_is_the_lone_request_at_one_and_keeps_littles_law() -> None:
    spec = Speculative("eagle3", 3, 2.5)
    lone = _llama(1, spec)
    one = estimate_load(LLAMA, H100, TP4, _setup(1, spec), FP8)
    assert one.tpot_s == pytest.approx(lone.tpot_s, rel=0.01)
    for n in (8, 64):
        p = estimate_load(LLAMA, H100, TP4, _setup(n, spec), FP8)
        assert p.requests_per_s * p.e2e_s == pytest.approx(n, rel=0.1)
        base = estimate_load(LLAMA, H100, TP4, _setup(n), FP8)
        assert p.tpot_s < base.tpot_s and p.output_tokens_per_s > base.output_tokens_per_s


# --- the API, the page, the CLI, the launch commands ------------------------------------------

BODY = {
    "model": "llama-3.1-70b",
    "layout": {"tp": 4},
    "precision": "fp8-serving",
    "input_len": 1024,
    "output_len": 256,
    "speculative_method": "eagle3",
    "num_speculative_tokens": 3,
    "acceptance_length": 2.5,
}


def test_the_answer_echoes_the_inputs_and_their_effect() -> None:
    out = client.post("/api/v1/inference/estimate", json=BODY).json()
    core = _llama(1, Speculative("eagle3", 3, 2.5))
    s = out["speculative"]
    assert (s["method"], s["num_speculative_tokens"], s["acceptance_length"]) == ("eagle3", 3, 2.5)
    assert s["step_s"] == core.speculative.step_s  # type: ignore[union-attr]
    assert out["latency"]["tpot_lone_s"] == core.tpot_s
    assert out["memory_per_gpu"]["draft_weights_bytes"] == core.memory.draft_weights_bytes > 0
    assert (
        client.post("/api/v1/inference/estimate", json={"model": "llama-3-8b"}).json()[
            "speculative"
        ]
        is None
    )


@pytest.mark.parametrize(
    ("change", "status", "field"),
    [
        ({"acceptance_length": 4.5}, 422, "acceptance_length"),
        ({"acceptance_length": 0.5}, 422, "acceptance_length"),
        ({"num_speculative_tokens": None}, 422, "num_speculative_tokens"),
        ({"acceptance_length": None}, 422, "acceptance_length"),
        ({"speculative_method": None}, 422, "num_speculative_tokens"),
        ({"speculative_method": "mtp"}, 422, "speculative_method"),
        ({"speculative_method": "draft"}, 422, "draft_model"),
        ({"draft_model": "llama-3.2-1b"}, 422, "draft_model"),
        ({"speculative_method": "draft", "draft_model": "llama-9"}, 404, "draft_model"),
        ({"layout": {"tp": 2, "pp": 2}}, 422, "layout.pp"),
        ({"speculative_method": "medusa"}, 422, "speculative_method"),
    ],
)
def test_api_refusals_name_the_field(change: dict[str, Any], status: int, field: str) -> None:
    body = {k: v for k, v in {**BODY, **change}.items() if v is not None}
    r = client.post("/api/v1/inference/estimate", json=body)
    assert r.status_code == status, r.text
    assert field in [d["field"] for d in r.json()["detail"]]


def test_the_page_shows_the_inputs_and_what_they_changed() -> None:
    query = (
        "model=llama-3.1-70b&tp=4&precision=fp8-serving&input_len=1024&output_len=256"
        "&speculative_method=eagle3&num_speculative_tokens=3&acceptance_length=2.5"
    )
    page = client.get(f"/serving?{query}").text
    assert '<option value="eagle3" selected>' in page
    assert 'name="num_speculative_tokens" value="3"' in page
    assert 'name="acceptance_length" value="2.5"' in page
    assert 'id="speculative-effect"' in page and "without speculation" in page
    twin = client.get(f"/serving?{query}&format=json").json()
    assert twin == client.post("/api/v1/inference/estimate", json=BODY).json()
    # the form's query reads back into the same request
    values = dict(pair.split("=") for pair in query.split("&"))
    req = InferenceRequest.model_validate(request_body(SERVING_INPUTS, values))
    assert (req.speculative_method, req.num_speculative_tokens, req.acceptance_length) == (
        "eagle3",
        3,
        2.5,
    )
    plain = client.get("/serving?model=llama-3-8b").text
    assert 'name="speculative_method"' in plain and 'id="speculative-effect"' not in plain


def test_cli_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["infer", "--model", "llama-3.1-70b", "--tp", "4", "--precision", "fp8-serving"]
    argv += ["--speculative-method", "eagle3", "--num-speculative-tokens", "3"]
    argv += ["--acceptance-length", "2.5"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", io.StringIO(""))
        assert main([*argv, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert main(argv) == 0
        table = capsys.readouterr().out
    assert out == client.post("/api/v1/inference/estimate", json=BODY).json()
    assert "speculative decoding: eagle3, 3 draft tokens" in table


def test_launch_commands_carry_the_engines_flags() -> None:
    launch = client.post("/api/v1/inference/estimate", json=BODY).json()["launch"]
    config = launch["vllm"].split("--speculative-config '")[1].rstrip("'")
    assert json.loads(config) == {
        "method": "eagle3",
        "model": "/path/to/eagle3-head",
        "num_speculative_tokens": 3,
    }
    assert "--speculative-algorithm EAGLE3" in launch["sglang"]
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1" in launch["sglang"]
    assert "--speculative-num-draft-tokens 4" in launch["sglang"]
    assert "decoding_type: Eagle3\\n  max_draft_len: 3" in launch["trtllm"]
    mtp = {**BODY, "model": "deepseek-v3", "accelerator": "h200-sxm-141gb"}
    mtp |= {"layout": {"tp": 8, "ep": 8}, "speculative_method": "mtp"}
    mtp |= {"num_speculative_tokens": 1, "acceptance_length": 1.8}
    launch = client.post("/api/v1/inference/estimate", json=mtp).json()["launch"]
    assert '{"method": "mtp", "num_speculative_tokens": 1}' in launch["vllm"]
    assert "--speculative-algorithm EAGLE --speculative-num-steps 1" in launch["sglang"]
    assert "decoding_type: MTP" in launch["trtllm"]
    draft = {**BODY, "speculative_method": "draft", "draft_model": "llama-3.2-1b"}
    launch = client.post("/api/v1/inference/estimate", json=draft).json()["launch"]
    assert '"method": "draft_model", "model": "meta-llama/Llama-3.2-1B' in launch["vllm"]
    assert "--speculative-algorithm STANDALONE" in launch["sglang"]
    eagle = {**BODY, "speculative_method": "eagle"}
    launch = client.post("/api/v1/inference/estimate", json=eagle).json()["launch"]
    assert "speculative_config" not in launch["trtllm"]  # no EAGLE-1/2 in its PyTorch backend
    assert any("EAGLE-3 heads only" in n for n in launch["notes"])


def test_deepseek_v3_mtp_numbers() -> None:
    """DeepSeek-V3's MTP on 8 x H200 at one sequence: verifying 2 tokens selects about twice
    the experts (more weight reads than a decode step), the MTP layer is one layer of 61."""
    spec = Speculative("mtp", 1, 1.8)
    e = estimate_inference(DEEPSEEK, H200, TP8_EP8, _setup(1, spec), FP8)
    s = e.speculative
    assert s is not None
    assert 1.0 < s.verify_s_per_step / s.tpot_without_s < 1.3
    assert s.draft_s_per_step < s.tpot_without_s / 20
    assert 1.8 / 1.35 < s.tpot_speedup < 1.8


def test_mtp_beside_attention_data_parallel_splits_its_experts_as_the_targets() -> None:
    """DeepSeek-V3's MTP module at tp 1, dp 8, ep 8: its experts over the 8 GPUs as the target's
    (each whole on one rank); it divided by tp // ep = 0 (a bare ZeroDivisionError, a 500)."""
    from fastapi.testclient import TestClient

    from app.main import app

    body = {"model": "deepseek-v3", "accelerator": "h200-sxm-141gb",
            "layout": {"tp": 1, "dp": 8, "ep": 8}, "precision": "fp8-serving",
            "speculative_method": "mtp", "num_speculative_tokens": 1,
            "acceptance_length": 1.8}  # fmt: skip
    r = TestClient(app).post("/api/v1/inference/estimate", json=body)
    assert r.status_code == 200, r.text
    wide = r.json()["speculative"]["draft_weights_bytes"]
    body["layout"] = {"tp": 8, "ep": 8}  # the same 8 GPUs, the experts as placed by TP
    narrow = TestClient(app).post("/api/v1/inference/estimate", json=body).json()
    # the experts alike (32 whole on each GPU), the attention whole at tp 1 and split at tp 8
    assert wide > narrow["speculative"]["draft_weights_bytes"] > 0
