"""Aggregated against disaggregated serving of one workload (a fleet request rate and TTFT p99 /
TPOT targets), side by side: aiconfigurator's question (NVIDIA Dynamo's AIConfigurator: which
of the two serves the same SLO at less cost, and the front of output tokens/s per GPU against
tokens/s per user of each).

- **Disaggregated fleets** (``serving.disagg``): for every (prefill layout, decode layout) pair
  of one accelerator and precision, the decode pool first: the most requests/s a decode replica
  finishes with its step within the TPOT target (and its link below capacity), ``y = ceil(rate /
  that)`` replicas, each at ``rate / y``; then the prefill pool: the most requests/s a prefill
  replica takes with its queue, its prefill and its link's wait within what the TTFT target
  leaves after the transfer, the receiving link's wait and the first decode step, ``x =
  ceil(rate / that)``. That is the pair's least-cost fleet (each pool at its fewest replicas;
  the TPOT a larger decode pool would give back to TTFT is left unused). The transfer rides
  NVLink where the whole fleet fits one scale-up domain, else the scale-out network.
- **Mixed pools** (``ServingWorkload.mixed_pools``): every prefill pool also pairs with the
  decode pools of the sweep's other accelerators in the same precision (the KV cache's
  format): each pool timed on its own accelerator, the KV cache over the scale-out network
  (pools on two kinds of GPU share no NVLink domain), each pool's GPUs at its own price.
- **The aggregated fleet** is the serving sweep's own (``sweep.serving._at_rate``): each
  layout's highest rate per replica within both targets, as many replicas as the rate needs.
- **The fronts**: per aggregated layout, ``estimate_load`` at fractions of its capacity; per
  disaggregated pair, each decoding level of its decode curve with the prefill pool the TTFT
  target allows at that TPOT, both in fluid replica counts (GPU-seconds per request: ``gpus /
  rate per replica``; the x:y ratio a fleet approaches at scale). Points within the TTFT target
  only; output tokens/s per user = 1 / TPOT. The non-dominated points of each family are kept
  (``pareto.front``; the fronts are drawn in ``sweep.disagg_fronts``).

Both families are costed alike: the fleet's GPUs x their price per GPU-hour over the output
tokens the rate carries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from estimator.context import Context
from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import get_precision
from estimator.layout.parallel import Parallelism
from estimator.serving.disagg import (
    FIRST_TOKEN_STEPS,
    DecodeCurve,
    KvTransfer,
    Link,
    PoolReplica,
    PrefillCurve,
    decode_curve,
    highest_rate,
    kv_transfer,
    link_wait,
    prefill_curve,
)
from estimator.sweep.disagg_fronts import (
    PairPoints,
    aggregated_front,
    aggregated_pareto,
    disaggregated_front,
    pair_front,
)
from estimator.timing.rates import SECONDS_PER_HOUR

if TYPE_CHECKING:
    from estimator.sweep.serving import ServingWorkload

__all__ = ["TOP_PLANS", "DisaggComparison", "Pools", "compare", "pools"]

TOP_PLANS = 20  # the cheapest disaggregated plans an answer lists


@dataclass(frozen=True)
class DisaggComparison:
    """The cheapest aggregated and disaggregated fleets for the same rate and targets (None
    where none meets them, with the reason), the cheapest disaggregated plans, their counts by
    outcome, and each family's front of output tokens/s per GPU against tokens/s per user."""

    request_rate: float
    kv_overlap: str
    aggregated: dict[str, Any] | None
    disaggregated: dict[str, Any] | None
    winner: str | None  # aggregated, disaggregated, tie; None unless both have a plan
    cost_ratio: float | None  # disaggregated over aggregated (cost per 1M, else GPUs)
    plans: tuple[dict[str, Any], ...]
    counts: dict[str, int]
    pareto_aggregated: tuple[dict[str, Any], ...]
    pareto_disaggregated: tuple[dict[str, Any], ...]
    no_plan_aggregated: str | None = None
    no_plan_disaggregated: str | None = None
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, eq=False)
class Pools:
    """One accelerator and precision's prefill and decode curves, layout by layout, and the
    layouts refused with their reason."""

    accelerator: Accelerator
    precision: str
    prefill: tuple[PrefillCurve, ...]
    decode: tuple[DecodeCurve, ...]
    refused: tuple[tuple[Parallelism, str], ...]


def pools(
    model: ModelSpec,
    workload: ServingWorkload,
    groups: Iterable[tuple[Accelerator, str]],
    layouts: Iterable[tuple[int, int]],
    progress: Callable[[], None] | None = None,
) -> list[Pools]:
    """Each group's prefill and decode curves over ``layouts`` (tp, pp); then the targets are
    checked against the quickest lone prefill and decode step of them all: a target below
    those is refused (``SpecError`` naming it), since no fleet of any size meets it."""
    engine = workload.scheduler()
    isl, osl = workload.input_len, workload.output_len
    out = []
    tops = tuple(layouts)
    for acc, prec in groups:
        precision = get_precision(prec)
        cluster = workload.cluster(acc)
        prefill, decode, refused = [], [], []
        for tp, pp in tops:
            layout = Parallelism(tp=tp, pp=pp, ep=tp if model.moe is not None else 1)
            try:
                replica = PoolReplica(model, acc, layout, isl, osl, precision, engine, cluster)
                prefill.append(prefill_curve(replica))
                decode.append(decode_curve(replica))
            except SpecError as exc:
                refused.append((layout, str(exc)))
            if model.moe is not None and pp == 1 and tp > 1:
                # the same GPUs as a decode pool of attention data parallel with wide EP
                # (SGLang's and TensorRT-LLM's disaggregated MoE decode)
                wide = Parallelism(tp=1, dp=tp, ep=tp)
                try:
                    replica = PoolReplica(model, acc, wide, isl, osl, precision, engine, cluster)
                    decode.append(decode_curve(replica))
                except SpecError as exc:
                    refused.append((wide, str(exc)))
            if progress is not None:
                progress()
        out.append(Pools(acc, prec, tuple(prefill), tuple(decode), tuple(refused)))
    _check_targets(out, workload)
    return out


def _check_targets(groups: list[Pools], workload: ServingWorkload) -> None:
    """Refuse a TTFT target below the quickest lone prefill, or a TPOT target below the
    quickest decode step of one sequence, of every layout that fits."""
    lone = [(c.lone_s, g, c.layout) for g in groups for c in g.prefill]
    step = [(float(c.tpot_s[0]), g, c.layout) for g in groups for c in g.decode]
    checks = (
        ("ttft_target_s", workload.ttft_target_s, lone, "lone prefill of the prompt"),
        ("tpot_target_s", workload.tpot_target_s, step, "decode step of one sequence"),
    )
    for name, target, bounds, what in checks:
        if target is None or not bounds:
            continue
        best, g, layout = min(bounds, key=lambda b: b[0])
        if target < best:
            where = f"{g.accelerator.id} {g.precision} tp {layout.tp} pp {layout.pp}"
            raise SpecError(
                name,
                f"is below the quickest {what} in this space ({best:.4g} s, {where}):"
                " no fleet of any size meets it",
                target,
            )


def compare(
    workload: ServingWorkload,
    groups: list[Pools],
    rows: Iterable[Mapping[str, Any]],
    model: ModelSpec,
    prices: Callable[[str], float | None],
    progress: Callable[[], None] | None = None,
) -> DisaggComparison:
    """The disaggregated plans of every pair in ``groups`` against the aggregated sweep's
    ``rows`` (dicts of ``sweep.serving``), for ``workload``'s rate and targets; ``progress()``
    after each prefill layout's pairs and each aggregated layout's front."""
    rate = workload.request_rate
    if rate is None:
        raise SpecError("request_rate", "disaggregated planning needs a fleet request rate", None)
    plans: list[dict[str, Any]] = []
    points: list[PairPoints] = []
    counts = {"pairs": 0, "ok": 0}
    quickest = math.inf  # the least TTFT any pair reaches (for the no-plan answer)
    for gp in groups:
        for pc in gp.prefill:
            for gd in _decode_groups(gp, groups, workload.mixed_pools):
                for dc in gd.decode:
                    counts["pairs"] += 1
                    plan, reach, kv = _pair(model, workload, (gp, gd), pc, dc, prices, rate)
                    quickest = min(quickest, reach)
                    if isinstance(plan, str):
                        counts[f"refused_{plan}"] = counts.get(f"refused_{plan}", 0) + 1
                    else:
                        counts["ok"] += 1
                        plans.append(plan)
                    points.append(pair_front(workload, (gp, gd), pc, dc, kv))
            if progress is not None:
                progress()
    plans.sort(key=_cost_key)
    agg = [dict(r) for r in rows if r["ok"]]
    agg.sort(key=_cost_key)
    best_agg = _aggregated(agg[0], workload) if agg else None
    best = plans[0] if plans else None
    winner, ratio = _winner(best_agg, best)
    agg_points = aggregated_front(model, workload, groups, rows, progress)
    return DisaggComparison(
        request_rate=rate,
        kv_overlap=workload.kv_overlap,
        aggregated=best_agg,
        disaggregated=best,
        winner=winner,
        cost_ratio=ratio,
        plans=tuple(plans[:TOP_PLANS]),
        counts=counts,
        pareto_aggregated=aggregated_pareto(agg_points),
        pareto_disaggregated=disaggregated_front(points),
        no_plan_aggregated=None if agg else _no_aggregated(rows),
        no_plan_disaggregated=None if plans else _no_disaggregated(groups, counts, quickest),
        notes=_notes(workload, groups),
    )


def _decode_groups(prefill: Pools, groups: list[Pools], mixed: bool) -> list[Pools]:
    """The groups whose decode pools a prefill pool of ``prefill`` pairs with: its own, and with
    ``mixed`` every other accelerator's of the same precision (the KV cache's format)."""
    if not mixed:
        return [prefill]
    others = [g for g in groups if g is not prefill and g.precision == prefill.precision]
    return [prefill, *others]


def _cost_key(r: Mapping[str, Any]) -> tuple[float, int, float]:
    cost = r.get("usd_per_1m_output_tokens")
    gpus = r.get("fleet_gpus", 0)
    return (math.inf if cost is None else cost, gpus, r.get("tpot_s") or 0.0)


def _pair(
    model: ModelSpec,
    workload: ServingWorkload,
    pools: tuple[Pools, Pools],
    pc: PrefillCurve,
    dc: DecodeCurve,
    prices: Callable[[str], float | None],
    rate: float,
) -> tuple[dict[str, Any] | str, float, KvTransfer]:
    """The pair's least-cost fleet (or the target that refuses it), the least TTFT it reaches,
    and the transfer its fleet uses: over NVLink where both pools run on one accelerator and
    the fleet fits one scale-up domain, else over the scale-out network."""
    gp, gd = pools
    cluster = workload.cluster(gp.accelerator)
    precision = get_precision(gp.precision)
    sender = Context.of(model, gp.accelerator, pc.layout, precision, cluster)
    one_pool = gd is gp
    receiver = sender.with_layout(dc.layout)
    if not one_pool:  # the decode pool's own accelerator and network
        decode_net = workload.cluster(gd.accelerator)
        receiver = Context.of(model, gd.accelerator, dc.layout, precision, decode_net)

    def over(link: Link) -> tuple[dict[str, Any] | str, float, KvTransfer]:
        kv = kv_transfer(
            sender, receiver, workload.input_len, pc.lone_s, link=link, overlap=workload.kv_overlap
        )
        return (*_fleet(workload, pools, pc, dc, kv, prices, rate), kv)

    if one_pool and _gpus(pc.layout) + _gpus(dc.layout) <= cluster.scale_up_domain:
        plan, reach, kv = over("nvlink")
        if not isinstance(plan, str) and plan["fleet_gpus"] <= cluster.scale_up_domain:
            return plan, reach, kv
    return over("scale-out")


def _gpus(layout: Parallelism) -> int:
    return layout.num_gpus


def _replicas(rate: float, per_replica: float) -> int:
    """Replicas that take ``rate`` at ``per_replica`` each (at least one; a rate a hair over a
    whole number of replicas' worth, from rounding, needs no more)."""
    return max(math.ceil(rate / per_replica - 1e-9), 1)


def _fleet(
    workload: ServingWorkload,
    pools: tuple[Pools, Pools],
    pc: PrefillCurve,
    dc: DecodeCurve,
    kv: KvTransfer,
    prices: Callable[[str], float | None],
    rate: float,
) -> tuple[dict[str, Any] | str, float]:
    """The decode pool the TPOT target sizes, then the prefill pool the TTFT target leaves
    room for (module docstring); or ``"tpot"`` / ``"ttft"`` where no replica meets it. With
    the least TTFT the pair reaches (a lone request). Each pool's GPUs at its accelerator's
    price (the fleet's $ per GPU-hour is their mean)."""
    gp, gd = pools
    osl = workload.output_len
    ttft, tpot = workload.ttft_target_s, workload.tpot_target_s
    sending = pc.ttft_p99_s + link_wait(pc.rate, kv.send_s)
    reach = float(sending[0] + kv.exposed_s + FIRST_TOKEN_STEPS * dc.tpot_s[0])
    ok = dc.rate * kv.receive_s < 1
    if tpot is not None:
        ok &= dc.tpot_s <= tpot
    if not ok.any():
        return "tpot", reach
    decoders = _replicas(rate, float(dc.rate[ok][-1]))  # rates rise with decoding
    r_d = rate / decoders
    tpot_s = float(np.interp(r_d, dc.rate, dc.tpot_s))
    receive_wait = float(link_wait(r_d, kv.receive_s))
    first = FIRST_TOKEN_STEPS * tpot_s
    budget = math.inf if ttft is None else ttft - kv.exposed_s - receive_wait - first
    most = float(highest_rate(pc.rate, sending, budget))
    if most <= 0:
        return "ttft", reach
    prefillers = _replicas(rate, most)
    r_p = rate / prefillers
    prefill = float(np.interp(r_p, pc.rate, pc.ttft_p99_s))
    kv_wait = float(link_wait(r_p, kv.send_s)) + receive_wait
    prefill_gpus, decode_gpus = prefillers * _gpus(pc.layout), decoders * _gpus(dc.layout)
    gpus = prefill_gpus + decode_gpus
    tokens_per_s = rate * osl
    usd_p, usd_d = prices(gp.accelerator.id), prices(gd.accelerator.id)
    usd_hour = None
    if usd_p is not None and usd_d is not None:
        usd_hour = usd_p * prefill_gpus + usd_d * decode_gpus
    return {
        "accelerator": gp.accelerator.id,
        "decode_accelerator": gd.accelerator.id,
        "precision": gp.precision,
        "prefill_tp": pc.layout.tp,
        "prefill_pp": pc.layout.pp,
        "prefill_replicas": prefillers,
        "prefill_rate_per_replica": r_p,
        "prefill_utilization": float(np.interp(r_p, pc.rate, pc.rho)),
        "decode_tp": dc.layout.tp,
        "decode_pp": dc.layout.pp,
        "decode_dp": dc.layout.dp,
        "decode_replicas": decoders,
        "decode_rate_per_replica": r_d,
        "decoding_per_replica": r_d * max(osl, 1) * tpot_s,  # Little's law
        "decode_slots": dc.slots,
        "fleet_gpus": gpus,
        "ttft_p99_s": prefill + kv_wait + kv.exposed_s + first,
        "ttft_prefill_p99_s": prefill,
        "ttft_kv_wait_p99_s": kv_wait,
        "ttft_kv_transfer_s": kv.exposed_s,
        "ttft_first_token_s": first,
        "tpot_s": tpot_s,
        "kv_link": kv.link,
        "kv_bytes_per_request": kv.bytes_per_request,
        "kv_transfer_s": kv.time_s,
        "output_tokens_per_s": tokens_per_s,
        "output_tokens_per_s_per_gpu": tokens_per_s / gpus,
        "output_tokens_per_s_per_user": 1 / tpot_s,
        "usd_per_gpu_hour": None if usd_hour is None else usd_hour / gpus,
        "usd_per_hour": usd_hour,
        "usd_per_1m_output_tokens": (
            None if usd_hour is None else usd_hour / SECONDS_PER_HOUR / tokens_per_s * 1e6
        ),
    }, reach


def _aggregated(row: dict[str, Any], workload: ServingWorkload) -> dict[str, Any]:
    """The cheapest aggregated row with its fleet's $/hour and tokens/s per user."""
    usd = row.get("usd_per_gpu_hour")
    return row | {
        "usd_per_hour": None if usd is None else usd * row["fleet_gpus"],
        "output_tokens_per_s_per_user": 1 / row["tpot_s"],
    }


def _winner(
    agg: Mapping[str, Any] | None, dis: Mapping[str, Any] | None
) -> tuple[str | None, float | None]:
    """Which serves the rate for less (cost per 1M output tokens where both are priced, else
    fleet GPUs), and the disaggregated fleet's measure over the aggregated one's."""
    if agg is None or dis is None:
        return None, None
    key = "usd_per_1m_output_tokens"
    if agg.get(key) is None or dis.get(key) is None:
        key = "fleet_gpus"
    ratio = dis[key] / agg[key]
    winner = "tie" if math.isclose(ratio, 1.0) else "disaggregated" if ratio < 1 else "aggregated"
    return winner, ratio


def _no_aggregated(rows: Iterable[Mapping[str, Any]]) -> str:
    """Why no aggregated fleet meets the targets: the layouts refused, by reason."""
    by: dict[str, int] = {}
    for r in rows:
        if not r["ok"]:
            by[r["field"]] = by.get(r["field"], 0) + 1
    told = ", ".join(f"{n} by {k}" for k, n in sorted(by.items()))
    return f"No aggregated fleet meets the targets: every replica layout is refused ({told})."


def _no_disaggregated(groups: list[Pools], counts: Mapping[str, int], quickest: float) -> str:
    """Why no disaggregated fleet meets the targets: the pairs refused by each target, the
    least TTFT any pair reaches, the layouts without room for a KV cache."""
    parts = []
    if counts.get("refused_ttft"):
        parts.append(
            f"{counts['refused_ttft']} of {counts['pairs']} layout pairs miss the TTFT p99"
            f" target (the quickest first token any pair gives a lone request is"
            f" {quickest:.4g} s: its prefill, the KV transfer and the first decode step)"
        )
    if counts.get("refused_tpot"):
        parts.append(
            f"{counts['refused_tpot']} miss the TPOT target at every decode batch (or the KV"
            " transfer saturates the decode replica's link first)"
        )
    reasons = [why for g in groups for _, why in g.refused]
    if reasons:
        common = max(set(reasons), key=reasons.count)
        parts.append(f"{len(reasons)} layouts are refused as pools (most: {common})")
    told = "; ".join(parts) if parts else "no layout holds the model"
    return f"No disaggregated fleet meets the targets: {told}."


def _notes(workload: ServingWorkload, groups: list[Pools]) -> tuple[str, ...]:
    overlap = (
        "after the prefill ends (vLLM NixlConnector's read after the prefill)"
        if workload.kv_overlap == "none"
        else "layer by layer as the prefill runs (Mooncake's layer-wise prefill)"
    )
    pools = "both pools on the same accelerator and precision"
    if workload.mixed_pools:
        pools = (
            "both pools in one precision, on the same accelerator or (mixed pools) on two, the"
            " KV cache then over the scale-out network, sent at the prefill GPU's NIC and"
            " received at the decode GPU's, each pool's GPUs at its own price"
        )
    notes = [
        "Disaggregated fleets: prefill replicas prefill only, decode replicas decode only, the"
        f" prompt's KV cache sent {overlap} over NVLink where the fleet fits one scale-up"
        f" domain, else over each GPU's scale-out NIC; {pools}, each at its fewest replicas for"
        " the rate. TTFT p99 adds the p99 of each part; TPOT is the decode step.",
        "The fronts count GPUs in fluid replicas (GPU-seconds per request), the x:y ratio a"
        " fleet approaches at scale; tokens/s per user is 1 / TPOT, points within the TTFT"
        " target only.",
    ]
    if workload.mixed_pools and len({g.accelerator.id for g in groups}) < 2:
        notes.append("Mixed pools asked for, but the sweep has one accelerator: nothing to mix.")
    elif workload.mixed_pools:
        notes.append(
            "Mixed pools: a GPU of either accelerator counts as one GPU in tokens/s per GPU;"
            " compare their costs."
        )
    return tuple(notes)
