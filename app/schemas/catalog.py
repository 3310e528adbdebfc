"""Catalog responses: models with exact parameter counts, accelerators with sources, precisions."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "AcceleratorOut",
    "ModelSpecOut",
    "ModelSummary",
    "Params",
    "PrecisionOut",
    "PrecisionsOut",
]


class Params(BaseModel):
    """Exact parameter counts in elements (checked against transformers on the meta device)."""

    total: int
    active: int = Field(description="Touched by one token's forward pass (top-k experts)")
    by_component: dict[str, int]


class ModelSummary(BaseModel):
    id: str
    hf_id: str | None
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_seq_len: int | None
    moe: bool
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
