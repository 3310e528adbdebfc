"""How fast is one estimate? LLM Planner's estimator against llm-analysis 0.2.2.

Measures, in one run, and prints a plain-text table (no timed assertions; the targets are
reported, never enforced):

1. ``import estimator`` in a fresh interpreter: median wall time of ``python -c "import
   estimator"`` and of a bare ``python -c pass`` over ``IMPORT_RUNS`` subprocesses (the difference
   is what the import costs), and the import itself timed inside the interpreter. Measured with
   cached bytecode (a private ``PYTHONPYCACHEPREFIX``, warmed once: what an installed package
   sees) and without (``PYTHONDONTWRITEBYTECODE=1``: every module compiled from source).
   Target: <= 150 ms.
2. One training estimate in-process, from names to numbers: catalog lookups (cached, as a user's
   repeated calls hit them), the layout and setup objects, ``training_memory`` and
   ``training_flops``. Median and p90 per call over ``CALLS`` calls after ``WARMUP`` calls, timed
   one by one with ``time.perf_counter_ns``, on a realistic layout per model. Target: median
   <= 50 us.
3. The same estimate from llm-analysis 0.2.2 (``LLMAnalysis(...).training(...)``, logging at
   ERROR), on the closest model config it has: its bundled Llama-2-7B, otherwise a ModelConfig
   built by hand from the same shapes (it bundles no Llama 3, Mixtral or DeepSeek). Same layout,
   micro-batch 1 and global batch, selective recompute, ZeRO-1; no ``total_num_tokens``, so it
   does no more than ours (no training-time estimate). Ours is timed first, before llm-analysis
   is imported; its optional ``transformers`` import is blocked (see ``load_baseline``).
4. The ratios llm-analysis / ours and ours / target, and both tools' Llama-2-7B parameter counts.

5. With ``--baseline REF`` (or ``BENCH_BASELINE=REF``): the same cases' whole estimate and
   ``training_memory`` alone on this tree and on revision ``REF`` in the same run, alternated,
   and the ratios ours / baseline (``benchmarks.baseline``); ``--baseline-only`` prints only
   that.

Run: ``make bench`` or ``.venv/bin/python -m benchmarks.bench_estimate``. Without llm-analysis
installed the script still prints our own figures and says the baseline is missing. Per-call
times are wall-clock: run it on an idle machine, other load shows up directly in the medians.
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.baseline import baseline_arg, compare, report
from benchmarks.service import self_import_ms
from estimator import (
    Parallelism,
    TrainingSetup,
    count_params,
    get_accelerator,
    get_model,
    get_precision,
    training_flops,
    training_memory,
)
from estimator.counts.flops import Recompute

ROOT = Path(__file__).resolve().parents[1]

IMPORT_RUNS = 15
CALLS = 2000
WARMUP = 200
BLOCK = 50
# llm-analysis's time per estimate on the machine the targets were set on (issue 2: "about 450 us
# per call at ERROR logging measured here"). Our time scaled by REFERENCE_BASELINE_US / its time
# measured interleaved in this run is our time at that machine's speed.
REFERENCE_BASELINE_US = 450.0
IMPORT_TARGET_MS = 150.0
ESTIMATE_TARGET_US = 50.0
SEQ_LEN = 4096
MICRO_BATCH = 1
RECOMPUTE: Recompute = "selective"
PRECISION = "bf16"
# Hugging Face's count for meta-llama/Llama-2-7b-hf (sum of its safetensors' tensor sizes).
HF_LLAMA2_7B_PARAMS = 6_738_415_616


@dataclass(frozen=True)
class Case:
    """One model on one layout, with the llm-analysis config that stands for it."""

    model: str
    accelerator: str
    layout: dict[str, Any]
    global_batch_size: int
    baseline_model: str  # a bundled llm-analysis config name, or a key of HAND_BUILT
    baseline_gpu: str

    def describe(self) -> str:
        lay = self.layout
        parts = [f"tp{lay['tp']}", f"pp{lay['pp']}", f"dp{lay['dp']}"]
        if lay.get("ep", 1) > 1:
            parts.append(f"ep{lay['ep']}")
        parts.append(f"z{lay.get('zero_stage', 0)}")
        return " ".join(parts) + f" gbs{self.global_batch_size}"


CASES: tuple[Case, ...] = (
    Case(
        "llama-2-7b",
        "a100-sxm-80gb",
        {"tp": 8, "pp": 1, "dp": 4, "sequence_parallel": True, "zero_stage": 1},
        32,
        "NousResearch_Llama-2-7b-hf",
        "a100-sxm-80gb",
    ),
    Case(
        "llama-3-70b",
        "h100-sxm-80gb",
        {"tp": 8, "pp": 4, "dp": 4, "sequence_parallel": True, "zero_stage": 1},
        64,
        "llama-3-70b",
        "h100-sxm-80gb",
    ),
    # tp must divide Mixtral's 8 KV heads; experts without TP (etp=1), one per EP rank.
    Case(
        "mixtral-8x7b",
        "h100-sxm-80gb",
        {"tp": 4, "pp": 4, "dp": 8, "ep": 8, "etp": 1, "sequence_parallel": True, "zero_stage": 1},
        256,
        "mixtral-8x7b",
        "h100-sxm-80gb",
    ),
    # 61 layers: pp must divide 61, so pp=1.
    Case(
        "deepseek-v3",
        "h100-sxm-80gb",
        {
            "tp": 8,
            "pp": 1,
            "dp": 64,
            "ep": 64,
            "etp": 1,
            "sequence_parallel": True,
            "zero_stage": 1,
        },
        1024,
        "deepseek-v3",
        "h100-sxm-80gb",
    ),
)

# llm-analysis ModelConfig fields for the models it does not bundle, from the same HF configs our
# catalog reads. Its model has no SwiGLU third matrix, no MLA, no shared or dense-first layers:
# the shapes match, the arithmetic per call is the same closed form whatever the numbers.
HAND_BUILT: dict[str, dict[str, Any]] = {
    "llama-3-70b": {
        "name": "hand-built llama-3-70b",
        "num_layers": 80,
        "n_head": 64,
        "hidden_dim": 8192,
        "vocab_size": 128256,
        "max_seq_len": 8192,
        "num_key_value_heads": 8,
        "ffn_embed_dim": 28672,
        "expansion_ratio": 3.5,
        "model_type": "llama",
    },
    "mixtral-8x7b": {
        "name": "hand-built mixtral-8x7b",
        "num_layers": 32,
        "n_head": 32,
        "hidden_dim": 4096,
        "vocab_size": 32000,
        "max_seq_len": 32768,
        "num_key_value_heads": 8,
        "ffn_embed_dim": 14336,
        "expansion_ratio": 3.5,
        "model_type": "mixtral",
        "moe_num_experts": 8,
        "moe_top_k": 2,
    },
    "deepseek-v3": {
        "name": "hand-built deepseek-v3",
        "num_layers": 61,
        "n_head": 128,
        "hidden_dim": 7168,
        "vocab_size": 129280,
        "max_seq_len": 163840,
        "num_key_value_heads": 128,
        "ffn_embed_dim": 2048,
        "expansion_ratio": 2048 / 7168,
        "model_type": "deepseek_v3",
        "moe_num_experts": 256,
        "moe_top_k": 8,
    },
}


@dataclass
class Timing:
    """Per-call nanoseconds of one case."""

    samples: list[int] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples) / 1e3

    @property
    def p90_us(self) -> float:
        return statistics.quantiles(self.samples, n=10)[-1] / 1e3

    def block_medians(self) -> list[float]:
        """The median of each block of ``BLOCK`` consecutive calls (samples are kept in order)."""
        s = self.samples
        return [statistics.median(s[i : i + BLOCK]) for i in range(0, len(s), BLOCK)]


def block_ratio(mine: Timing, theirs: Timing) -> float:
    """llm-analysis / ours, block by block: the median over adjacent block pairs of their block
    median over ours. The two blocks of a pair ran seconds apart, so the machine's speed drift
    (1.5x over minutes here) cancels within each pair; the ratio of the pooled medians does not
    cancel it when the slow spells fall unevenly."""
    pairs = zip(theirs.block_medians(), mine.block_medians(), strict=True)
    return statistics.median(t / o for t, o in pairs)


def time_calls(fn: Callable[[], object], calls: int = CALLS, warmup: int = WARMUP) -> Timing:
    return time_interleaved([fn], calls, warmup)[0]


def time_interleaved(
    fns: Sequence[Callable[[], object]], calls: int = CALLS, warmup: int = WARMUP
) -> list[Timing]:
    """Time each function ``calls`` times, alternating between them in blocks of ``BLOCK`` calls
    so that a slow or fast spell of the machine falls on all of them alike (clock speed here
    drifts by 1.5x over minutes; the ratio between tools measured this way stays put)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    clock = time.perf_counter_ns
    timings = [Timing() for _ in fns]
    for _ in range(calls // BLOCK):
        for fn, timing in zip(fns, timings, strict=True):
            samples = timing.samples
            for _ in range(BLOCK):
                start = clock()
                fn()
                samples.append(clock() - start)
    return timings


# --- 1. import time ---------------------------------------------------------------------------

IMPORT_IN_PROCESS = (
    "import time; t = time.perf_counter(); import estimator; print(time.perf_counter() - t)"
)


def _median_wall_ms(argv: Sequence[str], env: dict[str, str], runs: int) -> float:
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls) * 1e3


def _median_in_process_ms(env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_IN_PROCESS],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        times.append(float(out.strip().splitlines()[-1]))
    return statistics.median(times) * 1e3


def _top_self_imports(env: dict[str, str], count: int = 5) -> list[tuple[str, float]]:
    """Modules with the largest self import time, from one ``-X importtime`` run."""
    return self_import_ms(["-c", "import estimator"], env)[:count]


def measure_imports(runs: int = IMPORT_RUNS) -> list[str]:
    base_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-pyc-") as pyc:
        modes = {
            "cached .pyc": {**base_env, "PYTHONPYCACHEPREFIX": pyc},
            "no .pyc (compiled from source)": {**base_env, "PYTHONDONTWRITEBYTECODE": "1"},
        }
        top: list[tuple[str, float]] = []
        for mode, env in modes.items():
            # Warm the OS file cache (and, in the cached mode, write the bytecode) first.
            for _ in range(3):
                subprocess.run(
                    [sys.executable, "-c", "import estimator"], cwd=ROOT, env=env, check=True
                )
            bare = _median_wall_ms([sys.executable, "-c", "pass"], env, runs)
            full = _median_wall_ms([sys.executable, "-c", "import estimator"], env, runs)
            inside = _median_in_process_ms(env, runs)
            lines += [
                f"  [{mode}]",
                f"    python -c pass (wall)                  {bare:8.1f} ms",
                f"    python -c 'import estimator' (wall)    {full:8.1f} ms"
                f"   ({full / bare:.2f}x the bare interpreter)",
                f"    import overhead (wall difference)      {full - bare:8.1f} ms",
                f"    import estimator, timed in-process     {inside:8.1f} ms"
                f"   target <= {IMPORT_TARGET_MS:.0f} ms: {inside / IMPORT_TARGET_MS:.2f}"
                f" of target {'OK' if inside <= IMPORT_TARGET_MS else 'OVER'}",
            ]
            if mode == "cached .pyc":
                top = _top_self_imports(env)
        lines.append(
            "    largest self import times (cached .pyc, one -X importtime run): "
            + ", ".join(f"{name} {ms:.1f} ms" for name, ms in top)
        )
    return [f"1. import estimator, fresh interpreter, median of {runs} runs", *lines]


# --- 2. our estimate --------------------------------------------------------------------------


def our_estimate(case: Case) -> Callable[[], object]:
    def estimate() -> object:
        model = get_model(case.model)
        memory = training_memory(
            model,
            get_accelerator(case.accelerator),
            Parallelism(**case.layout),
            TrainingSetup(
                seq_len=SEQ_LEN,
                micro_batch_size=MICRO_BATCH,
                global_batch_size=case.global_batch_size,
                recompute=RECOMPUTE,
            ),
            get_precision(PRECISION),
        )
        flops = training_flops(model, SEQ_LEN, MICRO_BATCH, RECOMPUTE)
        return memory.total_bytes, flops.hardware

    return estimate


# --- 3. llm-analysis --------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """The llm-analysis names this benchmark uses, imported if the package is there."""

    analysis: Any  # LLMAnalysis
    recompute: Any  # ActivationRecomputation.SELECTIVE
    zero: Callable[[int], Any]  # DSZeRO
    model_config: Callable[..., Any]  # ModelConfig
    parallelism: Callable[..., Any]  # ParallelismConfig
    model_by_name: Callable[[str], Any]
    gpu_by_name: Callable[[str], Any]
    dtype_by_name: Callable[[str], Any]


def load_baseline() -> tuple[Baseline | None, str]:
    """llm-analysis, or None and why not.

    Its config module tries ``from transformers import AutoConfig`` at import time, only to fetch
    unknown models from the Hugging Face Hub, which this benchmark never does; that import would
    pull in torch and numpy (seconds, and a different process for our timings), so it is blocked:
    llm-analysis catches the ImportError and works from its bundled configs.
    """
    block = "transformers" not in sys.modules
    if block:
        sys.modules["transformers"] = None  # type: ignore[assignment]
    try:
        from importlib.metadata import version

        # Its logger is named "__name__" and formats every message eagerly; ERROR silences the
        # output but not the f-string work, which is part of what a call costs.
        from llm_analysis.logger import logger

        logger.setLevel(logging.ERROR)
        from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
        from llm_analysis.config import (
            ModelConfig,
            ParallelismConfig,
            get_dtype_config_by_name,
            get_gpu_config_by_name,
            get_model_config_by_name,
        )
    except ImportError as exc:
        return None, f"llm-analysis is not installed ({exc}); baseline skipped"
    finally:
        if block:
            del sys.modules["transformers"]
    baseline = Baseline(
        LLMAnalysis,
        ActivationRecomputation.SELECTIVE,
        DSZeRO,
        ModelConfig,
        ParallelismConfig,
        get_model_config_by_name,
        get_gpu_config_by_name,
        get_dtype_config_by_name,
    )
    return baseline, f"llm-analysis {version('llm-analysis')}"


def baseline_model_config(b: Baseline, name: str) -> Any:
    return b.model_config(**HAND_BUILT[name]) if name in HAND_BUILT else b.model_by_name(name)


def baseline_estimate(b: Baseline, case: Case) -> Callable[[], object]:
    # Its configs are module-level dicts: look-ups by name are as cheap as our cached ones.
    hand_built = (
        baseline_model_config(b, case.baseline_model) if case.baseline_model in HAND_BUILT else None
    )
    lay = case.layout
    sp = lay["tp"] if lay.get("sequence_parallel") else 1

    def estimate() -> object:
        model = hand_built if hand_built is not None else b.model_by_name(case.baseline_model)
        analysis = b.analysis(
            model,
            b.gpu_by_name(case.baseline_gpu),
            b.dtype_by_name("w16a16e16"),
            b.parallelism(
                tp_size=lay["tp"],
                pp_size=lay["pp"],
                dp_size=lay["dp"],
                ep_size=lay.get("ep", 1),
                sp_size=sp,
            ),
        )
        summary: dict[str, Any] = analysis.training(
            batch_size_per_gpu=MICRO_BATCH,
            global_batch_size=case.global_batch_size,
            seq_len=SEQ_LEN,
            activation_recomputation=b.recompute,
            ds_zero=b.zero(lay.get("zero_stage", 0)),
        )
        return summary["num_flops_total_per_micro_batch"]

    return estimate


def baseline_llama2_7b_params(b: Baseline) -> list[tuple[str, float]]:
    gpu = b.gpu_by_name("a100-sxm-80gb")
    bundled = b.model_by_name("NousResearch_Llama-2-7b-hf")
    # The same config with Hugging Face's intermediate_size (11008) instead of the bundled 4h.
    hf_width = b.model_config(
        **{
            **bundled.__dict__,
            "name": "llama-2-7b, ffn 11008",
            "ffn_embed_dim": 11008,
            "expansion_ratio": 11008 / 4096,
            "num_key_value_groups": None,
        }
    )
    return [
        (
            f"llm-analysis, bundled {bundled.name} (ffn_embed_dim={bundled.ffn_embed_dim})",
            float(b.analysis(bundled, gpu).total_num_params),
        ),
        (
            "llm-analysis, same config with ffn_embed_dim=11008 (HF intermediate_size)",
            float(b.analysis(hf_width, gpu).total_num_params),
        ),
    ]


# --- 5. against a baseline revision -----------------------------------------------------------

BASELINE_CALLS = 1000  # per request and round, after as many untimed
BASELINE_ROUNDS = 8


def case_request(case: Case) -> dict[str, Any]:
    """``case`` as the timing process builds it (``timing_worker``)."""
    return {
        "model": case.model,
        "accelerator": case.accelerator,
        "layout": case.layout,
        "global_batch_size": case.global_batch_size,
        "seq_len": SEQ_LEN,
        "micro_batch": MICRO_BATCH,
        "recompute": RECOMPUTE,
        "precision": PRECISION,
    }


def baseline_lines(ref: str) -> list[str]:
    """Every case's whole estimate and ``training_memory`` alone against revision ``ref``."""
    requests = []
    for case in CASES:
        for op, what in (("estimate", "estimate"), ("memory", "training_memory")):
            request = {"op": op, "case": case_request(case), "calls": BASELINE_CALLS}
            requests.append((f"{case.model} {what}", request))
    rows = compare(ref, requests, BASELINE_ROUNDS)
    return [
        f"5. against {ref}: median us per call over {BASELINE_ROUNDS} alternated rounds of"
        f" {BASELINE_CALLS} calls",
        *report(ref, rows),
    ]


# --- report -----------------------------------------------------------------------------------

# What llm-analysis runs for each of our models: its bundled config or one built by hand.
BASELINE_NAMES = {
    case.model: (
        HAND_BUILT[case.baseline_model]["name"]
        if case.baseline_model in HAND_BUILT
        else case.baseline_model
    )
    for case in CASES
}


def main() -> None:
    ref = baseline_arg(sys.argv[1:])
    if "--baseline-only" in sys.argv[1:]:
        if ref is None:
            raise SystemExit("--baseline-only needs --baseline REF (or BENCH_BASELINE)")
        print("\n".join(baseline_lines(ref)))
        return
    print(
        f"LLM Planner estimate benchmark: Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}"
    )
    print()
    for line in measure_imports():
        print(line)
    print()

    # Ours alone first, before llm-analysis is imported, so nothing it loads shares our process
    # state; then both interleaved, which is what the ratios use.
    ours: dict[str, Timing] = {}
    paired: dict[str, tuple[Timing, Timing]] = {}
    failures: list[str] = []
    for case in CASES:
        try:
            ours[case.model] = time_calls(our_estimate(case))
        except Exception as exc:  # report and go on: the table is the deliverable
            failures.append(f"ours, {case.model}: {type(exc).__name__}: {exc}")
    baseline, baseline_note = load_baseline()
    if baseline is not None:
        for case in CASES:
            if case.model not in ours:
                continue
            try:
                mine, theirs = time_interleaved(
                    [our_estimate(case), baseline_estimate(baseline, case)]
                )
                paired[case.model] = (mine, theirs)
            except Exception as exc:
                failures.append(f"llm-analysis, {case.model}: {type(exc).__name__}: {exc}")

    print(
        f"2-3. one training estimate (memory + FLOPs), seq {SEQ_LEN}, micro-batch "
        f"{MICRO_BATCH}, {RECOMPUTE} recompute, {PRECISION}; us per call, {CALLS} calls "
        f"after {WARMUP} warm-up"
    )
    print(f"  baseline: {baseline_note}")
    print(
        "  'alone': ours before llm-analysis is loaded; 'paired': ours and llm-analysis timed in"
        f" alternating blocks of {BLOCK} calls; 'llm-a/ours': the median over adjacent block"
        " pairs of llm-analysis's block median / ours; 'at ref': ours x"
        f" {REFERENCE_BASELINE_US:.0f} us / that ratio, our time on a machine where llm-analysis"
        f" takes the issue's {REFERENCE_BASELINE_US:.0f} us"
    )
    header = (
        f"  {'model':<13} {'layout':<28} {'alone':>7} {'paired':>7} {'p90':>7}"
        f" {'llm-a':>7} {'p90':>7} {'llm-a/ours':>10} {'at ref':>7}  llm-analysis config"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    rows = [
        (case.model, case.describe(), ours.get(case.model), paired.get(case.model))
        for case in CASES
    ]
    pooled_alone = Timing([x for tm in ours.values() for x in tm.samples])
    pooled_pair = (
        Timing([x for mine, _ in paired.values() for x in mine.samples]),
        Timing([x for _, theirs in paired.values() for x in theirs.samples]),
    )
    rows.append(("overall", "(all calls pooled)", pooled_alone, pooled_pair if paired else None))
    at_ref: dict[str, float] = {}
    for model, layout, alone, pair in rows:
        cells = f"{alone.median_us:7.1f}" if alone and alone.samples else f"{'error':>7}"
        if pair:
            mine, theirs = pair
            ratio = block_ratio(mine, theirs)
            at_ref[model] = REFERENCE_BASELINE_US / ratio
            cells += (
                f" {mine.median_us:7.1f} {mine.p90_us:7.1f} {theirs.median_us:7.1f}"
                f" {theirs.p90_us:7.1f} {ratio:9.1f}x {at_ref[model]:7.1f}"
            )
        else:
            cells += f" {'-':>7} {'':>7} {'-':>7} {'':>7} {'-':>10} {'-':>7}"
        name = ""
        if baseline and model in BASELINE_NAMES:
            name = BASELINE_NAMES[model]
        print(f"  {model:<13} {layout:<28} {cells}  {name}")
    if "overall" in at_ref:
        worst = max(v for k, v in at_ref.items() if k != "overall")
        verdict = "OK" if at_ref["overall"] <= ESTIMATE_TARGET_US else "OVER"
        print(
            f"  target median <= {ESTIMATE_TARGET_US:.0f} us at the reference speed: pooled "
            f"{at_ref['overall']:.1f} us ({at_ref['overall'] / ESTIMATE_TARGET_US:.2f} of target, "
            f"{verdict}); worst model {worst:.1f} us; raw pooled median here "
            f"{pooled_pair[0].median_us:.1f} us (ratio of the pooled medians "
            f"{pooled_pair[1].median_us / pooled_pair[0].median_us:.1f}x)"
        )
    elif pooled_alone.samples:
        print(
            f"  target median <= {ESTIMATE_TARGET_US:.0f} us: raw pooled median here "
            f"{pooled_alone.median_us:.1f} us (no baseline to scale to the reference speed)"
        )
    print()

    print("4. Llama-2-7B total parameters")
    ours_params = float(count_params(get_model("llama-2-7b")).total)
    rows = [("LLM Planner, count_params(get_model('llama-2-7b')).total", ours_params)]
    if baseline is not None:
        try:
            rows += baseline_llama2_7b_params(baseline)
        except Exception as exc:
            failures.append(f"llm-analysis parameter count: {type(exc).__name__}: {exc}")
    rows.append(("Hugging Face meta-llama/Llama-2-7b-hf (reference)", float(HF_LLAMA2_7B_PARAMS)))
    for label, n in rows:
        print(
            f"  {label:<76} {n:>15,.0f}  {n / 1e9:6.3f} B"
            f"  {(n - HF_LLAMA2_7B_PARAMS) / HF_LLAMA2_7B_PARAMS:+7.1%}"
        )
    if baseline is None:
        print(f"  ({baseline_note})")

    if ref is not None:
        print()
        print("\n".join(baseline_lines(ref)))

    if failures:
        print()
        print("errors:")
        for failure in failures:
            print(f"  {failure}")


if __name__ == "__main__":
    main()
