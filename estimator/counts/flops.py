"""Forward and training FLOPs under one stated convention.

Convention (the one ``torch.utils.flop_counter.FlopCounterMode`` uses, so the tests can compare
exactly): only matrix multiplies count, 2 FLOPs per multiply-add; bias adds, norms, activations,
softmax and embedding lookups count zero. Attention scores ``Q K^T`` and ``P V`` are counted over
the full ``s x s`` square (``attention_core``), as an eager or math-SDPA kernel computes them.

``attention_core_causal`` counts only the unmasked half (and, for sliding-window layers, only the
window; for chunked attention only the chunk; for sparse attention only the selected keys, plus
its indexer's scores over every earlier key; for DeepSeek-V4's compressed keys only the entries
whose windows a query has passed, at most ``topk`` of them, with its indexer's scores over all of
those): the work a causal flash kernel must do, used for *model FLOPs* (MFU). Backward is twice
the forward (two GEMMs per forward GEMM: input and weight gradients). LoRA and QLoRA
(``estimator.finetune``) add the adapters' GEMMs to the forward and drop the frozen weights'
gradient GEMMs from the backward: frozen GEMMs once their forward (input gradients), adapters and
the attention and mixer cores twice.

Recurrent mixers (``mixer_core``) count the matrix multiplies of the algorithm their
reference implementation runs (Mamba-2's SSD chunks, Mamba-1's scan outputs, gated DeltaNet's
chunked delta rule), with the sequence padded to whole chunks as that implementation pads it,
and their depthwise convolution as torch counts a convolution (2 FLOPs per tap and output, over
the padded output). Model FLOPs take them as the fused kernels run them (``mixer_core_kernel``):
the same, except where the reference code spends quadratic work a kernel does linearly (Mamba-2
passes states from chunk to chunk with a scan, not a (chunks + 1)^2 matrix product) and where a
kernel multiplies what the reference solves uncounted (gated DeltaNet's WY products;
``mixer_flops`` lists each kind).

Every function takes sequence length and batch as ints or numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

from estimator.finetune import FULL, FineTune, adapters
from estimator.inputs.architecture import (
    AttentionCore,
    Component,
    Compressor,
    LayerKind,
    RecurrentCore,
)
from estimator.inputs.model import ModelSpec
from estimator.memo import per_model
from estimator.memory.activations import op_policy, recomputed_linears
from estimator.records import from_fields
from estimator.xp import Num, minimum

__all__ = [
    "CoreTerm",
    "ForwardFlops",
    "Recompute",
    "TrainingFlops",
    "attended_keys",
    "attention_terms",
    "causal_pairs",
    "chunked_pairs",
    "compressed_pairs",
    "core_pairs_flops",
    "core_square_flops",
    "core_term",
    "forward_flops",
    "mixer_flops",
    "mtp_core_flops",
    "mtp_per_token",
    "op_recomputed_flops_per_token",
    "op_recomputed_share",
    "training_flops",
]

Recompute = Literal["none", "selective", "op", "full"]


@dataclass(frozen=True, slots=True)
class ForwardFlops:
    """Forward-pass FLOPs for ``batch`` sequences of ``seq_len`` tokens, by component."""

    embeddings: Num
    attention_proj: Num
    attention_core: Num
    attention_core_causal: Num
    mixer_proj: Num
    mixer_core: Num
    mixer_core_kernel: Num
    mlp: Num
    experts: Num
    shared_experts: Num
    router: Num
    hyper_connections: Num
    output_head: Num

    @property
    def total(self) -> Num:
        """torch's count: full-square attention."""
        return self.matmul + self.attention_core + self.mixer_core

    @property
    def total_causal(self) -> Num:
        """Model FLOPs: attention with the causal mask (and windows) applied, recurrent mixers
        as their fused kernels run."""
        return self.matmul + self.attention_core_causal + self.mixer_core_kernel

    @property
    def matmul(self) -> Num:
        """Everything but the attention scores (weights x activations)."""
        return (
            self.embeddings
            + self.attention_proj
            + self.mixer_proj
            + self.mlp
            + self.experts
            + self.shared_experts
            + self.router
            + self.hyper_connections
            + self.output_head
        )


def causal_pairs(seq: Num, window: int | None) -> Num:
    """Unmasked (query, key) pairs of a causal, optionally windowed, sequence."""
    if window is None:
        return seq * (seq + 1) // 2
    m = minimum(seq, window)
    return m * (m + 1) // 2 + (seq - m) * window


def chunked_pairs(seq: Num, chunk: int) -> Num:
    """Unmasked pairs of causal attention within aligned ``chunk``-token blocks."""
    rest = seq % chunk
    return (seq // chunk) * (chunk * (chunk + 1) // 2) + rest * (rest + 1) // 2


def compressed_pairs(seq: Num, ratio: int, cap: int | None = None) -> Num:
    """(query, compressed entry) pairs of a causal sequence: the query at position ``t`` sees the
    ``(t + 1) // ratio`` entries whose windows it has passed (transformers'
    ``causal_threshold``), at most ``cap`` of them (sparse attention's top-k)."""

    def upto(s: Num) -> Num:  # sum of u // ratio for u = 1 .. s
        q = s // ratio
        return ratio * q * (q - 1) // 2 + q * (s % ratio + 1)

    if cap is None:
        return upto(seq)
    edge = minimum(seq, (cap + 1) * ratio - 1)  # beyond it a query sees more than cap entries
    return upto(edge) + (seq - edge) * cap


class CoreTerm(NamedTuple):
    """One layer kind's attention core as the FLOP formulas read it (``core_term``): its
    ``layers``, the FLOPs of ``Q K^T`` and ``P V`` per (query, key) pair, the ``window`` capping
    a query's keys (a sliding window or sparse attention's top-k), its attention ``chunk``, a
    DeepSeek-V3.2 indexer's FLOPs per (query, earlier key) pair and DeepSeek-V4's
    ``compressor``."""

    layers: int
    per_pair: int
    window: int | None
    chunk: int | None
    index_per_pair: int
    compressor: Compressor | None


def _compressor_index_per_pair(c: Compressor) -> int:
    """DeepSeek-V4's indexer: ``q . k`` per head (one matmul); its heads' scores are then
    weighted and summed elementwise, which torch does not count (``DeepseekV4IndexerScorer``)."""
    return 2 * c.index_heads * c.index_head_dim


def core_pairs_flops(term: CoreTerm, seq: Num) -> Num:
    """Causal attention-core FLOPs of one layer of ``term`` over one ``seq``-token sequence."""
    pairs = chunked_pairs(seq, term.chunk) if term.chunk else causal_pairs(seq, term.window)
    flops = term.per_pair * pairs
    if term.index_per_pair:
        flops = flops + term.index_per_pair * causal_pairs(seq, None)
    c = term.compressor
    if c is not None:
        flops = flops + term.per_pair * compressed_pairs(seq, c.ratio, c.topk)
        if c.index_heads:
            flops = flops + _compressor_index_per_pair(c) * compressed_pairs(seq, c.ratio)
    return flops


def core_square_flops(term: CoreTerm, seq: Num) -> Num:
    """Attention-core FLOPs of one layer over one ``seq``-token sequence as an eager kernel
    computes them (torch's count): every query against every key, the masked ones too, and, with
    a compressor, against every compressed entry (``seq // ratio``), scored by its indexer."""
    keys = seq
    flops: Num = term.index_per_pair * seq * seq
    c = term.compressor
    if c is not None:
        entries = seq // c.ratio
        keys = keys + entries
        flops = flops + _compressor_index_per_pair(c) * seq * entries
    return flops + term.per_pair * seq * keys


def attended_keys(term: CoreTerm, seq: Num) -> Num:
    """The keys the last query of a ``seq``-token sequence attends to: the whole sequence, its
    window or chunk, plus the compressed entries it may use (what a flash kernel's efficiency
    depends on)."""
    span = term.window if term.window is not None else term.chunk
    keys = seq if span is None else minimum(seq, span)
    c = term.compressor
    if c is not None:
        entries = seq // c.ratio
        keys = keys + (entries if c.topk is None else minimum(entries, c.topk))
    return keys


def core_term(n: int, a: AttentionCore) -> CoreTerm:
    cap = a.window if a.topk is None else a.topk if a.window is None else min(a.window, a.topk)
    return CoreTerm(
        n,
        2 * a.num_heads * (a.qk_head_dim + a.v_head_dim),
        cap,
        a.chunk if a.window is None else None,
        # the indexer's q.k per head, then its per-head weights summed (DeepSeek-V3.2's
        # sum_h w_h relu(q_h . k): two matmuls in transformers' DeepseekV32Indexer)
        2 * a.index_heads * (a.index_head_dim + 1),
        a.compressor,
    )


def attention_terms(model: ModelSpec) -> tuple[CoreTerm | None, ...]:
    """Per layer kind, its attention core's ``CoreTerm`` (``core_pairs_flops`` and
    ``core_square_flops`` read it), or None for a kind without attention. ``Q K^T`` and ``P V``
    cost ``2 heads (qk_head_dim + v_head_dim)`` per pair, a sparse-attention indexer
    ``2 index_heads (index_head_dim + 1)`` (computed once per model)."""
    return _tables(model)[1]


def mixer_flops(core: RecurrentCore, seq: Num, kernel: bool = False) -> Num:
    """Matmul and convolution FLOPs of one recurrent mixer's core over one ``seq``-token
    sequence: as its reference implementation runs (``kernel=False``, what torch's counter sees
    on transformers' PyTorch path; see the module docstring), or as a fused kernel runs it
    (``kernel=True``). Every kind starts with its depthwise convolution, counted over the padded
    output (``seq + conv_kernel - 1`` positions) in both modes: causal_conv1d computes only the
    ``seq`` kept ones, ``2 conv_channels conv_kernel (conv_kernel - 1)`` FLOPs fewer per
    sequence and layer, left out of the kernel count so that one expression serves both.

    - ``mamba2`` (SSD, ``mamba2_chunk_scan``): the chunks' ``C B^T`` scores applied to x, the
      chunk states ``B^T x`` and their outputs ``C state``, with B and C repeated to every head;
      the states passed from chunk to chunk by a (chunks + 1)^2 matrix of decays in the
      reference, by mamba_ssm's linear ``_state_passing_fwd`` scan in the kernel (2 FLOPs per
      state element and chunk).
    - ``mamba1`` (selective scan): ``y_t = C_t . h_t``, ``state_dim`` multiply-adds per
      channel and token, a ``bmm`` per step in transformers' sequential loop and the same sum in
      mamba_ssm's ``selective_scan_fwd``: no difference. The state update ``h_t = exp(dt A) h +
      dt B x`` is element-wise in both and counts nothing. (Jamba's ``dt_proj`` is a ``Linear``
      of the layer, not part of this count.)
    - ``gated_deltanet`` (chunked delta rule, ``head_dim`` = dv, ``state_dim`` = dk, q and k
      repeated to every value head): per chunk of ``chunk`` tokens and value head, ``beta K K^T``
      and ``Q K^T`` (chunk^2 dk each), the masked scores applied to the new values (chunk^2 dv),
      the state read by the decayed keys and by the queries and the state update ``K^T v``
      (chunk dk dv each). flash-linear-attention's ``chunk_gated_delta_rule`` also multiplies
      the inverted ``(I + beta K K^T)`` into ``beta K`` and ``beta V`` (its WY ``w`` and ``u``,
      chunk^2 (dk + dv)), which transformers solves with ``torch.linalg.solve_triangular``, an
      op torch's counter does not count: the kernel count adds them.
    - ``short_conv`` (LFM2): the convolution only (its gates are element-wise).
    """
    conv = 2 * core.conv_channels * core.conv_kernel * (seq + core.conv_kernel - 1)
    h, p, n = core.heads, core.head_dim, core.state_dim
    if core.kind == "mamba2":
        q = core.chunk
        chunks = -(-seq // q)
        intra = 2 * chunks * q * q * h * (n + p)  # C B^T scores, then applied to x
        states = 2 * chunks * q * h * p * n * 2  # chunk states from B x, outputs from C states
        passed = chunks if kernel else (chunks + 1) * (chunks + 1)  # scan vs decay matrix
        passing = 2 * passed * h * p * n
        return conv + intra + states + passing
    if core.kind == "mamba1":
        return conv + 2 * seq * h * p * n
    if core.kind == "gated_deltanet":
        q = core.chunk
        chunks = -(-seq // q)
        scores = 2 * q * q * (2 * n + p)  # beta K K^T and Q K^T, then applied to v
        state = 2 * q * n * p * 3  # the state read by the decayed keys and the queries, updated
        wy = 2 * q * q * (n + p) if kernel else 0  # w and u as matmuls (solved in the reference)
        return conv + chunks * h * (scores + state + wy)
    if core.kind == "short_conv":
        return conv
    raise NotImplementedError(core.kind)


def _mixer_core(model: ModelSpec, seq_len: Num, kernel: bool = False) -> Num:
    total: Num = 0
    for kind, n in zip(model.kinds, model.kind_counts, strict=True):
        if kind.mixer is not None and n:
            total = total + n * mixer_flops(kind.mixer, seq_len, kernel)
    return total


# the components whose linears multiply (norms do not; the output head is counted apart)
_COMPONENTS = tuple(c for c in get_args(Component) if c not in ("norms", "output_head"))


@per_model
def _tables(model: ModelSpec) -> tuple[dict[str, int], tuple[CoreTerm | None, ...]]:
    """Matmul FLOPs per token by component, plus the output ``head``, the decoder ``layers`` (all
    but embeddings, the hyper-connection head and the output head) and the whole ``matmul``; and
    the ``attention_terms`` (layout- and length-independent, computed once per model)."""
    per_token = dict.fromkeys(_COMPONENTS, 0)
    for kind, n in zip(model.kinds, model.kind_counts, strict=True):
        for m in kind.linears:
            per_token[m.component] += n * m.forward_flops_per_token()
        per_token["hyper_connections"] += n * kind.blocks * model.stream_mix_flops_per_block
    per_token["embeddings"] += sum(m.forward_flops_per_token() for m in model.embedding_projections)
    per_token["layers"] = sum(per_token[c] for c in _COMPONENTS if c != "embeddings")
    per_token["hyper_connections"] += model.stream_head_flops_per_token
    per_token["head"] = 2 * model.vocab_size * model.embed_dim
    per_token["matmul"] = (
        per_token["layers"]
        + per_token["embeddings"]
        + model.stream_head_flops_per_token
        + per_token["head"]
    )
    terms = tuple(
        None if kind.attention is None else core_term(n, kind.attention)
        for kind, n in zip(model.kinds, model.kind_counts, strict=True)
    )
    return per_token, terms


def forward_flops(model: ModelSpec, seq_len: Num, batch: Num = 1) -> ForwardFlops:
    tokens = seq_len * batch
    per_token, attention = _tables(model)
    core: Num = 0
    core_causal: Num = 0
    for term in attention:
        if term is not None:
            core = core + term.layers * core_square_flops(term, seq_len)
            core_causal = core_causal + term.layers * core_pairs_flops(term, seq_len)
    return ForwardFlops(
        embeddings=tokens * per_token["embeddings"],
        attention_proj=tokens * per_token["attention"],
        attention_core=batch * core,
        attention_core_causal=batch * core_causal,
        mixer_proj=tokens * per_token["mixer"],
        mixer_core=batch * _mixer_core(model, seq_len),
        mixer_core_kernel=batch * _mixer_core(model, seq_len, kernel=True),
        mlp=tokens * per_token["mlp"],
        experts=tokens * per_token["experts"],
        shared_experts=tokens * per_token["shared_experts"],
        router=tokens * per_token["router"],
        hyper_connections=tokens * per_token["hyper_connections"],
        output_head=tokens * per_token["head"],
    )


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs of one training pass (forward + backward) over the given tokens.

    ``model`` is the MFU numerator (causal attention, no recompute: 3x the causal forward for
    full training; for LoRA and QLoRA the FLOPs the step needs, with no weight gradients of
    frozen weights). ``hardware`` adds the recomputed forward work (HFU numerator): full
    recompute repeats the whole forward of the layers (adapters included), selective recompute
    repeats the attention scores only (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models"), the per-op policy (``op``) the projections it
    does not save (``op_recomputed_flops_per_token``). Built with ``records.from_fields`` (no
    ``__slots__``).
    """

    forward: Num
    backward: Num
    recompute: Num

    @property
    def model(self) -> Num:
        return self.forward + self.backward

    @property
    def hardware(self) -> Num:
        return self.forward + self.backward + self.recompute


def _op_recomputed(kind: LayerKind) -> int:
    """Forward FLOPs per token of a layer's projections the per-op policy does not save
    (``memory.activations.op_policy``)."""
    return sum(m.forward_flops_per_token() for m in op_policy(kind)[1])


@per_model
def op_recomputed_flops_per_token(model: ModelSpec) -> int:
    """Forward FLOPs per token the per-op checkpointing policy repeats in the backward: the
    projections whose outputs it does not save, over every layer; attention's output is saved,
    and pointwise work is not counted as FLOPs."""
    return sum(
        n * _op_recomputed(kind) for kind, n in zip(model.kinds, model.kind_counts, strict=True)
    )


def op_recomputed_share(kind: LayerKind) -> float:
    """The share of a layer's projection FLOPs the per-op policy repeats (its GEMM time's)."""
    return _op_recomputed(kind) / max(sum(m.forward_flops_per_token() for m in kind.linears), 1)


@per_model
def module_recomputed_flops_per_token(model: ModelSpec, modules: tuple[str, ...]) -> int:
    """Forward FLOPs per token Megatron-Core's selective recompute ``modules`` repeat in the
    backward: their projections (``activations.recomputed_linears``) over every layer; the
    core attention's are counted apart (``core_attn``), pointwise work is not FLOPs."""
    h = model.hidden_size
    return sum(
        n * sum(m.forward_flops_per_token() for m in recomputed_linears(kind, modules, h))
        for kind, n in zip(model.kinds, model.kind_counts, strict=True)
    )


def module_recomputed_share(kind: LayerKind, modules: tuple[str, ...], hidden: int) -> float:
    """The share of a layer's projection FLOPs the recompute ``modules`` repeat (its GEMM
    time's)."""
    again = sum(m.forward_flops_per_token() for m in recomputed_linears(kind, modules, hidden))
    return again / max(sum(m.forward_flops_per_token() for m in kind.linears), 1)


@per_model
def mtp_per_token(model: ModelSpec) -> tuple[int, int]:
    """Matmul FLOPs per token of one multi-token-prediction depth (``TrainingSetup.mtp_layers``,
    Megatron-Core's ``MultiTokenPredictionLayer``): its decoder layers (``ModelSpec.mtp_module``)
    with the 2h x h projection of the normed embedding and hidden state, then the second pass
    through the output head; the first of the two is what full recompute repeats."""
    layers = 2 * 2 * model.hidden_size * model.hidden_size  # eh_proj
    for k in model.mtp_module:
        kind = model.kinds[k]
        layers += sum(m.forward_flops_per_token() for m in kind.linears)
        layers += kind.blocks * model.stream_mix_flops_per_block
    return layers, 2 * model.vocab_size * model.embed_dim


def mtp_core_flops(model: ModelSpec, seq_len: Num, kernel: bool = True) -> Num:
    """Attention-core (causal pairs) and recurrent-mixer FLOPs of one sequence through one
    multi-token-prediction depth's decoder layers."""
    total: Num = 0
    for k in model.mtp_module:
        kind = model.kinds[k]
        if kind.attention is not None:
            total = total + core_pairs_flops(core_term(1, kind.attention), seq_len)
        if kind.mixer is not None:
            total = total + mixer_flops(kind.mixer, seq_len, kernel)
    return total


def training_flops(
    model: ModelSpec,
    seq_len: Num,
    batch: Num = 1,
    recompute: Recompute = "none",
    finetune: FineTune = FULL,
    modules: tuple[str, ...] = (),
    mtp: int = 0,
) -> TrainingFlops:
    """``forward_flops``' causal total, its backward and the recomputed work, from the same
    per-token and per-pair tables (integers, so the sums are exact and equal
    ``forward_flops(...).total_causal`` and its parts). With a frozen base (``finetune``), the
    forward adds the adapters' ``adapters(...).flops_per_token`` and the backward is the cores'
    and adapters' twice plus the frozen GEMMs' input gradients once. ``mtp`` multi-token-
    prediction depths add ``mtp_per_token`` and ``mtp_core_flops`` each (full training only:
    ``TrainingSetup.mtp_layers``), in the forward, twice in the backward and, under full
    recompute, their layers' forward again (Megatron-Core checkpoints the MTP layer too)."""
    per_token, attention = _tables(model)
    core_causal: Num = 0
    for term in attention:
        if term is not None:
            core_causal = core_causal + term.layers * core_pairs_flops(term, seq_len)
    core_causal = batch * core_causal
    mixers = batch * _mixer_core(model, seq_len, kernel=True) if model.has_recurrent_layers else 0
    tokens = seq_len * batch
    lora = adapters(model, finetune).flops_per_token if finetune.frozen else 0
    forward = tokens * (per_token["matmul"] + lora) + core_causal + mixers
    if finetune.frozen:  # no weight-gradient GEMMs for the frozen weights
        backward = 2 * (core_causal + mixers) + tokens * (per_token["matmul"] + 2 * lora)
    else:
        backward = 2 * forward
    if recompute == "full":  # the decoder layers' forward again: all but embeddings and head
        extra = tokens * (per_token["layers"] + lora) + core_causal + mixers
    elif recompute == "selective":  # the core attention, or Megatron-Core's ``modules``
        extra = core_causal if not modules or "core_attn" in modules else 0
        if modules:
            extra = extra + tokens * module_recomputed_flops_per_token(model, modules)
    elif recompute == "op":
        extra = tokens * op_recomputed_flops_per_token(model)
    else:
        extra = 0
    if mtp:
        mtp_layers, mtp_head = mtp_per_token(model)
        core = batch * mtp_core_flops(model, seq_len)
        depth = tokens * (mtp_layers + mtp_head) + core
        forward, backward = forward + mtp * depth, backward + 2 * mtp * depth
        if recompute == "full":
            extra = extra + mtp * (tokens * mtp_layers + core)
    return from_fields(
        TrainingFlops, {"forward": forward, "backward": backward, "recompute": extra}
    )
