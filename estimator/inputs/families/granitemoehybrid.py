"""Granite 4.0 hybrid (IBM; ``GraniteMoeHybridForCausalLM``): each layer is Mamba-2 (``mamba``,
``ssm.mamba_prefixed_mixer`` over ``mamba_expand x hidden_size`` channels) or grouped-query
attention (``self_attn``, biased by ``attention_bias``, rotary positions only where
``position_embedding_type`` is "rope"), as ``layer_types`` says (the older names "mamba" and
"attention" mean the same, as transformers remaps them; without it every layer is Mamba-2). The
feed-forward block is a mixture of ``num_local_experts`` SwiGLU experts of ``intermediate_size``
(``block_sparse_moe``: ``router`` and fused ``experts``, ``num_experts_per_tok`` per token) plus
a shared SwiGLU MLP of ``shared_intermediate_size`` (``shared_mlp``: fused ``input_linear``,
``output_linear``, no bias) that every token takes; with no experts the shared MLP is the whole
feed-forward. Norms: ``input_layernorm``, ``post_attention_layernorm``, final ``norm``. The
muP multipliers (embedding, attention, residual, logits) scale activations and count nothing.
"""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.inputs.architecture import Component, Linear
from estimator.inputs.families.blocks import rms, routed_experts, router
from estimator.inputs.families.hybrid import (
    attention_block,
    attention_shape,
    hybrid_layer,
    hybrid_model,
)
from estimator.inputs.families.ssm import mamba_prefixed_mixer
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("granitemoehybrid",)
LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}  # transformers' remap
TYPES = ("linear_attention", "full_attention")


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=4096)
    layers = c.integer("num_hidden_layers", default=32)
    types = _layer_types(c, layers)
    a = attention_shape(c, h, heads=32, kv=None)
    mamba = mamba_prefixed_mixer(c, h, c.integer("mamba_expand", default=2) * h)
    attention, core = attention_block(h, a, c.flag("attention_bias", False))
    ffn, moe = _feed_forward(c, h, layers)
    norms = (rms("input_layernorm", h), rms("post_attention_layernorm", h))
    mamba_layer = hybrid_layer("mamba", norms, ffn, mixer=mamba)
    attention_layer = hybrid_layer("attention", norms, ffn, attention=attention, core=core)
    stack = [mamba_layer if t == "linear_attention" else attention_layer for t in types]
    vocab = c.integer("vocab_size", default=32000)
    tie = c.flag("tie_word_embeddings", False)
    return hybrid_model(c, ident, h, stack, vocab=vocab, tie=tie, final_norm="norm", moe=moe)


def _layer_types(c: ConfigReader, layers: int) -> list[str]:
    """``layer_types`` (or its alias ``layers_block_type``), one per layer, legacy names
    remapped; every layer Mamba-2 without one (the config class's default)."""
    given = c.get("layer_types", "layers_block_type")
    if given is None:
        return ["linear_attention"] * layers
    if not isinstance(given, list) or len(given) != layers:
        raise SpecError(
            "config.layer_types", f"must list one type per layer (num_hidden_layers={layers})"
        )
    types = [LEGACY.get(str(t), str(t)) for t in given]
    odd = sorted(set(types) - set(TYPES))
    if odd:
        raise SpecError(
            "config.layer_types",
            f"layer types {', '.join(odd)} are not modelled for 'granitemoehybrid' (only"
            " linear_attention/mamba and full_attention/attention)",
            odd[0],
        )
    return types


def _feed_forward(
    c: ConfigReader, h: int, layers: int
) -> tuple[tuple[Linear, ...], MoESpec | None]:
    """The routed experts and their router (where ``num_local_experts`` > 0) and the shared
    MLP, the same in every layer."""
    experts = c.integer("num_local_experts", default=8, minimum=0)
    shared = c.integer("shared_intermediate_size", default=1024)
    component: Component = "shared_experts" if experts else "mlp"
    mlp = (
        Linear("shared_mlp.input_linear", h, 2 * shared, False, component, "column"),
        Linear("shared_mlp.output_linear", shared, h, False, component, "row"),
    )
    if not experts:
        return mlp, None
    top_k = c.integer("num_experts_per_tok", default=2)
    if top_k > experts:
        raise SpecError(
            "config.num_experts_per_tok", f"must be <= the number of experts ({experts})", top_k
        )
    inter = c.integer("intermediate_size", default=11008)
    routed = (
        router("block_sparse_moe.router", h, experts),
        *routed_experts("block_sparse_moe.experts", h, inter, experts, top_k),
    )
    return (*routed, *mlp), MoESpec(experts, top_k, inter, shared, layers)
