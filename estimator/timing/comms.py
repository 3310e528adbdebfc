"""The communication plan of a training step, collective by collective: what each parallel
dimension sends, how often, to whom, and whether it hides behind compute, on the most-loaded
GPU. The rules (which collectives, how many calls, what message) are ``timing.collectives``',
the ones the step time charges, so the plan and the time breakdown cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.finetune import linear_weight_bytes
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes, nodes_spanned
from estimator.layout.sharding import stage_kind_counts, with_mtp
from estimator.memory.activations import DEFAULT_RECOMPUTE_MODULES
from estimator.memory.training import TrainingMemory, TrainingSetup, training_memory
from estimator.spec.accelerator import Accelerator
from estimator.spec.cluster import Cluster, cluster_of
from estimator.spec.model import ModelSpec
from estimator.spec.precision import DTYPES, Precision
from estimator.timing import collectives as rules
from estimator.timing.kernels import Collective, collective_time, kernel_profile

__all__ = ["CommEvent", "CommPlan", "communication_plan"]


@dataclass(frozen=True)
class CommEvent:
    """One collective of the step as the most-loaded GPU runs it."""

    dimension: str  # tp, cp, ep, pp, dp, zero3
    collective: str
    when: str  # where in the step
    message_bytes: float
    message_shape: tuple[int, ...]  # elements, e.g. (tokens, hidden)
    group_size: int
    nodes_per_group: int
    calls_per_microbatch: float
    calls_per_iteration: float
    time_per_call_s: float
    overlap: str  # "none", "hidden behind compute when it fits", ...

    @property
    def sent_bytes_per_iteration(self) -> float:
        """Bytes this GPU puts on the wire for this collective in one iteration."""
        return (
            self.message_bytes
            * rules.wire_factor(self.collective, self.group_size)
            * self.calls_per_iteration
        )

    @property
    def time_per_iteration_s(self) -> float:
        return self.time_per_call_s * self.calls_per_iteration


@dataclass(frozen=True)
class CommPlan:
    events: tuple[CommEvent, ...]
    microbatches: int
    world: int

    def by_dimension(self) -> dict[str, float]:
        """Bytes sent per GPU per iteration, by dimension."""
        out: dict[str, float] = {}
        for e in self.events:
            out[e.dimension] = out.get(e.dimension, 0.0) + e.sent_bytes_per_iteration
        return out

    @property
    def sent_bytes_per_gpu(self) -> float:
        return sum(e.sent_bytes_per_iteration for e in self.events)


def communication_plan(
    model: ModelSpec,
    accelerator: Accelerator,
    p: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    *,
    cluster: Cluster | None = None,
    tp_comm_overlap: bool = False,
    memory: TrainingMemory | None = None,
    moe_dispatcher: str = "flex",
    ep_comm_overlap: bool = False,
) -> CommPlan:
    """Every collective one iteration runs on the most-loaded GPU (stage 0 for the layer
    counts), with message sizes, call counts, group spans and times. ``memory`` is the plan's
    ``training_memory`` when the caller already has it; ``moe_dispatcher`` the stack's
    (``flex``: a token crosses to another scale-up domain once, ``collectives.domain_dedup``)."""
    if memory is None:  # the plan's memory estimate, unless the caller has it already
        memory = training_memory(model, accelerator, p, setup, precision)
    prof = kernel_profile(accelerator.id)
    domain = cluster or cluster_of(accelerator)
    m = setup.microbatches(p.dp)
    tokens = setup.seq_len * setup.micro_batch_size / p.cp
    counts = stage_kind_counts(model, p.pp, p.vp, memory.stage, p.stage_layers)
    counts = with_mtp(model, counts, memory.stage == p.pp - 1, setup.mtp_layers)  # last stage
    layers = int(sum(counts))
    passes = rules.collective_passes(setup.recompute)
    modules = setup.selective_modules  # Megatron-Core's recompute modules repeat some of them
    recomputed = [
        (rules.recomputed_work(model, k, modules), n)
        for k, n in enumerate(counts)
        if n and modules and modules != DEFAULT_RECOMPUTE_MODULES
    ]
    events: list[CommEvent] = []

    gpn = domain.gpus_per_node
    shapes = group_shapes(p)
    # One layout: every size and stride is an int. Dense gradients reduce over dp x cp.
    groups = {d: (int(shapes[d][0]), int(shapes[d][1])) for d in ("tp", "cp", "ep", "pp")}
    groups["dp"] = (int(shapes["dense_dp"][0]), int(shapes["dense_dp"][1]))

    def add(
        dim: str,
        collective: Collective,
        when: str,
        message: float,
        shape: tuple[int, ...],
        group: str,
        per_mb: float,
        per_iter: float,
        overlap: str,
        far_share: float = 1.0,
    ) -> None:
        size, stride = groups[group]
        t = collective_time(accelerator, prof, collective, message, size, stride, domain, far_share)
        events.append(
            CommEvent(
                dim,
                collective,
                when,
                float(message),
                shape,
                size,
                nodes_spanned(size, stride, gpn),
                per_mb,
                per_iter,
                float(t),
                overlap,
            )
        )

    h = model.hidden_size
    if p.tp > 1:
        msg = float(rules.tp_message_bytes(model, p, tokens, precision))
        hidden = "overlapped with GEMMs (tp_comm_overlap)" if tp_comm_overlap else "exposed"
        exchanges = sum(kind.tp_exchanges * n for kind, n in zip(model.kinds, counts, strict=True))
        calls = exchanges * passes + sum(n * again.tp_exchanges for again, n in recomputed)
        what = (
            "each layer, attention and MLP, fwd + bwd"
            if exchanges == rules.TP_CALLS_PER_LAYER * layers
            else "each block (token mixer, MLP or experts), fwd + bwd"
        )
        for name in rules.tp_collectives(bool(p.sequence_parallel)):
            add(
                "tp",
                name,
                what,
                msg,
                (int(tokens), h),
                "tp",
                calls,
                calls * m,
                hidden,
            )
    if p.cp > 1:
        for kind, n in zip(model.kinds, counts, strict=True):
            if n and kind.attention is not None:
                msg = float(rules.cp_message_bytes(kind, p, tokens, precision))
                calls = n * (p.cp - 1) * rules.CP_DIRECTIONS
                add(
                    "cp",
                    "send_recv",
                    f"ring attention, {kind.name} layers, fwd + bwd",
                    msg,
                    (int(tokens), rules.cp_width(kind, p)),
                    "cp",
                    calls,
                    calls * m,
                    "hidden behind blockwise attention",
                )
    if model.moe is not None and p.ep > 1:
        moe_layers = sum(n for kind, n in zip(model.kinds, counts, strict=True) if kind.routed)
        if moe_layers:
            msg = float(rules.ep_message_bytes(model, p, tokens, precision))
            again = sum(n * work.moe for work, n in recomputed)  # MoE layers recomputed whole
            calls = rules.EP_CALLS_PER_MOE_LAYER * (moe_layers * passes + again)
            size, stride = groups["ep"]
            share = 1.0
            if moe_dispatcher == "flex":
                share = float(
                    rules.domain_dedup(model.moe.top_k, size, stride, domain.scale_up_domain)
                )
            add(
                "ep",
                "all_to_all",
                "each MoE layer, dispatch and combine, fwd + bwd"
                + (" and the recomputed forward" if again else ""),
                msg,
                (int(tokens / p.tp * model.moe.top_k), h),
                "ep",
                calls,
                calls * m,
                (
                    "overlapped with another micro-batch's compute (ep_comm_overlap)"
                    if ep_comm_overlap
                    else "exposed"
                ),
                share,
            )
    if p.pp > 1:
        msg = float(rules.pp_message_bytes(model, p, tokens, precision))
        calls = rules.pp_sends_per_microbatch(p.vp)
        overlap = "overlapped (interleaved schedule)" if p.vp > 1 else "exposed"
        add(
            "pp",
            "send_recv",
            "stage boundary, activations fwd, gradients bwd",
            msg,
            (int(tokens / (p.tp if p.sequence_parallel else 1)), h),
            "pp",
            calls,
            calls * m,
            overlap,
        )
    grad_b = precision.bytes("gradients")
    w_b = DTYPES[precision.weights].bytes
    zero = int(p.optimizer_shard_stage)
    # Dense parameters synchronize over dp x cp, the routed experts over the expert data-parallel
    # ranks, as the step time charges them.
    experts = memory.expert_params_on_gpu
    trained_experts = 0.0 if setup.finetune.frozen else experts  # LoRA: the adapters, dense
    dense = memory.params_on_gpu - experts
    parts = [("dp", "", dense, memory.trainable_params_on_gpu - trained_experts)]
    if model.moe is not None:
        groups["edp"] = (int(shapes["edp"][0]), int(shapes["edp"][1]))
        parts.append(("edp", "routed experts' ", experts, trained_experts))
    for group, whose, params, trained in parts:
        if groups[group][0] <= 1:
            continue
        if zero >= 3:
            stored_b = linear_weight_bytes(setup.finetune, precision)
            layer_w, layer_g = rules.zero3_layer_payloads(
                params, trained, model.num_layers / p.pp, stored_b, grad_b, setup.finetune.frozen
            )
            add(
                "zero3",
                "all_gather",
                f"each layer, {whose}weights for fwd and for bwd",
                layer_w,
                (int(layer_w / stored_b),),
                group,
                rules.ZERO3_GATHERS_PER_LAYER * layers,
                rules.ZERO3_GATHERS_PER_LAYER * layers * m,
                "prefetched behind the previous layer",
            )
            add(
                "zero3",
                "reduce_scatter",
                f"each layer, {whose}gradients in bwd",
                layer_g,
                (int(layer_g / grad_b),),
                group,
                layers,
                layers * m,
                "behind the backward pass",
            )
        else:
            sync = rules.dp_sync_collective(zero >= 1)
            add(
                "dp",
                sync,
                f"end of step, {whose}gradients",
                trained * grad_b,
                (int(trained),),
                group,
                0,
                1,
                "bucketed behind the last backward pass",
            )
            if zero >= 1:
                add(
                    "dp",
                    "all_gather",
                    f"end of step, {whose}updated parameters",
                    trained * w_b,
                    (int(trained),),
                    group,
                    0,
                    1,
                    "behind the next forward pass",
                )
    return CommPlan(tuple(events), m, p.num_gpus)
