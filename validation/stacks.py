"""Training on the stacks other than Megatron-Core: published DeepSpeed ZeRO and PyTorch FSDP1 runs.

``validation/data/stacks_measured.json`` holds measured runs of DeepSpeed ZeRO (the
ml-engineering H200 / B200 sweep, the DeepSpeed-on-Azure post, a Hugging Face blog) and of
PyTorch FSDP1 through Hugging Face Accelerate and Lightning Fabric (outside llm-foundry, whose
MosaicML runs are ``records.py``'s). Each record becomes a ``records.TrainingCase`` timed under
the stack profile it names (``estimator.timing.stacks``: ``deepspeed``; FSDP1 is the
``llm-foundry`` profile, the planner's one FSDP1 stack) and is compared on tokens/s per GPU and,
where the source gives it, peak memory per GPU (the statistic it measured, as
``validation/memory.py`` compares one).

Throughput as published is converted to tokens/s per GPU with the source's own FLOP count
(``SOURCE_FLOPS``: a source's TFLOP/s divided by its FLOPs per token), or from a step time and
the tokens a GPU processes per step. Nothing is fitted per record. Per stack, the profile's
compute factor is fitted on the stack's whole group as ``fit_stacks.fit_scale`` fits it, with
the leave-one-source-out error beside the in-sample one; the fit is reported, not applied (the
profiles in ``estimator/timing/stacks.py`` are unchanged).

``python -m validation.stacks`` prints the comparison; ``report.py`` carries it as
``stacks_measured``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from estimator import Parallelism, get_model
from estimator.counts.flops import Recompute
from estimator.errors import UnknownIdError
from estimator.inputs.config import model_from_config
from estimator.inputs.model import ModelSpec
from estimator.memory.training import TrainingSetup
from estimator.offload import Offload
from estimator.timing.stacks import STACKS
from validation.fit_stacks import _source_file, fit_scale, leave_one_out, loso_errors
from validation.memory import Statistic, compared_bytes
from validation.records import DATA, Refused, Skip, TrainingCase, _checked_training, _source
from validation.report import case_estimate, summarize

__all__ = [
    "SOURCE_FLOPS",
    "StackMemoryRow",
    "StackRow",
    "main",
    "measured_tokens_per_s_per_gpu",
    "section",
    "stack_cases",
    "stack_fits",
    "stack_records",
]

Record = Mapping[str, Any]
GIB = 2**30


def _causal_6(config: Mapping[str, Any], seq_len: int) -> float:
    """ml-engineering's ``benchmark.py estimate_tflos`` per token (ported from arctic_training):
    6 x the dense parameters (the layers' linears and one vocab x hidden matrix) + 6 x seq x
    head_dim x heads x layers (causal attention); recompute excluded."""
    h, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or h // heads)
    q, kv = heads * head_dim, int(config["num_key_value_heads"]) * head_dim
    dense = layers * (3 * h * int(config["intermediate_size"]) + h * (2 * q + 2 * kv))
    dense += int(config["vocab_size"]) * h
    return float(6 * dense + 6 * seq_len * head_dim * heads * layers)


def _megatron_96(config: Mapping[str, Any], seq_len: int) -> float:
    """The Megatron formula the DeepSpeed-on-Azure post states (Narayanan et al. 2021, with
    activation recompute): 96 l h^2 (1 + s / 6h + V / (16 l h)) per token."""
    layers, h, vocab = (int(config[k]) for k in ("n_layer", "n_embd", "vocab_size"))
    return 96 * layers * h**2 * (1 + seq_len / (6 * h) + vocab / (16 * layers * h))


# The FLOP counts the sources divide by (``measured.flop_convention``), FLOPs per token.
SOURCE_FLOPS: dict[str, Callable[[Mapping[str, Any], int], float]] = {
    "causal_6": _causal_6,
    "megatron_96": _megatron_96,
}

# Published memory statistics, as validation/memory.py compares them.
_STATISTICS: dict[str, Statistic] = {"reserved": "reserved", "allocated": "allocated"}


@cache
def stack_records() -> tuple[Record, ...]:
    """The records of ``stacks_measured.json``, in file order."""
    data = json.loads((DATA / "stacks_measured.json").read_text(encoding="utf-8"))
    return tuple(data["records"])


def _model(r: Record) -> tuple[ModelSpec, Mapping[str, Any]]:
    """The run's model and the config its source's FLOP count reads."""
    if "catalog_model" in r:
        model = get_model(str(r["catalog_model"]))
        return model, model.config
    config = r["model_config"]
    return model_from_config(config, str(r["id"])), config


def measured_tokens_per_s_per_gpu(r: Record, config: Mapping[str, Any]) -> float:
    """Tokens/s per GPU as published, or from the source's TFLOP/s and its FLOP count, or from
    a step time and the tokens a GPU processes per step."""
    m = r["measured"]
    if "tokens_per_s_per_gpu" in m:
        return float(m["tokens_per_s_per_gpu"])
    seq = int(r["seq_len"])
    if "tflops_per_gpu" in m:
        return float(m["tflops_per_gpu"]) * 1e12 / SOURCE_FLOPS[m["flop_convention"]](config, seq)
    if "step_s" in m and r.get("global_batch_size"):
        return int(r["global_batch_size"]) * seq / int(r["num_gpus"]) / float(m["step_s"])
    raise Refused("no throughput the comparison can read")


def _case(r: Record) -> TrainingCase:
    """A record as estimator inputs, under the stack profile it names."""
    stack = str(r["stack"])
    if stack not in STACKS:
        raise Refused(f"stack {stack} has no profile")
    try:
        model, config = _model(r)
    except UnknownIdError as exc:
        raise Refused(str(exc)) from None
    if r.get("micro_batch_size") is None:
        raise Refused("micro-batch size not published")
    num_gpus = int(r["num_gpus"])
    parallel = Parallelism(tp=1, pp=1, dp=num_gpus, zero_stage=int(r["zero_stage"]))
    offload = r.get("offload") or {}
    options = r.get("options") or {}
    unset = str(r["activation_checkpointing"]).startswith(("none", "not"))
    recompute: Recompute = "none" if unset else "full"
    # Megatron-DeepSpeed's GPT runs Megatron's model code; the others Hugging Face or LitGPT
    # modules, op by op
    megatron = (r.get("model_config") or {}).get("model_type") == "gpt2"
    setup = TrainingSetup(
        seq_len=int(r["seq_len"]),
        micro_batch_size=int(r["micro_batch_size"]),
        global_batch_size=int(r["global_batch_size"]),
        recompute=recompute,
        activation_convention="megatron" if megatron else "hf",
        offload=Offload(
            optimizer=bool(offload.get("optimizer")), params=bool(offload.get("params"))
        ),
        chunked_loss=bool(options.get("liger_kernel")),  # Liger's fused linear + cross-entropy
        gradients_per_step=stack != "deepspeed",  # DeepSpeed's gradient buffers persist
    )
    precision = "fp16" if str(r["precision"]).startswith("fp16") else "bf16"
    _checked_training(model, str(r["accelerator"]), parallel, setup, precision)
    profile = STACKS[stack]
    assumptions = [
        f"{r['framework']}: timed on the {profile.label} profile ({profile.attention_kernel}"
        f" attention; the run's: {options.get('attention', 'not stated')})",
        f"ZeRO-{parallel.zero_stage}, dp = {num_gpus}, tp = pp = 1; recompute {recompute}",
        f"{r['precision']}: the {precision} preset",
        str(r.get("reliability", "")),
    ]
    return TrainingCase(
        id=str(r["id"]),
        group=str(r["group"]),
        model_name=str(r["model"]),
        model=model,
        accelerator=str(r["accelerator"]),
        num_gpus=num_gpus,
        gpus_per_node=int(r["gpus_per_node"]),
        parallel=parallel,
        setup=setup,
        precision=precision,
        measured_tokens_per_s_per_gpu=measured_tokens_per_s_per_gpu(r, config),
        # model FLOPs only (the Azure post's Megatron formula counts the recompute)
        measured_model_tflops_per_gpu=r["measured"].get("tflops_per_gpu")
        if r["measured"].get("flop_convention") == "causal_6"
        else None,
        source=_source(r["source"]),
        assumptions=tuple(a for a in assumptions if a),
        stack=stack,
    )


@cache
def _cases() -> tuple[TrainingCase | Skip, ...]:
    out: list[TrainingCase | Skip] = []
    for r in stack_records():
        try:
            out.append(_case(r))
        except Refused as exc:
            out.append(Skip(str(r["id"]), str(r["group"]), str(exc)))
    return tuple(out)


def stack_cases() -> list[TrainingCase | Skip]:
    """One TrainingCase or Skip per record of ``stacks_measured.json``, in file order."""
    return list(_cases())


@dataclass(frozen=True)
class StackRow:
    """One compared run: tokens/s per GPU measured and predicted under its stack's profile."""

    id: str
    group: str
    stack: str
    accelerator: str
    zero_stage: int
    offload: bool
    measured: float
    predicted: float
    source: str

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


@dataclass(frozen=True)
class StackMemoryRow:
    """One run's peak memory per GPU: the statistic measured, the estimate's part it counts."""

    id: str
    stack: str
    statistic: str
    measured_gib: float
    predicted_gib: float
    fits: bool

    @property
    def error(self) -> float:
        return self.predicted_gib / self.measured_gib - 1


def _peak_gib(r: Record) -> tuple[float, Statistic] | None:
    m = r["measured"]
    statistic = str(m.get("memory_statistic", "")).split(" ")[0]
    if statistic not in _STATISTICS:
        return None
    if "peak_memory_gib" in m:
        return float(m["peak_memory_gib"]), _STATISTICS[statistic]
    if "peak_memory_gb" in m:
        return float(m["peak_memory_gb"]) * 1e9 / GIB, _STATISTICS[statistic]
    return None


def rows() -> tuple[list[StackRow], list[StackMemoryRow], list[Skip]]:
    """Every compared run's throughput row, its memory row where a peak was published, and the
    records the planner refused, with why."""
    raw = {str(r["id"]): r for r in stack_records()}
    found, memory, skipped = [], [], []
    for case in stack_cases():
        if isinstance(case, Skip):
            skipped.append(case)
            continue
        estimate = case_estimate(case)
        found.append(
            StackRow(
                id=case.id,
                group=case.group,
                stack=case.stack,
                accelerator=case.accelerator,
                zero_stage=case.parallel.zero_stage,
                offload=case.setup.offload.any,
                measured=case.measured_tokens_per_s_per_gpu,
                predicted=estimate.tokens_per_s_per_gpu,
                source=case.source,
            )
        )
        peak = _peak_gib(raw[case.id])
        if peak is not None:
            mem = estimate.memory
            memory.append(
                StackMemoryRow(
                    id=case.id,
                    stack=case.stack,
                    statistic=peak[1],
                    measured_gib=peak[0],
                    predicted_gib=compared_bytes(mem, peak[1]) / GIB,
                    fits=mem.total_bytes <= mem.capacity_bytes,
                )
            )
    return found, memory, skipped


def stack_fits(cases: list[TrainingCase]) -> dict[str, dict[str, Any]]:
    """Per stack: its profile's compute factor and the one fitted on its whole group (the median
    predicted / measured throughput at 1), the median APE at each, and leave-one-source-out:
    each source file's runs under the factor fitted on the other sources'."""
    out: dict[str, dict[str, Any]] = {}
    for stack in sorted({c.stack for c in cases}):
        runs = [c for c in cases if c.stack == stack]
        fitted = fit_scale(runs, stack)
        folds = leave_one_out(runs, stack, _source_file)
        pooled = loso_errors(runs, stack, _source_file)

        def ape(scale: float | None, group: list[TrainingCase] = runs, name: str = stack) -> float:
            return statistics.median(
                abs(case_estimate(c, name, scale).tokens_per_s_per_gpu
                    / c.measured_tokens_per_s_per_gpu - 1)
                for c in group
            )  # fmt: skip

        profile = STACKS[stack]
        out[stack] = {
            "n": len(runs),
            "profile_compute_scale": profile.compute_scale,
            "profile_compute_scale_by_generation": dict(profile.compute_scale_by_generation),
            "fitted_compute_scale": fitted,
            "median_ape_at_1": ape(1.0),
            "median_ape_profile": ape(None),
            "median_ape_fitted": ape(fitted),
            "loso_median_ape": statistics.median(pooled) if len(folds) > 1 else None,
            "loso_folds": {
                held: {"runs": n, "compute_scale": s, "median_ape": e}
                for held, (n, s, e) in folds.items()
            },
        }
    return out


def section() -> dict[str, Any]:
    """What report.py carries as ``stacks_measured``: the rows, the summaries by stack, group
    and ZeRO stage, the memory rows, the fits and the refusals."""
    found, memory, skipped = rows()
    cases = [c for c in stack_cases() if isinstance(c, TrainingCase)]
    return {
        "records": len(stack_records()),
        "rows": found,
        "memory_rows": memory,
        "skipped": [(s.id, s.reason) for s in skipped],
        "summary": {
            "by stack": summarize(found, lambda r: r.stack),
            "by group": summarize(found, lambda r: f"{r.stack} / {r.group}"),
            "by ZeRO stage and offload": summarize(
                found, lambda r: f"{r.stack} ZeRO-{r.zero_stage}{' offload' if r.offload else ''}"
            ),
            "peak memory by stack": summarize(memory, lambda r: r.stack),
        },
        "fits": stack_fits(cases),
    }


def to_json(stacks: dict[str, Any]) -> dict[str, Any]:
    """The section as report.json would write it."""
    return {
        **{k: v for k, v in stacks.items() if k not in ("rows", "memory_rows")},
        "rows": [{**r.__dict__, "error": r.error} for r in stacks["rows"]],
        "memory_rows": [{**r.__dict__, "error": r.error} for r in stacks["memory_rows"]],
    }


def render(stacks: dict[str, Any]) -> list[str]:
    """The section of report.md on the non-Megatron stacks' published runs."""
    lines = [
        "",
        "# Published runs on DeepSpeed ZeRO and PyTorch FSDP1 (stacks_measured)",
        "",
        f"{len(stacks['rows'])} of {stacks['records']} records compared under their stack's"
        " profile (validation/stacks.py); the fitted factors are reported, not applied.",
    ]
    for title, table in stacks["summary"].items():
        lines += ["", f"## {title}", "", "| group | n | median APE | p90 APE | signed |"]
        lines.append("|---|---:|---:|---:|---:|")
        for s in table:
            lines.append(
                f"| {s['name']} | {s['n']} | {s['median_ape']:.1%} | {s['p90_ape']:.1%} |"
                f" {s['median_signed']:+.1%} |"
            )
    lines += ["", "## compute factor fitted per stack (not applied)", ""]
    lines.append(
        "| stack | n | profile's factor | fitted | APE at 1.0 | APE at the profile's | APE fitted"
        " | leave one source out |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for stack, f in stacks["fits"].items():
        loso = "-" if f["loso_median_ape"] is None else f"{f['loso_median_ape']:.1%}"
        by = "".join(
            f", {s:.3f} on {g}" for g, s in f["profile_compute_scale_by_generation"].items()
        )
        lines.append(
            f"| {stack} | {f['n']} | {f['profile_compute_scale']:.3f}{by} |"
            f" {f['fitted_compute_scale']:.3f} | {f['median_ape_at_1']:.1%} |"
            f" {f['median_ape_profile']:.1%} | {f['median_ape_fitted']:.1%} | {loso} |"
        )
    lines += ["", "## refused", ""] + [f"- {i}: {why}" for i, why in stacks["skipped"]]
    return lines


def main() -> None:
    stacks = section()
    for r in stacks["rows"]:
        print(f"{r.id:52} {r.measured:9.0f} {r.predicted:9.0f} {r.error:+7.1%}")
    for r in stacks["memory_rows"]:
        print(f"{r.id:52} {r.measured_gib:7.1f} GiB {r.predicted_gib:7.1f} GiB {r.error:+7.1%}")
    print("\n".join(render(stacks)))


if __name__ == "__main__":
    main()
