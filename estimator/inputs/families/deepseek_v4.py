"""DeepSeek-V4 (DeepSeek-AI, 2026): Flash and Pro, as transformers 5.23 builds them
(``modeling_deepseek_v4.py``, ``configuration_deepseek_v4.py``).

- Attention: one shared key-and-value head (``self_attn.kv_proj`` to ``head_dim``, its
  ``kv_norm``; keys are values), queries through a ``q_lora_rank`` latent (``q_a_proj``,
  ``q_a_norm``, ``q_b_proj``, then a weightless RMSNorm per head), a learned sink logit per
  head (``sinks``) and a grouped low-rank output: ``o_a_proj`` maps each of ``o_groups`` groups
  of heads to ``o_lora_rank`` (transformers' ``DeepseekV4GroupedLinear``, an ``nn.Linear`` of
  ``heads x head_dim / o_groups -> o_groups x o_lora_rank``: a block-diagonal map, hence that
  count and one matmul of it per token), ``o_b_proj`` mixes them to ``hidden_size``. Every
  projection is bias-free (``attention_bias`` is not read by the modelling code: a config that
  sets it is refused, as are ``num_key_value_heads`` other than 1 and ``o_groups`` that do not
  divide the heads' width).
- Every layer attends in a ``sliding_window``; ``layer_types`` (or the older per-layer
  ``compress_ratios``: 0, 4 or 128) add compressed keys to a layer (``Compressor``):
  ``compressed_sparse_attention`` (CSA) pools every ``compress_rates`` tokens (4) into an entry
  from overlapping windows (``self_attn.compressor.{kv_proj, gate_proj}`` to ``2 head_dim``,
  ``position_bias``, ``kv_norm``) and keeps ``index_topk`` of them per query, picked by a
  lightning indexer (``compressor.indexer``: its own compressor at ``index_head_dim``,
  ``q_b_proj`` from the q latent to ``index_n_heads x index_head_dim``, ``scorer.weights_proj``);
  ``heavily_compressed_attention`` (HCA) pools every 128 tokens, without overlap or indexer, and
  attends to every entry. The config class's default is two HCA layers, then CSA and HCA
  alternating. The KV cache keeps the window's keys and what the compressors hold
  (``memory.inference.compressed_cache_elems``); all of it is whole on every TP rank.
- Hyper-connections (mHC, the report's section 2.2): the residual is ``hc_mult`` copies of the
  hidden state. Before each block ``attn_hc``/``ffn_hc`` project the normalized streams
  (``fn``: ``hc_mult hidden -> (2 + hc_mult) hc_mult``, plus ``base`` and three ``scale``) into
  the weights that collapse them into the block's input, spread its output and mix them (a
  ``hc_mult x hc_mult`` matrix per token, Sinkhorn-normalized over ``hc_sinkhorn_iters``
  elementwise steps); ``hc_head`` collapses them before the final norm (``ModelSpec``'s
  ``hyper_streams``).
- Every layer is a mixture of experts: the router ``mlp.gate`` (``scoring_func`` sqrtsoftplus
  by default; ``e_score_correction_bias`` is a buffer), ``n_routed_experts`` fused experts of
  ``moe_intermediate_size`` (``num_experts_per_tok`` a token), and one shared expert of the same
  width (``mlp.shared_experts``, biased by ``mlp_bias``; transformers builds exactly one, so
  ``n_shared_experts`` other than 1 is refused). The first ``num_hash_layers`` layers
  (``mlp_layer_types`` ``hash_moe``) pick their experts from a frozen token-to-expert table
  (``tid2eid``, a buffer) but keep ``mlp.gate`` to weigh them: the same parameters and matmuls.
- transformers does not build the multi-token-prediction layer (``num_nextn_predict_layers``;
  its checkpoint keys are ignored on load): it is not counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from estimator.errors import SpecError
from estimator.inputs.architecture import AttentionCore, Compressor, Linear, Norm, Param
from estimator.inputs.families.blocks import (
    Layer,
    gated_mlp,
    rms,
    routed_experts,
    router,
    span,
)
from estimator.inputs.families.decoder import (
    Dims,
    config_defaults,
    decoder,
    read_dims,
    read_experts,
    standard_layer_norms,
)
from estimator.inputs.families.gpt_oss import quantization_notes
from estimator.inputs.model import ModelSpec, MoESpec
from estimator.inputs.reader import ConfigReader

__all__ = ["LAYER_TYPES", "MODEL_TYPES", "TIME_NOTE", "read"]

MODEL_TYPES = ("deepseek_v4",)
SLIDING, CSA, HCA = (
    "sliding_attention",
    "compressed_sparse_attention",
    "heavily_compressed_attention",
)
LAYER_TYPES = (SLIDING, CSA, HCA)
# the layer type each value of the older per-layer ``compress_ratios`` stands for
_RATIO_TYPES = {0: SLIDING, 4: CSA, 128: HCA}
_KIND_NAMES = {SLIDING: "moe-sliding", CSA: "moe-csa", HCA: "moe-hca"}
_MLP_LAYER_TYPES = ("hash_moe", "moe")
TIME_NOTE = (
    "DeepSeek-V4: parameters and forward FLOPs equal transformers 5.23's and the KV cache what its"
    " caches hold (the shared key-and-value head once a token); the time model is approximate:"
    " the compressors' softmax-gated pooling, the indexer's top-k selection and the"
    " hyper-connections' Sinkhorn steps (elementwise and selection kernels) are not timed, and a"
    " decode step is charged a CSA layer's whole compressed cache (it reads index_topk of its"
    " entries and every indexer key). The multi-token-prediction module a checkpoint ships is"
    " neither counted nor timed (transformers does not build it)."
)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    defaults = config_defaults(c.model_type)
    d = read_dims(c, defaults)
    if d.kv_heads != 1:
        raise SpecError(
            "config.num_key_value_heads",
            "must be 1: DeepSeek-V4 attends with one shared key-and-value head (transformers"
            " builds that whatever the config says)",
            d.kv_heads,
        )
    _refuse_ignored(c, defaults)
    types = _attention_types(c, d.layers)
    _per_layer(c, "mlp_layer_types", d.layers, _MLP_LAYER_TYPES)  # hash or top-k: same modules
    rates = _compress_rates(c, defaults, types)
    q_lora = _q_lora_rank(c, defaults)
    attention = _attention(c, d, q_lora, defaults)
    window = span(c, "sliding_window", defaults["sliding_window"])
    cores = {t: _core(c, d, q_lora, defaults, window, t, rates) for t in sorted(set(types))}
    experts, top_k, width = read_experts(
        c,
        ("num_local_experts", "n_routed_experts"),
        defaults["n_routed_experts"],
        defaults["num_experts_per_tok"],
        "intermediate_size",  # an alias transformers maps onto moe_intermediate_size
        c.integer("moe_intermediate_size", default=defaults["moe_intermediate_size"]),
    )
    ffn = (
        router("mlp.gate", d.hidden, experts),
        *routed_experts("mlp.experts", d.hidden, width, experts, top_k),
        *gated_mlp(
            "mlp.shared_experts", d.hidden, width, c.flag("mlp_bias", False), "shared_experts"
        ),
    )
    streams = c.integer("hc_mult", default=defaults["hc_mult"])
    hyper = _hyper_connections(d.hidden, streams)
    norms = (
        *standard_layer_norms(d.hidden),
        rms("self_attn.q_a_norm", q_lora),
        rms("self_attn.kv_norm", d.head_dim),
    )
    sinks = Param("self_attn.sinks", d.heads, "attention", d.heads)
    layers = []
    for t in types:
        core, compressor = cores[t]
        parts = _joined(
            _Modules(attention, norms, (sinks,)),
            compressor,
            _Modules(ffn),
            hyper,
        )
        layers.append(Layer(_KIND_NAMES[t], parts.linears, parts.norms, core, extras=parts.extras))
    spec = MoESpec(experts, top_k, width, width, d.layers)
    activation = c.text("hidden_act", default="silu")
    notes = [*quantization_notes(c), TIME_NOTE]
    if c.raw.get("expert_dtype"):
        notes.append(f"Its routed experts ship as {c.raw['expert_dtype']} (expert_dtype).")
    model = decoder(
        c, ident, d, layers, moe=spec, activation=activation, notes=notes, hyper_streams=streams
    )
    # The multi-token-prediction layer attends over the sliding window only (the checkpoint's
    # compress_ratios lists it last, as 0): a training plan's MTP runs that kind.
    sliding = [k for k, kind in enumerate(model.kinds) if kind.name == _KIND_NAMES[SLIDING]]
    return replace(model, mtp_kinds=tuple(sliding[:1]))


def _refuse_ignored(c: ConfigReader, defaults: Mapping[str, Any]) -> None:
    """Fields transformers' DeepSeek-V4 reads past: a config setting them otherwise describes a
    model it would not build."""
    if c.flag("attention_bias", False):
        raise SpecError(
            "config.attention_bias",
            "must be false: DeepSeek-V4's attention projections have no biases (transformers"
            " does not read attention_bias)",
            True,
        )
    shared = c.integer("n_shared_experts", default=defaults["n_shared_experts"], minimum=0)
    if shared != 1:
        raise SpecError(
            "config.n_shared_experts",
            "must be 1: transformers' DeepSeek-V4 builds one shared expert of"
            " moe_intermediate_size whatever the config says",
            shared,
        )


def _attention_types(c: ConfigReader, layers: int) -> tuple[str, ...]:
    """Each layer's attention: ``layer_types``, else the older ``compress_ratios`` (0, 4 or 128
    per layer), else the config class's pattern (two HCA layers, then CSA and HCA
    alternating)."""
    listed = _per_layer(c, "layer_types", layers, LAYER_TYPES)
    if listed is not None:
        return listed
    ratios = _per_layer(c, "compress_ratios", layers, tuple(_RATIO_TYPES))
    if ratios is not None:
        return tuple(_RATIO_TYPES[r] for r in ratios)
    alternating = [CSA if i % 2 else HCA for i in range(max(layers - 2, 0))]
    return tuple([HCA] * min(layers, 2) + alternating)


def _per_layer(
    c: ConfigReader, name: str, layers: int, allowed: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    """A per-layer list of the config cut to the layers, as transformers cuts it (a checkpoint
    lists its MTP layer's too); None where absent. Refused where shorter, or where a value is
    not ``allowed``."""
    values = c.raw.get(name)
    if values is None:
        return None
    if (
        not isinstance(values, list)
        or len(values) < layers
        or any(isinstance(v, bool) or v not in allowed for v in values)
    ):
        named = ", ".join(map(repr, allowed))
        raise SpecError(
            f"config.{name}", f"must list {named} for each of the {layers} layers", values
        )
    return tuple(values[:layers])


def _compress_rates(
    c: ConfigReader, defaults: Mapping[str, Any], types: Sequence[str]
) -> dict[str, int]:
    """Tokens per compressed entry of each compressed type: ``compress_rates`` (the config
    class's ``{CSA: 4, HCA: 128}`` where absent), then the older ``compress_rate_csa`` and
    ``compress_rate_hca`` over it."""
    given = c.raw.get("compress_rates")
    if given is not None and not isinstance(given, dict):
        raise SpecError("config.compress_rates", "must map layer types to token counts", given)
    rates = dict(defaults["compress_rates"] if given is None else given)
    for t, legacy in ((CSA, "compress_rate_csa"), (HCA, "compress_rate_hca")):
        if c.get(legacy) is not None:
            rates[t] = c.integer(legacy)
    out = {}
    for t in sorted(set(types) - {SLIDING}):
        rate = rates.get(t)
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise SpecError(
                "config.compress_rates", f"must give {t} layers a number of tokens >= 1", rate
            )
        out[t] = rate
    return out


def _q_lora_rank(c: ConfigReader, defaults: Mapping[str, Any]) -> int:
    if "q_lora_rank" in c.raw and c.raw["q_lora_rank"] is None:
        raise SpecError(
            "config.q_lora_rank",
            "must be a rank: DeepSeek-V4's queries always pass through the q latent",
        )
    return c.integer("q_lora_rank", default=defaults["q_lora_rank"])


def _attention(
    c: ConfigReader, d: Dims, q_lora: int, defaults: Mapping[str, Any]
) -> tuple[Linear, ...]:
    """The projections every layer's attention has (the compressors' come with their type).
    Tensor parallelism splits the query heads and the output groups; the down-projections and
    the single key-and-value head are whole on every rank."""
    h, heads, dim = d.hidden, d.heads, d.head_dim
    groups = c.integer("o_groups", default=defaults["o_groups"])
    rank = c.integer("o_lora_rank", default=defaults["o_lora_rank"])
    if (heads * dim) % groups:
        raise SpecError(
            "config.o_groups",
            f"must divide num_attention_heads x head_dim = {heads * dim} (the grouped output"
            " projection splits the heads' outputs into o_groups equal groups)",
            groups,
        )
    per_group, grouped = heads * dim // groups, groups * rank
    return (
        Linear("self_attn.q_a_proj", h, q_lora, False, "attention", "replicated"),
        Linear("self_attn.q_b_proj", q_lora, heads * dim, False, "attention", "column", heads),
        Linear("self_attn.kv_proj", h, dim, False, "attention", "replicated"),
        Linear("self_attn.o_a_proj", per_group, grouped, False, "attention", "column", groups),
        Linear("self_attn.o_b_proj", grouped, h, False, "attention", "row", groups),
    )


class _Modules(NamedTuple):
    """The modules of a layer beside its attention core: linears, norms and other parameters."""

    linears: tuple[Linear, ...] = ()
    norms: tuple[Norm, ...] = ()
    extras: tuple[Param, ...] = ()


def _joined(*parts: _Modules) -> _Modules:
    """The modules of ``parts``, in their order."""
    return _Modules(
        tuple(m for p in parts for m in p.linears),
        tuple(n for p in parts for n in p.norms),
        tuple(x for p in parts for x in p.extras),
    )


def _core(
    c: ConfigReader,
    d: Dims,
    q_lora: int,
    defaults: Mapping[str, Any],
    window: int,
    layer_type: str,
    rates: Mapping[str, int],
) -> tuple[AttentionCore, _Modules]:
    """A layer type's attention core and its compressor's linears, norms and position biases
    (none for a sliding layer)."""
    h, dim = d.hidden, d.head_dim

    def core(compressor: Compressor | None) -> AttentionCore:
        return AttentionCore(
            d.heads, 1, dim, dim, window, dim, cache_shards_with_tp=False, compressor=compressor
        )

    if layer_type == SLIDING:
        return core(None), _Modules()
    ratio = rates[layer_type]
    if layer_type == HCA:
        return core(Compressor(ratio, dim)), _pooling("self_attn.compressor", h, dim, ratio, 1)
    heads = c.integer("index_n_heads", default=defaults["index_n_heads"])
    index_dim = c.integer("index_head_dim", default=defaults["index_head_dim"])
    topk = c.integer("index_topk", default=defaults["index_topk"])
    rope = _rope_dim(c, dim)
    if index_dim < rope:
        raise SpecError(
            "config.index_head_dim",
            f"must be >= the rotary dimensions ({rope}), which the indexer's queries and keys"
            " carry",
            index_dim,
        )
    indexer = "self_attn.compressor.indexer"
    scoring = _Modules(
        (
            Linear(
                f"{indexer}.q_b_proj", q_lora, heads * index_dim, False, "attention", "replicated"
            ),
            Linear(f"{indexer}.scorer.weights_proj", h, heads, False, "attention", "replicated"),
        )
    )
    modules = _joined(
        _pooling("self_attn.compressor", h, dim, ratio, 2),
        _pooling(indexer, h, index_dim, ratio, 2),
        scoring,
    )
    return core(Compressor(ratio, dim, True, topk, heads, index_dim)), modules


def _pooling(prefix: str, h: int, dim: int, ratio: int, series: int) -> _Modules:
    """One compressor's pooling (``kv_proj`` and ``gate_proj`` to ``series x dim``, a
    ``position_bias`` per window slot, ``kv_norm`` over the pooled entry), whole on every TP
    rank: the entry it makes is the layer's one shared head."""
    width = series * dim
    return _Modules(
        (
            Linear(f"{prefix}.kv_proj", h, width, False, "attention", "replicated"),
            Linear(f"{prefix}.gate_proj", h, width, False, "attention", "replicated"),
        ),
        (rms(f"{prefix}.kv_norm", dim),),
        (Param(f"{prefix}.position_bias", ratio * width, "attention"),),
    )


def _rope_dim(c: ConfigReader, head_dim: int) -> int:
    """The rotary dimensions: ``qk_rope_head_dim`` where the config gives it, else
    ``partial_rotary_factor`` (64 / 512 by default) of ``head_dim``."""
    if c.get("qk_rope_head_dim") is not None:
        return c.integer("qk_rope_head_dim")
    return int(head_dim * c.number("partial_rotary_factor", default=64 / 512))


def _hyper_connections(h: int, streams: int) -> _Modules:
    """``attn_hc`` and ``ffn_hc``: each a projection ``fn`` of the flattened streams to the
    ``(2 + streams) x streams`` weights (pre, post and the mixing matrix), their ``base`` and
    three ``scale``s; whole on every TP rank."""
    weights = (2 + streams) * streams
    linears, params = [], []
    for block in ("attn_hc", "ffn_hc"):
        linears.append(
            Linear(f"{block}.fn", streams * h, weights, False, "hyper_connections", "replicated")
        )
        params += [
            Param(f"{block}.base", weights, "hyper_connections"),
            Param(f"{block}.scale", 3, "hyper_connections"),
        ]
    return _Modules(tuple(linears), extras=tuple(params))
