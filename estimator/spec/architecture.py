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
    "LayerKind",
    "Linear",
    "Norm",
    "TPSplit",
]

Component = Literal[
    "embeddings", "attention", "mlp", "experts", "shared_experts", "router", "norms", "output_head"
]
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
class AttentionCore:
    """The parameter-free part of attention: scores ``Q K^T`` and the weighted sum ``P V``.

    ``qk_head_dim``/``v_head_dim`` may differ (MLA). ``window`` is the sliding-window length for
    local layers (None for global attention). ``cache_elems_per_token`` is what the KV cache keeps
    per token for this layer: ``kv_heads * (qk_head_dim + v_head_dim)`` for standard attention,
    ``kv_lora_rank + qk_rope_head_dim`` for MLA's compressed latent. ``cache_shards_with_tp`` says
    whether that cache splits over TP ranks (per-head caches do; MLA's latent is replicated).
    """

    num_heads: int
    num_kv_heads: int
    qk_head_dim: int
    v_head_dim: int
    window: int | None
    cache_elems_per_token: int
    cache_shards_with_tp: bool = True


@dataclass(frozen=True, slots=True)
class LayerKind:
    """One kind of decoder layer: its modules, attention core and activation-relevant shape."""

    name: str
    linears: tuple[Linear, ...]
    norms: tuple[Norm, ...]
    attention: AttentionCore
    parallel_residual: bool = False

    @property
    def params(self) -> int:
        return sum(m.params for m in self.linears) + sum(n.params for n in self.norms)

    def params_by_component(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for m in self.linears:
            out[m.component] = out.get(m.component, 0) + m.params
        for n in self.norms:
            out[n.component] = out.get(n.component, 0) + n.params
        return out

    def linear(self, suffix: str) -> Linear | None:
        for m in self.linears:
            if m.name.endswith(suffix):
                return m
        return None
