"""Inference estimate: a serving replica's memory, TTFT/TPOT with breakdowns, throughput, cost."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from app.schemas.catalog import Params
from app.schemas.common import (
    AccuracyOut,
    ClusterFields,
    ClusterOut,
    GpuCount,
    LayoutSize,
    ModelRef,
    PrecisionRef,
    Price,
    Request,
    TokenCount,
    terms_model,
)
from app.schemas.energy import (
    EnergyFields,
    EnergyOut,
    PriceMixFields,
    TcoOut,
    TokenPricesOut,
)
from app.schemas.fields import form
from app.schemas.training import (
    ACCELERATOR_FORM,
    LAYOUT_EP,
    LAYOUT_PP,
    LAYOUT_TP,
    MODEL_FORM,
)
from estimator.inputs.speculative import Method
from estimator.terms import INFERENCE_MEMORY, LATENCY

__all__ = [
    "CalibrationIn",
    "CalibrationOut",
    "InferenceEstimateOut",
    "InferenceLayout",
    "InferenceRequest",
    "LatencyBreakdown",
    "LengthsOut",
    "PrefixCacheOut",
    "SpeculativeOut",
]

Concurrency = Annotated[int, Field(ge=1, le=2**20)]
LatencyTarget = Annotated[float, Field(gt=0, le=1e4)]
# At least one output token: a serving plan decodes (with none, TPOT, tokens/s and the KV
# cache's growth have nothing to measure; a prefill-only plan is a training forward).
OutputLen = Annotated[int, Field(ge=1, le=2**24)]
PROMPT = form("Prompt tokens", "Workload", "1024")
OUTPUT = form("Output tokens", "Workload", "256")


# The length presets of estimator.inputs.lengths (a test keeps the two lists equal).
Dataset = Literal[
    "sharegpt",
    "mlperf-llama2-70b",
    "mlperf-llama3.1-8b",
    "mlperf-llama3.1-405b",
    "mlperf-mixtral-8x7b",
    "mlperf-deepseek-r1",
]


class InferenceLayout(Request):
    """One replica: ``dp x tp x pp`` GPUs; MoE experts over ``ep`` of the TP ranks, or with
    attention data parallel (``dp > 1``) of the ``dp x tp`` GPUs."""

    tp: LayoutSize = Field(1, description="Tensor parallel", json_schema_extra=LAYOUT_TP)
    pp: LayoutSize = Field(1, description="Pipeline stages", json_schema_extra=LAYOUT_PP)
    dp: LayoutSize = Field(
        1,
        description=(
            "Attention data parallel (MoE models): dp groups of tp GPUs, each with its own"
            " sequences, KV cache and attention; the experts over ep of the dp x tp GPUs"
        ),
        json_schema_extra=form("Attention DP", "Layout", "1"),
    )
    ep: LayoutSize = Field(1, description="Expert parallel", json_schema_extra=LAYOUT_EP)
    stage_layers: list[Annotated[int, Field(ge=1, le=16384)]] | None = Field(
        None,
        max_length=16384,
        description="Decoder layers on each pipeline stage, first to last, as vLLM's"
        " VLLM_PP_LAYER_PARTITION or SGLang's SGLANG_PP_LAYER_PARTITION gives them (pp entries,"
        " the model's layers in all); default: the engine's split (its get_pp_indices), even"
        " where pp divides the layers",
    )


class EngineMemoryFields(Request):
    """The engine's KV cache as a deployment sets it (default: the engine preset's)."""

    kv_cache_memory_fraction: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None,
        description="The KV cache's memory fraction in the engine's own meaning: vLLM"
        " --gpu-memory-utilization (of the GPU, weights and activations included; default"
        " 0.9), TensorRT-LLM free_gpu_memory_fraction (of what the model leaves; 0.9), SGLang"
        " --mem-fraction-static (of the GPU, weights included; 0.79-0.88 by TP size)",
        json_schema_extra=form("KV memory fraction", "Workload", "engine default"),
    )
    kv_block_size: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="Tokens a KV-cache block holds (vLLM --block-size 16, TensorRT-LLM"
        " tokens_per_block 32, SGLang --page-size 1): a sequence holds whole blocks",
        json_schema_extra=form("KV block size (tokens)", "Workload", "engine default"),
    )


Engine = Literal["vllm", "vllm-small-gpu", "sglang", "trtllm"]
CALIBRATION = "Calibration"
MeasuredMs = Annotated[float, Field(gt=0, le=1e7)]


class CalibrationIn(Request):
    """A deployment's measured run the plan is calibrated on (``estimator.serving.calibration``):
    the JSON ``vllm bench serve --save-result`` writes (SGLang's bench_serving: the same keys),
    or its mean TTFT and TPOT typed in with their load and lengths."""

    accelerator: str = Field(
        max_length=128,
        description="The accelerator the run was measured on (catalog id); another than the"
        " plan's is refused: the fitted scales are that GPU's kernels",
        json_schema_extra=form("Measured on", CALIBRATION, flag="--calibration-accelerator"),
    )
    engine: Engine | None = Field(
        None,
        description="The engine the run was measured with (default: the plan's); another than"
        " the plan's is refused",
        json_schema_extra=form("Measured engine", CALIBRATION, flag="--calibration-engine"),
    )
    bench: dict[str, Any] | None = Field(
        None,
        description="The benchmark's result JSON: completed, total_input_tokens,"
        " total_output_tokens, mean_ttft_ms, mean_tpot_ms, max_concurrency, request_rate,"
        " output_throughput, request_throughput; the typed fields below are then not read",
    )
    ttft_ms: MeasuredMs | None = Field(
        None,
        description="The run's mean TTFT, ms",
        json_schema_extra=form("Measured TTFT (ms)", CALIBRATION, flag="--measured-ttft-ms"),
    )
    tpot_ms: MeasuredMs | None = Field(
        None,
        description="The run's mean TPOT, ms",
        json_schema_extra=form("Measured TPOT (ms)", CALIBRATION, flag="--measured-tpot-ms"),
    )
    output_tokens_per_s: Annotated[float, Field(gt=0, le=1e9)] | None = Field(
        None,
        description="The run's output tokens/s (checked against the GPUs' peak; not fitted)",
        json_schema_extra=form("Measured output tok/s", CALIBRATION, flag="--measured-tokens"),
    )
    concurrency: Concurrency | None = Field(
        None,
        description="Requests the run kept in flight (closed loop); or request_rate",
        json_schema_extra=form("Measured concurrency", CALIBRATION, flag="--measured-concurrency"),
    )
    request_rate: Annotated[float, Field(ge=1e-6, le=1e6)] | None = Field(
        None,
        description="The run's Poisson arrivals, requests/s (open loop); or concurrency",
        json_schema_extra=form("Measured request rate", CALIBRATION, flag="--measured-rate"),
    )
    input_len: TokenCount | None = Field(
        None,
        description="The run's mean prompt tokens (default: the plan's)",
        json_schema_extra=form("Measured prompt tokens", CALIBRATION, flag="--measured-input"),
    )
    output_len: OutputLen | None = Field(
        None,
        description="The run's mean output tokens (default: the plan's)",
        json_schema_extra=form("Measured output tokens", CALIBRATION, flag="--measured-output"),
    )


class InferenceRequest(ClusterFields, EngineMemoryFields, EnergyFields, PriceMixFields):
    """A serving plan for one replica. Only ``model`` is required."""

    model: ModelRef = Field(json_schema_extra=MODEL_FORM)
    accelerator: str = Field("h100-sxm-80gb", max_length=128, json_schema_extra=ACCELERATOR_FORM)
    num_gpus: GpuCount | None = Field(
        None,
        description="Must equal dp x tp x pp when given",
        json_schema_extra=form("GPUs", flag="--gpus"),
    )
    layout: InferenceLayout = Field(default_factory=lambda: InferenceLayout())
    precision: PrecisionRef = Field(
        "bf16",
        description="A preset or data types by role",
        json_schema_extra=form("Precision", "Layout", choices="presets"),
    )
    input_len: TokenCount = Field(1024, description="Prompt tokens", json_schema_extra=PROMPT)
    output_len: OutputLen = Field(256, description="Output tokens", json_schema_extra=OUTPUT)
    dataset: Dataset | None = Field(
        None,
        description="Request lengths drawn from a dataset instead of fixed input_len /"
        " output_len (give one or the other): sharegpt, as vllm bench serve and"
        " sglang.bench_serving sample it (mean 229.7 prompt and 203.1 output tokens), or an"
        " MLPerf Inference task's published means (mlperf-llama2-70b 222.3 / 294.4,"
        " mlperf-llama3.1-8b 870.7 / 129.0, mlperf-llama3.1-405b 9,428.6 / 684.7,"
        " mlperf-mixtral-8x7b 427.4 / 144.8, mlperf-deepseek-r1 803.8 / 3,886.2); the load"
        " model reads its spread, a lone request and the memory model its means",
        json_schema_extra=form("Length distribution", "Workload", "fixed lengths"),
    )
    concurrency: Concurrency = Field(
        1,
        description="Sequences decoded together",
        json_schema_extra=form("Concurrency", "Workload", "1"),
    )
    engine: Engine = Field(
        "vllm",
        description="Serving engine whose scheduler the load model follows (token budget,"
        " sequence cap, mixed or separate prefill steps): vllm (V1, >= 70 GiB GPUs), vllm-small-gpu"
        " (V1 on A100 or < 70 GiB), sglang, trtllm",
        json_schema_extra=form("Engine", "Workload"),
    )
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None,
        description="The engine's token budget per step (vLLM --max-num-batched-tokens,"
        " TensorRT-LLM max_num_tokens, SGLang --chunked-prefill-size); default the engine's",
        json_schema_extra=form("Token budget per step", "Workload", "engine default"),
    )
    max_num_seqs: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None,
        description="The engine's sequence cap per step (vLLM --max-num-seqs, TensorRT-LLM"
        " max_batch_size, SGLang --max-running-requests); default the engine's",
        json_schema_extra=form("Sequence cap", "Workload", "engine default"),
    )
    request_rate: Annotated[float, Field(ge=1e-6, le=1e6)] | None = Field(
        None,
        description="Poisson arrivals, requests/s (open loop): the load model's alternative to"
        " concurrency (requests kept in flight); give one or the other",
        json_schema_extra=form("Request rate (req/s)", "Workload", "none"),
    )
    num_prompts: Annotated[int, Field(ge=1, le=20_000)] | None = Field(
        None,
        description="A finite benchmark run of this many requests through the concurrency's"
        " clients, as vllm bench serve --num-prompts sends them (the first wave starts at"
        " once): its TTFT, TPOT and throughput over the run, simulated step by step (closed"
        " loop only; pp 1). None: the steady state",
        json_schema_extra=form("Requests in the run", "Workload", "steady state"),
    )
    speculative_method: Method | None = Field(
        None,
        description="Speculative decoding: mtp (the model's own multi-token-prediction"
        " modules), eagle (an EAGLE-1/2 head), eagle3 (an EAGLE-3 head) or draft (a smaller"
        " model: draft_model); none by default",
        json_schema_extra=form("Speculative decoding", "Speculation", "none"),
    )
    num_speculative_tokens: Annotated[int, Field(ge=1, le=16)] | None = Field(
        None,
        description="Draft tokens per step (k); the target verifies k + 1 per sequence",
        json_schema_extra=form("Draft tokens per step (k)", "Speculation", "3"),
    )
    acceptance_length: Annotated[float, Field(ge=1, le=17)] | None = Field(
        None,
        description="Mean tokens a step emits per sequence: the drafts accepted plus the one"
        " the verification samples, between 1 and k + 1 (vLLM's mean acceptance length,"
        " SGLang's accept length, measured on your data)",
        json_schema_extra=form("Acceptance length", "Speculation", "2.5"),
    )
    draft_model: str | None = Field(
        None,
        max_length=128,
        description="The draft model of speculative_method=draft, by catalog id",
        json_schema_extra=form("Draft model", "Speculation", "none", choices="models"),
    )
    prefix_cache_hit_rate: Annotated[float, Field(ge=0, le=1)] = Field(
        0.0,
        description="Fraction of each prompt's tokens found in the prefix cache: prefill"
        " computes only the rest (their attention still reads the cached keys); the KV cache"
        " still counts each request's whole prompt",
        json_schema_extra=form("Prefix-cache hit rate", "Workload", "0"),
    )
    moe_imbalance: Annotated[float, Field(ge=1, le=64)] = Field(
        1.0,
        description="Mixture-of-experts models: the routed tokens the busiest expert-parallel"
        " rank takes over the balanced share (1: balanced); every step waits for that rank",
        json_schema_extra=form("MoE router imbalance", "Workload", "1"),
    )
    calibration: CalibrationIn | None = Field(
        None,
        description="A measured run of this deployment: the load model's prefill and decode"
        " step times are scaled to reproduce its mean TTFT and TPOT (the answer's calibrated)",
    )
    prefill_chunk: TokenCount | None = Field(None, description="Chunked prefill; default whole")
    max_batch_size: Concurrency = Field(2048, description="Largest concurrency the curve tries")
    ttft_target_s: LatencyTarget | None = Field(
        None, json_schema_extra=form("TTFT target (s)", "Targets", "none")
    )
    tpot_target_s: LatencyTarget | None = Field(
        None, json_schema_extra=form("TPOT target (s)", "Targets", "none")
    )
    price_usd_per_gpu_hour: Price | None = Field(
        None,
        description="Default: the catalog's dated on-demand price, where it has one",
        json_schema_extra=form("Price $/GPU-hour", "Targets", "catalog", flag="--price"),
    )

    model_config = Request.model_config | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "llama-3-70b",
                    "accelerator": "h100-sxm-80gb",
                    "num_gpus": 4,
                    "layout": {"tp": 4},
                    "precision": {"weights": "fp8", "kv_cache": "fp8"},
                    "input_len": 2048,
                    "output_len": 256,
                    "concurrency": 32,
                }
            ]
        }
    }


# The terms come from the core's registry (``estimator.terms``), in its order.
_MemoryTerms = terms_model("InferenceMemoryTerms", INFERENCE_MEMORY, memory=True)
_LatencyTerms = terms_model("LatencyTerms", LATENCY)


class InferenceMemoryOut(_MemoryTerms):  # type: ignore[misc, valid-type]
    """Per-GPU serving memory on the most-loaded pipeline stage (bytes)."""

    prefill_peak_bytes: float
    decode_peak_bytes: float
    stage: int


class LatencyBreakdown(_LatencyTerms):  # type: ignore[misc, valid-type]
    """What a step's time is spent on; sums to it."""


class LatencyOut(BaseModel):
    ttft_s: float | None = Field(
        description="Mean TTFT in the steady state at the request's load (concurrency kept in"
        " flight, or request_rate); null where the replica is overloaded and the queue grows"
        " without end. A lone request's: ttft_lone_s"
    )
    tpot_s: float | None = Field(
        description="Mean TPOT in the steady state at the request's load (decode steps shared"
        " with prefill chunks); a lone request's: tpot_lone_s"
    )
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    basis: str = Field(description="The load the figures above are at, and the regime")
    ttft_lone_s: float = Field(description="Prefill of one prompt through every stage, alone")
    tpot_lone_s: float = Field(description="One decode step at the requested concurrency")
    ttft_breakdown: LatencyBreakdown = Field(description="The lone request's TTFT by part")
    tpot_breakdown: LatencyBreakdown = Field(description="The lone TPOT by part")


class InferenceThroughputOut(BaseModel):
    """The replica's throughput at the load the latencies are at (``basis``): the load model's
    since 2026-12-01, where it was the concurrency curve's cycle at ``concurrency`` before
    (docs/api.md, "Changes")."""

    output_tokens_per_s: float = Field(description="At the load asked for (basis)")
    output_tokens_per_s_per_gpu: float
    input_tokens_per_s: float = Field(description="Prompt tokens (cached ones included)")
    capacity_output_tokens_per_s: float | None = Field(
        None,
        description="The most the replica completes at these lengths (its capacity in"
        " requests/s times the mean output); null without a load model",
    )
    utilization: float | None = Field(
        None, description="output_tokens_per_s over the capacity (1 when overloaded)"
    )
    basis: str = Field("", description="The load these figures are at, and the regime")


class CurvePoint(BaseModel):
    concurrency: int
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    fits: bool


class InferenceCostOut(BaseModel):
    price_usd_per_gpu_hour: float | None
    price_source: str | None
    usd_per_hour: float | None = Field(description="The replica's GPUs, per hour")
    usd_per_1k_output_tokens: float | None = Field(
        description="All-in: every GPU-second, prefill's included, over the output tokens"
    )
    usd_per_1m_output_tokens: float | None = Field(description="All-in, as per 1k")
    usd_per_1m_output_tokens_decode: float | None = Field(
        description="Decode's share of the GPU time over the output tokens (the split by phase)"
    )
    usd_per_1k_input_tokens: float | None = Field(
        description="Prefill's share of the GPU time over the input tokens"
    )
    usd_per_1m_input_tokens: float | None
    usd_per_1m_output_tokens_at_capacity: float | None = Field(
        None,
        description="All-in per 1M output tokens with the replica at its capacity: what a"
        " fleet sized to its load pays, where the figures above are at the load asked for (a"
        " partly idle replica's)",
    )
    basis: str = Field("", description="The load the cost figures are at")


class LoadOut(BaseModel):
    """The replica in steady state at the request's load (closed loop at ``concurrency``, or
    open loop at ``request_rate``): means, TTFT percentiles (approximate), the regime."""

    engine: str
    concurrency: float | None
    request_rate: float | None
    regime: str = Field(
        description="light, shared (prompts and decodes share steps), budget-limited (prompts"
        " queue for the token budget), slot-limited (requests queue for a KV / sequence slot)"
        " or overloaded (arrivals past capacity: TTFT grows without bound)"
    )
    running: float
    decoding: float
    queued: float
    ttft_s: float | None = Field(description="Mean; null when overloaded (no steady state)")
    tpot_s: float
    e2e_s: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    step_s: float
    prefill_steps: float
    requests_per_s: float = Field(description="Completed; at capacity when overloaded")
    output_tokens_per_s: float
    capacity_requests_per_s: float = Field(
        description="The most requests/s the replica completes at this load's lengths"
    )
    lengths: str = Field(description="fixed, or the dataset whose length distribution it took")
    tpot_p50_s: float | None = Field(
        None, description="Over requests: the steady state's mean (alike for all); a run's own"
    )
    tpot_p99_s: float | None = None
    num_prompts: int | None = Field(None, description="A finite run of that many requests")
    duration_s: float | None = Field(None, description="The run's, first request to last token")
    e2e_p50_s: float | None = Field(
        None, description="End to end over requests: TTFT plus each one's own decode steps"
    )
    e2e_p90_s: float | None = None
    e2e_p99_s: float | None = None
    slo_attainment: float | None = Field(
        None,
        description="With ttft_target_s / tpot_target_s: the share of requests within both"
        " (approximate, as the percentiles)",
    )
    goodput_requests_per_s: float | None = Field(
        None, description="With targets: the requests/s within both (slo_attainment x rate)"
    )


class FleetNeedOut(BaseModel):
    """With request_rate: the replicas of this layout the rate needs, each planned at its rate
    within the targets (without targets, 85% of its capacity) over 1 + the headroom."""

    request_rate: float
    replicas: int | None = Field(
        description="Null where no replica count meets the targets (one replica misses them"
        " at any load)"
    )
    headroom: float = Field(description="The share kept in hand on each replica's rate")
    headroom_source: str = Field(description="The measured optimism it is (validation report)")
    within_targets: bool = Field(description="Planned within latency targets (else capacity)")
    rate_per_replica: float | None = Field(
        description="The rate a replica takes within the targets (85% of its capacity without"
        " them); null where one replica meets them at the whole rate with the headroom"
    )
    planned_rate_per_replica: float | None
    fleet_gpus: int | None
    basis: str


class LengthsOut(BaseModel):
    """The request lengths the answer assumed (``estimator.inputs.lengths``)."""

    name: str = Field(description="fixed, or a dataset preset")
    label: str
    mean_input_tokens: float
    mean_output_tokens: float
    input_p50_tokens: float
    input_p90_tokens: float
    input_cv: float = Field(description="The prompt length's coefficient of variation")
    sources: list[str]


class LaunchOut(BaseModel):
    """The replica's launch commands (estimator.serving.launch): across ``nodes`` nodes,
    ``vllm`` and ``sglang`` hold every node's command (node i's after a ``# node i`` line), and
    ``vllm_nodes`` and ``sglang_nodes`` the same one a node; ``trtllm`` is started once."""

    vllm: str
    sglang: str
    trtllm: str
    notes: list[str]
    nodes: int = 1
    vllm_nodes: list[str] = []
    sglang_nodes: list[str] = []


class SpeculativeOut(BaseModel):
    """Speculative decoding as the plan runs it (estimator.serving.speculative), at the
    requested concurrency: the inputs, a step's verification and drafting seconds, TPOT without
    speculation on the same replica, and the drafter's memory per GPU."""

    method: str
    num_speculative_tokens: int
    acceptance_length: float
    draft_model: str | None
    verify_s_per_step: float = Field(description="The target verifying k + 1 tokens/sequence")
    draft_s_per_step: float = Field(description="The drafter's k passes")
    step_s: float
    tpot_without_s: float = Field(description="TPOT of the same replica without speculation")
    tpot_speedup: float = Field(description="tpot_without_s over TPOT")
    draft_weights_bytes: float
    draft_kv_cache_bytes_per_sequence: float


class PrefixCacheOut(BaseModel):
    """What the prefix cache does to a prompt: tokens read from it and computed, and a lone
    request's TTFT against the prompt computed whole."""

    hit_rate: float
    cached_tokens: int
    computed_tokens: int
    ttft_without_s: float
    ttft_speedup: float


class MeansOut(BaseModel):
    """Mean TTFT and TPOT (s) and output tokens/s at the measured load."""

    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float | None


class CalibrationOut(BaseModel):
    """What the calibration fitted and by how much, and the means at the measured load."""

    prefill_scale: float = Field(description="Multiplier on the steps' prompt-chunk time")
    decode_scale: float = Field(description="Multiplier on the steps' decode time")
    accelerator: str
    engine: str
    source: str
    input_len: int
    output_len: int
    concurrency: int | None
    request_rate: float | None
    measured: MeansOut
    uncalibrated: MeansOut = Field(description="The model's own at the measured load")
    calibrated: MeansOut = Field(description="The fitted model's at the measured load")
    steps: int = Field(description="Newton steps the fit took")
    note: str


class InferenceEstimateOut(BaseModel):
    model: str
    accelerator: str
    num_gpus: int
    layout: InferenceLayout
    concurrency: int
    memory_per_gpu: InferenceMemoryOut
    kv_cache_bytes_per_token: float
    kv_cache_bytes_per_sequence: float
    state_bytes_per_sequence: float = Field(
        description="Recurrent (SSM, linear-attention, convolution) state of one sequence: a"
        " fixed size, whatever its length; 0 for a model without recurrent layers"
    )
    max_concurrency: int
    best_concurrency: int | None = Field(
        description="With targets: the most requests kept in flight whose steady state on the"
        " engine meets TTFT p99 and TPOT (the serving sweep's choice); without: the"
        " highest-throughput concurrency the KV cache holds"
    )
    latency: LatencyOut
    throughput: InferenceThroughputOut
    curve: list[CurvePoint]
    cost: InferenceCostOut
    token_prices: TokenPricesOut = Field(
        description="$ per 1M input, cached-input, output and blended tokens (null unpriced)"
    )
    energy: EnergyOut | None = Field(
        description="Per output token, at the load the throughput is; null where the"
        " accelerator has no published power figure and none is given"
    )
    energy_refused: str | None = None
    tco: TcoOut | None = Field(description="$ per GPU-hour rented and owned; null with energy")
    params: Params
    cluster: ClusterOut
    load: LoadOut
    fleet: FleetNeedOut | None = Field(None, description="With request_rate: the replicas it needs")
    lengths: LengthsOut
    speculative: SpeculativeOut | None = Field(description="Null without speculative decoding")
    prefix_cache: PrefixCacheOut | None = Field(description="Null at a hit rate of 0")
    launch: LaunchOut
    accuracy: AccuracyOut
    calibrated: CalibrationOut | None = Field(
        None, description="With calibration: the scales fitted on the measured run"
    )
    exact: bool = Field(
        description="Whether the model's architecture is read exactly (parameters, FLOPs and"
        " caches checked against transformers); false for a model read approximately, whose"
        " notes say how"
    )
    notes: list[str]
