"""Serving layout sweep: every replica layout of a space (accelerator x precision x TP x PP) at
its best concurrency under the latency targets (the most requests in flight whose steady state
on the workload's engine meets them, ``serving.estimate.concurrency_within_targets``) or, with a
fleet request rate, at the highest rate per replica that does; its throughput, latencies, cost
per 1M tokens and the replicas the traffic needs; layouts refused carry their reason. A serving
space is small, so this loops over single layouts' steady states rather than evaluating arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from estimator.energy import PowerSetup, energy_of, token_prices
from estimator.errors import SpecError
from estimator.inputs.accelerator import GIB, Accelerator
from estimator.inputs.cluster import Cluster, cluster_of
from estimator.inputs.lengths import LengthDistribution
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision, get_precision
from estimator.layout.parallel import Parallelism
from estimator.layout.pipeline import serving_stage_layers
from estimator.memory.inference import InferenceMemory, InferenceSetup, inference_memory
from estimator.serving.disagg import Overlap
from estimator.serving.estimate import (
    DEFAULT_MAX_BATCH,
    concurrency_within_targets,
    estimate_load,
    fleet_replicas,
    rate_within_targets,
)
from estimator.serving.load import EnginePreset, LoadPoint, engine_preset
from estimator.sweep import disagg
from estimator.sweep.pareto import cheapest_front
from estimator.sweep.training import (
    DEFAULT_ACCELERATORS,
    SweepTooLarge,
    accelerator_spec,
    price_of,
)
from estimator.sweep.training_space import facility_w_of
from estimator.timing.rates import SECONDS_PER_HOUR

__all__ = [
    "ServingSearch",
    "ServingSweep",
    "ServingWorkload",
    "default_search",
    "rate_within_targets",
    "sweep_serving",
]


@dataclass(frozen=True)
class ServingWorkload:
    """What to serve: prompt and output lengths, latency targets, and the traffic to carry
    (``output_tokens_per_s`` over the whole fleet; None sizes one replica). With a
    ``request_rate`` (requests/s over the fleet, Poisson arrivals) the targets are TTFT p99 and
    TPOT under that load on ``engine``'s scheduler (``serving.load``): each layout serves the
    highest rate per replica that meets them, and the fleet is as many replicas as the rate
    needs. ``disaggregated``: beside the aggregated fleets, the disaggregated ones (prefill and
    decode pools, ``sweep.disagg``) for the same rate and targets, their KV transfer overlapped
    with the prefill as ``kv_overlap`` says, and with ``mixed_pools`` a prefill pool on one of
    the sweep's accelerators paired with a decode pool on another too. ``lengths``: a
    dataset's length distribution (the load model reads its spread; ``input_len`` /
    ``output_len`` are then its rounded means);
    ``token_budget`` / ``max_seqs``: the engine's limits as the deployment sets them."""

    input_len: int
    output_len: int
    ttft_target_s: float | None = None
    tpot_target_s: float | None = None
    output_tokens_per_s: float | None = None
    prices: Mapping[str, float] = field(default_factory=dict)
    request_rate: float | None = None
    engine: str = "vllm"
    disaggregated: bool = False
    kv_overlap: Overlap = "none"
    mixed_pools: bool = False  # disaggregated: also pair pools on two accelerators
    lengths: LengthDistribution | None = None  # a dataset's (input/output_len its rounded means)
    token_budget: int | None = None  # the deployment's engine limits (else the preset's)
    max_seqs: int | None = None
    kv_fraction: float | None = None  # its KV cache's memory fraction and block size
    kv_block: int | None = None
    # the network, as a single plan's cluster (None: each accelerator's catalog values)
    scale_up_domain: int | None = None
    scale_out_gbit_per_s: float | None = None
    oversubscription: float = 1.0
    # the planner's optimism on the rate within targets kept in hand: each replica is planned
    # at its rate within the targets over (1 + rate_headroom) (``fleet_replicas``)
    rate_headroom: float = 0.0
    # energy (``estimator.energy``): each GPU's power and the overheads; the blended token
    # price's mix; ``objective`` "energy" orders the served rows by joules per output token
    power: PowerSetup = field(default_factory=PowerSetup)
    input_per_output: float | None = None  # None: the catalog's (3:1)
    objective: str = "cost"

    def __post_init__(self) -> None:
        if self.objective not in ORDER:
            raise SpecError("objective", f"must be one of {', '.join(ORDER)}", self.objective)

    def setup(self, concurrency: int = 1) -> InferenceSetup:
        return InferenceSetup(
            self.input_len, self.output_len, concurrency=concurrency, lengths=self.lengths
        )

    def scheduler(self) -> EnginePreset:
        """The engine preset with the deployment's limits (``load.engine_preset``)."""
        return engine_preset(
            self.engine,
            self.token_budget,
            self.max_seqs,
            kv_fraction=self.kv_fraction,
            kv_block_tokens=self.kv_block,
        )

    def cluster(self, acc: Accelerator) -> Cluster:
        """The cluster ``acc``'s replicas run on: the stated network over its catalog's."""
        return cluster_of(
            acc, scale_up_domain=self.scale_up_domain,
            scale_out_gbit_per_s=self.scale_out_gbit_per_s, oversubscription=self.oversubscription,
        )  # fmt: skip

    @property
    def mean_output(self) -> float:
        """Output tokens per request on average (the dataset's mean)."""
        return self.output_len if self.lengths is None else self.lengths.mean_output


@dataclass(frozen=True)
class ServingSearch:
    """Axes of a serving sweep: one replica is ``tp x pp`` GPUs of one accelerator (catalog ids
    or specs given as they are). ``ep``: the expert-parallel degrees to try inside each TP group
    (a mixture-of-experts model's experts over ``ep`` ranks, each expert split over ``tp / ep``);
    None: ``ep = tp`` for a mixture-of-experts model (every expert whole on one rank), 1 for a
    dense one. ``dp``: attention data-parallel degrees (mixture-of-experts models: ``dp``
    groups of ``tp`` GPUs, the experts over ``ep`` of all ``dp x tp``, ``ep = dp x tp`` when
    ``ep`` is None). A degree the layout cannot take is a refused row with the estimator's
    reason."""

    accelerators: tuple[str | Accelerator, ...] = DEFAULT_ACCELERATORS
    tp: tuple[int, ...] = (1, 2, 4, 8)
    pp: tuple[int, ...] = (1, 2, 4)
    precision: tuple[str, ...] = ("bf16", "fp8-serving")
    ep: tuple[int, ...] | None = None
    dp: tuple[int, ...] = (1,)
    # bounds on the product of the axes (the widened default's: ``default_search``): replicas
    # of more GPUs are not tried, nor attention data parallel beside pipeline stages
    max_gpus: int | None = None
    dp_with_pp: bool = True
    note: str = ""  # why the space is what it is (the widened default's), for the answer

    def tried(self, tp: int, pp: int, dp: int) -> bool:
        """Whether the layout ``tp x pp x dp`` is within the bounds (else not evaluated)."""
        if self.max_gpus is not None and tp * pp * dp > self.max_gpus:
            return False
        return self.dp_with_pp or dp == 1 or pp == 1

    def eps(self, model: ModelSpec, tp: int, dp: int = 1) -> tuple[int, ...]:
        """The expert-parallel degrees a ``dp x tp`` layout is tried at."""
        if self.ep is None:
            return (dp * tp if model.moe is not None else 1,)
        return self.ep


# what the served rows are ordered by (then by throughput), by objective
ORDER = {"cost": "usd_per_1m_output_tokens", "energy": "j_per_output_token"}
WIDE_TP = (1, 2, 4, 8, 16)  # TP 16: a replica over two 8-GPU nodes (a scale-up domain of 16+)
WIDE_DP = (1, 2, 4, 8, 16)  # attention data parallel with wide EP (DeepSeek's, SGLang's, vLLM's)
WIDE_MAX_GPUS = 32  # the plain default's largest replica (tp 8 x pp 4): the widened one's bound


def too_large_for_a_node(
    model: ModelSpec, accelerators: tuple[Accelerator, ...], precisions: tuple[str, ...]
) -> bool:
    """Whether the model's weights leave no room for one sequence's KV cache on one node of
    every accelerator at its plain TP (``tp`` = the node's GPUs, ``pp`` 1), in every precision
    tried: a plan for it is a multi-node replica, or attention data parallel with wide EP."""
    setup = InferenceSetup(1, 1)
    for acc in accelerators:
        node = cluster_of(acc).gpus_per_node
        for name in precisions:
            try:
                memory = inference_memory(
                    model, acc, Parallelism(tp=node, ep=node if model.moe else 1), setup,
                    get_precision(name),
                )  # fmt: skip
            except SpecError:  # a layout the model refuses at a node's TP: not decided here
                continue
            if memory.max_concurrency >= 1:
                return False
    return True


def default_search(
    model: ModelSpec,
    accelerators: tuple[str | Accelerator, ...] = DEFAULT_ACCELERATORS,
    precisions: tuple[str, ...] | None = None,
) -> ServingSearch:
    """The sweep's default space for ``model``: ``ServingSearch``'s axes, widened where the
    model is too large for one node's plain TP (``too_large_for_a_node``) to the layouts such
    models are deployed with: TP 16 over two nodes and, for a mixture-of-experts model,
    attention data parallel (``WIDE_DP``) with the experts over every GPU (wide EP: DeepSeek-V3's
    DP-attention serving, SGLang's ``--enable-dp-attention``, vLLM's ``--data-parallel-size``
    with ``--enable-expert-parallel``); replicas of at most ``WIDE_MAX_GPUS`` GPUs, attention
    data parallel at ``pp`` 1 (the engines run it so; the estimator refuses it beside stages)."""
    plain = ServingSearch(accelerators=accelerators)
    precisions = precisions or plain.precision
    specs = tuple(map(accelerator_spec, accelerators))
    if not too_large_for_a_node(model, specs, precisions):
        return replace(plain, precision=precisions)
    return replace(
        plain,
        precision=precisions,
        tp=WIDE_TP,
        dp=WIDE_DP if model.moe is not None else plain.dp,
        max_gpus=WIDE_MAX_GPUS,
        dp_with_pp=False,
        note=(
            f"{model.id or 'The model'} leaves no room for a KV cache on one node at its plain"
            " TP on any accelerator tried, so the default space adds the layouts such models"
            " are served with: TP 16 over two nodes"
            + (", attention data parallel 2-16 with the experts over every GPU (wide EP)"
               if model.moe is not None else "")
            + f"; replicas up to {WIDE_MAX_GPUS} GPUs."
        ),
    )  # fmt: skip


@dataclass(frozen=True)
class ServingSweep:
    """A serving sweep's answer: every layout's row (``ok`` or its refusal's ``field`` and
    ``reason``), cheapest served first; the counts by outcome; the served layouts on the front
    of cost per 1M output tokens against output tokens/s per GPU; notes; with a disaggregated
    workload, the comparison of aggregated and disaggregated fleets (``sweep.disagg``)."""

    rows: tuple[dict[str, Any], ...]
    counts: dict[str, int]
    pareto_cost: tuple[dict[str, Any], ...]
    notes: tuple[str, ...] = ()
    exact: bool = True
    disaggregated: disagg.DisaggComparison | None = None
    widen: str | None = None  # with no layout served: which axis to widen


def sweep_serving(
    model: ModelSpec,
    workload: ServingWorkload,
    space: ServingSearch | None = None,
    *,
    max_layouts: int = 20_000,
    progress: Callable[[int, int], None] | None = None,
) -> ServingSweep:
    """Every replica layout of ``space``: at its best concurrency under the targets (the most
    requests in flight whose steady state meets TTFT p99 and TPOT), its throughput, latencies,
    cost per 1M output tokens and the replicas the traffic needs; refused layouts carry their
    reason. Sorted by cost per 1M output tokens (unpriced last). A serving space is small
    (accelerators x tp x pp x precision), so this loops over layouts (``estimate_load``) rather
    than evaluating arrays. ``progress(done, total)`` is called after each layout."""
    space = space or ServingSearch()
    size = _checked_size(model, workload, space, max_layouts)
    specs = tuple(map(accelerator_spec, space.accelerators))
    for acc in specs:  # a network no cluster has is refused before any layout
        workload.cluster(acc)
    # Disaggregated: each layout also as a pool, with its pairs, and on the aggregated front.
    total = size * (4 if workload.disaggregated else 1)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    groups = list(itertools.product(specs, space.precision))
    pools = []
    if workload.disaggregated:  # first: a target no fleet meets is refused before the sweep
        pools = disagg.pools(model, workload, groups, itertools.product(space.tp, space.pp), tick)
    rows = _layout_rows(model, workload, space, groups, tick)
    rows.sort(key=lambda r: _row_order(r, workload.objective))
    counts = {"evaluated": len(rows), "ok": sum(r["ok"] for r in rows)}
    for r in rows:
        if not r["ok"]:
            counts[f"refused_{r['field']}"] = counts.get(f"refused_{r['field']}", 0) + 1
    served = [r for r in rows if r["ok"]]
    pareto = cheapest_front(served, "usd_per_1m_output_tokens", "output_tokens_per_s_per_gpu")
    notes = list(model.notes) + ([space.note] if space.note else [])
    if any(r.get("usd_per_1m_output_tokens") is None for r in served):
        notes.append("Accelerators without a catalog price have no cost until one is given.")
    comparison = None
    if workload.disaggregated:
        comparison = disagg.compare(
            workload, pools, rows, model, lambda acc: price_of(acc, workload.prices), tick
        )
    widen = None if served else widen_hint(counts, space, model)
    return ServingSweep(
        tuple(rows), counts, tuple(pareto), tuple(notes), model.exact, comparison, widen
    )


def _checked_size(
    model: ModelSpec, workload: ServingWorkload, space: ServingSearch, max_layouts: int
) -> int:
    """The layouts ``space`` holds (at most ``max_layouts``, else ``SweepTooLarge``), once the
    space and the workload are checked: expert and attention data parallelism on a
    mixture-of-experts model only, a fleet rate costed per output token, disaggregated
    planning's rate and fixed lengths, the engine's limits; a refusal before any layout."""
    eps = 1 if space.ep is None else len(space.ep)
    widths = {
        "accelerators": len(space.accelerators),
        "tp": len(space.tp),
        "pp": len(space.pp),
        "dp": len(space.dp),
        "precision": len(space.precision),
        "ep": eps,
    }
    size = math.prod(widths.values())
    if size > max_layouts:
        raise SweepTooLarge(size, max_layouts, widths)
    for name, sizes in (("ep", space.ep or ()), ("dp", space.dp)):
        if model.moe is None and any(e != 1 for e in sizes):
            what = "expert parallelism" if name == "ep" else "attention data parallel"
            raise SpecError(
                f"layout.{name}", f"{what} needs a mixture-of-experts model (this one is dense)",
                [e for e in sizes if e != 1],
            )  # fmt: skip
    if workload.request_rate is not None and workload.output_len < 1:
        raise SpecError(
            "output_len", "must be >= 1 to cost a fleet per output token", workload.output_len
        )
    if workload.disaggregated and workload.request_rate is None:
        raise SpecError(
            "request_rate", "disaggregated planning needs a fleet request rate (requests/s)", None
        )
    if workload.mixed_pools and not workload.disaggregated:
        raise SpecError("mixed_pools", "pairs disaggregated pools: needs disaggregated", True)
    if workload.disaggregated and workload.lengths is not None:
        raise SpecError(
            "dataset", "disaggregated planning takes fixed input_len / output_len", None
        )
    workload.scheduler()  # a bad engine limit is refused before any layout
    return size


def _layout_rows(
    model: ModelSpec,
    workload: ServingWorkload,
    space: ServingSearch,
    groups: list[tuple[Accelerator, str]],
    tick: Callable[[], None],
) -> list[dict[str, Any]]:
    """Each layout's row (``_serving_row``) over the ``(accelerator, precision)`` ``groups``
    and the space's tp x pp x dp x ep, ``tick`` after each; a layout out of the space's bounds
    (``ServingSearch.tried``) is counted, not evaluated."""
    rows = []
    for (acc, prec), tp, pp, dp in itertools.product(groups, space.tp, space.pp, space.dp):
        if not space.tried(tp, pp, dp):
            for _ in space.eps(model, tp, dp):
                tick()
            continue
        for ep in space.eps(model, tp, dp):
            rows.append(
                _serving_row(model, acc, prec, Parallelism(tp=tp, pp=pp, dp=dp, ep=ep), workload)
            )
            tick()
    return rows


def _row_order(r: dict[str, Any], objective: str) -> tuple[int, float, float]:
    """A row's place in the answer: served first, by the objective's figure (``ORDER``; none:
    last), then by output tokens/s, fastest first."""
    cost = r.get(ORDER[objective])
    return (
        0 if r["ok"] else 1,
        math.inf if cost is None else cost,
        -r.get("output_tokens_per_s", 0.0),
    )


def widen_hint(counts: Mapping[str, int], space: ServingSearch, model: ModelSpec) -> str:
    """Which axis to widen when no layout serves: by what refused the most of them."""
    refused = {k[8:]: n for k, n in counts.items() if k.startswith("refused_")}
    if not refused:
        return "no layout was tried within the space's bounds: widen tp, pp or dp"
    top = max(refused, key=lambda k: refused[k])
    biggest = max(space.tp) * max(space.pp) * max(space.dp)
    if "targets" in refused:  # some layouts fit: the targets are what no fitting one meets
        top = "targets"
    if top == "memory":
        more = f"tp beyond {max(space.tp)} or pp beyond {max(space.pp)}"
        if model.moe is not None and max(space.dp) == 1:
            more += ", or attention dp with wide ep (layout.dp)"
        return (
            f"the layouts up to {biggest} GPUs are out of memory: widen {more}, or add a"
            " lower precision (fp8-serving, nvfp4)"
        )
    if top == "targets":
        return (
            "no layout meets the latency targets: loosen ttft_target_s / tpot_target_s, or"
            f" widen tp beyond {max(space.tp)} (a faster replica)"
        )
    return f"most layouts were refused by {top}: see their reasons below"


def _serving_row(
    model: ModelSpec,
    acc: Accelerator,
    prec_name: str,
    layout: Parallelism,
    workload: ServingWorkload,
) -> dict[str, Any]:
    """One replica layout at its best concurrency under the targets (or, with a request rate,
    at the highest rate per replica that meets them under load), or why it has none."""
    row: dict[str, Any] = {
        "accelerator": acc.id,
        "precision": prec_name,
        "tp": layout.tp,
        "pp": layout.pp,
        "dp": layout.dp,
        "ep": layout.ep,
        "num_gpus": layout.num_gpus,
    }
    precision = get_precision(prec_name)
    usd = price_of(acc.id, workload.prices)
    out = row | _load_row(model, acc, layout, precision, usd, workload)
    return out | priced(out, acc, workload) if out["ok"] else out


def _load_row(
    model: ModelSpec,
    acc: Accelerator,
    layout: Parallelism,
    precision: Precision,
    usd: float | None,
    workload: ServingWorkload,
) -> dict[str, Any]:
    """A replica's steady state on the workload's engine (``estimate_load``, with the
    deployment's limits): at the most requests in flight that meet the targets
    (``_at_concurrency``) or, with a fleet request rate, at its share of the rate
    (``_at_rate``); or why it has none."""
    engine = workload.scheduler()
    try:
        if layout.stage_layers is None:  # the engine's split of the layers over pp (any pp)
            split = serving_stage_layers(model, layout.pp, engine.pp_split)
            layout = replace(layout, stage_layers=split)
        memory = inference_memory(model, acc, layout, workload.setup(), precision)
        if memory.max_concurrency < 1:
            return _no_kv_cache(memory)

        cluster = workload.cluster(acc)

        def at(concurrency: int = 1, rate: float | None = None) -> LoadPoint:
            return estimate_load(
                model, acc, layout, workload.setup(concurrency), precision, engine=engine,
                request_rate=rate, memory=memory, cluster=cluster,
            )  # fmt: skip

        if workload.request_rate is not None:
            return _at_rate(at, usd, workload, layout.num_gpus)
        return _at_concurrency(at, memory, usd, workload, layout.num_gpus)
    except SpecError as exc:
        return {"ok": False, "field": exc.field, "reason": str(exc)}


def _at_concurrency(
    at: Callable[[int], LoadPoint],
    memory: InferenceMemory,
    usd: float | None,
    workload: ServingWorkload,
    gpus: int,
) -> dict[str, Any]:
    """The most requests a replica keeps in flight whose steady state meets the TTFT p99 and
    TPOT targets (``concurrency_within_targets``; without targets, as many as its KV cache
    holds), with that steady state's latencies and throughput: the footing the serving planner
    answers on, not a lone request's TTFT beside a decode step without the prefills that share
    it."""
    cap = min(memory.max_concurrency, DEFAULT_MAX_BATCH)
    best, point = concurrency_within_targets(
        at, cap, workload.ttft_target_s, workload.tpot_target_s
    )
    if point is None:
        reason = "no concurrency meets the TTFT p99/TPOT targets in steady state"
        return {"ok": False, "field": "targets", "reason": reason}
    replicas = 1
    if workload.output_tokens_per_s is not None:
        replicas = math.ceil(workload.output_tokens_per_s / point.output_tokens_per_s)
    per_1m = None
    if usd is not None:  # all-in: the replica's GPU-hours over the output tokens it serves
        per_1m = usd * gpus / SECONDS_PER_HOUR / point.output_tokens_per_s * 1e6
    return _served(point, usd, per_1m, replicas, gpus) | {"concurrency": best}


def _served(
    point: LoadPoint, usd: float | None, per_1m: float | None, replicas: int, gpus: int
) -> dict[str, Any]:
    """A served row's figures from its steady state (its token prices and energy: ``priced``)."""
    return {
        "ok": True,
        "concurrency": round(point.running),
        "ttft_s": point.ttft_s,
        "ttft_p99_s": point.ttft_p99_s,
        "tpot_s": point.tpot_s,
        "output_tokens_per_s": point.output_tokens_per_s,
        "output_tokens_per_s_per_gpu": point.output_tokens_per_s / gpus,
        "usd_per_gpu_hour": usd,
        "usd_per_1m_output_tokens": per_1m,
        "usd_per_1m_input_tokens": None,
        "replicas": replicas,
        "fleet_gpus": replicas * gpus,
        # what ``priced`` reads, left out of the row there
        "_rates": (point.requests_per_s, point.output_tokens_per_s, point.prefill_time_share),
    }


def priced(row: dict[str, Any], acc: Accelerator, workload: ServingWorkload) -> dict[str, Any]:
    """A served row's token prices as providers state them (``energy.token_prices``: input
    and output by prefill's and decode's share of the replica's time, blended at the
    workload's ``input_per_output``; no prefix cache in a sweep, so no cached-input price) and
    its energy per output token at the facility (``energy.energy_of``; empty without a power
    figure)."""
    requests_per_s, out_tps, share = row.pop("_rates")
    gpus = row["num_gpus"]
    usd_hour = None if row["usd_per_gpu_hour"] is None else row["usd_per_gpu_hour"] * gpus
    mean_input = workload.input_len if workload.lengths is None else workload.lengths.mean_input
    prices = token_prices(
        usd_hour, (requests_per_s * mean_input, out_tps), share,
        input_per_output=workload.input_per_output,
    )  # fmt: skip
    out: dict[str, Any] = {
        "usd_per_1m_input_tokens": prices.input,
        "usd_per_1m_output_tokens_decode": prices.output,
        "usd_per_1m_blended_tokens": prices.blended,
        "j_per_output_token": None,
        "kwh_per_1m_output_tokens": None,
        "output_tokens_per_s_per_mw": None,
    }
    watts = facility_w_of(acc, workload.power)
    if watts is not None and out_tps > 0:
        e = energy_of(watts, gpus, out_tps)
        out |= {
            "j_per_output_token": e.j_per_token,
            "kwh_per_1m_output_tokens": e.kwh_per_1m_tokens,
            "output_tokens_per_s_per_mw": e.tokens_per_s_per_mw,
        }
    return out


def _no_kv_cache(memory: InferenceMemory) -> dict[str, Any]:
    """The refusal of a layout whose weights leave no room for one sequence's KV cache."""
    reason = (
        f"out of memory: weights need {memory.weights_bytes / GIB:.1f} GiB of "
        f"{memory.capacity_bytes / GIB:.1f} GiB per GPU, no room for a KV cache"
    )
    return {"ok": False, "field": "memory", "reason": reason}


def _at_rate(
    at: Callable[..., LoadPoint], usd: float | None, workload: ServingWorkload, gpus: int
) -> dict[str, Any]:
    """The highest Poisson rate per replica whose steady state meets the TTFT p99 and TPOT
    targets (bisection below the replica's capacity), the replicas the fleet's rate needs and
    the all-in cost per 1M output tokens at that rate."""
    total = workload.request_rate
    assert total is not None
    lo = rate_within_targets(
        lambda rate: at(rate=rate), workload.ttft_target_s, workload.tpot_target_s
    )
    if lo <= 0:
        return {
            "ok": False,
            "field": "targets",
            "reason": "no load meets the TTFT p99/TPOT targets",
        }
    replicas = fleet_replicas(total, lo, workload.rate_headroom)
    point = at(rate=total / replicas)  # each replica's share of the fleet's rate
    per_1m = None
    if usd is not None:  # all-in: the fleet's GPU-hours over the output tokens it serves
        per_1m = usd * gpus * replicas / SECONDS_PER_HOUR / (total * workload.mean_output) * 1e6
    return _served(point, usd, per_1m, replicas, gpus) | {
        "rate_per_replica": lo,
        "planned_rate_per_replica": lo / (1 + workload.rate_headroom),
        "headroom": lo * replicas / total - 1,
    }
