"""Activation memory kept for backward, per layer and per micro-batch, on one GPU.

The ``megatron`` convention follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in
Large Transformer Models", Sec. 4, eq. 1-2), generalized from GPT-3 to the families here: every
linear keeps its input, every norm its input, attention keeps Q, K, V and its output (plus the
softmax statistics with flash attention, or the ``s x s`` score matrices with eager attention), the
MLP keeps its activation's input and output, dropouts keep one-byte masks. For GPT-3 shapes with
dropout this reproduces the paper's ``34 s b h + 5 a s^2 b`` bytes per layer (bf16) exactly; under
TP
without sequence parallelism the norm/dropout region is replicated (``10 + 24/t``); with sequence
parallelism everything is split by TP.

Items are (elements per token, format, region): ``seq`` items are split over TP only with sequence
parallelism, ``tp`` items are always split over TP, ``full`` items are never split (replicated
modules such as MLA's down-projections). Elements on GEMM inputs are stored in the precision's
``gemm_inputs`` format (fp8 recipes save fp8 copies).

Tokens per GPU are ``seq_len * micro_batch / cp``; routed experts see ``top_k`` copies of each
token,
all-gathered over TP when the experts are tensor-parallel (``etp``).

This module lists what each layer saves (the items, by convention and recompute policy);
``activation_bytes`` turns them into bytes for a layout, and adds the embedding's and head's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

from estimator.inputs.architecture import AttentionCore, LayerKind, Linear, RecurrentCore
from estimator.inputs.model import ModelSpec

__all__ = [
    "DEFAULT_RECOMPUTE_MODULES",
    "HF_CONVENTION_FAMILIES",
    "HF_STYLE",
    "RECOMPUTE_MODULES",
    "ActivationConvention",
    "ActivationItem",
    "compiled_layer_items",
    "frozen_items",
    "hf_layer_items",
    "hf_norm_items",
    "layer_items",
    "op_policy",
    "op_saved_items",
    "recomputed_items",
    "recomputed_linears",
]

ActivationConvention = Literal["megatron", "hf", "compiled"]
# Families whose Hugging Face implementation the ``hf`` and ``compiled`` conventions model op by
# op (RMSNorm with an fp32 upcast, rotary positions, gated MLP, eager or SDPA attention), and
# whose layers the per-op selective checkpointing policy (recompute ``op``) is modelled for.
HF_CONVENTION_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
# Conventions of eager PyTorch modules (Hugging Face / torchtune / TorchTitan style): the
# embedding's rotary tables, the head's RMSNorm and int64 labels are theirs.
HF_STYLE = ("hf", "compiled")
Region = Literal["seq", "tp", "full", "expert_h", "expert_i", "scores", "scatter"]

# Megatron counts the token ids fed to the embedding as 8 bytes per token (int64).
TOKEN_ID_BYTES = 8
MASK_BYTES = 1
STATS_BYTES = 4  # flash-attention log-sum-exp and router probabilities are kept in fp32


@dataclass(frozen=True, slots=True)
class ActivationItem:
    """A tensor saved for backward: ``elems`` per token (per key too, for ``scores``)."""

    name: str
    elems: int
    fmt: str  # "act", "gemm", "mask" or "fp32"
    region: Region


def clamps_experts(model: ModelSpec) -> bool:
    """Whether the model's routed experts clamp their activation's input (gpt-oss)."""
    return model.moe is not None and model.moe.activation_clamp is not None


def _norm_inputs(kind: LayerKind, h: int) -> int:
    """Distinct norm inputs of size h: parallel-residual layers feed every norm the same x."""
    hidden_norms = sum(1 for n in kind.norms if n.size == h)
    return 1 if kind.parallel_residual else hidden_norms


def layer_items(model: ModelSpec, kind: LayerKind, flash: bool) -> tuple[ActivationItem, ...]:
    h = model.hidden_size
    a = kind.attention
    items = [ActivationItem("norm.inputs", _norm_inputs(kind, h) * h, "act", "seq")]
    if a is not None:
        items += _attention_items(model, kind, a, flash)
    if kind.mixer is not None:
        items += mixer_items(kind.mixer, h)
    if model.hidden_dropout > 0 and (a is not None or kind.mixer is not None):
        items.append(ActivationItem("attention.dropout_mask", h, "mask", "seq"))
    if _has_ffn(kind):
        items += _ffn_items(model, kind)
    if model.hyper_streams:
        items.append(_stream_item(model, kind))
    return tuple(items)


# Megatron-Core's selective recompute modules (TransformerConfig.recompute_modules, the choices
# of --recompute-modules this planner models) and its default when none are named.
RECOMPUTE_MODULES = (
    "core_attn",
    "layernorm",
    "moe_act",
    "mlp",
    "moe",
    "shared_experts",
    "mla_up_proj",
)
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)


def is_mla(kind: LayerKind) -> bool:
    """Multi-latent attention: replicated down-projections before the up-projections."""
    return any(m.component == "attention" and m.tp == "replicated" for m in kind.linears)


def is_moe(kind: LayerKind) -> bool:
    return any(m.component == "experts" for m in kind.linears)


@cache
def recomputed_items(
    kind: LayerKind, modules: tuple[str, ...], clamped: bool = False
) -> frozenset[str]:
    """The saved tensors (``layer_items`` names) of a layer kind that Megatron-Core's selective
    recompute ``modules`` discard in the forward and compute again in the backward
    (megatron/core/transformer/transformer_layer.py, moe/experts.py, multi_latent_attention.py):
    ``layernorm`` the outputs of the norms that are modules of their own (the MoE layer's
    pre-MLP norm and MLA's input norm; Transformer Engine fuses the others into the next linear,
    where nothing is discarded), the inputs of the GEMMs they feed; ``moe_act`` the experts'
    activation output (their down-projection's input) and, where the experts clamp it
    (``clamped``: ``MoESpec.activation_clamp``), the activation's clamped copy of its input;
    ``mlp``, ``shared_experts`` and ``moe`` everything inside the dense MLP, the shared experts
    or the whole MoE layer but its input;
    ``mla_up_proj`` MLA's query, key and value after the up-projections and rotary. The core
    attention (``core_attn``) is the score matrices' region (``region_scales``)."""
    names: set[str] = set()
    moe, mla = is_moe(kind), is_mla(kind)
    rows = [m for m in kind.linears if m.tp == "row"]
    shared = {n for m in rows if m.component == "shared_experts" for n in _mlp_names(m)}
    if "layernorm" in modules:
        names |= {"mlp.input"} if moe else set()
        names |= {"attention.input"} if mla else set()
    clamp = {"experts.act_clamped"} if clamped else set()
    if "moe_act" in modules and moe:
        names |= {"experts.down_input", *clamp}
    if "mlp" in modules and not moe:
        names |= {n for m in rows if m.component == "mlp" for n in _mlp_names(m)}
    if "shared_experts" in modules:
        names |= shared
    if "moe" in modules and moe:
        names |= {"experts.input", "experts.act_input", "experts.down_input", "router.probs"}
        names |= clamp
        names |= shared
    if "mla_up_proj" in modules and mla:
        names |= {"attention.q", "attention.k", "attention.v"}
    return frozenset(names)


@cache
def recomputed_linears(
    kind: LayerKind, modules: tuple[str, ...], hidden: int
) -> tuple[Linear, ...]:
    """The projections Megatron-Core's selective recompute ``modules`` run a second time in the
    backward: the dense MLP's (``mlp``), the shared experts' (``shared_experts``), the whole
    MoE layer's, router included (``moe``), MLA's up-projections (``mla_up_proj``: the
    column-parallel ones whose input is not the ``hidden``-wide layer input). The core
    attention, the norms and the experts' activation are recomputed without projections."""
    moe, mla = is_moe(kind), is_mla(kind)
    parts = set()
    if "mlp" in modules and not moe:
        parts.add("mlp")
    if "shared_experts" in modules or ("moe" in modules and moe):
        parts.add("shared_experts")
    if "moe" in modules and moe:
        parts |= {"experts", "router"}
    up = "mla_up_proj" in modules and mla
    return tuple(
        m
        for m in kind.linears
        if m.component in parts
        or (up and m.component == "attention" and m.tp == "column" and m.in_features != hidden)
    )


def _mlp_names(down: Linear) -> tuple[str, str]:
    """The tensors an MLP saves around its down-projection ``down`` (``_ffn_items``)."""
    return f"{down.name}.act_input", f"{down.name}.input"


def _stream_item(model: ModelSpec, kind: LayerKind) -> ActivationItem:
    """Hyper-connections (DeepSeek-V4's mHC): before each block the residual streams are kept
    twice, normalized as the input of the weights' projection (``*_hc.fn``) and as they are, the
    operand of their collapse and of their mix."""
    width = 2 * model.hyper_streams * model.hidden_size
    return ActivationItem("hyper_connections.streams", kind.blocks * width, "act", "seq")


def _has_ffn(kind: LayerKind) -> bool:
    return any(m.component in ("mlp", "experts", "shared_experts") for m in kind.linears)


def _attention_items(
    model: ModelSpec, kind: LayerKind, a: AttentionCore, flash: bool
) -> list[ActivationItem]:
    """What attention saves: its input, the inputs of MLA's up-projections and outputs of its
    down-projections, the q/k norms' inputs, q, k, v and the output, and the softmax statistics
    (flash) or probabilities (eager, with their dropout)."""
    h = model.hidden_size
    items = [ActivationItem("attention.input", h, "gemm", "seq")]
    for m in kind.linears:  # MLA: inputs of the up-projections, outputs of the down-projections
        if m.component == "attention" and m.tp == "replicated":
            items.append(ActivationItem(f"{m.name}.output", m.out_features, "act", "full"))
        if m.component == "attention" and m.tp == "column" and m.in_features != h:
            items.append(ActivationItem(f"{m.name}.input", m.in_features, "gemm", "full"))
    for n in kind.norms:
        if n.name.endswith(("q_norm", "k_norm")):
            heads = a.num_heads if n.name.endswith("q_norm") else a.num_kv_heads
            items.append(ActivationItem(f"{n.name}.input", heads * n.size, "act", "tp"))
    items += [
        ActivationItem("attention.q", a.num_heads * a.qk_head_dim, "act", "tp"),
        ActivationItem("attention.k", a.num_kv_heads * a.qk_head_dim, "act", "tp"),
        ActivationItem("attention.v", a.num_kv_heads * a.v_head_dim, "act", "tp"),
        ActivationItem("attention.output", a.num_heads * a.v_head_dim, "act", "tp"),
    ]
    if flash:
        items.append(ActivationItem("attention.softmax_lse", a.num_heads, "fp32", "tp"))
    else:
        items.append(ActivationItem("attention.softmax", a.num_heads, "act", "scores"))
        if model.attention_dropout > 0:
            items += [
                ActivationItem("attention.dropout_mask", a.num_heads, "mask", "scores"),
                ActivationItem("attention.dropout_output", a.num_heads, "act", "scores"),
            ]
    return items


def mixer_items(r: RecurrentCore, h: int) -> list[ActivationItem]:
    """What a recurrent mixer saves for its backward (the fused kernels' inputs, as Megatron's
    Mamba layer and the mamba_ssm / flash-linear-attention kernels keep them): the input
    projection's input, the convolution's input and output, the gate and step sizes, the scan's
    output and the gated norm's input, the output projection's input, and the fp32 state at
    every chunk boundary (spread here over the chunk's tokens). An approximation: no published
    per-tensor account to check it against."""
    inner = r.heads * r.head_dim
    chunk_states = -(-r.state_elems // r.chunk) if r.chunk else 0
    return [
        ActivationItem("mixer.input", h, "gemm", "seq"),
        ActivationItem("mixer.conv_input", r.conv_channels, "act", "tp"),
        ActivationItem("mixer.conv_output", r.conv_channels, "act", "tp"),
        ActivationItem("mixer.gate_and_steps", inner + r.heads, "act", "tp"),
        ActivationItem("mixer.scan_output", inner, "act", "tp"),
        ActivationItem("mixer.out_proj_input", inner, "gemm", "tp"),
        ActivationItem("mixer.chunk_states", chunk_states, "fp32", "tp"),
    ]


def _ffn_items(model: ModelSpec, kind: LayerKind) -> list[ActivationItem]:
    """What the MLP or the experts save: their input, each MLP's activation input and down
    projection input, the routed tokens and the router's probabilities."""
    h = model.hidden_size
    shared_input = (
        kind.parallel_residual
        and _norm_inputs(kind, h) == 1
        and len([n for n in kind.norms if n.size == h]) == 1
    )
    items = []
    if not shared_input:
        items.append(ActivationItem("mlp.input", h, "gemm", "seq"))
    act_copies = 2 if model.gated_mlp else 1  # gate and up (gated) or fc1 output (plain)
    for m in kind.linears:
        if m.component in ("mlp", "shared_experts") and m.tp == "row":
            items += [
                ActivationItem(f"{m.name}.act_input", act_copies * m.in_features, "act", "tp"),
                ActivationItem(f"{m.name}.input", m.in_features, "gemm", "tp"),
            ]
        elif m.component == "experts" and m.tp == "row":
            items += [
                ActivationItem("experts.input", m.active * h, "gemm", "expert_h"),
                ActivationItem(
                    "experts.act_input", m.active * act_copies * m.in_features, "act", "expert_i"
                ),
                ActivationItem("experts.down_input", m.active * m.in_features, "gemm", "expert_i"),
            ]
            if clamps_experts(model):
                # Megatron-Core clamps the up-projection's output into a copy before its fused
                # activation (``weighted_bias_quick_geglu_impl``): the fused function saves the
                # copy, the clamps their input (``experts.act_input``).
                width = m.active * act_copies * m.in_features
                items.append(ActivationItem("experts.act_clamped", width, "act", "expert_i"))
        elif m.component == "router":
            items.append(ActivationItem("router.probs", m.out_features, "fp32", "seq"))
    if model.hidden_dropout > 0:
        items.append(ActivationItem("mlp.dropout_mask", h, "mask", "seq"))
    return items


def hf_norm_items(name: str, size: int, vectors: int, region: Region) -> list[ActivationItem]:
    """HF RMSNorm saves an fp32 copy of its input, the fp32 rsqrt per vector and the normalized
    input in the model dtype (the weight multiply's operand)."""
    return [
        ActivationItem(f"{name}.input_fp32", size * vectors, "fp32", region),
        ActivationItem(f"{name}.rsqrt", vectors, "fp32", region),
        ActivationItem(f"{name}.normalized", size * vectors, "act", region),
    ]


def hf_layer_items(model: ModelSpec, kind: LayerKind, flash: bool) -> tuple[ActivationItem, ...]:
    """What a Hugging Face Llama-style decoder layer saves for backward, op by op (measured
    with ``saved_tensors_hooks`` in the tests): two RMSNorms, the inputs of the q/k/v and gate/up
    projections, SDPA's q, k, v, output and log-sum-exp (eager: q and the KV-repeated k, v, the
    fp32 softmax and its model-dtype copy, the output), and four intermediates of the SwiGLU MLP
    (gate output, SiLU output, up output, product).

    Under tensor parallelism (DTensor, as TorchTitan's plan runs these modules) the norms run on
    sequence shards and their output is all-gathered before the column-parallel projections
    (``PrepareModuleInput`` to ``Replicate``): those projections save the gathered input whole
    (region ``full``), where Megatron keeps its shard and gathers it again in the backward."""
    h, a = model.hidden_size, kind.attention
    if a is None:  # measured for attention layers only: the planner's own items otherwise
        return layer_items(model, kind, flash)
    items = [
        *hf_norm_items("input_layernorm", h, 1, "seq"),
        *hf_norm_items("post_attention_layernorm", h, 1, "seq"),
        ActivationItem("attention.input", h, "gemm", "full"),
        ActivationItem("mlp.input", h, "gemm", "full"),
    ]
    for n in kind.norms:
        if n.name.endswith(("q_norm", "k_norm")):
            heads = a.num_heads if n.name.endswith("q_norm") else a.num_kv_heads
            items += hf_norm_items(n.name, n.size, heads, "tp")
    q, out = a.num_heads * a.qk_head_dim, a.num_heads * a.v_head_dim
    items += [
        ActivationItem("attention.q", q, "act", "tp"),
        ActivationItem("attention.output", out, "act", "tp"),
    ]
    if flash:
        items += [
            ActivationItem("attention.k", a.num_kv_heads * a.qk_head_dim, "act", "tp"),
            ActivationItem("attention.v", a.num_kv_heads * a.v_head_dim, "act", "tp"),
            ActivationItem("attention.softmax_lse", a.num_heads, "fp32", "tp"),
        ]
    else:
        items += [
            ActivationItem("attention.k_repeated", a.num_heads * a.qk_head_dim, "act", "tp"),
            ActivationItem("attention.v_repeated", a.num_heads * a.v_head_dim, "act", "tp"),
            ActivationItem("attention.softmax_fp32", a.num_heads, "fp32", "scores"),
            ActivationItem("attention.probs", a.num_heads, "act_if_not_fp32", "scores"),
        ]
    for m in kind.linears:
        if m.component == "mlp" and m.tp == "row":
            items.append(ActivationItem("mlp.intermediates", 4 * m.in_features, "act", "tp"))
    return tuple(items)


def compiled_layer_items(
    model: ModelSpec, kind: LayerKind, flash: bool
) -> tuple[ActivationItem, ...]:
    """What the same Llama-style layer saves under ``torch.compile`` (AOTAutograd's min-cut
    partition, which recomputes cheap pointwise work in the backward instead of saving it; as
    ``backend="aot_eager_decomp_partition"`` partitions for Inductor, measured with
    ``saved_tensors_hooks`` in the tests): the layer input, the inputs of the q/k/v, o and
    gate/up projections in the model dtype, each RMSNorm's fp32 rsqrt (no fp32 input copies),
    the q/k norms' inputs, SDPA's q, k, v, output and log-sum-exp, and three SwiGLU tensors
    (gate and up outputs, their product) instead of four."""
    h, a = model.hidden_size, kind.attention
    if a is None:
        return layer_items(model, kind, flash)
    items = [
        ActivationItem("layer.input", h, "act", "seq"),
        ActivationItem("input_layernorm.rsqrt", 1, "fp32", "seq"),
        ActivationItem("post_attention_layernorm.rsqrt", 1, "fp32", "seq"),
        ActivationItem("attention.input", h, "gemm", "full"),
        ActivationItem("mlp.input", h, "gemm", "full"),
    ]
    for n in kind.norms:
        if n.name.endswith(("q_norm", "k_norm")):
            heads = a.num_heads if n.name.endswith("q_norm") else a.num_kv_heads
            items += [
                ActivationItem(f"{n.name}.input", heads * n.size, "act", "tp"),
                ActivationItem(f"{n.name}.rsqrt", heads, "fp32", "tp"),
            ]
    out = a.num_heads * a.v_head_dim
    items += [
        ActivationItem("attention.q", a.num_heads * a.qk_head_dim, "act", "tp"),
        ActivationItem("attention.k", a.num_kv_heads * a.qk_head_dim, "act", "tp"),
        ActivationItem("attention.v", a.num_kv_heads * a.v_head_dim, "act", "tp"),
        ActivationItem("attention.output", out, "act", "tp"),
        ActivationItem("o_proj.input", out, "gemm", "tp"),
    ]
    if flash:
        items.append(ActivationItem("attention.softmax_lse", a.num_heads, "fp32", "tp"))
    else:
        items.append(ActivationItem("attention.probs", a.num_heads, "act", "scores"))
    for m in kind.linears:
        if m.component == "mlp" and m.tp == "row":
            items.append(ActivationItem("mlp.intermediates", 3 * m.in_features, "act", "tp"))
    return tuple(items)


def op_policy(kind: LayerKind) -> tuple[tuple[Linear, ...], tuple[Linear, ...]]:
    """TorchTitan's per-op selective activation checkpointing policy (``ac_config.mode =
    "selective"``, ``selective_ac_option = "op"``; torchtitan parallelize_llama.py ``_save_list``
    and ``_custom_policy``) on one layer's linears, in forward order: it saves the output of
    every ``aten.mm`` except every second one (a bias-free ``nn.Linear`` is an ``mm``; one with a
    bias is an ``addmm``, not in the save list and not counted). Returns (saved, recomputed)."""
    saved: list[Linear] = []
    recomputed: list[Linear] = []
    count = 0
    for m in kind.linears:
        if m.bias:
            recomputed.append(m)
            continue
        count += 1
        (recomputed if count % 2 == 0 else saved).append(m)
    return tuple(saved), tuple(recomputed)


def op_saved_items(model: ModelSpec, kind: LayerKind, flash: bool) -> tuple[ActivationItem, ...]:
    """What a layer keeps under the per-op policy besides its input (the checkpoint's): the
    saved projections' outputs (a row-parallel one is each rank's partial sum of all tokens,
    before its reduce-scatter), SDPA's output and log-sum-exp, and with sequence parallelism the
    two reduce-scatter outputs (``_c10d_functional.reduce_scatter_tensor`` is in the list)."""
    a = kind.attention
    saved, _ = op_policy(kind)
    items = []
    for m in saved:
        region: Region = "full" if m.tp == "row" else "tp"
        items.append(ActivationItem(f"{m.name}.output", m.out_features, "act", region))
    if a is not None:  # flash attention (the op policy saves the flash / efficient SDPA ops)
        out = a.num_heads * a.v_head_dim
        items.append(ActivationItem("attention.output", out, "act", "tp"))
        items.append(ActivationItem("attention.softmax_lse", a.num_heads, "fp32", "tp"))
    h = model.hidden_size
    items.append(ActivationItem("reduce_scatter.outputs", 2 * h, "act", "scatter"))
    return tuple(items)


def frozen_items(
    items: Sequence[ActivationItem], adapted: Sequence[str], convention: str
) -> tuple[ActivationItem, ...]:
    """What the PyTorch-module conventions' layer keeps when its base weights are frozen (LoRA,
    QLoRA; measured on PEFT-wrapped real layers in the tests): a frozen projection needs no
    weight gradient, so its input is kept only where an adapter (``adapted``: module names such
    as ``q_proj``) reads it, the q/k/v input for one on q, k or v, the gate/up input for one on
    gate or up, the SwiGLU product for one on down; and a frozen norm weight needs no copy of the
    normalized input (the eager norms' ``normalized``). The attention kernel's tensors, the
    norms' fp32 input and rsqrt and the gate and up outputs stay: the input gradient needs them."""
    names = set(adapted)
    qkv = bool(names & {"q_proj", "k_proj", "v_proj"})
    gate_up = bool(names & {"gate_proj", "up_proj"})
    out = []
    for it in items:
        if it.name.endswith(".normalized") or (it.name == "attention.input" and not qkv):
            continue
        if it.name == "mlp.input" and not gate_up:
            continue
        if it.name == "mlp.intermediates" and "down_proj" not in names:
            kept = 3 if convention == "hf" else 2  # of 4 (eager) or 3 (compiled): no product
            it = ActivationItem(it.name, it.elems * kept // (kept + 1), it.fmt, it.region)
        out.append(it)
    return tuple(out)
