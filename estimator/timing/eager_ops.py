"""The eager PyTorch ops Megatron-Core runs around its fused kernels in training, per layer and
micro-batch on one rank, each timed as contiguous copies at the streaming rate of a weight-bound
GEMM (``kernels.copy_time``), forward and backward:

- Routed experts with a clamped activation or a down-projection bias (gpt-oss): the clamps and
  their cat, the per-expert bias times probability and the rows' cat (``expert_eager_ops``:
  ``TEGroupedMLP``, megatron/core/transformer/moe/experts.py and fusions/fused_bias_geglu.py
  @ core_v0.16.0).
- A YaRN rotary embedding that scales cos and sin (gpt-oss): Megatron-Core's unfused RoPE
  (``_apply_rotary_pos_emb_bshd``, rope_utils.py @ core_v0.16.0), over what the fused kernel
  moves (``unfused_rope_time``).

The serving engines fuse both into their MoE and rotary kernels, so the layer's time
(``timing.layer``) charges them in training only.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.inputs.accelerator import Accelerator
from estimator.inputs.architecture import LayerKind
from estimator.inputs.model import ModelSpec
from estimator.layout.parallel import Parallelism
from estimator.memo import per_model
from estimator.timing.kernels import KernelProfile, copy_time
from estimator.xp import Num, maximum

__all__ = [
    "EXPERT_BIAS_ACCESSES",
    "EXPERT_CLAMP_ACCESSES",
    "UNFUSED_ROPE_ACCESSES",
    "UNFUSED_ROPE_KERNELS",
    "EagerExpertOps",
    "eager_expert_kinds",
    "expert_eager_ops",
    "unfused_rope_time",
]


# Reads and writes of each element (forward, backward) of the routed experts' eager ops
# (``expert_eager_ops``): the clamp of the up-projection's output, the down-projection's bias.
EXPERT_CLAMP_ACCESSES = (4, 5)
EXPERT_BIAS_ACCESSES = (6, 8)


@dataclass(frozen=True, slots=True)
class EagerExpertOps:
    """Bytes and kernels of the routed experts' ops that Megatron-Core runs eagerly around its
    fused ones, per micro-batch on one rank (``expert_eager_ops``)."""

    clamp_bytes: Num = 0.0  # forward (``EXPERT_CLAMP_ACCESSES``: the backward's in proportion)
    clamp_kernels: int = 0
    bias_bytes: Num = 0.0  # forward (``EXPERT_BIAS_ACCESSES``)
    bias_kernels: Num = 0  # forward (per layout in a sweep); the backward twice as many, less one
    bias: bool = False

    def times(self, acc: Accelerator, prof: KernelProfile) -> tuple[Num, Num, Num]:
        """Forward, backward and the clamp's forward seconds: plain contiguous streams (clamps,
        a cat, broadcast products and adds over large tensors) timed as the token permutes are
        (``copy_time``; the lent H100 gathered gpt-oss's routed rows at 75% of its HBM peak)."""
        fwd, bwd = EXPERT_CLAMP_ACCESSES
        clamp = copy_time(acc, prof, self.clamp_bytes, self.clamp_kernels)
        clamp_b = copy_time(acc, prof, self.clamp_bytes * bwd / fwd, self.clamp_kernels)
        bias: Num = 0.0
        bias_b: Num = 0.0
        if self.bias:
            fwd, bwd = EXPERT_BIAS_ACCESSES
            bias = copy_time(acc, prof, self.bias_bytes, self.bias_kernels)
            moved = self.bias_bytes * bwd / fwd
            bias_b = copy_time(acc, prof, moved, 2 * self.bias_kernels - 1)
        return clamp + bias, clamp_b + bias_b, clamp


# Megatron-Core's unfused rotary embedding (``_apply_rotary_pos_emb_bshd``, rope_utils.py @
# core_v0.16.0) on each of q and k: ``t * cos``, the rotated half's negation and cat, ``* sin``,
# the add and the final cat: 12 reads and writes of each element in 6 kernels forward; backward
# the two products' gradients, the negation's, the chunk's cat, their sum and the slice's
# zero-filled copy, 13 in 7. The fused kernel the elementwise term charges moves 2 forward (4
# backward, at twice the forward).
UNFUSED_ROPE_ACCESSES = (12 - 2, 13 - 4)
UNFUSED_ROPE_KERNELS = (6, 7)


def unfused_rope_time(
    acc: Accelerator, prof: KernelProfile, model: ModelSpec, elems: Num, act_b: float
) -> tuple[Num, Num]:
    """Forward and backward seconds an unfused rotary embedding adds over the fused one, on
    ``elems`` query and key elements, for a model whose YaRN embedding scales cos and sin
    (``ModelSpec.rope_mscale`` != 1: gpt-oss): Megatron-Bridge turns RoPE fusion off for a
    ``position_embedding_type`` other than ``rope`` (``validate_rope_fusion_compatibility``,
    utils/fusions.py, v0.2.1 to v0.6.0; gpt-oss's is ``yarn``), and Megatron-Core's fused RoPE
    takes no such factor anyway (``apply_rotary_pos_emb``: "mscale ... is not supported by TE's
    fused RoPE. Using unfused implementation."). Nothing for the others."""
    if model.rope_mscale == 1.0:
        return 0.0, 0.0
    fwd, bwd = (elems * n * act_b for n in UNFUSED_ROPE_ACCESSES)
    kernels_f, kernels_b = (2 * n for n in UNFUSED_ROPE_KERNELS)  # q and k
    return copy_time(acc, prof, fwd, kernels_f), copy_time(acc, prof, bwd, kernels_b)


@per_model
def eager_expert_kinds(model: ModelSpec) -> frozenset[int]:
    """The layer kinds whose routed experts run eager ops around the fused ones: a clamped
    activation (``MoESpec.activation_clamp``) or a bias on the down-projection
    (``expert_eager_ops``); empty for every model but gpt-oss's family today, which then
    skips them."""
    if model.moe is None:
        return frozenset()
    clamp = bool(model.moe.activation_clamp)
    return frozenset(
        k
        for k, kind in enumerate(model.kinds)
        if kind.routed
        and any(
            m.component == "experts" and m.copies > 1 and (clamp or (m.tp == "row" and m.bias))
            for m in kind.linears
        )
    )


def expert_eager_ops(
    model: ModelSpec, kind: LayerKind, p: Parallelism, tokens: Num, act_b: float, load: Num = 1.0
) -> EagerExpertOps:
    """What Megatron-Core's grouped experts (``TEGroupedMLP``, megatron/core/transformer/moe/
    experts.py and fusions/fused_bias_geglu.py @ core_v0.16.0) run as separate eager PyTorch
    kernels around the fused activation, on the ``tokens x top_k x load`` rows a rank's experts
    receive:

    - a clamped activation (``MoESpec.activation_clamp``, gpt-oss's ``activation_func_clamp_
      value``): ``weighted_bias_quick_geglu_impl`` clamps the gate half and the up half of the
      up-projection's output and concatenates them before the fused kernel: 4 reads and writes
      of each output element forward in 3 kernels (two clamps, the cat); backward the two
      clamps' masked gradients and the split's cat, 5.
    - a bias on the down-projection (``_apply_bias``): per local expert ``bias x prob`` and its
      add to that expert's rows, then a cat of all rows: 6 reads and writes of each output
      element in ``2 x local + 1`` kernels; backward the bias's and the probabilities'
      gradients (a product and a sum each per expert) and the split's cat, 8 in
      ``4 x local + 1``.

    Nothing where a layer has neither (every model but gpt-oss's family today)."""
    rows = tokens / p.tp * p.expert_tp * load
    clamp_bytes: Num = 0.0
    clamp_kernels = 0
    bias_bytes: Num = 0.0
    bias_kernels: Num = 0
    bias = False
    for m in kind.linears:
        if m.component != "experts" or m.copies <= 1:
            continue
        if m.tp == "column" and model.moe is not None and model.moe.activation_clamp:
            width = m.active * m.out_features / p.expert_tp
            clamp_bytes = rows * width * EXPERT_CLAMP_ACCESSES[0] * act_b
            clamp_kernels = 3
        if m.tp == "row" and m.bias:
            bias_bytes = rows * m.active * m.out_features * EXPERT_BIAS_ACCESSES[0] * act_b
            bias_kernels = 2 * maximum(m.copies // p.ep, 1) + 1
            bias = True
    return EagerExpertOps(clamp_bytes, clamp_kernels, bias_bytes, bias_kernels, bias)
