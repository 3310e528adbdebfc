"""Team catalog requests and responses: a private accelerator in the public catalog's units
(copy an entry of ``estimator/catalog/accelerators.json`` and change it) with the team's
negotiated price, and a private model as its pasted config.json."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from app.schemas.common import PastedConfig, Price, Request

__all__ = [
    "TeamAcceleratorIn",
    "TeamAcceleratorOut",
    "TeamAcceleratorSpec",
    "TeamModelIn",
    "TeamModelOut",
    "TeamModelSpec",
]

TeamId = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="Lower-case letters, digits, '.', '_' and '-'; never a public catalog id",
        examples=["h100-reserved-east"],
    ),
]
ComputeFormat = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8"]
Tflops = Annotated[float, Field(gt=0, le=1e6)]
Text200 = Annotated[str, Field(min_length=1, max_length=200)]


class TeamAcceleratorSpec(Request):
    name: Text200
    vendor: str = Field("", max_length=64)
    generation: str = Field("", max_length=64)
    memory_gb: float = Field(gt=0, le=1e5, description="Marketed capacity, read as GiB")
    memory_bytes_reported: int | None = Field(
        None, ge=1, le=2**50, description="The total the driver reports, when known"
    )
    hbm_tb_per_s: float = Field(gt=0, le=1e4, description="Memory bandwidth, decimal TB/s")
    dense_tflops: dict[ComputeFormat, Tflops] = Field(
        min_length=1,
        description="Dense (no 2:4 sparsity) tensor rates in TFLOP/s by compute format",
        examples=[{"bf16": 989, "fp8": 1979}],
    )
    scale_up_gb_per_s: float | None = Field(
        None, gt=0, le=1e6, description="NVLink/xGMI bandwidth per GPU, one direction, GB/s"
    )
    scale_up_domain: int = Field(1, ge=1, le=2**16, description="GPUs sharing one NVLink domain")
    scale_out_gbit_per_s: float | None = Field(
        None, gt=0, le=1e6, description="Network bandwidth per GPU, Gbit/s"
    )
    gpus_per_node: int = Field(8, ge=1, le=1024)
    tdp_w: float | None = Field(None, gt=0, le=1e5)
    price_usd_per_gpu_hour: Price | None = Field(
        None, description="The team's negotiated price; the default cost of every plan on it"
    )
    source: str = Field("", max_length=2000, description="Where the figures come from")
    notes: str = Field("", max_length=10_000)


class TeamAcceleratorIn(TeamAcceleratorSpec):
    id: TeamId


class TeamModelSpec(Request):
    name: Text200
    config: PastedConfig = Field(description="The model's Hugging Face config.json")
    source: str = Field("", max_length=2000)
    notes: str = Field("", max_length=10_000)


class TeamModelIn(TeamModelSpec):
    id: TeamId


class _Stamped(BaseModel):
    created_at: str
    updated_at: str


class TeamAcceleratorOut(_Stamped):
    id: str
    name: str
    vendor: str
    generation: str
    memory_gb: float
    memory_bytes_reported: int | None
    hbm_tb_per_s: float
    dense_tflops: dict[str, float]
    scale_up_gb_per_s: float | None
    scale_up_domain: int
    scale_out_gbit_per_s: float | None
    gpus_per_node: int
    tdp_w: float | None
    price_usd_per_gpu_hour: float | None
    source: str
    notes: str


class TeamModelOut(_Stamped):
    id: str
    name: str
    config: dict[str, Any]
    source: str
    notes: str
