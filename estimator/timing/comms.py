"""The communication plan of a training step, collective by collective: what each parallel
dimension sends, how often, to whom, and whether it hides behind compute, on the most-loaded
GPU. The rules (which collectives, how many calls, what message) are ``timing.collectives``',
the ones the step time charges, so the plan and the time breakdown cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.finetune import linear_weight_bytes
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.parallel import Parallelism
from estimator.layout.ranks import group_shapes, nodes_spanned
from estimator.layout.sharding import stage_kind_counts, with_mtp
from estimator.memory.activations import DEFAULT_RECOMPUTE_MODULES
from estimator.memory.training import TrainingMemory, TrainingSetup, training_memory
from estimator.timing import collectives as rules
from estimator.timing.kernels import Collective, KernelProfile, collective_time
from estimator.xp import Num

if TYPE_CHECKING:
    from estimator.context import Context
    from estimator.timing.training import TimingOptions

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
    c: Context,
    setup: TrainingSetup,
    options: TimingOptions | None = None,
    memory: TrainingMemory | None = None,
) -> CommPlan:
    """Every collective one iteration runs on the most-loaded GPU (stage 0 for the layer
    counts), with message sizes, call counts, group spans and times, dimension by dimension:
    TP, CP, EP, PP, then DP / ZeRO, over the context's network (``c.domain``). Of the stack's
    ``options`` (default: the default stack's) it reads the TP and EP overlaps and the MoE
    dispatcher (``flex``: a token crosses to another scale-up domain once,
    ``collectives.domain_dedup``). ``memory`` is the plan's ``training_memory`` when the caller
    already has it."""
    from estimator.timing.training import TimingOptions  # timing.training imports this module

    options = options or TimingOptions()
    model, accelerator, p, precision = c.model, c.acc, c.p, c.precision
    if memory is None:  # the plan's memory estimate, unless the caller has it already
        memory = training_memory(model, accelerator, p, setup, precision)
    domain = c.domain
    s = _stage(model, p, setup, precision, memory)
    calls = (
        *_tp_calls(s, options.tp_comm_overlap),
        *_cp_calls(s),
        *_ep_calls(s, domain.scale_up_domain, options.moe_dispatcher, options.ep_comm_overlap),
        *_pp_calls(s),
        *_dp_calls(s),
    )
    events = tuple(_event(call, s, accelerator, c.prof, domain) for call in calls)
    return CommPlan(events, int(s.microbatches), p.num_gpus)


def _event(
    call: _Call, s: _Stage, accelerator: Accelerator, prof: KernelProfile, domain: Cluster
) -> CommEvent:
    """``call`` timed over its group (``collective_time``: scale-up inside a domain, the
    hierarchy across), with the nodes the group spans."""
    size, stride = s.groups[call.group]
    message, far = call.message_bytes, call.far_share
    t = collective_time(accelerator, prof, call.collective, message, size, stride, domain, far)
    return CommEvent(
        call.dimension,
        call.collective,
        call.when,
        float(call.message_bytes),
        call.message_shape,
        size,
        nodes_spanned(size, stride, domain.gpus_per_node),
        float(call.calls_per_microbatch),
        float(call.calls_per_iteration),
        float(t),
        call.overlap,
    )


@dataclass(frozen=True, slots=True)
class _Stage:
    """What the most-loaded GPU runs in one iteration, as each dimension's traffic reads it:
    its stage's layers by kind (``counts``, the MTP depths' on the last stage; ``layers`` their
    sum), the ``tokens`` of one micro-batch on a rank (``s b / cp``), the ``passes`` that run a
    layer's TP and EP collectives, the layer kinds selective recompute's modules run again
    (``recomputed``: their ``Recomputed`` and count) and each group's (size, stride)."""

    model: ModelSpec
    p: Parallelism
    setup: TrainingSetup
    precision: Precision
    memory: TrainingMemory
    microbatches: Num
    tokens: float
    counts: tuple[Num, ...]
    layers: int
    passes: int
    zero_stage: int  # the ZeRO stage the memory model applies (distributed optimizer: 1)
    recomputed: tuple[tuple[rules.Recomputed, Num], ...]
    groups: Mapping[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class _Call:
    """One collective of the plan before it is timed: ``group`` names its ``_Stage.groups``
    entry, ``far_share`` the share of a cross-domain all-to-all's bytes the dispatcher sends
    (``collective_time``)."""

    dimension: str
    collective: Collective
    when: str
    message_bytes: Num
    message_shape: tuple[int, ...]
    group: str
    calls_per_microbatch: Num
    calls_per_iteration: Num
    overlap: str
    far_share: float = 1.0


def _stage(
    model: ModelSpec,
    p: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    memory: TrainingMemory,
) -> _Stage:
    """The stage ``memory`` was estimated for (stage 0 for the layer counts, with the MTP
    depths where it is the last), and one layout's groups: every size and stride an int; dense
    gradients reduce over dp x cp (``dense_dp``), routed experts' over ``edp``."""
    counts = stage_kind_counts(model, p.pp, p.vp, memory.stage, p.stage_layers)
    counts = with_mtp(model, counts, memory.stage == p.pp - 1, setup.mtp_layers)  # last stage
    modules = setup.selective_modules  # Megatron-Core's recompute modules repeat some of them
    recomputed = tuple(
        (rules.recomputed_work(model, k, modules), n)
        for k, n in enumerate(counts)
        if n and modules and modules != DEFAULT_RECOMPUTE_MODULES
    )
    shapes = group_shapes(p)
    groups = {d: (int(shapes[d][0]), int(shapes[d][1])) for d in ("tp", "cp", "ep", "pp")}
    groups["dp"] = (int(shapes["dense_dp"][0]), int(shapes["dense_dp"][1]))
    if model.moe is not None:
        groups["edp"] = (int(shapes["edp"][0]), int(shapes["edp"][1]))
    return _Stage(
        model=model,
        p=p,
        setup=setup,
        precision=precision,
        memory=memory,
        microbatches=setup.microbatches(p.dp),
        tokens=setup.seq_len * setup.micro_batch_size / p.cp,
        counts=tuple(counts),
        layers=int(sum(counts)),
        passes=rules.collective_passes(setup.recompute),
        zero_stage=int(p.optimizer_shard_stage),
        recomputed=recomputed,
        groups=groups,
    )


def _tp_calls(s: _Stage, tp_comm_overlap: bool) -> tuple[_Call, ...]:
    """Tensor parallelism: an all-reduce after attention and after the MLP (Shoeybi et al.
    2019, Megatron-LM, the ``g`` operator), split by sequence parallelism into an all-gather
    before and a reduce-scatter after (Korthikanti et al. 2022), in forward and backward
    (``collectives.collective_passes``), plus the exchanges selective recompute's modules run
    again. Message: a layer's activations, ``s b / cp x h x activation bytes``
    (``collectives.tp_message_bytes``); hybrid kinds exchange ``LayerKind.tp_exchanges``
    times."""
    model, p = s.model, s.p
    if p.tp <= 1:
        return ()
    msg = float(rules.tp_message_bytes(model, p, s.tokens, s.precision))
    hidden = "overlapped with GEMMs (tp_comm_overlap)" if tp_comm_overlap else "exposed"
    exchanges = sum(kind.tp_exchanges * n for kind, n in zip(model.kinds, s.counts, strict=True))
    calls = exchanges * s.passes + sum(n * again.tp_exchanges for again, n in s.recomputed)
    what = (
        "each layer, attention and MLP, fwd + bwd"
        if exchanges == rules.TP_CALLS_PER_LAYER * s.layers
        else "each block (token mixer, MLP or experts), fwd + bwd"
    )
    shape = (int(s.tokens), model.hidden_size)
    return tuple(
        _Call(
            dimension="tp",
            collective=name,
            when=what,
            message_bytes=msg,
            message_shape=shape,
            group="tp",
            calls_per_microbatch=calls,
            calls_per_iteration=calls * s.microbatches,
            overlap=hidden,
        )
        for name in rules.tp_collectives(bool(p.sequence_parallel))
    )


def _cp_calls(s: _Stage) -> tuple[_Call, ...]:
    """Context parallelism: ring attention (Liu et al. 2023; Megatron-Core's ``p2p`` context
    parallel communication) sends each attention layer's K/V block to the next rank ``cp - 1``
    times, in forward and again in backward (``collectives.CP_DIRECTIONS``). Message: ``s b /
    cp x (KV heads / tp, at least one) x (qk + v head dims) x activation bytes``
    (``collectives.cp_message_bytes``), one event per layer kind with attention."""
    p = s.p
    if p.cp <= 1:
        return ()
    out = []
    for kind, n in zip(s.model.kinds, s.counts, strict=True):
        if n and kind.attention is not None:
            calls = n * (p.cp - 1) * rules.CP_DIRECTIONS
            out.append(
                _Call(
                    dimension="cp",
                    collective="send_recv",
                    when=f"ring attention, {kind.name} layers, fwd + bwd",
                    message_bytes=float(rules.cp_message_bytes(kind, p, s.tokens, s.precision)),
                    message_shape=(int(s.tokens), rules.cp_width(kind, p)),
                    group="cp",
                    calls_per_microbatch=calls,
                    calls_per_iteration=calls * s.microbatches,
                    overlap="hidden behind blockwise attention",
                )
            )
    return tuple(out)


def _ep_calls(
    s: _Stage, scale_up_domain: int, moe_dispatcher: str, ep_comm_overlap: bool
) -> tuple[_Call, ...]:
    """Expert parallelism: an all-to-all to dispatch and one to combine each MoE layer's routed
    tokens (Megatron-Core's ``MoEAlltoAllTokenDispatcher``; ``EP_CALLS_PER_MOE_LAYER``), in every
    pass and again in a MoE layer recomputed whole (``moe`` module). Message: one rank's routed
    copies, ``s b / (cp tp) x top_k x h x activation bytes`` (``collectives.ep_message_bytes``);
    the ``flex`` dispatcher (DeepEP, HybridEP) sends a token once per other scale-up domain
    (``collectives.domain_dedup``)."""
    model, p = s.model, s.p
    if model.moe is None or p.ep <= 1:
        return ()
    moe_layers = sum(n for kind, n in zip(model.kinds, s.counts, strict=True) if kind.routed)
    if not moe_layers:
        return ()
    again = sum(n * work.moe for work, n in s.recomputed)  # MoE layers recomputed whole
    calls = rules.EP_CALLS_PER_MOE_LAYER * (moe_layers * s.passes + again)
    size, stride = s.groups["ep"]
    share = 1.0
    if moe_dispatcher == "flex":
        share = float(rules.domain_dedup(model.moe.top_k, size, stride, scale_up_domain))
    when = "each MoE layer, dispatch and combine, fwd + bwd"
    if again:
        when += " and the recomputed forward"
    overlap = "exposed"
    if ep_comm_overlap:
        overlap = "overlapped with another micro-batch's compute (ep_comm_overlap)"
    call = _Call(
        dimension="ep",
        collective="all_to_all",
        when=when,
        message_bytes=float(rules.ep_message_bytes(model, p, s.tokens, s.precision)),
        message_shape=(int(s.tokens / p.tp * model.moe.top_k), model.hidden_size),
        group="ep",
        calls_per_microbatch=calls,
        calls_per_iteration=calls * s.microbatches,
        overlap=overlap,
        far_share=share,
    )
    return (call,)


def _pp_calls(s: _Stage) -> tuple[_Call, ...]:
    """Pipeline parallelism: a send/recv of the activations forward and of their gradients
    backward at each stage boundary, once per micro-batch and virtual stage (Narayanan et al.
    2021's interleaved 1F1B; ``collectives.pp_sends_per_microbatch``). Message: the residual,
    ``s b / cp x residual width x activation bytes``, divided by ``tp`` under sequence
    parallelism (``collectives.pp_message_bytes``)."""
    p = s.p
    if p.pp <= 1:
        return ()
    calls = rules.pp_sends_per_microbatch(p.vp)
    call = _Call(
        dimension="pp",
        collective="send_recv",
        when="stage boundary, activations fwd, gradients bwd",
        message_bytes=float(rules.pp_message_bytes(s.model, p, s.tokens, s.precision)),
        message_shape=(int(s.tokens / (p.tp if p.sequence_parallel else 1)), s.model.hidden_size),
        group="pp",
        calls_per_microbatch=calls,
        calls_per_iteration=calls * s.microbatches,
        overlap="overlapped (interleaved schedule)" if p.vp > 1 else "exposed",
    )
    return (call,)


def _dp_calls(s: _Stage) -> tuple[_Call, ...]:
    """Data parallelism and ZeRO: the dense parameters synchronize over dp x cp, the routed
    experts over the expert data-parallel ranks (Megatron-Core's expert data-parallel group), as
    the step time charges them; ZeRO-3 per layer (``_zero3_calls``), else once per step
    (``_sync_calls``). With a frozen base (LoRA, QLoRA) the trained parameters are the
    adapters', all dense."""
    memory = s.memory
    experts = memory.expert_params_on_gpu
    trained_experts = 0.0 if s.setup.finetune.frozen else experts
    dense = memory.params_on_gpu - experts
    parts = [("dp", "", dense, memory.trainable_params_on_gpu - trained_experts)]
    if s.model.moe is not None:
        parts.append(("edp", "routed experts' ", experts, trained_experts))
    out: list[_Call] = []
    for group, whose, params, trained in parts:
        if s.groups[group][0] <= 1:
            continue
        if s.zero_stage >= 3:
            out += _zero3_calls(s, group, whose, params, trained)
        else:
            out += _sync_calls(s, group, whose, trained)
    return tuple(out)


def _zero3_calls(
    s: _Stage, group: str, whose: str, params: float, trained: float
) -> tuple[_Call, ...]:
    """ZeRO-3 / FSDP (Rajbhandari et al. 2020, ZeRO stage 3): each layer's weights all-gathered
    for the forward and again for the backward (``ZERO3_GATHERS_PER_LAYER``), its gradients
    reduce-scattered in the backward, every micro-batch. Messages: a layer's share of the
    stage's ``params`` as stored (NF4 for QLoRA's linears) and of the ``trained`` ones'
    gradients (``collectives.zero3_layer_payloads``)."""
    setup, precision = s.setup, s.precision
    grad_b = precision.bytes("gradients")
    stored_b = linear_weight_bytes(setup.finetune, precision)
    layer_w, layer_g = rules.zero3_layer_payloads(
        params, trained, s.model.num_layers / s.p.pp, stored_b, grad_b, setup.finetune.frozen
    )
    gathers = rules.ZERO3_GATHERS_PER_LAYER * s.layers
    m = s.microbatches
    return (
        _Call(
            dimension="zero3",
            collective="all_gather",
            when=f"each layer, {whose}weights for fwd and for bwd",
            message_bytes=layer_w,
            message_shape=(int(layer_w / stored_b),),
            group=group,
            calls_per_microbatch=gathers,
            calls_per_iteration=gathers * m,
            overlap="prefetched behind the previous layer",
        ),
        _Call(
            dimension="zero3",
            collective="reduce_scatter",
            when=f"each layer, {whose}gradients in bwd",
            message_bytes=layer_g,
            message_shape=(int(layer_g / grad_b),),
            group=group,
            calls_per_microbatch=s.layers,
            calls_per_iteration=s.layers * m,
            overlap="behind the backward pass",
        ),
    )


def _sync_calls(s: _Stage, group: str, whose: str, trained: float) -> tuple[_Call, ...]:
    """Once per step: the ``trained`` parameters' gradients all-reduced, or reduce-scattered
    where ZeRO-1/2 shards the optimizer (``collectives.dp_sync_collective``), each rank then
    all-gathering the updated parameters (Rajbhandari et al. 2020; Megatron-Core's distributed
    optimizer). Messages: ``trained x gradient bytes`` and ``trained x weight bytes``."""
    precision = s.precision
    sharded = s.zero_stage >= 1
    sync = _Call(
        dimension="dp",
        collective=rules.dp_sync_collective(sharded),
        when=f"end of step, {whose}gradients",
        message_bytes=trained * precision.bytes("gradients"),
        message_shape=(int(trained),),
        group=group,
        calls_per_microbatch=0,
        calls_per_iteration=1,
        overlap="bucketed behind the last backward pass",
    )
    if not sharded:
        return (sync,)
    gather = _Call(
        dimension="dp",
        collective="all_gather",
        when=f"end of step, {whose}updated parameters",
        message_bytes=trained * DTYPES[precision.weights].bytes,
        message_shape=(int(trained),),
        group=group,
        calls_per_microbatch=0,
        calls_per_iteration=1,
        overlap="behind the next forward pass",
    )
    return (sync, gather)
