"""Every term a result breaks down into, defined once: its field name (with its unit), its label
and what it counts. The records that hold the terms (``TrainingMemory``, ``InferenceMemory``,
``TrainingTime``), the API's response models, the sweep's columns and the charts' labels are all
derived from these tuples, and tests check each record's fields against them, so a new term is
one line here plus its formula.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "INFERENCE_MEMORY",
    "LATENCY",
    "STEP",
    "TRAINING_MEMORY",
    "Term",
    "labels",
]


@dataclass(frozen=True, slots=True)
class Term:
    """One term: ``key`` is the field name (``weights_bytes``, ``bubble_s``), ``label`` what a
    chart or table calls it, ``includes`` what it counts."""

    key: str
    label: str
    includes: str

    @property
    def name(self) -> str:
        """The key without its unit (``weights``): the charts' trace id."""
        return self.key.rsplit("_", 1)[0]

    @property
    def unit(self) -> str:
        return "bytes" if self.key.endswith("_bytes") else "s"


# Per-GPU training memory on the most-loaded GPU; they sum to ``total_bytes``.
TRAINING_MEMORY = (
    Term("weights_bytes", "Weights", "model weights in the weight format, as sharded"),
    Term(
        "weight_cache_bytes",
        "FP8 weight cache",
        "Transformer Engine's low-precision copy of the linear weights (fp8 recipes)",
    ),
    Term("gradients_bytes", "Gradients", "gradient buffers (fp32 main_grad for bf16 training)"),
    Term("master_weights_bytes", "Master weights (fp32)", "the optimizer's fp32 weight copy"),
    Term("optimizer_states_bytes", "Optimizer states", "optimizer moments (AdamW: two fp32)"),
    Term(
        "activations_bytes",
        "Activations",
        "tensors saved for backward of the micro-batches in flight, and a recomputed layer's",
    ),
    Term("logits_bytes", "Logits", "the output head's logits and loss buffers (last stage)"),
    Term("zero3_gather_bytes", "ZeRO-3 gather buffers", "gathered layers (ZeRO-3 / FSDP)"),
    Term(
        "dequant_buffer_bytes",
        "QLoRA dequantization buffer",
        "the largest frozen weight dequantized from NF4 to the compute dtype at once (QLoRA)",
    ),
    Term("cuda_context_bytes", "CUDA context", "CUDA context, library workspaces, kernels"),
    Term("comm_buffers_bytes", "NCCL buffers", "NCCL communicator buffers, per group"),
    Term("fragmentation_bytes", "Allocator fragmentation", "caching-allocator overhead"),
)

# Per-GPU serving memory on the most-loaded pipeline stage; they sum to ``total_bytes``.
INFERENCE_MEMORY = (
    Term("weights_bytes", "Weights", "model weights in the weight format, as sharded"),
    Term("kv_cache_bytes", "KV cache", "keys and values (or latents) of the sequences in flight"),
    Term(
        "state_bytes",
        "Recurrent state",
        "SSM, linear-attention and convolution states of the sequences in flight (a fixed size"
        " per sequence, whatever its length)",
    ),
    Term(
        "draft_weights_bytes",
        "Drafter weights",
        "speculative decoding's drafter: MTP modules, an EAGLE head or a draft model (0 without"
        " speculation)",
    ),
    Term(
        "draft_kv_cache_bytes",
        "Drafter KV cache",
        "the drafter's own KV cache (and recurrent state) of the sequences in flight",
    ),
    Term("activation_peak_bytes", "Activations (peak)", "the largest forward's live tensors"),
    Term(
        "runtime_overhead_bytes",
        "Runtime overhead",
        "CUDA context, kernels, CUDA-graph pools and NCCL buffers of the engine",
    ),
)

# One training step; they sum to ``step_s``.
STEP = (
    Term("compute_s", "Compute", "forward, backward and recomputation kernels"),
    Term("bubble_s", "Pipeline bubble", "pipeline warm-up and drain"),
    Term("tp_comm_s", "TP comm (exposed)", "tensor-parallel collectives not hidden by compute"),
    Term("ep_comm_s", "EP all-to-all (exposed)", "expert-parallel token dispatch and combine"),
    Term("cp_comm_s", "CP comm (exposed)", "context-parallel K/V exchange"),
    Term("pp_comm_s", "PP send/recv (exposed)", "pipeline activations sent between stages"),
    Term("dp_comm_s", "DP grad sync (exposed)", "gradient reduction not hidden by backward"),
    Term("zero3_comm_s", "ZeRO-3 gathers (exposed)", "parameter gathers not hidden by compute"),
    Term(
        "offload_s",
        "CPU offload (exposed)",
        "host-link transfers and the CPU optimizer step not hidden by compute",
    ),
    Term(
        "host_s",
        "Host overhead (exposed)",
        "MoE layers' kernel launches and device-to-host syncs without CUDA graphs",
    ),
    Term("optimizer_s", "Optimizer step", "the optimizer's update of the local parameters"),
)

# What a serving step's time is spent on (TTFT and TPOT breakdowns).
LATENCY = (
    Term("gemm_s", "GEMMs", "linear layers"),
    Term(
        "attention_s",
        "Attention",
        "the attention core (QK^T, softmax, PV), and recurrent layers' scan and convolution",
    ),
    Term("elementwise_s", "Elementwise", "norms, activations, rotary, residual adds"),
    Term("comm_s", "Communication", "tensor- and pipeline-parallel transfers"),
)


def labels() -> dict[str, str]:
    """Chart labels by term name (``weights`` -> ``Weights``) over every group."""
    out: dict[str, str] = {}
    for group in (TRAINING_MEMORY, INFERENCE_MEMORY, STEP, LATENCY):
        for term in group:
            out.setdefault(term.name, term.label)
    return out
