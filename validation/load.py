"""Serving latency under load: the steady-state model (``estimator.serving.load``) against
published TTFT / TPOT / throughput measurements (``validation/data/serving_load_measured.json``).

Each record becomes one ``LoadCase`` or one ``Skip`` with its reason, listing what had to be
assumed; ``rows()`` evaluates the cases: error = predicted / measured - 1 for each statistic
the record publishes (TTFT and TPOT as the mean, or as the median where only the median is
published, compared with the model's mean and p50; ITL where no TPOT is given; output
tokens/s of the replica). Fixed-length records are compared as they are; ShareGPT records drawn
with the bench clients' default sampling through the ``sharegpt`` length preset
(``estimator.inputs.lengths``), MLPerf Inference Server / Interactive runs through their task's
``mlperf-*`` preset; other datasets are skipped. A record of several identical replicas is one
replica at its share of the rate. Where the model predicts an overloaded replica (capacity
below the offered rate: TTFT without bound) its TTFT is left out of the errors and listed by
``overloaded``. MLPerf Server and Interactive runs also give the rate the submitter served within
the scenario's latency constraints (TTFT p99 and TPOT p99): ``slo_rate`` compares it with the
highest rate whose predicted steady state meets the same constraints
(``serving.estimate.rate_within_targets``, TPOT's mean against its p99 limit): the SLO planning
question itself. Nothing is fitted on these records.

``python -m validation.load`` prints the comparison.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    get_accelerator,
    get_model,
    get_precision,
)
from estimator.inputs.lengths import LENGTH_PRESETS
from estimator.inputs.model import ModelSpec
from estimator.serving.estimate import estimate_load, rate_within_targets
from estimator.serving.load import LoadPoint, engine_preset
from validation.records import Refused, Skip

__all__ = [
    "OVERLOADED",
    "LoadCase",
    "LoadRow",
    "Skip",
    "cases",
    "lengths_of",
    "main",
    "overloaded",
    "rows",
    "summary",
]

DATA = Path(__file__).parent / "data" / "serving_load_measured.json"

_MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8": "nemotron-3-nano-30b-a3b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "meta-llama/Llama-2-70b-chat-hf": "llama-2-70b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",  # DeepSeek-V3's architecture, post-trained
}
# MLPerf task texts (the start of length_distribution) -> their length presets
_MLPERF = {
    "mlperf llama2-70b task": "mlperf-llama2-70b",
    "mlperf llama3.1-8b task": "mlperf-llama3.1-8b",
    "mlperf llama3.1-405b task": "mlperf-llama3.1-405b",
    "mlperf mixtral-8x7b task": "mlperf-mixtral-8x7b",
    "mlperf deepseek-r1 task": "mlperf-deepseek-r1",
}
OVERLOADED = "predicted overloaded where the run served its rate"
_ENGINES = {"nim": "trtllm", "vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}


@dataclass(frozen=True)
class LoadCase:
    id: str
    group: str
    model: str
    accelerator: str
    tp: int
    precision: str
    engine: str
    input_len: int
    output_len: int
    lengths: str  # "fixed", or a preset of estimator.inputs.lengths
    concurrency: int | None
    request_rate: float | None  # of one replica
    num_prompts: int | None  # a closed loop's finite run (serving.run), as the record ran it
    measured: dict[str, Any]
    source: str
    assumptions: tuple[str, ...]
    instances: int = 1  # identical replicas sharing the record's rate and throughput
    dp: int = 1  # attention data-parallel groups (of tp GPUs each)
    ep: int = 1
    constraints: tuple[float, float] | None = None  # MLPerf's TTFT and TPOT p99 limits, s
    token_budget: int | None = None  # the engine options the run states (else the preset's)
    max_seqs: int | None = None
    kv_fraction: float | None = None  # the KV cache's memory fraction, the engine's meaning
    kv_block: int | None = None  # tokens a KV block

    @property
    def gpus(self) -> int:
        """One replica's GPUs."""
        return self.tp * self.dp


@dataclass(frozen=True)
class LoadRow:
    id: str
    group: str
    engine: str
    metric: str  # ttft, tpot, itl, throughput, slo_rate (requests/s within MLPerf's limits)
    statistic: str  # mean, median, unspecified
    regime: str
    measured: float
    predicted: float
    # What the accuracy lookup (estimator.accuracy) matches a plan on, and where the record is from
    accelerator: str = ""
    family: str = ""
    model: str = ""
    model_class: str = ""
    gpus: int = 0
    precision: str = ""
    source: str = ""

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def lengths_of(r: dict[str, Any]) -> tuple[str, list[str]]:
    """A record's workload lengths: ``fixed`` where it gives input_len and output_len, the
    ``sharegpt`` preset where it is ShareGPT drawn by ``sglang.bench_serving`` or ``vllm bench
    serve`` with their default sampling (the dataset's own answer lengths, no override), an
    MLPerf task's preset where the task's own model runs it, else refused."""
    if isinstance(r.get("input_len"), int) and isinstance(r.get("output_len"), int):
        return "fixed", []
    text = str(r.get("length_distribution") or "")
    low = text.lower()
    if low.startswith("sharegpt") and "--dataset-name sharegpt" in low:
        if "output-len" in low or "output_len" in low:
            raise Refused("ShareGPT with its output lengths overridden: no preset")
        return "sharegpt", [
            "ShareGPT lengths: the sharegpt preset (means from vLLM PR #18566, bench sampling"
            " rules; the spread is the maximum-entropy shape, assumed)"
        ]
    if low.startswith("mlperf"):
        if "llama-3.1-70b" in low:
            raise Refused(
                "MLPerf llama2-70b prompts served to Llama-3.1-70B (open division): no published"
                " prompt lengths in its tokenizer"
            )
        name = next((v for k, v in _MLPERF.items() if low.startswith(k)), None)
        if name is None:
            raise Refused("length distribution (MLPerf task dataset) has no preset: not modelled")
        return name, [
            f"MLPerf task lengths: the {name} preset (prompt mean of the official dataset,"
            " reference output mean; the spread is the maximum-entropy shape, assumed)"
        ]
    raise Refused("length distribution has no preset: not modelled")


def _engine_version(r: dict[str, Any]) -> None:
    """vLLM before 0.8 ran the V0 scheduler (prefill-first, no chunking under 32K context;
    here with multi-step scheduling): the vllm presets are V1's. Every preset runs its decode
    steps as captured CUDA graphs (the engines' defaults); a run with them disabled is bound by
    the host launching each kernel eagerly, which the step times do not model."""
    options = r.get("engine_options") or {}
    steps = options.get("num_scheduler_steps")
    if isinstance(steps, int) and steps > 1:
        raise Refused(
            f"vLLM V0 with multi-step scheduling (--num-scheduler-steps {steps}): no preset"
        )
    if options.get("cuda_graphs") is False or "--disable-cuda-graph" in str(options.get("launch")):
        raise Refused("CUDA graphs disabled (--disable-cuda-graph): eager launches not modelled")
    version = str(r.get("engine_version") or "")
    if "deepseek-v3" in str(r.get("model")).lower() and version.startswith("0.4.1"):
        raise Refused(
            "SGLang 0.4.1 ran DeepSeek-V3 before its tuning (sgl-project/sglang#2591, opened"
            " 2024-12-26, lists CUDA graphs, FP8 GEMM and H200 fused-MoE tuning for it as to"
            " do): the presets are the tuned engines'"
        )


def _accelerator(gpu: str) -> tuple[str, list[str]]:
    g = gpu.lower()
    for name, acc in _MLPERF_GPUS.items():
        if name in g:
            return acc, []
    if "gh200" in g or ("h200" in g and "nvl" in g):
        raise Refused(f"accelerator {gpu} not in the catalog")
    if "a100" in g and "80" in g:
        return "a100-sxm-80gb", ["A100 80GB form factor not stated: SXM assumed"]
    if "b200" in g:
        return "b200", []
    if "h200" in g:
        return "h200-sxm-141gb", ["H200 form factor not stated: SXM 141 GB assumed"]
    if "h100" in g and "80" in g:
        return "h100-sxm-80gb", ["H100 80GB form factor not stated: SXM assumed"]
    raise Refused(f"accelerator {gpu} not mapped")


_MLPERF_GPUS = {  # names as MLPerf systems state them -> catalog ids
    "h100-nvl-94gb": "h100-nvl-94gb",
    "l40s": "l40s",
    "rtx pro 6000 blackwell server": "rtx-pro-6000-bse",
    "gb200": "gb200",
    "gb300": "gb300",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
}


def _precision(label: str) -> tuple[str, list[str]]:
    low = label.lower()
    if low.startswith("config precision 'fp4'") and "kv cache fp8" in low:
        return "nvfp4-serving", ["NVFP4 weights and GEMMs, FP8 KV cache (nvfp4-serving)"]
    if "fp8" in low:
        return "fp8-serving", ["FP8 weights and FP8 KV cache (the fp8-serving preset)"]
    if low.startswith(("bf16 (no quantization", "bf16 weights (no quantization")):
        return "bf16", ["BF16 checkpoint served as is (the bf16 preset)"]
    raise Refused(f"precision {label!r} is ambiguous or has no serving preset")


def _num_prompts(load: dict[str, Any]) -> int | None:
    """The requests a closed-loop record sent (``--num-prompts``): a number, or the Vultr
    cookbook's "50 at c=1, 400 at c>1"; None for an open loop or where it is not stated (the
    steady state then stands for the run)."""
    concurrency, stated = load.get("concurrency"), load.get("num_prompts")
    if concurrency is None or stated is None:
        return None
    if isinstance(stated, int):
        return stated
    found = re.fullmatch(r"(\d+) at c=1, (\d+) at c>1\b.*", str(stated))
    if found is None:
        raise Refused(f"num_prompts {stated!r} not read")
    return int(found[1] if concurrency == 1 else found[2])


def _case(r: dict[str, Any]) -> LoadCase:
    lengths, notes = lengths_of(r)
    model = _MODELS.get(str(r["model"]))
    if model is None:
        raise Refused(f"model {r['model']} not in the catalog")
    engine_label = str(r.get("engine") or "").lower()
    engine_name = next((k for k in _ENGINES if k in engine_label), "")
    engine = _ENGINES.get(engine_name)
    if engine is None:
        raise Refused(f"engine {r.get('engine')} has no scheduler preset")
    _engine_version(r)
    _layout_supported(r, engine_label)
    num_gpus, tp, instances = int(r.get("num_gpus") or 0), r.get("tp"), r.get("instances") or 1
    if not isinstance(tp, int) or tp * instances != num_gpus:
        raise Refused(f"{num_gpus} GPUs as TP {tp}: only one tensor-parallel replica is modelled")
    if tp > 8:
        raise Refused("multi-node replica: inter-node TP not modelled by the load model")
    acc, more = _accelerator(str(r["gpu"]))
    notes += more
    precision, more = _precision(str(r["precision"]))
    notes += more
    if engine_name == "nim":
        notes.append("NIM for Llama runs a TensorRT-LLM engine: the trtllm preset")
    if r["model"] == "deepseek-ai/DeepSeek-R1":
        notes.append("DeepSeek-R1 has DeepSeek-V3's architecture: the deepseek-v3 model")
    dp, ep = 1, int(r.get("ep") or 1)
    if r.get("dp_attention"):  # the engines' tp is the replica's GPUs: attention DP over them
        dp, tp = tp, 1
        notes.append(
            f"attention data parallel: {dp} groups of one GPU, the experts over EP {ep}"
            " (the record's TP is the replica's GPU count, as the engines count it)"
        )
    load = r["load"]
    prompts = _num_prompts(load)
    if prompts is not None:
        notes.append(f"a finite run of {prompts} requests, as the record ran it (serving.run)")
    rate = load.get("request_rate")
    if instances > 1:
        notes.append(
            f"{instances} replicas of {num_gpus // instances} GPUs: one at 1/{instances} of"
            " the rate, its output"
            f" tokens/s times {instances} (queries assumed spread evenly over the replicas)"
        )
        rate = rate / instances if rate is not None else None
    budget, cap = _limits(r.get("engine_options") or {})
    kv_fraction, kv_block = _kv_options(r.get("engine_options") or {}, engine or "")
    stated = [f"{what} {n:,}" for what, n in (("token budget", budget), ("sequence cap", cap)) if n]
    if kv_fraction is not None:
        stated.append(f"KV memory fraction {kv_fraction:g}")
    if kv_block is not None:
        stated.append(f"{kv_block} tokens a KV block")
    if stated:
        notes.append(f"the run's engine options: {', '.join(stated)} (else the preset's)")
    if lengths in _MLPERF.values():
        notes.append(f"LoadGen {load.get('scenario')} scenario: Poisson arrivals at target_qps")
    return LoadCase(
        id=str(r["id"]),
        group=str(r["group"]),
        model=model,
        accelerator=acc,
        tp=tp,
        precision=precision,
        engine=engine,
        input_len=int(r["input_len"]) if lengths == "fixed" else LENGTH_PRESETS[lengths].input_len,
        output_len=int(r["output_len"])
        if lengths == "fixed"
        else LENGTH_PRESETS[lengths].output_len,
        lengths=lengths,
        concurrency=load.get("concurrency"),
        request_rate=rate,
        num_prompts=prompts,
        dp=dp,
        ep=ep,
        constraints=_constraints(load),
        token_budget=budget,
        max_seqs=cap,
        kv_fraction=kv_fraction,
        kv_block=kv_block,
        measured=r["measured"],
        source=str(r["source"]),
        assumptions=tuple(notes),
        instances=instances,
    )


def _load_at(case: LoadCase, setup: InferenceSetup, rate: float | None) -> LoadPoint:
    """The case's replica in steady state at ``rate`` requests/s (None: its closed loop)."""
    return estimate_load(
        get_model(case.model),
        get_accelerator(case.accelerator),
        Parallelism(tp=case.tp, dp=case.dp, ep=case.ep),
        setup,
        get_precision(case.precision),
        engine=engine_preset(
            case.engine,
            case.token_budget,
            case.max_seqs,
            kv_fraction=case.kv_fraction,
            kv_block_tokens=case.kv_block,
        ),
        request_rate=rate,
    )


# engine options that state a run's token budget per step and its sequence cap
_BUDGET_KEYS = ("max_num_tokens", "max_num_batched_tokens")
_CAP_KEYS = ("max_batch_size(gpu_batch_size)", "max_batch_size", "max_num_seqs")


def _limits(options: dict[str, Any]) -> tuple[int | None, int | None]:
    """(token budget, sequence cap) a record's engine options state (None: not stated)."""

    def first(keys: tuple[str, ...]) -> int | None:
        for key in keys:
            value = options.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    return first(_BUDGET_KEYS), first(_CAP_KEYS)


# each engine's own names for its KV cache's memory fraction and its tokens a block (another
# engine's name in a record, or a value given as words, is not read)
_KV_KEYS = {
    "vllm": ("gpu_memory_utilization", "block_size"),
    "sglang": ("mem_fraction_static", "page_size"),
    "trtllm": ("free_gpu_memory_fraction", "tokens_per_block"),
}


def _kv_options(options: dict[str, Any], engine: str) -> tuple[float | None, int | None]:
    """(KV memory fraction, tokens a KV block) a record's engine options state in its engine's
    own names (None: not stated)."""
    fraction_key, block_key = _KV_KEYS.get(engine, ("", ""))
    fraction, block = options.get(fraction_key), options.get(block_key)
    fraction_ok = isinstance(fraction, float) and 0 < fraction <= 1
    block_ok = isinstance(block, int) and not isinstance(block, bool) and block > 0
    return (fraction if fraction_ok else None), (block if block_ok else None)


def _constraints(load: dict[str, Any]) -> tuple[float, float] | None:
    """An MLPerf run's latency constraints (TTFT and TPOT p99, seconds), where it states both."""
    limits = load.get("latency_constraint_p99") or {}
    ttft, tpot = limits.get("ttft_ms"), limits.get("tpot_ms")
    if isinstance(ttft, int | float) and isinstance(tpot, int | float):
        return ttft / 1e3, tpot / 1e3
    return None


def _layout_supported(r: dict[str, Any], engine_label: str) -> None:
    """Refuses what the load model does not take: disaggregated serving, pipeline-parallel
    replicas."""
    if "dynamo" in engine_label:
        raise Refused("disaggregated serving behind NVIDIA Dynamo: not modelled")
    if (r.get("pp") or 1) != 1:
        raise Refused(f"pipeline-parallel replica (PP {r['pp']}): not modelled under load")


def cases() -> list[LoadCase | Skip]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    out: list[LoadCase | Skip] = []
    for r in data["records"]:
        try:
            out.append(_case(r))
        except Refused as why:
            out.append(Skip(str(r["id"]), str(r["group"]), str(why)))
    return out


def _stat(value: dict[str, Any] | None) -> tuple[str, float] | None:
    for key in ("mean", "median", "unspecified_stat"):
        if value and isinstance(value.get(key), int | float):
            return ("unspecified" if key == "unspecified_stat" else key), float(value[key])
    return None


def _median(value: dict[str, Any] | None) -> bool:
    """Whether a record states this latency as its median (compared with the model's p50)."""
    return (_stat(value) or ("", 0))[0] == "median"


def _row(
    case: LoadCase,
    model: ModelSpec,
    metric: str,
    statistic: str,
    regime: str,
    measured: float,
    predicted: float,
) -> LoadRow:
    """A compared metric of ``case``, with what the accuracy lookup matches a plan on."""
    return LoadRow(
        case.id,
        case.group,
        case.engine,
        metric,
        statistic,
        regime,
        measured,
        predicted,
        accelerator=case.accelerator,
        family=model.model_type,
        model=model.id,
        model_class=model.model_class,
        gpus=case.gpus,
        precision=case.precision,
        source=case.source,
    )


def rows() -> tuple[list[LoadRow], list[tuple[str, str]]]:
    out: list[LoadRow] = []
    skipped: list[tuple[str, str]] = []
    for case in cases():
        if isinstance(case, Skip):
            skipped.append((case.id, case.reason))
            continue
        setup = InferenceSetup(
            input_len=case.input_len,
            output_len=case.output_len,
            concurrency=int(case.concurrency or 1),
            lengths=LENGTH_PRESETS.get(case.lengths),
            num_prompts=case.num_prompts,
        )
        model = get_model(case.model)
        at = partial(_load_at, case, setup)
        try:
            point = at(case.request_rate)
            slo = None
            if case.constraints is not None and case.request_rate is not None:
                slo = rate_within_targets(at, *case.constraints)
        except SpecError as exc:
            skipped.append((case.id, f"estimator refuses it: {exc}"))
            continue
        m = case.measured
        ttft = point.ttft_p50_s if _median(m.get("ttft_ms")) else None
        predictions = {
            "ttft": (m.get("ttft_ms"), 1e3 * (ttft if ttft is not None else point.ttft_s)),
            "tpot": (
                m.get("tpot_ms") or m.get("itl_ms"),
                1e3 * (point.tpot_p50_s if _median(m.get("tpot_ms")) else point.tpot_s),
            ),
        }
        for metric, (published, predicted) in predictions.items():
            stat = _stat(published)
            if stat is None or predicted != predicted:
                continue
            if predicted == float("inf"):
                skipped.append((case.id, f"{metric}: {OVERLOADED}"))
                continue
            name = metric if metric != "tpot" or m.get("tpot_ms") else "itl"
            out.append(_row(case, model, name, stat[0], point.regime, stat[1], predicted))
        if slo is not None and case.request_rate is not None:
            out.append(_row(case, model, "slo_rate", "max", point.regime, case.request_rate, slo))
        tps = m.get("output_tokens_per_s")
        if isinstance(tps, int | float) and tps > 0:
            out.append(
                _row(case, model, "throughput", "mean", point.regime, float(tps),
                     point.output_tokens_per_s * case.instances)
            )  # fmt: skip
    return out, skipped


def overloaded(skipped: list[tuple[str, str]]) -> list[str]:
    """Records whose TTFT the model predicts unbounded (capacity below the offered rate) where
    the run served that rate: left out of the errors, listed here."""
    return sorted({i for i, why in skipped if why.endswith(OVERLOADED)})


def summary(found: list[LoadRow]) -> list[dict[str, Any]]:
    """Median and p90 APE and median signed error per metric, over all rows and per group."""
    out = []
    keys = sorted({(r.metric, "all") for r in found} | {(r.metric, r.group) for r in found})
    for metric, group in keys:
        errs = [r.error for r in found if r.metric == metric and group in ("all", r.group)]
        ape = sorted(abs(e) for e in errs)
        p90 = statistics.quantiles(ape, n=10)[-1] if len(ape) > 1 else ape[0]
        out.append(
            {
                "metric": metric,
                "group": group,
                "n": len(errs),
                "median_ape": statistics.median(ape),
                "p90_ape": p90,
                "median_signed": statistics.median(errs),
            }
        )
    return out


def main() -> None:
    found, skipped = rows()
    for s in summary(found):
        print(
            f"{s['metric']:<10} {s['group']:<40} n={s['n']:<3} median APE {s['median_ape']:6.1%}"
            f"  p90 {s['p90_ape']:6.1%}  signed {s['median_signed']:+6.1%}"
        )
    reasons: dict[str, int] = {}
    for _, why in skipped:
        if not why.endswith(OVERLOADED):
            reasons[why] = reasons.get(why, 0) + 1
    print(f"skipped {sum(reasons.values())}:", reasons)
    over = overloaded(skipped)
    print(f"{OVERLOADED}: {len(over)} records", over)


if __name__ == "__main__":
    main()
