"""From a request to the core: resolve ids and pasted configs, fill the documented defaults, and
call the one estimator function the request names. The routes, the CLI and the pages all go
through here, so a plan means the same thing wherever it is typed.

Sweeps are cached by their canonical request (pages of one sweep reuse it) and stop at a time
limit: a request never runs unbounded.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from threading import BoundedSemaphore, Lock
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from app import hub
from app.energy import ownership_of, power_setup
from app.run import reliability_of
from app.schemas.energy import SweepPowerFields
from app.service.exceptions import ShapeError
from app.settings import current
from app.store import catalog as team
from estimator import (
    Accelerator,
    InferenceSetup,
    ModelSpec,
    Parallelism,
    Precision,
    TrainingSetup,
    get_precision,
    model_from_config,
)
from estimator.context import Context
from estimator.counts.layers import LayerTable, layer_table
from estimator.counts.tree import ModuleNode, module_tree
from estimator.energy import Ownership, PowerSetup, require_power
from estimator.errors import SpecError, UnknownIdError
from estimator.finetune import ALL_LINEAR, DEFAULT_RANK, FineTune
from estimator.inputs.accelerator import GIB
from estimator.inputs.cluster import Cluster, cluster_of
from estimator.layout.parallel import layout_violations, validate_layout
from estimator.layout.pipeline import (
    PipelineSplit,
    SplitSettings,
    check_layout_mtp,
    model_split,
    serving_stage_layers,
)
from estimator.layout.ranks import RankLayout, rank_layout
from estimator.memory.timeline import Timeline, inference_timeline, training_timeline
from estimator.memory.training import TrainingMemory
from estimator.offload import Offload
from estimator.timing.comms import CommPlan, communication_plan
from estimator.timing.effective import Reliability
from estimator.timing.stacks import (
    AUTO_STACK,
    DEFAULT_STACK,
    STACKS,
    stack_choice,
    stack_refusal,
    sweep_stacks,
)
from estimator.timing.training import (
    TimingOptions,
    TrainingEstimate,
    calibrate,
    estimate_training,
)
from estimator.timing.zero3_note import zero3_hidden_note

# The request models come with the caller's request, and the serving and sweep engines (and
# numpy) are imported where they run: a training estimate on the command line loads none of them
# (benchmarks/bench_cli.py).
if TYPE_CHECKING:
    from app.schemas.catalog import TreeRequest
    from app.schemas.common import PrecisionRoles
    from app.schemas.inference import InferenceRequest
    from app.schemas.sweep import ServingSweepRequest, TrainingSweepRequest
    from app.schemas.training import FineTuneFields, OffloadFields, TrainingRequest
    from estimator.inputs.lengths import LengthDistribution
    from estimator.inputs.speculative import Speculative
    from estimator.serving.estimate import InferenceEstimate
    from estimator.serving.load import EnginePreset, LoadPoint
    from estimator.sweep.serving import ServingSweep
    from estimator.sweep.training import TrainingSweep

__all__ = [
    "MAX_SERVING_LAYOUTS",
    "MAX_TRAINING_LAYOUTS",
    "InferencePlan",
    "SweepTimeout",
    "TrainingPlan",
    "TrainingViews",
    "engine_of",
    "finetune_of",
    "footprint_bytes",
    "group_slots",
    "inference_plan",
    "price_for",
    "resolve_accelerator",
    "resolve_model",
    "run_comms",
    "run_inference",
    "run_inference_timeline",
    "run_layers",
    "run_ranks",
    "run_serving_sweep",
    "run_training",
    "run_training_sweep",
    "run_training_timeline",
    "run_training_views",
    "run_tree",
    "speculative_of",
    "sweep_limit_s",
    "training_plan",
]

# A default 70B training sweep (76,800 layouts) takes ~0.35 s; a million ~5 s on one core.
MAX_TRAINING_LAYOUTS = 1_000_000
# Serving sweeps loop over single estimates (~10 ms each).
MAX_SERVING_LAYOUTS = 1_000


def sweep_limit_s() -> float:
    """How long one sweep may compute, or wait for its turn (``PLANNER_SWEEP_TIMEOUT_S``)."""
    return float(current().sweep_timeout_s)


SWEEP_CACHE_SIZE = 8
SWEEP_CONCURRENCY = 1  # per process


class SweepTimeout(Exception):
    """A sweep ran past ``sweep_limit_s()``, or waited that long for its turn; the API
    answers 503."""

    def __init__(self, done: int, total: int, limit_s: float) -> None:
        self.done, self.total, self.limit_s = done, total, limit_s
        if done == 0 and total == 1:
            message = f"the service is busy: no sweep slot freed up within {limit_s:.0f} s"
        else:
            message = (
                f"the sweep ran past its {limit_s:.0f} s limit after {done} of {total} blocks; "
                "narrow its axes"
            )
        super().__init__(message)


def resolve_model(ref: str | dict[str, Any], field: str = "model") -> ModelSpec:
    """A catalog model (public or the team's), a Hugging Face id (``org/name[@revision]``,
    ``app.hub``), or a pasted config read into a spec; config errors are renamed from
    ``config.<key>`` to ``<field>.<key>``."""
    if isinstance(ref, str):
        return hub.resolve_spec(ref, field) if hub.is_hub_ref(ref) else team.get_model(ref)
    try:
        return model_from_config(ref)
    except SpecError as exc:
        path = field + exc.field.removeprefix("config")
        # model_type is the one key the schema requires of a pasted config (PastedConfig): its
        # absence breaks the schema; a model_type the reader refuses is the plan's problem
        missing = exc.field == "config.model_type" and exc.value is None
        kind = ShapeError if missing else SpecError
        raise kind(path, exc.rule, exc.value) from None


def resolve_precision(ref: str | PrecisionRoles) -> Precision:
    if isinstance(ref, str):
        return get_precision(ref)
    return get_precision(ref.model_dump(exclude_none=True))


def serving_precision(req: InferenceRequest, model: ModelSpec) -> str | PrecisionRoles:
    """The request's precision; where it gives none and names its model by a Hugging Face id,
    the preset that serves the checkpoint as it ships (``hub.default_preset``: an FP8 checkpoint
    is served in FP8), which the model's notes state."""
    if "precision" in req.model_fields_set or not hub.is_hub_ref(req.model):
        return req.precision
    return hub.default_preset(model) or req.precision


def resolve_accelerator(accelerator: str) -> Accelerator:
    """A public catalog accelerator or the team's."""
    return team.get_accelerator(accelerator)


def price_for(accelerator: str, given: float | None) -> tuple[float | None, str | None]:
    """The user's price, else the catalog's dated default (the negotiated price for a team
    accelerator), with where it came from."""
    if given is not None:
        return given, "request"
    return team.default_price(accelerator)


# --- single estimates -------------------------------------------------------------------------


S = TypeVar("S", TrainingSetup, InferenceSetup)


@dataclass(frozen=True, kw_only=True)
class _Resolved(Generic[S]):
    """What every estimate takes (model, accelerator, layout, setup, precision) and the price."""

    model: ModelSpec
    accelerator: Accelerator
    parallel: Parallelism
    setup: S
    precision: Precision
    cluster: Cluster
    price_usd_per_gpu_hour: float | None
    price_source: str | None
    power: PowerSetup = dataclasses.field(
        default_factory=PowerSetup
    )  # energy's and TCO's (app.energy)
    ownership: Ownership = dataclasses.field(default_factory=Ownership)

    @property
    def specs(self) -> tuple[ModelSpec, Accelerator, Parallelism, S, Precision]:
        """The core functions' five leading arguments, in their order."""
        return self.model, self.accelerator, self.parallel, self.setup, self.precision


@dataclass(frozen=True, kw_only=True)
class TrainingPlan(_Resolved[TrainingSetup]):
    """A training request resolved into the core's specs (and the pipeline split it takes,
    None for the even split)."""

    options: TimingOptions
    pipeline: PipelineSplit | None = None
    reliability: Reliability = dataclasses.field(default_factory=Reliability)  # app.run


def _cluster(accelerator: Accelerator, req: TrainingRequest | InferenceRequest) -> Cluster:
    """The request's cluster over the accelerator's catalog defaults."""
    return cluster_of(
        accelerator,
        gpus_per_node=req.gpus_per_node,
        scale_up_domain=req.scale_up_domain,
        scale_out_gbit_per_s=req.scale_out_gbit_per_s,
        oversubscription=req.oversubscription,
    )


def _data_parallel(req_dp: int | None, num_gpus: int | None, per_replica: int) -> int:
    """dp as given, or what ``num_gpus`` leaves after ``tp pp cp``; the two must agree."""
    if req_dp is None:
        if num_gpus is None:
            return 1
        if num_gpus % per_replica:
            raise SpecError("num_gpus", f"must be a multiple of tp*pp*cp = {per_replica}", num_gpus)
        return num_gpus // per_replica
    if num_gpus is not None and num_gpus != per_replica * req_dp:
        raise SpecError(
            "num_gpus",
            f"must equal tp*pp*cp*dp = {per_replica * req_dp} (or leave dp out)",
            num_gpus,
        )
    return req_dp


def _model_rules_first(model: ModelSpec, lay: Any) -> None:
    """Raise the first rule the model sets on the layout's sizes (TP divides the heads, EP the
    experts), whatever the GPU count: the reason a size cannot be, before what it leaves of
    ``num_gpus``."""
    from estimator.layout.parallel import layout_violations

    sizes = Parallelism(
        tp=lay.tp, pp=lay.pp, dp=1, cp=lay.cp, ep=lay.ep, etp=lay.etp or lay.tp, vp=lay.vp
    )
    for field, broken, rule, value in layout_violations(
        model, sizes, training=True, pipeline_rule=False
    ):
        if broken and field in ("layout.tp", "layout.ep", "layout.etp"):
            raise SpecError(field, rule.format(v=value), value)


def recompute_modules_of(given: str | list[str] | None) -> tuple[str, ...]:
    """Megatron-Core's recompute module names as given: a list, or one comma-separated string
    (the form's and the CLI's); the estimator checks them."""
    if given is None:
        return ()
    listed = given.split(",") if isinstance(given, str) else given
    names = tuple(name.strip() for name in listed if name.strip())
    if not names:  # Megatron-Core's empty list recomputes nothing, which is recompute 'none'
        rule = "must name at least one module (with none, selective recomputes nothing: 'none')"
        raise SpecError("recompute_modules", rule, given)
    return names


_LORA_FIELDS = ("lora_rank", "lora_targets", "qlora_double_quant", "lora_dropout")


def finetune_of(req: FineTuneFields) -> FineTune:
    """The request's fine-tuning setting. LoRA fields with ``finetune=full``, and
    ``qlora_double_quant`` with ``lora``, are refused rather than ignored (a plan that says
    r=64 and trains every parameter is a mistake); targets may be one comma-separated string
    (the page's and the CLI's form) or a list."""
    given = [f for f in _LORA_FIELDS if getattr(req, f) is not None]
    if req.finetune == "full" and given:
        raise SpecError(given[0], "applies to finetune=lora or qlora", getattr(req, given[0]))
    if req.finetune == "lora" and req.qlora_double_quant is not None:
        raise SpecError("qlora_double_quant", "applies to finetune=qlora", req.qlora_double_quant)
    targets: tuple[str, ...] | None = None
    if req.lora_targets is not None:
        names = req.lora_targets
        listed = names.split(",") if isinstance(names, str) else names
        # PEFT reads the all-linear keyword in any case
        targets = tuple(
            ALL_LINEAR if t.strip().lower() == ALL_LINEAR else t.strip() for t in listed
        )
    return FineTune(
        method=req.finetune,
        rank=DEFAULT_RANK if req.lora_rank is None else req.lora_rank,
        targets=targets,
        double_quant=req.qlora_double_quant is not False,
        dropout=req.lora_dropout or 0.0,
    )


def offload_of(req: OffloadFields) -> Offload:
    """What a request keeps in host memory, and the host figures it gives."""
    return Offload(
        optimizer=req.offload_optimizer,
        params=req.offload_params,
        activations=req.offload_activations,
        activation_layers=req.offload_activation_layers,
        host_link_gb_per_s=req.host_link_gb_per_s,
        host_memory_gb_per_gpu=req.host_memory_gb_per_gpu,
        host_memory_gb_per_s=req.host_memory_gb_per_s,
    )


def training_plan(req: TrainingRequest) -> TrainingPlan:
    lay = req.layout
    model = resolve_model(req.model)
    try:
        dp = _data_parallel(lay.dp, req.num_gpus, lay.tp * lay.pp * lay.cp)
    except SpecError:
        _model_rules_first(model, lay)  # tp=3 on 64 GPUs: the heads rule is the reason
        raise
    settings = SplitSettings(
        first_stage_layers=lay.first_stage_layers,
        last_stage_layers=lay.last_stage_layers,
        embedding_in_split=lay.embedding_in_split,
        loss_in_split=lay.loss_in_split,
        layout=lay.pipeline_layout,
    )
    split = model_split(model, lay.pp, lay.vp, lay.pipeline_split, settings)
    check_layout_mtp(split, req.mtp_layers)
    parallel = Parallelism(
        tp=lay.tp,
        pp=lay.pp,
        dp=dp,
        cp=lay.cp,
        ep=lay.ep,
        etp=lay.etp,
        vp=lay.vp,
        sequence_parallel=lay.tp > 1 if lay.sequence_parallel is None else lay.sequence_parallel,
        zero_stage=lay.zero_stage,
        distributed_optimizer=lay.distributed_optimizer,
        stage_layers=None if split is None else split.stage_layers,
    )
    stack, _ = stack_choice(  # auto's pick, or the stack asked for where it runs the layout
        req.stack, lay.tp, lay.pp, lay.cp, lay.ep, lay.vp, lay.zero_stage
    )
    setup = TrainingSetup(
        seq_len=req.seq_len,
        micro_batch_size=req.micro_batch_size,
        global_batch_size=req.global_batch_size,
        recompute=req.recompute,
        flash_attention=req.flash_attention,
        optimizer=req.optimizer,
        activation_convention=req.activation_convention,
        finetune=finetune_of(req),
        offload=offload_of(req),
        moe_imbalance=req.moe_imbalance,
        moe_capacity_factor=req.moe_capacity_factor,
        chunked_loss=req.chunked_loss,
        optimizer_in_backward=req.optimizer_in_backward,
        no_sync_accumulation=req.no_sync_accumulation,
        recompute_modules=recompute_modules_of(req.recompute_modules),
        mtp_layers=req.mtp_layers,
        mtp_repeated=req.mtp_repeated,
        compiled_loss=req.compiled_loss,
        gradients_per_step=(
            STACKS[stack].gradients_per_step
            if req.gradients_per_step is None
            else req.gradients_per_step
        ),
    )
    accelerator = resolve_accelerator(req.accelerator)
    cluster = _cluster(accelerator, req)
    options = TimingOptions.of_stack(  # what the request leaves None is the stack's
        stack,
        auto=req.stack == AUTO_STACK,
        cluster=cluster,
        attention_kernel=req.attention_kernel,
        tp_comm_overlap=req.tp_comm_overlap,
        ep_comm_overlap=req.ep_comm_overlap,
        moe_dispatcher=req.moe_dispatcher,
        cuda_graphs=req.cuda_graphs,
    )
    usd, source = price_for(req.accelerator, req.price_usd_per_gpu_hour)
    return TrainingPlan(
        model=model,
        pipeline=split,
        cluster=cluster,
        accelerator=accelerator,
        parallel=parallel,
        setup=setup,
        precision=resolve_precision(req.precision),
        options=options,
        price_usd_per_gpu_hour=usd,
        price_source=source,
        power=power_setup(req, (accelerator.id,)),
        ownership=ownership_of(req),
        reliability=reliability_of(req),
    )


def _estimate(plan: TrainingPlan, req: TrainingRequest) -> TrainingEstimate:
    e = calibrate(
        estimate_training(
            *plan.specs,
            tokens=req.tokens,
            price_usd_per_gpu_hour=plan.price_usd_per_gpu_hour,
            options=plan.options,
        ),
        plan.accelerator,
        measured_step_s=req.measured_step_s,
        measured_mfu=req.measured_mfu,
    )
    t = e.time
    times = (t.breakdown["zero3_comm"], t.forward_s, t.backward_s)
    hidden = zero3_hidden_note(*plan.specs, e.memory, times, plan.cluster)
    return e if hidden is None else replace(e, notes=(*e.notes, hidden))


def stack_spread(plan: TrainingPlan, req: TrainingRequest) -> dict[str, TrainingEstimate]:
    """The same plan under every software stack profile that runs its layout (the training
    page's spread), each with the profile's own behaviours."""
    p = plan.parallel
    return {
        name: estimate_training(
            *plan.specs,
            tokens=req.tokens,
            price_usd_per_gpu_hour=plan.price_usd_per_gpu_hour,
            options=TimingOptions.of_stack(name, cluster=plan.cluster),
        )
        for name in STACKS
        if stack_refusal(name, p.tp, p.pp, p.cp, p.ep, p.vp, p.zero_stage) is None
    }


def _ranks(plan: TrainingPlan, req: TrainingRequest) -> RankLayout:
    """The plan's parallel groups; nodes of ``gpus_per_node`` (default: the accelerator's)."""
    validate_layout(plan.model, plan.parallel, training=True)
    return rank_layout(plan.parallel, plan.cluster.gpus_per_node)


def _comms(
    plan: TrainingPlan, req: TrainingRequest, memory: TrainingMemory | None = None
) -> CommPlan:
    model, accelerator, p, setup, precision = plan.specs
    c = Context.of(model, accelerator, p, precision, plan.cluster)
    return communication_plan(c, setup, plan.options, memory)


def _layers(plan: TrainingPlan, memory: TrainingMemory | None = None) -> LayerTable:
    return layer_table(*plan.specs, memory)


def _timeline(plan: TrainingPlan) -> Timeline:
    return training_timeline(*plan.specs)


def _tree(plan: TrainingPlan, req: TrainingRequest) -> ModuleNode:
    """The module tree of one forward of the plan's micro-batch on one GPU."""
    p = plan
    return module_tree(p.model, p.accelerator, p.precision, req.seq_len, req.micro_batch_size)


def run_training(req: TrainingRequest) -> tuple[TrainingPlan, TrainingEstimate]:
    plan = training_plan(req)
    return plan, _estimate(plan, req)


def run_ranks(req: TrainingRequest) -> RankLayout:
    return _ranks(training_plan(req), req)


def run_comms(req: TrainingRequest) -> CommPlan:
    return _comms(training_plan(req), req)


def run_layers(req: TrainingRequest) -> LayerTable:
    return _layers(training_plan(req))


def run_training_timeline(req: TrainingRequest) -> Timeline:
    return _timeline(training_plan(req))


@dataclass(frozen=True)
class TrainingViews:
    """Everything the training planner page shows, from one resolved plan and one memory
    estimate (the deep dives reuse the estimate's memory instead of recomputing it)."""

    plan: TrainingPlan
    estimate: TrainingEstimate
    ranks: RankLayout
    comms: CommPlan
    timeline: Timeline
    layers: LayerTable
    tree: ModuleNode
    stacks: dict[str, TrainingEstimate]  # the plan under each software stack profile


def run_training_views(req: TrainingRequest) -> TrainingViews:
    plan = training_plan(req)
    estimate = _estimate(plan, req)
    memory = estimate.memory
    return TrainingViews(
        plan=plan,
        estimate=estimate,
        ranks=_ranks(plan, req),
        comms=_comms(plan, req, memory),
        timeline=_timeline(plan),
        layers=_layers(plan, memory),
        tree=_tree(plan, req),
        stacks=stack_spread(plan, req),
    )


def run_tree(req: TreeRequest) -> tuple[ModelSpec, ModuleNode]:
    model = resolve_model(req.model)
    tree = module_tree(
        model,
        resolve_accelerator(req.accelerator),
        get_precision(req.precision),
        req.seq_len,
        req.batch_size,
        causal=req.causal,
    )
    return model, tree


@dataclass(frozen=True, kw_only=True)
class InferencePlan(_Resolved[InferenceSetup]):
    """A serving request resolved into the core's specs."""


_SPECULATIVE_FIELDS = ("num_speculative_tokens", "acceptance_length", "draft_model")


def speculative_of(req: InferenceRequest) -> Speculative | None:
    """The request's speculative decoding: none without a ``speculative_method``, whose
    companions are then refused rather than ignored; with one, ``num_speculative_tokens`` and
    ``acceptance_length`` are required, and ``draft_model`` with ``draft`` only (a catalog or
    team model)."""
    from estimator.inputs.speculative import Speculative

    method = req.speculative_method
    if method is None:
        given = [f for f in _SPECULATIVE_FIELDS if getattr(req, f) is not None]
        if given:
            rule = "applies with a speculative_method (mtp, eagle, eagle3 or draft)"
            raise SpecError(given[0], rule, getattr(req, given[0]))
        return None
    k, accepted = req.num_speculative_tokens, req.acceptance_length
    if k is None:
        raise SpecError("num_speculative_tokens", f"is required with speculative_method={method}")
    if accepted is None:
        raise SpecError("acceptance_length", f"is required with speculative_method={method}")
    if (method == "draft") != (req.draft_model is not None):
        raise SpecError(
            "draft_model",
            "is required by speculative_method=draft and applies to it only",
            req.draft_model,
        )
    draft = None
    if req.draft_model is not None:
        try:
            draft = team.get_model(req.draft_model)
        except UnknownIdError as exc:  # named as the request names it
            raise UnknownIdError("draft_model", exc.ident, exc.known) from None
    return Speculative(method, k, accepted, draft)


def lengths_of(req: InferenceRequest | ServingSweepRequest) -> LengthDistribution | None:
    """The request's dataset length distribution (None: fixed input_len / output_len); a
    dataset sets the lengths, so it comes without them."""
    from estimator.inputs.lengths import LENGTH_PRESETS

    if req.dataset is None:
        return None
    given = sorted({"input_len", "output_len"} & req.model_fields_set)
    if given:
        raise SpecError(
            "dataset",
            f"sets the request lengths: give a dataset or {' and '.join(given)}, not both",
            req.dataset,
        )
    return LENGTH_PRESETS[req.dataset]


def plan_lengths(plan: InferencePlan) -> LengthDistribution:
    """The lengths a plan assumed: its dataset's distribution, or its fixed lengths."""
    from estimator.inputs.lengths import fixed_lengths

    setup = plan.setup
    return setup.lengths or fixed_lengths(setup.input_len, setup.output_len)


def inference_plan(req: InferenceRequest) -> InferencePlan:
    lay = req.layout
    if req.request_rate is not None and "concurrency" in req.model_fields_set:
        raise SpecError(
            "request_rate",
            "give a request rate (open loop) or a concurrency (closed loop), not both",
            req.request_rate,
        )
    if req.num_prompts is not None and req.request_rate is not None:
        raise SpecError(
            "num_prompts",
            "a finite run is simulated in a closed loop: give a concurrency, not a request rate",
            req.num_prompts,
        )
    gpus = lay.dp * lay.tp * lay.pp
    if req.num_gpus is not None and req.num_gpus != gpus:
        raise SpecError("num_gpus", f"must equal dp*tp*pp = {gpus} (one replica)", req.num_gpus)
    lengths = lengths_of(req)
    usd, source = price_for(req.accelerator, req.price_usd_per_gpu_hour)
    accelerator = resolve_accelerator(req.accelerator)
    model = resolve_model(req.model)
    return InferencePlan(
        model=model,
        accelerator=accelerator,
        cluster=_cluster(accelerator, req),
        parallel=Parallelism(
            tp=lay.tp, pp=lay.pp, dp=lay.dp, ep=lay.ep, stage_layers=serving_layers_of(req, model)
        ),
        setup=InferenceSetup(
            input_len=req.input_len if lengths is None else lengths.input_len,
            output_len=req.output_len if lengths is None else lengths.output_len,
            concurrency=req.concurrency,
            prefill_chunk=req.prefill_chunk,
            speculative=speculative_of(req),
            prefix_cache_hit_rate=req.prefix_cache_hit_rate,
            moe_imbalance=req.moe_imbalance,
            lengths=lengths,
            num_prompts=req.num_prompts,
        ),
        precision=resolve_precision(serving_precision(req, model)),
        price_usd_per_gpu_hour=usd,
        price_source=source,
        power=power_setup(req, (accelerator.id,)),
        ownership=ownership_of(req),
    )


def serving_layers_of(req: InferenceRequest, model: ModelSpec) -> tuple[int, ...] | None:
    """The decoder layers of each pipeline stage as the request's engine splits them
    (``layout.pipeline.serving_split``: its ``get_pp_indices`` default, or the request's
    ``layout.stage_layers``); None for the even split."""
    from estimator.serving.load import ENGINES

    rule = ENGINES[req.engine].pp_split
    return serving_stage_layers(model, req.layout.pp, rule, req.layout.stage_layers)


def run_inference_timeline(req: InferenceRequest) -> Timeline:
    plan = inference_plan(req)
    return inference_timeline(*plan.specs)


def engine_of(req: InferenceRequest) -> EnginePreset:
    """The request's engine preset with the deployment's token budget and sequence cap."""
    from estimator.serving.load import engine_preset

    return engine_preset(
        req.engine,
        req.max_num_batched_tokens,
        req.max_num_seqs,
        kv_fraction=req.kv_cache_memory_fraction,
        kv_block_tokens=req.kv_block_size,
    )


def group_slots(req: InferenceRequest, plan: InferencePlan, estimate: InferenceEstimate) -> int:
    """Requests one scheduler runs at once (an attention data-parallel group's with ``dp >
    1``): the engine's sequence cap or its KV cache's slots, whichever is fewer."""
    dp = plan.parallel.dp
    preset = engine_of(req).per_group(dp)
    return preset.slots(preset.kv_slots(estimate.memory, plan.parallel.tp * dp) // dp)


def run_inference(req: InferenceRequest) -> tuple[InferencePlan, InferenceEstimate]:
    from app.calibration import calibrated_engine
    from estimator.serving.estimate import estimate_inference

    plan = inference_plan(req)
    engine, fit = calibrated_engine(req, plan, engine_of(req))
    estimate = estimate_inference(
        *plan.specs,
        price_usd_per_gpu_hour=plan.price_usd_per_gpu_hour,
        max_batch_size=req.max_batch_size,
        ttft_target_s=req.ttft_target_s,
        tpot_target_s=req.tpot_target_s,
        cluster=plan.cluster,
        engine=engine,
        request_rate=req.request_rate,
        rate_headroom=inference_headroom(req)[0],
    )
    if fit is not None:
        estimate = replace(estimate, calibration=fit, notes=(*estimate.notes, fit.note))
    return plan, estimate


def inference_headroom(req: InferenceRequest) -> tuple[float, str]:
    """The rate headroom a single plan's replica count is given: the planner's measured
    optimism on the engine's published runs (``estimator.accuracy.rate_headroom``)."""
    from estimator.accuracy import rate_headroom

    return rate_headroom(req.engine) if req.request_rate is not None else (0.0, "")


def run_load_curve(
    req: InferenceRequest, plan: InferencePlan, estimate: InferenceEstimate, points: int = 16
) -> list[LoadPoint]:
    """The replica's steady state under load at ``points`` concurrencies from 1 to twice its
    slots (the serving page's latency-vs-load chart)."""
    from estimator.serving.estimate import estimate_load

    top = max(2 * estimate.max_concurrency, 2)
    ns = sorted({max(1, round(top ** (i / (points - 1)))) for i in range(points)})
    model, accelerator, parallel, setup, precision = plan.specs
    engine = engine_of(req)
    if estimate.calibration is not None:  # the chart's steps carry the plan's fitted scales
        engine = estimate.calibration.preset(engine)
    return [
        estimate_load(
            model, accelerator, parallel, replace(setup, concurrency=n), precision,
            engine=engine, cluster=plan.cluster, memory=estimate.memory,
        )
        for n in ns
    ]  # fmt: skip


# --- sweeps -----------------------------------------------------------------------------------

T = TypeVar("T")
R = TypeVar("R")


def _axis(value: T | Sequence[T] | None, default: tuple[T, ...]) -> tuple[T, ...]:
    """A request axis as the engine's tuple: a value, a list (duplicates dropped, order kept),
    or the engine's default."""
    if value is None:
        return default
    if isinstance(value, list):
        return tuple(dict.fromkeys(value))
    return (value,)  # type: ignore[return-value]


def footprint_bytes(value: Any, depth: int = 0) -> int:
    """About how many bytes ``value`` holds: numpy arrays by their buffers, containers and
    dataclasses by what they hold (to a depth of 6), anything else by ``sys.getsizeof``. A
    sweep's columns are its bulk; the estimate is for bounding a cache, not for accounting."""
    import sys

    import numpy as np

    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    size = sys.getsizeof(value)
    if depth >= 6 or isinstance(value, str | bytes | int | float | bool):
        return size
    if isinstance(value, dict):
        items: Any = itertools.chain.from_iterable(value.items())
    elif isinstance(value, list | tuple):
        items = value
    elif hasattr(value, "__dataclass_fields__"):
        items = (getattr(value, name) for name in value.__dataclass_fields__)
    else:
        return size
    return size + sum(footprint_bytes(item, depth + 1) for item in items)


class _SweepCache:
    """The last few sweeps by canonical request, so a request's pages and its CSV reuse one
    evaluation: at most ``size`` of them and ``max_bytes`` in all (``footprint_bytes``); the
    least recently used go first, and a sweep bigger than the whole bound is answered without
    being kept. Thread-safe; a sweep computed twice concurrently is stored once."""

    def __init__(self, size: int, max_bytes: Callable[[], int]) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.lock = Lock()

    @property
    def held_bytes(self) -> int:
        return sum(nbytes for _, nbytes in self.items.values())

    def get(self, key: str, compute: Callable[[], R]) -> R:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key][0]  # type: ignore[no-any-return]
        value = _one_at_a_time(compute)
        nbytes, bound = footprint_bytes(value), self.max_bytes()
        with self.lock:
            if nbytes <= bound:
                self.items[key] = (value, nbytes)
            while len(self.items) > self.size or self.held_bytes > bound:
                self.items.popitem(last=False)
        return value


# Sweeps are numpy-heavy and hold the GIL between array operations: several at once in one
# process slow each other down more than running them in turn (measured: 4 concurrent default
# 70B sweeps took 1.8/s against 3.5/s one at a time), so a process evaluates one at a time and
# the others queue, within the time limit.
_EVALUATING = BoundedSemaphore(SWEEP_CONCURRENCY)


def _one_at_a_time(compute: Callable[[], R]) -> R:
    limit_s = sweep_limit_s()
    if not _EVALUATING.acquire(timeout=limit_s):
        raise SweepTimeout(0, 1, limit_s)
    try:
        return compute()
    finally:
        _EVALUATING.release()


_CACHE = _SweepCache(SWEEP_CACHE_SIZE, lambda: current().sweep_cache_mib * 2**20)
_PAGING = {"page", "page_size", "sort", "rows"}


def _deadline(limit_s: float) -> Callable[[int, int], None]:
    start = time.monotonic()

    def check(done: int, total: int) -> None:
        if done < total and time.monotonic() - start > limit_s:
            raise SweepTimeout(done, total, limit_s)

    return check


def _prices(
    accelerators: tuple[str, ...], one: float | None, by_id: dict[str, float] | None
) -> dict[str, float]:
    """Prices by accelerator id: per id over one for all over the team's negotiated ones (the
    engine falls back to the public catalog's for the rest)."""
    negotiated = {a: p for a, p in team.current().prices.items() if a in accelerators}
    out = dict.fromkeys(accelerators, one) if one is not None else {}
    return {k: v for k, v in (negotiated | out | (by_id or {})).items() if v is not None}


def _tie_band() -> float:
    """The measured tie band (``estimator.accuracy.tie_band``; imported here: it reads the
    measured records)."""
    from estimator.accuracy import tie_band

    return tie_band()[0]


def _sweep_power(
    req: SweepPowerFields, accelerators: tuple[str, ...], objective: str | None
) -> PowerSetup:
    """A sweep's power (``app.energy.power_setup``); ranked by energy, every accelerator must
    have a figure (else a 422 naming ``gpu_power_w``)."""
    power = power_setup(req, accelerators)
    if objective == "energy":
        require_power(tuple(map(resolve_accelerator, accelerators)), power)
    return power


def _sweep_accelerators(ids: tuple[str, ...]) -> tuple[str | Accelerator, ...]:
    """Public ids as they are (the engine reads its catalog), team ids as their specs."""
    return tuple(
        a if team.scope_of("accelerator", a) == "public" else team.get_accelerator(a) for a in ids
    )


def _cache_key(kind: str, req: BaseModel) -> str:
    """A sweep's canonical request with the team catalog's revision (a sweep over an edited
    team entry is a new sweep)."""
    return f"{kind}:{team.current().revision}:{req.model_dump_json(exclude=_PAGING)}"


def run_training_sweep(req: TrainingSweepRequest) -> TrainingSweep:
    return _CACHE.get(_cache_key("training", req), lambda: _training_sweep(req))


def _training_sweep(req: TrainingSweepRequest) -> TrainingSweep:
    from estimator.sweep.training import (
        DEFAULT_ACCELERATORS,
        TrainingSearch,
        TrainingWorkload,
        sweep_training,
    )

    d = TrainingSearch()
    lay = req.layout
    accelerators = _axis(req.accelerator, DEFAULT_ACCELERATORS)
    space = TrainingSearch(
        accelerators=_sweep_accelerators(accelerators),
        num_gpus=_axis(req.num_gpus, d.num_gpus),
        tp=_axis(lay.tp, d.tp),
        pp=_axis(lay.pp, d.pp),
        cp=_axis(lay.cp, d.cp),
        ep=None if lay.ep is None else _axis(lay.ep, ()),
        dp=None if lay.dp is None else _axis(lay.dp, ()),
        vp=_axis(lay.vp, d.vp),
        zero=_axis(lay.zero_stage, d.zero),
        recompute=_axis(req.recompute, d.recompute),
        micro_batch=_axis(req.micro_batch_size, d.micro_batch),
        precision=_axis(req.precision, d.precision),
        gpus_per_node=req.gpus_per_node,
        scale_up_domain=req.scale_up_domain,
        scale_out_gbit_per_s=req.scale_out_gbit_per_s,
        oversubscription=req.oversubscription,
    )
    workload = TrainingWorkload(
        seq_len=req.seq_len,
        global_batch_size=req.global_batch_size,
        tokens=req.tokens,
        deadline_s=req.deadline_s,
        budget_usd=req.budget_usd,
        min_headroom=req.min_headroom,
        prices=_prices(accelerators, req.price_usd_per_gpu_hour, req.prices),
        flash_attention=req.flash_attention,
        optimizer=req.optimizer,
        finetune=finetune_of(req),
        offload=offload_of(req),
        moe_imbalance=req.moe_imbalance,
        moe_capacity_factor=req.moe_capacity_factor,
        recompute_modules=recompute_modules_of(req.recompute_modules),
        mtp_layers=req.mtp_layers,
        mtp_repeated=req.mtp_repeated,
        power=_sweep_power(req, accelerators, req.objective),
        reliability=reliability_of(req),
        tie_band=_tie_band(),
    )
    model = resolve_model(req.model)
    stacks, auto = sweep_stacks(_axis(req.stack, (AUTO_STACK,)))
    # The expert all-to-all overlap is Megatron-Core's: where Megatron-Core is among the stacks
    # compared, it applies to its layouts; asked for without it, it is refused (422).
    mcore = DEFAULT_STACK in stacks
    overlap = {s: req.ep_comm_overlap and (s == DEFAULT_STACK or not mcore) for s in stacks}
    options = tuple(
        TimingOptions.of_stack(
            s,
            auto=auto,
            ep_comm_overlap=overlap[s],
            moe_dispatcher=req.moe_dispatcher,
            cuda_graphs=req.cuda_graphs,
        )
        for s in stacks
    )

    try:
        return sweep_training(
            model,
            workload,
            space,
            max_layouts=MAX_TRAINING_LAYOUTS,
            top_k=req.top_k,
            objective=req.objective,
            options=options,
            progress=_deadline(sweep_limit_s()),
            peak_range=partial(peak_factors, model),
        )
    except SpecError as exc:
        exc.field = _request_field(exc.field)
        raise


# The engine names its inputs ``space.<axis>`` and ``workload.<field>``; a request names them as
# the estimate request does.
_FIELDS = {
    "space.accelerators": "accelerator",
    "space.num_gpus": "num_gpus",
    "space.zero": "layout.zero_stage",
    "space.micro_batch": "micro_batch_size",
    "space.recompute": "recompute",
    "space.precision": "precision",
    "space.gpus_per_node": "gpus_per_node",
}


def _request_field(engine_field: str) -> str:
    if engine_field in _FIELDS:
        return _FIELDS[engine_field]
    head, _, rest = engine_field.partition(".")
    if head == "space" and rest in ("tp", "pp", "cp", "ep", "dp", "vp"):
        return f"layout.{rest}"
    if head == "workload" and rest:
        return rest
    return engine_field


def sweep_headroom(req: ServingSweepRequest) -> tuple[float, str]:
    """The rate headroom a fleet is counted with, and where it comes from: the request's, or
    the planner's measured optimism on the engine's published runs
    (``estimator.accuracy.rate_headroom``)."""
    if req.rate_headroom is not None:
        return req.rate_headroom, "the request's"
    from estimator.accuracy import rate_headroom

    return rate_headroom(req.engine)


def run_serving_sweep(req: ServingSweepRequest) -> ServingSweep:
    return _CACHE.get(_cache_key("serving", req), lambda: _serving_sweep(req))


def _serving_sweep(req: ServingSweepRequest) -> ServingSweep:
    from estimator.sweep.serving import ServingWorkload, default_search, sweep_serving
    from estimator.sweep.training import DEFAULT_ACCELERATORS

    accelerators = _axis(req.accelerator, DEFAULT_ACCELERATORS)
    model = resolve_model(req.model)
    listed = _sweep_accelerators(accelerators)
    d = default_search(model, listed, _axis(req.precision, ()) or None)
    given = {k: v for k, v in req.layout.model_dump().items() if v is not None}
    space = replace(
        d,
        tp=_axis(req.layout.tp, d.tp),
        pp=_axis(req.layout.pp, d.pp),
        ep=None if req.layout.ep is None else _axis(req.layout.ep, ()),
        dp=_axis(req.layout.dp, d.dp),
        # the widened default's bounds hold over its own axes, not over sizes asked for
        max_gpus=None if given else d.max_gpus,
        dp_with_pp=d.dp_with_pp if "dp" not in given else True,
        note="" if given.keys() >= {"tp", "dp"} else d.note,
    )
    lengths = lengths_of(req)
    workload = ServingWorkload(
        input_len=req.input_len if lengths is None else lengths.input_len,
        output_len=req.output_len if lengths is None else lengths.output_len,
        lengths=lengths,
        token_budget=req.max_num_batched_tokens,
        max_seqs=req.max_num_seqs,
        kv_fraction=req.kv_cache_memory_fraction,
        kv_block=req.kv_block_size,
        ttft_target_s=req.ttft_target_s,
        tpot_target_s=req.tpot_target_s,
        output_tokens_per_s=req.output_tokens_per_s,
        prices=_prices(accelerators, req.price_usd_per_gpu_hour, req.prices),
        request_rate=req.request_rate,
        rate_headroom=sweep_headroom(req)[0],
        engine=req.engine,
        disaggregated=req.disaggregated,
        kv_overlap=req.kv_overlap,
        mixed_pools=req.mixed_pools,
        scale_up_domain=req.scale_up_domain,
        scale_out_gbit_per_s=req.scale_out_gbit_per_s,
        oversubscription=req.oversubscription,
        power=_sweep_power(req, accelerators, req.objective),
        input_per_output=req.input_per_output,
        objective=req.objective,
    )
    if req.request_rate is not None and req.output_tokens_per_s is not None:
        raise SpecError(
            "request_rate",
            "size the fleet by a request rate or by output tokens/s, not both",
            req.request_rate,
        )
    try:
        return sweep_serving(
            model,
            workload,
            space,
            max_layouts=MAX_SERVING_LAYOUTS,
            progress=_deadline(sweep_limit_s()),
        )
    except SpecError as exc:
        exc.field = _request_field(exc.field)
        raise


# --- the nearest layouts that fit --------------------------------------------------------------

# What a plan that does not fit may change, one step each, in the order a practitioner reaches
# for them: recompute activations, shard more state (ZeRO), split the model wider or deeper,
# smaller micro-batches, more GPUs. Values are page inputs (query names) and request updates.
_FIT_STEPS: tuple[tuple[str, Callable[[TrainingRequest], list[Any]]], ...] = (
    ("recompute", lambda r: [v for v in ("selective", "full") if v != r.recompute]),
    ("zero_stage", lambda r: [z for z in (1, 2, 3) if z > r.layout.zero_stage]),
    ("tp", lambda r: [r.layout.tp * k for k in (2, 4) if r.layout.tp * k <= 8]),
    ("pp", lambda r: [r.layout.pp * k for k in (2, 4)]),
    ("micro_batch_size", lambda r: [r.micro_batch_size // 2] if r.micro_batch_size > 1 else []),
    ("num_gpus", lambda r: [r.num_gpus * k for k in (2, 4, 8)] if r.num_gpus else []),
)
_LAYOUT_INPUTS = ("tp", "pp", "zero_stage")


def _changed(req: TrainingRequest, changes: dict[str, Any]) -> TrainingRequest:
    """``req`` with ``changes`` (page inputs), validated again as a request."""
    from app.schemas.training import TrainingRequest

    body = req.model_dump(exclude_unset=True)
    layout = {**body.get("layout", {}), **{k: v for k, v in changes.items() if k in _LAYOUT_INPUTS}}
    if req.num_gpus is not None or "num_gpus" in changes:
        layout.pop("dp", None)  # the GPU count decides the data parallelism again
    top = {k: v for k, v in changes.items() if k not in _LAYOUT_INPUTS}
    return TrainingRequest.model_validate({**body, **top, "layout": layout})


# The time the search for fitting layouts may take: past it, the answer lists what it found (a
# plan of a huge model costs ~50 ms an estimate; the search tries up to ~100 layouts).
FIT_SEARCH_S = 0.5


def peak_factors(
    model: ModelSpec, acc: Accelerator, stack: str, gpus: int
) -> tuple[float, float] | None:
    """The likely range of a training plan's peak memory as factors of the planner's figure,
    where published measurements of its stack near it give one
    (``estimator.accuracy.peak_memory_factors``, the range a single plan's fit verdict takes):
    the sweep's and the fit suggestions' verdicts."""
    from estimator.accuracy import peak_memory_factors

    return peak_memory_factors(
        accelerator=acc.id, generation=acc.generation, family=model.model_type,
        model_class=model.model_class, stack=stack, gpus=gpus, vendor=acc.vendor,
    )  # fmt: skip


def fits_surely(plan: TrainingPlan, e: TrainingEstimate) -> bool:
    """Whether a plan's fit verdict is ``fits`` (``verdict.training_fit``): even at the top of
    its likely peak where published measurements of its stack near it give one, as its
    answer's ``memory_per_gpu.fit`` says."""
    from estimator.memory.verdict import training_fit

    factors = peak_factors(plan.model, plan.accelerator, plan.options.stack, e.num_gpus)
    total = e.memory.total_bytes / GIB
    likely = None if factors is None else (total * factors[0], total * factors[1])
    return training_fit(e.memory, likely)[0] == "fits"


def fitting_alternatives(req: TrainingRequest, limit: int = 3) -> list[dict[str, Any]]:
    """The layouts nearest to a plan that does not surely fit (its verdict is ``tight`` or
    ``does_not_fit``) whose verdict is ``fits`` (``fits_surely``): every single change of
    ``_FIT_STEPS`` first, then pairs of them if fewer than ``limit`` single changes fit; the
    fitting ones with the fewest changes, those on the plan's GPUs before those that add GPUs,
    then the most tokens/s per GPU. Each with its changes (page inputs), memory and speed. The
    search stops after ``FIT_SEARCH_S`` seconds with what it has found."""
    deadline = time.monotonic() + FIT_SEARCH_S
    singles = [{name: v} for name, values in _FIT_STEPS for v in values(req)]
    found: list[tuple[tuple[int, bool, float], dict[str, Any], TrainingEstimate]] = []

    def attempt(changes: dict[str, Any]) -> None:
        if time.monotonic() > deadline:
            return
        try:
            plan, e = run_training(_changed(req, changes))
        except (SpecError, ValidationError):
            return
        if e.memory.fits and fits_surely(plan, e):
            rank = (len(changes), "num_gpus" in changes, -e.tokens_per_s_per_gpu)
            found.append((rank, changes, e))

    for changes in singles:
        attempt(changes)
    if len(found) < limit:
        for a, b in itertools.combinations(singles, 2):
            if a.keys() != b.keys():
                attempt({**a, **b})
    found.sort(key=lambda t: t[0])
    return [
        {
            "changes": changes,
            "memory_bytes": e.memory.total_bytes,
            "capacity_bytes": e.memory.capacity_bytes,
            "tokens_per_s": e.tokens_per_s,
            "mfu": e.mfu,
            "usd_per_1m_tokens": e.usd_per_1m_tokens,
        }
        for _, changes, e in found[:limit]
    ]


# --- every refusal at once ------------------------------------------------------------------


def all_refusals(req: BaseModel, first: SpecError) -> list[SpecError]:
    """Every rule a plan's layout breaks, the model's own (TP must divide the heads, PP x VP
    the layers, ...) before the ones derived from them (the GPU count a multiple of tp*pp*cp),
    then ``first`` (the refusal the estimate stopped at) if it is not among them. For a page
    that shows all that is wrong at once; the API keeps its one refusal."""
    from app.schemas.inference import InferenceRequest
    from app.schemas.training import TrainingRequest

    out: list[SpecError] = []
    if isinstance(req, TrainingRequest | InferenceRequest):
        lay = req.layout
        training = isinstance(req, TrainingRequest)
        try:
            model = resolve_model(req.model)
        except (SpecError, KeyError):
            model = None
        per_replica = lay.tp * lay.pp * (lay.cp if training else 1)  # type: ignore[union-attr]
        if model is not None:
            dp = max((req.num_gpus or per_replica) // per_replica, 1) if training else 1
            sizes = Parallelism(
                tp=lay.tp,
                pp=lay.pp,
                dp=dp,
                cp=getattr(lay, "cp", 1),
                ep=lay.ep,
                etp=getattr(lay, "etp", None) or lay.tp,
                vp=getattr(lay, "vp", 1),
                stage_layers=_serving_split_given(lay),
            )
            for field, broken, rule, value in layout_violations(model, sizes, training=training):
                if broken:
                    out.append(SpecError(field, rule.format(v=value), value))
        if training and req.num_gpus is not None and req.num_gpus % per_replica:
            out.append(
                SpecError(
                    "num_gpus", f"must be a multiple of tp*pp*cp = {per_replica}", req.num_gpus
                )
            )
    if all(e.field != first.field for e in out):
        out.append(first)
    return out


def _serving_split_given(layout: BaseModel) -> tuple[int, ...] | None:
    """A serving request's explicit ``layout.stage_layers`` (a training layout has none)."""
    given = getattr(layout, "stage_layers", None)
    return None if given is None else tuple(given)
