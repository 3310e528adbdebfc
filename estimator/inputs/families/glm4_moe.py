"""GLM-4.5, GLM-4.5-Air, GLM-4.6 and GLM-4.7 (``glm4_moe``, Z.ai): grouped-query attention with
biases on q/k/v only (``attention_bias``; ``o_proj`` never has one) and per-head q/k RMSNorms
where ``use_qk_norm``, over DeepSeek-V3's feed-forward stack: ``first_k_dense_replace`` dense
layers, then a router (its ``e_score_correction_bias`` is a buffer, not counted), fused routed
experts and ``n_shared_experts`` shared ones (transformers' ``Glm4MoeMoE``). Rotary positions on
``partial_rotary_factor`` of each head change no count. No sliding windows.

transformers does not build the multi-token-prediction layers (``num_nextn_predict_layers``,
loaded apart for speculative decoding): they are not counted, so GLM-4.5 reads 352.8B against
the model card's 355B (the Hub's safetensors listing, 357B, holds the ~4B MTP layer).
"""

from __future__ import annotations

from estimator.inputs.families.decoder import config_defaults, read_dims
from estimator.inputs.families.deepseek import gqa_moe_decoder
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("glm4_moe",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    d = read_dims(c, config_defaults(c.model_type))
    return gqa_moe_decoder(
        c,
        ident,
        d,
        (None,) * d.layers,
        qkv_bias=c.flag("attention_bias", False),
        o_bias=False,
        qk_norm=c.flag("use_qk_norm", False),
    )
