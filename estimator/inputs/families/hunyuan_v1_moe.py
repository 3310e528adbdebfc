"""Hunyuan-A13B (Tencent, 2025), transformers' ``hunyuan_v1_moe``: every layer a mixture of
experts beside one shared MLP, as transformers 5 builds it (``modeling_hunyuan_v1_moe.py``).

- Attention with ``attention_bias`` on q, k, v and o; after rotary positions q and k are
  RMS-normalized per head (``self_attn.query_layernorm``, ``self_attn.key_layernorm`` of
  ``head_dim``). ``head_dim`` is required: the config class defaults it to null, with which
  transformers cannot build the attention.
- ``mlp.gate.wg`` (no bias, kept in fp32) scores ``num_experts`` fused experts, ``moe_topk`` a
  token (one number, or one per layer); the experts and ``mlp.shared_mlp`` are all of
  ``intermediate_size``.

Refused: a per-layer ``moe_topk`` that differs between layers, a per-layer ``num_experts``
(transformers builds the experts from one number), and the remote-code fields transformers
ignores but that describe another model: cross-layer KV sharing (``use_cla``), expert widths
other than ``intermediate_size`` (``moe_intermediate_size``) and other than one shared expert
(``num_shared_expert``).
"""

from __future__ import annotations

from typing import Any

from estimator.errors import SpecError
from estimator.inputs.families.blocks import gated_mlp, rms, routed_experts, router
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    read_dims,
    standard_layer_norms,
)
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("hunyuan_v1_moe",)
ALIASES = {"num_experts": "num_local_experts", "moe_topk": "num_experts_per_tok"}


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    if c.get("head_dim") is None:
        raise SpecError(
            "config.head_dim",
            "is required: HunYuanMoEV1Config defaults it to null, which transformers' attention"
            " cannot be built with",
        )
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    _refuse_what_transformers_ignores(c, inter)
    experts = c.integer(_field(c, "num_experts"), default=defaults["num_experts"])
    field, top_k = _top_k(c, d.layers, defaults["moe_topk"])
    if top_k > experts:
        raise SpecError(f"config.{field}", f"must be <= the number of experts ({experts})", top_k)
    bias = c.flag("attention_bias", False)
    moe = (
        router("mlp.gate.wg", d.hidden, experts),
        *routed_experts("mlp.experts", d.hidden, inter, experts, top_k),
        *gated_mlp("mlp.shared_mlp", d.hidden, inter, False, "shared_experts"),
    )
    norms = (
        *standard_layer_norms(d.hidden),
        rms("self_attn.query_layernorm", d.head_dim),
        rms("self_attn.key_layernorm", d.head_dim),
    )
    layer = attention_layer(d, None, moe, qkv_bias=bias, o_bias=bias, norms=norms, moe=True)
    spec = MoESpec(experts, top_k, inter, inter, d.layers)
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, [layer] * d.layers, moe=spec, activation=activation)


def _top_k(c: ConfigReader, layers: int, default: int) -> tuple[str, int]:
    """The field and value of ``moe_topk`` (or its alias): one number, or one per layer (all
    equal: a spec has one top-k)."""
    field = _field(c, "moe_topk")
    listed = c.raw.get(field)
    if not isinstance(listed, list):
        return field, c.integer(field, default=default)
    values = set(c.int_list(field)[:layers])
    if len(listed) < layers or len(values) != 1 or min(values) < 1:
        raise SpecError(
            f"config.{field}",
            f"per-layer top-k is modelled only as one positive number for all {layers} layers",
            listed,
        )
    return field, values.pop()


def _field(c: ConfigReader, field: str) -> str:
    """``field``, or its alias in transformers' ``attribute_map`` where the config sets that:
    the alias wins where both are set, as in transformers."""
    alias = ALIASES[field]
    return alias if c.get(alias) is not None else field


def _refuse_what_transformers_ignores(c: ConfigReader, inter: int) -> None:
    if c.flag("use_cla", False):
        raise SpecError(
            "config.use_cla",
            "cross-layer KV sharing is not built by transformers' hunyuan_v1_moe nor modelled",
            True,
        )
    rules: tuple[tuple[str, Any, str], ...] = (
        ("moe_intermediate_size", inter, "experts of another width than intermediate_size"),
        ("num_shared_expert", 1, "other than one shared MLP"),
    )
    for field, built, what in rules:
        value = c.raw.get(field)
        values = value if isinstance(value, list) else [value]
        if value is not None and any(v != built for v in values):
            raise SpecError(
                f"config.{field}",
                f"describes {what}, which transformers' hunyuan_v1_moe ignores: not modelled",
                value,
            )
