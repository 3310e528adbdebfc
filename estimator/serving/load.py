"""Serving under load: TTFT, TPOT and throughput of a continuous-batching engine in steady state.

A replica runs engine steps. Each step carries ``D`` decoding sequences (one token each) and
``P`` prompt tokens (chunks of prompts being prefilled), within the engine's token budget ``B``
(``max_num_batched_tokens``) and sequence cap ``S`` (``max_num_seqs``); the KV cache holds at
most ``K`` sequences (``EnginePreset.kv_slots``: the engine's share of GPU memory for it,
vLLM's ``gpu_memory_utilization``, TensorRT-LLM's ``free_gpu_memory_fraction``, SGLang's
``mem_fraction_static``, over each sequence's whole context). The model counts steps first and
times them after:

- **Flow balance.** A request prefills ``ISL`` tokens, then decodes ``OSL - 1`` steps (its first
  token comes out of its last prefill step). With ``D`` sequences decoding, requests finish at
  ``r = D / (OSL - 1)`` per step, so prompts need ``P = r ISL`` tokens per step, and
  ``D + P <= B`` caps ``D`` at ``B (OSL - 1) / (OSL - 1 + ISL)``.
- **The prefill stage** is a queue served ``B - D`` tokens a step, first come first served (as
  vLLM's and TensorRT-LLM's schedulers take waiting prompts): a prompt takes
  ``s = max(1, ISL / (B - D))`` steps once at the head, at utilization ``rho = r ISL / (B - D)``,
  and waits ``s rho / (2 (1 - rho))`` steps on average before (M/D/1: deterministic service).
- **Closed loop** (``concurrency`` N requests kept in flight, as ``vllm bench serve
  --max-concurrency``): ``M = min(N, S, K)`` run and ``N - M`` queue for a slot. Little's law on
  the running requests, ``M = D + r T``, with ``T`` the steps a request spends waiting for and
  in prefill, fixes ``D`` (bisection: the right side grows with ``D``); past the budget's cap
  the extra requests wait in the prefill queue. **Open loop** (Poisson arrivals at ``rate``
  req/s): ``D = rate (OSL - 1) tau(D)``, by fixed-point iteration; at or past the capacity (the
  largest ``D`` the budget, the sequence cap and the KV cache allow) the queue grows without
  bound and the answer says so (``regime = "overloaded"``).
- **Step times** come from the same kernel-level costs as the single estimate: a step's GEMMs
  run over its ``D + P`` rows at once (weights read once: ``mixed`` engines, vLLM V1 and
  TensorRT-LLM's in-flight batching), or as separate prefill and decode batches (SGLang's default:
  decoding pauses while a prefill batch runs); decode attention reads each sequence's KV cache at
  the mean context ``ISL + OSL / 2``; a prompt chunk's attention, elementwise and TP
  communication are a whole prompt's, pro rata.
- **Latencies.** TPOT = the mean step time while a request decodes (steps carry the other
  requests' prompt chunks); TTFT = the queue for a slot (closed loop: ``(N - M) / X``) + the wait
  in the prefill queue + its ``s`` prefill steps, each carrying a chunk of ``min(ISL, B - D)``
  tokens and the decodes, + the step under way on arrival (a Poisson arrival's residual life,
  ``E[tau^2] / (2 E[tau])`` over prompt-carrying and decode-only steps, ``residual_step``; a
  closed loop's request, sent at a step's end, the whole step just launched); the prefill
  queue's wait is also taken in time (the caller's: prompts queue behind each other's work,
  M/G/1, the longer wait kept); throughput X = ``r / tau`` requests/s. Percentiles put an
  exponential tail on the prefill-queue wait (``P(W > t) = rho exp(-t rho / W)``, the mean
  ``W``), take a request's own prefill and that wait as independent (the quantile of their
  sum over the length bins, ``sum_quantiles``) and TPOT as its mean: approximate, and said so.

- **Speculative decoding** (``acceptance_length`` tau, ``queries`` = k + 1): a decoding sequence
  takes ``k + 1`` tokens of the step's budget (vLLM schedules ``1 + num_spec_tokens`` per
  request) and emits tau tokens a step, so a request decodes ``(OSL - 1) / tau`` steps: every
  ``OSL - 1`` above reads ``(OSL - 1) / tau`` and the budget left to prompts is ``B - (k + 1) D``.
- **Prefix caching**: ``ISL`` is the prompt tokens a request computes (its cached prefix is
  not scheduled: vLLM counts it in ``num_computed_tokens``); the caller passes that.
- **Length distributions** (``estimator.inputs.lengths``; fixed lengths are a distribution of
  one point and give the same numbers): flow balance, prompt tokens per step and throughput
  take the means (``ISL`` = ``E[ISL]``, ``OSL - 1`` = ``E[OSL] - 1``: every request of a
  preset decodes at least 3 tokens); the prefill queue's wait is M/G/1's, the M/D/1 wait times
  ``1 + c^2`` with ``c`` the prompt length's coefficient of variation (Pollaczek-Khinchine);
  the caller times a prompt chunk as a prompt of the token-weighted mean length
  ``E[ISL^2] / E[ISL]``, decode attention at the step-weighted mean context
  ``E[ISL] + E[OSL^2] / (2 E[OSL])``, and a request's own prefill at its own length (TTFT's
  mean over the distribution, its quantiles at the prompt length's quantiles plus the wait's).
  TPOT is the same for every request (the steps it decodes in are the replica's), so its
  median over requests is its mean. Prompt and output lengths are independent.

No preemption.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from estimator.errors import SpecError
from estimator.layout.pipeline import ServingSplitRule
from estimator.memory.inference import InferenceMemory
from estimator.xp import Num, is_array

__all__ = [
    "ENGINES",
    "EnginePreset",
    "LoadPoint",
    "Regime",
    "budget_cap",
    "decode_steps",
    "engine_preset",
    "exceed_probability",
    "md1_wait",
    "prefill_wait",
    "quantile_wait",
    "residual_step",
    "solve_decoding",
    "steady_state_steps",
    "sum_quantiles",
]

# A prefill queue this busy is the token budget binding: prompts wait for it, not for slots.
BUDGET_BOUND_UTILIZATION = 0.99

Regime = Literal["light", "shared", "budget-limited", "slot-limited", "overloaded"]


@dataclass(frozen=True, slots=True)
class EnginePreset:
    name: str
    label: str
    token_budget: int  # max tokens a step carries (prompt chunks + decodes)
    max_seqs: int  # sequences a step carries
    mixed: bool  # prompt chunks and decodes in one step (GEMMs over both at once)
    sources: tuple[str, ...]
    # attention data parallel: the budget and the cap are the replica's, split over the groups
    # (else each group's scheduler has its own, whole)
    splits_over_dp: bool = False
    # The KV cache's memory (``kv_budget_bytes``): ``kv_fraction`` of the GPU less weights,
    # activations and runtime ("total", vLLM's gpu_memory_utilization), of what weights,
    # activations and runtime leave ("free", TensorRT-LLM's free_gpu_memory_fraction), or of
    # the GPU less weights ("static", SGLang's mem_fraction_static, by the replica's TP size)
    kv_budget: Literal["total", "free", "static"] = "total"
    kv_fraction: float | tuple[tuple[int, float], ...] = 0.9
    # KV blocks allocated as a sequence's tokens arrive (vLLM V1), not its whole context
    # reserved at admission (TensorRT-LLM's GUARANTEED_NO_EVICT default, SGLang's reservation)
    kv_on_demand: bool = False
    # tokens per KV-cache block (vLLM --block-size, SGLang --page-size, TensorRT-LLM
    # tokens_per_block): a sequence holds whole blocks
    kv_block_tokens: int = 16
    # how the engine splits the layers over pipeline stages (``layout.pipeline.SERVING_SPLITS``)
    pp_split: ServingSplitRule = "vllm"
    # (prefill, decode) multipliers on the engine step's prompt and decode time, fitted on a
    # deployment's own benchmark (``serving.calibration``); (1, 1): the model as it stands
    step_scales: tuple[float, float] = (1.0, 1.0)

    def slots(self, kv_slots: int) -> int:
        """Requests a replica runs at once: the engine's sequence cap or what the KV cache
        holds, whichever is fewer (0: not one fits)."""
        return max(min(self.max_seqs, kv_slots), 0)

    def fraction(self, gpus: int) -> float:
        """The memory fraction on a replica of ``gpus`` tensor-parallel GPUs."""
        if isinstance(self.kv_fraction, float):
            return self.kv_fraction
        return next(f for least, f in self.kv_fraction if gpus >= least)

    def kv_budget_bytes(self, memory: InferenceMemory, gpus: int) -> float:
        """Bytes per GPU the engine gives its KV cache (and per-sequence states)."""
        f = self.fraction(gpus)
        static = memory.weights_bytes + memory.draft_weights_bytes
        transient = memory.activation_peak_bytes + memory.runtime_overhead_bytes
        if self.kv_budget == "static":
            return f * memory.capacity_bytes - static
        if self.kv_budget == "free":
            return f * (memory.capacity_bytes - static - transient)
        return f * memory.capacity_bytes - static - transient

    def kv_slots(
        self, memory: InferenceMemory, gpus: int, groups: int = 1, live_share: float = 1.0
    ) -> int:
        """Sequences the engine's KV cache holds on a replica of ``gpus`` GPUs, ``groups``
        attention data-parallel groups of them (each its own cache). An engine that reserves a
        sequence's whole context holds ``kv_cache_bytes_per_sequence`` for each; one that
        allocates blocks as tokens arrive (``kv_on_demand``) holds ``live_share`` of it on
        average (the mean live context over the whole one: the caller's workload), the
        recurrent state whole."""
        share = live_share if self.kv_on_demand else 1.0
        # Whole blocks: a reserved context rounds up to them; blocks allocated as tokens arrive
        # leave the last one half empty on average
        context = memory.kv_cache_bytes_per_sequence / (memory.kv_cache_bytes_per_token or 1.0)
        block = self.kv_block_tokens
        if block > 1 and context > 0:
            live = share * context
            blocked = (
                live + (block - 1) / 2 if self.kv_on_demand else math.ceil(live / block) * block
            )
            share *= blocked / live
        held = (
            share * memory.kv_cache_bytes_per_sequence
            + memory.state_bytes_per_sequence
            + share * memory.draft_kv_cache_bytes_per_sequence
        )
        if not held:
            return memory.max_concurrency
        return groups * max(int(self.kv_budget_bytes(memory, gpus) // held), 0)

    def per_group(self, dp: int) -> EnginePreset:
        """The scheduler of one of ``dp`` attention data-parallel groups."""
        if dp == 1 or not self.splits_over_dp:
            return self
        return replace(
            self, token_budget=max(self.token_budget // dp, 1), max_seqs=max(self.max_seqs // dp, 1)
        )


ENGINES: dict[str, EnginePreset] = {
    e.name: e
    for e in (
        EnginePreset(
            name="vllm",
            label="vLLM V1 (OpenAI server defaults)",
            token_budget=8192,
            max_seqs=1024,
            mixed=True,
            sources=(
                "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: on GPUs with >= 70 GiB"
                " that are not A100s, the OpenAI API server defaults to max_num_batched_tokens"
                " 8192 and max_num_seqs 1024 (2048 and 256 otherwise); V1 always chunks"
                " prefills and schedules decodes first",
                "with --data-parallel-size each DP rank runs its own engine core and scheduler"
                " with these limits (vllm/v1/engine/core.py DPEngineCoreProc)",
                "--gpu-memory-utilization 0.9: the fraction of GPU memory for the model"
                " executor, weights, activations and KV cache together (EngineArgs default)",
                "vllm/v1/core/kv_cache_manager.py allocate_slots: blocks allocated for each"
                " step's new tokens; the scheduler preempts a running request when none is"
                " free (not modelled)",
                "vllm/config/cache.py CacheConfig: DEFAULT_BLOCK_SIZE 16 tokens a block",
            ),
            kv_on_demand=True,
        ),
        EnginePreset(
            name="vllm-small-gpu",
            label="vLLM V1 (defaults below 70 GiB or on A100)",
            token_budget=2048,
            max_seqs=256,
            mixed=True,
            sources=(
                "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (as above);"
                " --gpu-memory-utilization 0.9; blocks of 16 tokens allocated as tokens arrive",
            ),
            kv_on_demand=True,
        ),
        EnginePreset(
            name="sglang",
            label="SGLang (chunked prefill 8192, prefill and decode batches apart)",
            token_budget=8192,
            max_seqs=1024,
            mixed=False,
            sources=(
                "SGLang server arguments: --chunked-prefill-size (8192 on large GPUs),"
                " --enable-mixed-chunk off by default (a prefill batch runs on its own)",
                "with --enable-dp-attention the chunked prefill size is divided by dp_size"
                " (python/sglang/srt/server_args.py) and max_running_requests too"
                " (model_executor/model_runner.py): both are the replica's",
                "--mem-fraction-static, the fraction of GPU memory for weights and the KV pool:"
                " 0.88 at TP 1, 0.87 at 2, 0.85 at 4, 0.81 at 8, 0.79 at 16 or more"
                " (python/sglang/srt/server_args.py, v0.4); --page-size 1 token a page",
            ),
            splits_over_dp=True,
            kv_budget="static",
            kv_fraction=((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88)),
            kv_block_tokens=1,
            pp_split="sglang",
        ),
        EnginePreset(
            name="trtllm",
            label="TensorRT-LLM (in-flight batching, max_num_tokens 8192)",
            token_budget=8192,
            max_seqs=2048,
            mixed=True,
            sources=(
                "TensorRT-LLM LLM API / trtllm-serve defaults: max_num_tokens 8192,"
                " max_batch_size 2048; in-flight batching runs context and generation"
                " requests in one iteration; with enable_attention_dp each rank schedules its"
                " own requests under these limits",
                "KvCacheConfig.free_gpu_memory_fraction 0.9: the KV cache takes that share of"
                " the memory free after the model and its activations are allocated;"
                " tokens_per_block 32",
            ),
            kv_budget="free",
            kv_block_tokens=32,
            pp_split="trtllm",
        ),
    )
}


def engine_preset(
    engine: str | EnginePreset,
    token_budget: int | None = None,
    max_seqs: int | None = None,
    *,
    kv_fraction: float | None = None,
    kv_block_tokens: int | None = None,
) -> EnginePreset:
    """An engine's scheduler preset (``ENGINES``), with what a deployment sets instead of the
    defaults: the token budget per step (``max_num_batched_tokens`` / ``max_num_tokens`` /
    ``--chunked-prefill-size``), the sequence cap (``max_num_seqs`` / ``max_batch_size`` /
    ``--max-running-requests``), the KV cache's memory fraction in the engine's own meaning
    (vLLM's ``--gpu-memory-utilization``, TensorRT-LLM's ``free_gpu_memory_fraction``, SGLang's
    ``--mem-fraction-static``) and its tokens per block (``--block-size`` /
    ``tokens_per_block`` / ``--page-size``)."""
    preset = engine if isinstance(engine, EnginePreset) else ENGINES.get(engine)
    if preset is None:
        raise SpecError("engine", f"must be one of {', '.join(ENGINES)}", engine)
    changes: dict[str, int | float] = {}
    for name, field, value, top in (
        ("max_num_batched_tokens", "token_budget", token_budget, 2**20),
        ("max_num_seqs", "max_seqs", max_seqs, 2**20),
        ("kv_block_size", "kv_block_tokens", kv_block_tokens, 1024),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise SpecError(name, f"must be an integer from 1 to {top:,}", value)
        if value != getattr(preset, field):
            changes[field] = value
    if kv_fraction is not None:
        if isinstance(kv_fraction, bool) or not 0 < kv_fraction <= 1:
            raise SpecError("kv_cache_memory_fraction", "must be > 0 and <= 1", kv_fraction)
        changes["kv_fraction"] = float(kv_fraction)
    if not changes:
        return preset
    set_ = [
        f"token budget {changes.get('token_budget', preset.token_budget):,}",
        f"sequence cap {changes.get('max_seqs', preset.max_seqs):,}",
    ]
    if "kv_fraction" in changes:
        set_.append(f"KV memory fraction {changes['kv_fraction']:g}")
    if "kv_block_tokens" in changes:
        set_.append(f"{changes['kv_block_tokens']} tokens a KV block")
    label = f"{preset.label.split(' (')[0]} ({', '.join(set_)}, as set)"
    return replace(preset, label=label, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One steady-state load point of a replica (seconds, requests/s, tokens/s)."""

    engine: str
    concurrency: float | None  # closed loop: requests kept in flight
    request_rate: float | None  # open loop: Poisson arrivals, requests/s
    regime: Regime
    running: float  # requests holding a slot (KV cache and sequence cap)
    decoding: float  # mean sequences decoding per step
    queued: float  # requests waiting for a slot (closed loop)
    ttft_s: float  # means
    tpot_s: float
    e2e_s: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    step_s: float  # mean step time
    prefill_steps: float  # steps a prompt takes once at the head of the queue
    requests_per_s: float
    output_tokens_per_s: float
    capacity_requests_per_s: float  # at the most sequences the budget, cap and KV cache allow
    lengths: str = "fixed"  # the workload's length distribution (estimator.inputs.lengths)
    # TPOT over requests: the steady state's is the same for every request (its mean); a
    # finite run's (``num_prompts``, ``serving.run``) differs by when a request ran
    tpot_p50_s: float = math.nan
    tpot_p99_s: float = math.nan
    num_prompts: int | None = None  # a finite run of that many requests (``serving.run``)
    duration_s: float | None = None  # the finite run's, first request sent to last token
    # end to end over requests: the TTFT's distribution plus each one's own decode steps
    e2e_p50_s: float = math.nan
    e2e_p90_s: float = math.nan
    e2e_p99_s: float = math.nan
    # with latency targets: the share of requests within both, and the requests/s that are
    # (goodput, DistServe's SLO attainment times the rate); None without targets
    slo_attainment: float | None = None
    goodput_requests_per_s: float | None = None
    # the share of the replica's step time spent on prompt tokens: a step's time beyond a
    # decode-only step of the same batch, over it (what splits the GPU-hours by phase)
    prefill_time_share: float = 0.0


def decode_steps(osl: float, acceptance_length: float = 1.0) -> float:
    """Steps a request decodes after its first token: ``OSL - 1`` tokens, ``acceptance_length``
    a step (at least one step)."""
    return max(osl - 1, 1) / acceptance_length


def prefill_wait(
    d: float,
    isl: float,
    osl: float,
    budget: int,
    acceptance_length: float = 1.0,
    queries: int = 1,
    input_scv: float = 0.0,
) -> tuple[float, float, float]:
    """(service steps s, utilization rho, mean wait in steps) of the prefill queue with ``d``
    sequences decoding, each taking ``queries`` tokens of the budget a step. ``isl`` and
    ``osl``: the mean prompt (computed tokens) and output; ``input_scv``: the prompt length's
    squared coefficient of variation, which scales the wait by ``1 + scv``
    (Pollaczek-Khinchine's M/G/1 mean wait; 0, fixed lengths, is M/D/1)."""
    free = budget - queries * d
    r = d * acceptance_length / max(osl - 1, 1)  # requests finishing a step (decode_steps)
    s = max(1.0, isl / free)
    rho = r * isl / free
    return s, rho, float(md1_wait(s, rho, input_scv))


def md1_wait(service: Num, rho: Num, scv: Num = 0.0) -> Num:
    """The mean wait in a single-server queue of mean ``service`` at utilization ``rho``
    (Pollaczek-Khinchine: ``service rho (1 + scv) / (2 (1 - rho))``, ``scv`` the service time's
    squared coefficient of variation: 0, deterministic service, is M/D/1; infinite at or past
    1), in the service's unit; arrays entry by entry."""
    if not is_array(service, rho):
        return service * rho * (1 + scv) / (2 * (1 - rho)) if rho < 1 else math.inf
    busy = np.minimum(rho, 1 - 1e-12)
    return np.where(rho < 1, service * busy * (1 + scv) / (2 * (1 - busy)), np.inf)


def budget_cap(
    isl: float, osl: float, budget: int, acceptance_length: float = 1.0, queries: int = 1
) -> float:
    """The most sequences that can decode while prompts keep up: ``queries D + D ISL / dec <= B``
    with ``dec`` the steps a request decodes (a hair under it, where the prefill queue is still
    finite)."""
    dec = decode_steps(osl, acceptance_length)
    return budget * dec / (queries * dec + isl) * (1 - 1e-9)


def solve_decoding(
    running: float,
    isl: float,
    osl: float,
    budget: int,
    acceptance_length: float = 1.0,
    queries: int = 1,
    input_scv: float = 0.0,
) -> tuple[float, bool]:
    """Mean sequences decoding per step with ``running`` requests holding slots (closed loop),
    and whether the token budget binds (the rest then wait in the prefill queue)."""
    dec = decode_steps(osl, acceptance_length)
    cap = min(budget_cap(isl, osl, budget, acceptance_length, queries), running)

    def held(d: float) -> float:  # requests a decoding level d keeps busy: decoding + prefill
        s, _, wait = prefill_wait(d, isl, osl, budget, acceptance_length, queries, input_scv)
        return d + d * (s + wait) / dec

    if held(cap) <= running:  # the budget binds: prompts queue for it
        return cap, cap < running
    lo, hi = 0.0, cap
    for _ in range(60):
        mid = (lo + hi) / 2
        if held(mid) < running:
            lo = mid
        else:
            hi = mid
    d = (lo + hi) / 2
    rho = prefill_wait(d, isl, osl, budget, acceptance_length, queries, input_scv)[1]
    return d, rho > BUDGET_BOUND_UTILIZATION


def steady_state_steps(
    *,
    isl: float,
    osl: float,
    engine: EnginePreset,
    kv_slots: int,
    concurrency: float | None = None,
    acceptance_length: float = 1.0,
    queries: int = 1,
    input_scv: float = 0.0,
) -> dict[str, float]:
    """The step-count side of a load point (no times): ``running``, ``decoding``, ``queued``,
    prompt tokens per step, prefill service steps, wait steps and utilization. Closed loop
    (``concurrency``) only; the open loop needs the step time and is solved by the caller.
    ``isl``: the prompt tokens a request computes (the mean, with a length distribution, whose
    prompt's squared coefficient of variation is ``input_scv``); ``osl``: the mean output;
    ``acceptance_length`` and ``queries``: a speculative step's tokens emitted and scheduled
    per decoding sequence."""
    if concurrency is None or concurrency < 1:
        raise SpecError("concurrency", "must be >= 1", concurrency)
    slots = engine.slots(kv_slots)
    if slots < 1:
        raise SpecError("concurrency", "the KV cache holds no sequence of this length", kv_slots)
    spec = (acceptance_length, queries, input_scv)
    dec = decode_steps(osl, acceptance_length)
    running = min(concurrency, slots)
    decoding, budget_bound = solve_decoding(running, isl, osl, engine.token_budget, *spec)
    s, rho, wait = prefill_wait(decoding, isl, osl, engine.token_budget, *spec)
    if budget_bound:  # the prompts beyond what the budget serves wait in the prefill queue
        wait = (running - decoding) * dec / decoding - s
    return {
        "running": running,
        "decoding": decoding,
        "queued": concurrency - running,
        "prompt_tokens": decoding * isl / dec,
        "service_steps": s,
        "wait_steps": max(wait, 0.0),
        "rho": min(rho, 1.0),
        "budget_bound": float(budget_bound),
    }


def residual_step(bare: float, loaded: float, share: float) -> float:
    """The mean time from a random instant to the end of the step under way, when a fraction
    ``share`` of the steps last ``loaded`` seconds (they carry a prompt's chunk) and the rest
    ``bare``: ``E[tau^2] / (2 E[tau])``, the renewal residual life (a random instant falls in
    a long step more often than a step is long: the inspection paradox). Half a step when the
    steps are alike."""
    mean = share * loaded + (1 - share) * bare
    if mean <= 0:
        return 0.0
    return (share * loaded**2 + (1 - share) * bare**2) / (2 * mean)


def sum_quantiles(
    services: Sequence[float] | np.ndarray, mean_wait: float, rho: float, ps: Sequence[float]
) -> tuple[float, ...]:
    """The ``ps`` quantiles of a request's own service plus its wait, taken independent: the
    service one of the equally likely ``services`` (a length distribution's bins), the wait
    ``quantile_wait``'s (``P(W > x) = rho exp(-x rho / mean_wait)``). Adding the two quantiles
    takes them comonotonic (the longest prompt waiting longest), well above this in the tail
    where both spread; a prompt's wait does not depend on its own length (it waits for the
    others' work). ``P(S + W > t)`` is decreasing in ``t``: it is evaluated on a grid from the
    shortest service to the longest plus the wait's quantile (which brackets every quantile),
    then on a finer grid inside each quantile's bracket, to ``1 / 16,384`` of that span."""
    s = np.asarray(services, dtype=float)
    if not (math.isfinite(mean_wait) and np.isfinite(s).all()):  # an overloaded queue
        return (math.inf,) * len(ps)
    if mean_wait <= 0 or rho <= 0:
        return tuple(float(np.quantile(s, p)) for p in ps)
    if len(s) == 1:  # one length: the service plus the wait's quantile, exactly
        return tuple(float(s[0] + quantile_wait(mean_wait, rho, p)) for p in ps)
    targets = 1.0 - np.asarray(ps, dtype=float)
    tail = _exceedance(s, mean_wait, rho)  # P(S + W > t) at every t, over the bins

    top = float(quantile_wait(mean_wait, rho, max(ps)))
    coarse = np.linspace(s.min(), s.max() + top, 257)
    k = np.clip(np.searchsorted(-tail(coarse), -targets) - 1, 0, 255)  # tail[k] > target
    fine = np.linspace(coarse[k], coarse[k + 1], 65, axis=-1)  # one row a quantile
    below = (tail(fine) <= targets[:, None]).argmax(axis=-1)  # the first point at or under
    return tuple(float(x) for x in fine[np.arange(len(ps)), below])


def exceed_probability(
    services: Sequence[float] | np.ndarray, mean_wait: float, rho: float, t: Num
) -> np.ndarray:
    """``P(S + W > t)`` (entry by entry for an array ``t``): the service ``S`` one of the
    equally likely ``services``, the wait ``W`` independent of it with ``P(W > 0) = rho`` and an
    exponential tail of mean ``mean_wait`` (``sum_quantiles``' distribution; an infinite wait,
    an overloaded queue, exceeds every ``t``)."""
    return _exceedance(services, mean_wait, rho)(t)


def _exceedance(
    services: Sequence[float] | np.ndarray, mean_wait: float, rho: float
) -> Callable[[Num], np.ndarray]:
    """``exceed_probability`` at any ``t``, with what does not depend on ``t`` computed once. A
    service above ``t`` always exceeds it; one at or below adds ``rho exp(-(t - s) rho /
    mean_wait)``, summed over the sorted services as ``rho exp(-(t - s_k) decay) P_k`` with
    ``s_k`` the largest at or below ``t`` and ``P_k = sum_{j <= k} exp(-(s_k - s_j) decay)`` (a
    recurrence with exponents <= 0): linear in the services, where the pairwise form is their
    count times the points'."""
    s = np.sort(np.asarray(services, dtype=float))
    n = len(s)
    if not math.isfinite(mean_wait):
        return lambda t: np.ones(np.shape(t))
    if mean_wait <= 0 or rho <= 0:
        return lambda t: (n - np.searchsorted(s, np.asarray(t, dtype=float), side="right")) / n
    decay = rho / mean_wait
    steps = np.exp(-np.diff(s) * decay)  # exp(-(s_k - s_{k-1}) decay)
    prefix = np.empty(n)
    acc = 0.0
    for k in range(n):
        acc = 1.0 + (steps[k - 1] * acc if k else 0.0)
        prefix[k] = acc

    def tail(t: Num) -> np.ndarray:
        at = np.asarray(t, dtype=float)
        below = np.searchsorted(s, at, side="right")  # services at or below each t
        last = np.maximum(below - 1, 0)
        # at or past s_k where a service is at or below t (else masked: kept >= 0, no overflow)
        waiting = rho * np.exp(-np.maximum(at - s[last], 0.0) * decay) * prefix[last]
        mean: np.ndarray = (n - below + np.where(below > 0, waiting, 0.0)) / n
        return mean

    return tail


def quantile_wait(mean_wait: Num, rho: Num, p: float) -> Num:
    """The ``p`` quantile of a wait with mean ``mean_wait`` and ``P(W > 0) = rho``, with an
    exponential tail (an approximation of the M/D/1 waiting time); arrays entry by entry."""
    if not is_array(mean_wait, rho):
        if mean_wait <= 0 or rho <= 0 or rho <= 1 - p:
            return 0.0
        return float(mean_wait / rho * np.log(rho / (1 - p)))
    waits = (mean_wait > 0) & (rho > 1 - p)
    ratio = np.where(waits, rho, 1.0)
    return np.where(waits, mean_wait / ratio * np.log(ratio / (1 - p)), 0.0)
