"""Serving calibrated on a deployment's own benchmark (issue 47 item 2): a measured TTFT and TPOT
at a known load fit two scales on the engine step's time, and every other load, layout and
fleet size on the same accelerator and engine is planned with them.

- **The measurement** (``ServingMeasurement``): the mean TTFT and TPOT of a run, its load (the
  requests kept in flight, or the Poisson rate) and its mean lengths, typed in or read off the
  JSON ``vllm bench serve --save-result`` writes (``parse_bench``; SGLang's ``bench_serving``
  writes the same keys).
- **The fit** (``fit_scales``): ``prefill_scale`` multiplies the prompt chunks' share of each
  engine step, ``decode_scale`` the rest (``engine_step.scaled_step``), and Newton's method in
  log space (a finite-difference Jacobian) moves them until the load model
  (``estimate.estimate_load``) reproduces both means at the measured load. Under load each
  mean depends on both scales (a decode step carries prompt chunks, a prompt waits for decode
  steps), hence the two-by-two solve, not two ratios. A scale outside ``SCALE_BOUNDS`` is
  refused: no kernel runs 5x slower or faster than the model, so the run's setup differs from
  the plan's (GPU count, lengths, eager mode, a prefix cache).
- **Before fitting**, the measurement is checked against the GPUs' peak
  (``feasibility.check_measured``): an impossible one is refused, naming prefix-cache hits as
  the likely cause.

The training planner's calibration (``timing.training.calibrate``: a measured step) is one
scale on the step; serving has two phases with different bottlenecks (prefill compute, decode
memory bandwidth), so it gets one per phase.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.memory.inference import InferenceSetup
from estimator.serving.feasibility import InfeasibleMeasurement, Measured, check_measured
from estimator.serving.load import EnginePreset, LoadPoint

__all__ = [
    "SCALE_BOUNDS",
    "Calibration",
    "LoadOf",
    "ServingMeasurement",
    "calibrate",
    "check_feasible",
    "fit_scales",
    "parse_bench",
]

# The scales a fit may reach: beyond 5x either way the run is not the plan's deployment
SCALE_BOUNDS = (0.2, 5.0)
# Newton's steps and the log-space tolerance on both means (0.1 %)
FIT_STEPS = 12
FIT_TOLERANCE = 1e-3
# The log-space step of the finite-difference Jacobian (about 2 %)
JACOBIAN_STEP = 0.02
# The bounds of the request's own fields: tokens per request, requests in flight
MAX_TOKENS = 2**24
MAX_CONCURRENCY = 2**20

LoadOf = Callable[[InferenceSetup, EnginePreset, float | None], LoadPoint]
"""The plan's steady state at a setup, on an engine preset, at a request rate (None: closed loop
at ``setup.concurrency``): ``estimate_load`` with the plan's model, GPUs and layout bound."""


@dataclass(frozen=True, slots=True)
class ServingMeasurement:
    """A deployment's measured run: mean TTFT and TPOT (seconds) at its load (``concurrency``
    requests in flight, or ``request_rate`` Poisson arrivals a second), its mean lengths, and
    what it completed (output tokens/s, requests/s), on ``accelerator`` with ``engine``."""

    ttft_s: float
    tpot_s: float
    input_len: int
    output_len: int
    accelerator: str
    concurrency: int | None = None
    request_rate: float | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    engine: str | None = None
    source: str = "typed"


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _required(data: Mapping[str, Any], key: str) -> float:
    value = _number(data, key)
    if value is None or not 0 < value < math.inf:
        raise SpecError(f"calibration.bench.{key}", "must be a finite number > 0", data.get(key))
    return value


def _mean_len(data: Mapping[str, Any], key: str, completed: float) -> int:
    """A run's mean tokens per request, within the request fields' bounds."""
    mean = round(_required(data, key) / completed)
    if not 1 <= mean <= MAX_TOKENS:
        raise SpecError(
            f"calibration.bench.{key}", f"per completed request must be 1 to {MAX_TOKENS:,}", mean
        )
    return mean


def parse_bench(
    data: Mapping[str, Any], accelerator: str, engine: str | None = None
) -> ServingMeasurement:
    """A measurement from the JSON ``vllm bench serve`` saves (SGLang's ``bench_serving``:
    the same keys): mean TTFT and TPOT (``mean_ttft_ms``, ``mean_tpot_ms``), the mean lengths
    (``total_input_tokens`` and ``total_output_tokens`` over ``completed``), the throughputs,
    and the load: ``max_concurrency`` with an unlimited ``request_rate`` (``inf``: every
    request sent at once, the cap keeps that many in flight, a closed loop), else the rate
    (an open loop, the cap taken as not binding)."""
    completed = _required(data, "completed")
    rate = _number(data, "request_rate")
    cap = _number(data, "max_concurrency")
    open_loop = rate is not None and math.isfinite(rate) and rate > 0
    if not open_loop and (cap is None or not 1 <= cap <= MAX_CONCURRENCY):
        raise SpecError(
            "calibration.bench.max_concurrency",
            "a run with an unlimited request_rate needs its max_concurrency (the load it ran"
            f" at), 1 to {MAX_CONCURRENCY:,}",
            data.get("max_concurrency"),
        )
    return ServingMeasurement(
        ttft_s=_required(data, "mean_ttft_ms") / 1e3,
        tpot_s=_required(data, "mean_tpot_ms") / 1e3,
        input_len=_mean_len(data, "total_input_tokens", completed),
        output_len=_mean_len(data, "total_output_tokens", completed),
        accelerator=accelerator,
        concurrency=None if open_loop or cap is None else round(cap),
        request_rate=rate if open_loop else None,
        output_tokens_per_s=_number(data, "output_throughput"),
        requests_per_s=_number(data, "request_throughput"),
        engine=engine,
        source="vllm bench serve / sglang bench_serving result",
    )


def check_feasible(
    model: ModelSpec,
    accelerator: Accelerator,
    precision: Precision,
    setup: InferenceSetup,
    gpus: int,
    measured: ServingMeasurement,
) -> None:
    """Refuse a measurement that implies more compute than the replica's peak
    (``feasibility.check_measured``), its field under ``calibration.`` and its message naming
    the likely cause (prefix-cache hits)."""
    check = check_measured(
        model, accelerator, precision, setup, gpus,
        Measured(measured.output_tokens_per_s, measured.requests_per_s, measured.ttft_s),
    )  # fmt: skip
    if check.warnings:
        field, value, message = check.warnings[0]
        raise InfeasibleMeasurement(f"calibration.{field}", message, value)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Scales fitted on a measurement, and the means at its load before and after: (TTFT s,
    TPOT s, output tokens/s) as measured, as the model had them, and as the fitted model
    re-predicts them."""

    prefill_scale: float
    decode_scale: float
    measured: ServingMeasurement
    measured_at: tuple[float, float, float | None]
    uncalibrated: tuple[float, float, float]
    calibrated: tuple[float, float, float]
    steps: int

    @property
    def scales(self) -> tuple[float, float]:
        return (self.prefill_scale, self.decode_scale)

    def preset(self, engine: EnginePreset) -> EnginePreset:
        """``engine`` with the fitted scales on its step (``EnginePreset.step_scales``)."""
        return replace(engine, step_scales=self.scales)

    @property
    def note(self) -> str:
        m = self.measured
        load = (
            f"{m.concurrency} in flight" if m.request_rate is None else f"{m.request_rate:g} req/s"
        )
        return (
            f"Calibrated on a measured run ({m.source}: {m.input_len:,} + {m.output_len:,} tokens,"
            f" {load}, on {m.accelerator}): prefill time x{self.prefill_scale:.2f}, decode"
            f" time x{self.decode_scale:.2f}, fitted so the load model reproduces the measured"
            f" mean TTFT {m.ttft_s * 1e3:,.1f} ms and TPOT {m.tpot_s * 1e3:,.2f} ms (before:"
            f" {self.uncalibrated[0] * 1e3:,.1f} ms and {self.uncalibrated[1] * 1e3:,.2f} ms)."
            " The figures under load carry the scales; the lone request and the concurrency"
            " curve stay the model's own."
        )


def _means(load: LoadPoint) -> tuple[float, float, float]:
    return (load.ttft_s, load.tpot_s, load.output_tokens_per_s)


def _residual(load: LoadPoint, m: ServingMeasurement) -> np.ndarray:
    """log(model / measured) of the mean TTFT and TPOT; infinite where the model is
    overloaded (no steady-state TTFT)."""
    if not (load.ttft_s > 0 and math.isfinite(load.ttft_s)):
        return np.array([np.inf, np.inf])
    return np.asarray(np.log([load.ttft_s / m.ttft_s, load.tpot_s / m.tpot_s]), dtype=float)


def _refuse_scales(log_scales: np.ndarray, m: ServingMeasurement) -> None:
    lo, hi = SCALE_BOUNDS
    prefill, decode = np.exp(log_scales)
    if all(lo <= s <= hi for s in (prefill, decode)) and np.all(np.isfinite(log_scales)):
        return
    raise SpecError(
        "calibration",
        f"the measured TTFT {m.ttft_s * 1e3:,.1f} ms and TPOT {m.tpot_s * 1e3:,.2f} ms need"
        f" prefill x{prefill:.2f} and decode x{decode:.2f}, outside {lo:g}-{hi:g}x: the run's"
        " deployment is not the plan's (check its GPU count and layout, its lengths, eager"
        " mode, a prefix cache, the units)",
        {"prefill_scale": float(prefill), "decode_scale": float(decode)},
    )


def fit_scales(
    load_of: LoadOf, setup: InferenceSetup, engine: EnginePreset, measured: ServingMeasurement
) -> Calibration:
    """The (prefill, decode) step scales at which ``load_of`` reproduces ``measured``'s mean
    TTFT and TPOT at its load and lengths (``setup`` otherwise: its prefix cache, speculation):
    Newton's method on log(model / measured) of both, in the log of the scales, from (1, 1);
    refused outside ``SCALE_BOUNDS`` or where no steps converge."""
    m = measured
    if not (m.ttft_s > 0 and m.tpot_s > 0):
        raise SpecError("calibration", "the measured TTFT and TPOT must be > 0", m)
    at = replace(setup, input_len=m.input_len, output_len=m.output_len, lengths=None,
                 num_prompts=None, concurrency=m.concurrency or 1)  # fmt: skip

    def solve(x: np.ndarray) -> LoadPoint:
        scales = (float(np.exp(x[0])), float(np.exp(x[1])))
        return load_of(at, replace(engine, step_scales=scales), m.request_rate)

    x = np.zeros(2)
    before = solve(x)
    r = _residual(before, m)
    steps = 0
    while steps < FIT_STEPS and not np.all(np.abs(r) < FIT_TOLERANCE):
        _refuse_scales(x, m)
        jac = np.column_stack(
            [(_residual(solve(x + JACOBIAN_STEP * e), m) - r) / JACOBIAN_STEP for e in np.eye(2)]
        )
        if not np.all(np.isfinite(jac)) or abs(np.linalg.det(jac)) < 1e-9:
            break
        x = np.clip(x - np.linalg.solve(jac, r), -3.0, 3.0)  # a step never leaves e^+-3
        r = _residual(solve(x), m)
        steps += 1
    if not np.all(np.abs(r) < 10 * FIT_TOLERANCE):
        _refuse_scales(x, m)
        raise SpecError("calibration", "the fit did not converge on the measured TTFT and TPOT")
    _refuse_scales(x, m)
    after = solve(x)
    return Calibration(
        prefill_scale=float(np.exp(x[0])),
        decode_scale=float(np.exp(x[1])),
        measured=m,
        measured_at=(m.ttft_s, m.tpot_s, m.output_tokens_per_s),
        uncalibrated=_means(before),
        calibrated=_means(after),
        steps=steps,
    )


def calibrate(
    model: ModelSpec,
    accelerator: Accelerator,
    precision: Precision,
    setup: InferenceSetup,
    gpus: int,
    engine: EnginePreset,
    measured: ServingMeasurement,
    load_of: LoadOf,
) -> Calibration:
    """A plan's calibration on ``measured``: refused where it was measured on another
    accelerator or engine (``calibration.accelerator``, ``calibration.engine``: the scales are
    that deployment's kernels) or implies more than the peak (``check_feasible``), else
    ``fit_scales``."""
    if measured.accelerator != accelerator.id:
        raise SpecError(
            "calibration.accelerator",
            f"the measurement's scales are its own GPU's: plan on {measured.accelerator}, or"
            f" measure on {accelerator.id}",
            measured.accelerator,
        )
    if measured.engine is not None and measured.engine != engine.name:
        raise SpecError(
            "calibration.engine",
            f"measured with {measured.engine}, planned with {engine.name}: the scales are that"
            " engine's",
            measured.engine,
        )
    lengths = replace(setup, input_len=measured.input_len, output_len=measured.output_len,
                      lengths=None)  # fmt: skip
    check_feasible(model, accelerator, precision, lengths, gpus, measured)
    return fit_scales(load_of, setup, engine, measured)
