"""What a training estimate says besides its numbers: the notes on the software stack, the
communication overlaps, the MoE dispatcher and host overhead, the eager ops Megatron-Core runs,
multi-token prediction, the cluster, how MFU is counted and whether the plan fits
(``plan_notes``, in the order the estimate lists them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.counts.flops import TrainingFlops, training_flops
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import cluster_of
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.parallel import Parallelism
from estimator.memory.training import TrainingMemory, TrainingSetup
from estimator.timing.eager_ops import eager_expert_kinds, expert_eager_ops
from estimator.timing.kernels import kernel_profile
from estimator.timing.stacks import DEFAULT_STACK, MOE_EAGER_HOST_S, STACK_NOTES, stack_profile
from estimator.timing.vendor import training_notes

if TYPE_CHECKING:
    from estimator.timing.training import TimingOptions

__all__ = [
    "DISPATCHER_NOTES",
    "MOE_EAGER_NOTE",
    "MOE_HOST_NOTE",
    "eager_ops_notes",
    "mtp_notes",
    "plan_notes",
]


# What each MoE token dispatcher (``TimingOptions.moe_dispatcher``) is taken to do, as an
# estimate with expert parallelism says it.
DISPATCHER_NOTES = {
    "flex": "MoE token dispatcher: flex (DeepEP / HybridEP): a token crosses to each other"
    " scale-up domain holding one of its experts once and fans out there, and the routed tokens"
    " are copied twice each way (permute, unpermute).",
    "alltoall": "MoE token dispatcher: alltoall (NCCL all-to-all): every routed copy of a token"
    " crosses to its expert's rank, and the routed tokens are copied four times each way"
    " (permute, sort by local expert where a rank holds several, and both reversed).",
}


# The host's part of an MoE step: kernel launches and the MoE layer's device-to-host syncs (the
# dispatcher reads its token counts). Without CUDA graphs each MoE layer exposes
# ``MOE_EAGER_HOST_S`` per micro-batch (fitted on the Megatron-Core runs whose recipes set no
# graphs); with partial or full-iteration graphs it counts as hidden. What full-iteration graphs
# gain over partial ones, from NVIDIA's Megatron-LM MoE recipes (examples/moe_recipes/README.md
# @ d48bd6be: the same model, GPUs, layout and batch with partial CUDA graphs and with
# full-iteration graphs and paged stash).
MOE_HOST_NOTE = (
    "MoE host overhead (kernel launches, the dispatcher's device-to-host syncs) counted as"
    " hidden, as CUDA graphs around the layer hide it (cuda_graphs partial or full; 'none' adds"
    f" {MOE_EAGER_HOST_S * 1e3:.2f} ms per MoE layer and micro-batch): NVIDIA's Megatron-LM MoE"
    " recipes ran 12% (Qwen3-235B, 128 GB200) and 21% (Qwen3-30B-A3B, 16 GB200) slower with"
    " partial CUDA graphs than with full-iteration ones."
)
MOE_EAGER_NOTE = (
    "MoE host overhead without CUDA graphs: each MoE layer exposes"
    f" {MOE_EAGER_HOST_S * 1e3:.2f} ms of kernel launches and device-to-host syncs per"
    " micro-batch (breakdown 'host'), fitted on the 30 Megatron-Core MoE runs whose recipes"
    " set no CUDA graphs (their median error +14.5% without it; a per-run spread of about -50%"
    " to +100% remains)."
)


def eager_ops_notes(
    model: ModelSpec, acc: Accelerator, p: Parallelism, setup: TrainingSetup, precision: Precision
) -> list[str]:
    """What the eager ops Megatron-Core runs for the model add: its routed experts' clamp and
    bias (``expert_eager_ops``) and an unfused rotary embedding (``unfused_rope_time``)."""
    notes = []
    if model.rope_mscale != 1.0:
        notes.append(
            f"YaRN rotary embedding scaled by {model.rope_mscale:.3f}: Megatron-Core runs its"
            " unfused RoPE (Megatron-Bridge turns the fusion off for YaRN, and the fused kernel"
            " takes no such factor), 12 reads and writes of each query and key element forward"
            " and 13 backward, counted in compute."
        )
    eager = eager_expert_kinds(model)
    if not eager:
        return notes
    kind = model.kinds[min(eager)]
    tokens = setup.seq_len * setup.micro_batch_size / p.cp
    act_b = DTYPES[precision.activations].bytes
    ops = expert_eager_ops(model, kind, p, tokens, act_b, setup.expert_load)
    fwd, bwd, _ = ops.times(acc, kernel_profile(acc.id))
    what = " and ".join(
        text
        for on, text in (
            (ops.clamp_kernels, "the clamp of the activation's input (two clamps and a cat)"),
            (ops.bias, "the down-projection bias added per local expert, then a cat"),
        )
        if on
    )
    return [
        *notes,
        "Routed experts: the eager PyTorch kernels Megatron-Core runs around its fused ones"
        f" (TEGroupedMLP), {what}, take {fwd * 1e3:.2f} ms forward and {bwd * 1e3:.2f} ms"
        " backward per MoE layer and micro-batch, counted in compute (under every stack).",
    ]


def mtp_notes(
    model: ModelSpec, setup: TrainingSetup, flops: TrainingFlops, batch: int
) -> list[str]:
    """What the plan's multi-token-prediction depths add to its ``flops`` (over ``batch``
    sequences), or that the checkpoint's are left untrained."""
    if setup.mtp_layers:
        share = flops.model / training_flops(model, setup.seq_len, batch).model - 1
        kinds = " + ".join(model.kinds[k].name for k in model.mtp_module)
        repeated = ", one module's weights run for each" if setup.mtp_repeated else ""
        return [
            f"Multi-token prediction: {setup.mtp_layers} depth(s) trained on the last pipeline"
            f" stage (Megatron-Core's --mtp-num-layers{repeated}), each one more {kinds} layer,"
            " a 2h x h projection and another pass through the head and loss: +"
            f"{share:.1%} model FLOPs; the stage also holds a second copy of an untied embedding"
            " where the pipeline has more than one stage."
        ]
    if model.mtp_depth:
        return [
            f"The checkpoint's {model.mtp_depth} multi-token-prediction module(s) are not trained"
            " in this plan (mtp_layers 0): Megatron-Core trains them with --mtp-num-layers"
            " (Megatron-Bridge's recipes train 1 for DeepSeek-V3, 2 of one repeated module for"
            " Nemotron 3 Super and Ultra); set mtp_layers to count them."
        ]
    return []


def plan_notes(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    options: TimingOptions | None,
    memory: TrainingMemory,
    flops: TrainingFlops,
) -> list[str]:
    """The estimate's notes: the memory's, the kernel profile's, then the stack's and what the
    timing options, the model and the layout add (``options`` None: the default stack's)."""
    from estimator.timing.training import TimingOptions  # timing.training imports this module

    gbs = setup.global_batch_size or setup.micro_batch_size * parallel.dp
    gpus = parallel.num_gpus
    peak_format = precision.compute
    peak = accelerator.peak(peak_format)
    notes = list(memory.notes) + list(kernel_profile(accelerator.id).notes)
    stack = options.stack if options else DEFAULT_STACK
    notes.append(STACK_NOTES.get(stack) or stack_profile(stack).note())  # unknown: refused
    notes += training_notes(accelerator)  # the vendor's fitted factor (timing.vendor)
    if options is not None and options.tp_comm_overlap and parallel.tp > 1:
        notes.append(
            "TP communication overlapped with the GEMMs as Transformer Engine's userbuffers run it"
            " (Megatron-Bridge's configs): a chunk of each exchange stays exposed (1/tp of it"
            " ring-exchanged; BF16's reduce-scatter pipelined in 4 splits) and the GEMMs that share"
            " their SMs with its kernels slow down, both counted as TP time."
        )
    if options is not None and options.ep_comm_overlap:
        notes.append(
            "Expert all-to-all overlapped with another micro-batch's compute (Megatron-Core's"
            " --overlap-moe-expert-parallel-comm): the dispatcher's kernels share the SMs with"
            " the GEMMs they overlap, which is not charged, so the saving is an upper bound."
        )
    if model.moe is not None and parallel.ep > 1:
        notes.append(DISPATCHER_NOTES[(options or TimingOptions()).moe_dispatcher])
    if model.moe is not None:
        eager = (options or TimingOptions()).cuda_graphs == "none"
        notes.append(MOE_EAGER_NOTE if eager else MOE_HOST_NOTE)
    notes += eager_ops_notes(model, accelerator, parallel, setup, precision)
    notes += mtp_notes(model, setup, flops, gbs)
    cluster = (options.cluster if options else None) or cluster_of(accelerator)
    if parallel.num_gpus > cluster.scale_up_domain:
        notes += cluster.notes()
    hfu_note = "" if setup.recompute == "none" else "; HFU adds the recomputation"
    counted = "3x causal forward"
    if setup.finetune.frozen:
        counted = "causal forward with the adapters, backward without the frozen weights' gradients"
    notes.append(
        f"MFU/HFU: model FLOPs ({counted}{hfu_note}) "
        f"over step time x {gpus} GPUs x the dense {peak_format} peak "
        f"({peak / 1e12:.0f} TFLOP/s)."
    )
    if not memory.fits:
        notes.append("The plan does not fit in memory; its time is what it would take if it did.")
    return notes
