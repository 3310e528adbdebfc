"""Training estimate: the request (a plan) and the response (memory, time, throughput, cost)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.schemas.catalog import Params
from app.schemas.common import (
    AccuracyOut,
    AttentionKernel,
    ClusterFields,
    ClusterOut,
    CudaGraphs,
    GpuCount,
    LayoutSize,
    ModelRef,
    MoEDispatcher,
    PrecisionRef,
    Price,
    Request,
    Stack,
    StackChoice,
    TokenCount,
    terms_model,
)
from app.schemas.energy import EnergyFields, EnergyOut, TcoOut
from app.schemas.fields import form
from app.schemas.run import EffectiveOut, JobOut, ReliabilityFields
from estimator.terms import STEP, TRAINING_MEMORY

__all__ = [
    "CommPlanOut",
    "FineTuneFields",
    "FineTuneOut",
    "LayerTableOut",
    "MicroBatch",
    "Optimizer",
    "RankLayoutOut",
    "Recompute",
    "StepBreakdown",
    "TimelineOut",
    "TrainingEstimateOut",
    "TrainingLayout",
    "TrainingMemoryOut",
    "TrainingRequest",
]

Recompute = Literal["none", "selective", "op", "full"]
Optimizer = Literal["adamw", "adam8bit", "sgd", "adafactor"]
ZeroStage = Literal[0, 1, 2, 3]
PipelineSplitRule = Literal[
    "auto", "even", "embedding_loss", "first_last", "layout", "uniform", "parameters"
]
MicroBatch = Annotated[int, Field(ge=1, le=65536)]
GlobalBatch = Annotated[int, Field(ge=1, le=2**24)]
Tokens = Annotated[float, Field(gt=0, le=1e17, description="Tokens to train on")]
# Page and CLI hints shared by the training and serving requests (``schemas.fields``).
MODEL_FORM = form("Model", choices="models")
ACCELERATOR_FORM = form("Accelerator", choices="accelerators")
LAYOUT_TP = form("TP", "Layout", "1")
LAYOUT_PP = form("PP", "Layout", "1")
LAYOUT_CP = form("CP", "Layout", "1")
LAYOUT_EP = form("EP", "Layout", "1")


class TrainingLayout(Request):
    """A Megatron-style layout: ``tp x pp x dp x cp`` GPUs, experts over ``ep x etp``."""

    tp: LayoutSize = Field(1, description="Tensor parallel", json_schema_extra=LAYOUT_TP)
    pp: LayoutSize = Field(1, description="Pipeline stages", json_schema_extra=LAYOUT_PP)
    dp: GpuCount | None = Field(
        None,
        description="Default: num_gpus / (tp pp cp), or 1 without num_gpus",
        json_schema_extra=form("DP", "Layout", "from GPUs"),
    )
    cp: LayoutSize = Field(1, description="Context parallel", json_schema_extra=LAYOUT_CP)
    ep: LayoutSize = Field(1, description="Expert parallel", json_schema_extra=LAYOUT_EP)
    etp: LayoutSize | None = Field(None, description="Expert TP; default tp")
    vp: LayoutSize = Field(
        1,
        description="Virtual pipeline stages (interleaved 1F1B)",
        json_schema_extra=form("Virtual stages", "Layout", "1"),
    )
    sequence_parallel: bool | None = Field(None, description="Default: on when tp > 1")
    zero_stage: ZeroStage = Field(
        1,
        description="ZeRO stage (1: optimizer states, 2: + gradients, 3: + weights = FSDP)",
        json_schema_extra=form("ZeRO stage", "Layout", flag="--zero"),
    )
    distributed_optimizer: bool = Field(False, description="Megatron's; shards like ZeRO-1")
    pipeline_split: PipelineSplitRule = Field(
        "auto",
        description="How layers spread over pipeline stages: auto (the first Megatron-Core rule"
        " that fits: even, the embedding and loss counted as layers, balanced first/last stage"
        " layers), even, embedding_loss, first_last, layout (pipeline_layout), uniform or"
        " parameters (DeepSpeed's partition_method; vp=1)",
        json_schema_extra=form("Pipeline split", "Layout", flag="--pipeline-split"),
    )
    first_stage_layers: Annotated[int, Field(ge=0, le=16384)] | None = Field(
        None,
        description="Layers on the first pipeline rank (Megatron-Core"
        " --decoder-first-pipeline-num-layers; pipeline_split=first_last)",
        json_schema_extra=form("First stage layers", "Layout", "first_last only"),
    )
    last_stage_layers: Annotated[int, Field(ge=0, le=16384)] | None = Field(
        None,
        description="Layers on the last pipeline rank (--decoder-last-pipeline-num-layers)",
        json_schema_extra=form("Last stage layers", "Layout", "first_last only"),
    )
    embedding_in_split: bool = Field(
        True,
        description="pipeline_split=embedding_loss: count the embedding as a layer"
        " (--account-for-embedding-in-pipeline-split)",
    )
    loss_in_split: bool = Field(
        True,
        description="pipeline_split=embedding_loss: count the loss as a layer"
        " (--account-for-loss-in-pipeline-split)",
    )
    pipeline_layout: str | None = Field(
        None,
        max_length=10_000,
        description="Megatron-Core --pipeline-model-parallel-layout, e.g. 'Et|(tt|)*30,L'"
        " (E embedding, t decoder layer, L loss, | between virtual stages); sets the split",
        json_schema_extra=form("Pipeline layout", "Layout", "Et|(tt|)*30,L", kind="text"),
    )


FineTuneMethod = Literal["full", "lora", "qlora"]
TargetName = Annotated[str, Field(min_length=1, max_length=200)]
LoraTargets = (
    Annotated[str, Field(min_length=1, max_length=4000)]
    | Annotated[list[TargetName], Field(min_length=1, max_length=64)]
)
FINETUNE_GROUP = "Fine-tuning"
# Megatron-Core's --recompute-modules: a list, or one string of comma-separated names (the
# form's and the CLI's); the names are checked by the estimator (activations.RECOMPUTE_MODULES).
RecomputeModules = (
    Annotated[str, Field(min_length=1, max_length=400)]
    | Annotated[list[Annotated[str, Field(min_length=1, max_length=40)]], Field(max_length=16)]
)
MtpLayers = Annotated[int, Field(ge=0, le=8)]
MTP_LAYERS_HELP = (
    "Multi-token-prediction depths trained with the model (Megatron-Core's --mtp-num-layers;"
    " DeepSeek-V3's recipes train 1): each is one more of the model's layers (its MTP module's,"
    " where the config names one), a 2h x h projection and a second pass through the head and"
    " loss, on the last pipeline stage. 0: none"
)
MTP_REPEATED_HELP = (
    "One multi-token-prediction module's weights run for every depth (Megatron-Core's"
    " mtp_use_repeated_layer, as Nemotron 3 Super's recipes train 2 depths): its parameters,"
    " gradients and optimizer states held once, its activations per depth"
)
RECOMPUTE_MODULES_HELP = (
    "Megatron-Core's selective recompute modules (--recompute-modules; recompute 'selective'"
    " only): core_attn (the default), layernorm (the norms that are modules of their own: the"
    " MoE layers' pre-MLP norm, MLA's input norm), moe_act (the experts' activation), mlp (the"
    " dense MLP), moe (the whole MoE layer, its all-to-alls too), shared_experts, mla_up_proj"
    " (MLA's up-projections and rotary); a list or comma-separated names"
)


class FineTuneFields(Request):
    """What a plan trains: every parameter, or LoRA / QLoRA adapters over a frozen base
    (``estimator.finetune``). The LoRA fields are refused with ``finetune=full``."""

    finetune: FineTuneMethod = Field(
        "full",
        description="full (every parameter), lora (rank-r adapters over frozen weights, Hu et"
        " al. 2021) or qlora (LoRA over NF4 base weights, Dettmers et al. 2023)",
        json_schema_extra=form("Fine-tuning", FINETUNE_GROUP),
    )
    lora_rank: Annotated[int, Field(ge=1, le=65536)] | None = Field(
        None,
        description="LoRA rank r (default 16); lora and qlora only",
        json_schema_extra=form("LoRA rank", FINETUNE_GROUP, "16"),
    )
    lora_targets: LoraTargets | None = Field(
        None,
        description="Modules that get adapters: names matched as PEFT matches target_modules"
        " (a module named so or ending in .name; a list, or one string of comma-separated"
        " names), or all-linear (every decoder linear but the output head). Default: PEFT's"
        " for the model type (q_proj,v_proj for Llama-style models); lora and qlora only",
        json_schema_extra=form("LoRA targets", FINETUNE_GROUP, "q_proj,v_proj", kind="text"),
    )
    qlora_double_quant: bool | None = Field(
        None,
        description="Quantize QLoRA's NF4 block constants again (default true: 0.5159 bytes"
        " per weight, 0.5625 without); qlora only",
        json_schema_extra=form("Double quantization", FINETUNE_GROUP),
    )
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] | None = Field(
        None,
        description="Each adapter's input dropout (PEFT's lora_dropout, default 0): its"
        " dropped-out input and mask are kept for the backward; lora and qlora only",
        json_schema_extra=form("LoRA dropout", FINETUNE_GROUP, "0"),
    )


OFFLOAD_GROUP = "CPU offload"
HostFigure = Annotated[float, Field(gt=0, le=1e6)]


class OffloadFields(Request):
    """What lives in host memory instead of the GPU's (``estimator.offload``), and the host's
    figures (default: the accelerator's reference system in the catalog)."""

    offload_optimizer: bool = Field(
        False,
        description="Master weights and optimizer states on the host, the optimizer step on the"
        " CPU (ZeRO-Offload, FSDP CPUOffload, Megatron --optimizer-cpu-offload)",
        json_schema_extra=form("Offload optimizer", OFFLOAD_GROUP),
    )
    offload_params: bool = Field(
        False,
        description="The GPU's weight shard on the host, fetched before each use (ZeRO-3"
        " offload_param, FSDP offload_params); needs layout.zero_stage=3",
        json_schema_extra=form("Offload parameters", OFFLOAD_GROUP),
    )
    offload_activations: bool = Field(
        False,
        description="Saved activations to the host during the forward and back for the"
        " backward; the GPU keeps two layers' worth",
        json_schema_extra=form("Offload activations", OFFLOAD_GROUP),
    )
    offload_activation_layers: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="With offload_activations: the first N layers' activations only, as"
        " Megatron-Core's --cpu-offloading-num-layers (fewer than the model's layers; no"
        " pipeline parallelism, no recomputation); default every layer's",
        json_schema_extra=form("Offload activations of the first N layers", OFFLOAD_GROUP, "all"),
    )
    host_link_gb_per_s: HostFigure | None = Field(
        None,
        description="GPU-host link, GB/s per direction (PCIe 5.0 x16: 63; NVLink-C2C: 450)",
        json_schema_extra=form("Host link GB/s", OFFLOAD_GROUP, "the catalog's"),
    )
    host_memory_gb_per_gpu: HostFigure | None = Field(
        None,
        description="Host memory per GPU, GB (a DGX H100's 2 TB over 8 GPUs: 256)",
        json_schema_extra=form("Host memory GB per GPU", OFFLOAD_GROUP, "the catalog's"),
    )
    host_memory_gb_per_s: HostFigure | None = Field(
        None,
        description="Host memory bandwidth per GPU, GB/s (the CPU optimizer step's rate)",
        json_schema_extra=form("Host memory GB/s per GPU", OFFLOAD_GROUP, "the catalog's"),
    )


MOE_GROUP = "MoE routing"


class MoEFields(Request):
    """How evenly a mixture-of-experts router spreads tokens (MoE models only)."""

    moe_imbalance: Annotated[float, Field(ge=1, le=64)] = Field(
        1.0,
        description="The busiest expert-parallel rank's routed tokens over the mean (1:"
        " balanced); its experts' GEMMs and saved activations scale with it",
        json_schema_extra=form("Expert load imbalance", MOE_GROUP, "1"),
    )
    moe_capacity_factor: Annotated[float, Field(gt=0, le=64)] | None = Field(
        None,
        description="Per-expert capacity over the balanced share (Megatron-Core"
        " --moe-expert-capacity-factor); tokens past it are dropped. Default: dropless",
        json_schema_extra=form("Expert capacity factor", MOE_GROUP, "dropless"),
    )


class TrainingRequest(
    FineTuneFields, OffloadFields, MoEFields, ClusterFields, EnergyFields, ReliabilityFields
):
    """A training plan. Only ``model`` is required; every default is listed here."""

    model: ModelRef = Field(json_schema_extra=MODEL_FORM)
    accelerator: str = Field("h100-sxm-80gb", max_length=128, json_schema_extra=ACCELERATOR_FORM)
    num_gpus: GpuCount | None = Field(
        None,
        description="Must equal tp pp dp cp when dp is given; else sets dp",
        json_schema_extra=form("GPUs", placeholder="tp·pp·dp·cp", flag="--gpus"),
    )
    layout: TrainingLayout = Field(default_factory=lambda: TrainingLayout())
    seq_len: TokenCount = Field(
        4096,
        description="Tokens a sequence",
        json_schema_extra=form("Sequence length", "Batch", "4096"),
    )
    micro_batch_size: MicroBatch = Field(
        1,
        description="Sequences a micro-batch",
        json_schema_extra=form("Micro-batch", "Batch", "1"),
    )
    global_batch_size: GlobalBatch | None = Field(
        None,
        description="Default micro_batch x dp",
        json_schema_extra=form("Global batch", "Batch", "micro × dp"),
    )
    recompute: Recompute = Field(
        "none",
        description="Activation recomputation: none, selective (Megatron: the attention core),"
        " op (TorchTitan's per-op policy: saves every other projection output and attention;"
        " dense Llama-style models) or full",
        json_schema_extra=form("Recompute", "Batch"),
    )
    recompute_modules: RecomputeModules | None = Field(
        None,
        description=RECOMPUTE_MODULES_HELP,
        json_schema_extra=form("Recompute modules", "Batch", "core_attn", kind="text"),
    )
    mtp_layers: MtpLayers = Field(
        0,
        description=MTP_LAYERS_HELP,
        json_schema_extra=form("Multi-token prediction depths", "Batch", "0"),
    )
    mtp_repeated: bool = Field(
        False,
        description=MTP_REPEATED_HELP,
        json_schema_extra=form("One MTP module repeated", "Batch"),
    )
    precision: PrecisionRef = Field(
        "bf16",
        description="A preset or data types by role",
        json_schema_extra=form("Precision", "Batch", choices="presets"),
    )
    optimizer: Optimizer = "adamw"
    flash_attention: bool = True
    stack: StackChoice = Field(
        "auto",
        description="Software stack profile (its attention kernel, which communication it"
        " overlaps, its fitted compute factor): auto (the stack that runs the layout: data"
        " parallelism alone with ZeRO-3 on fsdp2, with ZeRO-2 on deepspeed, every other layout"
        " on megatron-core), megatron-core (Megatron-Core / NeMo), fsdp2 (PyTorch FSDP2 /"
        " TorchTitan), deepspeed, llm-foundry (Composer); a stack that cannot run the layout"
        " is refused",
        json_schema_extra=form("Software stack", "Batch"),
    )
    attention_kernel: AttentionKernel | None = Field(
        None,
        description="fused (cuDNN / FlashAttention-3 class) or flash2; default: the stack's",
    )
    activation_convention: Literal["megatron", "hf", "compiled"] = Field(
        "megatron",
        description="Whose saved tensors are counted: megatron (Megatron-Core's fused kernels),"
        " hf (eager PyTorch modules: Hugging Face, torchtune, TorchTitan), compiled (the same"
        " under torch.compile); hf and compiled for Llama-style families",
        json_schema_extra=form("Saved tensors", "Batch"),
    )
    chunked_loss: bool = Field(
        False,
        description="Output head and cross-entropy in chunks of tokens (torchtune's"
        " CEWithChunkedOutputLoss, LitGPT): the eager loss's backward buffers shrink to a"
        " chunk's (hf and compiled conventions)",
        json_schema_extra=form("Chunked loss", "Batch"),
    )
    gradients_per_step: bool | None = Field(
        None,
        description="Gradients freed between steps (PyTorch's zero_grad(set_to_none=True)):"
        " the backward allocates them as it frees activations; default: the stack's (fsdp2"
        " yes; megatron-core, deepspeed and llm-foundry keep them)",
        json_schema_extra=form("Gradients freed each step", "Batch", "the stack's"),
    )
    optimizer_in_backward: bool = Field(
        False,
        description="Each parameter stepped from its gradient hook and its gradient freed"
        " (torchtune's optimizer_in_bwd): full training, one micro-batch a step, pp = 1",
        json_schema_extra=form("Optimizer in backward", "Batch"),
    )
    no_sync_accumulation: bool = Field(
        False,
        description="Gradient accumulation without the reduction until the last micro-batch"
        " (FSDP1's no_sync, FSDP2's set_requires_gradient_sync(False): Lightning Fabric's"
        " no_backward_sync as LitGPT runs it, Accelerate's accumulate with FSDP): with ZeRO >= 2"
        " and several micro-batches a step each rank holds its stage's gradients unsharded",
        json_schema_extra=form("Accumulate without sync (FSDP no_sync)", "Batch"),
    )
    compiled_loss: bool | None = Field(
        None,
        description="Cross-entropy under torch.compile (a fused loss keeps model-dtype logits);"
        " default: as the layers (compiled convention)",
        json_schema_extra=form("Compiled loss", "Batch", "as the layers"),
    )
    tp_comm_overlap: bool | None = Field(None, description="Default: the stack's")
    ep_comm_overlap: bool | None = Field(
        None,
        description="Megatron-Core's expert all-to-all overlap (--overlap-moe-expert-parallel-comm"
        " --delay-wgrad-compute): one micro-batch's all-to-all behind another's compute; needs"
        " ep > 1, vp > 1 with a pipeline, no full recompute. Default: the stack's (off)",
        json_schema_extra=form("Expert all-to-all overlap", MOE_GROUP, "the stack's"),
    )
    moe_dispatcher: MoEDispatcher | None = Field(
        None,
        description="Megatron-Core's MoE token dispatcher: flex (DeepEP / HybridEP: a token sent"
        " once to each other NVLink domain holding one of its experts, permuted once each way)"
        " or alltoall (NCCL all-to-all: every routed copy sent; the received chunks also sorted"
        " by local expert each way). Default: the stack's (flex for megatron-core)",
        json_schema_extra=form("MoE token dispatcher", MOE_GROUP, "the stack's"),
    )
    cuda_graphs: CudaGraphs | None = Field(
        None,
        description="What CUDA graphs capture: none (every kernel launched from Python: each"
        " MoE layer then exposes its host time, kernel launches and the dispatcher's"
        " device-to-host syncs, 1.47 ms a micro-batch as fitted on Megatron-Bridge's runs"
        " without graphs), partial (attention and the MoE router, as Megatron-Bridge's recipes"
        " capture them) or full (the whole iteration): with either the host time counts as"
        " hidden. Default: the stack's (partial for megatron-core, none for the PyTorch stacks)",
        json_schema_extra=form("CUDA graphs", MOE_GROUP, "the stack's"),
    )
    tokens: Tokens | None = Field(
        None, json_schema_extra=form("Tokens to train", "Cost", "e.g. 2e12")
    )
    price_usd_per_gpu_hour: Price | None = Field(
        None,
        description="Default: the catalog's dated on-demand price, where it has one",
        json_schema_extra=form("Price $/GPU-hour", "Cost", "catalog", flag="--price"),
    )
    measured_step_s: Annotated[float, Field(ge=1e-6, le=1e6)] | None = Field(
        None, description="Your measured step time: calibrates the plan"
    )
    measured_mfu: Annotated[float, Field(ge=1e-6, le=1)] | None = None

    model_config = Request.model_config | {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "llama-3-70b",
                    "accelerator": "h100-sxm-80gb",
                    "num_gpus": 64,
                    "layout": {"tp": 8, "pp": 2, "sequence_parallel": True, "zero_stage": 1},
                    "seq_len": 4096,
                    "global_batch_size": 1024,
                    "recompute": "selective",
                    "tokens": 2e12,
                }
            ]
        }
    }


# The terms come from the core's registry (``estimator.terms``), in its order.
_MemoryTerms = terms_model("TrainingMemoryTerms", TRAINING_MEMORY, memory=True)
_StepTerms = terms_model("StepTerms", STEP)


class TrainingMemoryOut(_MemoryTerms):  # type: ignore[misc, valid-type]
    """Per-GPU memory on the most-loaded GPU, term by term (bytes)."""

    fit: Literal["fits", "tight", "does_not_fit"] = Field(
        description="fits: even the top of the likely peak (the planner's error on similar"
        " published peak-memory measurements of the plan's stack, accuracy.metrics peak_memory)"
        " is within capacity; does_not_fit: even its bottom is over; tight: the likely peak"
        " straddles capacity. Without such measurements the named overheads, which are"
        " estimates, make the band: tight where the tensors alone fit but not with them"
    )
    fit_note: str = Field(description="The fit verdict in a sentence, with the likely peak")
    stage: int = Field(description="Pipeline stage of the most-loaded GPU")
    params_on_gpu: float
    trainable_params_on_gpu: float = Field(
        description="Parameters trained on that GPU (LoRA: its adapters; full: params_on_gpu)"
    )
    in_flight_microbatches: int


class StepBreakdown(_StepTerms):  # type: ignore[misc, valid-type]
    """Sums to ``step_s``."""


class TrainingTimeOut(BaseModel):
    step_s: float
    breakdown: StepBreakdown
    microbatches: int
    forward_s: float = Field(description="One micro-batch on the slowest stage")
    backward_s: float
    recompute_s: float
    stage: int = Field(description="Slowest pipeline stage")


class TrainingThroughputOut(BaseModel):
    tokens_per_step: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    model_tflops_per_gpu: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    peak_format: str = Field(description="The tensor-core rate MFU divides by")


class TrainingCostOut(BaseModel):
    price_usd_per_gpu_hour: float | None
    price_source: str | None
    usd_per_1m_tokens: float | None
    tokens: float | None
    time_to_train_s: float | None
    gpu_hours: float | None
    usd: float | None


class Calibrated(BaseModel):
    step_s: float
    tokens_per_s: float
    mfu: float
    scale: float = Field(description="Measured step time over the predicted one")


class ResolvedTrainingLayout(BaseModel):
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    etp: int
    vp: int
    sequence_parallel: bool
    zero_stage: int
    distributed_optimizer: bool
    pipeline_split: str = Field(
        description="The split the layers took: even, or the framework rule that placed them"
    )
    stage_layers: list[int] = Field(
        description="Decoder layers of each virtual pipeline stage, in virtual-stage order"
        " (stage j*pp + r is chunk j of rank r)"
    )


class StackOut(BaseModel):
    """The software stack profile the answer assumed (estimator.timing.stacks)."""

    name: Stack
    label: str
    attention_kernel: AttentionKernel
    tp_comm_overlap: bool
    ep_comm_overlap: bool
    moe_dispatcher: MoEDispatcher
    cuda_graphs: CudaGraphs
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    compute_scale: float = Field(description="Compute time factor; 1.0: the kernel model as is")
    fitted_on: str
    chosen: str = Field(description="Why this stack timed the plan: auto's pick, or as asked")


class FineTuneOut(BaseModel):
    method: str = Field(description="full, lora or qlora")
    lora_rank: int | None
    lora_targets: list[str] = Field(
        description="The modules that got adapters, as named in"
        " the model (empty for full fine-tuning)"
    )
    qlora_double_quant: bool | None
    trainable_params: int = Field(description="Parameters trained (LoRA: the adapters)")
    total_params: int = Field(description="Every parameter, adapters included (PEFT's all params)")


class OffloadOut(BaseModel):
    """What the plan keeps in host memory (bytes for the most-loaded GPU; not in its total)."""

    optimizer: bool
    params: bool
    activations: bool
    activation_layers: int | None = Field(
        description="The first N layers' activations offloaded (null: every layer's)"
    )
    host_optimizer_bytes: float
    host_weights_bytes: float
    host_activations_bytes: float
    host_bytes: float
    host_capacity_bytes: float = Field(description="This GPU's share of host memory; 0: none")


class FitSuggestionOut(BaseModel):
    """A layout near a plan that does not fit which does: the inputs it changes (as the page's
    query names them) and what it gives."""

    changes: dict[str, int | str] = Field(
        description="Inputs changed: recompute, zero_stage, tp, pp, micro_batch_size, num_gpus"
    )
    memory_bytes: float
    capacity_bytes: float
    tokens_per_s: float
    mfu: float
    usd_per_1m_tokens: float | None


class TrainingEstimateOut(BaseModel):
    model: str
    accelerator: str
    num_gpus: int
    layout: ResolvedTrainingLayout
    global_batch_size: int
    memory_per_gpu: TrainingMemoryOut
    time: TrainingTimeOut
    throughput: TrainingThroughputOut
    cost: TrainingCostOut
    energy: EnergyOut | None = Field(
        description="Null where the accelerator has no published power figure and none is"
        " given (energy_refused says why)"
    )
    energy_refused: str | None = None
    tco: TcoOut | None = Field(description="$ per GPU-hour rented and owned; null with energy")
    effective: EffectiveOut | None = Field(
        description="The run's wall-clock, GPU-hours and cost with interruptions, restarts and"
        " checkpoints; null without a token count or for a run that cannot progress"
        " (effective_refused says why)"
    )
    effective_refused: str | None = None
    jobs: list[JobOut] = Field(description="The plan as each stack that runs its layout takes it")
    jobs_refused: list[str] = Field(description="The stacks that cannot run it, and why")
    params: Params
    finetune: FineTuneOut
    offload: OffloadOut
    cluster: ClusterOut
    stack: StackOut
    accuracy: AccuracyOut
    fit_suggestions: list[FitSuggestionOut] | None = Field(
        description="For a plan that does not fit or is tight: the nearest layouts whose verdict"
        " is fits (fewest changes first, then fastest); null for a plan that fits"
    )
    exact: bool = Field(
        description="Whether the model's architecture is read exactly (parameters, FLOPs and"
        " caches checked against transformers); false for a model read approximately, whose"
        " notes say how"
    )
    calibrated: Calibrated | None
    notes: list[str]


class RankGroupsOut(BaseModel):
    dimension: str = Field(description="tp, cp, dp, pp, etp (expert TP), ep or edp (expert DP)")
    size: int = Field(description="GPUs per group")
    stride: int = Field(description="Rank distance between neighbours of a group")
    groups: int = Field(description="How many groups of this dimension there are")
    nodes_per_group: int
    listed: list[list[str]] = Field(description="The groups as GPU names (node_gpu), in order")


class RankLayoutOut(BaseModel):
    world: int
    gpus_per_node: int
    order: str = Field(description="Rank order, fastest-varying first")
    complete: bool = Field(description="False when only the first groups are listed")
    dimensions: list[RankGroupsOut]


class CommEventOut(BaseModel):
    dimension: str = Field(description="tp, cp, ep, pp, dp or zero3")
    collective: str
    when: str = Field(description="Where in the step it runs")
    message_bytes: float = Field(description="The collective's buffer per call")
    message_shape: list[int] = Field(description="Its elements, e.g. [tokens, hidden]")
    group_size: int
    nodes_per_group: int = Field(description="1: inside a node (NVLink); more: over the network")
    calls_per_microbatch: float
    calls_per_iteration: float
    sent_bytes_per_iteration: float = Field(description="Bytes this GPU sends (NCCL ring factors)")
    time_per_call_s: float
    time_per_iteration_s: float = Field(description="Before any overlap with compute")
    overlap: str


class CommPlanOut(BaseModel):
    microbatches: int
    world: int
    events: list[CommEventOut]
    sent_bytes_per_gpu: float = Field(description="Per iteration, on the most-loaded GPU")
    sent_bytes_by_dimension: dict[str, float]
    cluster_bytes_per_iteration: float = Field(
        description="sent_bytes_per_gpu x GPUs (an upper bound: edge pipeline stages send less)"
    )


class MemoryPointOut(BaseModel):
    label: str
    phase: str
    parts: dict[str, float] = Field(description="Bytes by term at this point")
    total_bytes: float


class TimelineOut(BaseModel):
    points: list[MemoryPointOut]
    peak_index: int
    peak_bytes: float = Field(description="Equals the memory estimate's total")
    capacity_bytes: float
    notes: list[str]


class ModuleRowOut(BaseModel):
    name: str
    kind: str = Field(description="linear, norm, embedding or head")
    split: str = Field(description="column, row, replicated, experts (over EP/ETP) or vocab")
    shape: list[int] = Field(description="(out_features, in_features) as PyTorch stores it")
    shard_shape: list[int] = Field(description="What one GPU holds of one copy")
    copies: int
    copies_per_gpu: int
    params: int
    params_per_gpu: float = Field(
        description="After TP / EP: what a GPU computes with (gathered before use under ZeRO-3)"
    )
    bytes_per_gpu: float
    resident_params_per_gpu: float = Field(
        description="Kept between uses: under ZeRO-3 / FSDP a 1 / (data-parallel shards) slice"
    )
    resident_bytes_per_gpu: float


class SavedTensorOut(BaseModel):
    name: str
    bytes: float = Field(description="Per micro-batch on one GPU")


class TPCollectiveOut(BaseModel):
    after: str
    collectives: str = Field(description="Per pass (forward, backward, recompute)")
    message_bytes: float
    message_shape: list[int] = Field(description="[tokens on the GPU, hidden]")


class LayerRowsOut(BaseModel):
    kind: str
    layers_in_model: int
    layers_on_gpu: int
    params_per_gpu: float = Field(description="Per layer, gathered for compute")
    resident_params_per_gpu: float = Field(description="Per layer, kept between uses")
    activation_bytes: float = Field(description="Kept for backward per micro-batch per layer")
    modules: list[ModuleRowOut]
    activations: list[SavedTensorOut]
    tp_collectives: list[TPCollectiveOut]


class LayerTableOut(BaseModel):
    layers: list[LayerRowsOut]
    embedding: ModuleRowOut
    head: ModuleRowOut | None
    model_params: int
    model_bytes: dict[str, float] = Field(description="The unsharded model's states")
    gpu_bytes: dict[str, float] = Field(description="The most-loaded GPU (the memory estimate)")
