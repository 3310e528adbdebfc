"""Catalog responses: models with exact parameter counts, accelerators with sources, precisions."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.schemas.common import ModelRef, Request

__all__ = [
    "AcceleratorOut",
    "ModelSpecOut",
    "ModelSummary",
    "ModuleNodeOut",
    "Params",
    "PrecisionOut",
    "PrecisionsOut",
    "TreeOut",
    "TreeRequest",
]


class Params(BaseModel):
    """Exact parameter counts in elements (checked against transformers on the meta device)."""

    total: int
    active: int = Field(description="Touched by one token's forward pass (top-k experts)")
    by_component: dict[str, int]


Scope = Literal["public", "team"]
SCOPE = Field(description="public: the bundled catalog; team: this service's team catalog")


class ModelSummary(BaseModel):
    id: str
    scope: Scope = SCOPE
    hf_id: str | None
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_seq_len: int | None
    moe: bool
    exact: bool = Field(
        description="True when the family is read exactly (parameters, FLOPs and caches checked"
        " against transformers); false for a model read approximately (its notes say how)"
    )
    params: Params


class ModelSpecOut(ModelSummary):
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_sizes: list[int]
    num_experts: int | None
    experts_per_token: int | None
    tied_embeddings: bool
    layer_kinds: list[dict[str, Any]] = Field(description="Each kind of layer and how many")
    config: dict[str, Any] | None = Field(description="The config.json the spec was read from")
    sources: list[Any]
    notes: list[str]


class AcceleratorOut(BaseModel):
    id: str
    scope: Scope = SCOPE
    name: str
    vendor: str
    generation: str
    memory_bytes: int
    hbm_bytes_per_s: float
    peak_flop_per_s: dict[str, float] = Field(description="Dense peaks by compute format")
    scale_up_bytes_per_s: float | None
    scale_up_domain: int
    scale_out_bytes_per_s: float | None
    gpus_per_node: int
    tdp_w: float | None
    fp8_any_layout: bool = Field(
        description="fp8 GEMMs run in every operand layout (compute capability 10.x): no"
        " transposed copy of a per-tensor fp8 weight is kept for the backward"
    )
    price_usd_per_gpu_hour: float | None
    price_source: str | None
    notes: str
    sources: list[Any]


class PrecisionOut(BaseModel):
    name: str
    roles: dict[str, str | None]
    compute: str


class PrecisionsOut(BaseModel):
    presets: list[PrecisionOut]
    dtypes: dict[str, float] = Field(description="Bytes per element, scale factors included")


class TreeRequest(Request):
    model: ModelRef
    accelerator: str = Field("h100-sxm-80gb", max_length=128)
    precision: str = Field("bf16", max_length=64)
    seq_len: int = Field(2048, ge=1, le=2**20)
    batch_size: int = Field(1, ge=1, le=4096)
    causal: bool = Field(True, description="False: full s x s attention products (eager)")
    top_k: int = Field(5, ge=1, le=50)
    source: Literal["analytical", "exact"] = Field(
        "analytical",
        description="exact: also count each module of the real transformers model on the meta "
        "device (needs the optional groundtruth extra)",
    )


class ModuleNodeOut(BaseModel):
    name: str
    repeat: int = Field(description="Identical instances summed in this node")
    params: int
    macs: float
    flops: float
    time_s: float
    shares: dict[str, float] = Field(description="Of the model's params, flops and time_s")
    children: list[ModuleNodeOut]


class TreeOut(BaseModel):
    model: str
    seq_len: int
    batch_size: int
    root: ModuleNodeOut
    top: dict[str, dict[str, list[str]]] = Field(
        description="measure -> depth -> the largest nodes' names"
    )
    exact: list[ExactModuleOut] | None = Field(
        None, description="With source=exact: transformers' own modules, layers summed"
    )


class ExactModuleOut(BaseModel):
    module: str
    params: int
    flops: float
