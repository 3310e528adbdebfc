"""What a transformer is made of: the module inventory every count is derived from.

A model is an embedding, a stack of decoder layers and an output head. Layers come in a few
*kinds* (dense, MoE, local- or global-attention ...); each kind is a list of parameterized modules
(linear maps and norms, named as in the Hugging Face implementation) plus one attention core.
Parameter
counts, FLOPs, tensor-parallel shards and activation sizes are all read off this inventory, so a
family's quirks are written once, in its module under ``spec/families/``, and never again in the
math.

Tensor-parallel placement follows Megatron-LM: a ``column`` linear splits its output features over
TP ranks (and its bias with them), a ``row`` linear splits its input features (its bias is
replicated, added after the all-reduce), ``replicated`` modules are whole on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AttentionCore",
    "Component",
    "Compressor",
    "LayerKind",
    "Linear",
    "MixerKind",
    "Norm",
    "Param",
    "RecurrentCore",
    "TPSplit",
]

Component = Literal[
    "embeddings",
    "attention",
    "mixer",
    "mlp",
    "experts",
    "shared_experts",
    "router",
    "hyper_connections",
    "norms",
    "output_head",
]
MixerKind = Literal["mamba1", "mamba2", "gated_deltanet", "short_conv"]
TPSplit = Literal["column", "row", "replicated"]


@dataclass(frozen=True, slots=True)
class Linear:
    """A linear map ``in_features -> out_features`` (optionally with bias).

    ``copies`` is the number of identical-shape instances (routed experts), ``active`` how many of
    them a token passes through (top-k). ``shard_units`` is the number of units the TP-split axis
    is made of (attention heads, KV heads, or features); a rank holds ``max(units // tp, 1)`` of
    them, which is how KV heads are replicated when tp exceeds their number.
    """

    name: str
    in_features: int
    out_features: int
    bias: bool
    component: Component
    tp: TPSplit
    shard_units: int = 0
    copies: int = 1
    active: int = 1

    @property
    def weight_params(self) -> int:
        return self.in_features * self.out_features * self.copies

    @property
    def bias_params(self) -> int:
        return self.out_features * self.copies if self.bias else 0

    @property
    def params(self) -> int:
        return self.weight_params + self.bias_params

    @property
    def units(self) -> int:
        """Units along the TP-split axis (features if not given)."""
        if self.shard_units:
            return self.shard_units
        return self.out_features if self.tp == "column" else self.in_features

    def forward_flops_per_token(self) -> int:
        """Matmul FLOPs per token: 2 per multiply-add; bias adds are not counted (torch's rule)."""
        return 2 * self.in_features * self.out_features * self.active


@dataclass(frozen=True, slots=True)
class Norm:
    """LayerNorm (weight and bias) or RMSNorm (weight only) over ``size`` features."""

    name: str
    size: int
    bias: bool
    component: Component = "norms"

    @property
    def params(self) -> int:
        return self.size * (2 if self.bias else 1)


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter tensor that is neither a linear map nor a norm: attention sinks, an SSM's
    ``A_log``, ``D`` and ``dt_bias``, a depthwise convolution's kernel and bias. ``size``
    elements; TP splits it by ``shard_units`` whole units (heads or channels) when non-zero, else
    every rank holds it whole. No matmul FLOPs of its own."""

    name: str
    size: int
    component: Component
    shard_units: int = 0

    @property
    def params(self) -> int:
        return self.size


@dataclass(frozen=True, slots=True)
class Compressor:
    """DeepSeek-V4's compressed keys (its report's section 2.3; transformers'
    ``DeepseekV4CSACompressor`` and ``DeepseekV4HCACompressor``): besides the keys of its own
    window, a layer attends to one compressed entry per ``ratio`` tokens, a softmax-gated pool of
    their projections into one shared key-and-value head of ``head_dim``.

    ``overlap`` (compressed sparse attention, CSA): the projections are two series
    (``2 head_dim`` wide) and an entry pools the previous window's first series with its own
    window's second, ``2 ratio`` tokens with a stride of ``ratio``; a lightning indexer of
    ``index_heads`` heads of ``index_head_dim`` (its own overlapping compressor of the same
    windows, at ``index_head_dim``) scores the entries and a query attends to ``topk`` of them.
    Without (heavily compressed attention, HCA) an entry pools its own window and every entry is
    attended. A query at position ``t`` sees the ``(t + 1) // ratio`` entries whose windows it
    has passed.
    """

    ratio: int
    head_dim: int
    overlap: bool = False
    topk: int | None = None
    index_heads: int = 0
    index_head_dim: int = 0

    @property
    def entry_elems(self) -> int:
        """Cache elements per compressed entry: the entry and the indexer's key."""
        return self.head_dim + self.index_head_dim


@dataclass(frozen=True, slots=True)
class AttentionCore:
    """The parameter-free part of attention: scores ``Q K^T`` and the weighted sum ``P V``.

    ``qk_head_dim``/``v_head_dim`` may differ (MLA). ``window`` is the sliding-window length for
    local layers (None for global attention). ``cache_elems_per_token`` is what the KV cache keeps
    per token for this layer: ``kv_heads * (qk_head_dim + v_head_dim)`` for standard attention,
    ``kv_lora_rank + qk_rope_head_dim`` for MLA's compressed latent. ``cache_shards_with_tp`` says
    whether that cache splits over TP ranks (per-head caches do; MLA's latent is replicated).

    ``chunk``: chunked attention (Llama 4's local layers) attends within aligned blocks of that
    many tokens, and its cache keeps at most one block. ``topk``: sparse attention (DeepSeek-V3.2's
    DSA) attends to at most that many selected keys per query, picked by a lightning indexer of
    ``index_heads`` heads of ``index_head_dim`` that scores every earlier key (its key cache is
    part of ``cache_elems_per_token``). ``compressor``: DeepSeek-V4's compressed keys, attended
    besides the window (``cache_elems_per_token`` then counts the window's keys only).

    ``latent_dims``: MLA's (key, value) widths in its latent space, ``(kv_lora_rank +
    qk_rope_head_dim, kv_lora_rank)``; decode kernels (FlashMLA, FlashInfer's and TensorRT-LLM's
    MLA) absorb the key and value up-projections and attend there, every head against the
    shared latent (``decode_pair_flops``). Empty for per-head caches.
    """

    num_heads: int
    num_kv_heads: int
    qk_head_dim: int
    v_head_dim: int
    window: int | None
    cache_elems_per_token: int
    cache_shards_with_tp: bool = True
    chunk: int | None = None
    topk: int | None = None
    index_heads: int = 0
    index_head_dim: int = 0
    compressor: Compressor | None = None
    latent_dims: tuple[int, int] | tuple[()] = ()

    @property
    def decode_pair_flops(self) -> int:
        """FLOPs per query, key and layer of a decode kernel: ``2 heads (qk + v)``, or for MLA
        the absorbed form, ``2 heads (latent key + latent value width)`` (3.4x the
        unabsorbed form for DeepSeek-V3: 576 + 512 against 192 + 128 per head)."""
        if self.latent_dims:
            return 2 * self.num_heads * (self.latent_dims[0] + self.latent_dims[1])
        return 2 * self.num_heads * (self.qk_head_dim + self.v_head_dim)

    @property
    def cache_window(self) -> int | None:
        """Tokens a layer's KV cache holds at most (None: the whole context)."""
        if self.window is None:
            return self.chunk
        return self.window if self.chunk is None else min(self.window, self.chunk)


@dataclass(frozen=True, slots=True)
class RecurrentCore:
    """The parameter-free part of a recurrent token mixer, whose state does not grow with the
    context: Mamba-1's selective scan, Mamba-2's state-space duality (SSD), gated DeltaNet, or a
    gated short convolution (LFM2).

    ``heads`` x ``head_dim`` channels carry a ``state_dim``-wide state each (Mamba-1: ``heads``
    channels of head_dim 1; gated DeltaNet: value heads of ``head_dim`` against key heads of
    ``state_dim``); ``groups`` heads of B/C (Mamba-2) or of keys (gated DeltaNet) are shared by
    the others. A depthwise causal convolution of ``conv_kernel`` taps runs over
    ``conv_channels`` channels first and keeps ``conv_state`` tokens of them between steps.
    ``chunk`` is the chunk length of the chunked algorithm (0: a sequential scan). TP splits
    ``heads`` (and the channels with them). ``state_fp32``: the scan state is kept in fp32
    whatever the model's dtype (Nemotron-H's ``mamba_ssm_cache_dtype``); the convolution state
    follows the model's dtype.
    """

    kind: MixerKind
    heads: int
    head_dim: int
    state_dim: int
    groups: int
    conv_channels: int
    conv_kernel: int
    conv_state: int
    chunk: int = 0
    state_fp32: bool = False

    @property
    def state_elems(self) -> int:
        """Recurrent-state elements per sequence (the scan's state; no convolution)."""
        return self.heads * self.head_dim * self.state_dim

    @property
    def conv_state_elems(self) -> int:
        """Convolution-state elements per sequence."""
        return self.conv_channels * self.conv_state


@dataclass(frozen=True, slots=True)
class LayerKind:
    """One kind of decoder layer: its modules, its token mixer (an attention core, a recurrent
    core, or neither for a layer that is only an MLP) and activation-relevant shape."""

    name: str
    linears: tuple[Linear, ...]
    norms: tuple[Norm, ...]
    attention: AttentionCore | None
    parallel_residual: bool = False
    mixer: RecurrentCore | None = None
    extras: tuple[Param, ...] = ()

    @property
    def params(self) -> int:
        return (
            sum(m.params for m in self.linears)
            + sum(n.params for n in self.norms)
            + sum(x.params for x in self.extras)
        )

    def params_by_component(self) -> dict[str, int]:
        out: dict[str, int] = {}
        items: tuple[Linear | Norm | Param, ...] = (*self.linears, *self.norms, *self.extras)
        for item in items:
            out[item.component] = out.get(item.component, 0) + item.params
        return out

    @property
    def blocks(self) -> int:
        """Blocks on the residual (token mixer, MLP or experts): two in a classic layer, one in
        a hybrid model's single-block layers."""
        mixes = self.attention is not None or self.mixer is not None
        ffn = any(m.component in ("mlp", "experts", "shared_experts") for m in self.linears)
        return int(mixes) + int(ffn)

    @property
    def routed(self) -> bool:
        """Whether the layer holds routed experts (linears with several copies)."""
        return any(m.copies > 1 for m in self.linears)

    @property
    def tp_exchanges(self) -> int:
        """Row-parallel blocks, each closed by one TP exchange per pass."""
        return self.blocks

    def linear(self, suffix: str) -> Linear | None:
        for m in self.linears:
            if m.name.endswith(suffix):
                return m
        return None
