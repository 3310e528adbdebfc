"""Qwen3-Next (``Qwen3NextForCausalLM``): gated DeltaNet layers (``linear_attn``) with gated
attention (``self_attn``) on the layers ``layer_types`` names ``full_attention`` (without it,
every ``full_attention_interval``-th layer: 4 by default), each followed by a mixture of
``num_experts`` SwiGLU experts of ``moe_intermediate_size`` (``mlp.gate``, fused
``mlp.experts``, ``num_experts_per_tok`` per token) plus a shared SwiGLU expert of
``shared_expert_intermediate_size`` (``mlp.shared_expert``) scaled by a sigmoid gate
(``mlp.shared_expert_gate``, one output), or, on the layers in ``mlp_only_layers``, off the
``decoder_sparse_step`` or with no experts, by a SwiGLU MLP of ``intermediate_size``. Norms
``input_layernorm``, ``post_attention_layernorm`` (``1 + weight`` RMSNorms), final ``norm``.
Multi-token-prediction weights are not built by transformers and not counted.

Gated attention: ``q_proj`` gives each head's query and its output gate (``2 x heads x
head_dim``), q and k are RMS-normed per head (``q_norm``, ``k_norm``), biases per
``attention_bias``; rotary positions on a quarter of each head count nothing.

Gated DeltaNet (Yang et al. 2024, "Gated Delta Networks"): ``in_proj_qkvz`` gives q and k
(``linear_num_key_heads`` Hk heads of ``linear_key_head_dim`` dk) and v and the gate z
(``linear_num_value_heads`` Hv heads of ``linear_value_head_dim`` dv); ``in_proj_ba`` gives
each value head's beta and step; a depthwise causal convolution of ``linear_conv_kernel_dim``
taps over q, k and v, never biased; ``dt_bias`` and ``A_log`` per value head; one gated
RMSNorm of dv shared by every head (``norm``); ``out_proj``. No bias anywhere. Each value head
keeps a dk x dv state; q and k are shared by Hv / Hk value heads. As a ``RecurrentCore``:
``heads`` = Hv, ``head_dim`` = dv, ``state_dim`` = dk (so ``state_elems`` = Hv x dk x dv),
``groups`` = Hk, ``conv_channels`` = 2 Hk dk + Hv dv, ``chunk`` = 64 (the chunk length of
transformers' ``torch_chunk_gated_delta_rule`` and of flash-linear-attention's
``chunk_gated_delta_rule``: a default argument, not a config field). TP splits the key heads
and the value heads with them, as vLLM does.
"""

from __future__ import annotations

from dataclasses import replace

from estimator.errors import SpecError
from estimator.inputs.architecture import Linear, Param
from estimator.inputs.families.blocks import gated_mlp, layer_types, rms, routed_experts, router
from estimator.inputs.families.decoder import qk_norms, read_experts
from estimator.inputs.families.hybrid import (
    attention_block,
    attention_shape,
    hybrid_layer,
    hybrid_model,
)
from estimator.inputs.families.ssm import Mixer, recurrent_core
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("qwen3_next",)
TYPES = ("linear_attention", "full_attention")
GDN_CHUNK = 64


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=2048)
    layers = c.integer("num_hidden_layers", default=48)
    if c.get("layer_types") is None:  # every full_attention_interval-th layer attends
        every = c.integer("full_attention_interval", default=4)
        types = tuple(
            "full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)
        )
    else:
        types = layer_types(c, layers, TYPES, ())
    a = attention_shape(c, h, heads=16, kv=2, head_dim=256)
    (q, *kvo), core = attention_block(h, a, c.flag("attention_bias", False))
    attention = (replace(q, out_features=2 * q.out_features), *kvo)  # query and gate per head
    deltanet = _gated_deltanet(c, h)
    norms = (rms("input_layernorm", h), rms("post_attention_layernorm", h))
    attention_norms = (*norms, *qk_norms(a.head_dim, a.head_dim))
    experts = c.integer("num_experts", default=512, minimum=0)
    step = c.integer("decoder_sparse_step", default=1)
    only_mlp = set(c.int_list("mlp_only_layers"))
    moe_at = {i for i in range(layers) if experts and i not in only_mlp and (i + 1) % step == 0}
    routed, spec = _moe(c, h, experts, len(moe_at)) if moe_at else ((), None)
    mlp = gated_mlp("mlp", h, c.integer("intermediate_size", default=5632), False, "mlp")
    stack = []
    for i, kind in enumerate(types):
        ffn, suffix = (routed, "-moe") if i in moe_at else (mlp, "")
        if kind == "linear_attention":
            stack.append(hybrid_layer("deltanet" + suffix, norms, ffn, mixer=deltanet))
        else:
            stack.append(
                hybrid_layer(
                    "attention" + suffix, attention_norms, ffn, attention=attention, core=core
                )
            )
    vocab = c.integer("vocab_size", default=151936)
    tie = c.flag("tie_word_embeddings", False)
    return hybrid_model(c, ident, h, stack, vocab=vocab, tie=tie, final_norm="norm", moe=spec)


def _gated_deltanet(c: ConfigReader, h: int) -> Mixer:
    """``linear_attn`` (see the module docstring)."""
    hk = c.integer("linear_num_key_heads", default=16)
    hv = c.integer("linear_num_value_heads", default=32)
    dk = c.integer("linear_key_head_dim", default=128)
    dv = c.integer("linear_value_head_dim", default=128)
    kernel = c.integer("linear_conv_kernel_dim", default=4)
    if hv % hk:
        raise SpecError(
            "config.linear_num_value_heads",
            f"must be a multiple of linear_num_key_heads ({hk}): each key head serves a whole"
            " group of value heads",
            hv,
        )
    conv = 2 * hk * dk + hv * dv
    linears = (
        Linear(
            "linear_attn.in_proj_qkvz", h, 2 * hk * dk + 2 * hv * dv, False, "mixer", "column", hk
        ),
        Linear("linear_attn.in_proj_ba", h, 2 * hv, False, "mixer", "column", hv),
        Linear("linear_attn.out_proj", hv * dv, h, False, "mixer", "row", hv),
    )
    extras = (
        Param("linear_attn.conv1d.weight", conv * kernel, "mixer", hk),
        Param("linear_attn.dt_bias", hv, "mixer", hv),
        Param("linear_attn.A_log", hv, "mixer", hv),
        Param("linear_attn.norm.weight", dv, "norms"),  # one norm shared by every head
    )
    # value heads of dv against a state of dk, the key heads as groups (the module docstring)
    core = recurrent_core("gated_deltanet", hv, dv, dk, hk, conv, kernel, GDN_CHUNK)
    return Mixer(linears, extras, core)


def _moe(c: ConfigReader, h: int, experts: int, layers: int) -> tuple[tuple[Linear, ...], MoESpec]:
    """The router, the routed experts, the shared expert and its one-output gate."""
    _, top_k, inter = read_experts(c, ("num_experts",), experts, 10, "moe_intermediate_size", 512)
    shared = c.integer("shared_expert_intermediate_size", default=512)
    linears = (
        router("mlp.gate", h, experts),
        *routed_experts("mlp.experts", h, inter, experts, top_k),
        *gated_mlp("mlp.shared_expert", h, shared, False, "shared_experts"),
        Linear("mlp.shared_expert_gate", h, 1, False, "shared_experts", "replicated"),
    )
    return linears, MoESpec(experts, top_k, inter, shared, layers)
