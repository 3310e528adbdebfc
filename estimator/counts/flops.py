"""Forward and training FLOPs under one stated convention.

Convention (the one ``torch.utils.flop_counter.FlopCounterMode`` uses, so the tests can compare
exactly): only matrix multiplies count, 2 FLOPs per multiply-add; bias adds, norms, activations,
softmax and embedding lookups count zero. Attention scores ``Q K^T`` and ``P V`` are counted over
the full ``s x s`` square (``attention_core``), as an eager or math-SDPA kernel computes them.

``attention_core_causal`` counts only the unmasked half (and, for sliding-window layers, only the
window): the work a causal flash kernel must do, used for *model FLOPs* (MFU). Backward is twice
the forward (two GEMMs per forward GEMM: input and weight gradients).

Every function takes sequence length and batch as ints or numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from estimator.memo import per_model
from estimator.records import from_fields
from estimator.spec.model import ModelSpec
from estimator.xp import Num, minimum

__all__ = [
    "ForwardFlops",
    "Recompute",
    "TrainingFlops",
    "attention_terms",
    "causal_pairs",
    "forward_flops",
    "training_flops",
]

Recompute = Literal["none", "selective", "full"]


@dataclass(frozen=True, slots=True)
class ForwardFlops:
    """Forward-pass FLOPs for ``batch`` sequences of ``seq_len`` tokens, by component."""

    embeddings: Num
    attention_proj: Num
    attention_core: Num
    attention_core_causal: Num
    mlp: Num
    experts: Num
    shared_experts: Num
    router: Num
    output_head: Num

    @property
    def total(self) -> Num:
        """torch's count: full-square attention."""
        return self.matmul + self.attention_core

    @property
    def total_causal(self) -> Num:
        """Model FLOPs: attention with the causal mask (and windows) applied."""
        return self.matmul + self.attention_core_causal

    @property
    def matmul(self) -> Num:
        """Everything but the attention scores (weights x activations)."""
        return (
            self.embeddings
            + self.attention_proj
            + self.mlp
            + self.experts
            + self.shared_experts
            + self.router
            + self.output_head
        )


def causal_pairs(seq: Num, window: int | None) -> Num:
    """Unmasked (query, key) pairs of a causal, optionally windowed, sequence."""
    if window is None:
        return seq * (seq + 1) // 2
    m = minimum(seq, window)
    return m * (m + 1) // 2 + (seq - m) * window


def attention_terms(model: ModelSpec) -> tuple[tuple[int, int, int | None], ...]:
    """(layers, FLOPs per (query, key) pair, window) of each layer kind's attention core:
    ``Q K^T`` and ``P V`` cost ``2 heads (qk_head_dim + v_head_dim)`` per pair (computed once
    per model)."""
    return _tables(model)[1]


def _buildattention_terms(model: ModelSpec) -> tuple[tuple[int, int, int | None], ...]:
    return tuple(
        (
            n,
            2 * kind.attention.num_heads * (kind.attention.qk_head_dim + kind.attention.v_head_dim),
            kind.attention.window,
        )
        for kind, n in zip(model.kinds, model.kind_counts, strict=True)
    )


_COMPONENTS = ("embeddings", "attention", "mlp", "experts", "shared_experts", "router")


@per_model
def _tables(model: ModelSpec) -> tuple[dict[str, int], tuple[tuple[int, int, int | None], ...]]:
    """Matmul FLOPs per token by component, plus the output ``head``, the decoder ``layers`` (all
    but embeddings and head) and the whole ``matmul``; and the ``attention_terms``
    (layout- and length-independent, computed once per model)."""
    per_token = dict.fromkeys(_COMPONENTS, 0)
    for kind, n in zip(model.kinds, model.kind_counts, strict=True):
        for m in kind.linears:
            per_token[m.component] += n * m.forward_flops_per_token()
    per_token["embeddings"] += sum(m.forward_flops_per_token() for m in model.embedding_projections)
    per_token["layers"] = sum(per_token[c] for c in _COMPONENTS if c != "embeddings")
    per_token["head"] = 2 * model.vocab_size * model.embed_dim
    per_token["matmul"] = per_token["layers"] + per_token["embeddings"] + per_token["head"]
    return per_token, _buildattention_terms(model)


def forward_flops(model: ModelSpec, seq_len: Num, batch: Num = 1) -> ForwardFlops:
    tokens = seq_len * batch
    per_token, attention = _tables(model)
    core = core_causal = 0
    for n, per_pair, window in attention:
        core = core + n * per_pair * (seq_len * seq_len)
        core_causal = core_causal + n * per_pair * causal_pairs(seq_len, window)
    return ForwardFlops(
        embeddings=tokens * per_token["embeddings"],
        attention_proj=tokens * per_token["attention"],
        attention_core=batch * core,
        attention_core_causal=batch * core_causal,
        mlp=tokens * per_token["mlp"],
        experts=tokens * per_token["experts"],
        shared_experts=tokens * per_token["shared_experts"],
        router=tokens * per_token["router"],
        output_head=tokens * per_token["head"],
    )


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs of one training pass (forward + backward) over the given tokens.

    ``model`` is the MFU numerator (causal attention, no recompute: 3x the causal forward).
    ``hardware`` adds the recomputed forward work (HFU numerator): full recompute repeats the
    whole forward of the layers, selective recompute repeats the attention scores only
    (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models").
    Built with ``records.from_fields`` (no ``__slots__``).
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


def training_flops(
    model: ModelSpec, seq_len: Num, batch: Num = 1, recompute: Recompute = "none"
) -> TrainingFlops:
    """``forward_flops``' causal total, its backward and the recomputed work, from the same
    per-token and per-pair tables (integers, so the sums are exact and equal
    ``forward_flops(...).total_causal`` and its parts)."""
    per_token, attention = _tables(model)
    core_causal = 0
    for n, per_pair, window in attention:
        core_causal = core_causal + n * per_pair * causal_pairs(seq_len, window)
    core_causal = batch * core_causal
    tokens = seq_len * batch
    forward = tokens * per_token["matmul"] + core_causal
    if recompute == "full":  # the decoder layers' forward again: all but embeddings and head
        extra = tokens * per_token["layers"] + core_causal
    elif recompute == "selective":
        extra = core_causal
    else:
        extra = 0
    return from_fields(
        TrainingFlops, {"forward": forward, "backward": 2 * forward, "recompute": extra}
    )
