"""validation/memory.py: published peak memory per GPU, one case or one skip per record, and the
accuracy pinned at the level validation/report.md shows.

34 of 67 records are compared (torch.compile, TorchTitan's per-op checkpointing, chunked and
compiled losses, FSDP2 under a pipeline, activation offloading and the optimizer step in the
backward are modelled; float8 under full checkpointing compared as bf16; gradients freed between
steps; gradient accumulation inside FSDP's no_sync), with a 6.5% median (the issue's target,
8%, met) and 29 of 29 fits calls right (the target, 95%, met: both LitGPT full fine-tunes on
4 x A10G, which accumulate 4 micro-batches inside FSDP1's no_sync, are put 16% and 39% over the
card, as they went out of memory; 22-33% under it before no_sync was modelled).
The bounds below are those levels plus a point or two, so a change that drifts is caught; the
far-off records are pinned at their present error so that they are seen (docs/validation.md
says why).
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
    ("torchtune_readme_2024_09", "MemoryCase"): 5,
    ("torchtune_readme_2024_09", "Skip"): 3,
    ("torchtune_readme_2024_05", "Skip"): 7,
    ("torchtune_readme_optimization_flags", "MemoryCase"): 8,
    ("torchtune_readme_optimization_flags", "Skip"): 1,
    ("torchtitan_benchmark_llama3_h100_202412", "MemoryCase"): 14,
    ("torchtitan_benchmark_llama3_h100_202412", "Skip"): 4,
    ("torchtitan_benchmark_trainy_h200_202506", "Skip"): 2,
    ("torchao_float8_training_benchmarks", "MemoryCase"): 3,
    ("torchao_float8_training_benchmarks", "Skip"): 2,
    ("qwen_v1_readme_profiling", "Skip"): 10,
    ("litgpt_config_hub_benchmarks", "MemoryCase"): 4,
    ("litgpt_config_hub_benchmarks", "Skip"): 4,
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
    assert len(skips) == 33
    for s in skips.values():
        assert s.reasons and all(": " in r and r.split(":")[0].strip() for r in s.reasons), s.id
    assert skips["qwen-7b-full-2gpu-zero3-s2048-oom"].reasons == (
        "model not in the catalog: Qwen/Qwen-7B",
    )
    assert skips["litgpt-gemma-7b-lora-a10g-oom"].reason == (
        "model not in the catalog: google/gemma-7b"
    )
    alpaca = skips["tt2405-l2-7b-lora-2x4090"].reason
    assert alpaca.startswith("sequence lengths not fixed: unpacked alpaca"), alpaca
    fp8 = skips["ttitan-l31-8b-8gpu-fsdp-compile-fp8"].reasons
    assert len(fp8) == 1 and fp8[0].startswith("float8 training without full checkpointing")
    long = skips["ttitan-l31-8b-8gpu-fsdp1-cp8-s262144"].reason
    assert "max_position_embeddings=131072" in long
    flags = skips["ttflags-l32-3b-full-adamw8bit"].reason
    assert flags.startswith("8-bit optimizer states")  # the optimizer in the backward is modelled
    assert "GPTQ int4 base weights" in skips["qwen-72b-qlora-1gpu-s8192"].reason
    assert "ambiguous unit: 'G'" in skips["qwen-7b-lora-1gpu-s256"].reason
    # bounded options over BOUND_SHARE of the prediction: the chunked logits of LitGPT's
    # full fine-tune (its bf16 moments are modelled: precision.optimizer_states) and the
    # chunked logits and paged states of its QLoRA runs; the out-of-memory runs are compared
    # (a bound that only shrinks the prediction cannot change their fits call)
    assert skips["litgpt-l32-3b-full-a10g"].reason.startswith("chunked logits (bounded options")
    assert "litgpt-l3-8b-full-4xa10g-oom" not in skips
    for ident in ("litgpt-l2-7b-qlora-a10g", "litgpt-l3-8b-qlora-a10g"):
        reason = skips[ident].reason
        assert reason.startswith("chunked logits (bounded") and "paged optimizer states" in reason


def test_skip_reasons_say_what_each_gap_keeps_out() -> None:
    counts = skip_reasons(list(_skips().values()))
    assert "torch.compile" not in counts  # modelled: the compiled convention
    assert counts["sequence lengths not fixed"] == {"records": 7, "sole": 5}
    assert counts["float8 training without full checkpointing"] == {"records": 6, "sole": 6}
    assert counts["accelerator not in the catalog"] == {"records": 2, "sole": 1}
    assert counts["model not in the catalog"] == {"records": 11, "sole": 2}
    chunked = "chunked logits (bounded options over 2% of the prediction)"
    assert counts[chunked] == {"records": 3, "sole": 3}
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


def test_cases_map_each_runs_stack() -> None:
    raw = {r["id"]: r for r in memory_records()}
    for c in _cases().values():
        r = raw[c.id]
        if c.framework.startswith(("torchtune", "LitGPT")):  # pure bf16
            assert c.precision.master_weights is None and c.precision.gradients == "bf16", c.id
            assert c.precision.optimizer_states == "bf16", c.id
        else:  # TorchTitan: FSDP2 mixed precision, fp32 master weights and moments
            assert c.precision.master_weights == "fp32", c.id
        compiled = bool((r.get("options") or {}).get("compile"))
        assert c.setup.activation_convention == ("compiled" if compiled else "hf"), c.id
        ac = r["activation_checkpointing"]
        recompute = "full" if ac in (True, "full") else "op" if ac else "none"
        assert c.setup.recompute == recompute, c.id
        local = c.setup.micro_batch_size * c.parallel.pp  # TorchTitan: pp micro-batches
        assert (c.setup.seq_len, local) == (r["seq_len"], r["micro_batch_size"]), c.id
        assert c.parallel.num_gpus == r["num_gpus"], c.id
        method = "full" if r["finetune"] == "pretrain" else r["finetune"]
        assert c.setup.finetune.method == method, c.id
        if method != "full":
            assert c.setup.finetune.rank == r["lora_rank"], c.id
        assert c.source.count("@") == 1, c.id
    lora = _cases()["tt2409-l31-70b-lora-8xa100"]
    assert lora.model.id == "llama-3.1-70b" and lora.setup.finetune.targets == (
        "q_proj",
        "k_proj",
        "v_proj",
    )
    assert lora.parallel.zero_stage == 3 and lora.parallel.dp == 8
    assert not lora.capacity_known  # "A100 (memory size not stated)": no fits call
    titan = _cases()["ttitan-l31-8b-8gpu-fsdp-eager"]
    assert titan.capacity_known and titan.capacity_bytes == 96e9  # the card's stated size
    assert lora.setup.chunked_loss and lora.setup.loss_convention == "compiled"
    # the loss stayed eager where the run's code left it so
    assert _cases()["ttflags-l32-3b-full-compile"].setup.loss_convention == "hf"
    assert _cases()["ttitan-l31-8b-8gpu-fsdp-compile"].setup.loss_convention == "hf"
    assert _cases()["ao-b200-l3-8b-bf16"].setup.loss_convention == "compiled"
    piped = _cases()["ttitan-l31-405b-512gpu-fsdp8-tp8-pp8-interleaved1f1b"].parallel
    assert piped.vp == 2 and piped.stage_layers == (7, *[8] * 14, 7)
    offloaded = _cases()["ttflags-l32-3b-qlora"].setup.offload
    assert offloaded.activations and not offloaded.optimizer
    litgpt = _cases()["litgpt-l3-8b-lora-a10g"]
    assert (litgpt.model.id, litgpt.accelerator) == ("llama-3-8b", "a10g")
    assert litgpt.statistic == "allocated" and litgpt.compared == "allocated"
    assert {b.label for b in litgpt.bounds} == {"chunked logits"}


def test_accepted_bounds_stay_under_their_share() -> None:
    for c in _cases().values():
        acc = get_accelerator(c.accelerator)
        estimate = training_memory(c.model, acc, c.parallel, c.setup, c.precision)
        bounded = sum(b.bytes for b in c.bounds)
        if c.oom:  # no error to bound: the fits call must stand whatever the bound takes off
            capacity = c.capacity_bytes or acc.memory_bytes
            assert estimate.total_bytes <= capacity or estimate.total_bytes - bounded > capacity
            continue
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
    assert len(found) == 34 and len(skipped) == 33
    errors = {r.id: r.error for r in found if r.measured_gib is not None}
    assert len(errors) == 32  # two ran out of memory: nothing measured
    # report: 6.5% median over 32 records (the target, 8%, met), p90 13.3%
    assert statistics.median(abs(e) for e in errors.values()) <= 0.08
    litgpt = [abs(e) for i, e in errors.items() if i.startswith("litgpt")]
    # report: -3.2%, -2.5% (+0.4% and -0.1% before frozen layers kept only what the adapters
    # need: two errors cancelled, the frozen inputs over and LitGPT's dropout under)
    assert len(litgpt) == 2 and max(litgpt) <= 0.04
    titan_8b = [abs(e) for i, e in errors.items() if i.startswith("ttitan-l31-8b")]
    assert len(titan_8b) == 7 and max(titan_8b) <= 0.09  # report: -8.2% .. -0.4%
    # the compiled convention against torchtune's own ablation (report: -3.5%, -3.6%, -3.9%)
    assert abs(errors["ttflags-l32-3b-full-packed"]) <= 0.05
    assert abs(errors["ttflags-l32-3b-full-compile"]) <= 0.05
    assert abs(errors["ttflags-l32-3b-full-ac"]) <= 0.05
    # the optimizer stepped in the backward, then activation offloading on top (report: -3.9%,
    # -3.8%, as the row before them)
    assert abs(errors["ttflags-l32-3b-full-optinbwd"]) <= 0.05
    assert abs(errors["ttflags-l32-3b-full-actoffload"]) <= 0.05
    # far off, seen (report): TP 8 and pipelines under TorchTitan, torchao's B200 run, the
    # activation-offloaded QLoRA, the CPU-offloaded 70B full fine-tune
    assert -0.20 <= errors["ttitan-l31-70b-256gpu-fsdp32-tp8"] <= -0.16  # -18.0%
    assert -0.21 <= errors["ttitan-l31-405b-512gpu-fsdp8-tp8-pp8-1f1b"] <= -0.16  # -18.8%
    assert errors["ao-b200-l3-8b-bf16"] <= 0.10  # +8.0%
    # the loss and the recomputed layer one after the other at the first backward (their max
    # allocated, the freed loss blocks reserved): torchtune's checkpointed LoRA / QLoRA rows
    # from +7.9..+21.1% to +2.6..+7.1% (report), the CPU-offloaded 70B from -24.7% to -32.3%
    assert errors["ttflags-l32-3b-qlora"] <= 0.07  # +6.0%
    assert errors["ttflags-l32-3b-lora"] <= 0.04  # +2.6%
    assert errors["tt2409-l31-8b-lora-4090"] <= 0.07  # +5.4%
    assert errors["tt2409-l31-8b-qlora-4090"] <= 0.05  # +3.3%
    assert errors["tt2409-l31-405b-qlora-8xa100"] <= 0.08  # +7.1%
    assert -0.34 <= errors["tt2409-l31-70b-full-8xa100-cpuoffload"] <= -0.30  # -32.3%
    fits = fits_summary(found)
    # report: 29 of 29 right (the target, 95%, met; the 14 TorchTitan runs judged
    # against the 96 GB their cards hold); both LitGPT full fine-tunes on 4 x A10G (Llama-2-7B,
    # Llama-3-8B) ran out of memory and the planner puts them +15.9% and +39.4% over the A10G's
    # 23,028 MiB: their 4 micro-batches a step accumulate inside FSDP1's no_sync (Fabric's
    # no_backward_sync), every rank holding the whole model's gradients (15.0 and 17.6 GiB,
    # under the card, before that was modelled)
    assert fits["n"] == 29 and fits["rate"] == 1.0 and fits["oom_records"] == 2
    assert fits["wrong"] == []
    over = {r.id: r.total_gib / r.capacity_gib - 1 for r in found if r.oom}
    assert over["litgpt-l2-7b-full-4xa10g-oom"] >= 0.10
    assert over["litgpt-l3-8b-full-4xa10g-oom"] >= 0.30


def test_report_section() -> None:
    section = memory_section()
    assert [s["n"] for s in section["summary"]["peak memory, all"]] == [32]
    groups = {s["name"] for s in section["summary"]["peak memory by group"]}
    assert groups == {
        "torchtune_readme_2024_09",
        "torchtune_readme_optimization_flags",
        "torchtitan_benchmark_llama3_h100_202412",
        "torchao_float8_training_benchmarks",
        "litgpt_config_hub_benchmarks",
    }
    text = "\n".join(render_memory(section, details=True))
    assert "# Peak memory per GPU" in text and "ttitan-l31-405b-512gpu-fsdp8-tp8-pp8-1f1b" in text
    assert "| sequence lengths not fixed | 7 | 5 |" in text
