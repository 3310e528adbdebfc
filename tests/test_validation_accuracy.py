"""Accuracy against published measurements, pinned at the levels validation/report.md shows.

The kernel bounds are the issue's targets (median <= 15%), met. The end-to-end medians now meet
the issue's targets too (training <= 15%, serving <= 20%); the bounds are the medians in
validation/report.md plus a point or two, so a change that drifts is caught. The far-off records
(B200 Qwen3 MoE at micro-batch 1, FlashAttention-2 at long sequences on H100, Qwen3 MoE serving)
are pinned at their present error so that they are seen, not hidden. Nothing here is fitted on
these records.
"""

from __future__ import annotations

import pytest

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
    assert kinds["training"]["n"] >= 160 and kinds["serving"]["n"] >= 70
    assert kinds["training"]["median_ape"] <= 0.15  # the target (report: 13.1%)
    assert kinds["training"]["p90_ape"] <= 0.33
    assert kinds["serving"]["median_ape"] <= 0.20  # the target (report: 17.9%)
    assert kinds["serving"]["p90_ape"] <= 0.53
    groups = _summary(built, "training by group")
    assert groups["nvidia_nemo_24.07_perf_summary"]["median_ape"] <= 0.08
    assert groups["mosaicml_llm_foundry_mpt_benchmarks"]["median_ape"] <= 0.15
    assert groups["nvidia_megatron_bridge_perf_summary"]["median_ape"] <= 0.12
    accelerators = _summary(built, "training by accelerator")
    for acc in ("a100-sxm-40gb", "a100-sxm-80gb", "gb200", "gb300"):
        assert accelerators[acc]["median_ape"] <= 0.14, acc
    assert accelerators["h100-sxm-80gb"]["median_ape"] <= 0.18


@pytest.mark.parametrize(
    ("record", "tolerance"),
    [  # |error| in validation/report.md plus about 5 points
        ("mbridge-26.04-LLAMA3_70B-DGX-H100-64-FP8-L300", 0.14),
        ("mpt-7b-a100_80gb-8gpu-s4096-mb16-amp_bf16-L164", 0.05),
        ("mpt-7b-a100_80gb-8gpu-s32768-mb2-amp_bf16-L164", 0.18),
        ("mbridge-26.06-Qwen3_30B_a3B-DGX-H100-16-FP8-L127", 0.26),  # EP16 all-to-all over IB
        ("mpt-1b-h100_80gb-8gpu-s32768-mb1-amp_bf16-L96", 0.62),  # FlashAttention-2 on Hopper
        ("nemo2407-GPT3-5B-pretrain-64gpu", 0.15),
        ("nemo2407-LLAMA3-8B-pretrain-8gpu", 0.18),
        ("mbridge-26.02-LLAMA3_70B-DGX-GB300-64-NVFP4-L481", 0.13),  # bf16 attention under NVFP4
        ("mbridge-26.02.01-LLAMA3_70B-DGX-GB200-64-MXFP8-L397", 0.08),
        ("mbridge-26.08-Qwen3_30B_a3B-DGX-GB300-8-MXFP8-L64", 0.51),  # MoE: far off, see report
        ("mbridge-26.02-Qwen3_30B_a3B-DGX-B200-8-MXFP8-L524", 1.15),  # MoE mbs 1: far off
    ],
)
def test_pinned_records(built: dict[str, object], record: str, tolerance: float) -> None:
    rows = {r.id: r for r in built["rows"]}  # type: ignore[attr-defined]
    assert record in rows
    assert abs(rows[record].error) <= tolerance, rows[record]
