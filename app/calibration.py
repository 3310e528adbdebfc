"""A serving request's calibration (``InferenceRequest.calibration``): the measured run read off
the request (a benchmark's JSON or typed values), fitted by the core
(``estimator.serving.calibration``), and the answer's ``calibrated`` block."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from estimator.errors import SpecError

# the serving engine is imported where it is used (as app.answers does): a training answer
# never loads numpy's serving stack
if TYPE_CHECKING:
    from app.resolve import InferencePlan
    from app.schemas.inference import CalibrationIn, InferenceRequest
    from estimator.serving.calibration import Calibration, ServingMeasurement
    from estimator.serving.load import EnginePreset

__all__ = ["calibrated_engine", "calibration_dict", "measurement_of"]


def measurement_of(cal: CalibrationIn, plan: InferencePlan) -> ServingMeasurement:
    """The measured run: the benchmark's JSON where given (``parse_bench``), else the typed
    mean TTFT and TPOT at one load (a concurrency or a request rate), at the plan's lengths
    unless the run's are given."""
    from estimator.serving.calibration import ServingMeasurement, parse_bench

    if cal.bench is not None:
        return parse_bench(cal.bench, cal.accelerator, cal.engine)
    ttft_ms, tpot_ms = cal.ttft_ms, cal.tpot_ms
    if ttft_ms is None or tpot_ms is None:
        name = "ttft_ms" if ttft_ms is None else "tpot_ms"
        raise SpecError(f"calibration.{name}", "required without calibration.bench")
    if (cal.concurrency is None) == (cal.request_rate is None):
        raise SpecError(
            "calibration.concurrency",
            "give the load the run was measured at: a concurrency or a request_rate, one",
            cal.concurrency,
        )
    return ServingMeasurement(
        ttft_s=ttft_ms / 1e3,
        tpot_s=tpot_ms / 1e3,
        input_len=cal.input_len or plan.setup.input_len,
        output_len=cal.output_len or plan.setup.output_len,
        accelerator=cal.accelerator,
        concurrency=cal.concurrency,
        request_rate=cal.request_rate,
        output_tokens_per_s=cal.output_tokens_per_s,
        engine=cal.engine,
    )


def calibrated_engine(
    req: InferenceRequest, plan: InferencePlan, engine: EnginePreset
) -> tuple[EnginePreset, Calibration | None]:
    """``engine`` with the scales fitted on the request's measured run, and the fit; the
    engine as it is without a calibration."""
    if req.calibration is None:
        return engine, None
    from estimator.serving.calibration import calibrate
    from estimator.serving.estimate import estimate_load

    model, accelerator, parallel, setup, precision = plan.specs
    run = partial(estimate_load, model, accelerator, parallel, precision=precision,
                  cluster=plan.cluster)  # fmt: skip

    def load_of(at: Any, preset: EnginePreset, rate: float | None) -> Any:
        return run(at, engine=preset, request_rate=rate)

    measured = measurement_of(req.calibration, plan)
    fit = calibrate(
        model, accelerator, precision, setup, parallel.num_gpus, engine, measured, load_of
    )
    return fit.preset(engine), fit


def _means(means: tuple[float, float, float | None]) -> dict[str, float | None]:
    return dict(zip(("ttft_s", "tpot_s", "output_tokens_per_s"), means, strict=True))


def calibration_dict(fit: Calibration | None, engine: str) -> dict[str, Any] | None:
    """The answer's ``calibrated`` block (``CalibrationOut``)."""
    if fit is None:
        return None
    m = fit.measured
    return {
        "prefill_scale": fit.prefill_scale,
        "decode_scale": fit.decode_scale,
        "accelerator": m.accelerator,
        "engine": m.engine or engine,
        "source": m.source,
        "input_len": m.input_len,
        "output_len": m.output_len,
        "concurrency": m.concurrency,
        "request_rate": m.request_rate,
        "measured": _means(fit.measured_at),
        "uncalibrated": _means(fit.uncalibrated),
        "calibrated": _means(fit.calibrated),
        "steps": fit.steps,
        "note": fit.note,
    }
