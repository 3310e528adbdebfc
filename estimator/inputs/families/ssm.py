"""The state-space pieces hybrid families build from, named as ``transformers`` names them.

Mamba-2's mixer (``Mamba2Mixer`` and its copies in NemotronH, Bamba, GraniteMoeHybrid and
FalconH1): one input projection to the gate ``z`` (``inner`` channels), the convolved ``x B C``
(``inner + 2 groups state`` channels) and the step sizes ``dt`` (one per head); a depthwise causal
convolution of ``conv_kernel`` taps over ``x B C``; per-head ``dt_bias``, ``A_log`` and ``D``; a
gated RMSNorm over ``inner`` (grouped by ``groups``); the output projection. The scan runs the SSD
chunked algorithm (Dao and Gu 2024, "Transformers are SSMs", section 6) over ``chunk``-token
chunks. TP splits the heads (and the groups with them), as Megatron-LM's ``MambaMixer`` does.

Bamba, GraniteMoeHybrid and FalconH1 name its fields ``mamba_*`` (``mamba_prefixed_mixer``).
Every mixer's core is built by ``recurrent_core``, which fixes what its convolution keeps.
"""

from __future__ import annotations

from typing import NamedTuple

from estimator.errors import SpecError
from estimator.inputs.architecture import Linear, MixerKind, Param, RecurrentCore
from estimator.inputs.reader import ConfigReader

__all__ = ["Mixer", "mamba2_mixer", "mamba_prefixed_mixer", "recurrent_core"]


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
    core = recurrent_core(
        "mamba2", heads, head_dim, state, groups, conv, conv_kernel, chunk, state_fp32
    )
    return Mixer(linears, tuple(extras), core)


def recurrent_core(
    kind: MixerKind,
    heads: int,
    head_dim: int,
    state: int,
    groups: int,
    conv_channels: int,
    conv_kernel: int,
    chunk: int = 0,
    state_fp32: bool = False,
) -> RecurrentCore:
    """A mixer's ``RecurrentCore`` (its fields in this order), keeping ``conv_kernel - 1``
    inputs of the convolution between steps: what its next step needs, as vLLM keeps them
    (transformers keeps ``conv_kernel``). ``state_fp32`` only where the config asks for an fp32
    scan state (Nemotron-H's ``mamba_ssm_cache_dtype``): vLLM's default
    (``mamba_cache_dtype="auto"``) keeps it in the model's dtype, transformers' reference code
    always in fp32."""
    return RecurrentCore(
        kind=kind,
        heads=heads,
        head_dim=head_dim,
        state_dim=state,
        groups=groups,
        conv_channels=conv_channels,
        conv_kernel=conv_kernel,
        conv_state=conv_kernel - 1,
        chunk=chunk,
        state_fp32=state_fp32,
    )


def mamba_prefixed_mixer(
    c: ConfigReader,
    hidden: int,
    inner: int,
    *,
    out_bias: bool | None = None,
    gated_norm: bool = True,
) -> Mixer:
    """The Mamba-2 mixer ``mamba`` of the families that name its fields ``mamba_*`` (Bamba,
    GraniteMoeHybrid, FalconH1), ``inner`` channels wide: ``mamba_n_heads`` heads of
    ``mamba_d_head`` ("auto": the inner width over the heads, the only value the config classes
    accept otherwise), ``mamba_n_groups`` B/C groups of ``mamba_d_state``, a ``mamba_d_conv``-tap
    convolution, ``mamba_chunk_size``-token chunks; ``mamba_proj_bias`` on both projections
    (unless ``out_bias`` says otherwise), ``mamba_conv_bias`` on the convolution. The defaults
    are the three config classes' (the same in all three)."""
    heads = c.integer("mamba_n_heads", default=128)
    if inner % heads:
        raise SpecError(
            "config.mamba_n_heads", f"must divide the Mamba inner width ({inner})", heads
        )
    head_dim = inner // heads
    given = c.get("mamba_d_head")
    if given not in (None, "auto") and c.integer("mamba_d_head") != head_dim:
        raise SpecError(
            "config.mamba_d_head",
            f"must be 'auto' or the inner width over mamba_n_heads ({head_dim})",
            given,
        )
    return mamba2_mixer(
        "mamba",
        hidden,
        heads=heads,
        head_dim=head_dim,
        groups=c.integer("mamba_n_groups", default=1),
        state=c.integer("mamba_d_state", default=256),
        conv_kernel=c.integer("mamba_d_conv", default=4),
        chunk=c.integer("mamba_chunk_size", default=256),
        proj_bias=c.flag("mamba_proj_bias", False),
        conv_bias=c.flag("mamba_conv_bias", True),
        out_bias=out_bias,
        gated_norm=gated_norm,
        field="config.mamba_n_heads",
    )
