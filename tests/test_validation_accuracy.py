"""Accuracy against published measurements, pinned at the levels validation/report.md shows.

The kernel bounds are the issue's targets (median <= 15%), met. The end-to-end bounds are the
measured medians plus a few points: the model does not meet the 15% / 20% targets yet (it is
optimistic, see the report), and these tests make sure it does not drift further while it is
improved. Nothing here is fitted on these records.
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
    assert kinds["training"]["median_ape"] <= 0.25
    assert kinds["training"]["p90_ape"] <= 0.50
    assert kinds["serving"]["median_ape"] <= 0.30
    groups = _summary(built, "training by group")
    assert groups["nvidia_nemo_24.07_perf_summary"]["median_ape"] <= 0.15
    assert groups["mosaicml_llm_foundry_mpt_benchmarks"]["median_ape"] <= 0.25
    assert groups["nvidia_megatron_bridge_perf_summary"]["median_ape"] <= 0.33


@pytest.mark.parametrize(
    ("record", "tolerance"),
    [  # |error| in validation/report.md plus 5 points
        ("mbridge-26.04-LLAMA3_70B-DGX-H100-64-FP8-L300", 0.09),
        ("mpt-7b-a100_80gb-8gpu-s4096-mb16-amp_bf16-L164", 0.10),
        ("mpt-7b-a100_80gb-8gpu-s32768-mb2-amp_bf16-L164", 0.21),
        ("mbridge-26.06-Qwen3_30B_a3B-DGX-H100-16-FP8-L127", 0.45),  # MoE dispatcher costs
        ("mpt-1b-h100_80gb-8gpu-s32768-mb1-amp_bf16-L96", 0.70),  # FlashAttention-2 on Hopper
        ("nemo2407-GPT3-5B-pretrain-64gpu", 0.37),  # a known gap: small model, optimistic
    ],
)
def test_pinned_records(built: dict[str, object], record: str, tolerance: float) -> None:
    rows = {r.id: r for r in built["rows"]}  # type: ignore[attr-defined]
    assert record in rows
    assert abs(rows[record].error) <= tolerance, rows[record]
