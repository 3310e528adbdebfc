"""Accelerator specs in base units (bytes, bytes/s, FLOP/s), converted once from the catalog."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from estimator.errors import SpecError

__all__ = ["GIB", "Accelerator", "accelerator_from_entry"]

GIB = 2**30

# Vendors label HBM capacity in "GB" but HBM stacks are binary-sized: an "80GB" A100 reports
# exactly 80 GiB, an "80GB" H100 79.6 GiB. When the catalog has no driver-reported figure, the
# marketed number is read as GiB, which is the closer reading.
_MARKETED_GB_UNIT = GIB


@dataclass(frozen=True)
class Accelerator:
    """One accelerator (one GPU, one GCD pair package, one TPU chip ...).

    ``peak_flop_per_s`` is dense (no 2:4 sparsity), keyed by compute format (bf16, fp16, fp8, fp4,
    int8, tf32, fp32). ``memory_bytes`` is the capacity the planner fits against: the total the
    driver reports where the catalog has it, else the marketed size read as GiB.
    """

    id: str
    name: str
    vendor: str
    memory_bytes: int
    hbm_bytes_per_s: float
    peak_flop_per_s: Mapping[str, float]
    scale_up_bytes_per_s: float | None
    scale_up_domain: int
    scale_out_bytes_per_s: float | None
    gpus_per_node: int
    tdp_w: float | None = None
    generation: str = ""
    # cuBLASLt runs fp8 GEMMs in every operand layout (compute capability 10.x): Transformer
    # Engine keeps no transposed copy of a per-tensor fp8 weight (``trained_weight_bytes``)
    fp8_any_layout: bool = False
    sources: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)
    notes: str = ""

    def peak(self, fmt: str) -> float:
        """Dense peak FLOP/s for a compute format; SpecError if the hardware has no such rate."""
        rate = self.peak_flop_per_s.get(fmt)
        if rate is None:
            raise SpecError(
                "precision",
                f"{self.id} has no {fmt} tensor-core rate (has {', '.join(self.peak_flop_per_s)})",
                fmt,
            )
        return rate


def accelerator_from_entry(entry: Mapping[str, Any]) -> Accelerator:
    """Convert a catalog entry (TFLOPS, GB, TB/s, GB/s, Gbit/s) into base units."""
    tflops = entry["dense_tflops"]
    reported = entry.get("memory_bytes_reported")
    scale_up = entry.get("scale_up") or {}
    out_gbit = entry.get("scale_out_gbit_per_s")
    up_gb = scale_up.get("gb_per_s_unidir")
    return Accelerator(
        id=entry["id"],
        name=entry["name"],
        vendor=entry.get("vendor", ""),
        generation=entry.get("generation", ""),
        memory_bytes=int(reported) if reported else int(entry["memory_gb"] * _MARKETED_GB_UNIT),
        hbm_bytes_per_s=entry["hbm_tb_per_s"] * 1e12,
        peak_flop_per_s={k: v * 1e12 for k, v in tflops.items() if v},
        scale_up_bytes_per_s=up_gb * 1e9 if up_gb else None,
        scale_up_domain=int(scale_up.get("domain_gpus") or 1),
        scale_out_bytes_per_s=out_gbit * 1e9 / 8 if out_gbit else None,
        gpus_per_node=int(entry.get("gpus_per_node") or 8),
        tdp_w=entry.get("tdp_w"),
        fp8_any_layout=bool(entry.get("fp8_any_layout", False)),
        sources=tuple(entry.get("sources", ())),
        notes=entry.get("notes", "") or "",
    )
