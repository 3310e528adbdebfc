"""ERNIE 4.5 MoE (Baidu, 2025: ERNIE-4.5-21B-A3B, -300B-A47B), as transformers 5 builds it
(``modeling_ernie4_5_moe.py``).

- A layer ``i`` is a mixture of experts where ``(i + 1) % moe_layer_interval == 0`` and
  ``moe_layer_start_index <= i <= moe_layer_end_index`` (-1: the last layer); the others are a
  dense ``mlp`` of ``intermediate_size``.
- A mixture of experts is ``mlp.gate`` (a weight, no bias, kept in fp32) over
  ``moe_num_experts`` fused experts of ``moe_intermediate_size``, ``moe_k`` a token, plus one
  ``mlp.shared_experts`` MLP as wide as ``moe_num_shared_experts`` experts. The router's
  selection bias ``mlp.gate.moe_statics.e_score_correction_bias`` ([1, experts]) is an
  ``nn.Parameter`` in transformers (frozen, ``requires_grad=False``) where DeepSeek's and
  MiniMax's are buffers: transformers counts it, and so does the spec (a Param of the router).
- No biases and no q/k norms. ``use_bias`` (false in the released models) would bias q, k, v,
  o, the dense and shared MLPs and the LM head (``lm_head.bias``, even where its weight is tied):
  a head bias has no place in the spec, so ``use_bias: true`` is refused. The head is tied to the
  embedding by default (``tie_word_embeddings``: true). transformers does not build the
  multi-token-prediction layer some checkpoints carry (``num_nextn_predict_layers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from estimator.errors import SpecError
from estimator.inputs.architecture import Param
from estimator.inputs.families.blocks import gated_mlp, routed_experts, router
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    read_dims,
    read_experts,
)
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("ernie4_5_moe",)
LAST_LAYER = -1  # moe_layer_end_index: through the last layer


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    experts, top_k, width = read_experts(
        c,
        ("num_experts", "moe_num_experts"),
        defaults["moe_num_experts"],
        defaults["moe_k"],
        "moe_intermediate_size",
        defaults["moe_intermediate_size"],
        top_k_names=("num_experts_per_tok", "moe_k"),
    )
    shared = width * c.integer(
        "moe_num_shared_experts", default=defaults["moe_num_shared_experts"], minimum=0
    )
    if c.flag("use_bias", False):
        raise SpecError(
            "config.use_bias",
            "biases the LM head too (lm_head.bias), which is not modelled; only use_bias: false is",
            True,
        )
    moe = [
        router("mlp.gate", d.hidden, experts),
        *routed_experts("mlp.experts", d.hidden, width, experts, top_k),
    ]
    if shared:
        moe += gated_mlp("mlp.shared_experts", d.hidden, shared, False, "shared_experts")
    statics = (Param("mlp.gate.moe_statics.e_score_correction_bias", experts, "router"),)
    inter = c.integer("intermediate_size", default=defaults["intermediate_size"])
    dense = gated_mlp("mlp", d.hidden, inter, False, "mlp")
    sparse = _moe_layers(c, d.layers, defaults)
    layers = [
        attention_layer(d, None, moe, moe=True)._replace(extras=statics)
        if i in sparse
        else attention_layer(d, None, dense)
        for i in range(d.layers)
    ]
    spec = MoESpec(experts, top_k, width, shared, len(sparse)) if sparse else None
    activation = c.text("hidden_act", default="silu")
    return decoder(c, ident, d, layers, moe=spec, activation=activation)


def _moe_layers(c: ConfigReader, layers: int, defaults: Mapping[str, Any]) -> set[int]:
    start = c.integer("moe_layer_start_index", default=defaults["moe_layer_start_index"], minimum=0)
    end = c.integer(
        "moe_layer_end_index", default=defaults["moe_layer_end_index"], minimum=LAST_LAYER
    )
    last = layers - 1 if end == LAST_LAYER else end
    every = c.integer("moe_layer_interval", default=defaults["moe_layer_interval"])
    return {i for i in range(start, min(last, layers - 1) + 1) if (i + 1) % every == 0}
