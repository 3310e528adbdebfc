"""Llama 4 (Meta, 2025): Scout (16 experts, every layer) and Maverick (128 experts, every other
layer), their language model as transformers 5 builds it (``modeling_llama4.py``).

- Mixture-of-experts layers are those in ``moe_layers``, else every
  ``interleave_moe_layer_step``-th (the last of each step); each has ``feed_forward.router`` (no
  bias) over ``num_local_experts`` fused experts of ``intermediate_size``, a token routed to
  ``num_experts_per_tok``, and one ``feed_forward.shared_expert`` of ``intermediate_size`` every
  token passes through. The other layers are a dense ``feed_forward`` MLP of
  ``intermediate_size_mlp``.
- Attention is chunked on the layers that use rotary positions (``chunked_attention`` in
  ``layer_types``, by default every layer but each ``no_rope_layer_interval``-th, or as
  ``no_rope_layers`` says): a query attends within its aligned ``attention_chunk_size`` block,
  and the cache keeps one block. The NoPE layers attend globally. Both normalize q and k by their
  L2 norm where ``use_qk_norm`` (no parameters) and scale the NoPE layers' queries by position
  (no matmul): neither is counted.
- A Llama 4 checkpoint is multimodal (``Llama4ForConditionalGeneration``): its config carries the
  language model in ``text_config`` (``llama4_text``), which is what is read; the vision encoder
  and projector are not modelled, and the spec says so.

FLOPs: transformers' reference ``Llama4TextMoe`` runs every token through every routed expert
(the unchosen ones scaled by a zero router score), so torch's count of it holds
``num_local_experts / num_experts_per_tok`` times the routed work; the planner counts the work of
the ``num_experts_per_tok`` experts a token is routed to, as grouped-GEMM kernels do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from estimator.errors import SpecError
from estimator.inputs.families.blocks import (
    gated_mlp,
    layer_types,
    routed_experts,
    router,
    span,
    standard_core,
)
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    read_dims,
    read_experts,
)
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "VISION_NOTE", "read"]

MODEL_TYPES = ("llama4", "llama4_text")
LAYER_TYPES = ("full_attention", "chunked_attention")
VISION_NOTE = (
    "Counts Llama 4's language model (text_config); a multimodal checkpoint's vision encoder and"
    " projector (Llama4ForConditionalGeneration's vision_model and multi_modal_projector) are not"
    " counted."
)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    if c.raw.get("model_type") == "llama4":  # the wrapper itself: it has no text_config
        raise SpecError(
            "config.text_config",
            "is required to read a 'llama4' model: its language model is described there",
        )
    defaults = config_defaults("llama4_text")  # also for a text_config that names no model_type
    d = read_dims(c, defaults)
    experts, top_k, inter = read_experts(
        c,
        ("num_local_experts",),
        defaults["num_local_experts"],
        defaults["num_experts_per_tok"],
        "intermediate_size",
        defaults["intermediate_size"],
    )
    dense = gated_mlp(
        "feed_forward",
        d.hidden,
        c.integer("intermediate_size_mlp", default=defaults["intermediate_size_mlp"]),
        False,
        "mlp",
    )
    moe = (
        router("feed_forward.router", d.hidden, experts),
        *routed_experts("feed_forward.experts", d.hidden, inter, experts, top_k),
        *gated_mlp("feed_forward.shared_expert", d.hidden, inter, False, "shared_experts"),
    )
    types = layer_types(c, d.layers, LAYER_TYPES, _rope_layer_types(c, d.layers, defaults))
    chunk = None
    if "chunked_attention" in types:
        chunk = span(c, "attention_chunk_size", defaults["attention_chunk_size"])
    chunked = replace(standard_core(d.heads, d.kv_heads, d.head_dim, None), chunk=chunk)
    sparse = _moe_layers(c, d.layers, defaults)
    bias = c.flag("attention_bias", False)
    layers = []
    for i, kind in enumerate(types):
        layer = attention_layer(
            d, None, moe if i in sparse else dense, qkv_bias=bias, o_bias=bias, moe=i in sparse
        )
        if kind == "chunked_attention":
            layer = layer._replace(name=f"{layer.name}-chunked", core=chunked)
        layers.append(layer)
    spec = MoESpec(experts, top_k, inter, inter, len(sparse)) if sparse else None
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=spec, activation=activation, notes=[VISION_NOTE])


def _rope_layer_types(c: ConfigReader, layers: int, defaults: Mapping[str, Any]) -> list[str]:
    """transformers' default ``layer_types``: chunked where a layer uses rotary positions
    (``no_rope_layers``, else all but every ``no_rope_layer_interval``-th), global where not."""
    rope = c.int_list("no_rope_layers")
    if not rope:
        every = c.integer("no_rope_layer_interval", default=defaults["no_rope_layer_interval"])
        rope = tuple(int((i + 1) % every != 0) for i in range(layers))
    if len(rope) != layers:
        raise SpecError("config.no_rope_layers", f"must give one flag per layer ({layers})", rope)
    return [LAYER_TYPES[1] if r else LAYER_TYPES[0] for r in rope]


def _moe_layers(c: ConfigReader, layers: int, defaults: Mapping[str, Any]) -> set[int]:
    """``moe_layers`` where listed, else every ``interleave_moe_layer_step``-th layer."""
    if c.raw.get("moe_layers") is not None:
        return {i for i in c.int_list("moe_layers") if 0 <= i < layers}
    step = c.integer("interleave_moe_layer_step", default=defaults["interleave_moe_layer_step"])
    return set(range(step - 1, layers, step))
