"""Nemotron-H and Nemotron 3 (NVIDIA): a hybrid stack of single-block layers, each a pre-norm
(one RMSNorm) around one mixer: Mamba-2 (``M``), grouped-query attention without rotary
positions (``*``), a squared-ReLU MLP (``-``), or a mixture of squared-ReLU experts with a shared
expert and an optional latent projection (``E``). The pattern comes from ``layers_block_type``
(or the older ``hybrid_override_pattern`` string); it, not ``num_hidden_layers``, sets the depth,
as in transformers' ``NemotronHConfig``. Multi-token-prediction layers are not built by
transformers (their weights are ignored when loading) and are not counted here either; nor are
``attention_bias`` and ``tie_word_embeddings``, which ``NemotronHForCausalLM`` ignores.
"""

from __future__ import annotations

from dataclasses import replace

from estimator.errors import SpecError
from estimator.inputs.architecture import Component, Linear
from estimator.inputs.families.blocks import (
    Layer,
    attention_linears,
    kv_heads,
    rms,
    router,
    standard_core,
)
from estimator.inputs.families.decoder import Dims, decoder
from estimator.inputs.families.ssm import mamba2_mixer
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("nemotron_h",)
PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}  # transformers' remap
NAMES = {"linear_attention": "mamba", "full_attention": "attention", "mlp": "mlp", "moe": "moe"}


def _block_types(c: ConfigReader) -> list[str]:
    types = c.raw.get("layers_block_type") or c.raw.get("layer_types")
    if types is None:
        pattern = c.raw.get("hybrid_override_pattern")
        if pattern is None:
            types = ["linear_attention", "moe", "full_attention", "mlp"]  # the config's default
        elif not isinstance(pattern, str) or set(pattern) - set(PATTERN):
            raise SpecError(
                "config.hybrid_override_pattern", "must be a string of M, *, - and E", pattern
            )
        else:
            types = [PATTERN[ch] for ch in pattern]
    if isinstance(types, list):
        types = [LEGACY.get(str(t), str(t)) for t in types]
    if not isinstance(types, list) or not types or set(types) - set(NAMES):
        raise SpecError(
            "config.layers_block_type",
            "must be a non-empty list of linear_attention, full_attention, mlp and moe",
            types,
        )
    return list(types)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    types = _block_types(c)
    h = c.integer("hidden_size", default=4096)
    heads = c.integer("num_attention_heads", default=32)
    head_dim = c.integer("head_dim", "attention_head_dim", default=128)
    d = Dims(
        hidden=h,
        layers=len(types),
        heads=heads,
        vocab=c.integer("vocab_size", default=131072),
        kv_heads=kv_heads(c, heads, 8),
        head_dim=head_dim,
        tie=False,  # NemotronHForCausalLM ties nothing, whatever tie_word_embeddings says
    )
    mlp_bias = c.flag("mlp_bias", False)
    norm = (rms("norm", h),)
    layers: list[Layer] = []
    moe: MoESpec | None = None
    for kind in types:
        if kind == "linear_attention":
            m = mamba2_mixer(
                "mixer",
                h,
                heads=c.integer("mamba_num_heads", default=128),
                head_dim=c.integer("mamba_head_dim", default=64),
                groups=c.integer("n_groups", "mamba_n_groups", default=8),
                state=c.integer("ssm_state_size", default=128),
                conv_kernel=c.integer("conv_kernel", "mamba_d_conv", default=4),
                chunk=c.integer("chunk_size", "mamba_chunk_size", default=128),
                proj_bias=c.flag("use_bias", False),
                conv_bias=c.flag("use_conv_bias", True),
                state_fp32=c.text("mamba_ssm_cache_dtype", default="float32") == "float32",
            )
            layers.append(Layer("mamba", m.linears, norm, None, mixer=m.core, extras=m.extras))
        elif kind == "full_attention":
            # q/k/v/o have no bias in NemotronHAttention, whatever attention_bias says
            linears = attention_linears(h, heads, d.kv_heads, head_dim, False, False)
            renamed = tuple(
                replace(x, name=x.name.replace("self_attn.", "mixer.")) for x in linears
            )
            core = standard_core(heads, d.kv_heads, head_dim, None)
            layers.append(Layer("attention", renamed, norm, core))
        elif kind == "mlp":
            inter = c.integer("intermediate_size", default=21504)
            layers.append(Layer("mlp", _mlp("mixer", h, inter, mlp_bias, "mlp"), norm, None))
        else:
            ffn, moe = _moe(c, h, mlp_bias, types.count("moe"))
            layers.append(Layer("moe", ffn, norm, None))
    spec = decoder(
        c, ident, d, layers, moe=moe, activation=c.text("mlp_hidden_act", default="relu2")
    )
    notes = spec.notes
    if latent := c.opt_integer("moe_latent_size"):
        notes = (*notes, _LATENT_NOTE.format(latent=latent, h=h, ratio=h / latent))
    return replace(spec, final_norm=rms("norm_f", h), gated_mlp=False, notes=notes)


# Known and not yet fixed (docs/validation.md, "Training throughput"): said on every estimate.
_LATENT_NOTE = (
    "Latent MoE (moe_latent_size {latent}): Megatron-Core's token dispatcher moves latent-width"
    " tokens, but the step time counts the expert all-to-all and token permutation at the"
    " hidden width ({h}, {ratio:g}x the traffic), while the hybrid layers' compute is"
    " under-counted: on Megatron-Bridge's published Nemotron 3 Super / Ultra runs the two"
    " partly offset (from 52% under to 1% over the measured throughput); the step-time"
    " breakdown is approximate."
)


def _mlp(prefix: str, h: int, inter: int, bias: bool, component: Component) -> tuple[Linear, ...]:
    """A squared-ReLU MLP: ``up_proj`` then ``down_proj`` (no gate)."""
    return (
        Linear(f"{prefix}.up_proj", h, inter, bias, component, "column"),
        Linear(f"{prefix}.down_proj", inter, h, bias, component, "row"),
    )


def _moe(
    c: ConfigReader, h: int, bias: bool, moe_layers: int
) -> tuple[tuple[Linear, ...], MoESpec]:
    """``mixer.gate`` (no bias; its score-correction bias is a buffer), the routed experts
    (``up_proj`` and ``down_proj`` stacked [E, out, in], over the latent width when
    ``moe_latent_size`` is set, with ``fc1/fc2_latent_proj`` around them) and one shared expert."""
    experts = c.integer("n_routed_experts", "num_local_experts", default=8)
    top_k = c.integer("num_experts_per_tok", default=2)
    if top_k > experts:
        raise SpecError(
            "config.num_experts_per_tok", f"must be <= the number of experts ({experts})", top_k
        )
    inter = c.integer("moe_intermediate_size", default=7688)
    shared = c.integer("moe_shared_expert_intermediate_size", default=7688)
    latent = c.opt_integer("moe_latent_size")
    width = latent or h
    linears = [router("mixer.gate", h, experts)]
    if latent:
        linears.append(Linear("mixer.fc1_latent_proj", h, latent, bias, "mlp", "replicated"))
    linears += [
        Linear(
            "mixer.experts.up_proj", width, inter, False, "experts", "column", inter, experts, top_k
        ),
        Linear(
            "mixer.experts.down_proj", inter, width, False, "experts", "row", inter, experts, top_k
        ),
    ]
    if latent:
        linears.append(Linear("mixer.fc2_latent_proj", latent, h, bias, "mlp", "replicated"))
    linears += _mlp("mixer.shared_experts", h, shared, bias, "shared_experts")
    return tuple(linears), MoESpec(experts, top_k, inter, shared, moe_layers)
