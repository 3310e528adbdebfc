"""Ground truth from real model code (Hugging Face transformers + torch): for the tests, and the
exact module tree the service offers when the optional `groundtruth` extra is installed.

Every number here comes from running the actual modelling code of a family, never from a formula:

* parameters -- the model is built on the ``meta`` device (no weights, no network, < 1 s even for
  DeepSeek-V3 671B) and its unique parameters are counted;
* forward FLOPs -- a meta-device forward under ``torch.utils.flop_counter.FlopCounterMode``;
* KV-cache bytes -- a real forward (random weights, CPU) of a *tiny* config with ``use_cache=True``;
  the tensors the returned cache object holds are measured;
* saved activations -- a real forward of a tiny config in train mode under
  ``torch.autograd.graph.saved_tensors_hooks``; every tensor autograd keeps for backward is seen.

torch and transformers are imported at module level: tests should load this module with
``pytest.importorskip("validation.groundtruth")`` (or importorskip torch/transformers first), so the
estimator itself never depends on them.  Tested with torch 2.13.0 (CPU) and transformers 5.23.0.

Traps, and how this module handles each
---------------------------------------

1. ``from_config(cfg, attn_implementation=...)`` (and ``experts_implementation``) *mutates* the
   config object.  :func:`hf_config` deep-copies the input dict and every builder makes a fresh
   config, so no config object is ever shared between two models.
2. Meta-device forward: transformers 5.x ``masking_utils.find_packed_sequence_indices`` evaluates
   ``(mask[:, -1] == 0).all()`` in Python control flow, i.e. a ``.item()``, which raises
   "Tensor.item() cannot be called on meta tensors".  :func:`meta_forward_patch` is a context
   manager that replaces that function with one returning ``None`` (= "no packed sequences",
   which is exactly what an unpadded ``[batch, seq]`` batch is) for meta tensors, and restores
   the original on exit.  No other ``.item()`` is hit by any catalog family.
3. ``FlopCounterMode`` counts matmul-like aten ops only (mm, addmm, bmm, baddbmm, sdpa kernels,
   convolutions).  Norms, activations, softmax, RoPE, residual adds and the loss are *not* counted.
   With eager attention the ``QK^T`` and ``PV`` matmuls are counted over the full ``s x s``
   square: causal masking (and sliding windows, Gemma-2 local layers, Mistral) is applied by
   adding a mask to the scores, so half the counted attention FLOPs are masked-out work that a
   FlashAttention kernel would skip.  :func:`forward_flops` therefore always uses eager attention
   and reports the attention-core FLOPs separately (``by_module`` key ``...self_attn``).
4. SDPA: on real CPU tensors the SDPA op dispatches to a fused CPU kernel for which the flop
   counter has no formula, so attention counts **zero** FLOPs.  Use eager for FLOP counts.
5. MoE experts: transformers 5 fuses the experts into 3-D parameters; the default experts path
   (``grouped_mm``, or a per-expert python loop when grouped_mm cannot dispatch) has no FLOP
   formula / needs data-dependent indexing that meta tensors cannot do.  :func:`meta_model`
   passes ``experts_implementation="batched_mm"`` whenever the model class supports choosing it
   (``_can_set_experts_implementation``), which gathers the top-k experts' weights per token and
   runs ``bmm`` -- FLOPs = tokens x top_k x expert matmuls, i.e. exactly the *active* compute.
   Note: batched_mm materialises the gathered weights ``[tokens*top_k, 2*I, H]``, so it must NOT be
   used when measuring saved activations; :func:`saved_activation_bytes` keeps the transformers
   default there (resolved implementation is reported).
6. Parameter counting: ``model.parameters()`` de-duplicates tied weights (Gemma-2, GPT-2, OPT,
   Falcon, BLOOM tie lm_head to the input embedding).  Buffers are excluded: RoPE ``inv_freq``
   and, notably, DeepSeek-V3's router ``e_score_correction_bias`` (256 per MoE layer) are
   buffers in transformers, so HF counts 14,848 fewer parameters than a formula that treats the
   bias as a weight.  transformers does not build DeepSeek-V3's multi-token-prediction layer
   (``num_nextn_predict_layers``), so the count is the 671B main model.
7. KV cache: transformers returns a ``DynamicCache`` whose per-layer objects hold ``keys`` /
   ``values``.  Sliding-window layers (``DynamicSlidingWindowLayer``: Mistral with a window,
   Gemma-2 local layers, Phi-3) keep a *view* ``full[:, :, -(window-1):]`` of the concatenated
   prompt K/V: logically ``window - 1`` tokens, but the view pins the whole ``seq``-token storage
   until the next update.  :func:`kv_cache_layout` reports both the logical bytes (``nbytes``)
   and the bytes of the storage kept alive (``storage_nbytes``).
   DeepSeek-V3 (MLA): transformers 5.23 caches the compressed latent, not per-head K/V: per layer
   ``keys`` = the normalised ``kv_lora_rank`` latent ``[b, 1, s, 512]`` and ``values`` = the
   rotated shared rope key ``[b, 1, s, 64]`` -- 576 values per token per layer, exactly
   DeepSeek's own formula (transformers 4.x cached the decompressed per-head K/V instead).
   Falcon with ``new_decoder_architecture`` (Falcon-40B/180B) is the opposite surprise: the
   modelling code broadcasts the 8 KV heads to all query heads *before* ``cache.update``, so HF
   caches ``num_attention_heads`` K/V heads (16x the GQA formula for Falcon-40B).
   Falcon-7B (``multi_query``) caches its single KV head.
   DeepSeek-V4 keeps one key-and-value tensor (its cache layers set ``values = keys``): a tensor
   held under two names is counted once.  Its compressed layers' cache objects also hold each
   compressor's entries, the projections of the window still open and (CSA) the last window's
   overlap state, in dicts keyed by compressor: every floating-point tensor there is counted.
8. Saved activations: measured with ``saved_tensors_hooks``.  Tensors are de-duplicated by
   ``untyped_storage().data_ptr()`` (a view saves, and pins, its whole storage; the same
   tensor is often saved by several ops), parameters and buffers are excluded by storage.  The
   pack hook hands autograd a small wrapper object and keeps only a weak reference to it, so a
   saved tensor counts only if autograd still holds it when the forward ends (saved tensors of
   graph branches that were dropped are freed, exactly as in training).  The node that saved each
   tensor is found afterwards by walking the graph from the outputs and unpacking each node's
   ``_saved_*`` fields (the unpack hook records which node asked).
9. Gradient checkpointing (non-reentrant): the checkpoint installs its own inner
   ``saved_tensors_hooks`` inside every decoder layer, so the layer's internal saves never reach
   our hook (correct: they are discarded and recomputed).  What the checkpoint keeps is (a) each
   layer's positional inputs, saved through a ``SavedVariable`` that *does* go through our outer
   hook (reported with ``grad_fn="checkpoint:input"``), and (b) the keyword arguments (RoPE
   cos/sin, attention mask, position ids...) held by a ``functools.partial`` in the recompute
   closure -- invisible to saved-tensor hooks, so they are captured with a forward-pre-hook on
   each layer and reported as ``grad_fn="checkpoint:kwarg"``.  Walking the graph would unpack
   checkpointed nodes and trigger a recompute; a module pre-hook aborts any such recompute.
   ``saved_activation_bytes`` verifies that checkpointing really took effect (layers flagged,
   no autograd node inside a layer saved anything) and raises otherwise.  transformers 5.x
   renamed ``gradient_checkpointing_enable`` to ``activation_checkpointing_enable`` (the old
   name is a deprecated alias that warns); the new name is used when present.
10. CPU kernels are what is measured.  Two known CPU/CUDA differences in saved bytes: dropout on
   CPU saves a mask in the activation dtype (``input * noise``), CUDA's fused ``native_dropout``
   a 1-byte bool mask; SDPA on CPU runs ``_scaled_dot_product_flash_attention_for_cpu`` (saves
   q, k, v un-repeated for GQA, output, fp32 logsumexp), the CUDA flash / mem-efficient kernels
   save the same tensors plus a small RNG state.  Eager attention saves the same everywhere.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import re
import sys
import weakref
from collections import defaultdict
from collections.abc import Iterator
from types import FrameType
from typing import Any, NamedTuple, cast

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

__all__ = [
    "SavedTensor",
    "format_tensors",
    "forward_flops",
    "hf_config",
    "kv_cache_bytes",
    "kv_cache_layout",
    "meta_forward_patch",
    "meta_model",
    "param_breakdown",
    "param_count",
    "real_model",
    "saved_activation_bytes",
    "tiny_config",
]

#: Real (non-meta) models are refused above this many parameters: use :func:`tiny_config`.
MAX_REAL_PARAMS = 200_000_000

_LAYER_INDEX = re.compile(r"\.(\d+)(?=\.|$)")


def _collapse(path: str) -> str:
    """``model.layers.17.mlp.up_proj.weight`` -> ``model.layers.*.mlp.up_proj.weight``."""
    return _LAYER_INDEX.sub(".*", path)


# --------------------------------------------------------------------------------------------
# building
# --------------------------------------------------------------------------------------------


# model types transformers does not register, built as the class their checkpoint names: Kimi K2
# ships DeepseekV3ForCausalLM (transformers' Kimi-K2.5 config maps a kimi_k2 text config the same)
BUILT_AS = {"kimi_k2": "deepseek_v3"}


_NON_FINITE = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _finite_tokens(value: Any) -> Any:
    """The strings a strict-JSON copy keeps for the bare ``Infinity``/``NaN`` tokens of a
    config.json (Nemotron-H's ``time_step_limit``), back as floats."""
    if isinstance(value, list):
        return [_NON_FINITE.get(v, v) if isinstance(v, str) else _finite_tokens(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite_tokens(v) for k, v in value.items()}
    return value


def hf_config(config: dict[str, Any]) -> PretrainedConfig:
    """Build the transformers config for a Hugging Face ``config.json`` dict (never mutated)."""
    rest = _finite_tokens(copy.deepcopy(config))
    model_type = rest.pop("model_type")
    return AutoConfig.for_model(BUILT_AS.get(model_type, model_type), **rest)


def _model_class(cfg: PretrainedConfig) -> type[PreTrainedModel]:
    return cast("type[PreTrainedModel]", AutoModelForCausalLM._model_mapping[type(cfg)])


def _supports_experts_choice(cfg: PretrainedConfig) -> bool:
    cls = _model_class(cfg)
    can = getattr(cls, "_can_set_experts_implementation", None)
    return bool(can()) if callable(can) else False


def _from_config(cfg: PretrainedConfig, kwargs: dict[str, Any]) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_config(cfg, **kwargs)  # type: ignore[no-untyped-call,unused-ignore]
    return cast("PreTrainedModel", model)


def meta_model(
    config: dict[str, Any],
    attn_implementation: str = "eager",
    experts_implementation: str | None = "batched_mm",
) -> PreTrainedModel:
    """Build the causal LM of ``config`` on the meta device (no memory, no weights, < 1 s).

    ``experts_implementation`` is only passed to families whose model class supports choosing it
    (MoE families: mixtral, qwen3_moe, deepseek_v3); ``batched_mm`` is the one with a FLOP formula.
    """
    cfg = hf_config(config)
    kwargs: dict[str, Any] = {"attn_implementation": attn_implementation}
    if experts_implementation is not None and _supports_experts_choice(cfg):
        kwargs["experts_implementation"] = experts_implementation
    with torch.device("meta"):
        model = _from_config(cfg, kwargs)
    model.train(False)
    return model


def real_model(
    config: dict[str, Any],
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "eager",
    experts_implementation: str | None = None,
    seed: int = 0,
) -> PreTrainedModel:
    """Build a randomly initialised CPU model (refuses anything above ``MAX_REAL_PARAMS``)."""
    n = param_count(config)
    if n > MAX_REAL_PARAMS:
        raise ValueError(
            f"{n:,} parameters is too big for a real CPU model; shrink it with tiny_config()"
        )
    cfg = hf_config(config)
    kwargs: dict[str, Any] = {"attn_implementation": attn_implementation, "dtype": dtype}
    if experts_implementation is not None and _supports_experts_choice(cfg):
        kwargs["experts_implementation"] = experts_implementation
    torch.manual_seed(seed)
    return _from_config(cfg, kwargs)


# --------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------


def _unique_named_parameters(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    seen: set[int] = set()
    for name, p in model.named_parameters(remove_duplicate=True):
        if id(p) in seen:
            continue
        seen.add(id(p))
        yield name, p


def param_count(config: dict[str, Any]) -> int:
    """Unique parameters of the model (tied embeddings counted once, buffers excluded); of a
    multimodal wrapper (a config with ``text_config``), its language model's and output head's
    only, which is what the planner reads (vision towers and projectors are not modelled)."""
    model = meta_model(config)
    counted: nn.Module = model
    if isinstance(config.get("text_config"), dict):
        parts = (model.get_decoder(), model.get_output_embeddings())
        counted = nn.ModuleList([part for part in parts if part is not None])
    return sum(p.numel() for _, p in _unique_named_parameters(counted))


def param_breakdown(config: dict[str, Any]) -> dict[str, int]:
    """Parameters per collapsed path, e.g. ``model.layers.*.self_attn.q_proj.weight`` (all layers).

    A tied lm_head appears only under the embedding's name.
    """
    model = meta_model(config)
    out: dict[str, int] = defaultdict(int)
    for name, p in _unique_named_parameters(model):
        out[_collapse(name)] += p.numel()
    return dict(out)


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def meta_forward_patch() -> Iterator[None]:
    """Let transformers 5.x run a forward on meta tensors (trap 2); restores on exit."""
    import transformers.masking_utils as masking_utils

    original = masking_utils.find_packed_sequence_indices

    @functools.wraps(original)
    def patched(position_ids: torch.Tensor) -> torch.Tensor | None:
        if position_ids.device.type == "meta":
            return None  # an unpadded [batch, seq] batch holds no packed sequences
        return original(position_ids)

    masking_utils.find_packed_sequence_indices = patched
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def forward_flops(
    config: dict[str, Any], batch: int, seq: int, attn_implementation: str = "eager"
) -> dict[str, Any]:
    """FLOPs of one forward of ``input_ids[batch, seq]`` (meta device, eager attention, no cache).

    Returns ``{"total", "by_module", "by_op", "per_layer"}``.  ``by_module`` maps a collapsed
    module path to the FLOPs executed by that module's *own* code, summed over layers: leaves like
    ``model.layers.*.mlp.up_proj``; for a parent (``model.layers.*.self_attn``) the FLOPs not
    inside any child, i.e. the attention core (QK^T and PV).  ``sum(by_module) == total``.
    Only matmul-like ops are counted (trap 3).
    """
    model = meta_model(config, attn_implementation=attn_implementation)
    input_ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    counter = FlopCounterMode(display=False)
    with meta_forward_patch(), torch.no_grad(), counter:
        model(input_ids=input_ids, use_cache=False)
    counts = counter.get_flop_counts()
    total = int(counter.get_total_flops())

    by_op: dict[str, int] = defaultdict(int)
    for op, n in counts.get("Global", {}).items():
        by_op[str(op)] += int(n)

    # Names look like "LlamaForCausalLM.model.layers.0.mlp"; counts are inclusive of children.
    root = type(model).__name__
    inclusive: dict[str, int] = {}
    for name, ops in counts.items():
        if name == "Global":
            continue
        path = name[len(root) :].lstrip(".") if name.startswith(root) else name
        inclusive[path] = sum(int(v) for v in ops.values())
    children: dict[str, int] = defaultdict(int)
    for path, n in inclusive.items():
        if path:  # parent = nearest ancestor that ran (ModuleLists are never called)
            parent = path
            while parent:
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
                if parent in inclusive:
                    break
            children[parent] += n
    by_module: dict[str, int] = defaultdict(int)
    per_layer: dict[int, int] = defaultdict(int)
    layers_prefix = _layers_prefix(model)
    for path, n in inclusive.items():
        own = n - children.get(path, 0)
        if own:
            by_module[_collapse(path) or "<model code>"] += own
    outside = total - inclusive.get("", 0)
    if outside:
        by_module["<outside model>"] += outside
    for path, n in inclusive.items():
        idx = _layer_index(path, layers_prefix)
        if idx is not None and path == f"{layers_prefix}.{idx}":
            per_layer[idx] = n
    return {
        "total": total,
        "by_module": dict(sorted(by_module.items(), key=lambda kv: -kv[1])),
        "by_op": dict(by_op),
        "per_layer": [per_layer[i] for i in range(len(per_layer))],
    }


# --------------------------------------------------------------------------------------------
# tiny configs
# --------------------------------------------------------------------------------------------


def _first(config: dict[str, Any], *keys: str) -> tuple[str | None, Any]:
    for k in keys:
        if k in config and config[k] is not None:
            return k, config[k]
    return None, None


def _round(x: float, multiple: int = 8, minimum: int = 8) -> int:
    return max(minimum, round(x / multiple) * multiple)


_LEARNED_POSITIONS = {"gpt2": "n_positions", "opt": "max_position_embeddings"}


def tiny_config(config: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A shrunk copy of a family's config that keeps the family's structure.

    Defaults: 2 layers, vocab 512, head_dim 16, 4 query heads for MHA/MQA; for GQA 2 KV heads and
    the *original* query/KV ratio (so Llama-3.1-405B gives 32 q heads / 2 kv heads); hidden =
    heads x head_dim unless the original has ``heads x head_dim != hidden`` (Gemma-2, Qwen3-MoE),
    in which case the original ratio is kept; intermediate sizes keep their ratio to hidden; MoE
    keeps experts > top_k (<= 8 experts, top_k = experts/4); DeepSeek MLA keeps q/kv LoRA ranks,
    nope/rope/v head dims, 1 dense layer then MoE layers, grouped routing; sliding windows become
    16 tokens; learned position tables 512.  ``overrides`` (HF field names) are applied last;
    per-layer lists (``layer_types``, ``mlp_only_layers``) are then re-fitted to the layer count.
    """
    c = copy.deepcopy(config)
    mt = c["model_type"]
    head_dim_new = 16
    layers_new = 2

    hid_key, hidden = _first(c, "hidden_size", "n_embd", "d_model")
    heads_key, heads = _first(c, "num_attention_heads", "n_head")
    layers_key, _ = _first(c, "num_hidden_layers", "n_layer")
    if hid_key is None or heads_key is None or layers_key is None:
        raise ValueError(f"cannot find hidden/heads/layers in {mt} config")
    hidden, heads = int(hidden), int(heads)

    # --- key/value heads ---------------------------------------------------------------
    kv_key, kv = _first(c, "num_key_value_heads", "num_kv_heads")
    if mt == "falcon" and not c.get("new_decoder_architecture", False):
        kv = 1 if c.get("multi_query", True) else heads
        kv_key = None
    kv = heads if kv is None else int(kv)
    if kv == heads:
        kv_new, heads_new = 4, 4
    elif kv == 1:
        kv_new, heads_new = 1, 4
    else:
        ratio = heads // kv
        kv_new, heads_new = 2, 2 * ratio
    c[heads_key] = heads_new
    if kv_key is not None:
        c[kv_key] = kv_new

    # --- head_dim / hidden -------------------------------------------------------------
    hd_key, head_dim = _first(c, "head_dim")
    if mt == "deepseek_v3":
        hidden_new = 64
        c["qk_nope_head_dim"] = 16
        c["qk_rope_head_dim"] = 8
        c["v_head_dim"] = 16
        c.pop("head_dim", None)
        for k, floor in (("q_lora_rank", 32), ("kv_lora_rank", 16)):
            if c.get(k) is not None:
                c[k] = _round(c[k] / hidden * hidden_new, 8, floor)
    elif head_dim is not None and int(head_dim) * heads != hidden:
        hidden_new = _round(heads_new * head_dim_new * hidden / (heads * int(head_dim)))
        if hidden_new == heads_new * head_dim_new:
            hidden_new += 8
        c["head_dim"] = head_dim_new
    else:
        hidden_new = heads_new * head_dim_new
        if hd_key is not None:
            c["head_dim"] = head_dim_new
    c[hid_key] = hidden_new
    if mt == "opt":
        c["word_embed_proj_dim"] = hidden_new  # project-in/out only when != hidden (OPT-350m)
    if "query_pre_attn_scalar" in c and c["query_pre_attn_scalar"] is not None:
        q = c["query_pre_attn_scalar"]
        if head_dim is not None and q == head_dim:
            c["query_pre_attn_scalar"] = head_dim_new
        elif q == hidden // heads:
            c["query_pre_attn_scalar"] = hidden_new // heads_new
        else:
            c["query_pre_attn_scalar"] = hidden_new / hidden * q

    # --- MLP sizes ---------------------------------------------------------------------
    for k in (
        "intermediate_size",
        "ffn_dim",
        "n_inner",
        "ffn_hidden_size",
        "moe_intermediate_size",
    ):
        if c.get(k) is not None:
            c[k] = _round(c[k] / hidden * hidden_new)

    # --- MoE -----------------------------------------------------------------------------
    exp_key, experts = _first(c, "num_local_experts", "num_experts", "n_routed_experts")
    if exp_key is not None:
        experts_new = min(int(experts), 8)
        topk = int(c.get("num_experts_per_tok", 2))
        topk_new = max(1, min(topk, experts_new // 4))
        c[exp_key] = experts_new
        c["num_experts_per_tok"] = topk_new
        if c.get("n_group"):
            n_group = int(c["n_group"])
            n_group_new = max(1, min(n_group, experts_new // 2))
            c["n_group"] = n_group_new
            c["topk_group"] = max(1, n_group_new * int(c.get("topk_group", 1)) // n_group)
    if "first_k_dense_replace" in c:
        c["first_k_dense_replace"] = min(int(c["first_k_dense_replace"]), 1)
    if c.get("n_shared_experts"):
        c["n_shared_experts"] = 1

    # --- windows, vocab, positions, layers ------------------------------------------------
    if c.get("sliding_window") is not None:
        c["sliding_window"] = min(int(c["sliding_window"]), 16)
    c["vocab_size"] = 512
    if mt in _LEARNED_POSITIONS:
        c[_LEARNED_POSITIONS[mt]] = 512
    c[layers_key] = layers_new
    if "max_window_layers" in c:
        c["max_window_layers"] = min(int(c["max_window_layers"]), layers_new)
    c.pop("num_nextn_predict_layers", None)

    c.update(overrides)
    n_layers = int(c[layers_key])
    if isinstance(config.get("layer_types"), list):
        pattern = config["layer_types"]
        c["layer_types"] = [pattern[i % len(pattern)] for i in range(n_layers)]
    if isinstance(c.get("mlp_only_layers"), list):
        c["mlp_only_layers"] = [i for i in c["mlp_only_layers"] if i < n_layers]
    defaults = hf_config({"model_type": mt})  # special ids must lie inside the tiny vocab
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        v = c.get(k, getattr(defaults, k, None))
        if isinstance(v, int) and v >= int(c["vocab_size"]):
            c[k] = None
    hf_config(c)  # validate
    return c


# --------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------


def _cache_layers(cache: Any) -> list[Any]:
    if hasattr(cache, "layers"):
        return list(cache.layers)
    if isinstance(cache, (tuple, list)):  # legacy tuple-of-tuples
        return list(cache)
    raise TypeError(f"unknown cache type {type(cache).__name__}")


def kv_cache_layout(
    config: dict[str, Any],
    batch: int,
    seq: int,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "eager",
) -> list[dict[str, Any]]:
    """What the cache returned by a real prefill of ``[batch, seq]`` tokens holds, per layer.

    Each entry: ``layer``, ``kind`` (cache-layer class), ``tensors`` ({name: shape}),
    ``nbytes`` (logical bytes of the K/V tensors) and ``storage_nbytes`` (bytes of the
    storages they keep alive; larger than nbytes when a sliding layer holds a view).
    """
    model = real_model(config, dtype=dtype, attn_implementation=attn_implementation)
    model.train(False)
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    with torch.no_grad():
        out = model(input_ids=input_ids, use_cache=True)
    cache = getattr(out, "past_key_values", None)
    if cache is None:  # Mamba2ForCausalLM returns its cache as ``cache_params``
        cache = getattr(out, "cache_params", None)
    if cache is None:
        raise RuntimeError(f"{config['model_type']}: forward returned no cache")
    seen: set[int] = set()
    rows: list[dict[str, Any]] = []
    for i, layer in enumerate(_cache_layers(cache)):
        if isinstance(layer, (tuple, list)):
            named = {"keys": layer[0], "values": layer[1]}
            kind = "tuple"
        else:
            named = {}
            for k, v in vars(layer).items():  # recurrent layers keep their states in dicts
                parts = v.items() if isinstance(v, dict) else [(None, v)]
                for sub, t in parts:
                    if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
                        named[k if sub is None else f"{k}.{sub}"] = t
            kind = type(layer).__name__
        nbytes = 0
        storage = 0
        shapes: dict[str, tuple[int, ...]] = {}
        held: set[int] = set()
        for name, t in named.items():
            shapes[name] = tuple(t.shape)
            if id(t) in held:  # one tensor under two names (DeepSeek-V4: values is keys)
                continue
            held.add(id(t))
            nbytes += t.numel() * t.element_size()
            st = t.untyped_storage()
            if st.data_ptr() not in seen and st.nbytes():
                seen.add(st.data_ptr())
                storage += st.nbytes()
        rows.append(
            {
                "layer": i,
                "kind": kind,
                "tensors": shapes,
                "nbytes": nbytes,
                "storage_nbytes": storage,
            }
        )
    return rows


def kv_cache_bytes(
    config: dict[str, Any],
    batch: int,
    seq: int,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "eager",
) -> int:
    """Logical bytes of the K/V tensors in the cache after a real prefill (tiny configs only).

    Sliding-window layers count the ``window - 1`` tokens they logically keep; see
    :func:`kv_cache_layout` for the storage they pin.  DeepSeek MLA: HF caches the latent;
    DeepSeek-V4: one tensor for keys and values, and the compressors' state (trap 7).
    """
    return sum(r["nbytes"] for r in kv_cache_layout(config, batch, seq, dtype, attn_implementation))


# --------------------------------------------------------------------------------------------
# saved activations
# --------------------------------------------------------------------------------------------


class SavedTensor(NamedTuple):
    """One tensor saved for backward (one ``SavedVariable``)."""

    shape: tuple[int, ...]
    dtype: str
    grad_fn: str  # autograd node that saved it; "checkpoint:input" / "checkpoint:kwarg"; "?"
    nbytes: int  # logical bytes of this (possibly view) tensor
    storage: int  # storage group: equal numbers share one storage
    storage_nbytes: int  # bytes of the storage it pins
    counted: bool  # True for the first record of its storage (the one whose bytes are counted)
    module: str  # innermost module running when it was saved ("" = top-level model code)
    layer: int | None  # decoder-layer index, None outside the layers


class _Packed:
    __slots__ = ("__weakref__", "idx", "tensor")

    def __init__(self, idx: int, tensor: torch.Tensor) -> None:
        self.idx = idx
        self.tensor = tensor


class _Abort(Exception):
    """Raised to stop a checkpoint recompute triggered while walking the graph."""


def _layers_prefix(model: PreTrainedModel) -> str:
    text = model.config.get_text_config(decoder=True)  # a multimodal wrapper's language model
    n_layers = int(getattr(text, "num_hidden_layers", 0))
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and name:
            return str(name)
    raise RuntimeError("decoder layer list not found")


def _layer_index(path: str, prefix: str) -> int | None:
    if not path.startswith(prefix + "."):
        return None
    head = path[len(prefix) + 1 :].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _called_from_checkpoint_save_inputs() -> bool:
    """True when the pack hook runs for ``_CheckpointFrame.save_inputs`` (a layer's inputs)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "save_inputs" and code.co_filename.endswith("checkpoint.py"):
            return True
        frame = frame.f_back
    return False


def _walk_graph(roots: list[Any]) -> Iterator[Any]:
    seen: set[Any] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and nxt not in seen:
                stack.append(nxt)


def saved_activation_bytes(
    config: dict[str, Any],
    batch: int,
    seq: int,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "eager",
    checkpointing: bool = False,
    experts_implementation: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Bytes autograd keeps for backward after a train-mode forward with labels (loss included).

    Returns ``total`` (unique storages, parameters/buffers excluded), ``per_layer`` (bytes of
    storages first saved inside decoder layer i), ``outside_layers``, ``by_module`` (bytes per
    collapsed innermost module path, ``<model code>`` = code of the top-level forward, i.e. the
    loss), ``tensors`` (every saved tensor as :class:`SavedTensor`, in save order),
    ``experts_implementation`` / ``attn_implementation`` actually used, ``checkpointing``.
    """
    model = real_model(
        config,
        dtype=dtype,
        attn_implementation=attn_implementation,
        experts_implementation=experts_implementation,
        seed=seed,
    )
    if checkpointing:
        ckpt_kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=ckpt_kwargs)
        else:  # deprecated alias (FutureWarning in 5.x)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt_kwargs)  # type: ignore[no-untyped-call,unused-ignore]
    model.train()
    prefix = _layers_prefix(model)
    layer_list = cast("nn.ModuleList", model.get_submodule(prefix))
    if checkpointing and not all(getattr(m, "gradient_checkpointing", False) for m in layer_list):
        raise RuntimeError("gradient checkpointing was not enabled on every decoder layer")

    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    param_ptrs |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    names = {m: n for n, m in model.named_modules()}

    stack: list[str] = []
    records: list[dict[str, Any]] = []
    alive: list[weakref.ref[_Packed]] = []
    kwarg_tensors: list[tuple[torch.Tensor, str]] = []
    state = {"walking": False, "node": "?"}

    def pre_hook(mod: nn.Module, args: Any) -> None:
        if state["walking"]:
            raise _Abort
        stack.append(names[mod])

    def post_hook(mod: nn.Module, args: Any, out: Any) -> None:
        if stack and stack[-1] == names[mod]:
            stack.pop()

    def layer_kwargs_hook(mod: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        if not (checkpointing and mod.training):
            return
        for v in kwargs.values():
            items = v if isinstance(v, (tuple, list)) else (v,)
            for t in items:
                if isinstance(t, torch.Tensor):
                    kwarg_tensors.append((t, names[mod]))

    handles = []
    for mod in model.modules():
        handles.append(mod.register_forward_pre_hook(pre_hook))
        handles.append(mod.register_forward_hook(post_hook, always_call=True))
    for mod in layer_list:
        handles.append(mod.register_forward_pre_hook(layer_kwargs_hook, with_kwargs=True))

    def pack(t: torch.Tensor) -> _Packed:
        p = _Packed(len(records), t)
        name = "checkpoint:input" if _called_from_checkpoint_save_inputs() else None
        records.append({"tensor": t, "module": stack[-1] if stack else "", "grad_fn": name})
        alive.append(weakref.ref(p))
        return p

    def unpack(p: _Packed) -> torch.Tensor:
        if records[p.idx]["grad_fn"] is None:
            records[p.idx]["grad_fn"] = state["node"]
        return p.tensor

    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = model(input_ids=input_ids, labels=input_ids, use_cache=False)
        if out.loss is None:
            raise RuntimeError("model returned no loss")
        gc.collect()
        # name the node that saved each live tensor (trap 8); abort checkpoint recomputes (trap 9)
        roots = [t.grad_fn for t in (out.loss, out.logits) if isinstance(t, torch.Tensor)]
        state["walking"] = True
        for node in _walk_graph(roots):
            state["node"] = str(node.name())
            attrs = [a for a in dir(node) if a.startswith("_saved_")]
            if hasattr(node, "saved_tensors") and not attrs:
                attrs = ["saved_tensors"]
            for a in attrs:
                with contextlib.suppress(_Abort, RuntimeError):
                    getattr(node, a)
        state["walking"] = False
    finally:
        for h in handles:
            h.remove()

    live = [ref() for ref in alive]
    entries: list[tuple[torch.Tensor, str, str]] = []
    for p in live:
        if p is None:
            continue
        raw = records[p.idx]
        entries.append((raw["tensor"], raw["grad_fn"] or "?", raw["module"]))
    for t, mod_name in kwarg_tensors:
        entries.append((t, "checkpoint:kwarg", mod_name))

    storage_ids: dict[int, int] = {}
    tensors: list[SavedTensor] = []
    total = 0
    per_layer = [0] * len(layer_list)
    by_module: dict[str, int] = defaultdict(int)
    for t, name, mod_name in entries:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in param_ptrs:
            continue
        key = ptr if ptr else -1 - len(storage_ids)
        counted = key not in storage_ids
        if counted:
            storage_ids[key] = len(storage_ids)
        layer = _layer_index(mod_name, prefix)
        rec = SavedTensor(
            shape=tuple(t.shape),
            dtype=str(t.dtype).replace("torch.", ""),
            grad_fn=name,
            nbytes=t.numel() * t.element_size(),
            storage=storage_ids[key],
            storage_nbytes=st.nbytes(),
            counted=counted,
            module=mod_name,
            layer=layer,
        )
        tensors.append(rec)
        if counted:
            total += rec.storage_nbytes
            by_module[_collapse(mod_name) or "<model code>"] += rec.storage_nbytes
            if layer is not None:
                per_layer[layer] += rec.storage_nbytes

    if checkpointing:
        inner = [
            r for r in tensors if r.layer is not None and not r.grad_fn.startswith("checkpoint")
        ]
        if inner:
            raise RuntimeError(
                f"checkpointing requested but {len(inner)} tensors were saved inside layers"
            )
    return {
        "total": total,
        "per_layer": per_layer,
        "outside_layers": total - sum(per_layer),
        "by_module": dict(by_module),
        "tensors": tensors,
        "attn_implementation": model.config._attn_implementation,
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "checkpointing": checkpointing,
        "num_packed": len(records),
        "num_live": sum(1 for p in live if p is not None),
    }


def format_tensors(tensors: list[SavedTensor], layer: int | None = None) -> str:
    """Markdown table of saved tensors (those of ``layer``; all when ``layer`` is None)."""
    rows = [
        "| # | shape | dtype | saved by | module | bytes | storage | counted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(tensors):
        if layer is not None and r.layer != layer:
            continue
        rows.append(
            f"| {i} | {list(r.shape)} | {r.dtype} | {r.grad_fn} | {r.module} | {r.nbytes} | "
            f"S{r.storage} ({r.storage_nbytes}) | {'yes' if r.counted else 'shared'} |"
        )
    return "\n".join(rows)
