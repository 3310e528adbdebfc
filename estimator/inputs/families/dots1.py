"""dots.llm1 (``dots1``, rednote-hilab): Qwen3-style attention (grouped-query, per-head
``q_norm``/``k_norm`` RMSNorms always, ``attention_bias`` on q/k/v and o alike) over DeepSeek-V3's
feed-forward stack: ``first_k_dense_replace`` dense layers, then a router (its
``e_score_correction_bias`` is a buffer, not counted), fused routed experts and
``n_shared_experts`` shared ones (transformers' ``Dots1MoE``).

The config class gives no default for ``n_routed_experts``, ``num_experts_per_tok`` or
``n_shared_experts`` (transformers cannot build a model without them): a config must set them.
Sliding windows as ``Dots1Config`` places them: ``layer_types`` where given, else layers from
``max_window_layers`` on attend in ``sliding_window`` tokens (none where the window is null).
"""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.inputs.families.decoder import config_defaults, read_dims
from estimator.inputs.families.deepseek import gqa_moe_decoder
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("dots1",)
_LAYER_TYPES = ("full_attention", "sliding_attention")


def read(c: ConfigReader, ident: str) -> ModelSpec:
    d = read_dims(c, config_defaults(c.model_type))
    bias = c.flag("attention_bias", False)
    windows = _windows(c, d.layers)
    return gqa_moe_decoder(c, ident, d, windows, qkv_bias=bias, o_bias=bias, qk_norm=True)


def _windows(c: ConfigReader, layers: int) -> tuple[int | None, ...]:
    defaults = config_defaults(c.model_type)
    window = None
    if c.raw.get("sliding_window", 0) is not None:  # null: no window anywhere
        window = c.integer("sliding_window", default=defaults["sliding_window"])
    types = c.raw.get("layer_types")
    if types is None:
        first = c.integer("max_window_layers", default=defaults["max_window_layers"], minimum=0)
        types = [_LAYER_TYPES[bool(window) and i >= first] for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or set(types) - set(_LAYER_TYPES):
        raise SpecError(
            "config.layer_types",
            f"must list 'full_attention' or 'sliding_attention' for each of the {layers} layers",
            types,
        )
    return tuple(window if t == "sliding_attention" else None for t in types)
