"""Operator and collective times: a roofline with measured efficiency curves.

An operator's time is ``max(flops / achieved_flop_s, bytes / achieved_bytes_s) + floor``:

- GEMMs reach ``peak * e_max * F / (F + F_half)`` FLOP/s (small problems fill fewer waves of the
  chip), memory-bound ones ``hbm * e_mem`` bytes/s, and every kernel pays a fixed ``floor``
  (launch, ramp-up and tail).
- Elementwise kernels (norms, activations, rotary, casts, copies, the optimizer) stream at
  ``hbm * e_elem``: the median efficiency of the measured PyTorch layer-norm, activation and
  rotary kernels (Vidur's Llama-2 profiles, >= 1,025 tokens), well below what a weight-streaming
  GEMM reaches (``e_mem``). Casts and row copies (low-precision casts of GEMM inputs, MoE token
  permutes) stream contiguous rows like a weight-bound GEMM and run at ``hbm * e_mem``.
- Flash attention (prefill / training) reaches ``peak * e_max * s / (s + s_half)`` FLOP/s on
  sequences of ``s`` keys: short sequences leave the tensor cores idle between tiles. The fit is
  the vendor's fused kernel; FlashAttention-2 is capped at its published ceiling where that is
  lower (35% of peak on Hopper, FlashAttention-3 paper), and backward kernels reach 63/73 of the
  forward's FLOP/s (FlashAttention-2 paper).
- Decode attention streams the KV cache at ``hbm * e_mem`` bytes/s; a speculative verification
  step's several queries per sequence stream it once, or take their FLOPs' time at the prefill
  kernel's rate where that is longer.
- Collectives cost ``latency + factor * bytes / bus_bandwidth`` with the ring factors of NCCL's
  performance notes (all-reduce ``2 (n - 1) / n``, all-gather / reduce-scatter / all-to-all
  ``(n - 1) / n``, send/recv 1) and a latency that grows with ``log2 n``.

The constants per accelerator family are fitted by ``validation/calibrate.py`` on measured kernel
tables (NVIDIA aiconfigurator, Apache-2.0; microsoft/vidur, MIT) and stored with attribution in
``catalog/efficiency.json``. Accelerators without measured kernels borrow the Hopper curves with
their own maximum achievable matmul efficiency (stas00/ml-engineering's MAMF table) where one is
published, and say so in ``notes``.

Every function takes plain numbers or numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, TypeVar

from estimator.catalog.files import load
from estimator.counts.flops import mixer_flops
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.architecture import RecurrentCore
from estimator.inputs.cluster import Cluster
from estimator.inputs.precision import DTYPES, Precision
from estimator.xp import Num, maximum, minimum, where

__all__ = [
    "AttentionCurve",
    "AttentionKernel",
    "Collective",
    "GemmCurve",
    "KernelProfile",
    "LinkProfile",
    "attention_decode_time",
    "attention_prefill_time",
    "attention_verify_time",
    "collective_time",
    "copy_time",
    "curve_time",
    "gemm_time",
    "kernel_profile",
    "memory_time",
    "mixer_time",
]

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
# "fused": the vendor's architecture-specific kernel the curves were fitted on (cuDNN / TRT-LLM
# fused attention, FlashAttention-3 class on Hopper); "flash2": FlashAttention-2.
AttentionKernel = Literal["fused", "flash2"]

# Bus-bandwidth factor of each collective over n ranks (bytes each rank moves per byte of payload).
_RING_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1 + 0 * n,
}


@dataclass(frozen=True, slots=True)
class LinkProfile:
    """A collective's cost over one kind of link: ``latency_s + latency_per_doubling_s * log2 n``
    plus the payload over ``bandwidth_fraction`` of the link's unidirectional bandwidth."""

    latency_s: float
    latency_per_doubling_s: float
    bandwidth_fraction: float


@dataclass(frozen=True, slots=True)
class GemmCurve:
    """One compute format's GEMM curve measured on one system and engine
    (``timing.measured``): ``max((F + half_flops) / (efficiency_max peak), bytes /
    (memory_efficiency hbm)) + floor_s``."""

    efficiency_max: float
    half_flops: float
    memory_efficiency: float
    floor_s: float


@dataclass(frozen=True, slots=True)
class AttentionCurve:
    """One attention format's fused prefill curve measured on one system and engine:
    ``F / (peak efficiency_max s / (s + half_seq)) + floor_s`` over ``s`` keys."""

    efficiency_max: float
    half_seq: float
    floor_s: float


_Curve = TypeVar("_Curve", GemmCurve, AttentionCurve)


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """Fitted efficiency constants for one accelerator (see the module docstring)."""

    name: str
    gemm_efficiency_max: float
    gemm_half_flops: float
    memory_efficiency: float
    floor_s: float
    elementwise_memory_efficiency: float
    attention_efficiency_max: float
    attention_half_seq: float
    attention_floor_s: float
    decode_memory_efficiency: float
    decode_floor_s: float
    scale_up: LinkProfile
    scale_out: LinkProfile
    measured: bool
    source: str
    notes: tuple[str, ...] = ()
    # Achievable matmul efficiency of a compute format relative to bf16 (MAMF fp8 / MAMF bf16).
    format_scale: tuple[tuple[str, float], ...] = ()
    # Ceiling of FlashAttention-2 on this architecture where it is below the fitted (vendor
    # fused) kernel's, e.g. 35% of peak on Hopper; None where the fitted curve already is it.
    flash2_efficiency_max: float | None = None
    # Backward attention kernels reach this fraction of the forward's FLOP/s.
    attention_backward_ratio: float = 1.0
    # Per attention kernel, (head dim, forward, backward time per FLOP relative to 128) as
    # measured on this profile's silicon; none where unmeasured (the 128-dim curve then).
    head_dims: tuple[tuple[str, tuple[tuple[int, float, float], ...]], ...] = ()
    # Serving only (``timing.measured.serving_profile``): per compute format, the GEMM and the
    # fused prefill attention curves measured on this system and engine; a format without one
    # takes the fitted constants above. Training profiles have none.
    gemm_curves: tuple[tuple[str, GemmCurve], ...] = ()
    attention_curves: tuple[tuple[str, AttentionCurve], ...] = ()
    # per compute format, the routed experts' grouped GEMM curve fitted on the measured fused
    # MoE op (one projection's kernel; the serving engines' fused MoE kernels)
    moe_curves: tuple[tuple[str, GemmCurve], ...] = ()
    # the measured GEMM grid: (system, largest M, largest N or K); empty where none
    gemm_grid: tuple[str, int, int] | tuple[()] = ()

    def gemm_curve(self, compute: str) -> GemmCurve | None:
        """The measured GEMM curve of ``compute`` (fp16 runs bf16's), if there is one."""
        return _curve_of(self.gemm_curves, compute)

    def moe_curve(self, compute: str) -> GemmCurve | None:
        """The measured grouped-expert GEMM curve of ``compute``, if there is one."""
        return _curve_of(self.moe_curves, compute)

    def attention_curve(self, compute: str) -> AttentionCurve | None:
        """The measured fused prefill attention curve of ``compute``, if there is one."""
        return _curve_of(self.attention_curves, compute)

    def head_dim_time(self, kernel: AttentionKernel, head_dim: int) -> tuple[float, float]:
        """Forward and backward attention time per FLOP with ``head_dim``-dimension heads
        relative to 128-dimension ones (the prefill curve's), where measured: a head dim
        between two measured ones runs the larger one's kernel, padded (the larger one's time,
        so its factor times ``larger / head_dim`` per FLOP); one above the largest takes the
        largest's factors."""
        for name, dims in self.head_dims:
            if name != kernel or head_dim < 1:  # no head dim (a degenerate config): no FLOPs
                continue
            for d, fwd, bwd in dims:
                if head_dim <= d:
                    return fwd * d / head_dim, bwd * d / head_dim
            return dims[-1][1], dims[-1][2]
        return 1.0, 1.0

    def attention_efficiency(self, kernel: AttentionKernel) -> float:
        """Maximum fraction of the dense peak one attention kernel family reaches."""
        if kernel == "flash2" and self.flash2_efficiency_max is not None:
            return min(self.attention_efficiency_max, self.flash2_efficiency_max)
        return self.attention_efficiency_max

    def gemm_efficiency(self, compute: str) -> float:
        """Maximum achievable fraction of the dense peak for a compute format."""
        for fmt, scale in self.format_scale:
            if fmt == compute:
                return self.gemm_efficiency_max * scale
        return self.gemm_efficiency_max


def _curve_of(curves: tuple[tuple[str, _Curve], ...], compute: str) -> _Curve | None:
    """A format's measured curve (fp16 runs bf16's), if there is one."""
    key = "bf16" if compute == "fp16" else compute
    for fmt, curve in curves:
        if fmt == key:
            return curve
    return None


def _table() -> dict[str, Any]:
    return load("efficiency.json")


def _link(entry: dict[str, Any]) -> LinkProfile:
    return LinkProfile(
        latency_s=entry["latency_us"] * 1e-6,
        latency_per_doubling_s=entry["latency_per_doubling_us"] * 1e-6,
        bandwidth_fraction=entry["bandwidth_fraction"],
    )


def _profile(
    name: str, fitted: dict[str, Any], overrides: dict[str, Any], notes: tuple[str, ...] = ()
) -> KernelProfile:
    f = {**fitted, **overrides}
    flash2 = f.get("attention_flash2")
    return KernelProfile(
        name=name,
        gemm_efficiency_max=f["gemm"]["efficiency_max"],
        gemm_half_flops=f["gemm"]["half_gflop"] * 1e9,
        memory_efficiency=f["gemm"]["memory_efficiency"],
        floor_s=f["gemm"]["floor_us"] * 1e-6,
        elementwise_memory_efficiency=f["elementwise"]["memory_efficiency"],
        attention_efficiency_max=f["attention_prefill"]["efficiency_max"],
        attention_half_seq=f["attention_prefill"]["half_seq"],
        attention_floor_s=f["attention_prefill"]["floor_us"] * 1e-6,
        decode_memory_efficiency=f["attention_decode"]["memory_efficiency"],
        decode_floor_s=f["attention_decode"]["floor_us"] * 1e-6,
        scale_up=_link(f["scale_up"]),
        scale_out=_link(f["scale_out"]),
        measured=bool(f.get("measured", False)),
        source=f.get("source", ""),
        notes=tuple(f.get("notes", ())) + notes,
        format_scale=tuple(sorted(f.get("format_scale", {}).items())),
        flash2_efficiency_max=None if flash2 is None else flash2["efficiency_max"],
        attention_backward_ratio=_table()["attention_backward"]["efficiency_ratio"],
        head_dims=tuple(
            (kernel, tuple(sorted((int(d), f, b) for d, (f, b) in dims.items())))
            for kernel, dims in f.get("attention_head_dim", {}).get("time_per_flop", {}).items()
        ),
    )


@cache
def kernel_profile(accelerator_id: str) -> KernelProfile:
    """The efficiency profile an accelerator's estimates use (fitted, borrowed from the same
    silicon family, or the documented fallback with a note saying which, plus the table's
    ``fallback_notes`` for that accelerator, e.g. that a TPU is timed with the GPU model)."""
    table = _table()
    fitted = table["profiles"]
    entry = table["accelerators"].get(accelerator_id)
    if entry is None:
        base = table["default_profile"]
        note = (
            f"No measured kernels or matmul efficiency for {accelerator_id}: efficiency curves "
            f"are the {base} fit (documented default)."
        )
        extra = tuple(table.get("fallback_notes", {}).get(accelerator_id, ()))
        return _profile(accelerator_id, fitted[base], {}, (note, *extra))
    base = entry["profile"]
    overrides: dict[str, Any] = {"measured": entry.get("measured", False)}
    if "gemm_efficiency_max" in entry:
        overrides["gemm"] = {**fitted[base]["gemm"], "efficiency_max": entry["gemm_efficiency_max"]}
    if "attention_efficiency_max" in entry:
        overrides["attention_prefill"] = {
            **fitted[base]["attention_prefill"],
            "efficiency_max": entry["attention_efficiency_max"],
        }
    if "format_scale" in entry:
        overrides["format_scale"] = entry["format_scale"]
    return _profile(accelerator_id, fitted[base], overrides, tuple(entry.get("notes", ())))


# --- operators -------------------------------------------------------------------------------


def gemm_time(
    acc: Accelerator, prof: KernelProfile, flops: Num, bytes_moved: Num, compute: str
) -> Num:
    """One GEMM (or a batch of identical ones counted together): roofline plus floor. The
    compute rate follows the fitted curve ``e_max * peak * F / (F + F_half)``, so the compute
    time ``F / rate`` is ``(F + F_half) / (e_max * peak)`` (written so, it is two operations on
    an array of GEMMs instead of five, and every GEMM has F >= 2). A serving profile's measured
    curve for ``compute`` (``KernelProfile.gemm_curves``) takes the fitted constants' place."""
    if prof.gemm_curves:
        curve = prof.gemm_curve(compute)
        if curve is not None:
            return curve_time(acc, curve, flops, bytes_moved, compute)
    peak = acc.peak(compute) * prof.gemm_efficiency(compute)
    compute_s = (flops + prof.gemm_half_flops) / peak
    memory_s = bytes_moved / (acc.hbm_bytes_per_s * prof.memory_efficiency)
    return maximum(compute_s, memory_s) + prof.floor_s


def curve_time(
    acc: Accelerator, curve: GemmCurve, flops: Num, bytes_moved: Num, compute: str
) -> Num:
    """One GEMM (or one grouped kernel) on a measured curve (``GemmCurve``)."""
    compute_s = (flops + curve.half_flops) / (acc.peak(compute) * curve.efficiency_max)
    memory_s = bytes_moved / (acc.hbm_bytes_per_s * curve.memory_efficiency)
    return maximum(compute_s, memory_s) + curve.floor_s


def memory_time(acc: Accelerator, prof: KernelProfile, bytes_moved: Num, kernels: Num = 1) -> Num:
    """Memory-bound kernels (norms, activations, optimizer) moving ``bytes_moved`` in all."""
    rate = acc.hbm_bytes_per_s * prof.elementwise_memory_efficiency
    return bytes_moved / rate + kernels * prof.floor_s


def copy_time(acc: Accelerator, prof: KernelProfile, bytes_moved: Num, kernels: Num = 1) -> Num:
    """Casts and row copies (fp8/fp4 quantization of GEMM inputs, MoE token permutes): large
    contiguous streams, at the bandwidth a weight-bound GEMM reaches (``e_mem``)."""
    return bytes_moved / (acc.hbm_bytes_per_s * prof.memory_efficiency) + kernels * prof.floor_s


def attention_prefill_time(
    acc: Accelerator,
    prof: KernelProfile,
    flops: Num,
    bytes_moved: Num,
    keys: Num,
    compute: str,
    kernel: AttentionKernel = "fused",
    head_dim: int = 128,
) -> Num:
    """Flash attention over sequences of ``keys`` keys: ``flops`` of causal work, with
    ``head_dim``-dimension heads (``KernelProfile.head_dim_time``); the fused kernel on a
    serving profile's measured curve for ``compute`` where it has one."""
    curve = prof.attention_curve(compute) if prof.attention_curves and kernel == "fused" else None
    e_max, half, floor = (
        (prof.attention_efficiency(kernel), prof.attention_half_seq, prof.attention_floor_s)
        if curve is None
        else (curve.efficiency_max, curve.half_seq, curve.floor_s)
    )
    eff = e_max * keys / (keys + half)
    compute_s = flops / (acc.peak(compute) * eff) * prof.head_dim_time(kernel, head_dim)[0]
    memory_s = bytes_moved / (acc.hbm_bytes_per_s * prof.memory_efficiency)
    return maximum(compute_s, memory_s) + floor


def attention_decode_time(acc: Accelerator, prof: KernelProfile, kv_bytes: Num) -> Num:
    """One decode step's attention: stream the KV cache of every sequence in the batch."""
    return kv_bytes / (acc.hbm_bytes_per_s * prof.decode_memory_efficiency) + prof.decode_floor_s


def attention_verify_time(
    acc: Accelerator,
    prof: KernelProfile,
    kv_bytes: Num,
    flops: Num,
    keys: Num,
    compute: str,
) -> Num:
    """A speculative verification step's attention: every sequence's queries (its last token
    and the drafts) read its KV cache once, as a decode step does (FlashInfer's and FlashMLA's
    decode kernels take several query tokens per sequence), unless their ``flops`` take longer
    at the fused prefill kernel's rate over ``keys`` keys. A plain decode step keeps the fitted
    stream time (``attention_decode_time``), which already holds its one query's work."""
    eff = prof.attention_efficiency("fused") * keys / (keys + prof.attention_half_seq)
    compute_s = flops / (acc.peak(compute) * eff)
    stream_s = kv_bytes / (acc.hbm_bytes_per_s * prof.decode_memory_efficiency)
    return maximum(stream_s, compute_s) + prof.decode_floor_s


# --- collectives -----------------------------------------------------------------------------


def _log2(n: Num) -> Num:
    if type(n) is int:
        return math.log2(max(n, 1))
    import numpy as np

    return np.log2(np.maximum(n, 1))


def _flat_time(kind: Collective, payload: Num, n: Num, link: LinkProfile, bw: float) -> Num:
    factor = _RING_FACTOR[kind](maximum(n, 1))
    t = (
        link.latency_s
        + link.latency_per_doubling_s * _log2(n)
        + factor * payload / (bw * link.bandwidth_fraction)
    )
    return where(n > 1, t, 0.0)


def collective_time(
    acc: Accelerator,
    prof: KernelProfile,
    kind: Collective,
    payload: Num,
    n: Num,
    stride: Num,
    net: Cluster,
    far_share: Num = 1.0,
) -> Num:
    """Time of one collective over ``n`` ranks whose rank ids are ``stride`` apart, when
    ``net.scale_up_domain`` consecutive ranks share a scale-up (NVLink / xGMI) domain.

    ``payload`` is the full buffer in bytes (all-reduce: the tensor; all-gather: the gathered
    output; reduce-scatter: the input; all-to-all: what one rank sends in all; send/recv: the
    message). A group inside one domain runs at scale-up bandwidth. A group spread over domains
    runs hierarchically: the ``k`` ranks that share a domain first act over scale-up, then the
    ``n / k`` domains over the scale-out network with a ``1/k`` share each (reduce-scatter inside,
    all-reduce across, all-gather inside), NCCL's two-level algorithm. An all-to-all has nothing
    to combine: each rank's ``(n - k) / n`` share for other domains crosses its NIC whole (times
    ``far_share`` where a dispatcher sends a token once per domain), while its ``(k - 1) / n``
    for its own domain crosses NVLink, at the same time.
    """
    up_bw = acc.scale_up_bytes_per_s or acc.hbm_bytes_per_s * 0.1
    out_bw = net.scale_out_bytes_per_s  # the GPU's NIC share, after oversubscription
    local = minimum(maximum(net.scale_up_domain // maximum(stride, 1), 1), n)  # ranks per domain
    remote = n // local
    # One group shape (ints): only the case that applies is computed; arrays of layouts get both.
    one = type(remote) is int
    flat = _flat_time(kind, payload, n, prof.scale_up, up_bw) if not one or remote <= 1 else 0.0
    if one and remote <= 1:
        return flat
    if kind == "send_recv":
        outer = _flat_time(kind, payload, 2 + 0 * n, prof.scale_out, out_bw)
        return where(remote > 1, outer, flat)
    if kind == "all_to_all":
        # Nothing to combine on the way: each rank sends (n - local) / n of its payload across
        # domains and (local - 1) / n inside its own, both at once (NCCL's and DeepEP's
        # all-to-all post every send together): the slower of the two, NVLink or the NIC.
        near = _flat_time(kind, payload * local / n, local, prof.scale_up, up_bw)
        far = _flat_time(kind, payload * far_share, remote, prof.scale_out, out_bw)
        return where(remote > 1, maximum(near, far), flat)
    if kind == "all_reduce":  # reduce-scatter inside, all-reduce across, all-gather inside
        inner = _flat_time("reduce_scatter", payload, local, prof.scale_up, up_bw) + _flat_time(
            "all_gather", payload, local, prof.scale_up, up_bw
        )
    else:
        inner = _flat_time(kind, payload, local, prof.scale_up, up_bw)
    outer = _flat_time(kind, payload / local, remote, prof.scale_out, out_bw)
    return where(remote > 1, inner + outer, flat)


def mixer_time(
    core: RecurrentCore,
    acc: Accelerator,
    prof: KernelProfile,
    tp: Num,
    precision: Precision,
    seq_len: Num,
    micro_batch: Num,
    compute: str,
) -> Num:
    """Forward time of a recurrent mixer's core on one TP rank: its chunked matmuls and
    convolution (``mixer_flops``) against what it moves, on the roofline of a GEMM. Per token the
    scan reads the convolution's input and writes its output (``conv_channels`` each), reads x,
    B, C and the step sizes and writes y; per chunk it writes and reads back each head's fp32
    state. An approximation (fused Triton kernels, no published per-kernel efficiency)."""
    act_b = DTYPES[precision.activations].bytes
    tokens = seq_len * micro_batch
    flops = micro_batch * mixer_flops(core, seq_len, kernel=True) / tp
    per_token = (
        2 * core.conv_channels
        + 2 * core.heads * core.head_dim
        + 2 * core.groups * (core.state_dim)
        + core.heads
    )
    chunks = micro_batch * (-(-seq_len // core.chunk) if core.chunk else seq_len)
    moved = tokens * per_token * act_b / tp + chunks * core.state_elems * 4 * 2 / tp
    return gemm_time(acc, prof, flops, moved, compute)
