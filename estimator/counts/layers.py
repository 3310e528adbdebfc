"""Per-layer table: every module of each kind of transformer layer, plus the embedding and the
head, with parameter shapes before and after sharding, parameter bytes per GPU, the activations
each layer keeps for backward and the TP communication it triggers; and the totals for the
unsharded model and for the most-loaded GPU. Under LoRA and QLoRA the rows are the frozen base
(QLoRA's linears in NF4) and the unsharded model's gradients and optimizer states are the
adapters'; the adapters themselves are in the GPU totals (``memory``), not in the rows.

Every number comes from the functions the memory estimate uses (``sharding``'s placement rules,
``activations``' saved items, ``comms``' message sizes), so the rows of a layer sum to what the
estimate charges for it (tested). Shapes are ``(out_features, in_features)`` as PyTorch stores
``nn.Linear`` weights; routed experts show ``copies x (out, in)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from estimator.counts.params import count_params
from estimator.finetune import adapters, linear_weight_bytes
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.architecture import LayerKind, Linear
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.parallel import Parallelism
from estimator.layout.sharding import (
    padded_vocab,
    place_layer,
    placements,
    rank_share,
    stage_kind_counts,
    with_mtp,
)
from estimator.memory.activation_bytes import item_bytes, recomputed_layer_input_bytes
from estimator.memory.activations import (
    clamps_experts,
    hf_layer_items,
    layer_items,
    recomputed_items,
)
from estimator.memory.training import (
    TrainingMemory,
    TrainingSetup,
    optimizer_state_bytes_per_param,
    training_memory,
)
from estimator.timing.collectives import tp_message_bytes
from estimator.xp import Num

__all__ = ["LayerTable", "ModuleRow", "layer_table"]


@dataclass(frozen=True)
class ModuleRow:
    name: str
    kind: str  # linear, norm, embedding, head
    split: str  # column, row, replicated, experts, vocab
    shape: tuple[int, ...]
    shard_shape: tuple[int, ...]
    copies: int  # expert copies in the layer (1 for everything else)
    copies_per_gpu: int
    params: int  # whole module, unsharded
    params_per_gpu: float  # after TP / EP: what a GPU computes with (gathered under ZeRO-3)
    bytes_per_gpu: float  # in the weights' storage format
    # What a GPU keeps between uses: under ZeRO-3 / FSDP a 1 / (data-parallel shards) slice of
    # the above (gathered before each use and freed after); otherwise all of it. Filled by
    # ``layer_table`` from the layout.
    resident_params_per_gpu: float = 0.0
    resident_bytes_per_gpu: float = 0.0


@dataclass(frozen=True)
class LayerRows:
    """One kind of layer: its modules, saved activations and TP collectives."""

    kind: str
    layers_in_model: int
    layers_on_gpu: int
    modules: tuple[ModuleRow, ...]
    activations: tuple[tuple[str, float], ...]  # (saved tensor, bytes per micro-batch per GPU)
    # (after, collectives per pass, message bytes, message shape)
    tp_collectives: tuple[tuple[str, str, float, tuple[int, int]], ...]

    @property
    def params_per_gpu(self) -> float:
        return sum(m.params_per_gpu for m in self.modules)

    @property
    def resident_params_per_gpu(self) -> float:
        return sum(m.resident_params_per_gpu for m in self.modules)

    @property
    def activation_bytes(self) -> float:
        return sum(b for _, b in self.activations)


@dataclass(frozen=True)
class LayerTable:
    layers: tuple[LayerRows, ...]
    embedding: ModuleRow
    head: ModuleRow | None
    model_params: int
    model_bytes: dict[str, float]  # unsharded: weights, gradients, master weights, optimizer
    memory: TrainingMemory  # the most-loaded GPU


def weight_shards(p: Parallelism, experts: bool) -> int:
    """The ranks ZeRO-3 / FSDP slices a GPU's weights over at rest (1 below stage 3): dense
    parameters over dp * cp, routed experts over the expert data-parallel ranks, as the memory
    estimate divides them."""
    if p.zero_stage < 3:
        return 1
    if experts:
        return p.tp * p.cp * p.dp // (p.ep * p.expert_tp)
    return p.dp * p.cp


def _resident(row: ModuleRow, p: Parallelism) -> ModuleRow:
    shards = weight_shards(p, row.copies > 1)
    return replace(
        row,
        resident_params_per_gpu=row.params_per_gpu / shards,
        resident_bytes_per_gpu=row.bytes_per_gpu / shards,
    )


def _linear_row(m: Linear, p: Parallelism, w_bytes: float, b_bytes: float) -> ModuleRow:
    """One linear: the shape of what a GPU holds of one copy (display), and its parameters as
    ``sharding.rank_share`` places them (the rule the memory estimate uses)."""
    out, inp = m.out_features, m.in_features
    weights, bias = rank_share(
        m.tp, m.units, m.copies, m.weight_params, m.bias_params, p.tp, p.ep, p.expert_tp
    )
    # What one GPU holds of one copy along the split axis: num/den of it.
    if m.copies > 1:  # routed experts: whole experts over EP, each split over ETP
        split, per_gpu, num, den = "experts", m.copies // p.ep, 1, p.expert_tp
    elif m.tp == "replicated":
        split, per_gpu, num, den = "replicated", 1, 1, 1
    else:  # whole units (heads, KV heads, features) per rank, at least one
        split, per_gpu, num, den = m.tp, 1, max(m.units // p.tp, 1), m.units
    if m.tp == "column":
        shard = (out * num // den, inp)
    elif m.tp == "row":
        shard = (out, inp * num // den)
    else:
        shard = (out, inp)
    return ModuleRow(
        name=m.name,
        kind="linear",
        split=split,
        shape=(out, inp),
        shard_shape=shard,
        copies=m.copies,
        copies_per_gpu=per_gpu,
        params=m.params,
        params_per_gpu=float(weights + bias),
        bytes_per_gpu=float(weights * w_bytes + bias * b_bytes),
    )


def layer_table(
    model: ModelSpec,
    accelerator: Accelerator,
    p: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    memory: TrainingMemory | None = None,
) -> LayerTable:
    """The table of a plan; ``memory`` is its ``training_memory`` when the caller has it."""
    if memory is None:
        memory = training_memory(model, accelerator, p, setup, precision)  # validates the plan
    w_bytes = linear_weight_bytes(setup.finetune, precision)  # NF4 under QLoRA
    o_bytes = DTYPES[precision.activations].bytes
    layers = _layer_rows(model, p, setup, precision, memory.stage, w_bytes)
    embedding, head = _vocab_rows(model, p, o_bytes)
    total = count_params(model).total
    model_bytes = _model_bytes(model, setup, precision, total, w_bytes)
    return LayerTable(layers, embedding, head, total, model_bytes, memory)


def _layer_rows(
    model: ModelSpec,
    p: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    stage: int,
    w_bytes: float,
) -> tuple[LayerRows, ...]:
    """Each kind of layer on the GPU of pipeline ``stage`` (with the multi-token-prediction
    depths' layers on the last): its linears (``_linear_row``) and norms, the tensors it saves
    for backward (``_saved``) and, under TP, the collective after its attention and its MLP
    (``comms.tp_message_bytes``: all-gather + reduce-scatter with sequence parallelism)."""
    o_bytes = DTYPES[precision.activations].bytes
    tokens = setup.seq_len * setup.micro_batch_size / p.cp
    sp = p.sequence_parallel and p.tp > 1
    on_gpu = stage_kind_counts(model, p.pp, p.vp, stage, p.stage_layers)
    on_gpu = with_mtp(model, on_gpu, stage == p.pp - 1, setup.mtp_layers)
    msg = float(tp_message_bytes(model, p, tokens, precision))
    per_pass = "all-gather + reduce-scatter" if sp else "all-reduce"
    shape = (int(tokens), model.hidden_size)
    collectives = (
        (("attention", per_pass, msg, shape), ("mlp", per_pass, msg, shape)) if p.tp > 1 else ()
    )
    layers = []
    for kind, n_model, n_gpu in zip(model.kinds, model.kind_counts, on_gpu, strict=True):
        modules = [_linear_row(m, p, w_bytes, o_bytes) for m in kind.linears]
        modules += [
            ModuleRow(
                name=nm.name,
                kind="norm",
                split="replicated",
                shape=(nm.size,),
                shard_shape=(nm.size,),
                copies=1,
                copies_per_gpu=1,
                params=nm.params,
                params_per_gpu=float(nm.params),
                bytes_per_gpu=nm.params * o_bytes,
            )
            for nm in kind.norms
        ]
        saved = _saved(model, kind, p, setup, precision, tokens)
        modules = [_resident(m, p) for m in modules]
        layers.append(LayerRows(kind.name, n_model, int(n_gpu), tuple(modules), saved, collectives))
    return tuple(layers)


def _saved(
    model: ModelSpec,
    kind: LayerKind,
    p: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    tokens: float,
) -> tuple[tuple[str, float], ...]:
    """The tensors one layer of ``kind`` saves for backward, bytes per micro-batch per GPU
    (``activations``' items in the setup's convention, as the memory estimate counts them):
    the layer's input alone under full recomputation, else without what Megatron-Core's
    selective recompute modules discard."""
    sp = p.sequence_parallel and p.tp > 1
    if setup.recompute == "full":
        kept = recomputed_layer_input_bytes(model, precision, tokens, p.tp, sp)
        return (("layer input (full recompute)", float(kept)),)
    again = setup.selective_modules
    dropped = recomputed_items(kind, again, clamps_experts(model)) if again else frozenset()
    policy = "none" if again and "core_attn" not in again else setup.recompute
    items_of = hf_layer_items if setup.activation_convention == "hf" else layer_items
    kept_items = [
        it for it in items_of(model, kind, setup.flash_attention) if it.name not in dropped
    ]
    return tuple(
        (
            it.name,
            float(
                item_bytes(
                    it,
                    precision,
                    tokens=tokens,
                    keys=setup.seq_len,
                    tp=p.tp,
                    sp=sp,
                    etp=p.expert_tp,
                    recompute=policy,
                )
            ),
        )
        for it in kept_items
    )


def _vocab_rows(
    model: ModelSpec, p: Parallelism, o_bytes: float
) -> tuple[ModuleRow, ModuleRow | None]:
    """The embedding's and the output head's rows: the padded vocabulary split over TP, in the
    activations' format; the head a row of its own where it is untied or on another stage
    (its parameters counted once, in the embedding, when tied)."""
    vocab = padded_vocab(model, p.tp)
    rows = int(vocab // p.tp)
    emb_params = model.vocab_size * model.embed_dim
    embedding = ModuleRow(
        "embed_tokens", "embedding", "vocab", (model.vocab_size, model.embed_dim),
        (rows, model.embed_dim), 1, 1, emb_params, float(rows * model.embed_dim),
        rows * model.embed_dim * o_bytes,
    )  # fmt: skip
    head = None
    if not model.tie_embeddings or p.pp > 1:
        head = ModuleRow(
            "lm_head", "head", "vocab", (model.vocab_size, model.embed_dim),
            (rows, model.embed_dim), 1, 1, 0 if model.tie_embeddings else emb_params,
            float(rows * model.embed_dim), rows * model.embed_dim * o_bytes,
        )  # fmt: skip
    return _resident(embedding, p), None if head is None else _resident(head, p)


def _model_bytes(
    model: ModelSpec, setup: TrainingSetup, precision: Precision, total: int, w_bytes: float
) -> dict[str, float]:
    """The unsharded model's weights (``total`` parameters; under QLoRA NF4 for the linears
    bitsandbytes quantizes only) and the trained parameters' gradients, master weights and
    optimizer states (under LoRA and QLoRA, the adapters')."""
    o_bytes = DTYPES[precision.activations].bytes
    trained = adapters(model, setup.finetune).trainable_params  # every parameter, in full
    state_bytes = optimizer_state_bytes_per_param(model, setup.optimizer, precision)
    weights: Num = total * w_bytes
    if setup.finetune.method == "qlora":  # NF4 for the linears bitsandbytes quantizes only
        linear = sum(
            n * place_layer(placement, 1, 1, 1)[0]
            for placement, n in zip(placements(model), model.kind_counts, strict=True)
        )
        weights = linear * w_bytes + (total - linear) * o_bytes
    return {
        "weights_bytes": float(weights),
        "gradients_bytes": trained * precision.bytes("gradients"),
        "master_weights_bytes": trained * precision.bytes("master_weights"),
        "optimizer_states_bytes": trained * state_bytes,
    }
