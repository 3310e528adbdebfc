"""validation/records.py: every published record becomes exactly one case or one skip."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from estimator import count_params, get_accelerator, get_precision, inference_memory
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceSetup
from validation.records import (
    DATA,
    InferenceCase,
    Skip,
    TrainingCase,
    inference_cases,
    training_cases,
)

ROOT = Path(__file__).resolve().parents[1]

# Usable cases and skips per group, as mapped today. A change here is a change in what the
# validation report covers: update the pins together with validation/data/README.md.
TRAINING_COUNTS = {
    ("mosaicml_llm_foundry_mpt_benchmarks", "TrainingCase"): 116,
    ("nvidia_megatron_bridge_perf_summary", "TrainingCase"): 133,
    ("nvidia_megatron_bridge_perf_summary", "Skip"): 10,
    ("nvidia_nemo_24.07_perf_summary", "TrainingCase"): 18,
    ("nvidia_nemo_long_sequence_cp", "Skip"): 17,
}
INFERENCE_COUNTS = {
    ("tensorrt_llm_perf_overview_v1.0", "InferenceCase"): 127,
}


def _raw(name: str) -> list[dict[str, object]]:
    data: list[dict[str, object]] = json.loads((DATA / name).read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize(
    ("cases", "name"),
    [
        (training_cases, "training_measured.json"),
        (inference_cases, "inference_measured.json"),
    ],
)
def test_one_case_or_skip_per_record(cases: object, name: str) -> None:
    assert callable(cases)
    out = cases()
    raw = _raw(name)
    assert len(out) == len(raw)
    ids = [c.id for c in out]
    assert len(set(ids)) == len(ids)
    for case, record in zip(out, raw, strict=True):  # file order, same group
        assert case.group == record["group"]
        assert str(case.id).startswith(str(record["id"]))


def test_pinned_counts() -> None:
    t = Counter((c.group, type(c).__name__) for c in training_cases())
    i = Counter((c.group, type(c).__name__) for c in inference_cases())
    assert dict(t) == TRAINING_COUNTS
    assert dict(i) == INFERENCE_COUNTS


def test_every_skip_says_why() -> None:
    skips = [c for c in [*training_cases(), *inference_cases()] if isinstance(c, Skip)]
    assert skips
    assert all(s.reason.strip() for s in skips)
    reasons = {s.id: s.reason for s in skips}
    assert reasons["nemo-longseq-LLAMA3-8B-8k"] == "reports TFLOP/s only"
    # Megatron-Bridge's footnotes: a known regression is skipped saying so; a row that ran
    # another mapping is compared, the footnote among its assumptions
    regression = reasons["mbridge-26.06.01-GPT OSS 120B-DGX-GB300-64-MXFP8-L55"]
    assert "known performance regression" in regression and "cudnn-frontend#256" in regression
    nvfp4 = next(
        c
        for c in training_cases()
        if isinstance(c, TrainingCase)
        and c.id == "mbridge-26.04.01-Nemotron_3_Super-DGX-B200-64-NVFP4-L280"
    )
    assert nvfp4.measured_model_tflops_per_gpu == 475
    assert any("did not fit with NVFP4" in a for a in nvfp4.assumptions)
    assert reasons["mbridge-25.09-LLAMA3_70B-DGX-H100-64-None-L626"] == "precision not published"
    assert not any("not in the catalog" in reason for reason in reasons.values())
    # compared since the catalog has Kimi K2 and uneven pipeline splits are planned (126 layers
    # over pp=8 x vp=8, the embedding and the loss counted as layers)
    compared = {c.id: c for c in training_cases() if isinstance(c, TrainingCase)}
    # Nemotron-3 8B / 22B and Nemotron-4 340B (model_type nemotron) are read since issue 20
    assert compared["nemo2407-Nemotron-340B-pretrain-128gpu"].model.id == "nemotron-4-340b"
    # DeepSeek-V4 Flash (model_type deepseek_v4) is read since the catalog has it, with the
    # MTP depth its run trains (a sliding-window layer), and the case says so
    flash = compared["mbridge-26.08-DeepSeekV4 Flash-DGX-GB200-128-MXFP8-L50"]
    assert flash.model.id == "deepseek-v4-flash" and flash.model.exact
    assert flash.setup.mtp_layers == 1
    assert flash.model.kinds[flash.model.mtp_module[0]].attention.compressor is None
    assert any("multi-token-prediction depth trained" in a for a in flash.assumptions)
    # DeepSeek-V3's runs train one MTP depth, on the last stage of the recipe's layout
    v3 = compared["mbridge-26.02-DeepSeekV3-DGX-B200-256-MXFP8-L505"]
    assert v3.setup.mtp_layers == 1
    assert v3.parallel.stage_layers == (4,) * 15 + (1,)  # Et*4|(t*4|)*14tmL
    assert (
        compared["mbridge-25.11-DeepSeekV3 (w/o MTP)-DGX-GB200-256-BF16-L563"].setup.mtp_layers == 0
    )
    assert compared["mbridge-26.06-Kimi_K2-DGX-GB300-256-MXFP8-L143"].model.id == (
        "kimi-k2-instruct"
    )
    split = compared["mbridge-26.06-LLAMA3.1_405B-DGX-H100-1024-FP8-L98"].parallel.stage_layers
    assert split is not None and sum(split) == 126 and len(split) == 64
    assert split[0] == split[-1] == 1  # the embedding and the loss take a layer's place


def test_rtx_pro_6000_records_map_to_the_catalog_card() -> None:
    rtx = [c for c in inference_cases() if "RTX6000Pro" in c.id]
    assert len(rtx) == 22
    assert all(isinstance(c, InferenceCase) and c.accelerator == "rtx-pro-6000-bse" for c in rtx)


def test_duplicate_record_ids_are_told_apart() -> None:
    ids = {c.id for c in training_cases()}
    base = "mbridge-26.06-DeepSeekV3-DGX-GB300-256-MXFP8-L110"
    assert {f"{base}-gbs4096", f"{base}-gbs15360"} <= ids


def test_llama3_70b_dgx_h100_fp8_layout() -> None:
    ident = "mbridge-26.04-LLAMA3_70B-DGX-H100-64-FP8-L300"
    case = next(c for c in training_cases() if c.id == ident)
    assert isinstance(case, TrainingCase)
    assert case.model.id == "llama-3-70b"
    assert case.accelerator == "h100-sxm-80gb"
    assert case.num_gpus == case.parallel.num_gpus == 64
    p = case.parallel
    assert (p.tp, p.pp, p.vp, p.dp, p.cp, p.ep) == (4, 8, 5, 2, 1, 1)
    assert p.sequence_parallel and p.distributed_optimizer and p.zero_stage == 0
    # fp8 current scaling with the parameters kept in fp8, as Megatron-Bridge's
    # bf16_with_fp8_current_scaling_mixed sets fp8_param_gather (data/param_formats.json)
    assert case.precision == "fp8-params"
    assert any(a.startswith("parameters kept in fp8 (fp8_param_gather)") for a in case.assumptions)
    assert (case.setup.seq_len, case.setup.micro_batch_size, case.setup.global_batch_size) == (
        8192,
        1,
        256,
    )
    assert case.measured_tokens_per_s_per_gpu == 1633
    assert case.measured_model_tflops_per_gpu == 734
    # its recipe (Megatron-Bridge v0.4.2) recomputes nothing, and the case says where it read so
    assert case.setup.recompute == "none"
    assert any(a.startswith("no activation recomputation, as its recipe") for a in case.assumptions)


def test_parameter_formats_are_read_from_the_recipes() -> None:
    """Each low-precision Megatron-Bridge record of a release whose recipes were read takes the
    parameter format its recipe chain sets (data/param_formats.json): quantized parameters
    (the ``*-params`` presets) where fp8_param_gather / fp4_param_gather is on, bf16 weights
    beside a weight cache where it is off; a release not read says it assumed the latter."""
    path = ROOT / "validation" / "data" / "param_formats.json"
    readings = json.loads(path.read_text("utf-8"))["records"]
    quantized = {r["id"]: r["params_quantized"] for r in readings}
    cases = {c.id: c for c in training_cases() if isinstance(c, TrainingCase)}
    seen = {True: 0, False: 0}
    for ident, on in quantized.items():
        case = cases.get(ident)
        if case is None or on is None:  # not compared, or bf16
            continue
        if case.setup.finetune.frozen:  # LoRA on a quantized base is refused: a bf16 base
            assert not case.precision.endswith("-params"), ident
            assert any("LoRA on a base kept in" in a for a in case.assumptions) == on, ident
            continue
        assert case.precision.endswith("-params") == on, ident
        seen[on] += 1
    assert seen[True] >= 90 and seen[False] >= 10  # MXFP8 / FP8 on; Kimi K2 and most NVFP4 off
    kimi = cases["mbridge-26.06-Kimi_K2-DGX-GB300-256-MXFP8-L143"]
    assert kimi.precision == "mxfp8"  # its recipe turns fp8_param_gather off for Muon + MXFP8
    unread = cases["mbridge-25.11-LLAMA3.1_405B-DGX-GB200-256-FP8-CS-L563"]
    assert unread.precision == "fp8"
    assert any(a.startswith("parameter format not published") for a in unread.assumptions)


def test_nvl72_gpus_per_node_is_the_nvlink_domain() -> None:
    cases = [c for c in training_cases() if isinstance(c, TrainingCase)]
    for c in cases:
        expected = 72 if c.accelerator in ("gb200", "gb300") else 8
        assert c.gpus_per_node == expected, c.id
        assert c.parallel.num_gpus == c.num_gpus, c.id


def test_expert_all_to_all_overlap_as_the_recipes_set_it() -> None:
    """Megatron-Bridge 26.02-26.08 recipes read (each at the first tag whose performance
    summary lists it): 16 compared MoE runs overlap the expert all-to-all (DeepSeek-V3, Qwen3,
    gpt-oss on GB200), the rest of those releases' MoE runs do not; 25.11 is read in part
    (data/recipes_25_11.json: one more, Qwen3-235B on H100, whose v0.2.0 config has its
    layout), dense runs never say."""
    cases = {c.id: c for c in training_cases() if isinstance(c, TrainingCase)}
    overlapped = {i for i, c in cases.items() if c.ep_comm_overlap}
    assert len(overlapped) == 17
    assert all(("DeepSeekV3" in i or "Qwen3" in i or "GPT OSS" in i) for i in overlapped)
    assert all(i.split("-")[1] != "25.09" for i in overlapped)
    early = {i for i in overlapped if i.split("-")[1] == "25.11"}
    assert early == {"mbridge-25.11-Qwen3_235B_a22B-DGX-H100-256-FP8-CS-L587"}
    unmatched = cases["mbridge-26.02.01-Qwen3_30B_a3B-DGX-H100-16-FP8-L439"]
    assert any("no recipe of" in a for a in unmatched.assumptions)
    said = [a for a in cases["mbridge-26.08-Qwen3_30B_a3B-DGX-GB200-8-MXFP8-L64"].assumptions]
    assert any("v0.6.0" in a and "_enable_hybridep_full_iteration_mxfp8" in a for a in said)
    off = cases["mbridge-26.06-Nemotron_3_Super-DGX-GB300-64-NVFP4-L160"]
    assert not off.ep_comm_overlap
    assert any(a.startswith("expert all-to-all not overlapped") for a in off.assumptions)
    older = cases["mbridge-25.11-Qwen3_30B_a3B-DGX-GB200-8-FP8-MX-L563"]
    assert not older.ep_comm_overlap
    assert any(
        a.startswith("expert all-to-all not overlapped") and "v0.2.0" in a
        for a in older.assumptions
    )
    unread = cases["mbridge-25.11-GPT OSS 120B-DGX-B200-64-BF16-L576"]  # no config has its layout
    assert not unread.ep_comm_overlap and not any("all-to-all" in a for a in unread.assumptions)
    dense = cases["mbridge-26.06-LLAMA3_70B-DGX-GB300-32-FP8-L173"]
    assert not any("all-to-all" in a for a in dense.assumptions)


def test_recomputation_as_the_recipes_set_it() -> None:
    """The same releases' records take the recomputation their recipes set
    (data/recompute_settings.json): Megatron-Core's selective recompute modules where a recipe
    names them, none where it sets none (or an empty module list); 25.11's as
    data/recipes_25_11.json reads them, and where it does not, none, said to be assumed."""
    read = {
        r["id"]: r for r in json.loads((DATA / "recompute_settings.json").read_text())["records"]
    }
    early = {r["id"]: r for r in json.loads((DATA / "recipes_25_11.json").read_text())["records"]}
    cases = {c.id: c for c in training_cases() if isinstance(c, TrainingCase)}
    named = {i for i, r in read.items() if r["granularity"] == "selective" and r["modules"]}
    assert len(named) == 24
    for i, c in cases.items():
        modules = early[i]["recompute_modules"] if i in early else None
        if i in early and c.model.moe is not None and modules is not None:
            assert c.setup.recompute_modules == tuple(modules), i
            assert c.setup.recompute == ("selective" if modules else "none"), i
            assert not any("recompute policy not published" in a for a in c.assumptions), i
            continue
        if not i.startswith("mbridge-") or i.split("-")[1] in ("25.09", "25.11"):
            assert c.setup.recompute_modules == () and c.setup.recompute in ("none", "full"), i
            continue
        if i in named:
            assert c.setup.recompute == "selective"
            assert c.setup.recompute_modules == tuple(read[i]["modules"])
            assert any("(recompute_modules), as its recipe sets it" in a for a in c.assumptions)
        else:
            assert c.setup.recompute == "none" and not c.setup.recompute_modules, i
    nano = cases["mbridge-26.06-Nemotron_3_Nano-DGX-H100-16-FP8-L151"]
    assert nano.setup.recompute_modules == ("moe", "layernorm", "core_attn", "moe_act")
    # a selective recompute with an empty module list recomputes nothing
    empty = cases["mbridge-26.06-DeepSeekV3-DGX-GB300-256-MXFP8-L110-gbs4096"]
    assert read[empty.id]["modules"] == []
    assert empty.setup.recompute == "none"
    # its recipe offloads the first 20 layers' activations (Megatron-Core's layer-wise
    # offload): modelled; Nemotron 3 Ultra's fine-grained offload of the grouped MLP: said
    offloads = cases["mbridge-26.04-LLAMA3_70B-DGX-GB300-64-FP8-L300"]
    assert offloads.setup.offload.activations and offloads.setup.offload.activation_layers == 20
    assert any(a.startswith("the first 20 layers' activations") for a in offloads.assumptions)
    ultra = cases["mbridge-26.08-Nemotron_3_Ultra-DGX-GB200-256-MXFP8-L99"]
    assert not ultra.setup.offload.any
    assert any(a.startswith("its recipe also offloads activations") for a in ultra.assumptions)


def test_moe_token_dispatcher_as_the_recipes_set_it() -> None:
    """The same releases' MoE runs take the token dispatcher their recipes set
    (data/moe_dispatchers.json): flex where a flex backend is set, alltoall where none is (the
    performance scripts reset the dispatcher then); 25.11's as data/recipes_25_11.json reads
    them (the stack's where it does not), dense runs the stack's."""
    read = {r["id"]: r for r in json.loads((DATA / "moe_dispatchers.json").read_text())["records"]}
    early = {r["id"]: r for r in json.loads((DATA / "recipes_25_11.json").read_text())["records"]}
    for r in read.values():  # alltoall exactly where no backend is set, and nothing says where
        assert (r["dispatcher"] == "alltoall") == (r["backend"] is None) == (r["set_at"] is None)
    cases = {c.id: c for c in training_cases() if isinstance(c, TrainingCase)}
    moe = {i: c for i, c in cases.items() if c.model.moe is not None}
    for i, c in moe.items():
        if i.split("-")[1] == "25.11":
            assert c.moe_dispatcher == early[i]["dispatcher"], i
            continue
        if i.split("-")[1] == "25.09":
            assert c.moe_dispatcher is None, i
            continue
        assert c.moe_dispatcher == read[i]["dispatcher"], i
        assert any(a.startswith(f"MoE token dispatcher {c.moe_dispatcher}") for a in c.assumptions)
    assert set(read) - set(moe) == {"mbridge-26.06.01-GPT OSS 120B-DGX-GB300-64-MXFP8-L55"}
    alltoall = {i for i, c in moe.items() if c.moe_dispatcher == "alltoall"}
    # gpt-oss (but on GB200 in 26.02.01), Qwen3-235B on H100 and B200 (and B300 in 26.02),
    # Qwen3-30B on B200 in 26.02 and 25.11 (and 25.11's Qwen3-235B on B200 and H100)
    assert len(alltoall) == 15
    assert "mbridge-26.04-Qwen3_235B_a22B-DGX-H100-256-FP8-L352" in alltoall
    assert "mbridge-26.02.01-GPT OSS 120B-DGX-GB200-64-BF16-L429" not in alltoall
    assert all(c.moe_dispatcher is None for c in cases.values() if c.model.moe is None)


def _mpt_cases() -> list[tuple[TrainingCase, dict[str, object]]]:
    raw = {str(r["id"]): r for r in _raw("training_measured.json")}
    return [
        (c, raw[c.id])
        for c in training_cases()
        if isinstance(c, TrainingCase) and c.group == "mosaicml_llm_foundry_mpt_benchmarks"
    ]


def test_mpt_numparams_is_transformers_count_plus_biases_and_positions() -> None:
    # llm-foundry's defaults (biases, a learned position table of seq_len rows) were trained:
    # NumParams = MptForCausalLM's count + (11 L + 1) d + seq d, exactly, on every row.
    rows = _mpt_cases()
    assert len(rows) == 116
    for case, record in rows:
        d, layers = case.model.hidden_size, case.model.num_layers
        extra = (11 * layers + 1) * d + case.setup.seq_len * d
        assert count_params(case.model).total + extra == record["num_params_reported"], case.id


def test_mpt_7b_count_close_to_published_at_2048() -> None:
    case, record = next(
        (c, r) for c, r in _mpt_cases() if c.model_name == "MPT-7b" and c.setup.seq_len == 2048
    )
    reported = record["num_params_reported"]
    assert isinstance(reported, int)
    assert abs(count_params(case.model).total - reported) <= 0.005 * reported


def test_mpt_mapping() -> None:
    for case, record in _mpt_cases():
        assert case.model.model_type == "mpt"
        assert case.parallel.tp == case.parallel.pp == 1
        assert case.parallel.dp == case.num_gpus
        assert case.parallel.zero_stage == (3 if "FULL" in str(record["parallelism"]) else 2)
        assert case.setup.recompute == ("full" if record["activation_checkpointing"] else "none")
        assert case.precision == "bf16"


def test_gpt3_175b_is_the_published_size() -> None:
    # Brown et al. 2020 (GPT-3), Table 2.1: 175.0B parameters, 96 layers, d_model 12288.
    case = next(c for c in training_cases() if c.id == "nemo2407-GPT3-175B-pretrain-128gpu")
    assert isinstance(case, TrainingCase)
    assert case.model.num_layers == 96 and case.model.hidden_size == 12288
    assert abs(count_params(case.model).total - 175.0e9) <= 0.01 * 175.0e9


def test_inference_cases_are_whole_groups() -> None:
    cases = [c for c in inference_cases() if isinstance(c, InferenceCase)]
    for c in cases:
        assert c.num_gpus == c.tp * c.pp
        assert c.measured_output_tokens_per_s_per_gpu == pytest.approx(
            c.measured_output_tokens_per_s / c.num_gpus
        )
        get_precision(c.precision)
        inference_memory(
            c.model,
            get_accelerator(c.accelerator),
            Parallelism(tp=c.tp, pp=c.pp, ep=c.ep),
            InferenceSetup(c.input_len, c.output_len, 1),
            get_precision(c.precision),
        )
    moe = [c for c in cases if c.model.moe is not None and c.tp > 1]
    assert moe and all(c.ep == c.tp for c in moe)
    assert all(any("expert parallelism" in a for a in c.assumptions) for c in moe)


def test_every_case_names_its_source() -> None:
    cases = [*training_cases(), *inference_cases()]
    for c in cases:
        if not isinstance(c, Skip):
            assert c.source and "@" in c.source, c.id


def test_project_never_reads_the_shared_reference_folder() -> None:
    # Users clone the project alone: no code may point at the reference data folder it was
    # copied from. (estimator/catalog/models.json's "about" text names that folder as the
    # provenance of its values; that is a citation, not a read, so data files are not scanned.)
    files = [
        *(ROOT / "estimator").rglob("*.py"),
        *(ROOT / "app").rglob("*.py"),
        *(ROOT / "validation").glob("*.py"),
        ROOT / "validation" / "data" / "README.md",
    ]
    assert len(files) > 10
    offenders = [
        str(f.relative_to(ROOT))
        for f in files
        if "shared/data" in f.read_text(encoding="utf-8")
        or "/work/shared" in f.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_lora_records_are_compared_as_lora() -> None:
    """No published record is skipped for fine-tuning: LoRA rows run LoRA with the framework's
    default adapters (rank 32), their assumption listed."""
    lora = [c for c in training_cases() if "LoRA" in c.id or c.id.endswith("-L185")]
    assert len(lora) == 7
    for case in lora:
        assert isinstance(case, TrainingCase), case
        assert case.setup.finetune.method == "lora" and case.setup.finetune.rank == 32
        assert any("LoRA settings not published" in a for a in case.assumptions)
    reasons = [c.reason for c in training_cases() if isinstance(c, Skip)]
    assert not any("LoRA" in r or "fine-tun" in r for r in reasons)


def test_the_planners_flop_count_is_nvidias_where_both_count_the_same_model() -> None:
    """The Megatron-Bridge records publish model TFLOP/s beside tokens/s: NVIDIA's own count of
    a token's training FLOPs. For Llama 3 / 3.1, Qwen3 MoE and Kimi K2 the planner's count (3x
    the causal forward, from the model's own shapes) is theirs within 1.5%; DeepSeek-V3's and
    DeepSeek-V4 Flash's within 1% once the multi-token-prediction depth their recipes train is
    counted (``mtp_layers``: 0.995-0.998 for DeepSeek-V3, 1.0007 for V4; 1.037-1.039 and
    1.061 without it), Nemotron 3 Super's and Ultra's within 2% with their recipes' two
    repeated MTP depths (11-12% and 7-8% over without);
    GPT-OSS's 11-17% below it (Megatron-Bridge's flop_utils.py counts a gated MLP's third matrix
    for SiLU only, and every layer's attention over the whole context: docs/validation.md). The
    Nemotron 3 Nano runs (no MTP; 5.5-7.8% over), Nemotron 3.5 Lightning's (4.3% over with its
    MTP) and the LoRA runs are counted differently."""
    from estimator.counts.flops import training_flops

    ratios: dict[str, list[float]] = {}
    for c in training_cases():
        if not isinstance(c, TrainingCase) or c.group != "nvidia_megatron_bridge_perf_summary":
            continue
        if not c.measured_model_tflops_per_gpu or c.setup.finetune.method != "full":
            continue
        gbs = c.setup.global_batch_size or 1
        flops = training_flops(
            c.model, c.setup.seq_len, gbs, "none", c.setup.finetune, mtp=c.setup.mtp_layers
        )
        ours = float(flops.model) / (gbs * c.setup.seq_len)
        theirs = c.measured_model_tflops_per_gpu * 1e12 / c.measured_tokens_per_s_per_gpu
        ratios.setdefault(c.model.id, []).append(theirs / ours)
    within = {
        "llama-3-70b": 0.015,
        "llama-3-8b": 0.015,
        "llama-3.1-405b": 0.015,
        "qwen3-30b-a3b": 0.015,
        "qwen3-235b-a22b": 0.015,
        "kimi-k2-instruct": 0.015,
        "deepseek-v3": 0.01,
        "deepseek-v4-flash": 0.01,
        # two depths of one repeated attention + MoE module (0.980-0.993; 1.106-1.120 without)
        "nemotron-3-super-120b-a12b": 0.02,
        "nemotron-3-ultra-550b-a55b": 0.01,  # 0.994, 1.007 (1.068, 1.081 without)
    }
    # 75, DeepSeek-V3's 13, V4 Flash's, Nemotron 3 Super's 16 and Ultra's 2
    assert sum(len(ratios[m]) for m in within) == 107
    for model, bound in within.items():
        assert all(abs(r - 1) <= bound for r in ratios[model]), (model, ratios[model])
    assert all(0.82 <= r <= 0.90 for r in ratios["gpt-oss-120b"])


def test_megatron_lm_moe_recipes_are_read_from_their_arguments() -> None:
    """Each Megatron-LM MoE recipe (data/moe_recipes_measured.json) becomes a case from its
    own arguments: layout, dispatcher, expert all-to-all overlap, recomputation, parameter
    format; its measured model TFLOP/s is read as tokens/s at the planner's FLOPs per token."""
    from estimator.counts.flops import training_flops
    from validation.records import moe_recipe_cases, moe_recipe_records

    data = json.loads((ROOT / "validation" / "data" / "moe_recipes_measured.json").read_text())
    raw = {r["id"]: r for r in moe_recipe_records()}
    cases = moe_recipe_cases()
    assert len(cases) == len(raw) == len(data["records"]) == 16
    assert len(data["without_measurement"]) == 2  # DeepSeek-V3 on H100: no number published
    for case in cases:
        assert isinstance(case, TrainingCase), case
        r = raw[case.id]
        args = r["args"]
        p = case.parallel
        assert (p.tp, p.pp, p.ep, p.cp) == tuple(
            r["parallelism"][k] for k in ("tp", "pp", "ep", "cp")
        )
        assert p.num_gpus == case.num_gpus == r["hardware"]["num_gpus"]
        assert case.moe_dispatcher == ("flex" if args["moe_token_dispatcher_type"] == "flex"
                                       else "alltoall")  # fmt: skip
        assert case.ep_comm_overlap == bool(args.get("overlap_moe_expert_parallel_comm"))
        assert case.precision.endswith("-params") == (
            r["precision"] != "bf16" and bool(args.get("fp8_param_gather"))
        )
        assert case.setup.mtp_layers == (args.get("mtp_num_layers") or 0)
        flops = training_flops(case.model, case.setup.seq_len, mtp=case.setup.mtp_layers)
        per_token = (flops.forward + flops.backward) / case.setup.seq_len
        assert case.measured_tokens_per_s_per_gpu * per_token == pytest.approx(
            r["measured"]["model_tflops_per_gpu"] * 1e12
        )
        assert case.source.startswith("NVIDIA/Megatron-LM/examples/moe_recipes/README.md @ ")
    by_id = {c.id: c for c in cases}
    h100 = by_id["mlm-moe-recipes-qwen3-235b-a22b-h100-bf16_256GPU_TP2PP8EP32"]
    assert h100.setup.recompute == "selective"  # its modules given as one string
    assert h100.setup.recompute_modules == ("moe_act", "layernorm")
    v3 = by_id["mlm-moe-recipes-deepseek-v3-b200-mxfp8_256GPU_TP1PP8EP32"]
    assert v3.parallel.vp == 2 and v3.parallel.stage_layers is not None
    assert sum(v3.parallel.stage_layers) == v3.model.num_layers  # the decoder layers (t)
    assert v3.setup.mtp_layers == 1  # its layout's m, on the last stage, with mtp_num_layers 1
    assert any("multi-token-prediction depth" in a for a in v3.assumptions)


def test_release_25_11_is_read_where_its_evidence_agrees() -> None:
    """NeMo 25.11 ships Megatron-Bridge 0.2.0 (data/recipes_25_11.json): every row keeps bf16
    gradients (each family's perf function turns grad_reduce_in_fp32 off); the MoE settings
    are read where a v0.2.0 config has the row's layout, or where the tag's config for its GPU
    and precision agrees with a config that has it, and not otherwise (the assumptions of
    releases not read stay)."""
    early = {r["id"]: r for r in json.loads((DATA / "recipes_25_11.json").read_text())["records"]}
    cases = {c.id: c for c in training_cases() if isinstance(c, TrainingCase)}
    rows = {i for i in cases if i.startswith("mbridge-25.11-")}
    assert rows <= set(early) and len(early) == 16
    assert all(cases[i].gradients == "bf16" for i in rows)
    assert all(cases[i].training_precision.bytes("gradients") == 2 for i in rows)
    oss = cases["mbridge-25.11-GPT OSS 120B-DGX-GB200-64-BF16-L563"]
    assert oss.cuda_graphs == "none" and oss.moe_dispatcher is None  # the two sources disagree
    assert any(a.startswith("CUDA graphs none") and "v0.2.0" in a for a in oss.assumptions)
    assert any(a.startswith("how its release's recipe was read") for a in oss.assumptions)
    for i in ("GPT OSS 120B-DGX-B200-64-BF16-L576", "Qwen3_235B_a22B-DGX-GB200-256-BF16-L563"):
        unread = cases[f"mbridge-25.11-{i}"]
        assert unread.cuda_graphs is None and unread.moe_dispatcher is None
        assert any("recompute policy not published" in a for a in unread.assumptions)
    dense = cases["mbridge-25.11-LLAMA3_70B-DGX-H100-64-FP8-CS-L587"]
    assert dense.cuda_graphs is None and dense.gradients == "bf16"
    matched = cases["mbridge-25.11-Qwen3_30B_a3B-DGX-GB200-8-FP8-MX-L563"]
    assert early[matched.id]["layout_match"] and matched.cuda_graphs == "partial"
    assert matched.moe_dispatcher == "flex"
