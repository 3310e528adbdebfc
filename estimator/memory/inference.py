"""Serving memory per GPU: weights, KV cache, activation peaks, runtime overhead, concurrency.

KV cache per token and layer is ``2 * kv_heads * head_dim`` elements for standard attention (K
and V), ``kv_lora_rank + qk_rope_head_dim`` for DeepSeek MLA's compressed latent (which, unlike
per-head caches, is replicated on every TP rank), in the KV-cache format. Sliding-window layers
keep at most ``window`` tokens (chunked-attention layers one chunk). KV heads split over TP; when
tp exceeds their number each rank keeps one (vLLM/TensorRT-LLM replicate them). Under PP a GPU
caches only its stage's layers. DeepSeek-V4's compressed layers add what transformers'
``DeepseekV4CSACache``/``DeepseekV4HCACache`` hold besides the window (``compressed_cache_elems``),
replicated on every TP rank like the single key-and-value head they extend.

Recurrent layers (Mamba, gated DeltaNet, short convolutions) keep no KV cache but a state of a
fixed size per sequence: each head's ``head_dim x state_dim`` scan state and the convolution's
last ``conv_kernel - 1`` inputs (vLLM's ``MambaStateShapeCalculator``; transformers keeps
``conv_kernel``), split over TP with the heads, in the model's dtype (vLLM's
``mamba_cache_dtype="auto"``), the scan state in fp32 where the config asks for it
(``mamba_ssm_cache_dtype``).

Activation peaks are the live tensors of one layer for the tokens in flight (a prefill chunk, or
one token per sequence when decoding, ``k + 1`` when a speculative step verifies ``k`` drafts):
the residual stream, the norm output, q/k/v, the attention output and the MLP's intermediate
(gate and up), plus fp32 logits for each of those tokens.

Speculative decoding (``spec.speculative``) adds the drafter: a draft model's weights and KV
cache (and recurrent state) at the target's TP, or an MTP / EAGLE head's layers in the target's
formats, its fusing projection (``eh_proj`` / ``fc``, replicated on every rank in the model's
dtype, as vLLM's ``ReplicatedLinear``), EAGLE-3's own head over its draft vocabulary and the
KV cache of its layers; the embedding and output head they share with the model are not counted
twice (the DeepSeek-V3 report's MTP shares them; an engine that loads the checkpoint's copies
holds ``2 x vocab x hidden`` more); the heads' norms (a few ``hidden`` each) are left out.

A prefix-cache hit (``InferenceSetup.prefix_cache_hit_rate``) changes no memory here: every
request is counted with its whole KV cache, the cached prefix's blocks included, as if no
other request shared them (the conservative reading: an engine shares a common prefix's blocks
between the requests that hit it, so it may hold more sequences than ``max_concurrency``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from estimator.errors import SpecError
from estimator.inputs.accelerator import GIB, Accelerator
from estimator.inputs.architecture import Compressor
from estimator.inputs.lengths import LengthDistribution
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, PRESETS, Precision
from estimator.inputs.speculative import Speculative, draft_pass, validate_speculative
from estimator.layout.parallel import Parallelism, validate_layout
from estimator.layout.sharding import (
    distinct_stages,
    layer_params,
    padded_vocab,
    serving_layer_split,
    stage_kind_counts,
    stage_params,
)
from estimator.terms import INFERENCE_MEMORY
from estimator.xp import Num, maximum, minimum

__all__ = [
    "RUNTIME_OVERHEAD_BYTES",
    "InferenceMemory",
    "InferenceSetup",
    "cached_elems",
    "compressed_cache_elems",
    "drafter_bytes",
    "inference_memory",
    "kv_cache_bytes_per_token",
    "kv_elems",
    "state_bytes_per_sequence",
]

# CUDA context, kernels, CUDA-graph pools and NCCL buffers of a serving engine (vLLM reserves its
# budget with gpu_memory_utilization=0.9; this is the part of that budget that is not KV cache).
RUNTIME_OVERHEAD_BYTES = 1.5 * GIB


@dataclass(frozen=True, slots=True)
class InferenceSetup:
    """A serving workload: ``concurrency`` sequences of ``input_len + output_len`` tokens.

    ``prefill_chunk`` is the number of prompt tokens processed in one forward (chunked prefill);
    by default one whole prompt. ``speculative``: speculative decoding (None: none).
    ``prefix_cache_hit_rate``: the fraction of each prompt's tokens found in the prefix cache
    (computed: the rest). ``lengths``: a length distribution (``estimator.inputs.lengths``) the
    load model reads (None: every request ``input_len`` / ``output_len``); ``input_len`` and
    ``output_len`` are then its rounded means, which the memory model and a lone request use.
    ``moe_imbalance`` (>= 1, mixture-of-experts models): the routed tokens the busiest
    expert-parallel rank takes over the balanced share; every step waits for that rank.
    ``num_prompts``: the load is a finite benchmark run of that many requests through the
    ``concurrency`` clients (``serving.run``), not the steady state (None).
    """

    input_len: int
    output_len: int
    concurrency: int = 1
    prefill_chunk: int | None = None
    speculative: Speculative | None = None
    prefix_cache_hit_rate: float = 0.0
    lengths: LengthDistribution | None = None
    moe_imbalance: float = 1.0
    num_prompts: int | None = None

    @property
    def cached_prompt_tokens(self) -> int:
        """Prompt tokens read from the prefix cache: the hit rate's share, at most all but the
        last, which is always computed for its logits (vLLM's
        ``KVCacheManager.get_computed_blocks`` caps a hit at ``num_tokens - 1``)."""
        if not self.prefix_cache_hit_rate:
            return 0
        return min(int(self.prefix_cache_hit_rate * self.input_len), self.input_len - 1)

    @property
    def queries(self) -> int:
        """Tokens per sequence a decode step runs: 1, or ``k + 1`` when it verifies ``k``
        drafts."""
        return 1 if self.speculative is None else self.speculative.queries


@dataclass(frozen=True, slots=True)
class InferenceMemory:
    """Per-GPU serving memory, in bytes, on the most-loaded pipeline stage."""

    weights_bytes: float
    kv_cache_bytes: float
    state_bytes: float
    draft_weights_bytes: float
    draft_kv_cache_bytes: float
    activation_peak_bytes: float
    runtime_overhead_bytes: float
    capacity_bytes: float
    kv_cache_bytes_per_token: float
    kv_cache_bytes_per_sequence: float
    state_bytes_per_sequence: float
    draft_kv_cache_bytes_per_sequence: float
    max_concurrency: int
    prefill_peak_bytes: float
    decode_peak_bytes: float
    stage: int
    notes: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> float:
        return _total_bytes(self.terms())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def terms(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in INFERENCE_TERMS}


INFERENCE_TERMS = tuple(t.key for t in INFERENCE_MEMORY)  # the registry's (``estimator.terms``)


def _total_bytes(terms: Mapping[str, Any]) -> float:
    """The sum of the ``INFERENCE_TERMS`` of a record or of its fields before it is built."""
    return float(sum(terms[name] for name in INFERENCE_TERMS))


def kv_elems(model: ModelSpec, kind_index: int, tp: Num) -> Num:
    """KV-cache elements per token of one layer of the kind on one TP rank (0 without
    attention)."""
    a = model.kinds[kind_index].attention
    if a is None:
        return 0
    if not a.cache_shards_with_tp:
        return a.cache_elems_per_token
    per_head = a.cache_elems_per_token // a.num_kv_heads
    return per_head * maximum(a.num_kv_heads // tp, 1)


def compressed_cache_elems(c: Compressor, context: Num) -> Num:
    """What a DeepSeek-V4 compressor keeps for one sequence of ``context`` tokens (transformers'
    ``DeepseekV4HCACache``, and ``DeepseekV4CSACache`` with its indexer's entries beside): every
    compressed entry (``context // ratio``, each ``entry_elems``), the projections and gates of
    the tokens of the window still open (``context % ratio`` of them, two series with
    ``overlap``), and, with ``overlap``, the first series of the last closed window (its
    projections and gates: ``ratio`` tokens), kept for the next entry."""
    entries = context // c.ratio
    series = 2 if c.overlap else 1
    pending = 2 * series * (context % c.ratio)
    carried = 2 * c.ratio * minimum(entries, 1) if c.overlap else 0
    return c.entry_elems * (entries + pending + carried)


def cached_elems(model: ModelSpec, kind_index: int, context: Num, tp: Num = 1) -> Num:
    """KV-cache elements of one sequence of ``context`` tokens in one layer of the kind on one
    TP rank: ``kv_elems`` per token over the tokens it keeps (its window or chunk at most), and a
    compressor's entries and state (0 without attention)."""
    a = model.kinds[kind_index].attention
    if a is None:
        return 0
    window = a.cache_window
    tokens = context if window is None else minimum(context, window)
    elems = tokens * kv_elems(model, kind_index, tp)
    if a.compressor is not None:
        elems = elems + compressed_cache_elems(a.compressor, context)
    return elems


def kv_cache_bytes_per_token(
    model: ModelSpec,
    precision: Precision,
    context: Num,
    *,
    tp: Num = 1,
    pp: Num = 1,
    stage: Num = 0,
) -> Num:
    """KV-cache bytes per sequence token on one GPU, averaged over a ``context``-token sequence
    (sliding-window layers stop growing at their window)."""
    return (
        kv_cache_bytes_per_sequence(model, precision, context, tp=tp, pp=pp, stage=stage) / context
    )


def kv_cache_bytes_per_sequence(
    model: ModelSpec,
    precision: Precision,
    context: Num,
    *,
    tp: Num = 1,
    pp: Num = 1,
    stage: Num = 0,
    counts: Sequence[Num] | None = None,
) -> Num:
    """KV-cache bytes of one sequence on pipeline rank ``stage`` (``counts``, its layers of
    each kind, may be passed in when the caller already has them)."""
    if counts is None:
        counts = stage_kind_counts(model, pp, 1, stage)
    total: Num = 0
    for k, n in enumerate(counts):
        total = total + n * cached_elems(model, k, context, tp)
    return total * DTYPES[precision.kv_cache].bytes


def state_bytes_per_sequence(
    model: ModelSpec,
    precision: Precision,
    *,
    tp: Num = 1,
    pp: Num = 1,
    stage: Num = 0,
    counts: Sequence[Num] | None = None,
) -> Num:
    """Recurrent-state bytes of one sequence on pipeline rank ``stage`` (scan and convolution
    states of its recurrent layers, on one TP rank)."""
    if not model.has_recurrent_layers:
        return 0
    if counts is None:
        counts = stage_kind_counts(model, pp, 1, stage)
    act_b = DTYPES[precision.activations].bytes
    total: Num = 0
    for kind, n in zip(model.kinds, counts, strict=True):
        r = kind.mixer
        if r is not None:
            scan_b = DTYPES["fp32"].bytes if r.state_fp32 else act_b
            total = total + n * (r.state_elems * scan_b + r.conv_state_elems * act_b) / tp
    return total


def _layer_live_elems(model: ModelSpec, tp: Num) -> Num:
    """Peak live elements per token inside one layer (largest kind)."""
    peak: Num = 0
    for kind in model.kinds:
        a, r = kind.attention, kind.mixer
        qkv = out = 0
        if a is not None:
            qkv = a.num_heads * a.qk_head_dim + a.num_kv_heads * (a.qk_head_dim + a.v_head_dim)
            out = a.num_heads * a.v_head_dim
        if r is not None:  # the convolution's channels in and out, then the scan's output
            qkv, out = qkv + 2 * r.conv_channels, out + r.heads * r.head_dim
        inter = max(
            (
                m.in_features * m.active
                for m in kind.linears
                if m.tp == "row" and m.component != "attention"
            ),
            default=0,
        )
        live = 2 * model.hidden_size + qkv / tp + out / tp + 2 * inter / tp
        peak = maximum(peak, live)
    return peak


def _weights_bytes(linear: Num, expert: Num, other: Num, precision: Precision, act_b: float) -> Num:
    """Weight bytes of linear weights, routed experts' weights and the rest (norms, biases,
    embeddings) in their formats."""
    return (
        linear * DTYPES[precision.weights].bytes
        + expert * DTYPES[precision.expert_format].bytes
        + other * act_b
    )


def _validate_draft(draft: ModelSpec, tp: int, context: int) -> None:
    """A draft model runs at the target's TP (vLLM's ``draft_tensor_parallel_size`` default)
    and must reach the target's context."""
    try:
        validate_layout(draft, Parallelism(tp=tp), training=False)
        _check_attention_dp(draft, Parallelism(tp=tp))  # a MoE draft's experts over tp
    except SpecError as exc:
        raise SpecError("draft_model", f"{draft.id} at tp={tp}: {exc.rule}", draft.id) from None
    _check_context(draft, context, "draft_model", draft.id)


def _check_context(model: ModelSpec, context: int, field: str, value: object) -> None:
    """``input_len + output_len`` within the model's ``max_position_embeddings``."""
    if model.max_seq_len is not None and context > model.max_seq_len:
        raise SpecError(
            field,
            f"input_len + output_len = {context} exceeds {model.id or 'the model'}'s"
            f" max_position_embeddings={model.max_seq_len}",
            value,
        )


def drafter_bytes(
    model: ModelSpec,
    spec: Speculative,
    parallel: Parallelism,
    precision: Precision,
    context: int,
) -> tuple[float, float]:
    """(weights on one GPU, KV cache and recurrent state per sequence on one GPU) of the
    speculative drafter: see the module docstring; nothing for ``k = 0``."""
    if not spec.drafting:
        return 0.0, 0.0
    tp = parallel.tp
    act_b = DTYPES[precision.activations].bytes
    one = draft_pass(model, spec)
    if one is None:  # a draft model, whole on each replica at the target's TP
        d = spec.draft
        if d is None:
            raise SpecError("draft_model", "is required by speculative_method=draft")
        p = stage_params(d, tp, 1, 1, 1, tp if d.moe is not None else 1, 0)
        weights = _weights_bytes(p.linear_weights, p.expert_weights, p.other + p.expert_other,
                                 precision, act_b)  # fmt: skip
        per_seq = kv_cache_bytes_per_sequence(
            d, precision, context, tp=tp
        ) + state_bytes_per_sequence(d, precision, tp=tp)
        return float(weights), float(per_seq)
    etp = 1
    if model.moe is not None:  # as the target's experts (``serving.steps.serving_layout``)
        etp = parallel.etp or max(parallel.dp * tp // parallel.ep, 1)
    counts = [n * one.modules for n in one.counts]
    zero: Num = 0.0
    linear = expert = other = zero
    for kind, n in zip(model.kinds, counts, strict=True):
        if n:
            lw, o, ew, eo, _ = layer_params(model, kind, tp, parallel.ep, etp)
            linear, expert, other = linear + n * lw, expert + n * ew, other + n * (o + eo)
    h = model.hidden_size
    other += one.modules * one.fuse_in * h  # eh_proj / fc, replicated on every rank
    if one.wide_qkv:  # EAGLE-3's QKV reads the embedding too: h more input features
        first = model.kinds[model.layer_kinds[0]]
        qkv = sum(
            m.out_features for m in first.linears if m.component == "attention" and m.tp == "column"
        )
        linear += h * qkv / tp
    if one.head_vocab is not None:  # its own head, split over TP as the model's
        other += one.head_vocab * model.embed_dim / tp
    weights = _weights_bytes(linear, expert, other, precision, act_b)
    per_seq = kv_cache_bytes_per_sequence(
        model, precision, context, tp=tp, counts=counts
    ) + state_bytes_per_sequence(model, precision, tp=tp, counts=counts)
    return float(weights), float(per_seq)


def _check_attention_dp(model: ModelSpec, p: Parallelism) -> None:
    """A serving layout's experts: over ``ep`` ranks of the TP group, or with attention data
    parallel (``dp > 1``, mixture-of-experts models only) of the ``dp x tp`` GPUs, each expert
    split over the rest (``dp tp / ep`` ranks, ``tp / ep`` without attention data parallel),
    which must divide its width (the layout rules leave this split to this check)."""
    if model.moe is None:
        if p.dp > 1:
            raise SpecError(
                "layout.dp",
                "attention data parallel needs a mixture-of-experts model: a dense model's"
                " data-parallel ranks are independent replicas (set replicas instead)",
                p.dp,
            )
        return
    ranks = p.dp * p.tp
    if ranks % p.ep:
        where = "dp*tp" if p.dp > 1 else "tp"
        raise SpecError(
            "layout.ep",
            f"ep={p.ep} must divide {where}={ranks} (experts are spread over the"
            f" {'GPUs' if p.dp > 1 else 'TP ranks'} of a replica)",
            p.ep,
        )
    if p.dp > 1 and p.pp > 1:
        raise SpecError(
            "layout.dp", "attention data parallel is modelled without pipeline stages (pp = 1)",
            p.dp,
        )  # fmt: skip
    width = model.moe.expert_intermediate_size
    split = ranks // p.ep
    if width % split:  # ``serving_layout``'s expert split (etp), worded with the request's fields
        over = ("dp*tp" if p.dp > 1 else "tp") + ("/ep" if p.ep > 1 else "")
        raise SpecError(
            "layout.ep" if p.ep > 1 else "layout.tp",
            f"{over}={split} ranks split each expert, and must divide its"
            f" intermediate_size={width}",
            p.ep if p.ep > 1 else p.tp,
        )


_RUNTIME_NOTE = (
    "Runtime overhead (CUDA context, CUDA graphs, NCCL) is a planning default of"
    f" {RUNTIME_OVERHEAD_BYTES / GIB:.1f} GiB."
)


def _recipe_notes(precision: Precision) -> list[str]:
    """What a training recipe's precision (bf16 weights, low-precision copies the GEMMs read)
    means in a serving plan: not a served quantized checkpoint, which holds only those."""
    if precision.weight_cache is None:
        return []
    fmt, stored = precision.weight_cache, precision.weights
    preset = f"{fmt}-serving"
    how = f"as {preset} or" if preset in PRESETS else "with"
    return [
        f"Precision {precision.name} is a training recipe: the weights are held in {stored} and"
        f" the GEMMs read {fmt} copies of them, so memory counts {stored} weights while the step"
        f" reads {fmt} ones. A served {fmt} checkpoint holds only the quantized weights: plan it"
        f' {how} precision {{"weights": "{fmt}"}}.'
    ]


def inference_memory(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
) -> InferenceMemory:
    """Per-GPU serving memory of one replica on its most loaded pipeline stage (the module
    docstring's terms), the sequences its KV cache holds, and notes on what it assumes."""
    _check_serving(model, parallel, setup)
    context = setup.input_len + setup.output_len
    spec = setup.speculative
    drafter = 0.0, 0.0
    if spec is not None:
        validate_speculative(model, spec, parallel.pp)
        if spec.draft is not None:
            _validate_draft(spec.draft, parallel.tp, context)
        drafter = drafter_bytes(model, spec, parallel, precision, context)
    best = _most_loaded_stage(model, accelerator, parallel, setup, precision, drafter)
    notes = _memory_notes(model, parallel, setup, precision, best)
    return InferenceMemory(**best, notes=tuple(notes))


def _check_serving(model: ModelSpec, parallel: Parallelism, setup: InferenceSetup) -> None:
    """A serving layout (one replica: tp, pp, dp and ep) and a workload the model takes (its
    lengths, concurrency, context, routing imbalance and prefix-cache hit rate in range)."""
    validate_layout(model, parallel, training=False)
    if parallel.cp != 1 or parallel.vp != 1:
        raise SpecError("layout", "serving layouts take tp, pp, dp and ep (one replica)")
    _check_attention_dp(model, parallel)
    for name in ("input_len", "output_len", "concurrency"):
        if getattr(setup, name) < (0 if name == "output_len" else 1):
            raise SpecError(
                name,
                "must be >= 1" if name != "output_len" else "must be >= 0",
                getattr(setup, name),
            )
    _check_context(model, setup.input_len + setup.output_len, "input_len", setup.input_len)
    if not setup.moe_imbalance >= 1:
        raise SpecError("moe_imbalance", "must be >= 1 (1: balanced routing)", setup.moe_imbalance)
    if setup.moe_imbalance != 1 and model.moe is None:
        raise SpecError(
            "moe_imbalance", "needs a mixture-of-experts model (this one is dense)",
            setup.moe_imbalance,
        )  # fmt: skip
    if not 0 <= setup.prefix_cache_hit_rate <= 1:
        raise SpecError("prefix_cache_hit_rate", "must be between 0 and 1",
                        setup.prefix_cache_hit_rate)  # fmt: skip


def _most_loaded_stage(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
    drafter: tuple[float, float],
) -> dict[str, Any]:
    """``InferenceMemory``'s fields (but its notes) on the most loaded pipeline stage (the first
    of equals, as ``max`` picks): each distinct stage's weights, the busiest attention group's
    sequences' KV cache and state, the prefill chunk's and the decode step's activation peaks,
    and the sequences what is left holds. ``drafter``: the speculative drafter's (weights, bytes
    a sequence) (``drafter_bytes``)."""
    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, parallel.dp
    etp = dp * tp // ep if model.moe is not None else 1
    per_rank = -(-setup.concurrency // dp)  # the busiest attention group's sequences
    act_b = DTYPES[precision.activations].bytes
    chunk = setup.prefill_chunk or setup.input_len
    context = setup.input_len + setup.output_len
    draft_weights, draft_per_seq = drafter
    best: dict[str, Any] = {}
    best_total = -1.0
    live = _layer_live_elems(model, tp) * act_b
    logits = (padded_vocab(model, tp) // tp) * DTYPES["fp32"].bytes
    for shape in distinct_stages(model, pp, parallel.stage_layers):  # ranks alike: same bytes
        stage = shape.stage
        p = stage_params(model, tp, pp, 1, ep, etp, stage, counts=shape.counts)
        weights = _weights_bytes(
            p.linear_weights, p.expert_weights, p.other + p.expert_other, precision, act_b
        )
        per_seq = kv_cache_bytes_per_sequence(model, precision, context, tp=tp, counts=shape.counts)
        state = state_bytes_per_sequence(model, precision, tp=tp, counts=shape.counts)
        last = shape.last
        prefill = chunk * live + last * logits
        decode = per_rank * setup.queries * (live + last * logits)
        peak = max(prefill, decode)
        free = accelerator.memory_bytes - weights - draft_weights - peak - RUNTIME_OVERHEAD_BYTES
        held = per_seq + state + draft_per_seq  # bytes each sequence holds
        values = {
            "weights_bytes": float(weights),
            "kv_cache_bytes": float(per_rank * per_seq),
            "draft_weights_bytes": draft_weights,
            "draft_kv_cache_bytes": per_rank * draft_per_seq,
            "activation_peak_bytes": float(peak),
            "runtime_overhead_bytes": RUNTIME_OVERHEAD_BYTES,
            "capacity_bytes": float(accelerator.memory_bytes),
            "kv_cache_bytes_per_token": float(per_seq / context),
            "kv_cache_bytes_per_sequence": float(per_seq),
            "state_bytes": float(per_rank * state),
            "state_bytes_per_sequence": float(state),
            "draft_kv_cache_bytes_per_sequence": draft_per_seq,
            "max_concurrency": dp * max(int(free // held), 0) if held else 0,
            "prefill_peak_bytes": float(prefill),
            "decode_peak_bytes": float(decode),
            "stage": stage,
        }
        total = _total_bytes(values)
        if total > best_total:
            best, best_total = values, total
    return best


def _memory_notes(
    model: ModelSpec,
    parallel: Parallelism,
    setup: InferenceSetup,
    precision: Precision,
    best: Mapping[str, Any],
) -> list[str]:
    """What the memory of the most loaded stage (``best``: ``_most_loaded_stage``'s fields)
    assumes (overhead, recipe, cache kinds, pipeline split, attention DP) and what limits it."""
    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, parallel.dp
    per_rank = -(-setup.concurrency // dp)  # the busiest attention group's sequences
    context = setup.input_len + setup.output_len
    notes = [_RUNTIME_NOTE, *_recipe_notes(precision)]
    cores = [k.attention for k in model.kinds if k.attention is not None]
    if any(a.window for a in cores):
        notes.append("Sliding-window layers cache at most their window of tokens.")
    if any(a.chunk and not a.window for a in cores):
        notes.append("Chunked-attention layers cache at most one chunk of tokens.")
    if any(a.compressor is not None for a in cores):
        notes.append(
            "Compressed-attention layers also cache one compressed entry per compress ratio of"
            " tokens (and their indexer's keys), and the compressor's open window."
        )
    if any(not a.cache_shards_with_tp for a in cores) and tp > 1:
        notes.append("MLA's latent KV cache is replicated on every TP rank.")
    if any(a.num_kv_heads < tp for a in cores):
        notes.append("tp exceeds the KV-head count: KV heads are replicated across TP ranks.")
    if model.has_recurrent_layers:
        notes.append(
            "Recurrent layers keep a fixed-size state per sequence (scan and convolution states,"
            " in the model's dtype) instead of a KV cache."
        )
    split = serving_layer_split(model, pp, parallel.stage_layers)
    if len(set(split)) > 1:
        notes.append(
            f"Uneven pipeline split: {' + '.join(map(str, split))} decoder layers over pp={pp}"
            " (the serving engine's, vLLM's get_pp_indices by default); the memory is stage"
            f" {best['stage']}'s, the most loaded, and the slowest stage sets the step time."
        )
    if dp > 1:
        notes.append(
            f"Attention data parallel: {dp} groups of {tp} GPU{'s' if tp > 1 else ''}, each with"
            f" its own sequences and KV cache ({per_rank} of the {setup.concurrency} on the"
            f" busiest); the routed experts over {ep} of the {dp * tp} GPUs; attention and dense"
            " layers replicated in every group."
        )
    if best["max_concurrency"] < setup.concurrency:
        notes.append(
            f"KV cache limits concurrency to {best['max_concurrency']} sequences of {context} "
            "tokens."
        )
    return notes
