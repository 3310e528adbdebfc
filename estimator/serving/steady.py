"""A replica's steady state under load in seconds (``estimate_load``'s steps): the scheduler's
step counts (``serving.load``) timed by the replica's engine step (``serving.engine_step``).

1. ``group_scheduler``: one attention data-parallel group's scheduler, its share of the load,
   its KV cache's slots, its token budget and its capacity.
2. ``_open_loop_counts`` (Poisson arrivals; a closed loop's are ``load.steady_state_steps``):
   the decoding level and the step counts.
3. ``_own_prefill``: a request's own prefill steps and the step under way when it arrives.
4. ``_prefill_queue``: the prefill queue's wait, in steps and in time, and the queue for a slot.
5. ``_latencies``: TTFT's mean and quantiles, end to end's, and the share within the targets.
6. ``steady_state``: the ``LoadPoint``; ``finite_run``: a finite run's simulated latencies and
   throughput in place of the steady state's (``serving.run``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from estimator.errors import SpecError
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceMemory, InferenceSetup
from estimator.serving.engine_step import StepTime, Workload, workload_of
from estimator.serving.load import (
    BUDGET_BOUND_UTILIZATION,
    EnginePreset,
    LoadPoint,
    Regime,
    budget_cap,
    decode_steps,
    exceed_probability,
    md1_wait,
    prefill_wait,
    residual_step,
    steady_state_steps,
    sum_quantiles,
)
from estimator.serving.run import RunScheduler, simulate_run

__all__ = [
    "MAX_REQUEST_RATE",
    "TTFT_QUANTILES",
    "GroupScheduler",
    "check_finite_run",
    "finite_run",
    "group_scheduler",
    "steady_state",
]

MAX_REQUEST_RATE = 1e6  # requests/s a steady state is asked at, at most
TTFT_QUANTILES = (0.5, 0.9, 0.99)


class GroupScheduler(NamedTuple):
    """One attention data-parallel group's scheduler under its share of the load: the engine
    preset (the group's budget and cap), the clients or arrivals it sees, the tokens a step
    runs and emits per decoding sequence, the workload's lengths, its step time, its KV cache's
    slots and its capacity (requests/s at the most sequences the budget, the cap and the KV
    cache allow)."""

    preset: EnginePreset  # the group's (``EnginePreset.per_group``)
    groups: int
    busy: float  # groups carrying load
    clients: int  # the replica's requests kept in flight (closed loop)
    concurrency: float  # the group's share of them
    request_rate: float | None  # the replica's arrivals (open loop)
    rate: float | None  # the group's share of them
    accepted: float  # tokens a step emits per decoding sequence
    queries: int  # tokens a step runs per decoding sequence
    workload: Workload
    dec: float  # steps a request decodes
    step_s: StepTime
    kv_slots: int
    slots: int
    budget: int
    top: float  # the most sequences decoding
    capacity: float  # requests/s, one group's
    pp: int


def check_finite_run(request_rate: float | None, layout: Parallelism) -> None:
    """Refuse, before any work, a finite run (``setup.num_prompts``, ``serving.run``) the
    simulation does not cover: an open loop, pipeline parallelism, attention data parallel."""
    if request_rate is not None:
        raise SpecError(
            "num_prompts", "a finite run is simulated in a closed loop (concurrency)", None
        )
    if layout.pp > 1:
        raise SpecError("num_prompts", "a finite run is simulated for pp = 1 only", layout.pp)
    if layout.dp > 1:
        raise SpecError(
            "num_prompts",
            "a finite run is simulated without attention data parallel (dp = 1)",
            layout.dp,
        )


def group_scheduler(
    setup: InferenceSetup,
    layout: Parallelism,
    preset: EnginePreset,
    busy: float,
    memory: InferenceMemory,
    step_s: StepTime,
    request_rate: float | None,
) -> GroupScheduler:
    """The scheduler of one of ``layout.dp`` attention data-parallel groups (``busy`` of them
    carrying load) on its share of the load: the closed loop's clients or the arrivals spread
    evenly (the replica's rates are the busy groups' together), ``preset`` the group's. An
    on-demand KV cache holds a sequence's live context on average (its mean while decoding).
    Refused where the KV cache holds no request."""
    groups = layout.dp
    spec = setup.speculative
    accepted = 1.0 if spec is None else spec.acceptance_length  # tokens a step emits each
    q = setup.queries  # tokens a step runs per decoding sequence
    w = workload_of(setup)
    new, osl = w.mean_new, w.mean_output  # the means drive the flow balance
    dec = decode_steps(osl, accepted)  # steps a request decodes
    live = min(w.context / max(setup.input_len + setup.output_len, 1), 1.0)
    kv_slots = preset.kv_slots(memory, layout.tp * groups, live_share=live) // groups
    slots = preset.slots(kv_slots)
    budget = preset.token_budget
    if slots < 1:
        field_name = "concurrency" if request_rate is None else "request_rate"
        value = setup.concurrency if request_rate is None else request_rate
        raise SpecError(
            field_name,
            f"no request fits: the KV cache left beside the weights holds no sequence of"
            f" {setup.input_len} + {setup.output_len} tokens on this layout (more GPUs a"
            " replica, a lower precision or shorter requests)",
            value,
        )
    top = min(budget_cap(new, osl, budget, accepted, q), float(slots))
    top_tau = float(step_s(top, top * new / dec))
    return GroupScheduler(
        preset=preset,
        groups=groups,
        busy=busy,
        clients=setup.concurrency,
        concurrency=max(setup.concurrency / groups, 1.0),
        request_rate=request_rate,
        rate=None if request_rate is None else request_rate / groups,
        accepted=accepted,
        queries=q,
        workload=w,
        dec=dec,
        step_s=step_s,
        kv_slots=kv_slots,
        slots=slots,
        budget=budget,
        top=top,
        capacity=top / (dec * top_tau),
        pp=layout.pp,
    )


def _open_loop_counts(s: GroupScheduler, rate: float) -> tuple[dict[str, float], bool]:
    """The step counts of Poisson arrivals at ``rate`` (the group's) and whether they overload
    it: the decoding level where arrivals equal completions, ``D = rate dec tau(D)``.
    ``D - rate dec tau(D)`` rises with ``D``: its root from one array evaluation on a grid (the
    step time is smooth in ``D``), then refined by fixed-point steps from the bracket; the
    prefill queue at that level (``load.prefill_wait``), its wait unbounded when overloaded."""
    w, dec, top, step_s = s.workload, s.dec, s.top, s.step_s
    new, osl = w.mean_new, w.mean_output
    overloaded = rate >= s.capacity
    grid = top * np.linspace(0.0, 1.0, 65)[1:]
    gap = grid - rate * dec * step_s(grid, grid * new / dec)
    k = int(np.searchsorted(gap, 0.0))
    d = float(grid[min(k, len(grid) - 1)]) if k < len(grid) else top
    for _ in range(8):
        nxt = min(rate * dec * float(step_s(d, d * new / dec)), top)
        if abs(nxt - d) <= 1e-6 * max(d, 1.0):
            d = nxt
            break
        d = nxt
    service, rho, wait = prefill_wait(d, new, osl, s.budget, s.accepted, s.queries, w.input_scv)
    counts = {
        "running": d + d * (service + wait) / dec if not overloaded else float(s.slots),
        "decoding": d,
        "queued": 0.0,
        "prompt_tokens": d * new / dec,
        "service_steps": service,
        "wait_steps": wait if not overloaded else math.inf,
        "rho": min(rho, 1.0),
        "budget_bound": float(d >= top * (1 - 1e-6)),
    }
    return counts, overloaded


def _counts(s: GroupScheduler) -> tuple[dict[str, float], bool]:
    """The group's step counts (``load.steady_state_steps``' keys) and whether it is
    overloaded: a closed loop's from the scheduler's flow balance, an open loop's at its
    fixed point (``_open_loop_counts``)."""
    if s.rate is not None:
        return _open_loop_counts(s, s.rate)
    w = s.workload
    counts = steady_state_steps(
        isl=w.mean_new, osl=w.mean_output, engine=s.preset, kv_slots=s.kv_slots,
        concurrency=s.concurrency, acceptance_length=s.accepted, queries=s.queries,
        input_scv=w.input_scv,
    )  # fmt: skip
    return counts, False


class OwnPrefill(NamedTuple):
    """A request's own prefill: ``services``, the seconds of its prefill steps and of the step
    under way on its arrival, one per length bin then one per TTFT quantile's prompt length;
    the mean step (``tau``), the step a decoding sequence runs in (``tau_decode``), a step
    of the decodes alone (``bare``) and one carrying a prompt's chunk too (``loaded``), and
    that chunk's tokens over the ``pp`` micro-batches (``chunk``)."""

    services: np.ndarray
    tau: float
    tau_decode: float
    bare: float
    loaded: float
    chunk: float


def _own_prefill(s: GroupScheduler, counts: dict[str, float]) -> OwnPrefill:
    """A request's own prefill: its prompt's service steps, each carrying a chunk of it; over
    the distribution's bins (the mean TTFT) and at its TTFT quantiles' prompt lengths. With
    pipeline parallelism a chunk rides in one micro-batch through every stage (an engine
    schedules a request in one batch in flight at a time): its latency is a step whose
    micro-batches each hold a whole chunk, pp stage times of it, not the step that spreads
    the chunks' tokens over the pp micro-batches (the throughput's cycle).

    A request arrives while a step of the others runs and waits for its end. The steps carry
    another request's prompt chunk (a fraction pi of them: the others' prompt tokens a step
    carries on average, over a chunk) or only decodes. A Poisson arrival lands at a random
    instant: the step's residual life, ``E[tau^2] / (2 E[tau])`` (long prompt steps the
    likelier hit, ``load.residual_step``). A closed loop's client sends its next request as its
    last one ends, at a step's end: it waits for the whole step just launched (none when no
    other request runs)."""
    w, pp = s.workload, s.pp
    d, running = counts["decoding"], counts["running"]
    others = counts["prompt_tokens"] * max(running - 1, 0) / max(running, 1)
    free = s.budget - s.queries * d
    own = np.array(w.own_new + tuple(w.quantile_new(x) for x in TTFT_QUANTILES))
    chunk = pp * min(w.prompt_new, free)  # a step carrying one prompt's chunk
    chunks = np.concatenate(
        ([counts["prompt_tokens"], others, 0.0, chunk], pp * np.minimum(own, free))
    )
    times = s.step_s(np.full(len(chunks), d), chunks)
    services = np.maximum(1.0, own / free) * times[4:]
    pi = min(others / (chunk / pp), 1.0) if chunk else 0.0
    bare, loaded = float(times[2]), float(times[3])
    if s.rate is not None:
        services = services + residual_step(bare, loaded, pi)
    else:
        busy_others = min(max(running - 1, 0.0), 1.0)
        services = services + busy_others * (pi * loaded + (1 - pi) * bare)
    return OwnPrefill(services, float(times[0]), float(times[1]), bare, loaded, chunk)


class Queue(NamedTuple):
    """What a request waits before its own prefill: the prefill queue's mean wait (seconds)
    at its utilization, the queue for a slot (seconds), and the group's completions
    (requests/s)."""

    wait_s: float
    rho: float
    queue_s: float
    requests_per_s: float


def _prefill_queue(
    s: GroupScheduler, counts: dict[str, float], pre: OwnPrefill, overloaded: bool
) -> Queue:
    """The prefill queue's wait, the longer of its two readings. In steps: the token budget's
    queue (``counts``' wait steps, each a mean step). In time: each prompt adds its tokens'
    work to the steps it rides (a step's time with a chunk over one without, per token:
    ``(tau(D, chunk) - tau(D, 0)) / chunk``, times its mean computed tokens), and prompts
    arriving at the completions' rate queue behind each other's work (M/G/1: the prompt
    length's spread in scv, ``load.md1_wait``); a closed loop's request never waits for
    itself. The queue for a slot: a closed loop's clients beyond the slots, over the
    completions (Little's law)."""
    w, running = s.workload, counts["running"]
    req_per_s = counts["decoding"] / s.dec / pre.tau  # requests finishing a step, per second
    wait_s = counts["wait_steps"] * pre.tau
    rho = counts["rho"]
    work = max(pre.loaded - pre.bare, 0.0) / pre.chunk * w.mean_new if pre.chunk else 0.0
    others_share = 1.0 if s.rate is not None else max(running - 1, 0.0) / max(running, 1.0)
    rho_time = req_per_s * work * others_share
    if rho_time >= 1 and not overloaded:
        rho_time = BUDGET_BOUND_UTILIZATION
    time_wait = float(md1_wait(work, rho_time, w.input_scv))
    if time_wait > wait_s:
        wait_s, rho = time_wait, rho_time
    queue_s = counts["queued"] / req_per_s if counts["queued"] else 0.0
    return Queue(wait_s, rho, queue_s, req_per_s)


def _regime(counts: dict[str, float], overloaded: bool) -> Regime:
    """What bounds the steady state: overload, the slots, the token budget, or nothing (a
    light load, at most about one sequence decoding, or a shared one)."""
    if overloaded:
        return "overloaded"
    if counts["queued"] > 0:
        return "slot-limited"
    if counts["budget_bound"]:
        return "budget-limited"
    return "light" if counts["decoding"] <= 1.5 else "shared"


def _within_targets(
    services: np.ndarray,
    wait_s: float,
    rho: float,
    queue_s: float,
    tpot_s: float,
    targets: tuple[float | None, float | None],
    overloaded: bool,
) -> float:
    """The share of requests whose TTFT (the queue for a slot, the request's own prefill, one
    of the equally likely ``services``, and the prefill queue's wait) and TPOT (every request's
    the replica's step) are within ``targets``; none when overloaded and a TTFT target is set."""
    ttft_target, tpot_target = targets
    within = 1.0
    if ttft_target is not None:
        over = exceed_probability(services, wait_s, rho, ttft_target - queue_s)
        within = 0.0 if overloaded else 1.0 - float(over)
    if tpot_target is not None and tpot_s > tpot_target:
        within = 0.0
    return within


class Latencies(NamedTuple):
    """A request's TTFT (mean, and at ``TTFT_QUANTILES``), its end to end at the same
    quantiles, and the share of requests within the targets (None without targets)."""

    ttft_s: float
    ttft_q: tuple[float, ...]
    e2e_q: tuple[float, ...]
    attainment: float | None


def _latencies(
    s: GroupScheduler,
    pre: OwnPrefill,
    queue: Queue,
    overloaded: bool,
    targets: tuple[float | None, float | None],
) -> Latencies:
    """TTFT: the queue for a slot, the prefill queue's wait and the request's own prefill. A
    request's own prefill and its wait are independent: the quantiles of their sum
    (``load.sum_quantiles``), never below the prefill's own quantile (the bins resolve the tail
    coarsely). End to end: the TTFT plus the request's own decode steps, its output length
    independent of its prompt's and of its wait (every pair of the two distributions' bins,
    equally likely). Overloaded, the quantiles are infinite."""
    w, services = s.workload, pre.services
    wait_s, rho, queue_s = queue.wait_s, queue.rho, queue.queue_s
    bins = len(w.own_new)
    service_s = float(np.mean(services[:bins]))
    at_quantile = dict(zip(TTFT_QUANTILES, services[bins:].tolist(), strict=True))
    ttft = queue_s + wait_s + service_s
    summed = sum_quantiles(services[:bins], wait_s, rho, TTFT_QUANTILES)
    both = dict(zip(TTFT_QUANTILES, summed, strict=True))

    def ttft_at(quantile: float) -> float:
        if overloaded:
            return math.inf
        return float(queue_s + max(at_quantile[quantile], both[quantile]))

    outputs = (w.mean_output,) if w.lengths is None else w.lengths.output_lens
    decoding = np.array([decode_steps(o, s.accepted) for o in outputs]) * pre.tau_decode
    e2e_bins = (services[:bins, None] + decoding[None, :]).ravel()
    e2e_q: tuple[float, ...] = (math.inf,) * 3
    if not overloaded:
        e2e_q = tuple(queue_s + x for x in sum_quantiles(e2e_bins, wait_s, rho, TTFT_QUANTILES))
    attainment = None
    if targets[0] is not None or targets[1] is not None:
        attainment = _within_targets(
            services[:bins], wait_s, rho, queue_s, pre.tau_decode / s.accepted, targets,
            overloaded,
        )  # fmt: skip
    return Latencies(ttft, tuple(ttft_at(x) for x in TTFT_QUANTILES), e2e_q, attainment)


def steady_state(
    s: GroupScheduler, ttft_target_s: float | None, tpot_target_s: float | None
) -> LoadPoint:
    """The replica's steady state (the busy groups' counts and rates together): the group's
    step counts (``_counts``), a request's own prefill (``_own_prefill``), its waits
    (``_prefill_queue``) and its latencies (``_latencies``); TPOT the step a decoding sequence
    runs in over the tokens it emits. An open loop below capacity completes what arrives: its
    rate exactly (the level the latencies are read at balances it to the fixed point's
    tolerance)."""
    counts, overloaded = _counts(s)
    pre = _own_prefill(s, counts)
    queue = _prefill_queue(s, counts, pre, overloaded)
    lat = _latencies(s, pre, queue, overloaded, (ttft_target_s, tpot_target_s))
    busy, tau, tpot = s.busy, pre.tau, pre.tau_decode / s.accepted
    completed = busy * queue.requests_per_s if s.rate is None or overloaded else busy * s.rate
    return LoadPoint(
        engine=s.preset.name,
        concurrency=None if s.request_rate is not None else float(s.clients),
        request_rate=s.request_rate,
        regime=_regime(counts, overloaded),
        running=busy * counts["running"],
        decoding=busy * counts["decoding"],
        queued=busy * counts["queued"],
        ttft_s=lat.ttft_s,
        tpot_s=tpot,  # a step emits ``accepted`` tokens per sequence
        e2e_s=lat.ttft_s + s.dec * pre.tau_decode,
        ttft_p50_s=lat.ttft_q[0],
        ttft_p90_s=lat.ttft_q[1],
        ttft_p99_s=lat.ttft_q[2],
        step_s=tau,
        prefill_steps=counts["service_steps"],
        requests_per_s=completed,
        output_tokens_per_s=completed * s.workload.mean_output,
        capacity_requests_per_s=s.groups * s.capacity,
        lengths=s.workload.name,
        tpot_p50_s=tpot,
        tpot_p99_s=tpot,
        e2e_p50_s=lat.e2e_q[0],
        e2e_p90_s=lat.e2e_q[1],
        e2e_p99_s=lat.e2e_q[2],
        slo_attainment=lat.attainment,
        goodput_requests_per_s=None if lat.attainment is None else lat.attainment * completed,
        prefill_time_share=max(tau - pre.bare, 0.0) / tau if tau > 0 else 0.0,
    )


def finite_run(
    s: GroupScheduler,
    steady: LoadPoint,
    num_prompts: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
) -> LoadPoint:
    """A finite run of ``num_prompts`` requests at ``s.clients`` in flight, simulated step
    by step (``serving.run.simulate_run``): the run's own latencies (means and quantiles over
    its requests) and throughput in place of ``steady``'s; regime and capacity the steady
    state's."""
    w = s.workload
    run = simulate_run(
        s.step_s,
        RunScheduler(s.budget, s.slots, acceptance_length=s.accepted, queries=s.queries),
        prompts=w.own_new,
        outputs=(w.mean_output,) if w.lengths is None else w.lengths.output_lens,
        concurrency=s.clients,
        num_prompts=num_prompts,
    )
    ttft_q = np.quantile(run.ttft_s, TTFT_QUANTILES)
    e2e_run = np.quantile(run.e2e_s, TTFT_QUANTILES)
    tpot_q = np.quantile(run.tpot_s, (0.5, 0.99)) if run.tpot_s.size else (steady.tpot_s,) * 2
    attained = None
    if steady.slo_attainment is not None:
        attained = run.slo_attainment(ttft_target_s, tpot_target_s)
    return replace(
        steady,
        running=run.mean_running,
        decoding=run.mean_decoding,
        queued=run.mean_queued,
        ttft_s=float(run.ttft_s.mean()),
        tpot_s=float(run.tpot_s.mean()) if run.tpot_s.size else steady.tpot_s,
        e2e_s=float(run.e2e_s.mean()),
        ttft_p50_s=float(ttft_q[0]),
        ttft_p90_s=float(ttft_q[1]),
        ttft_p99_s=float(ttft_q[2]),
        step_s=run.mean_step_s,
        requests_per_s=run.requests_per_s,
        output_tokens_per_s=run.output_tokens_per_s,
        tpot_p50_s=float(tpot_q[0]),
        tpot_p99_s=float(tpot_q[1]),
        num_prompts=run.num_prompts,
        duration_s=run.duration_s,
        e2e_p50_s=float(e2e_run[0]),
        e2e_p90_s=float(e2e_run[1]),
        e2e_p99_s=float(e2e_run[2]),
        slo_attainment=attained,
        goodput_requests_per_s=None if attained is None else attained * run.requests_per_s,
    )
