"""Llama (1, 2, 3.x) and Mistral: grouped-query attention, a gated SiLU MLP, RMSNorm; Mistral
attends in a sliding window by default (``sliding_window``). A family this planner does not know
is read the same way, with a note saying so, unless its config names experts."""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.inputs.families.blocks import PLAIN_LAYER_TYPES, gated_mlp
from estimator.inputs.families.decoder import attention_layer, config_defaults, decoder, prelude
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "UNKNOWN_NOTE", "UNMODELLED_KEYS", "read", "read_unknown"]

MODEL_TYPES = ("llama", "mistral")
UNKNOWN_NOTE = (
    "model_type {!r} is not a known family: read as a Llama-style decoder (RMSNorm, gated MLP, "
    "rotary positions); the numbers are approximate (exact: false)."
)
# Config keys that name blocks a Llama-style reading does not model: an unknown family whose
# config sets one is refused, naming the keys, instead of being read as a dense Llama.
UNMODELLED_KEYS = {
    "experts": (
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "moe_intermediate_size",
        "num_experts_per_tok",
        "moe_layer_freq",
    ),
    "state-space (Mamba) layers": (
        "ssm_state_size",
        "state_size",
        "d_state",
        "ssm_cfg",
        "time_step_rank",
        "time_step_limit",
        "conv_kernel",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_expand",
        "mamba_n_heads",
        "mamba_num_heads",
        "mamba_head_dim",
        "mamba_d_head",
        "mamba_n_groups",
        "mamba_chunk_size",
    ),
    "per-layer block configurations (NAS)": ("block_configs",),
    "lightning (linear) attention": ("attn_type_list",),
    "a hybrid layer pattern": (
        "hybrid_override_pattern",
        "layers_block_type",
        "block_types",
        "attn_layer_period",
        "attn_layer_offset",
        "attn_layer_indices",
        "full_attn_idxs",
    ),
    "linear attention": (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
        "linear_attn_config",
        "full_attention_interval",
    ),
    "short convolutions": ("conv_L_cache", "conv_dim"),
    "sparse attention": ("index_topk", "index_n_heads", "index_head_dim", "sparse_attention"),
    "multi-head latent attention": ("kv_lora_rank", "q_lora_rank"),
    "chunked attention": ("attention_chunk_size",),
    "cross-attention": ("cross_attention_layers", "is_encoder_decoder", "encoder_layers"),
}


def read(c: ConfigReader, ident: str) -> ModelSpec:
    return _dense(c, ident, default_sliding=c.model_type == "mistral")


def read_unknown(c: ConfigReader, ident: str) -> ModelSpec:
    """A ``model_type`` no family module claims: read as Llama-style, with a note (and marked
    ``exact: false`` by the caller); refused, naming the keys, when its config names blocks such
    a reading does not model (experts, SSM or linear-attention layers, a hybrid pattern, sparse
    or latent attention ...), which would otherwise be read silently as a dense Llama."""
    named = [
        (what, [k for k in keys if c.raw.get(k) not in (None, False, 0, [], "")])
        for what, keys in UNMODELLED_KEYS.items()
    ]
    types = c.raw.get("layer_types")
    if isinstance(types, list):
        odd = sorted({str(t) for t in types} - set(PLAIN_LAYER_TYPES))
        if odd:
            named.append((f"layer types {', '.join(odd)}", ["layer_types"]))
    found = [(what, keys) for what, keys in named if keys]
    if found:
        blocks = "; ".join(f"{what} ({', '.join(keys)})" for what, keys in found)
        raise SpecError(
            "config.model_type",
            f"model_type {c.model_type!r} is not a supported family and its config names blocks"
            f" a Llama-style reading would get wrong: {blocks}",
            c.model_type,
        )
    return _dense(c, ident, default_sliding=False, note=UNKNOWN_NOTE.format(c.model_type))


def _dense(c: ConfigReader, ident: str, default_sliding: bool, note: str = "") -> ModelSpec:
    defaults = config_defaults(c.model_type)
    p = prelude(c, defaults, default_sliding)
    d = p.dims
    inter = c.integer("intermediate_size", default=defaults.get("intermediate_size"))
    mlp = gated_mlp("mlp", d.hidden, inter, p.mlp_bias, "mlp")
    bias = p.attention_bias
    layers = [attention_layer(d, w, mlp, qkv_bias=bias, o_bias=bias) for w in p.windows]
    activation = c.text("hidden_act", default="silu")
    return decoder(
        c, ident, d, layers, moe=None, activation=activation, notes=[note] if note else []
    )
