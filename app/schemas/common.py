"""Request pieces every endpoint shares, their bounds, and the error bodies the API answers with.

Bounds are far above any real plan (a million GPUs, sixteen-million-token sequences) and low
enough that no request can make the core build millions of objects or overflow a sweep's 64-bit
integers: every request then answers in bounded time.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ERROR_RESPONSES",
    "AttentionKernel",
    "ErrorItem",
    "ErrorResponse",
    "GpuCount",
    "LayoutSize",
    "ModelRef",
    "PrecisionRef",
    "Price",
    "Request",
    "TokenCount",
]

MAX_LAYOUT = 1024  # tp, pp, cp, ep, etp, vp
MAX_GPUS = 2**20
MAX_TOKENS_PER_SEQUENCE = 2**24
MAX_BATCH = 2**24

LayoutSize = Annotated[int, Field(ge=1, le=MAX_LAYOUT)]
GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS)]
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE)]
Price = Annotated[float, Field(ge=0, le=1e4, description="USD per GPU-hour")]
AttentionKernel = Literal["fused", "flash2"]

ModelRef = Annotated[
    str | dict[str, Any],
    Field(
        description=(
            "A catalog model id (GET /api/v1/models) or a Hugging Face config.json object "
            "pasted inline. Configs are read, never executed; nothing is fetched."
        ),
        examples=["llama-3-70b"],
    ),
]


class PrecisionRoles(BaseModel):
    """Data types by role over the bf16 preset (or over ``preset``)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    preset: str | None = Field(None, max_length=64, examples=["bf16"])
    weights: str | None = Field(None, max_length=64, examples=["fp8"])
    activations: str | None = Field(None, max_length=64)
    gemm_inputs: str | None = Field(None, max_length=64)
    gradients: str | None = Field(None, max_length=64)
    master_weights: str | None = Field(None, max_length=64)
    optimizer_states: str | None = Field(None, max_length=64)
    kv_cache: str | None = Field(None, max_length=64, examples=["fp8"])
    weight_cache: str | None = Field(None, max_length=64)


PrecisionRef = Annotated[
    str | PrecisionRoles,
    Field(
        description="A preset name (GET /api/v1/precisions) or data types by role.",
        examples=["bf16"],
    ),
]


class Request(BaseModel):
    """Base of every request body: unknown fields are refused, not ignored."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, protected_namespaces=()
    )


class ErrorItem(BaseModel):
    field: str = Field(description="Dotted path of the offending input, e.g. layout.tp")
    rule: str = Field(description="What the input must satisfy")
    value: Any = Field(None, description="What was given, when it is short enough to echo")


class ErrorResponse(BaseModel):
    error: Literal[
        "invalid_request",
        "not_found",
        "too_large",
        "timeout",
        "internal",
        "unauthorized",
        "forbidden",
        "conflict",
    ]
    message: str
    detail: list[ErrorItem] = Field(default_factory=list)
    suggestions: list[str] = Field(
        default_factory=list, description="For not_found: the nearest valid ids, closest first"
    )


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "Unknown model or accelerator id"},
    413: {"model": ErrorResponse, "description": "Request body over 1 MB"},
    422: {"model": ErrorResponse, "description": "Invalid request: the field and the rule"},
    503: {"model": ErrorResponse, "description": "The request ran past its time limit"},
}
