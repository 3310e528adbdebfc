"""gpt-oss (OpenAI, 2025): every layer a mixture of experts, attention alternating between a
sliding window and the whole context.

As transformers 5 builds it (``modeling_gpt_oss.py``): grouped-query attention with biases on
q, k, v and o (``attention_bias``, true by default) and one learned *sink* logit per query head
(``self_attn.sinks``, a Param: the softmax's extra column, no matmul); ``layer_types`` says which
layers attend in a ``sliding_window`` (128 tokens; sliding first, then full, when the config
does not list them); the MLP is ``mlp.router`` (a linear with bias) over ``num_local_experts``
experts fused with their biases (``gate_up_proj`` and ``gate_up_proj_bias``, ``down_proj`` and
``down_proj_bias``), ``num_experts_per_tok`` a token, their gate and up projections clamped to
``swiglu_limit`` before the activation (``MoESpec.activation_clamp``); two RMSNorms a layer, an
untied head; YaRN rotary embeddings (``rope_scaling``, factor 32: cos and sin scaled by
``0.1 ln 32 + 1``, ``ModelSpec.rope_mscale``).

The checkpoints ship their experts in MXFP4 (``quantization_config``): the spec counts
parameters, whatever their format, and says so in its notes; the weight format is the
precision the planner is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from estimator.errors import SpecError
from estimator.inputs.architecture import Param
from estimator.inputs.families.blocks import (
    PLAIN_LAYER_TYPES,
    layer_types,
    routed_experts,
    router,
    typed_windows,
)
from estimator.inputs.families.decoder import (
    attention_layer,
    config_defaults,
    decoder,
    read_dims,
    read_experts,
    yarn_attention_factor,
)
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "local_experts", "quantization_notes", "read"]

MODEL_TYPES = ("gpt_oss",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    experts, top_k, inter = local_experts(c, defaults)
    pattern = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(d.layers)]
    types = layer_types(c, d.layers, PLAIN_LAYER_TYPES, pattern)
    windows = typed_windows(c, types, defaults["sliding_window"])
    bias = c.flag("attention_bias", defaults["attention_bias"])
    moe = (
        router("mlp.router", d.hidden, experts, bias=True),
        *routed_experts("mlp.experts", d.hidden, inter, experts, top_k, bias=True),
    )
    sinks = (Param("self_attn.sinks", d.heads, "attention", d.heads),)
    layers = [
        attention_layer(d, w, moe, qkv_bias=bias, o_bias=bias, moe=True)._replace(extras=sinks)
        for w in windows
    ]
    clamp = c.number("swiglu_limit", default=defaults["swiglu_limit"])
    if not clamp > 0:  # also refuses NaN
        raise SpecError("config.swiglu_limit", "must be > 0", clamp)
    spec = MoESpec(experts, top_k, inter, 0, d.layers, activation_clamp=clamp)
    activation = c.text("hidden_act", default="silu")
    return decoder(
        c, ident, d, layers, moe=spec, activation=activation, notes=quantization_notes(c),
        rope_mscale=yarn_attention_factor(c),
    )  # fmt: skip


def local_experts(c: ConfigReader, defaults: Mapping[str, Any]) -> tuple[int, int, int]:
    """``num_local_experts`` experts (or its alias ``num_experts``, which wins where both are
    set, as in transformers), ``num_experts_per_tok`` a token, each of ``intermediate_size``."""
    return read_experts(
        c,
        ("num_experts", "num_local_experts"),
        defaults["num_local_experts"],
        defaults["num_experts_per_tok"],
        "intermediate_size",
        defaults["intermediate_size"],
    )


def quantization_notes(c: ConfigReader) -> list[str]:
    """What the checkpoint's ``quantization_config`` says its weights ship as (a note only)."""
    q = c.raw.get("quantization_config")
    if not isinstance(q, dict) or not q.get("quant_method"):
        return []
    kept = q.get("modules_to_not_convert") or []
    rest = f", all but {', '.join(map(str, kept))}" if kept else ""
    shipped = (
        " (precision mxfp4-experts stores the experts as shipped)"
        if q["quant_method"] == "mxfp4"
        else ""
    )
    return [
        f"The checkpoint ships quantized weights (quantization_config: {q['quant_method']}{rest});"
        " parameters are counted in elements and stored in the precision the plan names"
        f"{shipped}."
    ]
