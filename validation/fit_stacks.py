"""Fit each software stack profile's ``compute_scale`` on the published runs of that stack.

One number per stack, fitted on the whole group (never per record): the compute-time factor
at which the group's median predicted / measured throughput is 1. Throughput is not exactly
inversely proportional to compute (exposed communication is not scaled), so the factor is found
by fixed-point iteration from 1.0. A two-fold check says how well one number carries across
accelerators: fitted on one accelerator's runs, the median error on the other's. Where it
carries badly, each accelerator generation with ``MIN_GENERATION_RUNS`` or more runs gets its
own factor, fitted on its runs alone (``compute_scale_by_generation``); the whole group's stays
for the other generations.

``python -m validation.fit_stacks`` prints the fits; ``estimator/timing/stacks.py`` holds the
values it printed (a test checks they agree to the third decimal).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

from estimator import get_accelerator
from estimator.timing.stacks import DEFAULT_STACK, MOE_EAGER_HOST_S, STACKS
from validation.records import TrainingCase, all_training_cases
from validation.report import case_estimate, case_throughput

__all__ = [
    "GROUP_OF_STACK",
    "MIN_GENERATION_RUNS",
    "eager_moe_runs",
    "fit_by_generation",
    "fit_moe_host",
    "fit_scale",
    "leave_one_out",
    "main",
]

# The published groups in validation/data run on each stack.
GROUP_OF_STACK = {
    "llm-foundry": "mosaicml_llm_foundry_mpt_benchmarks",
    "fsdp2": "torchtitan_benchmarks",
}
ITERATIONS = 8
MIN_GENERATION_RUNS = 30  # a generation's own factor needs this many of its runs


def _ratios(cases: Iterable[TrainingCase], stack: str, scale: float) -> list[float]:
    return [
        case_throughput(case, stack, scale) / case.measured_tokens_per_s_per_gpu for case in cases
    ]


def fit_scale(cases: list[TrainingCase], stack: str) -> float:
    """The compute factor at which ``cases``' median predicted / measured throughput is 1."""
    scale = 1.0
    for _ in range(ITERATIONS):
        scale *= statistics.median(_ratios(cases, stack, scale))
    return scale


def fit_by_generation(cases: list[TrainingCase], stack: str) -> dict[str, float]:
    """``fit_scale`` on each accelerator generation's runs alone, for the generations with
    ``MIN_GENERATION_RUNS`` or more of them."""
    by: dict[str, list[TrainingCase]] = {}
    for c in cases:
        by.setdefault(get_accelerator(c.accelerator).generation or "", []).append(c)
    return {
        g: fit_scale(runs, stack)
        for g, runs in sorted(by.items())
        if g and len(runs) >= MIN_GENERATION_RUNS
    }


def _median_error(cases: list[TrainingCase], stack: str, scale: float) -> float:
    return statistics.median(abs(r - 1) for r in _ratios(cases, stack, scale))


def _source_file(case: TrainingCase) -> str:
    """The file a record's source names (``repo@commit:path:line`` or ``repo/path @ ...``)."""
    head = case.source.split(" @ ")[0]
    return head.rsplit(":", 1)[0].split(":")[-1] if ":" in head else head


def leave_one_out(
    cases: list[TrainingCase], stack: str, key: Callable[[TrainingCase], str]
) -> dict[str, tuple[int, float, float]]:
    """Leave-one-source-out: for each value of ``key`` (a source file, a model), the factor
    fitted on the other cases and the held-out cases' signed errors under it. Returns each
    held-out value's (runs, factor, median APE of its runs)."""
    out = {}
    for held in sorted({key(c) for c in cases}):
        test = [c for c in cases if key(c) == held]
        train = [c for c in cases if key(c) != held]
        if not train:
            continue
        s = fit_scale(train, stack)
        out[held] = (len(test), s, _median_error(test, stack, s))
    return out


def loso_errors(
    cases: list[TrainingCase], stack: str, key: Callable[[TrainingCase], str]
) -> list[float]:
    """Every case's absolute error under the factor fitted without its ``key`` (its source
    file, its model): what the median APE of ``leave_one_out`` pools."""
    errors = []
    for held in {key(c) for c in cases}:
        train = [c for c in cases if key(c) != held]
        if train:
            s = fit_scale(train, stack)
            test = [c for c in cases if key(c) == held]
            errors += [abs(r - 1) for r in _ratios(test, stack, s)]
    return errors


def _print_loso(runs: list[TrainingCase], stack: str) -> None:
    for what, key in (("source file", _source_file), ("model", lambda c: c.model_name)):
        folds = leave_one_out(runs, stack, key)
        if len(folds) < 2:
            continue
        pooled = statistics.median(loso_errors(runs, stack, key))
        print(f"  leave one {what} out: median APE {pooled:.1%} over the held-out runs")
        for held, (n, s, err) in folds.items():
            print(f"    without {held} ({n} runs): {s:.3f}; their median APE {err:.1%}")


def main() -> None:
    cases = [c for c in all_training_cases() if isinstance(c, TrainingCase)]
    for stack, group in GROUP_OF_STACK.items():
        runs = [c for c in cases if c.group == group]
        scale = fit_scale(runs, stack)
        print(f"{stack}: compute_scale {scale:.3f} fitted on {len(runs)} runs of {group}")
        print(
            f"  median APE at 1.0: {_median_error(runs, stack, 1.0):.1%}; "
            f"at the fit: {_median_error(runs, stack, scale):.1%}"
            f" (in use: {STACKS[stack].compute_scale:.3f})"
        )
        _print_loso(runs, stack)
        by_acc: dict[str, list[TrainingCase]] = {}
        for c in runs:
            family = get_accelerator(c.accelerator).id.split("-")[0]
            by_acc.setdefault(family, []).append(c)
        for held_out, test in by_acc.items():
            train = [c for c in runs if c not in test]
            if not train:
                continue
            s = fit_scale(train, stack)
            print(
                f"  fitted without {held_out} ({len(train)} runs): {s:.3f}; median APE on the"
                f" {len(test)} {held_out} runs {_median_error(test, stack, s):.1%}"
                f" (at 1.0: {_median_error(test, stack, 1.0):.1%})"
            )
        for generation, s in fit_by_generation(runs, stack).items():
            own = [c for c in runs if get_accelerator(c.accelerator).generation == generation]
            print(
                f"  on its {len(own)} {generation} runs alone: {s:.3f}; median APE"
                f" {_median_error(own, stack, s):.1%}"
                f" (at the whole group's {scale:.3f}: {_median_error(own, stack, scale):.1%})"
            )


def eager_moe_runs() -> list[TrainingCase]:
    """The compared Megatron-Core MoE runs whose recipes set no CUDA graphs
    (``validation/data/cuda_graphs.json``, Megatron-LM's recipe arguments)."""
    return [
        c
        for c in all_training_cases()
        if isinstance(c, TrainingCase)
        and c.stack == DEFAULT_STACK
        and c.model.moe is not None
        and c.cuda_graphs == "none"
    ]


def _host_errors(cases: list[TrainingCase], host_s: float) -> list[float]:
    return [
        case_estimate(c, host_s=host_s).tokens_per_s_per_gpu / c.measured_tokens_per_s_per_gpu - 1
        for c in cases
    ]


def fit_moe_host(cases: list[TrainingCase]) -> float:
    """The host time per MoE layer and micro-batch at which ``cases``' median predicted /
    measured throughput is 1 (bisection to 1 us; throughput falls as it grows)."""
    lo, hi = 0.0, 0.02
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        if statistics.median(_host_errors(cases, mid)) > 0:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 6)


def main_host() -> None:
    runs = eager_moe_runs()
    host = fit_moe_host(runs)
    before = _host_errors(runs, 0.0)
    after = _host_errors(runs, host)
    print(
        f"MoE host time without CUDA graphs: {host * 1e3:.3f} ms per layer and micro-batch,"
        f" fitted on {len(runs)} runs (in use: {MOE_EAGER_HOST_S * 1e3:.3f} ms); median error"
        f" {statistics.median(before):+.1%} -> {statistics.median(after):+.1%}, median APE"
        f" {statistics.median(map(abs, before)):.1%} -> {statistics.median(map(abs, after)):.1%}"
    )


if __name__ == "__main__":
    main()
    main_host()
