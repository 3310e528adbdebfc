"""Model specs: a Hugging Face ``config.json`` read into the module inventory of ``architecture``.

Each family's builder mirrors the module list of its ``transformers`` implementation (5.x): same
module names, same shapes, same biases, same norms, the same defaults for fields a config leaves
out. The tests build every catalog model with ``transformers`` on the meta device and require the
parameter count and the forward FLOPs to match exactly, so a quirk written here is a quirk
checked there.

The reader never executes anything from a config and ignores fields it does not use. A family it
does not know is read as a Llama-style decoder (RMSNorm, gated MLP, rotary positions), with a
note saying so; a field that such a reading needs and the config lacks is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from estimator.errors import SpecError
from estimator.spec.architecture import AttentionCore, LayerKind, Linear, Norm

__all__ = ["MoESpec", "ModelSpec", "model_from_config", "supported_model_types", "used_config"]


@dataclass(frozen=True, slots=True)
class MoESpec:
    """Mixture-of-experts routing: ``num_experts`` routed experts, ``top_k`` per token."""

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    shared_intermediate_size: int
    moe_layers: int


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, normalized from its config.

    ``layer_kinds`` gives, per layer, the index into ``kinds``. Sizes are in elements; nothing here
    depends on a data type or a parallel layout.
    """

    id: str
    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    max_seq_len: int | None
    embed_dim: int
    position_embeddings: int
    tie_embeddings: bool
    kinds: tuple[LayerKind, ...]
    layer_kinds: tuple[int, ...]
    embedding_norm: Norm | None
    final_norm: Norm | None
    embedding_projections: tuple[Linear, ...]
    mlp_activation: str
    gated_mlp: bool
    norm_type: str
    attention_dropout: float
    hidden_dropout: float
    moe: MoESpec | None
    config: Mapping[str, Any] = field(repr=False, compare=False)
    notes: tuple[str, ...] = ()

    # --- derived, exact integers -------------------------------------------------------------

    @cached_property
    def memo(self) -> dict[Hashable, Any]:
        """Layout-independent tables other modules derive from this spec once and reuse on every
        estimate (per-layer parameter groups, activation coefficients), keyed by their owner."""
        return {}

    @cached_property
    def kind_counts(self) -> tuple[int, ...]:
        return tuple(self.layer_kinds.count(i) for i in range(len(self.kinds)))

    @cached_property
    def kind_prefix_counts(self) -> tuple[tuple[int, ...], ...]:
        """``kind_prefix_counts[k][i]``: layers of kind k among the first i layers."""
        out = []
        for k in range(len(self.kinds)):
            acc = [0]
            for kind in self.layer_kinds:
                acc.append(acc[-1] + (kind == k))
            out.append(tuple(acc))
        return tuple(out)

    @property
    def num_heads(self) -> int:
        return self.kinds[0].attention.num_heads

    @property
    def num_kv_heads(self) -> int:
        return self.kinds[0].attention.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.kinds[0].attention.qk_head_dim

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def token_embedding_params(self) -> int:
        return self.vocab_size * self.embed_dim

    @property
    def position_embedding_params(self) -> int:
        return self.position_embeddings * self.hidden_size

    @property
    def output_head_params(self) -> int:
        """Parameters of the LM head that are not shared with the input embedding."""
        return 0 if self.tie_embeddings else self.vocab_size * self.embed_dim

    @cached_property
    def intermediate_sizes(self) -> tuple[int, ...]:
        """The MLP widths that TP splits (dense MLP, shared experts, routed experts)."""
        sizes = set()
        for kind in self.kinds:
            for m in kind.linears:
                if m.component in ("mlp", "experts", "shared_experts") and m.tp == "row":
                    sizes.add(m.in_features)
        return tuple(sorted(sizes))


# --- config reading ------------------------------------------------------------------------


# Bounds on config integers: far above any published model (the widest vocabularies are ~260k,
# the longest contexts ~10M tokens, the deepest stacks a few hundred layers), low enough that a
# mistyped or hostile config cannot make the planner build millions of layers or overflow the
# 64-bit integers of a sweep.
CONFIG_INT_MAX = 2**24
CONFIG_LAYERS_MAX = 2**14
MAX_TOTAL_PARAMS = 10**15


class _Config:
    """Typed access to a config dict: required fields raise a SpecError naming them."""

    def __init__(self, raw: Mapping[str, Any], model_type: str) -> None:
        self.raw = raw
        self.model_type = model_type

    @property
    def plain(self) -> Mapping[str, Any]:
        """The config itself (not the recorder ``used_config`` reads it through)."""
        return self.raw.data if isinstance(self.raw, _Recorder) else self.raw

    def _get(self, names: tuple[str, ...]) -> Any:
        for name in names:
            if name in self.raw and self.raw[name] is not None:
                return self.raw[name]
        return None

    def integer(self, *names: str, default: int | None = None, minimum: int = 1) -> int:
        value = self._get(names)
        if value is None:
            if default is None:
                raise SpecError(
                    f"config.{names[0]}",
                    f"is required to read a {self.model_type!r} model and is missing",
                )
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise SpecError(f"config.{names[0]}", "must be an integer", value)
        if value < minimum:
            raise SpecError(f"config.{names[0]}", f"must be >= {minimum}", value)
        top = CONFIG_LAYERS_MAX if names[0] in ("num_hidden_layers", "n_layer") else CONFIG_INT_MAX
        if value > top:
            raise SpecError(f"config.{names[0]}", f"must be <= {top}", value)
        return int(value)

    def opt_integer(self, *names: str) -> int | None:
        if self._get(names) is None:
            return None
        return self.integer(*names)

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"config.{name}", "must be true or false", value)
        return value

    def number(self, *names: str, default: float) -> float:
        value = self._get(names)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"config.{names[0]}", "must be a number", value)
        return float(value)

    def text(self, *names: str, default: str) -> str:
        value = self._get(names)
        return default if value is None else str(value)

    def int_list(self, name: str) -> tuple[int, ...]:
        value = self.raw.get(name) or []
        if not isinstance(value, list | tuple) or not all(isinstance(v, int) for v in value):
            raise SpecError(f"config.{name}", "must be a list of integers", value)
        return tuple(value)


def _attention_linears(
    h: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool, o_bias: bool
) -> list[Linear]:
    return [
        Linear("self_attn.q_proj", h, heads * head_dim, qkv_bias, "attention", "column", heads),
        Linear(
            "self_attn.k_proj", h, kv_heads * head_dim, qkv_bias, "attention", "column", kv_heads
        ),
        Linear(
            "self_attn.v_proj", h, kv_heads * head_dim, qkv_bias, "attention", "column", kv_heads
        ),
        Linear("self_attn.o_proj", heads * head_dim, h, o_bias, "attention", "row", heads),
    ]


def _fused_qkv(
    name: str, h: int, heads: int, kv_heads: int, head_dim: int, bias: bool
) -> list[Linear]:
    """One fused q/k/v module, kept as three parts so TP can shard q and kv heads differently."""
    return [
        Linear(f"{name}#q", h, heads * head_dim, bias, "attention", "column", heads),
        Linear(f"{name}#k", h, kv_heads * head_dim, bias, "attention", "column", kv_heads),
        Linear(f"{name}#v", h, kv_heads * head_dim, bias, "attention", "column", kv_heads),
    ]


def _gated_mlp(prefix: str, h: int, inter: int, bias: bool, component: Any) -> list[Linear]:
    return [
        Linear(f"{prefix}.gate_proj", h, inter, bias, component, "column"),
        Linear(f"{prefix}.up_proj", h, inter, bias, component, "column"),
        Linear(f"{prefix}.down_proj", inter, h, bias, component, "row"),
    ]


def _routed_experts(prefix: str, h: int, inter: int, experts: int, top_k: int) -> list[Linear]:
    """transformers 5 stores experts fused: ``gate_up_proj`` [E, 2I, h], ``down_proj`` [E, h, I]."""
    return [
        Linear(
            f"{prefix}.gate_up_proj",
            h,
            2 * inter,
            False,
            "experts",
            "column",
            2 * inter,
            experts,
            top_k,
        ),
        Linear(f"{prefix}.down_proj", inter, h, False, "experts", "row", inter, experts, top_k),
    ]


def _router(name: str, h: int, experts: int) -> Linear:
    return Linear(name, h, experts, False, "router", "replicated")


def _standard_core(heads: int, kv_heads: int, head_dim: int, window: int | None) -> AttentionCore:
    return AttentionCore(heads, kv_heads, head_dim, head_dim, window, 2 * kv_heads * head_dim)


def _kv_heads(c: _Config, heads: int, default: int) -> int:
    """KV heads (grouped-query attention): each KV head serves a whole group of query heads."""
    kv = c.integer("num_key_value_heads", default=default)
    if heads % kv:
        raise SpecError(
            "config.num_key_value_heads", f"must divide num_attention_heads={heads}", kv
        )
    return kv


def _windows(c: _Config, layers: int, default_sliding: bool) -> tuple[int | None, ...]:
    """Per-layer sliding window, from ``layer_types`` when present (transformers 5 convention)."""
    window = c.opt_integer("sliding_window")
    types = c.raw.get("layer_types")
    if isinstance(types, list) and len(types) == layers and window:
        return tuple(window if t == "sliding_attention" else None for t in types)
    if c.raw.get("use_sliding_window") is False or not window:
        return (None,) * layers
    if "use_sliding_window" in c.raw:  # Qwen2/Qwen3: windows on layers >= max_window_layers
        first = c.integer("max_window_layers", default=layers, minimum=0)
        return tuple(window if i >= first else None for i in range(layers))
    return (window,) * layers if default_sliding else (None,) * layers


def _kinds_from_layers(
    per_layer: list[tuple[str, tuple[Linear, ...], tuple[Norm, ...], AttentionCore, bool]],
) -> tuple[tuple[LayerKind, ...], tuple[int, ...]]:
    """Deduplicate per-layer descriptions into kinds plus a per-layer kind index."""
    kinds: list[LayerKind] = []
    index: list[int] = []
    for name, linears, norms, core, parallel in per_layer:
        kind = LayerKind(name, linears, norms, core, parallel)
        if kind not in kinds:
            kinds.append(kind)
        index.append(kinds.index(kind))
    return tuple(kinds), tuple(index)


def _rms(name: str, size: int) -> Norm:
    return Norm(name, size, False)


def _ln(name: str, size: int, affine: bool = True) -> Norm:
    return Norm(name, size, True) if affine else Norm(name, 0, False)


# --- families ------------------------------------------------------------------------------

_Builder = Callable[[_Config, str], ModelSpec]


def _llama_like(c: _Config, ident: str) -> ModelSpec:
    """Llama and its descendants: Mistral, Mixtral, Qwen2/2.5, Qwen3(-MoE), Phi-3, Gemma 2,
    DeepSeek-V3 (MLA + MoE). Pre-norm RMSNorm, rotary positions, gated MLP."""
    mt = c.model_type
    known = mt in _LLAMA_DEFAULTS
    d = _LLAMA_DEFAULTS.get(mt, {})
    h = c.integer("hidden_size", default=d.get("hidden_size"))
    layers = c.integer("num_hidden_layers", default=d.get("num_hidden_layers"))
    heads = c.integer("num_attention_heads", default=d.get("num_attention_heads"))
    vocab = c.integer("vocab_size", default=d.get("vocab_size"))
    kv_heads = _kv_heads(c, heads, d.get("num_key_value_heads", heads))
    head_dim = c.integer("head_dim", default=d.get("head_dim", h // heads))
    tie = c.flag("tie_word_embeddings", bool(d.get("tie_word_embeddings", False)))
    notes: list[str] = []
    if not known:
        notes.append(
            f"model_type {mt!r} is not a known family: read as a Llama-style decoder "
            "(RMSNorm, gated MLP, rotary positions); check the counts."
        )

    qkv_bias = c.flag("attention_bias", False)
    o_bias = qkv_bias
    if mt == "qwen2":  # hard-coded in Qwen2Attention: bias on q/k/v, none on o
        qkv_bias, o_bias = True, False
    mlp_bias = c.flag("mlp_bias", False)
    qk_norm = mt in ("qwen3", "qwen3_moe")
    gemma = mt == "gemma2"
    windows = _windows(c, layers, default_sliding=mt in ("mistral", "phi3", "mixtral"))
    if gemma and c.raw.get("layer_types") is None:
        w = c.opt_integer("sliding_window") or 4096
        windows = tuple(w if (i + 1) % 2 else None for i in range(layers))

    # MoE layout per family
    experts = top_k = moe_inter = shared_inter = 0
    moe_set: set[int] = set()
    if mt == "mixtral":
        experts = c.integer("num_local_experts", "num_experts", default=8)
        top_k = c.integer("num_experts_per_tok", default=2)
        moe_inter = c.integer("intermediate_size", default=14336)
        moe_set = set(range(layers))
    elif mt in ("qwen3_moe", "qwen2_moe"):
        experts = c.integer("num_experts", default=128)
        top_k = c.integer("num_experts_per_tok", default=8)
        moe_inter = c.integer("moe_intermediate_size", default=768)
        step = c.integer("decoder_sparse_step", default=1)
        only_mlp = set(c.int_list("mlp_only_layers"))
        moe_set = {i for i in range(layers) if i not in only_mlp and (i + 1) % step == 0}
        if mt == "qwen2_moe":
            shared_inter = c.integer("shared_expert_intermediate_size", default=0, minimum=0)
    elif mt == "deepseek_v3":
        experts = c.integer("n_routed_experts", "num_local_experts", default=256)
        top_k = c.integer("num_experts_per_tok", default=8)
        moe_inter = c.integer("moe_intermediate_size", default=2048)
        shared_inter = moe_inter * c.integer("n_shared_experts", default=1, minimum=0)
        first_dense = c.integer("first_k_dense_replace", default=3, minimum=0)
        moe_set = set(range(first_dense, layers))
    elif not known and c._get(("num_experts", "num_local_experts", "n_routed_experts")):
        raise SpecError(
            "config.model_type", f"mixture-of-experts model_type {mt!r} is not supported yet", mt
        )
    if top_k > experts:
        raise SpecError(
            "config.num_experts_per_tok", f"must be <= the number of experts ({experts})", top_k
        )
    inter = c.integer("intermediate_size", default=d.get("intermediate_size"))

    mla = mt == "deepseek_v3"
    per_layer = []
    for i in range(layers):
        linears: list[Linear] = []
        norms: list[Norm] = [_rms("input_layernorm", h), _rms("post_attention_layernorm", h)]
        if mla:
            core, attn = _mla(c, h, heads)
            linears += attn
            norms += (
                [_rms("self_attn.q_a_layernorm", c.integer("q_lora_rank"))]
                if c.opt_integer("q_lora_rank")
                else []
            )
            norms.append(_rms("self_attn.kv_a_layernorm", c.integer("kv_lora_rank", default=512)))
        else:
            core = _standard_core(heads, kv_heads, head_dim, windows[i])
            if mt == "phi3":
                linears += _fused_qkv("self_attn.qkv_proj", h, heads, kv_heads, head_dim, False)
                linears.append(
                    Linear(
                        "self_attn.o_proj", heads * head_dim, h, False, "attention", "row", heads
                    )
                )
            else:
                linears += _attention_linears(h, heads, kv_heads, head_dim, qkv_bias, o_bias)
        if qk_norm:
            norms += [_rms("self_attn.q_norm", head_dim), _rms("self_attn.k_norm", head_dim)]
        if gemma:
            norms += [_rms("pre_feedforward_layernorm", h), _rms("post_feedforward_layernorm", h)]
        if i in moe_set:
            linears.append(_router("mlp.gate", h, experts))
            linears += _routed_experts("mlp.experts", h, moe_inter, experts, top_k)
            if shared_inter:
                linears += _gated_mlp(
                    "mlp.shared_experts", h, shared_inter, False, "shared_experts"
                )
            name = "moe"
        elif mt == "phi3":
            linears += [
                Linear("mlp.gate_up_proj#gate", h, inter, False, "mlp", "column"),
                Linear("mlp.gate_up_proj#up", h, inter, False, "mlp", "column"),
                Linear("mlp.down_proj", inter, h, False, "mlp", "row"),
            ]
            name = "dense"
        else:
            linears += _gated_mlp("mlp", h, inter, mlp_bias, "mlp")
            name = "dense"
        if core.window:
            name += "-local"
        per_layer.append((name, tuple(linears), tuple(norms), core, False))
    kinds, index = _kinds_from_layers(per_layer)
    moe_layers = len(moe_set)
    act = c.text(
        "hidden_activation" if gemma else "hidden_act",
        default="gelu_pytorch_tanh" if gemma else "silu",
    )
    return ModelSpec(
        id=ident,
        model_type=mt,
        hidden_size=h,
        num_layers=layers,
        vocab_size=vocab,
        max_seq_len=c.opt_integer("max_position_embeddings"),
        embed_dim=h,
        position_embeddings=0,
        tie_embeddings=tie,
        kinds=kinds,
        layer_kinds=index,
        embedding_norm=None,
        final_norm=_rms("norm", h),
        embedding_projections=(),
        mlp_activation=act,
        gated_mlp=True,
        norm_type="rmsnorm",
        attention_dropout=c.number("attention_dropout", default=0.0),
        hidden_dropout=c.number("resid_pdrop", "hidden_dropout", default=0.0),
        moe=MoESpec(experts, top_k, moe_inter, shared_inter, moe_layers) if moe_layers else None,
        config=dict(c.plain),
        notes=tuple(notes),
    )


def _mla(c: _Config, h: int, heads: int) -> tuple[AttentionCore, list[Linear]]:
    """DeepSeek multi-head latent attention (DeepSeek-V2/V3 paper, transformers' DeepseekV3).

    Megatron keeps the down-projections (q_a, kv_a) whole on every TP rank and splits the
    up-projections by head; the KV cache keeps the latent plus the shared rope key.
    """
    q_lora = c.opt_integer("q_lora_rank")
    kv_lora = c.integer("kv_lora_rank", default=512)
    nope = c.integer("qk_nope_head_dim", default=128)
    rope = c.integer("qk_rope_head_dim", default=64)
    v_dim = c.integer("v_head_dim", default=128)
    bias = c.flag("attention_bias", False)
    qk = nope + rope
    linears = []
    if q_lora:
        linears += [
            Linear("self_attn.q_a_proj", h, q_lora, bias, "attention", "replicated"),
            Linear("self_attn.q_b_proj", q_lora, heads * qk, False, "attention", "column", heads),
        ]
    else:
        linears.append(
            Linear("self_attn.q_proj", h, heads * qk, False, "attention", "column", heads)
        )
    linears += [
        Linear("self_attn.kv_a_proj_with_mqa", h, kv_lora + rope, bias, "attention", "replicated"),
        Linear(
            "self_attn.kv_b_proj",
            kv_lora,
            heads * (nope + v_dim),
            False,
            "attention",
            "column",
            heads,
        ),
        Linear("self_attn.o_proj", heads * v_dim, h, bias, "attention", "row", heads),
    ]
    core = AttentionCore(heads, heads, qk, v_dim, None, kv_lora + rope, cache_shards_with_tp=False)
    return core, linears


def _gpt2(c: _Config, ident: str) -> ModelSpec:
    """GPT-2: learned positions, pre-LN LayerNorm, fused Conv1D q/k/v, GELU MLP, tied head."""
    h = c.integer("n_embd", "hidden_size", default=768)
    layers = c.integer("n_layer", "num_hidden_layers", default=12)
    heads = c.integer("n_head", "num_attention_heads", default=12)
    inter = c.integer("n_inner", default=4 * h)
    hd = h // heads
    linears = (
        *_fused_qkv("attn.c_attn", h, heads, heads, hd, True),
        Linear("attn.c_proj", h, h, True, "attention", "row", heads),
        Linear("mlp.c_fc", h, inter, True, "mlp", "column"),
        Linear("mlp.c_proj", inter, h, True, "mlp", "row"),
    )
    norms = (_ln("ln_1", h), _ln("ln_2", h))
    return _plain(
        c,
        ident,
        "gpt2",
        h,
        layers,
        heads,
        hd,
        inter,
        linears,
        norms,
        positions=c.integer("n_positions", "max_position_embeddings", default=1024),
        max_len=c.integer("n_positions", "max_position_embeddings", default=1024),
        final=_ln("ln_f", h),
        act=c.text("activation_function", default="gelu_new"),
        tie=c.flag("tie_word_embeddings", True),
        attn_drop=c.number("attn_pdrop", default=0.1),
        hidden_drop=c.number("resid_pdrop", default=0.1),
    )


def _opt(c: _Config, ident: str) -> ModelSpec:
    """OPT: learned positions with an offset of 2 rows, optional project_in/out around a narrower
    word embedding, LayerNorm (affine unless disabled), ReLU MLP, biases everywhere by default."""
    h = c.integer("hidden_size", default=768)
    layers = c.integer("num_hidden_layers", default=12)
    heads = c.integer("num_attention_heads", default=12)
    inter = c.integer("ffn_dim", default=3072)
    wdim = c.integer("word_embed_proj_dim", default=h)
    bias = c.flag("enable_bias", True)
    affine = c.flag("layer_norm_elementwise_affine", True)
    hd = h // heads
    linears = (
        Linear("self_attn.k_proj", h, h, bias, "attention", "column", heads),
        Linear("self_attn.v_proj", h, h, bias, "attention", "column", heads),
        Linear("self_attn.q_proj", h, h, bias, "attention", "column", heads),
        Linear("self_attn.out_proj", h, h, bias, "attention", "row", heads),
        Linear("fc1", h, inter, bias, "mlp", "column"),
        Linear("fc2", inter, h, bias, "mlp", "row"),
    )
    norms = (_ln("self_attn_layer_norm", h, affine), _ln("final_layer_norm", h, affine))
    final = None
    if c.flag("do_layer_norm_before", True) and not c.flag("_remove_final_layer_norm", False):
        final = _ln("final_layer_norm", h, affine)
    projections: tuple[Linear, ...] = ()
    if wdim != h:
        projections = (
            Linear("project_out", h, wdim, False, "embeddings", "replicated"),
            Linear("project_in", wdim, h, False, "embeddings", "replicated"),
        )
    max_len = c.integer("max_position_embeddings", default=2048)
    return _plain(
        c,
        ident,
        "opt",
        h,
        layers,
        heads,
        hd,
        inter,
        linears,
        norms,
        positions=max_len + 2,
        max_len=max_len,
        final=final,
        act=c.text("activation_function", default="relu"),
        tie=c.flag("tie_word_embeddings", True),
        attn_drop=c.number("attention_dropout", default=0.0),
        hidden_drop=c.number("dropout", default=0.1),
        embed_dim=wdim,
        projections=projections,
    )


def _falcon(c: _Config, ident: str) -> ModelSpec:
    """Falcon: fused q/k/v (multi-query for 7B; grouped KV with the new decoder architecture of
    40B/180B), parallel attention+MLP sharing one LayerNorm (7B) or two (``ln_attn``/``ln_mlp``),
    GELU MLP of ``ffn_hidden_size`` (default 4h), tied head."""
    h = c.integer("hidden_size", default=4544)
    layers = c.integer("num_hidden_layers", "n_layer", default=32)
    heads = c.integer("num_attention_heads", "n_head", default=71)
    hd = h // heads
    new_arch = c.flag("new_decoder_architecture", False)
    multi_query = c.flag("multi_query", True)
    parallel = c.flag("parallel_attn", True)
    if new_arch:
        kv = c.integer("num_kv_heads", "n_head_kv", default=heads)
    elif multi_query:
        kv = 1
    else:
        kv = heads
    bias = c.flag("bias", False)
    inter = c.integer("ffn_hidden_size", default=4 * h)
    linears = (
        *_fused_qkv("self_attention.query_key_value", h, heads, kv, hd, bias),
        Linear("self_attention.dense", h, h, bias, "attention", "row", heads),
        Linear("mlp.dense_h_to_4h", h, inter, bias, "mlp", "column"),
        Linear("mlp.dense_4h_to_h", inter, h, bias, "mlp", "row"),
    )
    n_ln = c.opt_integer("num_ln_in_parallel_attn") or (2 if new_arch else 1)
    norms: tuple[Norm, ...]
    if not parallel:
        norms = (_ln("input_layernorm", h), _ln("post_attention_layernorm", h))
    elif n_ln == 2:
        norms = (_ln("ln_attn", h), _ln("ln_mlp", h))
    else:
        norms = (_ln("input_layernorm", h),)
    max_len = c.opt_integer("max_position_embeddings")
    return _plain(
        c,
        ident,
        "falcon",
        h,
        layers,
        heads,
        hd,
        inter,
        linears,
        norms,
        positions=0,
        max_len=max_len,
        final=_ln("ln_f", h),
        act=c.text("activation", default="gelu"),
        tie=c.flag("tie_word_embeddings", True),
        attn_drop=c.number("attention_dropout", default=0.0),
        hidden_drop=c.number("hidden_dropout", default=0.0),
        kv_heads=kv,
        parallel=parallel,
    )


def _gpt_neox(c: _Config, ident: str) -> ModelSpec:
    """GPT-NeoX / Pythia: fused q/k/v with bias, parallel residual (two LayerNorms), GELU MLP,
    untied ``embed_out``."""
    h = c.integer("hidden_size", default=6144)
    layers = c.integer("num_hidden_layers", default=44)
    heads = c.integer("num_attention_heads", default=64)
    inter = c.integer("intermediate_size", default=24576)
    bias = c.flag("attention_bias", True)
    hd = h // heads
    linears = (
        *_fused_qkv("attention.query_key_value", h, heads, heads, hd, bias),
        Linear("attention.dense", h, h, bias, "attention", "row", heads),
        Linear("mlp.dense_h_to_4h", h, inter, True, "mlp", "column"),
        Linear("mlp.dense_4h_to_h", inter, h, True, "mlp", "row"),
    )
    norms = (_ln("input_layernorm", h), _ln("post_attention_layernorm", h))
    return _plain(
        c,
        ident,
        "gpt_neox",
        h,
        layers,
        heads,
        hd,
        inter,
        linears,
        norms,
        positions=0,
        max_len=c.integer("max_position_embeddings", default=2048),
        final=_ln("final_layer_norm", h),
        act=c.text("hidden_act", default="gelu"),
        tie=c.flag("tie_word_embeddings", False),
        attn_drop=c.number("attention_dropout", default=0.0),
        hidden_drop=c.number("hidden_dropout", default=0.0),
        parallel=c.flag("use_parallel_residual", True),
    )


def _bloom(c: _Config, ident: str) -> ModelSpec:
    """BLOOM: ALiBi (no position parameters), LayerNorm after the word embedding, fused q/k/v,
    4h GELU MLP, biases everywhere, tied head."""
    h = c.integer("hidden_size", "n_embed", default=64)
    layers = c.integer("n_layer", "num_hidden_layers", default=2)
    heads = c.integer("n_head", "num_attention_heads", default=8)
    hd = h // heads
    linears = (
        *_fused_qkv("self_attention.query_key_value", h, heads, heads, hd, True),
        Linear("self_attention.dense", h, h, True, "attention", "row", heads),
        Linear("mlp.dense_h_to_4h", h, 4 * h, True, "mlp", "column"),
        Linear("mlp.dense_4h_to_h", 4 * h, h, True, "mlp", "row"),
    )
    norms = (_ln("input_layernorm", h), _ln("post_attention_layernorm", h))
    return _plain(
        c,
        ident,
        "bloom",
        h,
        layers,
        heads,
        hd,
        4 * h,
        linears,
        norms,
        positions=0,
        max_len=c.opt_integer("seq_length", "max_position_embeddings"),
        final=_ln("ln_f", h),
        act="bloom_gelu",
        tie=c.flag("tie_word_embeddings", True),
        attn_drop=c.number("attention_dropout", default=0.0),
        hidden_drop=c.number("hidden_dropout", default=0.0),
        embedding_norm=_ln("word_embeddings_layernorm", h),
    )


def _mpt(c: _Config, ident: str) -> ModelSpec:
    """MPT (MosaicML) as transformers' MptForCausalLM builds it: ALiBi (no position parameters),
    fused ``attn.Wqkv``, ``attn.out_proj``, a 4h GELU MLP (``ffn.up_proj``/``ffn.down_proj``),
    LayerNorm without bias (``norm_1``, ``norm_2``, ``norm_f``), no linear biases, tied ``wte``.

    transformers hard-codes that shape whatever the config's ``no_bias``, ``expansion_ratio``,
    ``learned_pos_emb`` or ``attn_config.attn_type`` say (MosaicML's own llm-foundry code honours
    them); this reader does the same and adds a note when a config asks for something else.
    """
    h = c.integer("d_model", "hidden_size", default=2048)
    layers = c.integer("n_layers", "num_hidden_layers", default=24)
    heads = c.integer("n_heads", "num_attention_heads", default=16)
    attn = c.raw.get("attn_config")
    attn_cfg: Mapping[str, Any] = attn if isinstance(attn, Mapping) else {}
    attn_drop = _Config(attn_cfg, c.model_type).number("attn_pdrop", default=0.0)
    hd = h // heads
    inter = 4 * h
    linears = (
        *_fused_qkv("attn.Wqkv", h, heads, heads, hd, False),
        Linear("attn.out_proj", h, h, False, "attention", "row", heads),
        Linear("ffn.up_proj", h, inter, False, "mlp", "column"),
        Linear("ffn.down_proj", inter, h, False, "mlp", "row"),
    )
    norms = (Norm("norm_1", h, False), Norm("norm_2", h, False))
    spec = _plain(
        c,
        ident,
        "mpt",
        h,
        layers,
        heads,
        hd,
        inter,
        linears,
        norms,
        positions=0,
        max_len=c.integer("max_seq_len", default=2048),
        final=Norm("norm_f", h, False),
        act="gelu",
        tie=c.flag("tie_word_embeddings", True),
        attn_drop=attn_drop,
        hidden_drop=attn_drop,  # MptMLP and the attention residual reuse attn_pdrop
    )
    ignored = []
    if c.number("expansion_ratio", default=4) != 4:
        ignored.append("expansion_ratio (the MLP is 4 x d_model)")
    if c.raw.get("no_bias") is False:
        ignored.append("no_bias=false (no linear or norm biases)")
    if attn_cfg.get("alibi") is False or attn_cfg.get("attn_type") not in (
        None,
        "multihead_attention",
    ):
        ignored.append("attn_config (ALiBi multi-head attention)")
    if not ignored:
        return spec
    note = (
        "transformers' MptForCausalLM ignores "
        + "; ".join(ignored)
        + ": read as it builds the model; check the counts against the checkpoint."
    )
    return replace(spec, notes=(*spec.notes, note))


def _plain(
    c: _Config,
    ident: str,
    mt: str,
    h: int,
    layers: int,
    heads: int,
    hd: int,
    inter: int,
    linears: tuple[Linear, ...],
    norms: tuple[Norm, ...],
    *,
    positions: int,
    max_len: int | None,
    final: Norm | None,
    act: str,
    tie: bool,
    attn_drop: float,
    hidden_drop: float,
    kv_heads: int | None = None,
    parallel: bool = False,
    embed_dim: int | None = None,
    projections: tuple[Linear, ...] = (),
    embedding_norm: Norm | None = None,
) -> ModelSpec:
    """The classic (non-gated, LayerNorm) families share one uniform stack of layers."""
    if h % heads:
        raise SpecError("config.num_attention_heads", f"must divide hidden_size={h}", heads)
    if kv_heads is not None and heads % kv_heads:
        raise SpecError("config.num_kv_heads", f"must divide num_attention_heads={heads}", kv_heads)
    core = _standard_core(heads, kv_heads or heads, hd, None)
    kind = LayerKind("dense", linears, tuple(n for n in norms if n.size), core, parallel)
    return ModelSpec(
        id=ident,
        model_type=mt,
        hidden_size=h,
        num_layers=layers,
        vocab_size=c.integer("vocab_size", default=_PLAIN_VOCAB[mt]),
        max_seq_len=max_len,
        embed_dim=embed_dim or h,
        position_embeddings=positions,
        tie_embeddings=tie,
        kinds=(kind,),
        layer_kinds=(0,) * layers,
        embedding_norm=embedding_norm,
        final_norm=final if final and final.size else None,
        embedding_projections=projections,
        mlp_activation=act,
        gated_mlp=False,
        norm_type="layernorm",
        attention_dropout=attn_drop,
        hidden_dropout=hidden_drop,
        moe=None,
        config=dict(c.plain),
    )


# transformers' config-class defaults for the fields the readers use (so a sparse config.json is
# read as transformers reads it).
_LLAMA_DEFAULTS: dict[str, dict[str, Any]] = {
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
    "mixtral": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
    ),
    "qwen2": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=22016,
        num_hidden_layers=32,
        num_attention_heads=32,
    ),
    "qwen3": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=22016,
        num_hidden_layers=32,
        num_attention_heads=32,
        head_dim=128,
    ),
    "qwen3_moe": dict(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=24,
        num_attention_heads=32,
        num_key_value_heads=4,
    ),
    "phi3": dict(
        vocab_size=32064,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=32,
        num_attention_heads=32,
    ),
    "gemma2": dict(
        vocab_size=256000,
        hidden_size=2304,
        intermediate_size=9216,
        num_hidden_layers=26,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        tie_word_embeddings=True,
    ),
    "deepseek_v3": dict(
        vocab_size=129280,
        hidden_size=7168,
        intermediate_size=18432,
        num_hidden_layers=61,
        num_attention_heads=128,
    ),
}
_PLAIN_VOCAB = {
    "gpt2": 50257,
    "opt": 50272,
    "falcon": 65024,
    "gpt_neox": 50432,
    "bloom": 250880,
    "mpt": 50368,
}

_BUILDERS: dict[str, _Builder] = {
    **{mt: _llama_like for mt in _LLAMA_DEFAULTS},
    "gpt2": _gpt2,
    "opt": _opt,
    "falcon": _falcon,
    "gpt_neox": _gpt_neox,
    "bloom": _bloom,
    "mpt": _mpt,
}


def supported_model_types() -> tuple[str, ...]:
    """Families read exactly (checked against transformers); others are read as Llama-style."""
    return tuple(sorted(_BUILDERS))


def model_from_config(config: Mapping[str, Any], model_id: str = "custom") -> ModelSpec:
    """Read a Hugging Face ``config.json`` dict into a ModelSpec.

    Raises SpecError naming the field when a required field is missing or invalid. Unknown fields
    are ignored. Nothing in the config is executed and nothing is fetched.
    """
    if not isinstance(config, Mapping):
        raise SpecError(
            "config", "must be a JSON object (a config.json dict)", type(config).__name__
        )
    text_config = config.get("text_config")
    inner = text_config if isinstance(text_config, Mapping) else None
    return _read(config, inner, model_id)


class _Recorder(Mapping[str, Any]):
    """A config that remembers which of its keys the reader asked for (listing or copying it
    does not count)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return self.data.get(key, default)

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return key in self.data

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def used_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``config`` the reader uses: the keys it asks for (and, for a wrapped text
    model, those of ``text_config``), which read into the same spec. What is left out changes
    no number the planner gives. Raises SpecError as ``model_from_config`` does."""
    model_from_config(config)  # refused configs are refused here, by the same rules
    outer = _Recorder(config)
    text_config = config.get("text_config")
    inner = _Recorder(text_config) if isinstance(text_config, Mapping) else None
    _read(outer, inner)
    used = {k: config[k] for k in sorted(outer.asked) if k in config}
    if inner is not None:
        used["text_config"] = {k: inner.data[k] for k in sorted(inner.asked) if k in inner.data}
    return used


def _read(
    config: Mapping[str, Any], inner: Mapping[str, Any] | None, model_id: str = "custom"
) -> ModelSpec:
    raw: Mapping[str, Any] = inner if inner is not None else config
    mt = raw.get("model_type") or config.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise SpecError("config.model_type", "is required (e.g. 'llama', 'qwen2', 'gpt2')")
    c = _Config(raw, mt)
    model = _BUILDERS.get(mt, _llama_like)(c, model_id)
    total = sum(n * kind.params for kind, n in zip(model.kinds, model.kind_counts, strict=True))
    if total > MAX_TOTAL_PARAMS:
        raise SpecError(
            "config",
            f"describes {total:.3g} layer parameters, beyond the {MAX_TOTAL_PARAMS:.0e} "
            "this planner models",
        )
    return model
