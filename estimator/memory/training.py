"""Training memory per GPU, term by term, on the most-loaded pipeline stage.

The setup (``TrainingSetup``), the record (``TrainingMemory``) and the estimate. The terms are
the registry's (``estimator.terms.TRAINING_MEMORY``), one function each in ``training_terms``
(with the accounting they follow: Megatron-LM's ``theoretical_memory_usage.py``, generalized),
computed from what each pipeline stage holds (``training_stage``: parameters, activations in
flight under 1F1B or interleaved 1F1B, the embedding on the first stage and the head's logits
on the last), of a model's tables (``training_tables``), for a setup ``training_checks``
accepts. Named overheads (CUDA context, NCCL buffers, allocator fragmentation) are estimates
with defaults and say so in ``notes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from estimator.counts.flops import Recompute
from estimator.finetune import FULL, FineTune, adapters
from estimator.inputs.accelerator import GIB, Accelerator
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.layout.parallel import Parallelism
from estimator.layout.sharding import padded_vocab
from estimator.memory.activations import (
    DEFAULT_RECOMPUTE_MODULES,
    HF_STYLE,
    ActivationConvention,
)
from estimator.memory.training_checks import (
    RECOMPUTE_POLICIES,
    RECOMPUTE_RULE,
    check_mtp,
    check_op_policy,
    check_recompute_modules,
    check_seq_len,
    validate_training,
)
from estimator.memory.training_stage import (
    Stage,
    candidate_stages,
    in_flight_microbatches,
    layout_of,
    stages_of,
)
from estimator.memory.training_tables import (
    OPTIMIZERS,
    Optimizer,
    optimizer_state_bytes_per_param,
)
from estimator.memory.training_terms import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_FRACTION,
    HOST_TERMS,
    NCCL_BUFFER_BYTES_PER_GROUP,
    OVERHEAD_TERMS,
    host_terms,
    memory_total,
    stage_memory,
    stage_terms,
)
from estimator.offload import NO_OFFLOAD, Host, Offload, host_of
from estimator.records import from_fields
from estimator.xp import Num, ceil_div, is_array, numpy

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "FRAGMENTATION_FRACTION",
    "HOST_TERMS",
    "NCCL_BUFFER_BYTES_PER_GROUP",
    "OPTIMIZERS",
    "OVERHEAD_TERMS",
    "RECOMPUTE_POLICIES",
    "RECOMPUTE_RULE",
    "TrainingMemory",
    "TrainingSetup",
    "candidate_stages",
    "check_mtp",
    "check_op_policy",
    "check_recompute_modules",
    "check_seq_len",
    "in_flight_microbatches",
    "most_loaded_terms",
    "optimizer_state_bytes_per_param",
    "training_memory",
    "training_memory_terms",
    "validate_training",
]


@dataclass(frozen=True, init=False)
class TrainingSetup:
    """What is trained on each step.

    ``global_batch_size`` defaults to ``micro_batch_size * dp``; ``flash_attention`` selects the
    attention kernel whose saved tensors are counted; ``optimizer`` the state layout;
    ``activation_convention`` whose saved tensors are counted: ``megatron`` (Megatron-Core's fused
    kernels, Korthikanti et al.) or ``hf`` (Hugging Face eager/SDPA modules, op by op; Llama-style
    families only); ``finetune`` what is trained (``estimator.finetune``: full, LoRA or QLoRA);
    ``offload`` what lives in host memory (``estimator.offload``); ``moe_imbalance`` (>= 1)
    the busiest expert-parallel rank's routed tokens over the mean, ``moe_capacity_factor`` the
    per-expert cap (None: dropless), for MoE models; ``chunked_loss`` whether the output head
    and cross-entropy run in chunks of tokens (torchtune's CEWithChunkedOutputLoss, LitGPT's
    chunked cross-entropy), which keeps the eager loss's backward buffers to one chunk's;
    ``compiled_loss`` whether the cross-entropy is ``torch.compile``'d (None: as the layers are,
    under the ``compiled`` convention); ``gradients_per_step`` whether the gradients are freed
    between steps (PyTorch's ``zero_grad(set_to_none=True)``, as FSDP2 / TorchTitan, torchtune
    and Composer run; Megatron's and DeepSpeed's gradient buffers persist);
    ``optimizer_in_backward`` whether each parameter is stepped by a hook as soon as its
    gradient is ready, which then frees it (torchtune's ``optimizer_in_bwd``; full training, one
    micro-batch a step, no pipeline); ``no_sync_accumulation`` whether gradient accumulation
    skips the gradient reduction until the last micro-batch (FSDP1's ``no_sync``, FSDP2's
    ``set_requires_gradient_sync(False)``: Lightning Fabric's ``no_backward_sync``, as LitGPT
    runs it, and Accelerate's ``accumulate`` with FSDP), so each rank holds its stage's
    gradients unsharded meanwhile (with ZeRO >= 2 and more than one micro-batch a step);
    ``recompute_modules`` the submodules selective recompute recomputes, as Megatron-Core's
    ``--recompute-modules`` names them (``activations.RECOMPUTE_MODULES``; empty: its default,
    the core attention); ``mtp_layers`` the multi-token-prediction depths trained with the
    model (Megatron-Core's ``--mtp-num-layers``, DeepSeek-V3's MTP): each is one more
    ``ModelSpec.mtp_module`` of decoder layers, a 2h x h projection of the next token's embedding
    and the hidden state, and a second pass through the output head and loss, on the last
    pipeline stage; ``mtp_repeated`` one depth's weights run for every depth (Megatron-Core's
    ``mtp_use_repeated_layer``, Nemotron 3 Super's recipes).
    Frozen, filled in one step like ``Parallelism``.
    """

    seq_len: int
    micro_batch_size: int = 1
    global_batch_size: int | None = None
    recompute: Recompute = "none"
    flash_attention: bool = True
    optimizer: Optimizer = "adamw"
    activation_convention: ActivationConvention = "megatron"
    finetune: FineTune = FULL
    offload: Offload = NO_OFFLOAD
    moe_imbalance: float = 1.0
    moe_capacity_factor: float | None = None
    chunked_loss: bool = False
    compiled_loss: bool | None = None
    gradients_per_step: bool = False
    optimizer_in_backward: bool = False
    no_sync_accumulation: bool = False
    recompute_modules: tuple[str, ...] = ()
    mtp_layers: int = 0
    mtp_repeated: bool = False

    def __init__(
        self,
        seq_len: int,
        micro_batch_size: int = 1,
        global_batch_size: int | None = None,
        recompute: Recompute = "none",
        flash_attention: bool = True,
        optimizer: Optimizer = "adamw",
        activation_convention: ActivationConvention = "megatron",
        finetune: FineTune = FULL,
        offload: Offload = NO_OFFLOAD,
        moe_imbalance: float = 1.0,
        moe_capacity_factor: float | None = None,
        chunked_loss: bool = False,
        compiled_loss: bool | None = None,
        gradients_per_step: bool = False,
        optimizer_in_backward: bool = False,
        no_sync_accumulation: bool = False,
        recompute_modules: tuple[str, ...] = (),
        mtp_layers: int = 0,
        mtp_repeated: bool = False,
    ) -> None:
        object.__setattr__(  # fill the frozen record in one step (see ``records``)
            self,
            "__dict__",
            {
                "seq_len": seq_len,
                "micro_batch_size": micro_batch_size,
                "global_batch_size": global_batch_size,
                "recompute": recompute,
                "flash_attention": flash_attention,
                "optimizer": optimizer,
                "activation_convention": activation_convention,
                "finetune": finetune,
                "offload": offload,
                "moe_imbalance": moe_imbalance,
                "moe_capacity_factor": moe_capacity_factor,
                "chunked_loss": chunked_loss,
                "compiled_loss": compiled_loss,
                "gradients_per_step": gradients_per_step,
                "optimizer_in_backward": optimizer_in_backward,
                "no_sync_accumulation": no_sync_accumulation,
                "recompute_modules": recompute_modules,
                "mtp_layers": mtp_layers,
                "mtp_repeated": mtp_repeated,
            },
        )

    def microbatches(self, dp: Num) -> Num:
        """Micro-batches a step on each data-parallel rank (one without a global batch)."""
        per_step = self.micro_batch_size * dp
        return (self.global_batch_size or per_step) // per_step

    @property
    def selective_modules(self) -> tuple[str, ...]:
        """The submodules selective recompute recomputes, sorted (Megatron-Core's default, the
        core attention, where none are named); none under the other policies."""
        if self.recompute != "selective":
            return ()
        if not self.recompute_modules:
            return DEFAULT_RECOMPUTE_MODULES
        return tuple(sorted(set(self.recompute_modules)))

    @property
    def mtp_weights(self) -> int:
        """The multi-token-prediction depths whose parameters are held: one for a repeated
        module (``mtp_repeated``), every depth otherwise."""
        return min(self.mtp_layers, 1) if self.mtp_repeated else self.mtp_layers

    @property
    def loss_convention(self) -> str:
        """The convention the head's loss follows: ``compiled`` or ``hf`` (eager) for the
        PyTorch-module conventions, ``megatron`` otherwise."""
        convention = self.activation_convention
        if convention not in HF_STYLE:
            return convention
        compiled = convention == "compiled" if self.compiled_loss is None else self.compiled_loss
        return "compiled" if compiled else "hf"

    @property
    def expert_load(self) -> float:
        """Tokens the busiest expert-parallel rank's experts take, over the balanced share:
        ``moe_imbalance``, capped by ``moe_capacity_factor`` (tokens past an expert's capacity
        are dropped, as Megatron-Core's --moe-expert-capacity-factor drops them; without a
        factor the router is dropless)."""
        cap = self.moe_capacity_factor
        return self.moe_imbalance if cap is None else min(self.moe_imbalance, cap)


@dataclass(frozen=True)
class TrainingMemory:
    """Per-GPU training memory on the most-loaded GPU, in bytes, term by term: ``terms_bytes``
    holds every term of the registry (``estimator.terms.TRAINING_MEMORY``) by its key, in its
    order, and each reads as an attribute too (``memory.weights_bytes``), so a new term needs
    no field here. (Built with ``records.from_fields``: no ``__slots__``.)"""

    terms_bytes: Mapping[str, float] = field(hash=False)
    capacity_bytes: float
    stage: int
    params_on_gpu: float
    trainable_params_on_gpu: float
    in_flight_microbatches: int
    # the routed experts' share of ``params_on_gpu``: their gradients reduce, and their
    # optimizer shards, over the expert data-parallel ranks, not over dp x cp
    expert_params_on_gpu: float = 0.0
    # What CPU offload keeps in host memory for this GPU (not in the GPU's total)
    host_optimizer_bytes: float = 0.0
    host_weights_bytes: float = 0.0
    host_activations_bytes: float = 0.0
    host_capacity_bytes: float = 0.0  # this GPU's share of its host's memory (0: no offload)
    notes: tuple[str, ...] = ()

    def __getattr__(self, key: str) -> float:
        """A term by its key (``memory.weights_bytes``); only called for names that are not
        fields."""
        try:
            value: float = self.__dict__["terms_bytes"][key]
        except KeyError:
            raise AttributeError(key) from None
        return value

    @property
    def total_bytes(self) -> float:
        """The terms' sum (``training_terms.memory_total``, as each stage's total)."""
        return float(memory_total(self.terms_bytes))

    @property
    def overhead_bytes(self) -> float:
        """The named overheads within ``total_bytes``: estimates, not tensors
        (``OVERHEAD_TERMS``)."""
        return float(sum(self.terms_bytes[k] for k in OVERHEAD_TERMS))

    @property
    def host_bytes(self) -> float:
        """What CPU offload keeps on the host (``HOST_TERMS``)."""
        return float(sum(getattr(self, k) for k in HOST_TERMS))

    @property
    def fits(self) -> bool:
        """On the GPU, and on the host where something is offloaded to it."""
        host_ok = not self.host_capacity_bytes or self.host_bytes <= self.host_capacity_bytes
        return self.total_bytes <= self.capacity_bytes and host_ok

    def terms(self) -> dict[str, float]:
        return dict(self.terms_bytes)


def training_memory_terms(
    model: ModelSpec,
    precision: Precision,
    parallel: Parallelism,
    setup: TrainingSetup,
    *,
    stages: Sequence[Num],
    microbatches: Num,
    any_layout: bool = False,
) -> list[dict[str, Num]]:
    """Every memory term on each of ``stages`` (``training_terms.stage_memory``: the terms by
    key, their ``total_bytes``, ``params_on_gpu``, the ``in_flight`` micro-batches ...), for one
    layout or arrays of layouts: ``parallel``'s sizes and ``setup.micro_batch_size`` may be
    numpy arrays (the sweep). This is the single formula the single estimate and the sweep both
    call. ``any_layout``: the GPU runs fp8 GEMMs in every layout
    (``Accelerator.fp8_any_layout``), so a per-tensor fp8 weight keeps no transposed copy."""
    layout = layout_of(model, precision, parallel, setup, microbatches, any_layout)
    return [stage_memory(stage, *stage_terms(stage)) for stage in stages_of(layout, stages)]


def most_loaded_terms(
    model: ModelSpec,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    any_layout: bool = False,
) -> dict[str, Num]:
    """``training_memory_terms`` of a layout's candidate stages reduced to the most-loaded one
    (the first of equals), whose index is under ``stage``. ``parallel`` and
    ``setup.micro_batch_size`` may hold arrays of layouts (the sweep)."""
    terms, stage = _most_loaded(model, parallel, setup, precision, any_layout)
    terms["stage"] = stage
    return terms


def _most_loaded(
    model: ModelSpec,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    any_layout: bool = False,
) -> tuple[dict[str, Num], Num]:
    """The most-loaded stage's ``training_memory_terms`` and its index: one layout's whole
    stage, or each of arrays of layouts' (value by value)."""
    indices, stages, terms, totals = _candidates(model, parallel, setup, precision, any_layout)
    best = _first_largest(totals)
    if best is None:
        return _merged(stages, terms, totals, indices)
    return stage_memory(stages[best], terms[best], totals[best]), indices[best]


def _candidates(
    model: ModelSpec,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    any_layout: bool,
) -> tuple[tuple[Num, ...], list[Stage], list[dict[str, Num]], list[Num]]:
    """The candidate stages (``candidate_stages``): their indices, records, terms and totals."""
    indices = candidate_stages(model, parallel.pp, parallel.stage_layers)
    microbatches = setup.microbatches(parallel.dp)
    layout = layout_of(model, precision, parallel, setup, microbatches, any_layout)
    stages = stages_of(layout, indices)
    terms, totals = [], []
    for stage in stages:
        stage_terms_, total = stage_terms(stage)
        terms.append(stage_terms_)
        totals.append(total)
    return indices, stages, terms, totals


def _first_largest(totals: Sequence[Num]) -> int | None:
    """The position of the first of the largest ``totals`` of one layout; None for arrays of
    layouts (``_merged`` takes each layout's)."""
    if is_array(*totals):
        return None
    best = 0
    for i in range(1, len(totals)):
        if totals[i] > totals[best]:
            best = i
    return best


def _heaviest_stage(
    model: ModelSpec,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    any_layout: bool,
) -> tuple[Stage, dict[str, Num], Num]:
    """One layout's most-loaded candidate stage (the first of equals): its record, terms and
    index; each stage's terms are kept only while they are the largest so far."""
    indices = candidate_stages(model, parallel.pp, parallel.stage_layers)
    layout = layout_of(
        model, precision, parallel, setup, setup.microbatches(parallel.dp), any_layout
    )
    stages = stages_of(layout, indices)
    terms, most = stage_terms(stages[0])
    if type(most) is not float and is_array(most):
        raise TypeError("training_memory estimates one layout (most_loaded_terms takes arrays)")
    best = 0
    for i in range(1, len(stages)):
        other, total = stage_terms(stages[i])
        if total > most:
            best, terms, most = i, other, total
    return stages[best], terms, indices[best]


def _merged(
    stages: Sequence[Stage],
    terms: Sequence[dict[str, Num]],
    totals: Sequence[Num],
    indices: Sequence[Num],
) -> tuple[dict[str, Num], Num]:
    """Each layout's most-loaded stage (the first of equals) of arrays of layouts, value by
    value (a value the stages share, a constant or their common layer stack's, is kept)."""
    per_stage = [stage_memory(*one) for one in zip(stages, terms, totals, strict=True)]
    best, best_index = per_stage[0], indices[0]
    choose = numpy().where  # arrays of layouts: numpy is loaded
    for index, values in zip(indices[1:], per_stage[1:], strict=True):
        more = values["total_bytes"] > best["total_bytes"]
        if type(more) is bool:  # the same choice for every layout: the whole stage or none
            if more:
                best, best_index = values, index
            continue
        merged = {}
        for key, value in values.items():
            kept = best[key]
            merged[key] = kept if value is kept else choose(more, value, kept)
        best, best_index = merged, choose(more, index, best_index)
    return best, best_index


def training_memory(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
) -> TrainingMemory:
    """Per-GPU memory of a training step on the most-loaded GPU, with its breakdown."""
    validate_training(model, parallel, setup)
    s, terms, stage = _heaviest_stage(model, parallel, setup, precision, accelerator.fp8_any_layout)
    values: dict[str, Any] = {  # the TrainingMemory fields
        "terms_bytes": _floats(terms),
        "capacity_bytes": float(accelerator.memory_bytes),
        "stage": stage,
        "params_on_gpu": float(s.params),
        "trainable_params_on_gpu": float(s.trainable_params),
        "in_flight_microbatches": int(ceil_div(s.in_flight * 1000, 1000)),
        "expert_params_on_gpu": float(s.stack.expert_params),
        "host_optimizer_bytes": 0.0,
        "host_weights_bytes": 0.0,
        "host_activations_bytes": 0.0,
        "host_capacity_bytes": 0.0,
        "notes": _training_notes(model, parallel, setup, int(stage)),
    }
    if s.loss_reuse_bytes > 0:
        values["notes"] += (
            f"The first backward frees the loss's {float(s.logits_bytes) / GIB:,.2f} GiB"
            " before it recomputes a layer: allocated memory peaks at the larger of the two, not"
            f" their sum; the {float(s.loss_reuse_bytes) / GIB:,.2f} GiB of freed loss"
            " blocks the recomputed layer reuses stay reserved by the caching allocator (in"
            " fragmentation).",
        )
    if setup.offload.any:  # what CPU offload keeps on the host, and the host's share
        host = host_of(accelerator.id, setup.offload)
        for key, value in host_terms(s).items():
            values[key] = float(value)
        values["host_capacity_bytes"] = host.memory_bytes
        values["notes"] += _host_notes(values, host)
    return from_fields(TrainingMemory, values)


def _floats(terms: dict[str, Num]) -> dict[str, float]:
    """One layout's ``terms`` as floats: the dict itself where every value is a float already
    (the caller hands it over), a converted copy otherwise. The check runs in C (a set of the
    values' types), a third of what converting every value costs."""
    if set(map(type, terms.values())) == {float}:
        return cast("dict[str, float]", terms)
    return dict(zip(terms, map(float, terms.values()), strict=True))


_OVERHEAD_NOTE = (
    "Overheads are planning defaults, not measurements: CUDA context "
    f"{CUDA_CONTEXT_BYTES / GIB:.2f} GiB, NCCL buffers "
    f"{NCCL_BUFFER_BYTES_PER_GROUP / GIB:.2f} GiB per parallel group, allocator "
    f"fragmentation {FRAGMENTATION_FRACTION:.0%} of allocated memory."
)


def _host_notes(best: Mapping[str, Any], host: Host) -> tuple[str, ...]:
    need = float(sum(best[k] for k in HOST_TERMS))
    notes = [
        host.note(),
        f"Host memory for this GPU's offloaded state: {need / GIB:,.2f} GiB of"
        f" {host.memory_bytes / GIB:,.2f} GiB"
        + ("." if need <= host.memory_bytes else ": it does not fit in host memory."),
    ]
    return tuple(notes)


def _training_notes(
    model: ModelSpec, p: Parallelism, setup: TrainingSetup, stage: int
) -> tuple[str, ...]:
    tp, sp, pp = p.tp, p.sequence_parallel, p.pp
    notes = [f"Most-loaded GPU is on pipeline stage {stage} of {pp}.", _OVERHEAD_NOTE]
    if sp and tp == 1:
        notes.append("sequence_parallel has no effect with tp=1.")
    if tp > 1 and not sp:
        notes.append(
            "Without sequence parallelism, norm and dropout activations are "
            "replicated on every TP rank; enabling it divides them by tp."
        )
    if p.zero_stage >= 2 and pp > 1:
        notes.append(
            "ZeRO-2/3 with pipeline parallelism is not supported by DeepSpeed's "
            "pipeline engine (ZeRO-1 only); FSDP2 + PP (torchtitan) supports it."
        )
    if padded := (padded_vocab(model, tp) - model.vocab_size):
        notes.append(f"Vocabulary padded by {padded} rows to a multiple of 128*tp (Megatron).")
    if setup.finetune.frozen:
        notes.append(adapters(model, setup.finetune).note())
    if setup.mtp_layers:
        where_ = "this stage" if stage == pp - 1 else f"the last stage ({pp - 1}), not this one"
        notes.append(
            f"Multi-token prediction on {where_}: the parameters of {setup.mtp_weights} depth(s)"
            " (their layers, counted with the decoder's of the same kind, their 2h x h"
            " projections and norms"
            + (
                ", and a second copy of the untied embedding"
                if pp > 1 and not model.tie_embeddings
                else ""
            )
            + f"), the activations of {setup.mtp_layers} and their logits."
        )
    if setup.optimizer_in_backward:
        notes.append(
            "Optimizer in the backward (torchtune's optimizer_in_bwd): each parameter is"
            " stepped from its gradient hook and its gradient freed, so the gradients term is"
            " one linear's gradient"
            + (
                " and the tied embedding's (held from the loss to the embedding)"
                if model.tie_embeddings
                else ""
            )
            + "; the step's time is unchanged (the same updates, run inside the backward)."
        )
    if setup.no_sync_accumulation:
        m = setup.microbatches(p.dp)
        if p.zero_stage >= 2 and m > 1:
            notes.append(
                f"Gradient accumulation without the reduction (FSDP's no_sync over {m}"
                " micro-batches): each rank holds its stage's gradients unsharded until the last"
                " micro-batch reduce-scatters them: the gradients term is not divided over the"
                " data-parallel ranks."
            )
        else:
            notes.append(
                "no_sync_accumulation has no effect here: "
                + ("one micro-batch a step" if m == 1 else "gradients unsharded already (ZeRO < 2)")
                + "."
            )
    if model.moe is not None:
        load, cap = setup.expert_load, setup.moe_capacity_factor
        if load != 1 or cap is not None:
            dropped = (
                f"; tokens past a capacity factor of {cap:g} are dropped, not computed"
                if cap is not None and cap < setup.moe_imbalance
                else ""
            )
            notes.append(
                f"MoE load: the busiest expert-parallel rank's experts take {load:g}x the"
                f" balanced share of routed tokens (imbalance {setup.moe_imbalance:g}"
                f"{dropped}); their GEMMs and saved activations scale with it."
            )
        else:
            notes.append(
                "MoE routing assumed balanced (moe_imbalance=1, dropless): real routers are"
                " not; give moe_imbalance for the busiest rank's share."
            )
    return (*notes, *model.notes)
