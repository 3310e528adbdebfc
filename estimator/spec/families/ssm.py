"""The state-space pieces hybrid families build from, named as ``transformers`` names them.

Mamba-2's mixer (``Mamba2Mixer`` and its copies in NemotronH, Bamba, GraniteMoeHybrid and
FalconH1): one input projection to the gate ``z`` (``inner`` channels), the convolved ``x B C``
(``inner + 2 groups state`` channels) and the step sizes ``dt`` (one per head); a depthwise causal
convolution of ``conv_kernel`` taps over ``x B C``; per-head ``dt_bias``, ``A_log`` and ``D``; a
gated RMSNorm over ``inner`` (grouped by ``groups``); the output projection. The scan runs the SSD
chunked algorithm (Dao and Gu 2024, "Transformers are SSMs", section 6) over ``chunk``-token
chunks. TP splits the heads (and the groups with them), as Megatron-LM's ``MambaMixer`` does.
"""

from __future__ import annotations

from typing import NamedTuple

from estimator.errors import SpecError
from estimator.spec.architecture import Linear, Param, RecurrentCore

__all__ = ["Mixer", "mamba2_mixer"]


class Mixer(NamedTuple):
    """A recurrent mixer's modules: its linears, its other parameters and its core."""

    linears: tuple[Linear, ...]
    extras: tuple[Param, ...]
    core: RecurrentCore


def mamba2_mixer(
    prefix: str,
    hidden: int,
    *,
    heads: int,
    head_dim: int,
    groups: int,
    state: int,
    conv_kernel: int,
    chunk: int,
    proj_bias: bool,
    conv_bias: bool,
    out_bias: bool | None = None,
    gated_norm: bool = True,
    state_fp32: bool = False,
    field: str = "config.mamba_num_heads",
) -> Mixer:
    """A Mamba-2 mixer under ``prefix`` (``mixer`` in most families, ``mamba`` in FalconH1):
    ``heads x head_dim`` inner channels, ``groups`` B/C groups of ``state`` each."""
    if heads % groups:
        raise SpecError(field, f"must be a multiple of the B/C groups ({groups})", heads)
    inner = heads * head_dim
    conv = inner + 2 * groups * state
    linears = (
        Linear(
            f"{prefix}.in_proj", hidden, inner + conv + heads, proj_bias, "mixer", "column", heads
        ),
        Linear(
            f"{prefix}.out_proj",
            inner,
            hidden,
            proj_bias if out_bias is None else out_bias,
            "mixer",
            "row",
            heads,
        ),
    )
    extras = [Param(f"{prefix}.conv1d.weight", conv * conv_kernel, "mixer", heads)]
    if conv_bias:
        extras.append(Param(f"{prefix}.conv1d.bias", conv, "mixer", heads))
    extras += [
        Param(f"{prefix}.{name}", heads, "mixer", heads) for name in ("dt_bias", "A_log", "D")
    ]
    if gated_norm:
        extras.append(Param(f"{prefix}.norm.weight", inner, "norms", heads))
    core = RecurrentCore(
        kind="mamba2",
        heads=heads,
        head_dim=head_dim,
        state_dim=state,
        groups=groups,
        conv_channels=conv,
        conv_kernel=conv_kernel,
        conv_state=conv_kernel - 1,  # what the convolution's next step needs (vLLM)
        chunk=chunk,
        state_fp32=state_fp32,
    )
    return Mixer(linears, tuple(extras), core)
