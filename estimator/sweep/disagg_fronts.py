"""The fronts of output tokens/s per GPU against tokens/s per user that disaggregated planning
(``sweep.disagg``) draws for each family:

- per aggregated layout, ``estimate_load`` at ``AGGREGATED_LOADS`` of its capacity;
- per disaggregated (prefill, decode) pair, each decoding level of its decode curve with the
  prefill pool the TTFT target allows at that TPOT, both in fluid replica counts (GPU-seconds
  per request: ``gpus / rate per replica``; the x:y ratio a fleet approaches at scale).

Points within the TTFT target only; output tokens/s per user = 1 / TPOT. The non-dominated
points of each family are kept (``pareto.front``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from estimator.inputs.accelerator import Accelerator
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import get_precision
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import InferenceSetup, inference_memory
from estimator.serving.disagg import (
    FIRST_TOKEN_STEPS,
    DecodeCurve,
    KvTransfer,
    PrefillCurve,
    highest_rate,
    link_wait,
)
from estimator.serving.estimate import estimate_load
from estimator.serving.load import EnginePreset, LoadPoint
from estimator.sweep.pareto import front

if TYPE_CHECKING:
    from estimator.sweep.disagg import Pools
    from estimator.sweep.serving import ServingWorkload

__all__ = [
    "AGGREGATED_LOADS",
    "PairPoints",
    "aggregated_front",
    "aggregated_pareto",
    "disaggregated_front",
    "pair_front",
]

# Shares of a replica's capacity the aggregated front is evaluated at.
AGGREGATED_LOADS = (0.03, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.99)


class PairPoints(NamedTuple):
    """A pair's front candidates: the entries ``levels`` of its decode curve, the prefill
    replica's requests/s at each, and both measures (arrays)."""

    group: Pools  # the prefill pool's
    decode_group: Pools
    prefill: PrefillCurve
    decode: DecodeCurve
    levels: np.ndarray
    prefill_rate: np.ndarray
    per_gpu: np.ndarray
    per_user: np.ndarray


def pair_front(
    workload: ServingWorkload,
    pools: tuple[Pools, Pools],
    pc: PrefillCurve,
    dc: DecodeCurve,
    kv: KvTransfer,
) -> PairPoints:
    """The pair's points at each decoding level: the prefill pool the TTFT target allows at
    that TPOT, in fluid replicas (GPU-seconds per request)."""
    ttft = workload.ttft_target_s
    sending = pc.ttft_p99_s + link_wait(pc.rate, kv.send_s)
    fixed = kv.exposed_s + link_wait(dc.rate, kv.receive_s) + FIRST_TOKEN_STEPS * dc.tpot_s
    live = np.isfinite(fixed)  # the receiving link below its capacity
    budget = np.where(live, (math.inf if ttft is None else ttft) - np.where(live, fixed, 0), -1)
    most = np.asarray(highest_rate(pc.rate, sending, budget))
    levels = np.flatnonzero((most > 0) & live)
    per_request = pc.layout.num_gpus / most[levels] + dc.layout.num_gpus / dc.rate[levels]
    return PairPoints(
        *pools,
        pc,
        dc,
        levels,
        most[levels],
        max(workload.output_len, 1) / per_request,  # per_request: GPU-seconds a request
        1 / dc.tpot_s[levels],
    )


def disaggregated_front(pairs: list[PairPoints]) -> tuple[dict[str, Any], ...]:
    """The non-dominated points of every pair (``pareto.front``), most per GPU first; rows are
    built for those only."""
    if not pairs:
        return ()
    speed = np.concatenate([p.per_gpu for p in pairs])
    user = np.concatenate([p.per_user for p in pairs])
    owner = np.concatenate([np.full(p.levels.size, k) for k, p in enumerate(pairs)])
    start = np.concatenate([[0], np.cumsum([p.levels.size for p in pairs])[:-1]])
    out = []
    for j in front(speed, user, np.arange(speed.size)):
        p = pairs[int(owner[j])]
        k = int(j - start[owner[j]])
        i = p.levels[k]
        out.append(
            {
                "accelerator": p.group.accelerator.id,
                "decode_accelerator": p.decode_group.accelerator.id,
                "precision": p.group.precision,
                "prefill_tp": p.prefill.layout.tp,
                "prefill_pp": p.prefill.layout.pp,
                "decode_tp": p.decode.layout.tp,
                "decode_pp": p.decode.layout.pp,
                "decode_dp": p.decode.layout.dp,
                "decoding_per_replica": float(p.decode.decoding[i]),
                "prefill_per_decode_replica": float(p.decode.rate[i] / p.prefill_rate[k]),
                "tpot_s": float(p.decode.tpot_s[i]),
                "output_tokens_per_s_per_gpu": float(p.per_gpu[k]),
                "output_tokens_per_s_per_user": float(p.per_user[k]),
            }
        )
    return tuple(out)


def aggregated_front(
    model: ModelSpec,
    workload: ServingWorkload,
    groups: list[Pools],
    rows: Iterable[Mapping[str, Any]],
    progress: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Each aggregated layout that holds the model (served, or refused by the targets only) at
    ``AGGREGATED_LOADS`` of its capacity, the points within the TTFT target."""
    specs = {g.accelerator.id: g.accelerator for g in groups}
    setup = InferenceSetup(workload.input_len, workload.output_len)
    engine = workload.scheduler()
    osl = max(workload.output_len, 1)
    ttft = workload.ttft_target_s
    out = []
    for r in rows:
        if progress is not None:
            progress()
        acc = specs.get(r["accelerator"])
        if acc is None or not (r["ok"] or r.get("field") == "targets"):
            continue
        tp, pp = r["tp"], r["pp"]
        layout = Parallelism(tp=tp, pp=pp, dp=r.get("dp", 1), ep=r["ep"])  # the row's own
        loads = _loads(model, acc, layout, r["precision"], setup, engine)
        for point in loads:
            if point.regime == "overloaded" or (ttft is not None and point.ttft_p99_s > ttft):
                continue
            out.append(
                {
                    "accelerator": acc.id,
                    "precision": r["precision"],
                    "tp": tp,
                    "pp": pp,
                    "rate_per_replica": point.request_rate,
                    "ttft_p99_s": point.ttft_p99_s,
                    "tpot_s": point.tpot_s,
                    "output_tokens_per_s_per_gpu": point.requests_per_s * osl / layout.num_gpus,
                    "output_tokens_per_s_per_user": 1 / point.tpot_s,
                }
            )
    return out


def _loads(
    model: ModelSpec,
    acc: Accelerator,
    layout: Parallelism,
    prec: str,
    setup: InferenceSetup,
    engine: EnginePreset,
) -> list[LoadPoint]:
    """A replica's steady state at ``AGGREGATED_LOADS`` of its capacity."""
    precision = get_precision(prec)
    memory = inference_memory(model, acc, layout, setup, precision)
    args = (model, acc, layout, setup, precision)
    capacity = estimate_load(
        *args, engine=engine, request_rate=1e-6, memory=memory
    ).capacity_requests_per_s
    return [
        estimate_load(*args, engine=engine, request_rate=share * capacity, memory=memory)
        for share in AGGREGATED_LOADS
    ]


def aggregated_pareto(points: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The points no other beats on both output tokens/s per GPU and per user, most per GPU
    first."""
    if not points:
        return ()
    speed = np.array([p["output_tokens_per_s_per_gpu"] for p in points])
    user = np.array([p["output_tokens_per_s_per_user"] for p in points])
    return tuple(points[i] for i in front(speed, user, np.arange(len(points))))
