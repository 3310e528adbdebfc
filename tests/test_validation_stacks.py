"""Published DeepSpeed ZeRO and PyTorch FSDP1 runs (validation/stacks.py): every record carries
its source and its configuration, the throughput conversions follow each source's own FLOP
count, and the achieved median errors per stack are pinned (ceilings a drift would cross). The
fitted factors are reported, not applied: the profiles stay as they are."""

from __future__ import annotations

import math
from typing import Any

import pytest

from estimator import get_model
from estimator.timing.stacks import STACKS
from validation import report, stacks
from validation.records import Skip, TrainingCase

# What a record must say about its run (issue 45 item 2: the full configuration).
CONFIG_FIELDS = (
    "model", "gpu", "accelerator", "num_gpus", "nodes", "gpus_per_node", "zero_stage",
    "sharding", "micro_batch_size", "gradient_accumulation_steps", "global_batch_size",
    "seq_len", "precision", "activation_checkpointing", "offload", "versions", "framework",
)  # fmt: skip


@pytest.fixture(scope="module")
def section() -> dict[str, Any]:
    return report.stacks_section()


def test_every_record_carries_its_source_and_configuration() -> None:
    records = stacks.stack_records()
    assert len({r["id"] for r in records}) == len(records)
    for r in records:
        missing = [f for f in CONFIG_FIELDS if f not in r]
        assert not missing, (r["id"], missing)
        assert ("catalog_model" in r) != ("model_config" in r), r["id"]
        src = r["source"]
        assert src["repo"] and src["path"] and src["url"].startswith("https://"), r["id"]
        assert len(src["commit"]) == 40, r["id"]
        assert r["quote"] and r["reliability"], r["id"]
        assert r["stack"] in STACKS, r["id"]
        measured = r["measured"]
        assert {"tokens_per_s_per_gpu", "tflops_per_gpu", "step_s"} & set(measured), r["id"]
        if "tflops_per_gpu" in measured:
            assert measured["flop_convention"] in stacks.SOURCE_FLOPS, r["id"]


def test_records_per_stack() -> None:
    compared = [c for c in stacks.stack_cases() if isinstance(c, TrainingCase)]
    by_stack = {s: sum(c.stack == s for c in compared) for s in STACKS}
    # DeepSpeed: 14 compared of 19 (issue 45's >= 10 met); FSDP1 outside llm-foundry: 2 of 2
    # (the 10 not met: the records looked for and not found are in the report)
    assert by_stack["deepspeed"] == 14
    assert by_stack["llm-foundry"] == 2
    assert len(stacks.stack_records()) == 21


def test_the_planner_refuses_what_it_cannot_express() -> None:
    skipped = {c.id: c.reason for c in stacks.stack_cases() if isinstance(c, Skip)}
    assert set(skipped) == {
        "mleng-h200-z3-offload-ac-liger-192k",
        "mleng-b200-z3-offload-ac-liger-192k",
        "mleng-h200-z3-offload-ac-liger-256k",
        "mleng-b200-z3-offload-ac-liger-256k",
        "ds-azure-gpt-530b-1024gpu-seq1024",
    }
    assert "max_position_embeddings=131072" in skipped["mleng-h200-z3-offload-ac-liger-256k"]
    assert skipped["ds-azure-gpt-530b-1024gpu-seq1024"] == "micro-batch size not published"


def _record(ident: str) -> dict[str, Any]:
    return next(dict(r) for r in stacks.stack_records() if r["id"] == ident)


def test_ml_engineering_flops_are_the_pages_count() -> None:
    # benchmark.py's dense_N for Llama-3.1-8B: 32 x (3 x 4096 x 14336 + 4096 x 10240) + 128256 x
    # 4096 = 7,504,658,432; attention 6 x 8192 x 128 x 32 x 32 per token at 8K
    r = _record("mleng-h200-z3-offload-ac-liger-8k")
    config = get_model("llama-3.1-8b").config
    per_token = stacks.SOURCE_FLOPS["causal_6"](config, 8192)
    assert per_token == 6 * 7_504_658_432 + 6 * 8192 * 128 * 32 * 32
    tokens = stacks.measured_tokens_per_s_per_gpu(r, config)
    assert tokens == pytest.approx(141e12 / per_token)
    assert tokens == pytest.approx(2739, abs=1)


def test_azure_tflops_follow_the_posts_megatron_formula() -> None:
    r = _record("ds-azure-gpt-175b-256gpu-seq512")
    c = r["model_config"]
    h, layers, s, v = c["n_embd"], c["n_layer"], r["seq_len"], c["vocab_size"]
    per_token = 96 * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    assert stacks.measured_tokens_per_s_per_gpu(r, c) == pytest.approx(204.49e12 / per_token)


def test_published_figures_agree_with_themselves() -> None:
    # HF blog Table 3: tokens/s x step time = 8 x 4,096 tokens a device; MFU = 6 N tokens/s /
    # 312 TFLOP/s with N the Llama 2 7B count
    for ident in (
        "hf-accelerate-granite7b-fsdp-aligned-4xa100",
        "hf-accelerate-granite7b-deepspeed-z3-4xa100",
    ):
        m = _record(ident)["measured"]
        assert m["tokens_per_s_per_gpu"] * m["step_s"] == pytest.approx(8 * 4096, rel=0.005)
        assert 6 * 6.74e9 * m["tokens_per_s_per_gpu"] / 312e12 == pytest.approx(m["mfu"], abs=0.01)
    # LitGPT: one iteration is one step of 4 x 2,048 tokens a GPU
    r = _record("litgpt-tinyllama-fabric-fsdp-eager-8xa100-40gb")
    assert r["global_batch_size"] == r["num_gpus"] * r["micro_batch_size"]
    tokens = stacks.measured_tokens_per_s_per_gpu(r, r["model_config"])
    assert tokens == pytest.approx(4 * 2048 / 0.45657)


def _by(section: dict[str, Any], table: str) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in section["summary"][table]}


def test_throughput_error_per_stack_is_pinned(section: dict[str, Any]) -> None:
    by_stack = _by(section, "by stack")
    # achieved: DeepSpeed 35.4% median APE (+27.8% signed) on 14, FSDP1 33.0% (+33.0%) on 2:
    # the planner over-predicts both; far from the 10% target, pinned so it is seen
    assert by_stack["deepspeed"]["median_ape"] <= 0.37
    assert by_stack["llm-foundry"]["median_ape"] <= 0.35
    groups = _by(section, "by group")
    # the ZeRO-3 CPU-offload sweep: +98% at 8K (H200), +181% (B200), -40% at 128K (H200)
    assert groups["deepspeed / ml_engineering_fa3_fa4_deepspeed"]["p90_ape"] <= 1.0
    assert groups["deepspeed / deepspeed_azure_2022"]["median_ape"] <= 0.56


def test_peak_memory_is_pinned(section: dict[str, Any]) -> None:
    memory = _by(section, "peak memory by stack")
    # ZeRO-3 + checkpointing + Liger: -34% at 8K, +35% at 32K, +97% at 128K (the planner's
    # activations grow about 2.3x faster per token than the page's 0.00043 GiB/token)
    assert memory["deepspeed"]["n"] == 8 and memory["deepspeed"]["median_ape"] <= 0.58
    assert memory["llm-foundry"]["median_ape"] <= 0.06
    # every compared run ran: the planner's total fits each card
    assert all(r.fits for r in section["memory_rows"])


def test_fitted_factors_with_leave_one_source_out(section: dict[str, Any]) -> None:
    fits = section["fits"]
    ds, fsdp1 = fits["deepspeed"], fits["llm-foundry"]
    # reported, not applied: the profiles keep their factors
    assert ds["profile_compute_scale"] == STACKS["deepspeed"].compute_scale == 1.0
    assert fsdp1["profile_compute_scale"] == STACKS["llm-foundry"].compute_scale
    # DeepSpeed: 1.295 on its 14 (23.4% in-sample; 38.5% leaving one source out); FSDP1 1.410
    # on its 2 (6.2%; 12.4% out)
    assert ds["fitted_compute_scale"] == pytest.approx(1.295, abs=0.01)
    assert fsdp1["fitted_compute_scale"] == pytest.approx(1.410, abs=0.01)
    assert ds["median_ape_fitted"] < ds["median_ape_profile"]
    for f in (ds, fsdp1):
        assert f["loso_median_ape"] is not None and math.isfinite(f["loso_median_ape"])
        assert f["loso_median_ape"] > f["median_ape_fitted"]  # in-sample flatters the fit
    assert ds["loso_median_ape"] <= 0.40 and fsdp1["loso_median_ape"] <= 0.14


def test_report_carries_the_section(section: dict[str, Any]) -> None:
    text = "\n".join(stacks.render(section))
    assert "stacks_measured" in text and "leave one source out" in text
    written = stacks.to_json(section)
    assert len(written["rows"]) == 16 and {"error", "measured", "predicted"} <= set(
        written["rows"][0]
    )
