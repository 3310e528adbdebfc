"""validation/memory.py: published peak memory per GPU, one case or one skip per record, and the
accuracy pinned at the level validation/report.md shows.

The issue's targets (median error <= 8%, fits called right on >= 95% of records) are not met:
5 of 67 records can be compared (most runs used torch.compile, float8, 8-bit or paged optimizers,
torchtitan's per-op checkpointing, a card or model the catalog lacks, or bf16 AdamW moments the
estimator does not honour), with a 13.0% median and 3 of 4 fits calls right. The bounds below are
those levels plus a point or two, so a change that drifts is caught; the far-off torchtune
records are pinned at their present error so that they are seen (docs/validation.md says why).
"""

from __future__ import annotations

import statistics
from collections import Counter

import pytest

from estimator import (
    GIB,
    Parallelism,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    training_memory,
)
from validation.memory import (
    BOUND_SHARE,
    MemoryCase,
    MemoryRow,
    Skip,
    cases,
    compared_bytes,
    fits_summary,
    memory_records,
    rows,
    skip_reasons,
)
from validation.report import memory_section, render_memory

# Compared cases and skips per group, as mapped today. A change here is a change in what the
# report covers: update the pins with docs/validation.md and validation/data/README.md.
COUNTS = {
    ("torchtune_readme_2024_09", "Skip"): 8,
    ("torchtune_readme_2024_05", "MemoryCase"): 4,
    ("torchtune_readme_2024_05", "Skip"): 3,
    ("torchtune_readme_optimization_flags", "MemoryCase"): 1,
    ("torchtune_readme_optimization_flags", "Skip"): 8,
    ("torchtitan_benchmark_llama3_h100_202412", "Skip"): 18,
    ("torchtitan_benchmark_trainy_h200_202506", "Skip"): 2,
    ("torchao_float8_training_benchmarks", "Skip"): 5,
    ("qwen_v1_readme_profiling", "Skip"): 10,
    ("litgpt_config_hub_benchmarks", "MemoryCase"): 3,
    ("litgpt_config_hub_benchmarks", "Skip"): 5,
}


def _cases() -> dict[str, MemoryCase]:
    return {c.id: c for c in cases() if isinstance(c, MemoryCase)}


def _skips() -> dict[str, Skip]:
    return {c.id: c for c in cases() if isinstance(c, Skip)}


def test_one_case_or_skip_per_record() -> None:
    out, raw = cases(), memory_records()
    assert len(raw) == 67 and len(out) == len(raw)
    assert len({c.id for c in out}) == len(out)
    for case, record in zip(out, raw, strict=True):  # file order
        assert (case.id, case.group) == (record["id"], record["group"])


def test_pinned_counts() -> None:
    assert dict(Counter((c.group, type(c).__name__) for c in cases())) == COUNTS


def test_every_skip_says_why() -> None:
    skips = _skips()
    assert len(skips) == 59
    for s in skips.values():
        assert s.reasons and all(": " in r and r.split(":")[0].strip() for r in s.reasons), s.id
    assert skips["qwen-7b-full-2gpu-zero3-s2048-oom"].reasons == (
        "model not in the catalog: Qwen/Qwen-7B",
    )
    assert skips["litgpt-gemma-7b-lora-a10g-oom"].reason == (
        "model not in the catalog: google/gemma-7b"
    )
    eager = skips["ttitan-l31-8b-8gpu-fsdp-eager"].reason
    assert "accelerator not in the catalog: H100 SXM 96GB HBM2e" in eager
    assert "per-op selective activation checkpointing" in eager
    assert "torch.compile" not in eager
    assert skips["tt2409-l31-8b-lora-4090"].reasons == (
        "torch.compile: its fusions change what is saved for backward",
    )
    flags = skips["ttflags-l32-3b-full-adamw8bit"].reason
    assert "optimizer step in the backward" in flags and "8-bit optimizer states" in flags
    assert "GPTQ int4 base weights" in skips["qwen-72b-qlora-1gpu-s8192"].reason
    assert "ambiguous unit: 'G'" in skips["qwen-7b-lora-1gpu-s256"].reason
    # bounded options over BOUND_SHARE of the prediction: the chunked logits of LitGPT's
    # full fine-tunes (their bf16 moments are modelled: precision.optimizer_states) and the
    # chunked logits and paged states of its QLoRA runs
    for ident in ("litgpt-l32-3b-full-a10g", "litgpt-l3-8b-full-4xa10g-oom"):
        assert skips[ident].reason.startswith("chunked logits (bounded options over 2%"), ident
    for ident in ("litgpt-l2-7b-qlora-a10g", "litgpt-l3-8b-qlora-a10g"):
        reason = skips[ident].reason
        assert reason.startswith("chunked logits (bounded") and "paged optimizer states" in reason


def test_skip_reasons_say_what_each_gap_keeps_out() -> None:
    counts = skip_reasons(list(_skips().values()))
    assert counts["torch.compile"] == {"records": 40, "sole": 11}
    assert counts["accelerator not in the catalog"] == {"records": 20, "sole": 0}
    assert counts["model not in the catalog"] == {"records": 11, "sole": 2}
    chunked = "chunked logits (bounded options over 2% of the prediction)"
    assert counts[chunked] == {"records": 4, "sole": 4}
    assert sum(c["records"] for c in counts.values()) >= len(_skips())


def test_bf16_moments_are_honoured() -> None:
    # training_memory stores AdamW's moments in precision.optimizer_states (found by this
    # validation: they were fp32 whatever the role said), so pure-bf16 full fine-tunes compare
    model, acc = get_model("llama-3.2-1b"), get_accelerator("h100-sxm-80gb")
    fp32, bf16 = (
        training_memory(
            model, acc, Parallelism(), TrainingSetup(8), get_precision({"optimizer_states": f})
        )
        for f in ("fp32", "bf16")
    )
    assert bf16.optimizer_states_bytes * 2 == fp32.optimizer_states_bytes


def test_torchtune_and_litgpt_cases_are_pure_bf16_fine_tunes() -> None:
    raw = {r["id"]: r for r in memory_records()}
    for c in _cases().values():
        r = raw[c.id]
        assert c.precision.master_weights is None and c.precision.gradients == "bf16", c.id
        assert c.precision.optimizer_states == "bf16", c.id
        assert c.setup.activation_convention == "hf", c.id
        assert c.setup.recompute == ("full" if r["activation_checkpointing"] else "none"), c.id
        assert (c.setup.seq_len, c.setup.micro_batch_size) == (r["seq_len"], r["micro_batch_size"])
        assert c.parallel.num_gpus == r["num_gpus"], c.id
        assert c.setup.finetune.method == r["finetune"]
        if r["finetune"] != "full":
            assert c.setup.finetune.rank == r["lora_rank"], c.id
        assert c.source.count("@") == 1, c.id
    lora = _cases()["tt2405-l2-70b-lora-8xa100"]
    assert lora.model.id == "llama-2-70b" and lora.setup.finetune.targets == (
        "q_proj",
        "k_proj",
        "v_proj",
    )
    assert lora.parallel.zero_stage == 3 and lora.parallel.dp == 8
    assert not lora.capacity_known  # "A100 (memory size not stated)": no fits call
    litgpt = _cases()["litgpt-l3-8b-lora-a10g"]
    assert (litgpt.model.id, litgpt.accelerator) == ("llama-3-8b", "a10g")
    assert litgpt.statistic == "allocated" and litgpt.compared == "allocated"
    assert {b.label for b in litgpt.bounds} == {"chunked logits"}


def test_accepted_bounds_stay_under_their_share() -> None:
    for c in _cases().values():
        acc = get_accelerator(c.accelerator)
        estimate = training_memory(c.model, acc, c.parallel, c.setup, c.precision)
        bounded = sum(b.bytes for b in c.bounds)
        assert bounded <= BOUND_SHARE * compared_bytes(estimate, c.compared), c.id
        assert all(any(b.label in a for a in c.assumptions) for b in c.bounds), c.id


def test_published_gb_are_converted_to_gib() -> None:
    # The data file converts GB (1e9 bytes: torchtune May 2024, LitGPT) to GiB; check it.
    for r in memory_records():
        m = r["measured"]
        if m["published_unit"] == "GB":
            assert m["peak_memory_gib_per_gpu"] == pytest.approx(
                m["published_value"] * 1e9 / GIB, abs=0.002
            ), r["id"]


def test_compared_statistic_parts_of_an_estimate() -> None:
    c = _cases()["litgpt-l2-7b-lora-a10g"]
    est = training_memory(c.model, get_accelerator(c.accelerator), c.parallel, c.setup, c.precision)
    allocated = compared_bytes(est, "allocated")
    assert allocated + est.fragmentation_bytes == compared_bytes(est, "reserved")
    assert compared_bytes(est, "device") == est.total_bytes
    assert est.total_bytes - allocated == pytest.approx(
        est.cuda_context_bytes + est.comm_buffers_bytes + est.fragmentation_bytes
    )


def _row(ident: str, oom: bool, total: float, measured: float | None = None) -> MemoryRow:
    return MemoryRow(
        id=ident,
        group="g",
        framework="f",
        statistic="allocated",
        accelerator="a10g",
        capacity_known=True,
        oom=oom,
        measured_gib=measured,
        predicted_gib=total - 1,
        total_gib=total,
        capacity_gib=24.0,
        fits=total <= 24.0,
    )


def test_fits_calls_count_out_of_memory_runs() -> None:
    found = [
        _row("ran", False, 20.0, 19.0),
        _row("oom-called-fit", True, 23.0),  # the planner says it fits: a wrong call
        _row("oom-called-no-fit", True, 30.0),
    ]
    s = fits_summary(found)
    assert (s["n"], s["right"], s["oom_records"]) == (3, 2, 2)
    assert s["wrong"] == ["oom-called-fit"]
    assert s["oom_over_capacity"]["oom-called-fit"] == pytest.approx(23 / 24 - 1)
    with pytest.raises(ValueError, match="out of memory"):
        _ = found[1].error


def test_accuracy_is_pinned() -> None:
    found, skipped = rows()
    assert len(found) == 8 and len(skipped) == 59
    errors = {r.id: r.error for r in found if r.measured_gib is not None}
    assert len(errors) == 7  # the eighth ran out of memory: nothing measured
    # report: 13.1% median over 7 records (the target, 8%, is not met)
    assert statistics.median(abs(e) for e in errors.values()) <= 0.15
    litgpt = [abs(e) for i, e in errors.items() if i.startswith("litgpt")]
    assert len(litgpt) == 2 and max(litgpt) <= 0.03  # report: +0.6%, +0.1%
    assert abs(errors["ttflags-l32-3b-full-packed"]) <= 0.09  # report: -6.6%
    # torchtune May 2024: far off, seen (report: -13.1%, +256.7%, -20.0%, +96.5%)
    assert abs(errors["tt2405-l2-7b-lora-4090"]) <= 0.15
    assert errors["tt2405-l2-7b-lora-2x4090"] <= 2.59
    assert abs(errors["tt2405-l2-7b-full-4x4090"]) <= 0.22
    assert errors["tt2405-l2-70b-lora-8xa100"] <= 0.99
    fits = fits_summary(found)
    # report: 5 of 7 right (71%; the target, 95%, is not met): the 2 x 4090 LoRA (its
    # table's sequence length is not what ran) and LitGPT's Llama-2-7B full fine-tune on 4 x A10G,
    # which ran out of memory where the planner predicts 16.2 GiB of 24 (33% under capacity)
    assert fits["n"] == 7 and fits["rate"] >= 0.70
    assert fits["wrong"] == ["tt2405-l2-7b-lora-2x4090", "litgpt-l2-7b-full-4xa10g-oom"]


def test_report_section() -> None:
    section = memory_section()
    assert [s["n"] for s in section["summary"]["peak memory, all"]] == [7]
    groups = {s["name"] for s in section["summary"]["peak memory by group"]}
    assert groups == {
        "torchtune_readme_2024_05",
        "torchtune_readme_optimization_flags",
        "litgpt_config_hub_benchmarks",
    }
    text = "\n".join(render_memory(section, details=True))
    assert "# Peak memory per GPU" in text and "tt2405-l2-7b-lora-2x4090" in text
    assert "| torch.compile | 40 | 11 |" in text
