"""The timing side of a same-run comparison (``benchmarks.baseline``): run as a script with
``PYTHONPATH`` on one tree (this one or a baseline revision's worktree), it times what the
parent asks, one JSON line a request on stdin, one JSON line a reply on stdout.

It imports only names every compared revision has (``estimator``'s top-level functions,
``estimator.sweep.training``), and builds each case from plain data, so the same script times
any tree. Requests:

- ``{"op": "estimate", "case": {...}, "calls": n}``: the benchmark's whole estimate (catalog
  look-ups, the specs, ``training_memory``, ``training_flops``, the total), ``n`` calls;
- ``{"op": "memory", "case": {...}, "calls": n}``: ``training_memory`` alone on prebuilt specs;
- ``{"op": "sweep", "sweep": {...}, "runs": n}``: ``sweep_training`` of a model and workload.

Each reply is the median in nanoseconds per call (per run for a sweep), timed call by call
with ``time.perf_counter_ns`` after one warm-up round of the same size.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def _specs(case: dict[str, Any]) -> tuple[Any, ...]:
    """``training_memory``'s arguments for ``case``, from its names and sizes."""
    from estimator import Parallelism, TrainingSetup, get_accelerator, get_model, get_precision

    setup = TrainingSetup(
        seq_len=case["seq_len"],
        micro_batch_size=case["micro_batch"],
        global_batch_size=case["global_batch_size"],
        recompute=case["recompute"],
    )
    model, accelerator = get_model(case["model"]), get_accelerator(case["accelerator"])
    parallel, precision = Parallelism(**case["layout"]), get_precision(case["precision"])
    return model, accelerator, parallel, setup, precision


def _estimate(case: dict[str, Any]) -> Callable[[], object]:
    """The benchmark's estimate of ``case`` (``bench_estimate.our_estimate``), from names: the
    specs are built on every call."""
    from estimator import training_flops, training_memory

    def estimate() -> object:
        model, accelerator, parallel, setup, precision = _specs(case)
        memory = training_memory(model, accelerator, parallel, setup, precision)
        flops = training_flops(model, case["seq_len"], case["micro_batch"], case["recompute"])
        return memory.total_bytes, flops.hardware

    return estimate


def _memory(case: dict[str, Any]) -> Callable[[], object]:
    """``training_memory`` of ``case`` alone, its specs built once."""
    from estimator import training_memory

    args = _specs(case)
    return lambda: training_memory(*args)


def _sweep(spec: dict[str, Any]) -> Callable[[], object]:
    """``sweep_training`` of ``spec``'s model over the default search space."""
    from estimator import get_model
    from estimator.sweep.training import TrainingWorkload, sweep_training

    model = get_model(spec["model"])
    workload = TrainingWorkload(**spec["workload"])
    return lambda: sweep_training(model, workload)


def median_ns(fn: Callable[[], object], calls: int) -> float:
    """The median of ``calls`` timed calls of ``fn``, after ``calls`` untimed ones."""
    for _ in range(calls):
        fn()
    clock = time.perf_counter_ns
    samples = []
    for _ in range(calls):
        start = clock()
        fn()
        samples.append(clock() - start)
    return float(statistics.median(samples))


def _reply(request: dict[str, Any], built: dict[str, Callable[[], object]]) -> dict[str, Any]:
    """Time one request; the functions it names are built once and kept in ``built``."""
    op = request["op"]
    key = json.dumps([op, request.get("case") or request.get("sweep")], sort_keys=True)
    if key not in built:
        make = {"estimate": _estimate, "memory": _memory, "sweep": _sweep}[op]
        built[key] = make(request.get("case") or request["sweep"])
    count = request.get("calls") or request["runs"]
    return {"median_ns": median_ns(built[key], count)}


def main() -> None:
    built: dict[str, Callable[[], object]] = {}
    for line in sys.stdin:
        print(json.dumps(_reply(json.loads(line), built)), flush=True)


if __name__ == "__main__":
    main()
