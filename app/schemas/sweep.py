"""Sweeps: the estimate requests with lists where a single value was, and paginated results.

A field left out takes the sweep engine's default axis (every data-centre accelerator, GPU
counts 8 to 1024, tp 1-8, pp 1-16, ZeRO 0-3, micro-batches 1-8, every recompute policy), not
the single estimate's default value.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import (
    CudaGraphs,
    Duration,
    GpuCount,
    LayoutSize,
    ModelRef,
    MoEDispatcher,
    NetworkFields,
    Price,
    Request,
    Stack,
    StackChoice,
    TokenCount,
)
from app.schemas.energy import PriceMixFields, SweepPowerFields
from app.schemas.fields import form
from app.schemas.inference import OUTPUT, PROMPT, Dataset, EngineMemoryFields, OutputLen
from app.schemas.run import ReliabilityFields
from app.schemas.training import (
    MODEL_FORM,
    MTP_LAYERS_HELP,
    MTP_REPEATED_HELP,
    RECOMPUTE_MODULES_HELP,
    FineTuneFields,
    GlobalBatch,
    MicroBatch,
    MoEFields,
    MtpLayers,
    OffloadFields,
    Optimizer,
    Recompute,
    RecomputeModules,
    Tokens,
    ZeroStage,
)
from estimator.memory.verdict import FitVerdict
from estimator.serving.disagg import Link, Overlap

__all__ = [
    "AggregatedFleet",
    "AggregatedPoint",
    "DisaggregatedFleet",
    "DisaggregatedOut",
    "DisaggregatedPoint",
    "Recommendation",
    "ServingSweepOut",
    "ServingSweepRequest",
    "ServingSweepRow",
    "TrainingSweepOut",
    "TrainingSweepRequest",
    "TrainingSweepRow",
]

MAX_AXIS = 64


Sizes = LayoutSize | Annotated[list[LayoutSize], Field(min_length=1, max_length=MAX_AXIS)]
GpuCounts = GpuCount | Annotated[list[GpuCount], Field(min_length=1, max_length=MAX_AXIS)]
Names = Annotated[str, Field(max_length=128)]
NameList = Names | Annotated[list[Names], Field(min_length=1, max_length=MAX_AXIS)]
Zeros = ZeroStage | Annotated[list[ZeroStage], Field(min_length=1, max_length=4)]
MicroBatches = MicroBatch | Annotated[list[MicroBatch], Field(min_length=1, max_length=MAX_AXIS)]
Recomputes = Recompute | Annotated[list[Recompute], Field(min_length=1, max_length=4)]
Stacks = StackChoice | Annotated[list[Stack], Field(min_length=1, max_length=4)]
Page = Annotated[int, Field(ge=1, le=1_000_000)]
PageSize = Annotated[int, Field(ge=1, le=1000)]
ACCELERATORS = form("Accelerators", "Space", choices="accelerators")
PRICE_FORM = form("Price $/GPU-hour", "Workload", "catalog", flag="--price")
PAGE_FORM = form("Page", "Workload", "1")


class SweepLayout(Request):
    """Each size may be a value or a list of values to try. ``dp`` restricts what the GPU count
    leaves; sequence parallelism is on whenever tp > 1; ZeRO-1 stands for Megatron's
    distributed optimizer too."""

    tp: Sizes | None = Field(None, json_schema_extra=form("TP", "Space", "1,2,4,8"))
    pp: Sizes | None = Field(None, json_schema_extra=form("PP", "Space", "1,2,4,8,16"))
    dp: GpuCounts | None = Field(None, json_schema_extra=form("DP", "Space", "any"))
    cp: Sizes | None = None
    ep: Sizes | None = Field(
        None,
        description="Default: 1, or powers of two for MoE models",
        json_schema_extra=form("EP", "Space", "auto"),
    )
    vp: Sizes | None = None
    sequence_parallel: Literal[True] | None = None
    zero_stage: Zeros | None = Field(
        None, json_schema_extra=form("ZeRO", "Space", "0,1,2,3", kind="ints", flag="--zero")
    )
    distributed_optimizer: bool = False


class TrainingSweepRequest(
    FineTuneFields, OffloadFields, MoEFields, NetworkFields, SweepPowerFields, ReliabilityFields
):
    model: ModelRef = Field(json_schema_extra=MODEL_FORM)
    accelerator: NameList | None = Field(
        None, description="Default: ten data-centre GPUs", json_schema_extra=ACCELERATORS
    )
    num_gpus: GpuCounts | None = Field(
        None,
        description="Default: 8, 16, ... 1024",
        json_schema_extra=form("GPU counts", "Space", "8,16,…,1024", flag="--gpus"),
    )
    gpus_per_node: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="TP stays inside this many GPUs; default the larger of the accelerator's"
        " GPUs per node and its scale-up (NVLink) domain",
    )
    layout: SweepLayout = Field(default_factory=lambda: SweepLayout())
    seq_len: TokenCount = Field(
        4096,
        description="Tokens a sequence",
        json_schema_extra=form("Sequence length", "Workload", "4096"),
    )
    micro_batch_size: MicroBatches | None = Field(
        None, json_schema_extra=form("Micro-batch", "Space", "1,2,4,8")
    )
    global_batch_size: GlobalBatch = Field(
        1024, json_schema_extra=form("Global batch", "Workload", "1024")
    )
    recompute: Recomputes | None = Field(
        None,
        description="Default: none, selective and full ('op' on request)",
        json_schema_extra=form("Recompute", "Space"),
    )
    precision: NameList | None = Field(
        None,
        description="Preset names; default bf16",
        json_schema_extra=form("Precision", "Space", kind="select", choices="presets"),
    )
    optimizer: Optimizer = "adamw"
    flash_attention: bool = True
    stack: Stacks = Field(
        "auto",
        description="Software stack profile the layouts are timed under (as the estimate's):"
        " auto (each layout on the stack that runs it: data parallelism alone with ZeRO-3 on"
        " fsdp2, with ZeRO-2 on deepspeed, the rest on megatron-core; the rows' stack), one"
        " stack (the layouts it runs), or a list of them: the sweep then compares each layout"
        " under each that runs it (an axis, the rows' stack)",
        json_schema_extra=form("Software stack", "Space"),
    )
    ep_comm_overlap: bool = Field(
        False,
        description="Megatron-Core's expert all-to-all overlap (--overlap-moe-expert-parallel-comm)"
        " in every layout that allows it (ep > 1, vp > 1 with a pipeline, no full recompute)",
        json_schema_extra=form("Expert all-to-all overlap", "Workload"),
    )
    recompute_modules: RecomputeModules | None = Field(
        None,
        description=RECOMPUTE_MODULES_HELP + ", in every selective layout",
        json_schema_extra=form("Recompute modules", "Workload", "core_attn", kind="text"),
    )
    mtp_layers: MtpLayers = Field(
        0,
        description=MTP_LAYERS_HELP + ", in every layout",
        json_schema_extra=form("Multi-token prediction depths", "Workload", "0"),
    )
    mtp_repeated: bool = Field(
        False,
        description=MTP_REPEATED_HELP + ", in every layout",
        json_schema_extra=form("One MTP module repeated", "Workload"),
    )
    moe_dispatcher: MoEDispatcher | None = Field(
        None,
        description="Megatron-Core's MoE token dispatcher in every layout: flex (DeepEP /"
        " HybridEP) or alltoall (NCCL all-to-all); default: the stack's",
        json_schema_extra=form("MoE token dispatcher", "Workload", "the stack's"),
    )
    cuda_graphs: CudaGraphs | None = Field(
        None,
        description="What CUDA graphs capture in every layout: none (each MoE layer exposes"
        " its host time), partial or full (hidden); default: each stack's",
        json_schema_extra=form("CUDA graphs", "Workload", "the stack's"),
    )
    tokens: Tokens | None = Field(
        None, json_schema_extra=form("Tokens to train", "Workload", "e.g. 2e12")
    )
    deadline_s: Duration | None = Field(
        None,
        description="Feasible only if training the tokens takes at most this long: seconds,"
        " or a number with a unit (30d, 36h, 90m, 2w)",
        json_schema_extra=form("Deadline", "Workload", "e.g. 30d or 36h", kind="text"),
    )
    min_headroom: Annotated[float, Field(ge=0, le=0.5)] = Field(
        0.05,
        description="Share of each GPU's memory a feasible layout leaves free (0.05: 5%)",
        json_schema_extra=form("Min. memory headroom", "Workload", "0.05"),
    )
    budget_usd: Annotated[float, Field(gt=0, le=1e12)] | None = Field(
        None, json_schema_extra=form("Budget ($)", "Workload", "none")
    )
    price_usd_per_gpu_hour: Price | None = Field(
        None, description="One price for every GPU", json_schema_extra=PRICE_FORM
    )
    prices: dict[Names, Price] | None = Field(
        None, description="USD per GPU-hour by accelerator id, over the catalog's defaults"
    )
    objective: Literal["cost", "time", "energy"] | None = Field(
        None,
        description="Ranks recommendations: cost (USD per token), time (tokens/s) or energy"
        " (kWh per token: the most tokens/s per MW); default cost when a price is known",
        json_schema_extra=form("Rank by", "Workload"),
    )
    top_k: Annotated[int, Field(ge=1, le=50)] = 5
    rows: Literal["feasible", "evaluated"] = Field(
        "feasible", description="Which layouts the page (and the CSV) lists"
    )
    sort: Literal["objective", "tokens_per_s", "usd_per_1m_tokens", "memory_bytes", "num_gpus"] = (
        Field("objective", json_schema_extra=form("Sort table by", "Workload"))
    )
    page: Page = Field(1, json_schema_extra=PAGE_FORM)
    page_size: PageSize = 50

    model_config = Request.model_config | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "llama-3-70b",
                    "accelerator": ["h100-sxm-80gb", "h200-sxm-141gb"],
                    "num_gpus": [64, 128, 256],
                    "layout": {"tp": [4, 8], "pp": [1, 2, 4], "zero_stage": [1, 3]},
                    "global_batch_size": 1024,
                    "tokens": 2e12,
                }
            ]
        }
    }


class TrainingSweepRow(BaseModel):
    """One evaluated layout; ``*_s`` step terms sum to ``step_s``."""

    accelerator: str
    stack: str = Field(description="The software stack profile the layout is timed under")
    precision: str
    recompute: str
    num_gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vp: int
    pipeline_split: str = Field(
        description="even, or the Megatron-Core rule an uneven pp x vp takes (as pipeline_split"
        "=auto does in a single estimate)"
    )
    zero_stage: int
    micro_batch_size: int
    fits: bool
    fit: FitVerdict = Field(
        description="fits, tight or does_not_fit: the single plan's verdict"
        " (memory_per_gpu.fit), the likely range of its peak deciding where measurements of"
        " its stack give one"
    )
    memory_bytes: float
    capacity_bytes: float
    headroom_bytes: float
    memory_stage: int
    weights_bytes: float
    gradients_bytes: float
    master_weights_bytes: float
    optimizer_states_bytes: float
    activations_bytes: float
    step_s: float
    compute_s: float
    bubble_s: float
    tp_comm_s: float
    ep_comm_s: float
    cp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    zero3_comm_s: float
    offload_s: float = 0.0
    host_s: float = 0.0
    optimizer_s: float
    microbatches: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    usd_per_gpu_hour: float | None
    usd_per_1m_tokens: float | None
    time_to_train_s: float | None = None
    gpu_hours: float | None = None
    cost_usd: float | None = None
    kwh_per_1m_tokens: float | None = Field(None, description="At the facility (null: no power)")
    tokens_per_s_per_mw: float | None = None
    mwh: float | None = Field(None, description="The run's energy, with tokens")
    effective_time_fraction: float | None = Field(
        None, description="Useful time over wall-clock with interruptions and checkpoints"
    )
    effective_time_to_train_s: float | None = Field(
        None, description="The run's wall-clock with them: what deadline_s is judged on"
    )
    effective_cost_usd: float | None = Field(
        None, description="Its cost with the hot spares: what budget_usd is judged on"
    )


class Recommendation(BaseModel):
    rank: int
    row: TrainingSweepRow
    why: list[str]
    tie: bool = Field(
        False,
        description="Within the tie band of the best (the gap the planner's errors leave between"
        " two layouts): ranked among the ties by headroom, exposed communication, recompute,"
        " pipeline stages",
    )


class SweepCounts(BaseModel):
    enumerated: int
    invalid: int = Field(description="Broke a framework rule (divisibility, node size ...)")
    evaluated: int
    out_of_memory: int
    tight: int = Field(
        0,
        description="Fit by the planner's figure, but the likely range of their peak (the"
        " planner's error on published measurements of the stack near them) crosses the GPU's"
        " memory: the single plan's verdict 'tight'",
    )
    under_headroom: int = Field(description="Fit, but leave less free memory than min_headroom")
    past_deadline: int = Field(description="Fit with headroom, but miss the deadline")
    over_budget: int = Field(description="Fit with headroom and meet the deadline, over budget")
    feasible: int = Field(
        description="Fit with the headroom, and meet the deadline and budget when given;"
        " evaluated = out_of_memory + tight + under_headroom + past_deadline + over_budget +"
        " feasible"
    )


class TrainingSweepOut(BaseModel):
    model: str
    objective: Literal["cost", "time", "energy"]
    counts: SweepCounts
    min_headroom: float = Field(description="The headroom a feasible layout leaves (a share)")
    stacks: list[str] = Field(
        description="The software stack profiles compared (one unless the request lists"
        " several); with several, the recommendations add the best layout of each stack the"
        " first ones leave out"
    )
    rows_kind: Literal["feasible", "evaluated"]
    total_rows: int
    page: int
    page_size: int
    rows: list[TrainingSweepRow]
    recommendations: list[Recommendation]
    pareto_cost: list[TrainingSweepRow] = Field(
        description="Feasible, priced layouts no other beats on both tokens/s and USD per token"
    )
    pareto_memory: list[TrainingSweepRow] = Field(
        description="Feasible layouts no other beats on both tokens/s and memory headroom"
    )
    exact: bool = Field(
        description="Whether the model's architecture is read exactly; false for a model read"
        " approximately, whose notes say how"
    )
    notes: list[str]


class ServingSweepLayout(Request):
    tp: Sizes | None = Field(
        None,
        description="Default 1, 2, 4, 8; 1-16 for a model too large for one node's plain TP"
        " (replicas up to 32 GPUs)",
        json_schema_extra=form("TP", "Space", "1,2,4,8"),
    )
    pp: Sizes | None = Field(
        None, description="Default 1, 2, 4", json_schema_extra=form("PP", "Space", "1,2,4")
    )
    dp: Sizes | None = Field(
        None,
        description="Attention data-parallel degrees (MoE models): dp groups of tp GPUs, each"
        " with its own sequences and KV cache, the experts over ep of the dp x tp GPUs;"
        " default 1; 1-16 at pp 1 for a mixture-of-experts model too large for one node's"
        " plain TP",
        json_schema_extra=form("Attention DP", "Space", "1"),
    )
    ep: Sizes | None = Field(
        None,
        description="Expert-parallel degrees (MoE models) over the TP group, or the dp x tp"
        " GPUs with attention data parallel; default: ep = dp x tp for a mixture-of-experts"
        " model, 1 for a dense one",
        json_schema_extra=form("EP", "Space", "= dp x tp (MoE)"),
    )


class ServingSweepRequest(EngineMemoryFields, NetworkFields, SweepPowerFields, PriceMixFields):
    model: ModelRef = Field(json_schema_extra=MODEL_FORM)
    accelerator: NameList | None = Field(
        None, description="Default: ten data-centre GPUs", json_schema_extra=ACCELERATORS
    )
    layout: ServingSweepLayout = Field(default_factory=lambda: ServingSweepLayout())
    precision: NameList | None = Field(
        None,
        description="Default: bf16 and fp8-serving",
        json_schema_extra=form("Precisions", "Space", choices="presets"),
    )
    input_len: TokenCount = Field(1024, description="Prompt tokens", json_schema_extra=PROMPT)
    output_len: OutputLen = Field(256, description="Output tokens", json_schema_extra=OUTPUT)
    dataset: Dataset | None = Field(
        None,
        description="Request lengths drawn from a dataset instead of fixed input_len /"
        " output_len (as on the inference estimate; not with disaggregated)",
        json_schema_extra=form("Length distribution", "Workload", "fixed lengths"),
    )
    ttft_target_s: Annotated[float, Field(gt=0, le=1e4)] | None = Field(
        None, json_schema_extra=form("TTFT target (s)", "Workload", "none")
    )
    tpot_target_s: Annotated[float, Field(gt=0, le=1e4)] | None = Field(
        None, json_schema_extra=form("TPOT target (s)", "Workload", "none")
    )
    output_tokens_per_s: Annotated[float, Field(gt=0, le=1e12)] | None = Field(
        None,
        description="Fleet traffic to carry: sizes the replica count",
        json_schema_extra=form("Fleet output tokens/s", "Workload", "one replica"),
    )
    request_rate: Annotated[float, Field(ge=1e-6, le=1e7)] | None = Field(
        None,
        description="Fleet requests/s (Poisson arrivals): the targets become TTFT p99 and TPOT"
        " under that load; each layout serves the highest rate per replica that meets them and"
        " the fleet as many replicas as the rate needs",
        json_schema_extra=form("Fleet requests/s", "Workload", "none"),
    )
    engine: Literal["vllm", "vllm-small-gpu", "sglang", "trtllm"] = Field(
        "vllm",
        description="The scheduler the load model follows (with request_rate)",
        json_schema_extra=form("Engine", "Workload"),
    )
    rate_headroom: Annotated[float, Field(ge=0, le=10)] | None = Field(
        None,
        description="With request_rate: the share by which each replica's rate within the"
        " targets is lowered before the fleet is counted (0.23 plans each replica at its rate"
        " / 1.23). Default: the planner's median optimism on the rate within targets on"
        " published runs (validation/report.md, slo_rate: the engine's where it has 10 runs or"
        " more, else all); 0 keeps none",
        json_schema_extra=form("Rate headroom (fraction)", "Workload", "measured optimism"),
    )
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None,
        description="The engine's token budget per step; default the engine's",
        json_schema_extra=form("Token budget per step", "Workload", "engine default"),
    )
    max_num_seqs: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None,
        description="The engine's sequence cap per step; default the engine's",
        json_schema_extra=form("Sequence cap", "Workload", "engine default"),
    )
    disaggregated: bool = Field(
        False,
        description="With request_rate: also plan disaggregated fleets (a prefill pool and a"
        " decode pool, the KV cache sent between them) for the same rate and targets, and"
        " compare them with the aggregated ones, with each family's Pareto front of output"
        " tokens/s per GPU against tokens/s per user",
        json_schema_extra=form("Compare disaggregated (xPyD)", "Workload"),
    )
    kv_overlap: Overlap = Field(
        "none",
        description="Disaggregated: the KV transfer starts when the prefill ends (none: vLLM's"
        " NixlConnector) or layer by layer as it runs (layerwise: Mooncake)",
        json_schema_extra=form("KV transfer overlap", "Workload"),
    )
    mixed_pools: bool = Field(
        False,
        description="Disaggregated: also pair a prefill pool on one of the sweep's accelerators"
        " with a decode pool on another, in the same precision (the KV cache over the scale-out"
        " network, each pool's GPUs at its own price)",
        json_schema_extra=form("Mix accelerators across pools", "Workload"),
    )
    price_usd_per_gpu_hour: Price | None = Field(None, json_schema_extra=PRICE_FORM)
    prices: dict[Names, Price] | None = None
    objective: Literal["cost", "energy"] = Field(
        "cost",
        description="Orders the served layouts: cost (USD per 1M output tokens) or energy"
        " (joules per output token: the most output tokens/s per provisioned MW)",
        json_schema_extra=form("Rank by", "Workload"),
    )
    rows: Literal["ok", "all"] = "ok"
    page: Page = Field(1, json_schema_extra=PAGE_FORM)
    page_size: PageSize = 50


class ServingSweepRow(BaseModel):
    accelerator: str
    precision: str
    tp: int
    pp: int
    dp: int = Field(1, description="Attention data-parallel groups (MoE)")
    ep: int
    num_gpus: int
    ok: bool
    field: str | None = Field(None, description="For refused layouts: what refused them")
    reason: str | None = None
    concurrency: int | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens_per_s: float | None = None
    output_tokens_per_s_per_gpu: float | None = None
    usd_per_gpu_hour: float | None = None
    usd_per_1m_output_tokens: float | None = None
    usd_per_1m_input_tokens: float | None = None
    usd_per_1m_output_tokens_decode: float | None = Field(
        None, description="Decode's share of the time over the output tokens (the output price)"
    )
    usd_per_1m_blended_tokens: float | None = Field(None, description="At input_per_output")
    j_per_output_token: float | None = Field(None, description="At the facility (null: no power)")
    kwh_per_1m_output_tokens: float | None = None
    output_tokens_per_s_per_mw: float | None = Field(
        None, description="The fleet's output tokens/s per provisioned megawatt"
    )
    replicas: int | None = None
    fleet_gpus: int | None = None
    ttft_p99_s: float | None = Field(
        None,
        description="Under the row's load: the request rate's, or its concurrency kept in flight",
    )
    rate_per_replica: float | None = Field(
        None,
        description="With request_rate: the most requests/s a replica takes within the targets",
    )
    planned_rate_per_replica: float | None = Field(
        None,
        description="With request_rate: rate_per_replica over 1 + the rate headroom, what the"
        " replica count is planned on",
    )
    headroom: float | None = Field(
        None, description="With request_rate: the fleet's rate capacity over the rate, minus 1"
    )


class AggregatedFleet(ServingSweepRow):
    """The cheapest aggregated fleet (a serving sweep row) with its $/hour and tokens/s per
    user."""

    usd_per_hour: float | None = Field(description="The fleet's GPUs at their price")
    output_tokens_per_s_per_user: float = Field(description="1 / TPOT")


class DisaggregatedFleet(BaseModel):
    """A disaggregated fleet: x prefill replicas and y decode replicas in one precision, on one
    accelerator or (mixed pools) two; the TTFT p99 parts sum to ``ttft_p99_s``."""

    model_config = ConfigDict(extra="forbid")

    accelerator: str = Field(description="The prefill pool's accelerator")
    decode_accelerator: str = Field(
        description="The decode pool's: the prefill pool's unless mixed_pools paired another"
    )
    precision: str
    prefill_tp: int
    prefill_pp: int
    prefill_replicas: int = Field(description="x")
    prefill_rate_per_replica: float = Field(description="requests/s each prefill replica takes")
    prefill_utilization: float = Field(
        description="The share of its time a prefill replica is busy"
    )
    decode_tp: int
    decode_pp: int
    decode_dp: int = Field(1, description="Attention data-parallel groups of a decode replica")
    decode_replicas: int = Field(description="y")
    decode_rate_per_replica: float = Field(description="requests/s each decode replica finishes")
    decoding_per_replica: float = Field(description="Mean sequences a decode replica decodes")
    decode_slots: int = Field(description="The most a decode replica decodes at once")
    fleet_gpus: int
    ttft_p99_s: float
    ttft_prefill_p99_s: float = Field(description="The prefill replica's queue and prefill")
    ttft_kv_wait_p99_s: float = Field(description="The sending and receiving links' waits")
    ttft_kv_transfer_s: float = Field(description="The KV transfer not hidden by the prefill")
    ttft_first_token_s: float = Field(
        description="The decode replica's first step, and half a step's wait"
    )
    tpot_s: float
    kv_link: Link
    kv_bytes_per_request: float = Field(description="A prompt's whole KV cache and state")
    kv_transfer_s: float = Field(description="A request's transfer, before any overlap")
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float = Field(description="1 / TPOT")
    usd_per_gpu_hour: float | None = Field(
        description="The fleet's $/hour over its GPUs (the price, with one accelerator)"
    )
    usd_per_hour: float | None = Field(description="Each pool's GPUs at its accelerator's price")
    usd_per_1m_output_tokens: float | None


class AggregatedPoint(BaseModel):
    """A point of the aggregated front: one layout at one rate per replica."""

    model_config = ConfigDict(extra="forbid")

    accelerator: str
    precision: str
    tp: int
    pp: int
    rate_per_replica: float
    ttft_p99_s: float
    tpot_s: float
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float


class DisaggregatedPoint(BaseModel):
    """A point of the disaggregated front: one layout pair at one decode batch, in fluid
    replica counts."""

    model_config = ConfigDict(extra="forbid")

    accelerator: str = Field(description="The prefill pool's accelerator")
    decode_accelerator: str = Field(description="The decode pool's")
    precision: str
    prefill_tp: int
    prefill_pp: int
    decode_tp: int
    decode_pp: int
    decode_dp: int = 1
    decoding_per_replica: float
    prefill_per_decode_replica: float = Field(description="The x:y ratio, as x / y")
    tpot_s: float
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float


class DisaggregatedOut(BaseModel):
    """Aggregated against disaggregated fleets for the same request rate and targets."""

    request_rate: float
    kv_overlap: Overlap
    aggregated: AggregatedFleet | None = Field(description="The cheapest aggregated fleet")
    disaggregated: DisaggregatedFleet | None = Field(description="The cheapest disaggregated fleet")
    winner: Literal["aggregated", "disaggregated", "tie"] | None = Field(
        description="The cheaper per 1M output tokens (fleet GPUs where unpriced)"
    )
    cost_ratio: float | None = Field(
        description="Disaggregated over aggregated, per 1M output tokens (else fleet GPUs)"
    )
    plans: list[DisaggregatedFleet] = Field(
        description="The cheapest disaggregated fleets, one per layout pair"
    )
    counts: dict[str, int] = Field(
        description="Layout pairs evaluated, ok and refused by target (refused_ttft, refused_tpot)"
    )
    pareto_aggregated: list[AggregatedPoint]
    pareto_disaggregated: list[DisaggregatedPoint]
    no_plan_aggregated: str | None = Field(description="Why no aggregated fleet meets the targets")
    no_plan_disaggregated: str | None = Field(
        description="Why no disaggregated fleet meets the targets"
    )
    notes: list[str]


class FleetPoint(BaseModel):
    request_rate: float
    replicas: int
    fleet_gpus: int


class FleetCurve(BaseModel):
    """One served layout's replica count against the fleet's request rate: each replica at
    ``planned_rate_per_replica`` (its rate within the targets over 1 + the rate headroom)."""

    accelerator: str
    precision: str
    tp: int
    pp: int
    dp: int
    ep: int
    num_gpus: int
    rate_per_replica: float
    planned_rate_per_replica: float
    points: list[FleetPoint]


class ServingSweepOut(BaseModel):
    model: str
    counts: dict[str, int]
    rows_kind: Literal["ok", "all"]
    total_rows: int
    page: int
    page_size: int
    rows: list[ServingSweepRow]
    pareto_cost: list[ServingSweepRow] = Field(
        description="Layouts no other beats on both output tokens/s per GPU and USD per token"
    )
    exact: bool = Field(
        description="Whether the model's architecture is read exactly; false for a model read"
        " approximately, whose notes say how"
    )
    notes: list[str]
    disaggregated: DisaggregatedOut | None = Field(
        None, description="With disaggregated: the comparison with disaggregated fleets"
    )
    rate_headroom: float | None = Field(
        None, description="With request_rate: the headroom the replica counts were taken with"
    )
    widen: str | None = Field(
        None, description="With no layout served: which axis to widen, from what refused most"
    )
    rate_headroom_source: str | None = Field(
        None, description="Where it comes from: the request's, or the measured optimism"
    )
    fleet_curves: list[FleetCurve] = Field(
        default_factory=list,
        description="With request_rate: replicas against the fleet's request rate (0 to twice"
        " the rate asked) for the cheapest served layouts, at most 3",
    )
