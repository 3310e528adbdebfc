"""How fast is a sweep? Layouts per second end to end, against one estimate at a time and
against llm-analysis 0.2.2 evaluating the same layouts one by one.

Prints, in one run (no timed assertions; targets are reported, never enforced):

1. The default training sweep of Llama-3-70B (``TrainingSearch()``: 10 accelerators, 8 GPU
   counts, TP, PP, ZeRO, recompute and micro-batch axes) at sequence 4096 and global batch 1024:
   median wall time over ``RUNS`` runs, layouts enumerated and evaluated, and layouts per second
   (enumerated / time; every enumerated layout is either refused by a rule or evaluated for
   memory, time and cost). Targets: >= 200,000 layouts/s, full sweep < 1 s.
2. A single ``estimate_training`` (memory + time + cost) on a sample of the same layouts, median
   per call: what a loop over layouts would cost per layout.
3. llm-analysis's ``training(...)`` on the same sampled layouts (its closest model config,
   ``total_num_tokens`` set so that it also estimates time), median per call, timed interleaved
   with (2) so the machine's clock drift hits both alike.
4. Ratios: sweep per layout vs single estimate vs llm-analysis.
5. With ``--baseline REF`` (or ``BENCH_BASELINE=REF``): the same default sweep on this tree and
   on revision ``REF`` in the same run, alternated, and the ratio ours / baseline
   (``benchmarks.baseline``); ``--baseline-only`` prints only that.

Run: ``make bench`` or ``.venv/bin/python -m benchmarks.bench_sweep``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.baseline import baseline_arg, compare, report
from benchmarks.bench_estimate import (
    baseline_model_config,
    load_baseline,
    time_interleaved,
)
from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision
from estimator.sweep.training import TrainingWorkload, sweep_training
from estimator.timing.training import estimate_training

ROOT = Path(__file__).resolve().parents[1]

RUNS = 5
SAMPLE = 40
CALLS = 100  # per layout and tool, in blocks of 50
MODEL = "llama-3-70b"
WORKLOAD = TrainingWorkload(seq_len=4096, global_batch_size=1024, tokens=1e12)
LAYOUTS_TARGET = 200_000
SWEEP_TARGET_S = 1.0
# llm-analysis bundles these GPUs; sampled layouts are taken from them.
BASELINE_GPUS = ("a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm-80gb")


def sweep_timing() -> tuple[float, Any]:
    model = get_model(MODEL)
    sweep_training(model, WORKLOAD)  # warm caches (catalog, kernel profiles, model tables)
    times, result = [], None
    for _ in range(RUNS):
        start = time.perf_counter()
        result = sweep_training(model, WORKLOAD)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def single(row: dict[str, Any]) -> Callable[[], object]:
    model, acc = get_model(MODEL), get_accelerator(row["accelerator"])
    precision = get_precision(row["precision"])
    layout = Parallelism(
        tp=row["tp"],
        pp=row["pp"],
        dp=row["dp"],
        sequence_parallel=row["tp"] > 1,
        zero_stage=row["zero"],
    )
    setup = TrainingSetup(4096, row["micro_batch"], 1024, row["recompute"])

    def call() -> object:
        return estimate_training(
            model, acc, layout, setup, precision, tokens=1e12, price_usd_per_gpu_hour=3.0
        )

    return call


def baseline(b: Any, row: dict[str, Any]) -> Callable[[], object]:
    config = baseline_model_config(b, MODEL)
    recompute = {"none": 0, "selective": 1, "full": 2}[row["recompute"]]

    def call() -> object:
        analysis = b.analysis(
            config,
            b.gpu_by_name(row["accelerator"]),
            b.dtype_by_name("w16a16e16"),
            b.parallelism(
                tp_size=row["tp"],
                pp_size=row["pp"],
                dp_size=row["dp"],
                sp_size=row["tp"],
            ),
        )
        return analysis.training(
            batch_size_per_gpu=row["micro_batch"],
            global_batch_size=1024,
            seq_len=4096,
            total_num_tokens=1e12,
            activation_recomputation=type(b.recompute)(recompute),
            ds_zero=b.zero(row["zero"]),
        )

    return call


BASELINE_ROUNDS = 6  # alternated rounds of RUNS sweeps on each tree


def baseline_lines(ref: str) -> list[str]:
    """The default sweep against revision ``ref``, in the same run."""
    workload: dict[str, Any] = {"seq_len": WORKLOAD.seq_len, "tokens": WORKLOAD.tokens}
    workload["global_batch_size"] = WORKLOAD.global_batch_size
    request = {"op": "sweep", "sweep": {"model": MODEL, "workload": workload}, "runs": RUNS}
    rows = compare(ref, [(f"default {MODEL} sweep", request)], BASELINE_ROUNDS)
    return [
        f"  against {ref}: median ms per sweep over {BASELINE_ROUNDS} alternated rounds of {RUNS}",
        *report(ref, rows, "ms"),
    ]


def main() -> None:
    ref = baseline_arg(sys.argv[1:])
    if "--baseline-only" in sys.argv[1:]:
        if ref is None:
            raise SystemExit("--baseline-only needs --baseline REF (or BENCH_BASELINE)")
        print("\n".join(baseline_lines(ref)))
        return
    seconds, result = sweep_timing()
    per_layout_us = seconds / result.size * 1e6
    print(f"Sweep benchmark ({MODEL}, seq 4096, global batch 1024, default search space)")
    print(
        f"  default sweep: {result.size:,} layouts ({result.counts['evaluated']:,} evaluated, "
        f"{result.counts['feasible']:,} feasible) in {seconds * 1e3:.0f} ms (median of {RUNS})"
    )
    rate = result.size / seconds
    print(
        f"  evaluated layouts/s (memory + time + cost, rule-refused ones excluded): "
        f"{result.counts['evaluated'] / seconds:,.0f}"
    )
    print(
        f"  layouts/s end to end: {rate:,.0f}  (target >= {LAYOUTS_TARGET:,}: "
        f"{rate / LAYOUTS_TARGET:.2f}x); full sweep {seconds:.2f} s (target < {SWEEP_TARGET_S} s)"
    )
    rng = random.Random(0)
    pool = [
        i
        for i in range(len(result))
        if result.accelerators[int(result.columns["accelerator"][i])] in BASELINE_GPUS
    ]
    rows = [result.row(i) for i in rng.sample(pool, SAMPLE)]
    b, why = load_baseline()
    ours_us, theirs_us = [], []
    for row in rows:
        fns = [single(row)] + ([baseline(b, row)] if b is not None else [])
        timings = time_interleaved(fns, CALLS, 20)
        ours_us.append(timings[0].median_us)
        if b is not None:
            theirs_us.append(timings[1].median_us)
    one = statistics.median(ours_us)
    print(f"  single estimate_training (memory + time + cost): {one:.1f} us per layout (median)")
    print(
        f"  sweep per layout: {per_layout_us:.2f} us -> {one / per_layout_us:.0f}x faster than "
        "one estimate at a time"
    )
    if ref is not None:
        print("\n".join(baseline_lines(ref)))
    if b is None:
        print(f"  baseline: {why}")
        return
    them = statistics.median(theirs_us)
    print(f"  {why} training() on the same {SAMPLE} layouts: {them:.1f} us per layout (median)")
    print(
        f"  ratio llm-analysis / sweep per layout: {them / per_layout_us:.0f}x; "
        f"llm-analysis / single estimate: {them / one:.1f}x"
    )


if __name__ == "__main__":
    main()
