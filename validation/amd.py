"""Predicted vs measured on AMD Instinct: published training and serving runs on MI300X, MI325X
and MI355X (``validation/data/amd_measured.json``) against the planner's estimates.

Training records are MLPerf Training v5.0 / v5.1 closed submissions (Llama 2 70B LoRA, Llama 3.1
8B pre-training; AMD's NeMo / Megatron-LM implementation on ROCm and partners' copies of it):
each becomes a ``TrainingCase`` under the megatron-core stack profile and is estimated as
``report.case_estimate`` estimates every other training record. Serving records are MLPerf
Inference v4.1 / v5.1 closed Offline results (Llama 2 70B, Mixtral 8x7B, vLLM on ROCm, one
TP-1 engine per GPU): one replica is estimated as ``report.serving_rows`` estimates the
offline maximum-throughput records (the largest batch its KV cache and ``DEFAULT_MAX_BATCH``
allow), at the MLPerf task's length preset, and its output tokens/s is multiplied by the
replicas the system ran.

The report gives median and p90 APE per kind and per kind and accelerator, and for each kind
and accelerator generation with a factor in use (``estimator/timing/vendor.py``: CDNA 3, the
only one with 10 runs or more of each kind) its vendor constant: the time factor at which the
group's median predicted / measured throughput is 1, with the median error without it, with
it, and with it refitted leaving one source out (a source is one submitter's submission
round: the factor is refitted without it and applied to it). The rows carry the factor in use,
so the fit is the residual on top of it times that factor: the fresh fit of the records as
they are, which a test checks equals the constant in use to the third decimal. Training rows
are re-estimated at each trial factor (exposed communication is not scaled); serving rows are
divided by it (every step part of a plan without load carries it).

``python -m validation.amd`` prints the comparison.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimator import (
    InferenceSetup,
    Parallelism,
    SpecError,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    model_entry,
    model_from_config,
)
from estimator.finetune import FineTune
from estimator.inputs.lengths import LENGTH_PRESETS
from estimator.inputs.model import ModelSpec
from estimator.serving.estimate import DEFAULT_MAX_BATCH, estimate_inference
from estimator.timing.vendor import SERVING_STEP_SCALE, TRAINING_COMPUTE_SCALE
from validation.records import Refused, Skip, TrainingCase, layout_of
from validation.report import Row, case_estimate, summarize

__all__ = [
    "DATA",
    "KINDS",
    "VendorConstant",
    "build",
    "fitted_groups",
    "main",
    "records",
    "render",
    "rows",
    "serving_row",
    "source_of",
    "to_json",
    "training_case",
    "vendor_constant",
]

DATA = Path(__file__).resolve().parent / "data" / "amd_measured.json"
KINDS = ("training", "serving")

_MODELS = {
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Llama-2-70b-chat-hf": "llama-2-70b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
}
# The MLPerf Inference task a record's length_distribution starts with -> its length preset
# (estimator.inputs.lengths: the official dataset's prompt mean, the reference output mean)
_TASK_LENGTHS = {
    "mlperf llama2-70b task": "mlperf-llama2-70b",
    "mlperf mixtral-8x7b task": "mlperf-mixtral-8x7b",
}
# NeMo's LoRA target "attention" puts adapters on the fused attention_qkv and attention_dense
# (megatron_gpt_peft_tuning_config.yaml of the submissions): q/k/v and the output projection.
_NEMO_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
# Transformer Engine FP8 with fp8_params (the submissions' FP8=True sets NeMo's fp8_params;
# the 8B config sets FP8_PARAMS=1): FP8 GEMMs over FP8 copies of the weights. The planner
# refuses LoRA over FP8-stored weights, so the LoRA runs are timed under fp8 (the frozen base
# in bf16, quantized for each GEMM: the same FP8 GEMMs, more weight memory).
_FP8_TRAINING = "fp8-params"
_FP8_LORA = "fp8"
_FP8_SERVING = "fp8-serving"


def records() -> list[dict[str, Any]]:
    """The records of ``amd_measured.json``, in file order."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    return list(data["records"])


def source_of(r: Mapping[str, Any]) -> str:
    """The source a record belongs to for leave-one-source-out: the submitter's submission in
    one round (its group, e.g. ``mlperf_training_v5.1_closed``, and the submitter's
    directory, the path's first folder after ``closed/`` or the repository root)."""
    path = str(r["source"]).split(":", 1)[1]
    parts = path.split("/")
    org = parts[1] if parts[0] in ("closed", "open") else parts[0]
    return f"{r['group']} / {org}"


def _training_model(r: Mapping[str, Any]) -> tuple[ModelSpec, list[str]]:
    """The record's model; Llama 2 70B at the LoRA benchmark's 8,192 tokens with the
    submissions' context (scripts/model_config.yaml: max_position_embeddings 8192, RoPE base
    10000, the released architecture otherwise)."""
    ident = _MODELS[str(r["model"])]
    seq = int(r["seq_len"])
    model = get_model(ident)
    if model.max_seq_len is None or seq <= model.max_seq_len or not r.get("lora"):
        return model, []
    config = {**model_entry(ident)["config"], "max_position_embeddings": seq}
    return model_from_config(config, f"{ident}-{seq // 1024}k"), [
        f"{ident} with max_position_embeddings {seq} (the submissions' model_config.yaml)"
    ]


def training_case(r: Mapping[str, Any]) -> TrainingCase:
    """An MLPerf Training record as estimator inputs: the layout, batch, FP8 and checkpointing
    its config script sets; LoRA with the submission's rank and targets for Llama 2 70B."""
    model, assumptions = _training_model(r)
    p = r["parallel"]
    tp, pp, cp, dp = (int(p[k]) for k in ("tp", "pp", "cp", "dp"))
    layout = Parallelism(tp=tp, pp=pp, cp=cp, dp=dp, sequence_parallel=bool(p["sequence_parallel"]))
    assumptions.append(f"TP {tp} x PP {pp} x CP {cp} x DP {dp} as the config script sets them")
    lora = r.get("lora")
    finetune = FineTune()
    if lora:
        finetune = FineTune("lora", rank=int(lora["rank"]), targets=_NEMO_ATTENTION)
        assumptions.append(
            f"LoRA rank {lora['rank']} on NeMo's 'attention' target: q/k/v and o_proj adapters"
        )
    ac = str(r["activation_checkpointing"])
    if ac != "none":
        # NeMo's block method recomputes the first ACL layers whole; the planner has no
        # per-layer recompute, and 21 of 80 layers is nearer none than full
        assumptions.append(f"activation checkpointing {ac!r}: not modelled (recompute none)")
    setup = TrainingSetup(
        seq_len=int(r["seq_len"]),
        micro_batch_size=int(r["micro_batch_size"]),
        global_batch_size=int(r["global_batch_size"]),
        recompute="none",
        finetune=finetune,
    )
    acc = get_accelerator(str(r["accelerator"]))
    precision = _FP8_LORA if lora else _FP8_TRAINING
    try:
        acc.peak(get_precision(precision).compute)
    except SpecError as exc:
        raise Refused(f"estimator refuses it: {exc}") from None
    assumptions.append(
        "FP8 GEMMs over FP8 weight copies (Transformer Engine fp8_params): "
        + ("timed as fp8, the planner refuses LoRA over FP8-stored weights" if lora else precision)
    )
    return TrainingCase(
        id=str(r["id"]),
        group=str(r["group"]),
        model_name=str(r["model"]),
        model=model,
        accelerator=acc.id,
        num_gpus=int(r["num_gpus"]),
        gpus_per_node=int(r["gpus_per_node"]),
        parallel=layout,
        setup=setup,
        precision=precision,
        measured_tokens_per_s_per_gpu=float(r["measured"]["tokens_per_s_per_gpu"]),
        measured_model_tflops_per_gpu=None,
        source=str(r["source"]),
        assumptions=tuple(assumptions),
        stack="megatron-core",
    )


def _training_row(r: Mapping[str, Any]) -> Row:
    case = training_case(r)
    try:
        estimate = case_estimate(case)
    except SpecError as exc:
        raise Refused(f"estimator refuses it: {exc}") from None
    return Row(
        kind="training",
        group=case.group,
        accelerator=case.accelerator,
        family=case.model.model_type,
        id=case.id,
        measured=case.measured_tokens_per_s_per_gpu,
        predicted=estimate.tokens_per_s_per_gpu,
        unit="tokens/s/GPU",
        model=case.model.id,
        model_class=case.model.model_class,
        stack=case.stack,
        gpus=case.num_gpus,
        precision=case.precision,
        source=case.source,
        layout=layout_of(case.parallel),
    )


def serving_row(r: Mapping[str, Any]) -> Row:
    """An MLPerf Inference Offline record against the maximum-throughput estimate of one TP x
    PP replica at its task's length preset, times the replicas the system ran."""
    model = get_model(_MODELS[str(r["model"])])
    task = str(r["length_distribution"]).lower()
    preset = next((v for k, v in _TASK_LENGTHS.items() if task.startswith(k)), None)
    if preset is None:
        raise Refused("length distribution has no preset: not modelled")
    lengths = LENGTH_PRESETS[preset]
    tp, pp, instances = int(r["tp"]), int(r["pp"]), int(r["instances"])
    if tp * pp * instances != int(r["num_gpus"]):
        raise Refused(f"{instances} replicas of TP {tp} x PP {pp} differ from the GPU count")
    acc = get_accelerator(str(r["accelerator"]))
    precision = get_precision(_FP8_SERVING)
    ep = tp if model.moe is not None else 1
    layout = Parallelism(tp=tp, pp=pp, ep=ep)
    try:
        probe = estimate_inference(
            model, acc, layout, InferenceSetup(lengths.input_len, lengths.output_len, 1), precision
        )
        batch = max(min(probe.max_concurrency, DEFAULT_MAX_BATCH), 1)
        est = estimate_inference(
            model,
            acc,
            layout,
            InferenceSetup(lengths.input_len, lengths.output_len, batch),
            precision,
        )
    except SpecError as exc:
        raise Refused(f"estimator refuses it: {exc}") from None
    return Row(
        kind="serving",
        group=str(r["group"]),
        accelerator=acc.id,
        family=model.model_type,
        id=str(r["id"]),
        measured=float(r["measured"]["output_tokens_per_s"]),
        predicted=est.output_tokens_per_s * instances,
        unit="output tokens/s",
        model=model.id,
        model_class=model.model_class,
        stack="vllm",
        gpus=int(r["num_gpus"]),
        precision=_FP8_SERVING,
        source=str(r["source"]),
    )


def rows() -> tuple[list[Row], list[Skip]]:
    """Every record compared, or skipped with the reason the planner refuses it."""
    found: list[Row] = []
    skipped: list[Skip] = []
    for r in records():
        convert = _training_row if r["kind"] == "training" else serving_row
        try:
            found.append(convert(r))
        except Refused as exc:
            skipped.append(Skip(str(r["id"]), str(r["group"]), str(exc)))
    return found, skipped


# A row's prediction with its kind's time factor multiplied by ``scale`` (on top of the one in
# use, ``timing.vendor``'s)
Predict = Callable[[Row, float], float]
ITERATIONS = 8  # fixed-point steps at most (the residual factor is near 1: two or three do)
TOLERANCE = 1e-6


@dataclass(frozen=True)
class VendorConstant:
    """One time factor on the AMD estimates of a kind on a generation (``timing.vendor``):
    ``factor`` is the value at which the group's median predicted / measured throughput is 1
    (the factor in use, ``adopted``, times the residual fitted on top of it); the median APE
    without any factor, with it (in-sample), and the leave-one-source-out median and p90 APE
    (each source's records under the factor refitted on the other sources)."""

    kind: str
    generation: str  # the accelerator generation fitted on ("" : every record of the kind)
    factor: float
    adopted: float
    n: int
    sources: int
    unscaled_median_ape: float
    median_ape: float
    loso_median_ape: float
    loso_p90_ape: float


def _p90(errors: list[float]) -> float:
    errors = sorted(errors)
    return errors[min(len(errors) - 1, round(0.9 * (len(errors) - 1)))]


def _linear(r: Row, scale: float) -> float:
    """A prediction inversely proportional to the factored time (a serving plan's throughput
    without a load: every prefill and decode step part carries the factor)."""
    return r.predicted / scale


def _fit(mine: list[Row], at: Predict) -> float:
    """The residual factor at which ``mine``'s median predicted / measured is 1 (fixed-point
    iteration from 1, as ``validation.fit_stacks.fit_scale``)."""
    scale = 1.0
    for _ in range(ITERATIONS):
        step = statistics.median(at(r, scale) / r.measured for r in mine)
        scale *= step
        if abs(step - 1) < TOLERANCE:
            break
    return scale


def _errors(mine: Iterable[Row], at: Predict, scale: float) -> list[float]:
    return [abs(at(r, scale) / r.measured - 1) for r in mine]


def vendor_constant(
    found: list[Row],
    kind: str,
    source: Mapping[str, str],
    at: Predict = _linear,
    adopted: float = 1.0,
    generation: str = "",
) -> VendorConstant:
    """The kind's vendor constant, fitted on its whole group (the records on ``generation``'s
    accelerators where one is named); ``source`` maps record ids to their source
    (``source_of``), ``at`` predicts a row under a residual factor (default: inversely
    proportional to it), ``adopted`` is the factor the rows' predictions carry. Needs two
    sources at least."""
    mine = [r for r in found if r.kind == kind and generation in ("", _generation(r))]
    names = sorted({source[r.id] for r in mine})
    if len(names) < 2:
        raise ValueError(f"{kind}: {len(names)} source(s); leave-one-source-out needs two")
    residual = _fit(mine, at)
    held_out: list[float] = []
    for name in names:
        rest = [r for r in mine if source[r.id] != name]
        held_out += _errors((r for r in mine if source[r.id] == name), at, _fit(rest, at))
    return VendorConstant(
        kind=kind,
        generation=generation,
        factor=adopted * residual,
        adopted=adopted,
        n=len(mine),
        sources=len(names),
        unscaled_median_ape=statistics.median(_errors(mine, at, 1 / adopted)),
        median_ape=statistics.median(_errors(mine, at, residual)),
        loso_median_ape=statistics.median(held_out),
        loso_p90_ape=_p90(held_out),
    )


def _training_at() -> Predict:
    """A training row's throughput with the compute factor in use times ``scale`` (the
    estimate rerun: exposed communication is not scaled)."""
    cases = {str(r["id"]): training_case(r) for r in records() if r["kind"] == "training"}
    seen: dict[tuple[str, float], float] = {}

    def at(r: Row, scale: float) -> float:
        key = (r.id, scale)
        if key not in seen:
            seen[key] = case_estimate(cases[r.id], scale=scale).tokens_per_s_per_gpu
        return seen[key]

    return at


def _generation(r: Row) -> str:
    return get_accelerator(r.accelerator).generation


def fitted_groups(kind: str) -> dict[str, float]:
    """The AMD generations with a factor of ``kind`` in use (``timing.vendor``) and its value."""
    table = TRAINING_COMPUTE_SCALE if kind == "training" else SERVING_STEP_SCALE
    return {g: c.scale for (vendor, g), c in table.items() if vendor == "amd"}


def build() -> dict[str, Any]:
    """The AMD section of the validation report: rows, skips, summaries, vendor constants."""
    found, skipped = rows()
    source = {str(r["id"]): source_of(r) for r in records()}
    at = {"training": _training_at(), "serving": _linear}
    constants = [
        vendor_constant(found, kind, source, at[kind], scale, generation)
        for kind in KINDS
        for generation, scale in fitted_groups(kind).items()
    ]
    return {
        "rows": found,
        "skipped": skipped,
        "summary": {
            "AMD by kind": summarize(found, lambda r: r.kind),
            "AMD by kind and accelerator": summarize(
                found, lambda r: f"{r.kind} / {r.accelerator}"
            ),
            "AMD by kind and model": summarize(found, lambda r: f"{r.kind} / {r.model}"),
        },
        "vendor constants": constants,
    }


def to_json(section: Mapping[str, Any]) -> dict[str, Any]:
    """The section as report.json stores it."""
    return {
        "summary": section["summary"],
        "vendor constants": [c.__dict__ for c in section["vendor constants"]],
        "skipped": [(s.id, s.reason) for s in section["skipped"]],
        "rows": [
            {**r.__dict__, "layout": dict(r.layout) or None, "error": r.error}
            for r in section["rows"]
        ],
    }


def render(section: Mapping[str, Any], details: bool = False) -> list[str]:
    """The AMD section of report.md."""
    from validation.report import _table

    found, skipped = section["rows"], section["skipped"]
    lines = [
        "",
        "# AMD Instinct: published runs (amd_measured.json)",
        "",
        f"{len(found)} records compared, {len(skipped)} skipped. Training: MLPerf Training"
        " v5.0 / v5.1 closed (tokens/s per GPU); serving: MLPerf Inference v4.1 / v5.1 closed"
        " Offline (output tokens/s of the system).",
    ]
    for title, table in section["summary"].items():
        lines += _table(title, table)
    lines += [
        "",
        "## vendor constant per kind (estimator/timing/vendor.py)",
        "",
        "The time factor at which the median predicted / measured of the kind's runs on the"
        " generation is 1, fitted on that whole group (the generations with a factor in use);"
        " the rows above carry the factor in use.",
        "",
        "| kind | generation | fitted factor | in use | n | sources | median APE without |"
        " with it | LOSO median APE | LOSO p90 APE |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in section["vendor constants"]:
        lines.append(
            f"| {c.kind} | {c.generation} | {c.factor:.3f} | {c.adopted:.3f} | {c.n} |"
            f" {c.sources} | {c.unscaled_median_ape:.1%} | {c.median_ape:.1%} |"
            f" {c.loso_median_ape:.1%} | {c.loso_p90_ape:.1%} |"
        )
    for s in skipped:
        lines.append(f"- skipped {s.id}: {s.reason}")
    if details:
        lines += ["", "| kind | id | measured | predicted | error |", "|---|---|---:|---:|---:|"]
        for r in found:
            lines.append(
                f"| {r.kind} | {r.id} | {r.measured:,.1f} | {r.predicted:,.1f} | {r.error:+.1%} |"
            )
    return lines


def main() -> int:
    print("\n".join(render(build(), details=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
