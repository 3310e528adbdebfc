"""Llama (1, 2, 3.x) and Mistral: grouped-query attention, a gated SiLU MLP, RMSNorm; Mistral
attends in a sliding window by default (``sliding_window``). A family this planner does not know
is read the same way, with a note saying so, unless its config names experts."""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.spec.families.blocks import gated_mlp
from estimator.spec.families.decoder import attention_layer, config_defaults, decoder, prelude
from estimator.spec.model import ModelSpec
from estimator.spec.reader import ConfigReader

__all__ = ["MODEL_TYPES", "UNKNOWN_NOTE", "read", "read_unknown"]

MODEL_TYPES = ("llama", "mistral")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
UNKNOWN_NOTE = (
    "model_type {!r} is not a known family: read as a Llama-style decoder (RMSNorm, gated MLP, "
    "rotary positions); check the counts."
)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    return _dense(c, ident, default_sliding=c.model_type == "mistral")


def read_unknown(c: ConfigReader, ident: str) -> ModelSpec:
    """A ``model_type`` no family module claims: read as Llama-style, with a note; refused when
    its config names experts (a mixture of experts would be read as a dense model)."""
    return _dense(c, ident, default_sliding=False, note=UNKNOWN_NOTE.format(c.model_type))


def _dense(c: ConfigReader, ident: str, default_sliding: bool, note: str = "") -> ModelSpec:
    defaults = config_defaults(c.model_type)
    p = prelude(c, defaults, default_sliding)
    d = p.dims
    if note and c.get(*EXPERT_KEYS):
        raise SpecError(
            "config.model_type",
            f"mixture-of-experts model_type {c.model_type!r} is not supported yet",
            c.model_type,
        )
    inter = c.integer("intermediate_size", default=defaults.get("intermediate_size"))
    mlp = gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp")
    bias = p.attention_bias
    layers = [attention_layer(d, w, mlp, qkv_bias=bias, o_bias=bias) for w in p.windows]
    activation = c.text("hidden_act", default="silu")
    return decoder(
        c, ident, d, layers, moe=None, activation=activation, notes=[note] if note else []
    )
