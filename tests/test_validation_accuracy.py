"""Accuracy against published measurements, pinned at the levels validation/report.md shows.

The kernel bounds are the issue's targets (median <= 15%), met. The end-to-end medians meet
the issue's targets too (training <= 10%; serving <= 20% on the accelerators with kernel curves
and the models compared before Llama 4 joined the catalog); the bounds are the medians in
validation/report.md plus a point or two, so a change that drifts is caught, and each family is
pinned on its own. The far-off records (gpt-oss training, Llama 4 serving, B200 Qwen3 MoE at
micro-batch 1, FlashAttention-2 at long sequences on H100, Qwen3 MoE serving) are pinned at their
present error so that they are seen, not hidden. One number is fitted on a group: the
llm-foundry profile's compute factor, on the MosaicML runs (in-sample, and said so).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from estimator.catalog.files import load
from validation import report


@pytest.fixture(scope="module")
def built() -> dict[str, object]:
    return report.build()


def _summary(built: dict[str, object], table: str) -> dict[str, dict[str, float]]:
    return {s["name"]: s for s in built["summary"][table]}  # type: ignore[index]


def test_kernel_models_meet_the_15_percent_target(built: dict[str, object]) -> None:
    by_op = _summary(built, "kernels by op")
    for name, s in by_op.items():
        if "vidur" in name and "all-reduce" in name:
            continue  # torch.distributed timing through Vidur's profiler: reported, not a target
        assert s["median_ape"] <= 0.155, name
    assert _summary(built, "by kind")["kernel"]["median_ape"] <= 0.07


def test_end_to_end_accuracy_does_not_regress(built: dict[str, object]) -> None:
    kinds = _summary(built, "by kind")
    assert kinds["training"]["n"] >= 250 and kinds["serving"]["n"] >= 127
    # report: 8.5%, the issue's target 10% (10.05% before the MoE records took their recipes'
    # token dispatcher and the flex dispatcher its two copies each way, not the all-to-all
    # one's four; 10.4% before the Llama runs were compared with the TP overlap their recipes
    # set; 14.4% before stack profiles)
    assert kinds["training"]["median_ape"] <= 0.09
    # report: 25.4% with Megatron-LM's 16 MoE recipes (25.9% before two Llama 3 70B GB300 rows
    # took their recipe's layout; 25.4% on the 267 before the recipes), gpt-oss's
    # 9 records included (25.3% before the recipes' parameter formats,
    # 26.0% before their recompute modules,
    # 27.9% before their token dispatcher, 31.6% before the expert all-to-all overlap was read
    # from the recipes of Megatron-Bridge 26.02-26.08, 29.1% before the llm-foundry factor was
    # fitted on each generation's runs apart)
    assert kinds["training"]["p90_ape"] <= 0.26
    # The families compared before this round's catalog (Llama, MPT, GPT-3, Qwen3 MoE,
    # DeepSeek-V3: 215 records now, uneven pipeline splits included) keep their bounds.
    before = sorted(
        abs(r.error)
        for r in built["rows"]  # type: ignore[attr-defined]
        if r.kind == "training" and r.family in {"llama", "mpt", "gpt2", "qwen3_moe", "deepseek_v3"}
    )
    assert len(before) >= 210
    # report: 8.1% median, 18.7% p90 (9.4% and 29.0% before the recipes' token dispatcher,
    # 13.7% and 32.2% before the llm-foundry profile)
    assert statistics.median(before) <= 0.09 and statistics.quantiles(before, n=10)[-1] <= 0.20
    # All 127 serving records (report: 23.3%, p90 78.8%): the RTX PRO 6000 BSE's 22 run on the
    # documented fallback curves (no kernel tables for its GB202 chip), Llama 4's 29 are far off.
    # Since the routed experts are one fused kernel (one launch per linear, not one per expert)
    # and EP inside the TP group moves no tokens (serving.steps; 22.9%, p90 61.2% before), the
    # Qwen3-235B records went from -38..-68% to -32..+17%, while the FP4 MoE records on
    # Blackwell (Qwen3-30B-A3B, Llama 4 Scout) are over-predicted +40..+300%: the per-expert
    # launch floors had stood in for a large-batch cost the model does not have (the p90).
    assert kinds["serving"]["median_ape"] <= 0.24
    assert kinds["serving"]["p90_ape"] <= 0.80
    mapped = load("efficiency.json")["accelerators"]  # fitted, derived or same-chip curves
    fitted = [
        abs(r.error)
        for r in built["rows"]  # type: ignore[attr-defined]
        if r.kind == "serving" and r.accelerator in mapped and r.family != "llama4_text"
    ]
    assert len(fitted) == 76 and statistics.median(fitted) <= 0.20  # the target: 17.9%
    serving = _summary(built, "serving by accelerator")
    assert serving["rtx-pro-6000-bse"]["median_ape"] <= 0.37
    serving_families = _summary(built, "serving by family")
    assert serving_families["llama"]["median_ape"] <= 0.20
    assert serving_families["llama4_text"]["median_ape"] <= 0.55  # over-predicted: far off, seen
    assert serving_families["qwen3_moe"]["median_ape"] <= 0.28  # 41.8% with a launch per expert
    # The measured operator tables' opt-in (kernels="measured", timing.measured): 15.3% overall
    # (22.8% fitted); B200 14.2% (33.3%), GB200 21.8% (40.2%), H200 6.8% (12.1%), Llama 4 17.2%
    # (54.0%), but Qwen3 MoE 33.6% (27.7%): why it is not the default (issue 41).
    measured = _summary(built, "serving on the measured kernels (opt-in, kernels=measured)")
    assert measured["tensorrt_llm_perf_overview_v1.0"]["median_ape"] <= 0.16
    on = _summary(built, "serving on the measured kernels (opt-in), by accelerator")
    assert on["b200"]["median_ape"] <= 0.15 and on["gb200"]["median_ape"] <= 0.22
    assert on["h200-sxm-141gb"]["median_ape"] <= 0.07
    fam = _summary(built, "serving on the measured kernels (opt-in), by family")
    assert fam["llama4_text"]["median_ape"] <= 0.18 and fam["qwen3_moe"]["median_ape"] <= 0.34
    groups = _summary(built, "training by group")
    # 15 records with the 3 LoRA rows (-11% to -15%: packed SQuAD sequences, whose attention
    # stays within each sample, counted as whole 4096-token sequences): 9.4% (6.2% without)
    assert groups["nvidia_nemo_24.07_perf_summary"]["median_ape"] <= 0.11
    # In-sample: the llm-foundry profile's factors are fitted on this group, the A100 runs' and
    # the H100 runs' apart (report: 7.0%; 7.8% with one factor for both, 13.7% at 1.0); fitted on
    # the A100 runs alone, the H100 runs are 16.0% off (22.7% at 1.0).
    assert groups["mosaicml_llm_foundry_mpt_benchmarks"]["median_ape"] <= 0.08
    # report: 10.3% since the routed experts' gradients reduce over the expert data-parallel
    # ranks, the recipes' bf16 gradient buffers are read and Blackwell's small heads take
    # Hopper's head-dim factors; 11.0% since the DeepSeek and Nemotron 3 runs train their
    # recipes' MTP depths
    # (NVIDIA's FLOPs per token then the planner's within 2%; 10.0% before, when the missing
    # work offset other errors), 10.1% before gpt-oss's eager ops, 10.3% before two Llama 3 70B
    # GB300 rows took their recipe's layout, 14.8% before the recipes' token dispatcher
    assert groups["nvidia_megatron_bridge_perf_summary"]["median_ape"] <= 0.11
    accelerators = _summary(built, "training by accelerator")
    for acc in ("a100-sxm-40gb", "a100-sxm-80gb"):
        assert accelerators[acc]["median_ape"] <= 0.10, acc
    assert accelerators["gb200"]["median_ape"] <= 0.09  # report: 7.4% (9.8% before)
    assert accelerators["gb300"]["median_ape"] <= 0.14  # Nemotron 3 and Qwen3 MoE under-predicted
    # the issue's +/-15% per group: report -9.1% (-13.4% before the recipes' token dispatcher,
    # -16.3% before the Llama-3.1-405B runs took their recipes' TP overlap)
    assert abs(accelerators["gb300"]["median_signed"]) <= 0.15
    assert accelerators["h100-sxm-80gb"]["median_ape"] <= 0.10  # report: 8.0%
    families = _summary(built, "training by family")
    for family, bound in {
        "llama": 0.10,
        "mpt": 0.09,
        # 14.6% since the runs train the multi-token-prediction depth their recipes set, on
        # the last stage of the recipes' pipeline layouts (the planner's FLOPs per token now
        # NVIDIA's within 0.5%, 3.8% under before): the pp=2 GB300 runs -9..-16% -> -14..-21%
        # (every GB300 run is under-predicted), the pp=16 B200 / B300 ones -3..+2% ->
        # +15..+19%, the median signed -2.1% -> -0.5%. 7.4% before, when the missing MTP work
        # and the planner's own splits offset those errors (6.2% before the MoE host time)
        "deepseek_v3": 0.16,
        # its one run, on GB300 without CUDA graphs: -13.6% with its MoE layers' host time
        # exposed at the 1.60 ms refitted once the MTP runs' work was counted (-12.4% at 1.23 ms,
        # -8.5% before; every GB300 run is under-predicted, -11% in the median)
        "kimi_k2": 0.14,
        # 18.6% since Nemotron 3 Super, Ultra and 3.5 Lightning train their recipes' two
        # repeated MTP depths (Super's GB300 runs -11..-22% -> -17..-28%, Lightning's +48.9% ->
        # +17.4%; the median signed +5.0% -> -2.7%); 16.0% before, 17.8% before that
        "nemotron_h": 0.19,
        "qwen3_moe": 0.14,  # 20.1% before
        # 9.2% since 25.11's runs had their release's recipes read where the evidence agrees
        # (data/recipes_25_11.json: the GB200 run's no CUDA graphs, +20% -> +6%); 4-45% over;
        # 19.3% since the routed experts'
        # gradients reduce over the expert data-parallel ranks (the 25.11 B200 run, EP 8 with
        # 2 micro-batches a step: +145% -> +31%, its experts' gradients cross the NICs whole)
        # and its 64-dim heads take Hopper's head-dim factors on Blackwell (GB200 runs
        # +23..+35% -> +19..+31%); 22.8% with the MoE host time
        # refitted at 1.60 ms once the MTP runs' work was counted; 24.7% since the eager ops
        # around its fused expert activation (its clamp and expert biases) and its unfused
        # YaRN rotary embedding are timed (28.3% with the experts' alone; 42.8% before, 45.6%
        # before the lent H100's kernels, 48.1% before the recipes' recompute modules; 44.2%
        # until the GB200 runs of 26.02.01 and 26.04.01 were compared with the expert
        # all-to-all overlap their recipes set)
        "gpt_oss": 0.10,
    }.items():
        assert families[family]["median_ape"] <= bound, family


def test_no_training_group_beyond_15_percent_signed(built: dict[str, object]) -> None:
    """Issue 21's target: no group (framework, accelerator, model family) of five records or
    more with a median signed error beyond +/-15% (report: the largest are GB300 -10.7%,
    Megatron-LM's MoE recipes +10.2% and gpt-oss +9.2%, +19.3% before 25.11's recipes were
    read in part)."""
    for table in ("training by group", "training by accelerator", "training by family"):
        for name, s in _summary(built, table).items():
            if s["n"] >= 5:
                assert abs(s["median_signed"]) <= 0.15, (table, name)


@pytest.mark.parametrize(
    ("record", "tolerance"),
    [  # |error| in validation/report.md plus about 5 points
        # -0.0% with its recipe's TP overlap (+3.9% before the lent H100's GEMMs entered the
        # fit; -8.6% with the TP traffic exposed)
        ("mbridge-26.04-LLAMA3_70B-DGX-H100-64-FP8-L300", 0.09),
        # TP 4 FP8 on GB300: -13.4% with the overlap (-25.3% exposed)
        ("mbridge-26.06-LLAMA3.1_405B-DGX-GB300-256-FP8-L98", 0.18),
        # the llm-foundry factor of the A100 runs (1.057; the whole group's 1.119 before):
        # -11.7% -> -5.4% and +0.1% -> +7.2%, the long sequences over-predicted more
        ("mpt-7b-a100_80gb-8gpu-s4096-mb16-amp_bf16-L164", 0.10),
        ("mpt-7b-a100_80gb-8gpu-s32768-mb2-amp_bf16-L164", 0.12),
        # EP16 all-to-all over IB: +20.6% while a cross-node all-to-all was charged 1/8 of its
        # NIC bytes; +31.8% charged whole, HybridEP sending a token once per node; +43.5% with
        # HybridEP's two token copies each way instead of the all-to-all dispatcher's four;
        # +19.6% with the host time of its MoE layers, its recipe setting no CUDA graphs
        ("mbridge-26.06-Qwen3_30B_a3B-DGX-H100-16-FP8-L127", 0.25),
        ("mpt-1b-h100_80gb-8gpu-s32768-mb1-amp_bf16-L96", 0.43),  # FlashAttention-2 on Hopper
        ("nemo2407-GPT3-5B-pretrain-64gpu", 0.15),
        ("nemo2407-LLAMA3-8B-pretrain-8gpu", 0.18),
        # bf16 attention under NVFP4: +7.9% before Blackwell Ultra's doubled attention rate,
        # +18.1% with it (the chip's FP8 and MXFP8 runs came closer: -6.0% -> -1.0% here)
        ("mbridge-26.02-LLAMA3_70B-DGX-GB300-64-NVFP4-L481", 0.19),
        ("mbridge-26.02.01-LLAMA3_70B-DGX-GB200-64-MXFP8-L397", 0.08),
        # MoE: -11.9% (-22.4% before HybridEP's two token copies each way, not four; -43.0%
        # before its recipe's expert all-to-all overlap)
        ("mbridge-26.08-Qwen3_30B_a3B-DGX-GB300-8-MXFP8-L64", 0.17),
        ("mbridge-26.02-Qwen3_30B_a3B-DGX-B200-8-MXFP8-L524", 1.15),  # MoE mbs 1: far off
    ],
)
def test_pinned_records(built: dict[str, object], record: str, tolerance: float) -> None:
    rows = {r.id: r for r in built["rows"]}  # type: ignore[attr-defined]
    assert record in rows
    assert abs(rows[record].error) <= tolerance, rows[record]


def test_the_shipped_report_is_the_current_model(built: dict[str, object]) -> None:
    # validation/report.json is what the /accuracy page and every estimate's accuracy block
    # read: it must be this estimator's, record for record (python -m validation.report --write).
    stored = json.loads((Path(report.__file__).parent / "report.json").read_text("utf-8"))
    fresh = report.to_json(built)
    assert [r["id"] for r in stored["rows"]] == [r["id"] for r in fresh["rows"]]
    assert [r["predicted"] for r in stored["rows"]] == pytest.approx(
        [r["predicted"] for r in fresh["rows"]], rel=1e-9
    )
    assert [(r["id"], r["metric"]) for r in stored["load"]["rows"]] == [
        (r["id"], r["metric"]) for r in fresh["load"]["rows"]
    ]
    assert [r["predicted"] for r in stored["load"]["rows"]] == pytest.approx(
        [r["predicted"] for r in fresh["load"]["rows"]], rel=1e-9
    )


def test_published_runs_that_ran_are_not_called_out_of_memory(built: dict[str, object]) -> None:
    """Every compared training run ran, so it fitted: the planner's verdict on them is pinned.
    A run it calls "does_not_fit" is listed in the report with its total over the card and
    what its case could not read, and every one has such a setting (report: 268 fit, 3
    tight, 12 do not, of 283 with Megatron-LM's 16 MoE recipes, whose DeepSeek-V4-Pro run is one
    of them; 265 / 5 / 13 before 25.11's recipes were read in part; 252 / 10 / 21 before
    the Megatron-Bridge runs kept their recipes' bf16 gradient
    buffers (grad_reduce_in_fp32 off, validation/data/grad_reduce.json); 252 / 12 / 19 before
    the Nemotron 3 Super runs trained their MTP module, which took
    its two B300 NVFP4 runs 11% over the card, where its MXFP8 B300 runs already were;
    256 / 8 / 19 before the DeepSeek-V3 runs trained their MTP depth, whose layer,
    second embedding copy and logits put the four pp=2 GB300 runs' last stage 0.5% over the card
    (6.5% under before); 256 / 7 / 20 before the two 26.02.01 Llama 3 70B GB300 rows took
    their recipe's layout; of the 267 before the recipes,
    241 / 7 / 19, 240 / 7 / 20 before the recipes' layer-wise activation offload was read,
    231 / 15 / 21 before their parameter formats were and quantized weights held the copies the
    backward reads; without the tight band 36 read "does not fit"). Each is recomputed from
    its row."""
    ran = built["ran"]  # type: ignore[index]
    training = [r for r in built["rows"] if r.kind == "training"]  # type: ignore[attr-defined]
    assert ran["n"] == len(training)
    assert ran["verdicts"] == {
        v: sum(1 for r in training if r.fit == v) for v in ("fits", "tight", "does_not_fit")
    }
    assert ran["verdicts"]["does_not_fit"] <= 12 and ran["verdicts"]["fits"] >= 268
    assert all(r["unread"] for r in ran["does_not_fit"])  # never without a stated reason
    listed = {r["id"]: r for r in ran["does_not_fit"]}
    for r in training:
        over = r.over_capacity
        assert (r.id in listed) == (r.fit == "does_not_fit"), r.id
        assert (over <= 0) == (r.fit == "fits"), r.id  # tight runs are over the card
        if r.id in listed:
            assert listed[r.id]["over_capacity"] == pytest.approx(over)
    text = report.render(built)
    assert "# Published training runs ran" in text
    assert all(f"| {i} |" in text for i in listed)


def test_megatron_lm_moe_recipes(built: dict[str, object]) -> None:
    """Megatron-LM's MoE recipes (16 runs, every setting from their arguments): pinned at the
    report's levels. The planner reads the full-iteration CUDA-graph runs closest (+2% .. +7%
    on Qwen3, -10% on Qwen3-30B with paged stash) and over-predicts the runs without them:
    the same model on the same GB200s ran 14% (Qwen3-235B) and 26% (Qwen3-30B) faster with
    full-iteration graphs than with the partial ones, which the planner does not tell apart."""
    groups = _summary(built, "training by group")
    mine = groups["megatron_lm_moe_recipes"]
    # report: 16 records, 11.2% median, 44.9% p90, +10.0% median signed
    assert mine["n"] == 16
    assert mine["median_ape"] <= 0.125 and abs(mine["median_signed"]) <= 0.15
    rows = {r.id: r for r in built["rows"] if r.group == "megatron_lm_moe_recipes"}  # type: ignore[attr-defined]
    base = "mlm-moe-recipes-qwen3-235b-a22b-gb200-mxfp8_128GPU_TP1PP1EP64_"
    full, partial = rows[base + "paged_stash_fullcg_overlap"], rows[base + "partial_cg_overlap"]
    assert full.predicted == pytest.approx(partial.predicted)  # graphs are not modelled
    assert partial.measured / full.measured == pytest.approx(1018.0 / 1159.5)
    assert abs(full.error) <= 0.09 and partial.error > 0.15
