"""Per-vendor time factors: named constants, one per vendor, accelerator generation and kind of
estimate, each fitted on the whole group of that generation's published runs (never per record
or per part), where the group has ``MIN_GROUP_RUNS`` runs or more.

The kernel model times AMD Instinct accelerators with the H100 fit's curves scaled by each
part's maximum achievable matmul (``timing.kernels``), and on the published CDNA 3 runs
(MI300X, MI325X) it is fast by about a quarter in training and a third in serving. Each factor
here multiplies the time the kernel model gives on that generation (``Accelerator.vendor`` and
``generation``):

- ``TRAINING_COMPUTE_SCALE``: the compute of a training step (forward, backward, recompute;
  exposed communication is not scaled), as a stack profile's ``compute_scale`` does
  (``timing.stage_time``);
- ``SERVING_STEP_SCALE``: a serving plan's prefill and decode steps, without a load
  (``serving.curve.batch_times``: its throughput divides by it exactly) and under one (the
  engine step ``estimate_load`` times, as a deployment's calibration scales it). Fitted on
  Offline throughput; under load every AMD record's error falls or stays with it, but TTFT and
  TPOT stay far under the measured ones, and an answer under load says so
  (``SERVING_LOAD_NOTES``).

``validation/amd.py`` fits both on ``validation/data/amd_measured.json`` (the fixed-point value
at which the group's median predicted / measured throughput is 1, as
``validation/fit_stacks.py`` fits a stack's factor) and refits each with one source (a
submitter's submission round) left out in turn; a test checks the constants here equal a fresh
fit to the third decimal. Every estimate on such a generation names its factor, the group it
was fitted on and the held-out error (``VendorScale.note``); one on a generation of the vendor
without a factor says how far off its runs are, or that none is compared (``UNFITTED_NOTES``).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.inputs.accelerator import Accelerator

__all__ = [
    "MIN_GROUP_RUNS",
    "SERVING_LOAD_NOTES",
    "SERVING_STEP_SCALE",
    "TRAINING_COMPUTE_SCALE",
    "UNFITTED_NOTES",
    "VendorScale",
    "serving_notes",
    "serving_scale",
    "training_notes",
    "training_scale",
]

# The runs a generation's factor needs (the rule: a per-generation constant only on ten
# records or more)
MIN_GROUP_RUNS = 10


@dataclass(frozen=True, slots=True)
class VendorScale:
    """A time factor on one vendor's generation: ``scale`` multiplies the time, fitted on ``n``
    runs from ``sources`` sources of ``group``; ``loso_median_ape`` is their median error with
    the factor refitted without each one's source."""

    vendor: str
    generation: str
    label: str  # the generation's accelerators, as a note names them
    what: str  # what the factor multiplies
    scale: float
    n: int
    sources: int
    group: str
    loso_median_ape: float

    def note(self) -> str:
        return (
            f"{self.label}: {self.what} time scaled by {self.scale:.3f} (the kernel curves are"
            f" the H100 fit's), fitted on {self.n} {self.group} ({self.sources} sources;"
            f" leave-one-source-out median error {self.loso_median_ape:.1%}): read this plan's"
            f" times as about that approximate."
        )


_CDNA3 = "AMD Instinct CDNA 3 (MI300X, MI325X, MI300A)"

# MLPerf Training v5.0 / v5.1 closed, Llama 2 70B LoRA under Megatron-Core / NeMo on ROCm on
# MI300X and MI325X (validation/data/amd_measured.json; validation/amd.py fits it): at 1.0 the
# 18 runs are 43.5% off median (over-predicted); with the factor 4.2% median APE in-sample,
# 4.6% with each of the 10 sources left out in turn.
TRAINING_COMPUTE_SCALE = {
    ("amd", "cdna3"): VendorScale(
        vendor="amd",
        generation="cdna3",
        label=_CDNA3,
        what="training compute",
        scale=1.436,
        n=18,
        sources=10,
        group="MLPerf Training v5.0 / v5.1 closed runs on MI300X and MI325X",
        loso_median_ape=0.046,
    ),
}

# MLPerf Inference v4.1 / v5.1 closed Offline, Llama 2 70B and Mixtral 8x7B on vLLM (ROCm) on
# MI300X and MI325X (validation/data/amd_measured.json): at 1.0 the 25 runs are +35.3% median;
# with the factor 3.5% median APE in-sample, 3.5% with each source left out.
SERVING_STEP_SCALE = {
    ("amd", "cdna3"): VendorScale(
        vendor="amd",
        generation="cdna3",
        label=_CDNA3,
        what="serving step",
        scale=1.353,
        n=25,
        sources=12,
        group="MLPerf Inference v4.1 / v5.1 closed Offline runs (vLLM) on MI300X and MI325X",
        loso_median_ape=0.035,
    ),
}

# What the serving factor leaves under load: validation/load.py on the AMD runs of
# validation/data/serving_load_measured.json (MLPerf Inference v4.1 / v5.0 / v5.1 Server and
# Interactive, vLLM on MI300X / MI325X): 4 of the 11 compared (7 refused: multi-step scheduling,
# several TP replicas per system, a model swap), median errors with the factor.
SERVING_LOAD_NOTES = {
    ("amd", "cdna3"): "AMD Instinct CDNA 3 under load: the serving step factor is fitted on"
    " Offline throughput; on the 4 MLPerf Server / Interactive runs the planner compares, TTFT"
    " and TPOT are still about 80% under the measured (median) and the rate within the latency"
    " targets about 63% over: read this plan's latencies under load as optimistic by several"
    " times.",
}

# The vendor's generations without a factor, and why (validation/amd.py's rows at 1.0)
UNFITTED_NOTES = {
    ("amd", "cdna4"): "AMD Instinct CDNA 4 (MI355X): no fitted time factor. Its 6 MLPerf"
    " Training v5.1 runs (validation/data/amd_measured.json) are fewer than the 10 a"
    " generation's factor needs and are +9.4% median over-predicted (tokens/s) as the kernel"
    " model stands, so none is applied; no published serving run on it is compared.",
    ("amd", "cdna2"): "AMD Instinct CDNA 2 (MI250X): no fitted time factor and no published"
    " run on it compared; the CDNA 3 parts were 35-44% over-predicted (median) before theirs:"
    " read this plan's times as unchecked.",
}


def training_scale(accelerator: Accelerator) -> VendorScale | None:
    """The training compute factor of ``accelerator``'s generation, if it has one."""
    return TRAINING_COMPUTE_SCALE.get((accelerator.vendor, accelerator.generation))


def serving_scale(accelerator: Accelerator) -> VendorScale | None:
    """The serving step factor of ``accelerator``'s generation, if it has one."""
    return SERVING_STEP_SCALE.get((accelerator.vendor, accelerator.generation))


def training_notes(accelerator: Accelerator) -> list[str]:
    """What a training estimate on ``accelerator`` says of its vendor factor."""
    fitted = training_scale(accelerator)
    if fitted is not None:
        return [fitted.note()]
    unfitted = UNFITTED_NOTES.get((accelerator.vendor, accelerator.generation))
    return [unfitted] if unfitted else []


def serving_notes(accelerator: Accelerator, under_load: bool) -> list[str]:
    """What a serving estimate on ``accelerator`` says of its vendor factor (and, under load,
    what the factor leaves)."""
    key = (accelerator.vendor, accelerator.generation)
    fitted = serving_scale(accelerator)
    if fitted is None:
        unfitted = UNFITTED_NOTES.get(key)
        return [unfitted] if unfitted else []
    load = SERVING_LOAD_NOTES.get(key) if under_load else None
    return [fitted.note(), load] if load else [fitted.note()]
