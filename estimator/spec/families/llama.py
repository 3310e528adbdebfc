"""Llama (1, 2, 3.x) and Mistral: grouped-query attention, a gated SiLU MLP, RMSNorm; Mistral
attends in a sliding window by default (``sliding_window``). A family this planner does not know
is read the same way, with a note saying so, unless its config names experts."""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.spec.families.blocks import Layer, attention_linears, gated_mlp, standard_core
from estimator.spec.families.decoder import decoder, layer_name, prelude, standard_layer_norms
from estimator.spec.model import ModelSpec
from estimator.spec.reader import ConfigReader

__all__ = ["DEFAULTS", "MODEL_TYPES", "read", "read_unknown"]

# transformers' config-class defaults for the fields read (a sparse config.json is read as
# transformers reads it)
DEFAULTS = {
    "llama": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
    ),
    "mistral": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
    ),
}
MODEL_TYPES = tuple(DEFAULTS)
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def read(c: ConfigReader, ident: str) -> ModelSpec:
    return _dense(c, ident, DEFAULTS[c.model_type], default_sliding=c.model_type == "mistral")


def read_unknown(c: ConfigReader, ident: str) -> ModelSpec:
    """A ``model_type`` no family module claims: read as Llama-style, with a note; refused when
    its config names experts (a mixture of experts would be read as a dense model)."""
    note = (
        f"model_type {c.model_type!r} is not a known family: read as a Llama-style decoder "
        "(RMSNorm, gated MLP, rotary positions); check the counts."
    )
    return _dense(c, ident, {}, default_sliding=False, note=note)


def _dense(
    c: ConfigReader, ident: str, defaults: dict[str, int], default_sliding: bool, note: str = ""
) -> ModelSpec:
    p = prelude(c, defaults, default_sliding)
    d = p.dims
    if note and c.get(*EXPERT_KEYS):
        raise SpecError(
            "config.model_type",
            f"mixture-of-experts model_type {c.model_type!r} is not supported yet",
            c.model_type,
        )
    inter = c.integer("intermediate_size", default=defaults.get("intermediate_size"))
    layers = [
        Layer(
            layer_name(False, window),
            (
                *attention_linears(
                    d.hidden, d.heads, d.kv_heads, d.head_dim, p.attention_bias, p.attention_bias
                ),
                *gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp"),
            ),
            tuple(standard_layer_norms(d.hidden)),
            standard_core(d.heads, d.kv_heads, d.head_dim, window),
        )
        for window in p.windows
    ]
    activation = c.text("hidden_act", default="silu")
    return decoder(
        c, ident, d, layers, moe=None, activation=activation, notes=[note] if note else []
    )
