"""Request pieces every endpoint shares, their bounds, and the error bodies the API answers with.

Bounds are far above any real plan (a million GPUs, sixteen-million-token sequences) and low
enough that no request can make the core build millions of objects or overflow a sweep's 64-bit
integers: every request then answers in bounded time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    create_model,
    model_validator,
)

from app.schemas.fields import form
from estimator.terms import Term

__all__ = [
    "ERROR_RESPONSES",
    "AttentionKernel",
    "ClusterFields",
    "ClusterOut",
    "ErrorItem",
    "ErrorResponse",
    "ErrorSummaryOut",
    "GpuCount",
    "LayoutSize",
    "MoEDispatcher",
    "ModelRef",
    "NetworkFields",
    "PastedConfig",
    "PrecisionRef",
    "Price",
    "Request",
    "Stack",
    "StackChoice",
    "TokenCount",
    "has_model_type",
    "terms_model",
]

MAX_LAYOUT = 1024  # tp, pp, cp, ep, etp, vp
MAX_GPUS = 2**20
MAX_TOKENS_PER_SEQUENCE = 2**24
MAX_BATCH = 2**24

LayoutSize = Annotated[int, Field(ge=1, le=MAX_LAYOUT)]
GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS)]
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS_PER_SEQUENCE)]
Price = Annotated[float, Field(ge=0, le=1e4, description="USD per GPU-hour")]

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$")
_UNIT_SECONDS = {
    **dict.fromkeys(("", "s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "wk", "week", "weeks"), 604800),
}


def _duration_seconds(value: Any) -> Any:
    """A duration as seconds: a number (seconds), or a string of a number and a unit (``30d``,
    ``36h``, ``90m``, ``2w``, ``45s``, ``30 days``)."""
    if not isinstance(value, str):
        return value
    match = _DURATION.match(value.lower())
    if match is None or match.group(2) not in _UNIT_SECONDS:
        raise ValueError(
            "must be a duration: seconds, or a number with a unit d, h, m, s or w (e.g. 30d)"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


# The schema advertises the number (seconds); the strings with a unit are for people typing.
Duration = Annotated[
    float,
    Field(gt=0, le=1e10),
    BeforeValidator(_duration_seconds),
    WithJsonSchema(
        {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1e10,
            "description": "Seconds; a string of a number and a unit (30d, 36h, 90m, 2w) too",
        }
    ),
]
AttentionKernel = Literal["fused", "flash2"]
Stack = Literal["megatron-core", "fsdp2", "deepspeed", "llm-foundry"]  # estimator.timing.stacks
# A request's stack: one of them, or auto (estimator.timing.stacks.AUTO_PRECEDENCE)
StackChoice = Literal["auto", "megatron-core", "fsdp2", "deepspeed", "llm-foundry"]
MoEDispatcher = Literal["flex", "alltoall"]  # estimator.timing.training.TimingOptions
CudaGraphs = Literal["none", "partial", "full"]  # estimator.timing.stacks.CudaGraphs


def has_model_type(config: dict[str, Any]) -> dict[str, Any]:
    model_type = config.get("model_type")
    text = config.get("text_config")
    if isinstance(text, dict) and not model_type:
        model_type = text.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError("a pasted config.json needs its model_type (e.g. 'llama', 'qwen3')")
    return config


# A pasted config.json: any object with its ``model_type`` (the reader names any other field it
# needs and lacks, since which ones depends on the family). A missing model_type is refused by
# the reader (``plans.resolve_model``), as a schema refusal.
PastedConfig = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "A Hugging Face config.json object",
            "properties": {"model_type": {"type": "string", "minLength": 1}},
            "required": ["model_type"],
            "additionalProperties": True,
        }
    ),
]

ModelRef = Annotated[
    str | PastedConfig,
    Field(
        description=(
            "A catalog model id (GET /api/v1/models), a Hugging Face id (org/name, optionally "
            "org/name@revision: the catalog's entry where it knows the id, else its config.json "
            "fetched by the service from HF_ENDPOINT, GET /api/v1/hub/model), or a Hugging Face "
            "config.json object pasted inline. Configs are read, never executed."
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
    expert_weights: str | None = Field(None, max_length=64, examples=["mxfp4"])


PrecisionRef = Annotated[
    str | PrecisionRoles,
    Field(
        description="A preset name (GET /api/v1/precisions) or data types by role.",
        examples=["bf16"],
    ),
]


def _takes_int_not_float(annotation: Any) -> bool:
    """Whether a field's type accepts an integer and not a float (or a list of such)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _takes_int_not_float(get_args(annotation)[0])
    if origin in (Union, UnionType):
        args = get_args(annotation)
        return float not in args and any(_takes_int_not_float(a) for a in args)
    if origin is list:
        return _takes_int_not_float(get_args(annotation)[0])
    return annotation is int


class Request(BaseModel):
    """Base of every request body: unknown fields are refused, not ignored; types are strict
    (no string is read as a number), except that a whole-number float such as ``27.0`` is an
    integer where an integer is asked for, as JSON Schema counts it."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, protected_namespaces=()
    )

    @classmethod
    @cache
    def _integer_fields(cls) -> frozenset[str]:
        return frozenset(
            name
            for name, f in cls.model_fields.items()
            if _takes_int_not_float(f.rebuild_annotation())
        )

    @model_validator(mode="before")
    @classmethod
    def _whole_floats(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls._integer_fields()
        fixed = None
        for name in fields.intersection(data):
            value = data[name]
            if type(value) is float and value.is_integer():
                fixed = fixed or dict(data)
                fixed[name] = int(value)
            elif type(value) is list and any(type(v) is float for v in value):
                fixed = fixed or dict(data)
                fixed[name] = [int(v) if type(v) is float and v.is_integer() else v for v in value]
        return data if fixed is None else fixed


def terms_model(name: str, terms: Sequence[Term], *, memory: bool = False) -> type[BaseModel]:
    """A response model with one float field per term of the core's registry
    (``estimator.terms``), in its order, described by what the term counts; a ``memory``
    breakdown adds its total, the card's capacity, the headroom and whether it fits."""
    fields: dict[str, Any] = {
        t.key: (float, Field(description=f"{t.label}: {t.includes} ({t.unit})")) for t in terms
    }
    if memory:
        fields |= {
            "total_bytes": (float, Field(description="The terms' sum")),
            "capacity_bytes": (float, Field(description="What the accelerator holds")),
            "headroom_bytes": (float, Field(description="capacity - total (negative: over)")),
            "fits": (bool, Field(description="total <= capacity")),
        }
    return create_model(name, **fields)


class ErrorItem(BaseModel):
    field: str = Field(description="Dotted path of the offending input, e.g. layout.tp")
    rule: str = Field(description="What the input must satisfy")
    value: Any = Field(None, description="What was given, when it is short enough to echo")


class ErrorResponse(BaseModel):
    error: Literal[
        "invalid_request",
        "invalid_plan",
        "not_found",
        "too_large",
        "timeout",
        "internal",
        "unauthorized",
        "forbidden",
        "conflict",
        "method_not_allowed",
        "rate_limited",
        "unavailable",
    ]
    message: str
    detail: list[ErrorItem] = Field(default_factory=list)
    suggestions: list[str] = Field(
        default_factory=list, description="For not_found: the nearest valid ids, closest first"
    )


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {
        "model": ErrorResponse,
        "description": "A model named by a gated or private Hugging Face repository, no token",
    },
    404: {"model": ErrorResponse, "description": "Unknown model or accelerator id"},
    408: {"model": ErrorResponse, "description": "The body did not arrive in time"},
    413: {"model": ErrorResponse, "description": "Request body over the size limit"},
    422: {"model": ErrorResponse, "description": "Invalid request: the field and the rule"},
    424: {
        "model": ErrorResponse,
        "description": "A model named by a Hugging Face id: its hub did not answer, none cached",
    },
    503: {
        "model": ErrorResponse,
        "description": "The request ran past its time limit, or the service is busy",
    },
}


CLUSTER_FORM = form("GPUs per node", "Cluster", "the accelerator's")


class NetworkFields(Request):
    """The network a plan's collectives run over, each field defaulting to the accelerator's
    catalog value (``GET /api/v1/accelerators/{id}`` lists them with their sources)."""

    scale_up_domain: Annotated[int, Field(ge=1, le=65536)] | None = Field(
        None,
        description="GPUs joined by NVLink / xGMI / ICI (8 in an HGX node, 72 in a GB200 NVL72"
        " rack); collectives inside it run at scale-up bandwidth",
        json_schema_extra=form("Scale-up domain", "Cluster", "the accelerator's"),
    )
    scale_out_gbit_per_s: Annotated[float, Field(ge=1, le=1e5)] | None = Field(
        None,
        description="Scale-out network per GPU and direction, Gbit/s (400 for one 400G NIC per"
        " GPU; 100 for an 800G NIC shared by a node of 8)",
        json_schema_extra=form("Scale-out Gbit/s per GPU", "Cluster", "the accelerator's"),
    )
    oversubscription: Annotated[float, Field(ge=1, le=64)] = Field(
        1.0,
        description="The scale-out fabric's oversubscription (1: non-blocking; 2: 2:1)",
        json_schema_extra=form("Oversubscription", "Cluster", "1"),
    )


class ClusterFields(NetworkFields):
    """The cluster a plan runs on: its nodes and its network, each field defaulting to the
    accelerator's catalog value."""

    gpus_per_node: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="GPUs per node (how ranks fill machines; 4 in a GB200 compute tray)",
        json_schema_extra=CLUSTER_FORM,
    )


class ClusterOut(BaseModel):
    """The cluster the answer assumed (the request's values over the catalog's)."""

    gpus_per_node: int
    scale_up_domain: int
    scale_out_gbit_per_s: float = Field(description="Per GPU and direction, after oversubscription")
    oversubscription: float


class AccuracyRecordOut(BaseModel):
    """A published measurement near the plan, and the planner's error on it."""

    id: str
    group: str
    accelerator: str
    vendor: str = Field(default="", description="The accelerator's vendor (the catalog's)")
    style: str = Field(
        default="",
        description="The run's layout style: dp-only (ZeRO/FSDP), tp/pp (Megatron) or moe/ep;"
        " empty where the report gives no layout (serving, latency under load)",
    )
    model: str
    stack: str = Field(description="Software stack profile (training) or engine (serving)")
    gpus: int
    measured: float
    predicted: float
    error: float = Field(description="predicted / measured - 1")
    source: str
    url: str | None = Field(description="A link to the source, where its citation names one")


class ErrorSummaryOut(BaseModel):
    """The planner's error on a set of published records (``app.accuracy.summary``)."""

    n: int
    median_ape: float
    p90_ape: float
    median_signed: float
    p10_signed: float
    p90_signed: float


class AccuracyFamilyOut(ErrorSummaryOut):
    """The planner's error on every published run of one model family, for one metric."""

    name: str = Field(description="The model family (its config's model_type)")


class AccuracyCrossVendorOut(BaseModel):
    """The error seen where the planner predicted one vendor's accelerators with curves read off
    another's (``app.accuracy.cross_vendor``)."""

    vendor: str = Field(description="The plan's accelerator's vendor")
    shown: str = Field(description="The vendor of the records shown, whose curves it borrows")
    scope: Literal["vendor", "other vendors"] = Field(
        description="Measured on the report's runs on the plan's vendor's accelerators, or on"
        " every other vendor's where it has none"
    )
    vendors: list[str] = Field(description="The vendors of the runs it was measured on")
    n: int = Field(description="Runs measured on")
    widening: float = Field(
        description="The median of |(1 + a run's error) / (1 + the median error of the shown"
        " vendor's runs of its benchmark and metric) - 1|"
    )
    p90: float = Field(description="The 90th percentile of the same")


class AccuracyMetricOut(BaseModel):
    """How right the planner was on published runs like the plan, for one headline number."""

    metric: str = Field(description="tokens_per_s_per_gpu, output_tokens_per_s, ttft or tpot")
    label: str
    unit: str
    predicted: float | None = Field(description="The plan's own number")
    n: int = Field(description="Similar published records compared (at most 12)")
    median_ape: float | None
    p90_ape: float | None
    median_signed: float | None
    p10_signed: float | None
    p90_signed: float | None
    range_low: float | None = Field(
        description="predicted / (1 + the records' 90th percentile signed error); null below"
        " 5 records"
    )
    range_high: float | None = Field(
        description="predicted / (1 + the records' 10th percentile signed error)"
    )
    range_from: Literal["nearest", "family"] | None = Field(
        default=None,
        description="Whose errors the range comes from: the nearest records, or the plan's own"
        " model family's runs where those lean beyond +/-15% in the median (a known bias)",
    )
    family: AccuracyFamilyOut | None = Field(
        default=None, description="The error on every published run of the plan's model family"
    )
    matched_on: str = Field(description="What the records share with the plan")
    match: Literal["accelerator", "generation", "vendor", "other vendor", "any"] | None = Field(
        default=None,
        description="The hardware the records were matched on: the plan's accelerator, else its"
        " generation, else its vendor, where 5 or more of them (or every record) share it;"
        " 'other vendor' where fewer are on its vendor's accelerators and other vendors' are"
        " shown; 'any' where the plan's vendor is not known; null: no record",
    )
    style: Literal["dp-only", "tp/pp", "moe/ep"] | None = Field(
        default=None,
        description="Training throughput: the plan's layout style, which its records are matched"
        " on first",
    )
    style_match: bool | None = Field(
        default=None,
        description="Whether the records share the plan's layout style (false: fewer than 5"
        " published runs have it, the caveat says which styles are shown); null: not matched on it",
    )
    caveat: str | None = Field(
        default=None,
        description="What the records do not share with the plan, in words: its accelerator,"
        " generation or vendor, or its layout style, and the range's widening for other vendors'",
    )
    range_widening: float | None = Field(
        default=None,
        description="Where the records are other vendors' (match 'other vendor'): the fraction the"
        " range is widened by either way (low / (1 + w), high x (1 + w)), the planner's error"
        " across vendors measured on the report's runs (cross_vendor)",
    )
    cross_vendor: AccuracyCrossVendorOut | None = Field(
        default=None, description="How the error across vendors was measured (match 'other vendor')"
    )
    summary: str
    records: list[AccuracyRecordOut]


class AccuracyOut(BaseModel):
    """The validation records nearest to the plan (app/accuracy.py: its layout style, then its
    accelerator, generation or vendor, then model family or class, stack or engine, scale) and
    their observed error."""

    metrics: list[AccuracyMetricOut]
    report: str = Field(description="The full validation report's page")
    step_s_range: list[float] | None = Field(
        default=None, description="Training: the step time's range, from the throughput's"
    )
