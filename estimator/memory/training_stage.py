"""What one pipeline stage of a training layout holds: the shared records the memory terms
(``training_terms``) are computed from.

``Layout`` is what every stage of one layout shares (bytes per parameter, the ranks ZeRO divides
each term over, what is offloaded, the layers' placements and saved activations, the embedding,
head and multi-token-prediction parts); ``Stage`` what one stage holds (its parameters by kind,
one micro-batch's activations, the micro-batches in flight, the recomputed layer, the logits
buffer). Both are built for one layout or for arrays of layouts alike: ``parallel``'s sizes and
``setup.micro_batch_size`` may be numpy arrays (the sweep), and the arithmetic here runs on both.

Pipeline rank ``r`` keeps the micro-batches in flight under 1F1B (``pp - r``) or interleaved 1F1B
(Megatron's warm-up count ``2 (pp - r - 1) + (vp - 1) pp + 1`` chunks), never more than the step
has. The first stage adds the embedding's parameters and inputs, the last the output head and
the logits buffer (and the multi-token-prediction modules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from estimator.finetune import FULL, dequant_buffer_elems
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.parallel import Parallelism
from estimator.layout.sharding import (
    largest_linear,
    padded_vocab,
    place_layer,
    stage_kind_counts,
    with_mtp,
)
from estimator.memory.activation_bytes import (
    embedding_activation_bytes,
    head_activation_bytes,
    hf_checkpoint_shared_bytes,
    layer_regions,
    loss_backward_bytes,
    recomputed_layer_input_bytes,
    region_scales,
    saved_bytes,
)
from estimator.memory.activations import DEFAULT_RECOMPUTE_MODULES, HF_STYLE
from estimator.memory.training_tables import (
    AdapterTables,
    BytesPerParam,
    MemoryTables,
    memory_tables,
)
from estimator.memory.training_tables import placed_layers as _placed_layers
from estimator.offload import Offload
from estimator.records import from_fields
from estimator.xp import Num, maximum, minimum, numpy, where

if TYPE_CHECKING:
    from estimator.memory.training import TrainingSetup

__all__ = [
    "Layout",
    "Stack",
    "Stage",
    "candidate_stages",
    "in_flight_microbatches",
    "layout_of",
    "stages_of",
]


@dataclass(frozen=True)
class Layout:
    """What every stage of one layout (or of arrays of layouts) shares. The ``*_div`` fields are
    the ranks a term is divided over: ZeRO stage z shards a term over the data-parallel ranks
    (dense parameters over dp * cp, experts over the expert data-parallel ranks) and divides by
    1 below z. (Built with ``records.from_fields``: no ``__slots__``.)"""

    model: ModelSpec
    pp: Num
    vp: Num
    stage_layers: tuple[int, ...] | None
    microbatches: Num
    bytes_per_param: BytesPerParam
    adapters: AdapterTables | None  # None: full training
    offload: Offload
    state_bytes: float  # optimizer-state bytes per parameter stepped (the adapters' for LoRA)
    shard_weights: Num  # ZeRO-3 / FSDP (a bool, or an array of them)
    shard_grads: Num  # ZeRO >= 2
    fsdp_pp: Num  # FSDP under a pipeline: the stage's weights stay gathered (False: never)
    in_backward: bool  # the optimizer steps each parameter from its gradient hook
    per_step_grads: Num  # gradients freed between steps (False: never)
    recomputing: bool  # full or per-op recompute: a layer's full activations while recomputed
    dense_weights_div: Num
    expert_weights_div: Num
    grads_div: Num  # the dense gradients' ZeRO divisor (before FSDP + PP and no_sync)
    dense_grads_div: Num
    expert_grads_div: Num
    adapter_grads_div: Num
    dense_states_div: Num
    expert_states_div: Num
    parallel_groups: Num  # the parallel groups of size > 1 the GPU belongs to
    dequant_elems: Num  # the largest NF4 weight, in elements (QLoRA; 0 otherwise)
    tied: bool  # the output head is the input embedding
    head_rows_params: Num  # the output head's (or embedding's) vocabulary rows on a TP rank
    largest_linear_params: Num  # a GPU's largest linear (optimizer in backward; 0 otherwise)
    # What stage_kind_counts' layers hold, per layer kind
    layers: Sequence[tuple[Num, Num, Num, Num, Num]]  # place_layer's parameters
    stored_bytes: Sequence[Num]  # saved activations of one micro-batch
    working_bytes: Sequence[Num] | None  # a recomputed layer's full activations
    adapter_params: Sequence[Num] | None  # LoRA adapters' parameters (None: full training)
    same_stack: bool  # every stage holds the same layer stack
    # The embedding (first stage), the head and multi-token prediction (last stage)
    embedding_params: Num
    untied_head_params: Num
    mtp_layers: int
    mtp_weights: int  # the MTP depths whose parameters are held
    mtp_linear_params: Num
    mtp_other_params: Num
    embedding_activation_bytes: Num
    mtp_activation_bytes: Num
    head_activation_bytes: Num  # one micro-batch's logits and loss buffers


@dataclass(frozen=True)
class Stack:
    """The decoder layers a stage holds (``counts`` of each kind), summed, and what of the terms
    they alone decide: computed once for every stage holding the same stack. Parameters per GPU
    as TP / EP place them, before ZeRO shards them; the dense linear weights in their format
    and the routed experts' weights as ZeRO-3 shards them (the weights term adds them to the
    stage's other parameters); the experts whose gradients and optimizer states the GPU keeps,
    as ZeRO shards them. (Built with ``records.from_fields``: no ``__slots__``.)"""

    counts: Sequence[Num]
    linear_params: Num  # dense linear weights (and the MTP projections)
    other_params: Num  # the layers' norms and biases
    expert_linear_params: Num
    expert_other_params: Num
    expert_params: Num
    largest_layer_params: Num  # the ZeRO-3 gather unit
    microbatch_bytes: Num  # the layers' saved activations of one micro-batch
    recomputed_layer_bytes: Num  # a recomputed layer's full activations (0: no recompute)
    linear_weight_bytes: Num
    expert_weight_bytes: Num
    expert_gradient_params: Num
    expert_state_params: Num


@dataclass(frozen=True)
class Stage:
    """What one pipeline stage holds, the quantities several memory terms share: its layer
    ``stack``, its other parameters (the stack's, the embedding's on the first stage, the head's
    and MTP's on the last), the parameters the GPU trains and keeps optimizer state of, one
    micro-batch's saved activations, the micro-batches in flight, the logits buffer and what of
    it the recomputed layer reuses, and what activation offload keeps on the host. (Built with
    ``records.from_fields``.)"""

    layout: Layout
    stack: Stack
    other_params: Num  # norms, biases, embedding, head, MTP norms
    dense_params: Num
    params: Num  # all of them, adapters included
    trainable_params: Num
    optimizer_params: Num  # those whose master weights and states the GPU holds
    microbatch_activations_bytes: Num
    in_flight: Num
    logits_bytes: Num  # the head's logits and loss buffers (last stage, every MTP depth)
    loss_reuse_bytes: Num  # freed loss blocks the recomputed layer is served from
    host_activations_bytes: Num  # saved activations activation offload moves to the host


def in_flight_microbatches(pp: Num, vp: Num, stage: Num, microbatches: Num) -> Num:
    """Micro-batches of activations a pipeline rank holds at its peak, in units of the rank's
    full layer set: 1F1B keeps ``pp - r``; interleaved 1F1B keeps
    ``2 (pp - r - 1) + (vp - 1) pp + 1``
    chunks of ``1/vp`` of the rank's layers (Megatron-LM ``schedules.py`` warm-up counts)."""
    ahead = pp - stage
    if type(ahead) is int and type(microbatches) is int and type(vp) is int and vp == 1:
        return ahead if ahead <= microbatches else microbatches  # one layout without chunks
    plain = minimum(ahead, microbatches)
    chunks = minimum(2 * (ahead - 1) + (vp - 1) * pp + 1, microbatches * vp)
    return where(vp > 1, chunks / vp, plain)


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
    return tuple(minimum(s, pp - 1) for s in range(int(numpy().max(pp))))


def layout_of(
    model: ModelSpec,
    precision: Precision,
    parallel: Parallelism,
    setup: TrainingSetup,
    microbatches: Num,
    any_layout: bool = False,
) -> Layout:
    """The ``Layout`` of one layout (or of arrays of layouts) for a setup: what does not depend
    on the stage is computed here once. ``any_layout``: the GPU runs fp8 GEMMs in every layout
    (``Accelerator.fp8_any_layout``), so a per-tensor fp8 weight keeps no transposed copy. One
    dict of its fields, which ``_zero_sharding``, ``_layer_activations`` and ``_ends`` fill in
    turn (``records.from_fields``)."""
    tp, pp, dp, cp, ep = parallel.tp, parallel.pp, parallel.dp, parallel.cp, parallel.ep
    etp = tp if parallel.etp is None else parallel.etp
    ft, modules = setup.finetune, setup.selective_modules
    tables = memory_tables(
        model,
        precision,
        setup.optimizer,
        setup.flash_attention,
        setup.activation_convention,
        None if ft is FULL else ft,
        () if modules == DEFAULT_RECOMPUTE_MODULES else modules,
        any_layout,
    )
    lora, bytes_per_param = tables.adapters, tables.bytes_per_param
    in_backward = setup.optimizer_in_backward
    fields: dict[str, Any] = {
        "model": model,
        "pp": pp,
        "vp": parallel.vp,
        "stage_layers": parallel.stage_layers,
        "microbatches": microbatches,
        "bytes_per_param": bytes_per_param,
        "adapters": lora,
        "offload": setup.offload,
        "state_bytes": bytes_per_param.optimizer_states if lora is None else lora.state_bytes,
        "in_backward": in_backward,
        # int + bool counts for one layout and for arrays (where bool + bool would be "or")
        "parallel_groups": 1 * (tp > 1) + (pp > 1) + (dp > 1) + (cp > 1) + (ep > 1),
        "dequant_elems": (
            dequant_buffer_elems(model, tp) if lora is not None and lora.quantized else 0
        ),
        "largest_linear_params": largest_linear(model, tp, ep, etp) if in_backward else 0,
        "layers": _layers(model, tables, tp, ep, etp),
        "adapter_params": (
            None if lora is None else [place_layer(a, tp, ep, etp)[4] for a in lora.placements]
        ),
        "same_stack": (
            len(model.kinds) == 1 and parallel.stage_layers is None and not setup.mtp_layers
        ),
    }
    sp_on = parallel.sequence_parallel & (tp > 1)  # bools, or arrays of them
    tokens = setup.seq_len * setup.micro_batch_size / cp
    _zero_sharding(fields, parallel, setup, microbatches)
    _layer_activations(fields, model, precision, parallel, setup, tables, tokens, sp_on)
    _ends(fields, model, precision, parallel, setup, tables.embedding_extras, tokens, sp_on)
    return from_fields(Layout, fields)


def _layers(
    model: ModelSpec, tables: MemoryTables, tp: Num, ep: Num, etp: Num
) -> Sequence[tuple[Num, Num, Num, Num, Num]]:
    """``place_layer`` of each layer kind: once per model for one layout's sizes, each time for
    arrays of them."""
    if type(tp) is int and type(ep) is int and type(etp) is int:  # one layout: per model
        return _placed_layers(model, tp, ep, etp)
    placed = []  # a loop, not a comprehension: no extra frame for a list of one or two kinds
    for placement in tables.placements:
        placed.append(place_layer(placement, tp, ep, etp))
    return placed


def _zero_sharding(
    fields: dict[str, Any], parallel: Parallelism, setup: TrainingSetup, microbatches: Num
) -> None:
    """``Layout``'s ZeRO fields, into ``fields``: which terms are sharded and the ranks each is
    divided over. ZeRO stage 1 (and Megatron's distributed optimizer,
    ``Parallelism.optimizer_shard_stage``) shards master weights and optimizer states, stage 2
    also the gradients, stage 3 (FSDP FULL_SHARD) also the weights: ``1 + on * (ranks - 1)``
    works alike for one layout (bools) and for arrays, and x / 1 is exactly x."""
    tp, pp, dp, cp = parallel.tp, parallel.pp, parallel.dp, parallel.cp
    etp = tp if parallel.etp is None else parallel.etp
    zero_stage = parallel.zero_stage
    dense_shards = dp * cp
    expert_shards = tp * cp * dp // (parallel.ep * etp)
    shard_weights, shard_grads = zero_stage >= 3, zero_stage >= 2
    # FSDP2 under a pipeline (TorchTitan; DeepSpeed refuses ZeRO-2/3 with pipelines): the stage's
    # blocks are not resharded after forward (torchtitan parallelize_llama.py: "For PP, do not
    # reshard after forward to avoid per-microbatch all-gathers") and their gradients are reduced
    # only after the last micro-batch's backward (torch.distributed.pipelining PipelineStage:
    # set_requires_gradient_sync(False) before), accumulated unsharded in the reduce dtype
    # (FSDPParam.to_accumulated_grad_if_needed): the whole stage's weights stay gathered and
    # its gradients unsharded.
    fsdp_pp = shard_weights & (pp > 1)
    shard_states = (zero_stage >= 1) | parallel.distributed_optimizer
    dense_others, expert_others = dense_shards - 1, expert_shards - 1  # the ranks but this one
    grads_div = 1 + shard_grads * dense_others
    dense_grads_div: Num = grads_div if fsdp_pp is False else where(fsdp_pp, 1, grads_div)
    # Gradient accumulation without the reduction (FSDP1's no_sync, FSDP2's
    # set_requires_gradient_sync(False)): the gradients of every micro-batch but the last stay
    # unsharded ("FSDP will accumulate the full model gradients (instead of gradient shards)
    # until the eventual sync", torch FullyShardedDataParallel.no_sync), so the last backward
    # starts with the stage's whole gradients on each rank.
    unsynced = setup.no_sync_accumulation and shard_grads & (microbatches > 1)
    expert_grads_div: Num = 1 + shard_grads * expert_others
    adapter_grads_div: Num = grads_div
    if unsynced is not False:
        dense_grads_div = where(unsynced, 1, dense_grads_div)
        expert_grads_div = where(unsynced, 1, expert_grads_div)
        adapter_grads_div = where(unsynced, 1, adapter_grads_div)
    fields["shard_weights"] = shard_weights
    fields["shard_grads"] = shard_grads
    fields["fsdp_pp"] = fsdp_pp
    fields["per_step_grads"] = (
        setup.gradients_per_step
        and not setup.optimizer_in_backward
        and (pp == 1) & (microbatches == 1)
    )
    fields["dense_weights_div"] = 1 + shard_weights * dense_others
    fields["expert_weights_div"] = 1 + shard_weights * expert_others
    fields["grads_div"] = grads_div
    fields["dense_grads_div"] = dense_grads_div
    fields["expert_grads_div"] = expert_grads_div
    fields["adapter_grads_div"] = adapter_grads_div
    fields["dense_states_div"] = 1 + shard_states * dense_others
    fields["expert_states_div"] = 1 + shard_states * expert_others


def _layer_activations(
    fields: dict[str, Any],
    model: ModelSpec,
    precision: Precision,
    parallel: Parallelism,
    setup: TrainingSetup,
    tables: MemoryTables,
    tokens: Num,
    sp_on: Num,
) -> None:
    """``Layout``'s per-layer activations (``activations.py``), into ``fields``: each kind's
    saved tensors of one micro-batch and, under full or per-op recompute, the full activations
    of the layer being recomputed. Full recompute keeps each layer's input, and the layer being
    recomputed holds its full activations (the "none" policy's); so does the per-op policy,
    besides what it saves. LoRA adapters' ``A`` outputs are saved with the layer's own tensors
    (recomputed with them)."""
    tp = parallel.tp
    etp = tp if parallel.etp is None else parallel.etp
    recompute, modules = setup.recompute, setup.selective_modules
    policy = "none" if recompute in ("full", "op") else recompute
    if modules and "core_attn" not in modules:  # selective, the score matrices kept
        policy = "none"
    scales = region_scales(
        keys=setup.seq_len,
        tp=tp,
        sp=sp_on,
        etp=etp,
        recompute=policy,
        expert_load=setup.expert_load,
    )
    working: list[Num] | None
    if recompute in ("full", "op"):
        kept = recomputed_layer_input_bytes(model, precision, tokens, tp, sp_on)
        stored = [kept] * len(model.kinds)
        if recompute == "op":  # and the outputs the per-op policy saves
            for k, r in enumerate(layer_regions(model, precision, setup.flash_attention, "op")):
                stored[k] = stored[k] + saved_bytes(r, scales, tokens)
        working = [saved_bytes(r, scales, tokens) for r in tables.regions]
    else:
        stored = []
        for r in tables.regions:
            stored.append(saved_bytes(r, scales, tokens))
        working = None
    lora = tables.adapters
    if lora is not None:
        adapter_acts = [tokens * b for b in lora.saved_per_token]
        if working is None:
            stored = [s + a for s, a in zip(stored, adapter_acts, strict=True)]
        else:
            working = [w + a for w, a in zip(working, adapter_acts, strict=True)]
    fields["stored_bytes"] = stored
    fields["working_bytes"] = working
    fields["recomputing"] = working is not None


def _ends(
    fields: dict[str, Any],
    model: ModelSpec,
    precision: Precision,
    parallel: Parallelism,
    setup: TrainingSetup,
    embedding_extras: tuple[int, int],
    tokens: Num,
    sp_on: Num,
) -> None:
    """``Layout``'s first- and last-stage parts, into ``fields``. Parameters: the input
    embedding on the first stage, the output head on the last unless it is the tied embedding
    already held there (Megatron keeps a second copy of a tied embedding on the last stage when
    pp > 1). Activations: the embedding's output (with the PyTorch-module conventions'
    checkpointed layers, what the checkpoints share), the head's logits and its loss's buffers
    (the eager loss's backward buffers, unless the loss runs in chunks).

    Multi-token prediction on the last stage (``TrainingSetup.mtp_layers``): besides its decoder
    layers (``with_mtp``), each depth's 2h x h projection and three norms (enorm, hnorm, its final
    norm), a second copy of an untied embedding where the first stage holds the first
    (Megatron-Core's LanguageModule keeps one for the MTP stage, as it does for a tied head), the
    normed embedding and hidden state and their concatenation saved for the projection's backward
    (4h a token), and another pass through the head and its loss. A repeated module
    (``mtp_repeated``) holds one depth's parameters, run for every depth."""
    tp, pp = parallel.tp, parallel.pp
    convention, seq_len = setup.activation_convention, setup.seq_len
    vocab_rows = padded_vocab(model, tp) // tp
    if convention in HF_STYLE:
        if setup.recompute in ("full", "op"):
            embed = embedding_activation_bytes(
                model, precision, tokens, tp, sp_on
            ) + hf_checkpoint_shared_bytes(
                model, precision, seq_len, setup.micro_batch_size, setup.flash_attention
            )
        else:
            embed = embedding_activation_bytes(
                model, precision, tokens, tp, sp_on, convention, seq_len
            )
        head_rows = model.vocab_size / tp
        loss = setup.loss_convention
        head = head_activation_bytes(model, precision, tokens, tp, sp_on, head_rows, loss)
        if not setup.chunked_loss:
            head = head + loss_backward_bytes(tokens, head_rows, loss, precision)
    else:
        embed = embedding_activation_bytes(model, precision, tokens, tp, sp_on, convention, seq_len)
        head = head_activation_bytes(model, precision, tokens, tp, sp_on, vocab_rows, convention)
    first_extra, last_extra = embedding_extras
    head_rows_params = vocab_rows * model.embed_dim
    tied = model.tie_embeddings
    mtp, held, h = setup.mtp_layers, setup.mtp_weights, model.hidden_size
    fields["tied"] = tied
    fields["head_rows_params"] = head_rows_params
    fields["embedding_params"] = head_rows_params + first_extra
    fields["untied_head_params"] = head_rows_params + last_extra
    fields["mtp_layers"] = mtp
    fields["mtp_weights"] = held
    fields["mtp_linear_params"] = held * 2 * h * h / tp
    fields["mtp_other_params"] = held * 3 * h + (pp > 1) * (1 - tied) * head_rows_params * (mtp > 0)
    fields["embedding_activation_bytes"] = embed
    fields["mtp_activation_bytes"] = (
        mtp * 4 * h * tokens * DTYPES[precision.activations].bytes / (1 + sp_on * (tp - 1))
    )
    fields["head_activation_bytes"] = head


def stages_of(layout: Layout, stages: Sequence[Num]) -> list[Stage]:
    """The ``Stage`` of each of ``stages``. With one layer kind every stage holds the same
    stack: its sums are computed for the first stage only."""
    out = []
    stack: Stack | None = None
    for stage in stages:
        if stack is None or not layout.same_stack:
            stack = _stack_of(layout, stage)
        out.append(_stage(layout, stage, stack))
    return out


def _stack_of(layout: Layout, stage: Num) -> Stack:
    """A stage's ``Stack``, multi-token prediction's layers on the last stage: the activations
    of every depth, the parameters of those held (``mtp_weights``)."""
    model, pp, mtp, held = layout.model, layout.pp, layout.mtp_layers, layout.mtp_weights
    counts = stage_kind_counts(model, pp, layout.vp, stage, layout.stage_layers)
    last = stage == pp - 1
    run = with_mtp(model, counts, last, mtp)
    lw, other, ew, eo, largest, per_mb, peak_layer = _stack_terms(
        run, layout.layers, layout.stored_bytes, layout.working_bytes
    )
    if held != mtp:  # the parameters of one depth, the activations of every one
        params = with_mtp(model, counts, last, held)
        lw, other, ew, eo, largest, _, _ = _stack_terms(
            params, layout.layers, layout.stored_bytes, layout.working_bytes
        )
    if mtp:
        lw = lw + last * layout.mtp_linear_params
    b = layout.bytes_per_param
    experts = ew + eo
    return from_fields(
        Stack,
        {
            "counts": counts,
            "linear_params": lw,
            "other_params": other,
            "expert_linear_params": ew,
            "expert_other_params": eo,
            "expert_params": experts,
            "largest_layer_params": largest,
            "microbatch_bytes": per_mb,
            "recomputed_layer_bytes": peak_layer,
            "linear_weight_bytes": lw * b.linear_weights,
            "expert_weight_bytes": (ew * b.expert_weights + eo * b.other_weights)
            / layout.expert_weights_div,
            "expert_gradient_params": experts / layout.expert_grads_div,
            "expert_state_params": experts / layout.expert_states_div,
        },
    )


def _stage(layout: Layout, stage: Num, stack: Stack) -> Stage:
    """One stage's ``Stage`` from its layer stack: the embedding's parameters and activations on
    the first stage, the head's (and MTP's) on the last. A frozen base (LoRA, QLoRA) trains, and
    keeps master weights and optimizer states of, its adapters only."""
    first, last = stage == 0, stage == layout.pp - 1
    tied = layout.tied
    # No head rows on a last stage that is also the first and holds the tied embedding.
    head_params = layout.untied_head_params - (tied & first) * layout.head_rows_params
    other = (
        stack.other_params
        + first * layout.embedding_params
        + last * (head_params + layout.mtp_other_params)
    )
    dense = stack.linear_params + other
    params = dense + stack.expert_params
    if layout.adapters is None:
        trainable = params
        held = dense / layout.dense_states_div + stack.expert_state_params
    else:
        trainable = 0
        for n, per_layer in zip(stack.counts, layout.adapter_params or (), strict=True):
            trainable = trainable + n * per_layer
        params = params + trainable
        held = trainable / layout.dense_states_div
    microbatch = (
        stack.microbatch_bytes
        + first * layout.embedding_activation_bytes
        + last * layout.mtp_activation_bytes
    )
    flight = in_flight_microbatches(layout.pp, layout.vp, stage, layout.microbatches)
    logits = last * layout.head_activation_bytes * (1 + layout.mtp_layers)
    host: Num = 0.0
    if layout.offload.activations:
        saved = flight * microbatch + stack.recomputed_layer_bytes
        host = _offloaded_activations(layout.offload, stack, saved)
    return from_fields(
        Stage,
        {
            "layout": layout,
            "stack": stack,
            "other_params": other,
            "dense_params": dense,
            "params": params,
            "trainable_params": trainable,
            "optimizer_params": held,
            "microbatch_activations_bytes": microbatch,
            "in_flight": flight,
            "logits_bytes": logits,
            # The last stage's first backward runs the loss backward, frees its buffers, then
            # recomputes the first layer: the recomputed layer is served from the freed blocks.
            "loss_reuse_bytes": minimum(stack.recomputed_layer_bytes, logits),
            "host_activations_bytes": host,
        },
    )


def _offloaded_activations(offload: Offload, stack: Stack, saved: Num) -> Num:
    """Saved activations activation offload keeps on the host, of the ``saved`` bytes: all but
    the layer in use and the next one (DeepSpeed's and FSDP's activation checkpoint offload), or
    the first ``activation_layers`` layers' (Megatron-Core's layer-wise offload; pp 1)."""
    layers = maximum(sum(stack.counts), 1)
    per_mb = stack.microbatch_bytes
    if offload.activation_layers is None:  # the layer in use and the next one
        on_gpu = stack.recomputed_layer_bytes + 2 * per_mb / layers
        return maximum(saved - on_gpu, 0.0)
    kept = maximum(layers - offload.activation_layers, 2)
    return maximum(per_mb * (1 - kept / layers), 0.0)


def _stack_terms(
    counts: Sequence[Num],
    layers: Sequence[tuple[Num, Num, Num, Num, Num]],
    stored: Sequence[Num],
    working: Sequence[Num] | None,
) -> tuple[Num, Num, Num, Num, Num, Num, Num]:
    """The decoder layers a stage holds (``counts`` of each kind), summed: ``Stack``'s sums
    (linear weights, other parameters, expert weights, expert other, the largest layer's
    parameters, activation bytes per micro-batch, the recomputed layer's full activations)."""
    zero: Num = 0
    lw = other = ew = eo = largest = per_mb = peak_layer = zero
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
