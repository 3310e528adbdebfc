"""Whether a serving steady state can happen at all: the compute it implies against the GPUs'
peak (issue 41 item 4: prefill-heavy workloads, long prompts and short answers).

A replica that completes ``r`` requests a second computes, each second, ``r`` prompts' prefill
and ``r`` requests' decode steps. Its tensor cores cannot run more than their dense peak at
the precision's GEMM format (``Accelerator.peak``, ``Precision.compute``) times its GPUs, so a
steady state (a planner's answer, or a measured throughput or TTFT a user calibrates with) that
implies more is impossible. For a prefill-heavy workload the prefill term is most of it; a
published or measured run above the peak almost always computed fewer prompt tokens than it
was sent: its prompts shared prefixes the engine's prefix cache served (vLLM V1 caches
prefixes by default, SGLang's radix cache too, TensorRT-LLM's KV block reuse).

The work is the project's own FLOP count (``counts.flops.forward_flops``, model FLOPs: causal
attention, active experts only), ``F(n)`` the forward over the first ``n`` tokens of a sequence:

- **Prefill** of a prompt of ``x`` tokens, ``c`` of them from the prefix cache:
  ``F(x) - F(c)``, less the output head over all but the last token (a prefill computes the
  logits of its last token only). The new queries attend to every earlier key, cached or not
  (the causal pairs of ``x`` less those of ``c``, as ``serving.steps.prefill_kinds`` times it).
- **Decode** of ``y`` output tokens: the first comes out of the prefill, the other ``y - 1``
  are one token each at positions ``x .. x + y - 2``: ``F(x + y - 1) - F(x)``. Speculative
  decoding runs at least these rows (a verification step runs ``k + 1`` rows per sequence and
  emits at most that many tokens), and a drafter's work is left out: a lower bound.
- **Length distributions** (``spec.lengths``): the mean of each over the distribution's
  equally likely bins, prompt and output lengths independent (the load model's reading); the
  prefix cache's hit takes the same share of every prompt (``serving.engine_step.workload_of``).

Everything counted is work the GPUs must do (the lower bound of what they do: no attention
recomputation, no padding, no drafter, every GEMM at the fastest format the precision uses),
so a rate above the peak is impossible, whatever the kernels' efficiency; one below it may
still be implausible (prefill GEMMs reach some 60-80 % of peak), which the ``utilization``
field shows without judging.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from estimator.counts.flops import forward_flops
from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.lengths import LengthDistribution, fixed_lengths
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.memory.inference import InferenceSetup
from estimator.xp import Num

__all__ = [
    "ComputeRate",
    "InfeasibleMeasurement",
    "Measured",
    "MeasuredCheck",
    "check_measured",
    "feasible_hit_rate",
    "implied_compute",
    "request_flops",
    "require_feasible",
]

# Bisection steps for the least feasible hit rate: 2^-30 of the range, far below a token
HIT_RATE_STEPS = 30

_CACHE_OFF = (
    "measure with the prefix cache off (vLLM --no-enable-prefix-caching, SGLang"
    " --disable-radix-cache, TensorRT-LLM KvCacheConfig enable_block_reuse=False) or state"
    " the run's prefix_cache_hit_rate"
)


@dataclass(frozen=True, slots=True)
class ComputeRate:
    """The compute a steady state of ``requests_per_s`` implies on ``gpus`` GPUs (FLOPs and
    FLOP/s), by phase, against their dense peak at ``compute_format``."""

    requests_per_s: float
    prompt_tokens: float  # mean per request, the cached ones included
    cached_tokens: float  # mean per request, from the prefix cache
    prefill_flop_per_request: float
    decode_flop_per_request: float
    prefill_flop_per_s: float
    decode_flop_per_s: float
    peak_flop_per_s: float  # the GPUs' together
    compute_format: str
    gpus: int

    @property
    def total_flop_per_s(self) -> float:
        return self.prefill_flop_per_s + self.decode_flop_per_s

    @property
    def utilization(self) -> float:
        """The implied compute over the peak (above 1: impossible)."""
        return self.total_flop_per_s / self.peak_flop_per_s

    @property
    def feasible(self) -> bool:
        return self.total_flop_per_s <= self.peak_flop_per_s


def _distribution(setup: InferenceSetup) -> LengthDistribution:
    if setup.lengths is not None:
        return setup.lengths
    return fixed_lengths(setup.input_len, setup.output_len)


def _prefix_work(model: ModelSpec, n: Num) -> Num:
    """``F(n)``: model FLOPs of a forward over the first ``n`` tokens of one sequence."""
    return forward_flops(model, n).total_causal


def _prefill(model: ModelSpec, prompts: np.ndarray, cached: np.ndarray) -> np.ndarray:
    """Each prompt's prefill FLOPs with ``cached`` of its tokens from the prefix cache: the
    forward over the rest, the output head over its last token only."""
    head = forward_flops(model, 1).output_head  # per token
    work = _prefix_work(model, prompts) - _prefix_work(model, cached)
    return np.asarray(work - head * np.maximum(prompts - cached - 1, 0.0), dtype=float)


def request_flops(
    model: ModelSpec, setup: InferenceSetup, hit_rate: float | None = None
) -> tuple[float, float]:
    """(prefill, decode) FLOPs of a mean request of ``setup``'s lengths, ``hit_rate`` of each
    prompt from the prefix cache (default: the setup's, as the estimator takes it:
    ``InferenceSetup.cached_prompt_tokens``, all but the last token at most)."""
    dist = _distribution(setup)
    prompts = np.asarray(dist.input_lens, dtype=float)
    outputs = np.asarray(dist.output_lens, dtype=float)
    share = setup.cached_prompt_tokens / setup.input_len if hit_rate is None else hit_rate
    cached = np.minimum(np.floor(share * prompts), prompts - 1)
    prefill = float(_prefill(model, prompts, cached).mean())
    x, y = np.meshgrid(prompts, np.maximum(outputs, 1.0))
    decode = np.asarray(_prefix_work(model, x + y - 1) - _prefix_work(model, x), dtype=float)
    return prefill, float(decode.mean())


def implied_compute(
    model: ModelSpec,
    accelerator: Accelerator,
    precision: Precision,
    setup: InferenceSetup,
    requests_per_s: float,
    gpus: int,
) -> ComputeRate:
    """The compute ``requests_per_s`` completed requests of ``setup``'s lengths (its prefix
    cache's hit rate taken off each prompt) imply on ``gpus`` GPUs, against their dense peak at
    the precision's GEMM format."""
    if gpus < 1:
        raise SpecError("gpus", "must be >= 1", gpus)
    if not requests_per_s >= 0:
        raise SpecError("requests_per_s", "must be >= 0", requests_per_s)
    fmt = precision.compute
    prefill, decode = request_flops(model, setup)
    dist = _distribution(setup)
    return ComputeRate(
        requests_per_s=requests_per_s,
        prompt_tokens=dist.mean_input,
        cached_tokens=dist.mean_input * setup.cached_prompt_tokens / setup.input_len,
        prefill_flop_per_request=prefill,
        decode_flop_per_request=decode,
        prefill_flop_per_s=requests_per_s * prefill,
        decode_flop_per_s=requests_per_s * decode,
        peak_flop_per_s=gpus * accelerator.peak(fmt),
        compute_format=fmt,
        gpus=gpus,
    )


def feasible_hit_rate(
    model: ModelSpec, setup: InferenceSetup, requests_per_s: float, peak_flop_per_s: float
) -> float | None:
    """The least prefix-cache hit rate at which ``requests_per_s`` requests of ``setup``'s
    lengths (their prefill and decode) fit in ``peak_flop_per_s``; 0.0
    where they fit computed whole, None where not even a cache holding all but each prompt's
    last token makes them fit (then the prefix cache cannot be the cause). Bisection: the
    prefill's work falls as the hit rate rises."""

    def fits(hit: float) -> bool:
        prefill, dec = request_flops(model, setup, hit)
        return requests_per_s * (prefill + dec) <= peak_flop_per_s

    if fits(0.0):
        return 0.0
    if not fits(1.0):  # cached tokens are capped at all but the last
        return None
    lo, hi = 0.0, 1.0
    for _ in range(HIT_RATE_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


@dataclass(frozen=True, slots=True)
class Measured:
    """A measured steady state of one replica (a calibration input): its output tokens/s or
    completed requests/s, and its TTFT (any statistic: every request's prefill takes at least
    its prompt's work over the GPUs' peak)."""

    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    ttft_s: float | None = None


@dataclass(frozen=True, slots=True)
class MeasuredCheck:
    """What a measurement implies: the steady state's compute (from its throughput) and a lone
    prompt's prefill within its TTFT (the shortest prompt of a distribution), each with the
    least prefix-cache hit rate that makes it feasible (None: none does), and a warning per
    impossible one (empty: feasible)."""

    throughput: ComputeRate | None
    ttft: ComputeRate | None
    throughput_hit_rate: float | None
    ttft_hit_rate: float | None
    warnings: tuple[tuple[str, float, str], ...]  # (the measured field, its value, the message)

    @property
    def feasible(self) -> bool:
        return not self.warnings


class InfeasibleMeasurement(SpecError):
    """A measured throughput or TTFT that implies more compute than the GPUs' peak: the field
    names the measurement, the rule the implied rate, the peak and the likely cause."""


def _tflops(flop_per_s: float) -> str:
    return f"{flop_per_s / 1e12:,.0f} TFLOP/s"


def _warning(what: str, rate: ComputeRate, hit: float | None, current: float) -> str:
    """The message of an impossible measurement: the implied compute against the peak, and
    the prefix cache's share of the prompts that would explain it."""
    said = (
        f"{what} implies {_tflops(rate.prefill_flop_per_s)} of prefill"
        + (f" and {_tflops(rate.decode_flop_per_s)} of decode" if rate.decode_flop_per_s else "")
        + f" on {rate.gpus} GPU{'s' if rate.gpus > 1 else ''}, {rate.utilization:.2f}x their"
        f" dense {rate.compute_format} peak of {_tflops(rate.peak_flop_per_s)}: no GPU runs"
        " that"
    )
    hit_now = f" (given: {current:.0%})" if current else ""
    if hit is None:
        return (
            f"{said}, and not even a prefix cache holding all but each prompt's last token"
            " explains it: check the measurement's units, GPU count and lengths"
        )
    return (
        f"{said}. Prefix-cache hits are the likely cause: the engine computed fewer prompt"
        f" tokens than it was sent; a hit rate of at least {hit:.0%}{hit_now} makes it"
        f" feasible. To calibrate, {_CACHE_OFF}"
    )


def check_measured(
    model: ModelSpec,
    accelerator: Accelerator,
    precision: Precision,
    setup: InferenceSetup,
    gpus: int,
    measured: Measured,
) -> MeasuredCheck:
    """Check a measured steady state of ``setup``'s lengths on a replica of ``gpus`` GPUs
    against their peak: its throughput (``requests_per_s``, else output tokens/s over the mean
    output) and its TTFT (one prompt's prefill, the shortest a distribution has, in that
    time). Answers with the implied rates and a warning for each that exceeds the peak, saying
    prefix-cache hits are the likely cause and the hit rate that would make it feasible."""
    dist = _distribution(setup)
    rps = measured.requests_per_s
    if rps is None and measured.output_tokens_per_s is not None:
        rps = measured.output_tokens_per_s / dist.mean_output
    hit = setup.prefix_cache_hit_rate
    warnings: list[tuple[str, float, str]] = []
    throughput = ttft = None
    throughput_hit = ttft_hit = None
    if rps is not None:
        throughput = implied_compute(model, accelerator, precision, setup, rps, gpus)
        throughput_hit = feasible_hit_rate(model, setup, rps, throughput.peak_flop_per_s)
        if not throughput.feasible:
            field = "output_tokens_per_s" if measured.requests_per_s is None else "requests_per_s"
            what = f"{rps:,.3g} requests/s of {dist.mean_input:,.0f} + {dist.mean_output:,.0f}"
            message = _warning(f"{what} tokens", throughput, throughput_hit, hit)
            warnings.append((field, getattr(measured, field), message))
    if measured.ttft_s is not None:
        if not measured.ttft_s > 0:
            raise SpecError("measured.ttft_s", "must be > 0", measured.ttft_s)
        shortest = InferenceSetup(
            input_len=max(int(min(dist.input_lens)), 1), output_len=1, prefix_cache_hit_rate=hit
        )
        # one output token: the prefill's, no decode step
        ttft = implied_compute(model, accelerator, precision, shortest, 1 / measured.ttft_s, gpus)
        ttft_hit = feasible_hit_rate(model, shortest, ttft.requests_per_s, ttft.peak_flop_per_s)
        if not ttft.feasible:
            what = f"a TTFT of {measured.ttft_s * 1e3:,.4g} ms for {shortest.input_len:,} tokens"
            warnings.append(("ttft_s", measured.ttft_s, _warning(what, ttft, ttft_hit, hit)))
    return MeasuredCheck(throughput, ttft, throughput_hit, ttft_hit, tuple(warnings))


def require_feasible(check: MeasuredCheck) -> MeasuredCheck:
    """``check`` (``check_measured``'s answer), refusing an impossible measurement:
    ``InfeasibleMeasurement`` on the first measured field that implies more than the peak
    (``measured.<field>``), its message the warning's."""
    if check.warnings:
        field, value, message = check.warnings[0]
        raise InfeasibleMeasurement(f"measured.{field}", message, value)
    return check
