"""Training memory per GPU, term by term, on the most-loaded pipeline stage.

Bytes per parameter (Megatron-LM's accounting, ``theoretical_memory_usage.py``, generalized):
model weights in the precision's weight format (plus Transformer Engine's low-precision weight
cache for fp8 recipes), gradients in the gradient format (fp32 ``main_grad`` for bf16 training),
fp32 master weights, and optimizer states (AdamW: two fp32 moments). ZeRO stage 1 (and Megatron's
distributed optimizer) shards master weights and optimizer states over the data-parallel ranks
(``dp * cp`` for dense parameters, the expert data-parallel ranks for experts); stage 2 also the
gradients; stage 3 (FSDP FULL_SHARD) also the weights, which are then all-gathered one layer at a
time (two layers resident: the one computing and the one prefetched).

Activations follow ``activations.py``; pipeline rank ``r`` keeps the micro-batches in flight under
1F1B (``pp - r``) or interleaved 1F1B (Megatron's warm-up count ``2 (pp - r - 1) + (vp - 1) pp + 1``
chunks), never more than the step has. The first stage adds the embedding's inputs, the last the
logits buffer. Named overheads (CUDA context, NCCL buffers, allocator fragmentation) are estimates
with the defaults below and say so in ``notes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple, get_args

from estimator.counts.flops import Recompute
from estimator.errors import SpecError
from estimator.finetune import (
    FULL,
    Adapter,
    Adapters,
    FineTune,
    adapters,
    dequant_buffer_elems,
    linear_weight_bytes,
)
from estimator.finetune import check_precision as check_finetune_precision
from estimator.layout.parallel import Parallelism, validate_layout
from estimator.layout.sharding import (
    Placement,
    embedding_extras,
    largest_linear,
    padded_vocab,
    place_layer,
    placements,
    stage_kind_counts,
    with_mtp,
)
from estimator.memo import per_model
from estimator.memory.activations import (
    DEFAULT_RECOMPUTE_MODULES,
    HF_CONVENTION_FAMILIES,
    HF_STYLE,
    RECOMPUTE_MODULES,
    ActivationConvention,
    Region,
    embedding_activation_bytes,
    head_activation_bytes,
    hf_checkpoint_shared_bytes,
    is_mla,
    is_moe,
    layer_regions,
    loss_backward_bytes,
    recomputed_layer_input_bytes,
    region_scales,
    saved_bytes,
)
from estimator.offload import NO_OFFLOAD, Host, Offload, host_of
from estimator.records import from_fields
from estimator.spec.accelerator import GIB, Accelerator
from estimator.spec.model import ModelSpec
from estimator.spec.precision import DTYPES, Precision, trained_weight_bytes
from estimator.terms import TRAINING_MEMORY
from estimator.xp import Num, ceil_div, maximum, minimum, where

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "FRAGMENTATION_FRACTION",
    "HOST_TERMS",
    "NCCL_BUFFER_BYTES_PER_GROUP",
    "OPTIMIZERS",
    "OVERHEAD_TERMS",
    "TrainingMemory",
    "TrainingSetup",
    "most_loaded_terms",
    "optimizer_state_bytes_per_param",
    "training_memory",
    "training_memory_terms",
    "validate_training",
]

# CUDA context, cuBLAS/cuDNN workspaces and loaded kernels of a PyTorch training process. Not in
# torch.cuda.max_memory_allocated, but it counts against the card's capacity.
CUDA_CONTEXT_BYTES = 0.75 * GIB
# NCCL communicator buffers, per parallel group of size > 1 the GPU belongs to (NCCL's default
# NCCL_BUFFSIZE of 4 MiB per channel and peer, over the channels a group opens).
NCCL_BUFFER_BYTES_PER_GROUP = 0.25 * GIB
# PyTorch caching-allocator overhead (reserved minus allocated) as a share of allocated bytes.
# 5% is a planning default; expandable segments bring it near zero, fragmented workloads see 10-15%.
FRAGMENTATION_FRACTION = 0.05

Optimizer = Literal["adamw", "adam8bit", "sgd", "adafactor"]
# Optimizer-state elements per parameter and their format; adafactor keeps factored second
# moments (row + column statistics) instead, see ``_optimizer_state_bytes``.
OPTIMIZERS: dict[str, tuple[int, str]] = {
    "adamw": (2, "fp32"),
    "adam8bit": (2, "fp8-adam"),
    "sgd": (1, "fp32"),
    "adafactor": (0, "fp32"),
}


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


# The terms of a plan's memory that are estimates, not tensors (the CUDA context, NCCL buffers
# and allocator fragmentation), and those CPU offload keeps on the host: read by a plan's
# ``TrainingMemory`` and by the sweep's arrays of ``training_memory_terms``.
OVERHEAD_TERMS = ("cuda_context_bytes", "comm_buffers_bytes", "fragmentation_bytes")
HOST_TERMS = ("host_optimizer_bytes", "host_weights_bytes", "host_activations_bytes")


@dataclass(frozen=True)
class TrainingMemory:
    """Per-GPU training memory on the most-loaded GPU, in bytes, term by term. (Built with
    ``records.from_fields``: no ``__slots__``.)"""

    weights_bytes: float
    weight_cache_bytes: float
    gradients_bytes: float
    master_weights_bytes: float
    optimizer_states_bytes: float
    activations_bytes: float
    logits_bytes: float
    zero3_gather_bytes: float
    dequant_buffer_bytes: float
    cuda_context_bytes: float
    comm_buffers_bytes: float
    fragmentation_bytes: float
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

    @property
    def total_bytes(self) -> float:
        return float(
            self.weights_bytes
            + self.weight_cache_bytes
            + self.gradients_bytes
            + self.master_weights_bytes
            + self.optimizer_states_bytes
            + self.activations_bytes
            + self.logits_bytes
            + self.zero3_gather_bytes
            + self.dequant_buffer_bytes
            + self.cuda_context_bytes
            + self.comm_buffers_bytes
            + self.fragmentation_bytes
        )

    @property
    def overhead_bytes(self) -> float:
        """The named overheads within ``total_bytes``: estimates, not tensors
        (``OVERHEAD_TERMS``)."""
        return float(sum(getattr(self, k) for k in OVERHEAD_TERMS))

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
        return {name: getattr(self, name) for name in TERMS}


TERMS = tuple(t.key for t in TRAINING_MEMORY)  # the registry's order (``estimator.terms``)


def optimizer_state_bytes_per_param(
    model: ModelSpec, optimizer: str, precision: Precision | None = None
) -> float:
    """Optimizer-state bytes per parameter the optimizer holds (AdamW: two moments in the
    precision's ``optimizer_states`` format, fp32 by default)."""
    return float(_optimizer_state_bytes(model, optimizer, 1, _state_dtype(optimizer, precision)))


def _state_dtype(optimizer: str, precision: Precision | None) -> str:
    """The moments' format: the optimizer's own (8-bit Adam's blockwise 8 bits), else the
    precision's ``optimizer_states`` (bf16 for torchtune's and LitGPT's pure-bf16 runs)."""
    own = OPTIMIZERS[optimizer][1]
    if own != "fp32" or precision is None:
        return own
    return precision.optimizer_states or own


def _optimizer_state_bytes(model: ModelSpec, optimizer: str, params: Num, dtype: str) -> Num:
    count = OPTIMIZERS[optimizer][0]
    if optimizer == "adafactor":
        return params * _adafactor_ratio(model) * DTYPES[dtype].bytes
    return params * count * DTYPES[dtype].bytes


def _adafactor_ratio(model: ModelSpec) -> float:
    """Factored second-moment elements per parameter: a (rows x cols) matrix keeps rows + cols
    statistics, vectors keep themselves (Shazeer & Stern 2018). Applied as a model-wide ratio."""
    stats = params = 0
    for kind, n in zip(model.kinds, model.kind_counts, strict=True):
        for m in kind.linears:
            stats += n * m.copies * (m.in_features + m.out_features) + n * m.bias_params
            params += n * m.params
        stats += n * sum(x.params for x in kind.norms)
        params += n * sum(x.params for x in kind.norms)
    return stats / params if params else 1.0


def in_flight_microbatches(pp: Num, vp: Num, stage: Num, microbatches: Num) -> Num:
    """Micro-batches of activations a pipeline rank holds at its peak, in units of the rank's
    full layer set: 1F1B keeps ``pp - r``; interleaved 1F1B keeps
    ``2 (pp - r - 1) + (vp - 1) pp + 1``
    chunks of ``1/vp`` of the rank's layers (Megatron-LM ``schedules.py`` warm-up counts)."""
    plain = pp - stage
    if type(plain) is int and type(microbatches) is int and type(vp) is int and vp == 1:
        return plain if plain <= microbatches else microbatches  # one layout without chunks
    plain = minimum(plain, microbatches)
    chunks = minimum(2 * (pp - stage - 1) + (vp - 1) * pp + 1, microbatches * vp)
    return where(vp > 1, chunks / vp, plain)


class _AdapterTables(NamedTuple):
    """What a LoRA or QLoRA estimate adds (``estimator.finetune``): each layer kind's adapter
    placement and the bytes per token its adapters save for backward (the ``r``-wide output of
    ``A`` that ``B``'s weight gradient reads, whole on every TP rank: ``A x`` of a row-parallel
    base is all-reduced), the adapters' bytes per parameter of weights (the precision's weight
    format) and optimizer states, and whether the base is NF4 (a dequantization buffer)."""

    placements: tuple[Placement, ...]
    saved_per_token: tuple[float, ...]
    weight_bytes: float
    state_bytes: float
    quantized: bool


class _MemoryTables(NamedTuple):
    """What a memory estimate reads of a model that no layout changes, for one set of dtypes,
    optimizer, attention kernel, activation convention and fine-tuning setting: bytes per
    parameter of the weights (linear, other), the fp8 weight cache, gradients, master weights,
    optimizer states and routed experts; each layer kind's placement and saved-activation
    regions; the embedding's extra parameters; the adapters (None for full fine-tuning)."""

    bytes_per_param: tuple[float, float, float, float, float, float, float]
    placements: tuple[Placement, ...]
    regions: tuple[tuple[tuple[Region, float], ...], ...]
    embedding_extras: tuple[int, int]
    adapters: _AdapterTables | None


@per_model
def _placed_layers(
    model: ModelSpec, tp: int, ep: int, etp: int
) -> tuple[tuple[Num, Num, Num, Num, Num], ...]:
    """``place_layer`` of each layer kind's placement for one layout's sizes (the single
    estimate's: a layout's arrays in a sweep are placed each time)."""
    return tuple(place_layer(placement, tp, ep, etp) for placement in placements(model))


@per_model
def _memory_tables(
    model: ModelSpec,
    precision: Precision,
    optimizer: str,
    flash: bool,
    convention: str,
    finetune: FineTune | None,
    modules: tuple[str, ...] = (),
    any_layout: bool = False,
) -> _MemoryTables:
    """``_MemoryTables`` of a model for one precision, optimizer, attention kernel, activation
    convention and fine-tuning setting (which is resolved and checked here, so every estimate
    refuses a bad one). QLoRA stores the linear weights in NF4 and keeps the routed experts,
    fused parameters that bitsandbytes does not quantize, in the compute dtype. ``modules``:
    the selective recompute modules whose tensors are not kept (``recomputed_items``). A
    quantized weight or weight cache holds the copies the backward reads
    (``trained_weight_bytes``; ``any_layout``: the GPU runs fp8 GEMMs in every layout)."""
    finetune = finetune or FULL  # None: full fine-tuning (a cheaper memo key than the record)
    lora = adapters(model, finetune)  # validates the setting against the model
    check_finetune_precision(finetune, precision)
    act_b = DTYPES[precision.activations].bytes
    quantized = finetune.method == "qlora"
    return _MemoryTables(
        (
            linear_weight_bytes(finetune, precision)
            if quantized
            else trained_weight_bytes(precision.weights, any_layout),
            act_b,
            trained_weight_bytes(precision.weight_cache, any_layout),
            precision.bytes("gradients"),
            precision.bytes("master_weights"),
            float(_optimizer_state_bytes(model, optimizer, 1, _state_dtype(optimizer, precision))),
            act_b if quantized else trained_weight_bytes(precision.expert_format, any_layout),
        ),
        placements(model),
        layer_regions(model, precision, flash, convention, _adapted(lora, convention), modules),
        embedding_extras(model),
        _adapter_tables(lora, precision, optimizer, act_b, convention) if finetune.frozen else None,
    )


def _adapted(lora: Adapters, convention: str) -> tuple[str, ...] | None:
    """The adapted module names (``q_proj`` ...) of a frozen base, for the PyTorch-module
    conventions' ``frozen_items``; None for full training or the Megatron convention."""
    if not lora.finetune.frozen or convention not in HF_STYLE:
        return None
    names = {a.module.rpartition(".")[2] for kind in lora.per_kind for a in kind}
    return tuple(sorted(names))


def _adapter_tables(
    lora: Adapters, precision: Precision, optimizer: str, act_b: float, convention: str
) -> _AdapterTables:
    count, fmt = OPTIMIZERS[optimizer][0], _state_dtype(optimizer, precision)
    # An adapter's input dropout (PEFT's nn.Dropout before lora_A) keeps the dropped-out input
    # lora_A saves and, eager, its bool mask (a compiled graph regenerates the mask from its
    # seed); measured on PEFT-wrapped layers in the tests.
    mask = 0.0 if convention == "compiled" else 1.0
    dropped = (act_b + mask) if lora.finetune.dropout > 0 else 0.0
    if optimizer == "adafactor":  # each of A and B keeps its row and column statistics
        every = [a for kind in lora.per_kind for a in kind]
        stats = sum(a.in_features + 2 * a.rank + a.out_features for a in every)
        state = stats / sum(a.params for a in every) * DTYPES[fmt].bytes
    else:
        state = count * DTYPES[fmt].bytes
    return _AdapterTables(
        tuple(_adapter_placement(kind) for kind in lora.per_kind),
        tuple(
            sum(a.rank for a in kind) * act_b + dropped * sum(a.in_features for a in kind)
            for kind in lora.per_kind
        ),
        DTYPES[precision.weights].bytes,
        float(state),
        lora.finetune.method == "qlora",
    )


def _adapter_placement(kind: tuple[Adapter, ...]) -> Placement:
    """A layer kind's adapters' ``Placement``s merged into one."""
    split: list[tuple[int, int, int]] = []
    whole = 0
    for a in kind:
        one = a.placement()
        split += one.split
        whole += one.whole_linear
    return Placement(tuple(split), whole, 0, None)


class StageTerms(NamedTuple):
    """Every memory term of one pipeline stage (or of arrays of layouts, in a sweep): the
    ``TERMS`` in the registry's order (a test checks the names), their total, the parameters on
    the GPU, the micro-batches in flight, and the parts of ``activations_bytes`` the timeline
    needs (one micro-batch's saved tensors, with the embedding's on stage 0, and the layer being
    recomputed). Built by ``_stage`` in one step, as a plain tuple is."""

    weights_bytes: Num
    weight_cache_bytes: Num
    gradients_bytes: Num
    master_weights_bytes: Num
    optimizer_states_bytes: Num
    activations_bytes: Num
    logits_bytes: Num
    zero3_gather_bytes: Num
    dequant_buffer_bytes: Num
    cuda_context_bytes: Num
    comm_buffers_bytes: Num
    fragmentation_bytes: Num
    total_bytes: Num
    params_on_gpu: Num
    trainable_params_on_gpu: Num
    expert_params_on_gpu: Num  # the routed experts' (gradients over the expert-DP ranks)
    in_flight: Num
    microbatch_activations_bytes: Num
    working_layer_bytes: Num
    loss_cache_bytes: Num  # freed loss buffers the allocator keeps while a layer is recomputed
    # CPU offload (``estimator.offload``): what lives in host memory instead
    host_optimizer_bytes: Num  # master weights, optimizer states (and gradients, ZeRO >= 2)
    host_weights_bytes: Num  # the GPU's weight shard (ZeRO-3 parameter offload)
    host_activations_bytes: Num  # saved activations beyond the two layers the GPU keeps


STAGE_KEYS = StageTerms._fields
# A named tuple's generated constructor costs ~4x a plain tuple's; this fills the same record
# from one tuple of values in STAGE_KEYS order (``records``' trick, for a tuple subclass).
_stage = partial(tuple.__new__, StageTerms)


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
    """Every memory term on each of ``stages`` (``STAGE_KEYS``: the ``TERMS``, their
    ``total_bytes``, ``params_on_gpu``, the ``in_flight`` micro-batches ...), for one layout or
    arrays of layouts: ``parallel``'s sizes and ``setup.micro_batch_size`` may be numpy arrays
    (the sweep). This is the single formula the single estimate and the sweep both call.
    ``any_layout``: the GPU runs fp8 GEMMs in every layout (``Accelerator.fp8_any_layout``), so a
    per-tensor fp8 weight keeps no transposed copy."""
    per_stage = _stage_values(model, precision, parallel, setup, stages, microbatches, any_layout)
    return [values._asdict() for values in per_stage]


def _stage_values(
    model: ModelSpec,
    precision: Precision,
    parallel: Parallelism,
    setup: TrainingSetup,
    stages: Sequence[Num],
    microbatches: Num,
    any_layout: bool = False,
) -> list[StageTerms]:
    """``training_memory_terms`` as records (a dict per stage costs as much as a stage's
    arithmetic; the single estimate reads the most-loaded stage's record).
    What does not depend on the stage (per-layer parameters and activations, and with one layer
    kind the whole layer stack, which every stage holds alike) is computed once."""
    tp, pp, dp, cp = parallel.tp, parallel.pp, parallel.dp, parallel.cp
    ep, vp, zero_stage = parallel.ep, parallel.vp, parallel.zero_stage
    etp = tp if parallel.etp is None else parallel.etp
    seq_len, micro_batch, recompute = setup.seq_len, setup.micro_batch_size, setup.recompute
    flash, convention = setup.flash_attention, setup.activation_convention
    sp_on = parallel.sequence_parallel & (tp > 1)  # bools, or arrays of them
    dense_shards = dp * cp
    expert_shards = tp * cp * dp // (ep * etp)
    ft = setup.finetune
    modules = setup.selective_modules
    tables = _memory_tables(
        model,
        precision,
        setup.optimizer,
        flash,
        convention,
        None if ft is FULL else ft,
        () if modules == DEFAULT_RECOMPUTE_MODULES else modules,
        any_layout,
    )
    w_lin, w_other, cache_b, grad_b, master_b, state_b, w_exp = tables.bytes_per_param
    lora = tables.adapters  # None: full fine-tuning
    offload = setup.offload
    # ZeRO stage z divides a term by the data-parallel ranks (dense parameters over dp * cp,
    # experts over the expert data-parallel ranks) and by 1 below z: 1 + on * (ranks - 1) works
    # alike for one layout (bools) and for arrays, and x / 1 is exactly x. Megatron's
    # distributed optimizer shards like stage 1 (``Parallelism.optimizer_shard_stage``).
    shard_weights, shard_grads = zero_stage >= 3, zero_stage >= 2
    # FSDP2 under a pipeline (TorchTitan; DeepSpeed refuses ZeRO-2/3 with pipelines): the stage's
    # blocks are not resharded after forward (torchtitan parallelize_llama.py: "For PP, do not
    # reshard after forward to avoid per-microbatch all-gathers") and their gradients are reduced
    # only after the last micro-batch's backward (torch.distributed.pipelining PipelineStage:
    # set_requires_gradient_sync(False) before), accumulated unsharded in the reduce dtype
    # (FSDPParam.to_accumulated_grad_if_needed): the whole stage's weights stay gathered and
    # its gradients unsharded.
    fsdp_pp = shard_weights & (pp > 1)
    in_backward = setup.optimizer_in_backward
    per_step_grads = (
        setup.gradients_per_step and not in_backward and (pp == 1) & (microbatches == 1)
    )
    shard_states = (zero_stage >= 1) | parallel.distributed_optimizer
    weights_div = 1 + shard_weights * (dense_shards - 1), 1 + shard_weights * (expert_shards - 1)
    grads_div = 1 + shard_grads * (dense_shards - 1), 1 + shard_grads * (expert_shards - 1)
    dense_grads_div = grads_div[0] if fsdp_pp is False else where(fsdp_pp, 1, grads_div[0])
    # Gradient accumulation without the reduction (FSDP1's no_sync, FSDP2's
    # set_requires_gradient_sync(False)): the gradients of every micro-batch but the last stay
    # unsharded ("FSDP will accumulate the full model gradients (instead of gradient shards)
    # until the eventual sync", torch FullyShardedDataParallel.no_sync), so the last backward
    # starts with the stage's whole gradients on each rank.
    unsynced = setup.no_sync_accumulation and shard_grads & (microbatches > 1)
    expert_grads_div, adapter_grads_div = grads_div[1], grads_div[0]
    if unsynced is not False:
        dense_grads_div = where(unsynced, 1, dense_grads_div)
        expert_grads_div = where(unsynced, 1, expert_grads_div)
        adapter_grads_div = where(unsynced, 1, adapter_grads_div)
    states_div = 1 + shard_states * (dense_shards - 1), 1 + shard_states * (expert_shards - 1)
    kinds = model.kinds
    layers: Sequence[tuple[Num, Num, Num, Num, Num]]
    if type(tp) is int and type(ep) is int and type(etp) is int:  # one layout: per model
        layers = _placed_layers(model, tp, ep, etp)
    else:
        placed = []  # a loop, not a comprehension: no extra frame for a list of one or two kinds
        for placement in tables.placements:
            placed.append(place_layer(placement, tp, ep, etp))
        layers = placed
    vocab_rows = padded_vocab(model, tp) // tp

    tokens = seq_len * micro_batch / cp
    # Full recompute keeps each layer's input, and the layer being recomputed holds its full
    # activations (the "none" policy's); so does the per-op policy, besides what it saves.
    policy = "none" if recompute in ("full", "op") else recompute
    if modules and "core_attn" not in modules:  # selective, the score matrices kept
        policy = "none"
    scales = region_scales(
        keys=seq_len, tp=tp, sp=sp_on, etp=etp, recompute=policy, expert_load=setup.expert_load
    )

    regions = tables.regions
    if recompute in ("full", "op"):
        kept = recomputed_layer_input_bytes(model, precision, tokens, tp, sp_on)
        stored = [kept] * len(kinds)
        if recompute == "op":  # and the outputs the per-op policy saves
            for k, r in enumerate(layer_regions(model, precision, flash, "op")):
                stored[k] = stored[k] + saved_bytes(r, scales, tokens)
        working = [saved_bytes(r, scales, tokens) for r in regions]
    else:
        stored = []
        for r in regions:
            stored.append(saved_bytes(r, scales, tokens))
        working = None
    dequant: Num = 0
    if lora is not None:
        # Adapters: their parameters per layer of each kind, and A's outputs, saved with the
        # layer's own tensors (recomputed with them under full recompute).
        adapter_layers = [place_layer(pl, tp, ep, etp)[4] for pl in lora.placements]
        adapter_acts = [tokens * b for b in lora.saved_per_token]
        if working is None:
            stored = [s + a for s, a in zip(stored, adapter_acts, strict=True)]
        else:
            working = [w + a for w, a in zip(working, adapter_acts, strict=True)]
        if lora.quantized:
            dequant = dequant_buffer_elems(model, tp) * w_other
    if convention in HF_STYLE and recompute in ("full", "op"):
        embed = embedding_activation_bytes(
            model, precision, tokens, tp, sp_on
        ) + hf_checkpoint_shared_bytes(model, precision, seq_len, micro_batch, flash)
    else:
        embed = embedding_activation_bytes(model, precision, tokens, tp, sp_on, convention, seq_len)
    head_rows = model.vocab_size / tp if convention in HF_STYLE else vocab_rows
    if convention in HF_STYLE:
        loss = setup.loss_convention
        head = head_activation_bytes(model, precision, tokens, tp, sp_on, head_rows, loss)
        if not setup.chunked_loss:
            head = head + loss_backward_bytes(tokens, head_rows, loss, precision)
    else:
        head = head_activation_bytes(model, precision, tokens, tp, sp_on, head_rows, convention)
    # int + bool counts for one layout and for arrays (where bool + bool would be "or").
    groups = 1 * (tp > 1) + (pp > 1) + (dp > 1) + (cp > 1) + (ep > 1)
    comm = groups * NCCL_BUFFER_BYTES_PER_GROUP

    # Embedding and head parameters: the input embedding on the first stage, the output head on
    # the last unless it is the tied embedding already held there (Megatron keeps a second copy
    # of a tied embedding on the last stage when pp > 1).
    first_extra, last_extra = tables.embedding_extras
    head_rows_params = vocab_rows * model.embed_dim
    embedding_params = head_rows_params + first_extra
    untied_head_params = head_rows_params + last_extra
    tied = model.tie_embeddings

    # Multi-token prediction on the last stage (``TrainingSetup.mtp_layers``): besides its
    # decoder layers (``with_mtp``), each depth's 2h x h projection and three norms (enorm,
    # hnorm, its final norm), a second copy of an untied embedding where the first stage holds
    # the first (Megatron-Core's LanguageModule keeps one for the MTP stage, as it does for a
    # tied head), the normed embedding and hidden state and their concatenation saved for the
    # projection's backward (4h a token), and another pass through the head and its loss. A
    # repeated module (``mtp_repeated``) holds one depth's parameters, run for every depth.
    mtp = setup.mtp_layers
    held = setup.mtp_weights
    h = model.hidden_size
    mtp_linear = held * 2 * h * h / tp
    mtp_other = held * 3 * h + (pp > 1) * (1 - tied) * head_rows_params * (mtp > 0)
    mtp_acts = mtp * 4 * h * tokens * DTYPES[precision.activations].bytes / (1 + sp_on * (tp - 1))

    # With one layer kind every stage holds the same stack: its sums (and everything below that
    # does not involve the embedding or head) are computed for the first stage only.
    same_stack = len(kinds) == 1 and parallel.stage_layers is None and not mtp
    out = []
    for i, stage in enumerate(stages):
        if i == 0 or not same_stack:
            counts = stage_kind_counts(model, pp, vp, stage, parallel.stage_layers)
            run = with_mtp(model, counts, stage == pp - 1, mtp)
            lw, stack_other, ew, eo, largest, per_mb, peak_layer = _stack_terms(
                run, layers, stored, working
            )
            if held != mtp:  # the parameters of one depth, the activations of every one
                params = with_mtp(model, counts, stage == pp - 1, held)
                lw, stack_other, ew, eo, largest, _, _ = _stack_terms(
                    params, layers, stored, working
                )
            if mtp:
                lw = lw + (stage == pp - 1) * mtp_linear
            lw_bytes = lw * w_lin
            experts = ew + eo
            expert_weights = (ew * w_exp + eo * w_other) / weights_div[1]
            expert_grads = experts / expert_grads_div
            expert_states = experts / states_div[1]
            cache = (lw + ew) * cache_b
            gather = 2 * largest * w_lin * shard_weights
        first, last = stage == 0, stage == pp - 1
        # No head rows on a last stage that is also the first and holds the tied embedding.
        head_params = untied_head_params - (tied & first) * head_rows_params
        other = stack_other + first * embedding_params + last * (head_params + mtp_other)
        dense = lw + other
        if fsdp_pp is not False:  # the stage's weights stay gathered all step
            gather = where(fsdp_pp, lw * w_lin + other * w_other, gather)
        total = dense + experts
        weights = (lw_bytes + other * w_other) / weights_div[0] + expert_weights
        if lora is None:
            trainable = total
            if in_backward:
                # Each parameter is stepped, and its gradient freed, as soon as the backward
                # has it: one linear's gradient at a time, and a tied embedding's, whose head
                # gradient waits from the loss's backward for the embedding's.
                held = tied * head_rows_params
                one = maximum(largest_linear(model, tp, ep, etp), (1 - tied) * head_rows_params)
                grads = (held + one) / grads_div[0] * grad_b
            else:
                grads = (dense / dense_grads_div + expert_grads) * grad_b
            opt_params = dense / states_div[0] + expert_states
            states = opt_params * state_b
        else:  # frozen base: gradients, master weights and states of the adapters only
            trainable = 0
            for n, per_layer in zip(counts, adapter_layers, strict=True):
                trainable = trainable + n * per_layer
            total = total + trainable
            weights = weights + trainable * lora.weight_bytes / weights_div[0]
            grads = trainable / adapter_grads_div * grad_b
            opt_params = trainable / states_div[0]
            states = opt_params * lora.state_bytes
        master = opt_params * master_b
        microbatch_acts = per_mb + first * embed + last * mtp_acts
        flight = in_flight_microbatches(pp, vp, stage, microbatches)
        acts = flight * microbatch_acts + peak_layer
        host_opt = host_weights = host_acts = 0.0
        if offload.any:
            if offload.optimizer:
                host_opt, master, states = master + states, 0.0, 0.0
                # DeepSpeed ZeRO-Offload and FSDP's CPU offload keep the gradient shard on the
                # host too (the optimizer step reads it there); Megatron's distributed
                # optimizer keeps its gradient buffer on the GPU.
                moved = grads * shard_grads
                host_opt, grads = host_opt + moved, grads - moved
            if offload.params:
                host_weights, weights = weights, 0.0  # the gather buffers hold what is in use
            if offload.activations:
                stack = maximum(sum(counts), 1)
                if offload.activation_layers is None:  # the layer in use and the next one
                    on_gpu = peak_layer + 2 * per_mb / stack
                    host_acts = maximum(acts - on_gpu, 0.0)
                else:  # the first N layers (Megatron-Core's layer-wise offload; pp 1)
                    kept = maximum(stack - offload.activation_layers, 2)
                    host_acts = maximum(per_mb * (1 - kept / stack), 0.0)
                acts = acts - host_acts
        logits = last * head * (1 + mtp)
        # The last stage's first backward runs the loss backward, frees its buffers, then
        # recomputes the first layer: the two come one after the other, so what is allocated
        # holds the larger, not both. The freed loss blocks stay reserved by the caching
        # allocator (counted with fragmentation below, not as allocated).
        working_layer = peak_layer
        reused = minimum(peak_layer, logits)
        if working is not None:
            acts, working_layer = acts - reused, peak_layer - reused
        cached = reused
        if per_step_grads is not False:
            # Gradients freed between steps (PyTorch's zero_grad(set_to_none=True)) come back
            # as the backward frees the activations: with one micro-batch a step and no
            # pipeline the peak holds the larger of the first backward's activations and the
            # last one's gradients; the term is what the gradients add beyond them. They are
            # served from the blocks the backward has reserved, the cached loss blocks first.
            first_backward = acts + logits
            cached = where(
                per_step_grads,
                maximum(minimum(reused, first_backward + reused - grads), 0.0),
                reused,
            )
            grads = where(per_step_grads, maximum(grads - first_backward, 0.0), grads)
        allocated = weights + cache + grads + master + states + acts + logits + gather + dequant
        fragmentation = allocated * FRAGMENTATION_FRACTION + cached
        out.append(
            _stage(
                (
                    weights,
                    cache,
                    grads,
                    master,
                    states,
                    acts,
                    logits,
                    gather,
                    dequant,
                    CUDA_CONTEXT_BYTES,
                    comm,
                    fragmentation,
                    allocated + fragmentation + CUDA_CONTEXT_BYTES + comm,
                    total,
                    trainable,
                    experts,
                    flight,
                    microbatch_acts,
                    working_layer,
                    reused,
                    host_opt,
                    host_weights,
                    host_acts,
                )
            )
        )
    return out


def _stack_terms(
    counts: Sequence[Num],
    layers: Sequence[tuple[Num, Num, Num, Num, Num]],
    stored: Sequence[Num],
    working: Sequence[Num] | None,
) -> tuple[Num, Num, Num, Num, Num, Num, Num]:
    """The decoder layers a stage holds (``counts`` of each kind), summed: linear weights, other
    parameters, expert weights, expert other, the largest layer's parameters (the ZeRO-3 gather
    unit), activation bytes per micro-batch, and the recomputed layer's full activations."""
    lw = other = ew = eo = largest = per_mb = peak_layer = 0
    for k, n in enumerate(counts):
        lw_k, other_k, ew_k, eo_k, total_k = layers[k]
        lw, other = lw + n * lw_k, other + n * other_k
        ew, eo = ew + n * ew_k, eo + n * eo_k
        per_mb = per_mb + n * stored[k]
        present = n > 0
        if type(present) is bool:  # a kind is on the stage, or not (one layout, or one split)
            if present:
                largest = maximum(largest, total_k)
                if working is not None:
                    peak_layer = maximum(peak_layer, working[k])
            continue
        largest = maximum(largest, where(present, total_k, 0))
        if working is not None:
            peak_layer = maximum(peak_layer, where(present, working[k], 0))
    return lw, other, ew, eo, largest, per_mb, peak_layer


def candidate_stages(
    model: ModelSpec, pp: Num, stage_layers: tuple[int, ...] | None = None
) -> tuple[Num, ...]:
    """Stages that can be the most loaded. With one layer kind split evenly, stage 0 dominates
    every middle stage (same layers, most micro-batches in flight) and only the last differs
    (head, logits); mixed stacks (dense-first MoE, alternating kinds) and uneven splits are
    checked stage by stage. For an array of ``pp`` values, stage ``s`` of a layout with fewer
    stages is its last one."""
    if stage_layers is not None:
        return tuple(range(int(pp)))
    if type(pp) is int:
        if len(model.kinds) == 1:
            return (0, pp - 1) if pp > 1 else (0,)
        return tuple(range(pp))
    if len(model.kinds) == 1:
        return (0, pp - 1)
    return tuple(minimum(s, pp - 1) for s in range(int(pp.max())))


def check_seq_len(model: ModelSpec, seq_len: int, field: str = "seq_len") -> None:
    """A sequence length must be >= 1 and within the model's position embeddings."""
    if seq_len < 1:
        raise SpecError(field, "must be >= 1", seq_len)
    if model.max_seq_len is not None and seq_len > model.max_seq_len:
        raise SpecError(
            field, f"exceeds the model's max_position_embeddings={model.max_seq_len}", seq_len
        )


def _check_moe_load(model: ModelSpec, setup: TrainingSetup) -> None:
    if setup.moe_imbalance < 1 or setup.moe_imbalance > 64:
        raise SpecError("moe_imbalance", "must be between 1 (balanced) and 64", setup.moe_imbalance)
    cap = setup.moe_capacity_factor
    if cap is not None and not 0 < cap <= 64:
        raise SpecError("moe_capacity_factor", "must be > 0 and <= 64", cap)
    if model.moe is None and setup.moe_imbalance != 1:
        raise SpecError("moe_imbalance", "applies to mixture-of-experts models", model.id)
    if model.moe is None and cap is not None:
        raise SpecError("moe_capacity_factor", "applies to mixture-of-experts models", model.id)


RECOMPUTE_POLICIES: tuple[Recompute, ...] = get_args(Recompute)
_QUOTED = [f"'{r}'" for r in RECOMPUTE_POLICIES]
RECOMPUTE_RULE = f"must be {', '.join(_QUOTED[:-1])} or {_QUOTED[-1]}"


def check_op_policy(model: ModelSpec, finetune: FineTune, flash_attention: bool) -> None:
    """The per-op policy (recompute ``op``) is modelled on dense Llama-style layers whose linears
    are plain ``nn.Linear`` calls with flash attention, as TorchTitan runs it: the ``mm`` count
    it alternates on changes with experts' grouped GEMMs, MLA, recurrent mixers and the extra
    GEMMs of LoRA adapters."""
    if model.model_type not in HF_CONVENTION_FAMILIES or model.moe is not None:
        raise SpecError(
            "recompute",
            "the per-op policy ('op', TorchTitan's selective_ac_option='op') is modelled for "
            f"dense {', '.join(HF_CONVENTION_FAMILIES)} models; use 'selective' or 'full'",
            model.model_type,
        )
    if finetune.frozen:
        raise SpecError(
            "recompute",
            "the per-op policy is not modelled with LoRA / QLoRA adapters (their GEMMs shift "
            "which outputs it saves); use 'full'",
            finetune.method,
        )
    if not flash_attention:
        raise SpecError(
            "recompute",
            "the per-op policy saves the flash / memory-efficient attention kernels' outputs: "
            "it needs flash_attention",
            flash_attention,
        )


def _check_optimizer_in_backward(p: Parallelism, setup: TrainingSetup) -> None:
    """torchtune's optimizer_in_bwd steps each parameter from a gradient hook: its recipes
    refuse gradient accumulation with it (each micro-batch's backward would step), and a
    pipeline's stages run several backwards a step; an offloaded optimizer steps on the CPU
    after the backward, and adapters' gradients are small already."""
    rule = ""
    if setup.finetune.frozen:
        rule = "applies to full training (an adapter's gradients are small already)"
    elif setup.offload.optimizer:
        rule = "cannot combine with optimizer offload (the CPU steps after the backward)"
    elif p.pp > 1:
        rule = "needs pp = 1 (a pipeline stage runs several backwards a step)"
    else:
        gbs = setup.global_batch_size
        if gbs is not None and gbs != setup.micro_batch_size * p.dp:
            rule = (
                "needs one micro-batch a step, global_batch_size = micro_batch_size x dp ="
                f" {setup.micro_batch_size * p.dp} (no gradient accumulation)"
            )
    if rule:
        raise SpecError("optimizer_in_backward", rule, True)


def check_recompute_modules(
    model: ModelSpec,
    names: tuple[str, ...],
    recompute: str = "selective",
    convention: str = "megatron",
) -> None:
    """Megatron-Core's selective recompute modules, refused where Megatron-Core refuses them
    (TransformerConfig: an unknown name; ``mla_up_proj`` without multi-latent attention;
    ``moe_act`` without grouped MoE experts) and where they would recompute nothing in this
    model (a name the planner takes for what it says, not silently for nothing), under the
    ``recompute`` policy and activation ``convention`` they come with."""
    rule = ""
    unknown = sorted(set(names) - set(RECOMPUTE_MODULES))
    kinds = model.kinds
    moe = any(is_moe(k) for k in kinds)
    absent = {
        "mla_up_proj": not any(is_mla(k) for k in kinds),
        "moe_act": not moe,
        "moe": not moe,
        "shared_experts": not any(
            m.component == "shared_experts" for k in kinds for m in k.linears
        ),
        "mlp": not any(m.component == "mlp" for k in kinds if not is_moe(k) for m in k.linears),
        "layernorm": not moe and not any(is_mla(k) for k in kinds),
        "core_attn": not any(k.attention is not None for k in kinds),
    }
    missing = [n for n in names if absent.get(n, False)]
    if recompute != "selective":
        rule = "needs recompute 'selective' (Megatron-Core's --recompute-granularity selective)"
    elif convention != "megatron":
        rule = "are Megatron-Core's modules: the 'megatron' activation convention"
    elif unknown:
        rule = f"must be among {', '.join(RECOMPUTE_MODULES)} (not {', '.join(unknown)})"
    elif missing:
        rule = (
            f"{', '.join(missing)}: nothing of that in {model.id} (layernorm recomputes the norms"
            " that are modules of their own, the MoE layers' pre-MLP norm and MLA's input norm;"
            " Transformer Engine fuses the others into the next linear)"
        )
    if rule:
        raise SpecError("recompute_modules", rule, list(names))


MAX_MTP_LAYERS = 8


def check_mtp(setup: TrainingSetup) -> None:
    """Multi-token prediction as Megatron-Core trains it: a whole number of depths, each built
    from the model's own layers, in pre-training or full fine-tuning with its fused loss."""
    n = setup.mtp_layers
    if type(n) is not int or not 0 <= n <= MAX_MTP_LAYERS:
        raise SpecError("mtp_layers", f"must be a whole number from 0 to {MAX_MTP_LAYERS}", n)
    if setup.mtp_repeated and not n:
        raise SpecError(
            "mtp_repeated", "repeats a multi-token-prediction module: set mtp_layers >= 1", True
        )
    if setup.activation_convention in HF_STYLE:
        raise SpecError(
            "mtp_layers",
            "multi-token prediction is trained by Megatron-Core (transformers builds no MTP"
            " module): use activation_convention 'megatron'",
            n,
        )
    if setup.finetune.frozen:
        raise SpecError(
            "mtp_layers",
            "multi-token prediction is trained with the whole model (pre-training or full"
            " fine-tuning), not with a frozen base",
            n,
        )


def validate_training(model: ModelSpec, p: Parallelism, setup: TrainingSetup) -> None:
    validate_layout(model, p, training=True)
    check_seq_len(model, setup.seq_len)
    if setup.micro_batch_size < 1:
        raise SpecError("micro_batch_size", "must be >= 1", setup.micro_batch_size)
    if setup.recompute not in RECOMPUTE_POLICIES:
        raise SpecError("recompute", RECOMPUTE_RULE, setup.recompute)
    convention = setup.activation_convention
    if convention not in ("megatron", *HF_STYLE):
        raise SpecError(
            "activation_convention", "must be 'megatron', 'hf' or 'compiled'", convention
        )
    if convention in HF_STYLE and model.model_type not in HF_CONVENTION_FAMILIES:
        raise SpecError(
            "activation_convention",
            f"the '{convention}' convention is modelled for "
            f"{', '.join(HF_CONVENTION_FAMILIES)}; use 'megatron'",
            model.model_type,
        )
    if setup.recompute == "op":
        check_op_policy(model, setup.finetune, setup.flash_attention)
    if setup.recompute_modules:
        check_recompute_modules(
            model, setup.recompute_modules, setup.recompute, setup.activation_convention
        )
    if convention not in HF_STYLE and (setup.chunked_loss or setup.compiled_loss):
        name = "chunked_loss" if setup.chunked_loss else "compiled_loss"
        raise SpecError(
            name,
            "applies to the eager PyTorch losses of the 'hf' and 'compiled' activation "
            "conventions (Megatron's vocabulary-parallel loss is fused)",
            getattr(setup, name),
        )
    if setup.optimizer not in OPTIMIZERS:
        raise SpecError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}", setup.optimizer)
    if setup.mtp_layers or setup.mtp_repeated:
        check_mtp(setup)
    if setup.moe_imbalance != 1.0 or setup.moe_capacity_factor is not None:
        _check_moe_load(model, setup)
    if setup.offload.params and p.zero_stage != 3:
        raise SpecError(
            "offload_params",
            "parameter offload needs ZeRO-3 / FSDP (layout.zero_stage=3), as DeepSpeed and FSDP"
            " offload only sharded parameters",
            p.zero_stage,
        )
    if setup.offload.activation_layers is not None:
        _check_layer_offload(model, p, setup)
    if setup.optimizer_in_backward:
        _check_optimizer_in_backward(p, setup)
    if setup.no_sync_accumulation and (setup.offload.optimizer or setup.offload.params):
        raise SpecError(
            "no_sync_accumulation",
            "not modelled with CPU offload (FSDP keeps the unsharded gradients on the GPU inside"
            " no_sync and offloads them only after the sync)",
            True,
        )
    gbs = setup.global_batch_size
    if gbs is not None and (gbs < 1 or gbs % (setup.micro_batch_size * p.dp)):
        raise SpecError(
            "global_batch_size",
            f"must be a positive multiple of micro_batch_size"
            f" x dp = {setup.micro_batch_size * p.dp}",
            gbs,
        )
    if p.cp > 1 and setup.seq_len % (2 * p.cp):
        raise SpecError(
            "layout.cp",
            f"2*cp={2 * p.cp} must divide seq_len={setup.seq_len} "
            "(load-balanced context parallelism)",
            p.cp,
        )
    if p.cp > 1 and not setup.flash_attention:
        raise SpecError(
            "layout.cp",
            "context parallelism needs flash attention (ring "
            "attention exchanges K/V blocks, not score matrices)",
            p.cp,
        )


def _check_layer_offload(model: ModelSpec, p: Parallelism, setup: TrainingSetup) -> None:
    """Megatron-Core's layer-wise activation offloading, refused where Megatron-Core refuses
    it (TransformerConfig: fewer layers than the model has, no pipeline parallelism, no
    activation recomputation) and without activation offload."""
    n = setup.offload.activation_layers
    field = "offload_activation_layers"
    if not setup.offload.activations:
        raise SpecError(field, "offloads activations: set offload_activations too", n)
    if n is None or not 1 <= n < model.num_layers:
        raise SpecError(
            field,
            f"must be at least 1 and below the model's {model.num_layers} layers (Megatron-Core"
            " offloads fewer layers than the model has)",
            n,
        )
    if p.pp > 1:
        raise SpecError(
            field,
            "Megatron-Core's layer-wise CPU offloading does not run with pipeline parallelism"
            " (offload every layer's activations instead: leave this unset)",
            p.pp,
        )
    if setup.recompute != "none":
        raise SpecError(
            field,
            "Megatron-Core's layer-wise CPU offloading does not run with activation"
            " recomputation (recompute: none)",
            setup.recompute,
        )


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
    values, stage = _most_loaded(model, parallel, setup, precision, any_layout)
    terms = values._asdict()
    terms["stage"] = stage
    return terms


def _most_loaded(
    model: ModelSpec,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    any_layout: bool = False,
) -> tuple[StageTerms, Num]:
    """The most-loaded stage's ``_stage_values`` and its index."""
    stages = candidate_stages(model, parallel.pp, parallel.stage_layers)
    microbatches = setup.microbatches(parallel.dp)
    per_stage = _stage_values(model, precision, parallel, setup, stages, microbatches, any_layout)
    best, best_stage = per_stage[0], stages[0]
    for stage, values in zip(stages[1:], per_stage[1:], strict=True):
        more = values.total_bytes > best.total_bytes
        if type(more) is bool:  # one layout: take the whole stage or keep the best
            if more:
                best, best_stage = values, stage
            continue
        best = _stage(tuple(where(more, v, b) for v, b in zip(values, best, strict=True)))
        best_stage = where(more, stage, best_stage)
    return best, best_stage


def training_memory(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
) -> TrainingMemory:
    """Per-GPU memory of a training step on the most-loaded GPU, with its breakdown."""
    validate_training(model, parallel, setup)
    best, stage = _most_loaded(model, parallel, setup, precision, accelerator.fp8_any_layout)
    host = host_of(accelerator.id, setup.offload) if setup.offload.any else None
    values = {  # the TrainingMemory fields (a literal: a third of a comprehension's cost)
        "weights_bytes": float(best.weights_bytes),
        "weight_cache_bytes": float(best.weight_cache_bytes),
        "gradients_bytes": float(best.gradients_bytes),
        "master_weights_bytes": float(best.master_weights_bytes),
        "optimizer_states_bytes": float(best.optimizer_states_bytes),
        "activations_bytes": float(best.activations_bytes),
        "logits_bytes": float(best.logits_bytes),
        "zero3_gather_bytes": float(best.zero3_gather_bytes),
        "dequant_buffer_bytes": float(best.dequant_buffer_bytes),
        "cuda_context_bytes": float(best.cuda_context_bytes),
        "comm_buffers_bytes": float(best.comm_buffers_bytes),
        "fragmentation_bytes": float(best.fragmentation_bytes),
        "capacity_bytes": float(accelerator.memory_bytes),
        "stage": stage,
        "params_on_gpu": float(best.params_on_gpu),
        "trainable_params_on_gpu": float(best.trainable_params_on_gpu),
        "in_flight_microbatches": int(ceil_div(best.in_flight * 1000, 1000)),
        "expert_params_on_gpu": float(best.expert_params_on_gpu),
        "host_optimizer_bytes": 0.0,
        "host_weights_bytes": 0.0,
        "host_activations_bytes": 0.0,
        "host_capacity_bytes": 0.0,
        "notes": _training_notes(model, parallel, setup, stage),
    }
    if best.loss_cache_bytes > 0:
        values["notes"] += (
            f"The first backward frees the loss's {float(best.logits_bytes) / GIB:,.2f} GiB before "
            "it recomputes a layer: allocated memory peaks at the larger of the two, not their "
            f"sum; the {float(best.loss_cache_bytes) / GIB:,.2f} GiB of freed loss blocks the "
            "recomputed layer reuses stay reserved by the caching allocator (in fragmentation).",
        )
    if host is not None:  # what CPU offload keeps on the host, and the host's share
        values["host_optimizer_bytes"] = float(best.host_optimizer_bytes)
        values["host_weights_bytes"] = float(best.host_weights_bytes)
        values["host_activations_bytes"] = float(best.host_activations_bytes)
        values["host_capacity_bytes"] = host.memory_bytes
        values["notes"] += _host_notes(best, host)
    return from_fields(TrainingMemory, values)


_OVERHEAD_NOTE = (
    "Overheads are planning defaults, not measurements: CUDA context "
    f"{CUDA_CONTEXT_BYTES / GIB:.2f} GiB, NCCL buffers "
    f"{NCCL_BUFFER_BYTES_PER_GROUP / GIB:.2f} GiB per parallel group, allocator "
    f"fragmentation {FRAGMENTATION_FRACTION:.0%} of allocated memory."
)


def _host_notes(best: StageTerms, host: Host) -> tuple[str, ...]:
    need = float(sum(getattr(best, k) for k in HOST_TERMS))
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
