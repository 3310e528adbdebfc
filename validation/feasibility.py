"""The published serving runs against the GPUs' peak (issue 41 item 4): the compute each run's
measured throughput and TTFT imply (``estimator.serving.feasibility.check_measured``), and the
prefill-heavy records (prompt over output >= ``PREFILL_HEAVY_RATIO``, RAG and agent workloads).

A run that implies more than its GPUs' dense peak did not compute every prompt token it was
sent (its prompts shared prefixes the engine's cache served) or is mis-recorded; none of the
compared records does today (``python -m validation.feasibility`` prints each one's share of the
peak). The records are read as ``validation.load`` and ``validation.records`` map them: the
same model, accelerator, precision, lengths and GPUs.

``python -m validation.feasibility`` prints the check.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator import InferenceSetup, get_accelerator, get_model, get_precision
from estimator.inputs.lengths import LENGTH_PRESETS
from estimator.serving.feasibility import ComputeRate, Measured, check_measured
from validation.load import LoadCase, Skip, cases

__all__ = [
    "PREFILL_HEAVY_RATIO",
    "PeakCheck",
    "load_checks",
    "main",
    "prefill_heavy",
    "prefill_heavy_ids",
    "throughput_checks",
]

# Mean prompt over mean output tokens at or above which a workload is prefill-heavy (issue 41)
PREFILL_HEAVY_RATIO = 10.0


@dataclass(frozen=True)
class PeakCheck:
    """One published run's implied compute over its GPUs' dense peak: from its throughput and
    from its TTFT (None where it gives none), and the warnings of an impossible one."""

    id: str
    kind: str  # "load" (serving_load_measured.json) or "throughput" (inference_measured.json)
    engine: str  # the record's engine preset
    group: str
    prompt_over_output: float
    throughput_utilization: float | None
    ttft_utilization: float | None
    warnings: tuple[str, ...]

    @property
    def worst(self) -> float:
        return max(self.throughput_utilization or 0.0, self.ttft_utilization or 0.0)


def _ratio(case: LoadCase) -> float:
    preset = LENGTH_PRESETS.get(case.lengths)
    if preset is None:
        return case.input_len / case.output_len
    return preset.mean_input / preset.mean_output


def prefill_heavy(case: LoadCase) -> bool:
    """Whether a record's workload is prefill-heavy: its mean prompt at least
    ``PREFILL_HEAVY_RATIO`` times its mean output."""
    return _ratio(case) >= PREFILL_HEAVY_RATIO


def prefill_heavy_ids() -> set[str]:
    """The compared load records whose workload is prefill-heavy."""
    return {c.id for c in cases() if isinstance(c, LoadCase) and prefill_heavy(c)}


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _ttft_s(measured: dict[str, object]) -> float | None:
    """A record's TTFT in seconds, any statistic it states (each bounds a prompt's prefill)."""
    ttft = measured.get("ttft_ms")
    if not isinstance(ttft, dict):
        return None
    for key in ("mean", "median", "unspecified_stat"):
        value = _number(ttft.get(key))
        if value is not None:
            return value / 1e3
    return None


def _share(rate: ComputeRate | None) -> float | None:
    return None if rate is None else rate.utilization


def load_checks() -> list[PeakCheck]:
    """Every mapped record of serving_load_measured.json: its measured requests/s (or output
    tokens/s) and TTFT on its replicas' GPUs."""
    out = []
    for case in cases():
        if isinstance(case, Skip):
            continue
        m = case.measured
        setup = InferenceSetup(
            input_len=case.input_len,
            output_len=case.output_len,
            lengths=LENGTH_PRESETS.get(case.lengths),
        )
        measured = Measured(
            output_tokens_per_s=_number(m.get("output_tokens_per_s")),
            requests_per_s=_number(m.get("request_throughput")),
            ttft_s=_ttft_s(m),
        )
        check = check_measured(
            get_model(case.model),
            get_accelerator(case.accelerator),
            get_precision(case.precision),
            setup,
            case.gpus * case.instances,
            measured,
        )
        out.append(
            PeakCheck(
                id=case.id,
                kind="load",
                engine=case.engine,
                group=case.group,
                prompt_over_output=_ratio(case),
                throughput_utilization=_share(check.throughput),
                ttft_utilization=_share(check.ttft),
                warnings=tuple(w for _, _, w in check.warnings),
            )
        )
    return out


def throughput_checks() -> list[PeakCheck]:
    """Every mapped record of inference_measured.json (offline maximum throughput): its output
    tokens/s on its GPUs."""
    from validation.records import InferenceCase, inference_cases

    out = []
    for case in inference_cases():
        if not isinstance(case, InferenceCase) or not isinstance(case.precision, str):
            continue
        check = check_measured(
            case.model,
            get_accelerator(case.accelerator),
            get_precision(case.precision),
            InferenceSetup(input_len=case.input_len, output_len=case.output_len),
            case.num_gpus,
            Measured(output_tokens_per_s=case.measured_output_tokens_per_s),
        )
        out.append(
            PeakCheck(
                id=case.id,
                kind="throughput",
                engine="trtllm" if "tensorrt" in case.group else "",
                group=case.group,
                prompt_over_output=case.input_len / case.output_len,
                throughput_utilization=_share(check.throughput),
                ttft_utilization=None,
                warnings=tuple(w for _, _, w in check.warnings),
            )
        )
    return out


def main() -> None:
    checks = load_checks() + throughput_checks()
    above = [c for c in checks if c.warnings]
    print(f"{len(checks)} published runs checked against their GPUs' dense peak;"
          f" {len(above)} imply more than it")  # fmt: skip
    for c in sorted(checks, key=lambda c: -c.worst):
        heavy = " prefill-heavy" if c.prompt_over_output >= PREFILL_HEAVY_RATIO else ""
        print(
            f"{c.worst:6.1%} of peak  {c.kind:<10} {c.engine:<7} ISL/OSL"
            f" {c.prompt_over_output:5.1f}{heavy}  {c.id}"
        )
        for w in c.warnings:
            print(f"    {w}")


if __name__ == "__main__":
    main()
