"""A finite benchmark run: ``num_prompts`` requests through a closed loop of ``concurrency``,
as ``vllm bench serve --max-concurrency N --num-prompts M`` (and ``genai-perf``,
``sglang.bench_serving`` with a concurrency cap) runs it.

The steady-state model (``serving.load``) assumes the requests in flight are spread evenly over
their lifetimes. A finite run is not: the client starts ``min(N, M)`` requests at once, so the
first wave's prompts queue behind each other for the token budget (their TTFT is a burst's, up
to the whole wave's prefill), the decodes that start early carry the later prompts' chunks, and
with equal lengths the waves stay in step: a finished request's replacement arrives as the one
before it prefilled. Where ``M`` is a few times ``N`` or less, that start-up and the drain at the
end are most of the run, and TTFT, TPOT and throughput (tokens over the run's duration) are the
run's, not the steady state's.

The run is simulated step by step on the engine preset's scheduler rules (vLLM V1 and
TensorRT-LLM's in-flight batching: every step runs the decoding sequences first, then fills the
token budget with waiting prompts' chunks, first come first served; a request holds a slot from
its admission to its last token; at most ``slots`` requests hold one). In a closed loop nothing
depends on time, only on steps (a request arrives when the one before it finishes), so the
schedule is counted in steps first, stretches without prompts in one go (their decoding count
does not change until the next request finishes), and timed afterwards in one call of the
engine's step time for every distinct ``(decoding, prompt tokens)`` step. Latencies are per
request, so their means, medians and p99 are the run's own (no queueing approximation).

Request ``i`` of a length distribution takes its prompt from bin ``i mod n`` and its output from
bin ``7 i mod n`` (16 bins: every pair of prompt and output bins once in 256 requests, a
deterministic stand-in for independent draws). Pipeline parallelism is not simulated.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from estimator.errors import SpecError
from estimator.serving.engine_step import StepTime

__all__ = ["MAX_PROMPTS", "MAX_STEPS", "RunResult", "RunScheduler", "simulate_run"]

MAX_PROMPTS = 20_000  # requests a run may issue
MAX_STEPS = 2_000_000  # engine steps a run may take (a bound on the simulation, never reached
# by a run of MAX_PROMPTS requests at the presets' budgets and the catalog's context lengths)
OUTPUT_STRIDE = 7  # request i's output bin: OUTPUT_STRIDE * i mod n (coprime with 16 bins)


@dataclass(frozen=True, slots=True)
class RunResult:
    """Per-request latencies of a finite run and its totals (seconds, tokens/s)."""

    num_prompts: int
    duration_s: float
    ttft_s: np.ndarray
    tpot_s: np.ndarray  # requests that decode after their first token
    e2e_s: np.ndarray
    output_tokens: float
    steps: int
    mean_running: float  # time-weighted requests holding a slot
    mean_queued: float  # time-weighted requests waiting for one
    mean_decoding: float  # time-weighted sequences decoding per step
    mean_step_s: float
    has_tpot: np.ndarray  # which requests decode after their first token (``tpot_s``'s)

    def slo_attainment(self, ttft_target_s: float | None, tpot_target_s: float | None) -> float:
        """The share of the run's requests whose TTFT and TPOT are within the targets (a
        request without a token after its first meets any TPOT target)."""
        ok = np.ones(self.num_prompts, dtype=bool)
        if ttft_target_s is not None:
            ok &= self.ttft_s <= ttft_target_s
        if tpot_target_s is not None:
            ok[self.has_tpot] &= self.tpot_s <= tpot_target_s
        return float(ok.mean())

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s

    @property
    def requests_per_s(self) -> float:
        return self.num_prompts / self.duration_s


@dataclass(frozen=True, slots=True)
class RunScheduler:
    """The replica's scheduler as a run sees it: a token ``budget`` per step, at most ``slots``
    requests holding a slot, and per decoding sequence the tokens a step runs (``queries``:
    ``k + 1`` when it verifies ``k`` drafts) and emits (``acceptance_length``)."""

    budget: int
    slots: int
    acceptance_length: float = 1.0
    queries: int = 1


# (decoding, prompt tokens, steps, running, waiting for a slot) of a stretch of steps
Segment = tuple[int, int, int, int, int]


def simulate_run(
    step_s: StepTime,
    scheduler: RunScheduler,
    *,
    prompts: tuple[float, ...],
    outputs: tuple[float, ...],
    concurrency: int,
    num_prompts: int,
) -> RunResult:
    """Run ``num_prompts`` requests through ``concurrency`` clients on a replica of
    ``scheduler.slots`` request slots and a token ``scheduler.budget`` per step; ``prompts`` and
    ``outputs``: the bins of the computed prompt tokens and the output lengths (one each: fixed
    lengths). The schedule is counted in steps (``_schedule``), then timed (``_segment_clock``)."""
    if not 1 <= num_prompts <= MAX_PROMPTS:
        raise SpecError("num_prompts", f"must be between 1 and {MAX_PROMPTS:,}", num_prompts)
    if scheduler.slots < 1:
        raise SpecError(
            "num_prompts", "the KV cache holds no sequence of this length", scheduler.slots
        )
    n_in, n_out = len(prompts), len(outputs)
    isl = [max(round(prompts[i % n_in]), 1) for i in range(num_prompts)]
    osl = [max(round(outputs[OUTPUT_STRIDE * i % n_out]), 1) for i in range(num_prompts)]
    # steps each request decodes after its first token (speculative steps emit several)
    accepted = scheduler.acceptance_length
    dec = [math.ceil((o - 1) / accepted) if o > 1 else 0 for o in osl]
    segments, arrival, first = _schedule(isl, dec, concurrency, scheduler)
    seg = np.array(segments, dtype=float)
    d, _, n, held, queue = seg.T
    times, ends_at, clock = _segment_clock(step_s, seg)
    span = n * times  # seconds of each segment
    sent = _end_of(np.array(arrival) - 1, ends_at, clock, times)
    first_s = _end_of(np.array(first), ends_at, clock, times)
    last_s = _end_of(np.array(first) + np.array(dec), ends_at, clock, times)
    decoded = np.array([o - 1 for o in osl], dtype=float)
    has_tpot = decoded > 0
    total = float(clock[-1])
    return RunResult(
        num_prompts=num_prompts,
        duration_s=total,
        ttft_s=first_s - sent,
        tpot_s=(last_s - first_s)[has_tpot] / decoded[has_tpot],
        e2e_s=last_s - sent,
        output_tokens=float(sum(osl)),
        steps=int(n.sum()),
        mean_running=float(np.dot(held, span) / total),
        mean_queued=float(np.dot(queue, span) / total),
        mean_decoding=float(np.dot(d, span) / total),
        mean_step_s=total / float(n.sum()),
        has_tpot=has_tpot,
    )


def _schedule(
    isl: list[int], dec: list[int], concurrency: int, scheduler: RunScheduler
) -> tuple[list[Segment], list[int], list[int]]:
    """The closed loop counted in steps, on the module docstring's scheduler rules: each
    stretch of steps (``Segment``: a step with prompt chunks alone, a stretch of decodes only
    in one go), and for each request the step it arrives before (it is sent at that step's
    start) and the step that emits its first token (its last: + ``dec``). ``isl``: each
    request's prompt tokens; ``dec``: the steps it decodes after its first token."""
    num_prompts = len(isl)
    arrival = [0] * num_prompts
    first = [0] * num_prompts
    waiting: deque[int] = deque(range(min(concurrency, num_prompts)))
    issued = len(waiting)
    prefilling: deque[list[int]] = deque()  # [request, prompt tokens left], admitted
    ends: list[tuple[int, int]] = []  # (finish step, request) of the decoding requests
    decoding = running = done = 0
    segments: list[Segment] = []
    k = 0  # the next step

    def finished(step: int) -> None:
        """Requests whose last token came out of ``step`` leave; their clients send the next."""
        nonlocal decoding, running, done, issued
        while ends and ends[0][0] == step:
            _, r = heapq.heappop(ends)
            decoding -= dec[r] > 0
            running -= 1
            done += 1
            if issued < num_prompts:
                arrival[issued] = step + 1
                waiting.append(issued)
                issued += 1

    while done < num_prompts:
        while waiting and running < scheduler.slots:  # admission, first come first served
            r = waiting.popleft()
            prefilling.append([r, isl[r]])
            running += 1
        if prefilling:  # one step: the decodes first, the prompts' chunks in what is left
            free = scheduler.budget - scheduler.queries * decoding
            tokens, started = _prompt_chunks(prefilling, free)
            segments.append((decoding, tokens, 1, running, len(waiting)))
            for r in started:  # first token out of this step; decodes from the next
                first[r] = k
                if dec[r]:
                    heapq.heappush(ends, (k + dec[r], r))
                    decoding += 1
                else:
                    heapq.heappush(ends, (k, r))
            finished(k)
            k += 1
        else:  # decodes only, until the next request finishes
            step, _ = ends[0]
            segments.append((decoding, 0, step - k + 1, running, len(waiting)))
            finished(step)
            k = step + 1
        if k > MAX_STEPS:
            raise SpecError("num_prompts", f"the run takes over {MAX_STEPS:,} engine steps", k)
    return segments, arrival, first


def _prompt_chunks(prefilling: deque[list[int]], free: int) -> tuple[int, list[int]]:
    """One step's prompt chunks in the ``free`` tokens the decodes leave of the budget, first
    come first served (chunked prefill): the prompt tokens it runs and the requests whose last
    prompt tokens it runs, taken off ``prefilling`` (``[request, prompt tokens left]``)."""
    tokens = 0
    started: list[int] = []
    while prefilling and free > 0:
        entry = prefilling[0]
        take = min(entry[1], free)
        entry[1] -= take
        free -= take
        tokens += take
        if entry[1] == 0:
            prefilling.popleft()
            started.append(entry[0])
    return tokens, started


def _segment_clock(step_s: StepTime, seg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The schedule timed: the step time of each segment (one call of ``step_s`` for every
    distinct ``(decoding, prompt tokens)`` step), each segment's last step and the seconds at
    its end."""
    pairs, index = np.unique(seg[:, :2], axis=0, return_inverse=True)
    per_pair = np.asarray(step_s(pairs[:, 0], pairs[:, 1]), dtype=float).reshape(-1)
    times = per_pair[index.reshape(-1)]
    n = seg[:, 2]
    ends_at = np.cumsum(n).astype(np.int64) - 1  # the last step of each segment
    clock = np.cumsum(n * times)  # seconds at the end of each segment
    return times, ends_at, clock


def _end_of(
    steps: np.ndarray, ends_at: np.ndarray, clock: np.ndarray, times: np.ndarray
) -> np.ndarray:
    """Seconds at the end of each of ``steps`` (-1: the run's start, 0 s), on the segments'
    clock (``_segment_clock``)."""
    i = np.searchsorted(ends_at, steps)
    j = np.minimum(i, len(ends_at) - 1)
    before = np.where(j > 0, clock[np.maximum(j - 1, 0)], 0.0)
    start = np.where(j > 0, ends_at[np.maximum(j - 1, 0)] + 1, 0)
    return np.where(steps < 0, 0.0, before + (steps - start + 1) * times[j])
