"""Software stack profiles: what a training framework does that the step time depends on.

The kernel model (``timing.kernels``) prices GEMMs, attention and collectives from measured
kernel tables; what a framework adds or hides around them differs by stack. A profile names
those behaviours, each a ``TimingOptions`` field the step time already reads:

- the attention kernel its models run by default (``fused``: cuDNN / FlashAttention-3 class, as
  Transformer Engine calls; ``flash2``: FlashAttention-2, PyTorch SDPA's flash backend);
- which communication it overlaps with compute (TP, the DP gradient reduction, the ZeRO-3 /
  FSDP parameter gathers);
- ``compute_scale``: the compute time it takes relative to the kernel model (1.0: as the
  kernel tables say). Fitted on a whole group of published runs of that stack, never per record
  (``validation/fit_stacks.py`` computes it; a test checks the constant equals the fit), and on
  each accelerator generation's runs of the group apart where that generation has 30 or more of
  them (``compute_scale_by_generation``; the others take the whole group's); 1.0 where no group
  of published runs of the stack is in ``validation/data``, and said so.

Every answer names the profile it assumed. Behaviours a profile does not change (fp8 recipe,
MoE dispatcher, bucket sizes) are the same in all of them and listed in ``docs/methods.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from estimator.errors import SpecError
from estimator.timing.kernels import AttentionKernel

__all__ = [
    "DEFAULT_STACK",
    "MOE_EAGER_HOST_S",
    "STACKS",
    "STACK_NOTES",
    "CudaGraphs",
    "StackProfile",
    "stack_profile",
]

# How much of a step CUDA graphs capture (Megatron-Core's cuda_graph_impl / cuda_graph_scope):
# "none", "partial" (some modules: attention, the MoE router and its preprocessing, as
# Megatron-Bridge's recipes set them; the routed experts and token dispatch run eagerly) or
# "full" (the whole iteration).
CudaGraphs = Literal["none", "partial", "full"]

# The host time a mixture-of-experts layer exposes per micro-batch (forward and backward)
# where no CUDA graph captures any of the step: kernel launches the GPU waits for, after the
# token dispatcher's device-to-host syncs (it reads the token counts per expert). Fitted, as
# ``validation/fit_stacks.py fit_moe_host`` does, on the 33 compared Megatron-Core MoE runs
# whose recipes set no CUDA graphs (29 of Megatron-Bridge, ``validation/data/cuda_graphs.json``
# and ``recipes_25_11.json``, and 4 of Megatron-LM's MoE recipes): the value at which their
# median predicted / measured throughput is 1 (+13.4% without it; median APE 18.1% -> 12.0%).
# History: 1.231 ms before the runs that train multi-token prediction counted it, 1.599 ms
# before the experts' gradients were synchronized over the expert data-parallel ranks, GB200's
# 400 Gb/s NICs read, the Megatron-Bridge runs' bf16 gradients read and Blackwell's small
# heads took Hopper's head-dim factors (1.598 ms on the 30 runs then), 1.653 ms since three
# 25.11 runs joined them (their release's recipes read in part). Megatron-Bridge's runs with
# partial graphs are at -1.8% and those with full-iteration graphs at -10.9% with none.
MOE_EAGER_HOST_S = 1.653e-3


@dataclass(frozen=True, slots=True)
class StackProfile:
    name: str
    label: str
    attention_kernel: AttentionKernel
    tp_comm_overlap: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    compute_scale: float
    fitted_on: str  # the group of published runs the scale was fitted on, or why none
    sources: tuple[str, ...]
    # MoE token dispatch: "flex" sends a token once to each other scale-up domain holding
    # one of its experts and fans it out there over NVLink (DeepEP / HybridEP); "alltoall"
    # sends every routed copy (NCCL all-to-all). Each profile states it: no default here
    # (``TimingOptions``' default is the default stack's)
    moe_dispatcher: Literal["flex", "alltoall"]
    # What CUDA graphs capture: Megatron-Core's performance recipes capture parts of the layer
    # (attention, the MoE router); the PyTorch stacks run eagerly. Each profile states it
    cuda_graphs: CudaGraphs
    # Gradients freed between steps (torch.optim.Optimizer.zero_grad's set_to_none=True, the
    # default since PyTorch 2.0) and allocated again by each backward, or kept in persistent
    # buffers (Megatron's contiguous main_grad buffer, DeepSpeed's partitioned gradients)
    gradients_per_step: bool = False
    # Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm), off by default
    ep_comm_overlap: bool = False
    # ``compute_scale`` fitted on one accelerator generation's runs alone, where the group has
    # enough of them; other generations take the whole group's
    compute_scale_by_generation: tuple[tuple[str, float], ...] = ()

    def note(self) -> str:
        overlaps = [
            name
            for name, on in (
                ("TP communication", self.tp_comm_overlap),
                ("expert all-to-all", self.ep_comm_overlap),
                ("gradient reduction", self.overlap_grad_reduce),
                ("parameter gathers", self.overlap_param_gather),
            )
            if on
        ]
        scales = f"x{self.compute_scale:.3f}"
        if self.compute_scale_by_generation:
            each = ", ".join(f"x{s:.3f} on {g}" for g, s in self.compute_scale_by_generation)
            scales = f"{each}, {scales} elsewhere"
        return (
            f"Software stack: {self.label} ({self.attention_kernel} attention; overlaps "
            f"{', '.join(overlaps) or 'no communication'}; default CUDA graphs {self.cuda_graphs}; "
            f"compute {scales}, {self.fitted_on})."
        )


DEFAULT_STACK = "megatron-core"

STACKS: dict[str, StackProfile] = {
    p.name: p
    for p in (
        StackProfile(
            name="megatron-core",
            label="Megatron-Core / NeMo",
            attention_kernel="fused",
            tp_comm_overlap=False,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            compute_scale=1.0,
            fitted_on="the kernel model as calibrated (not fitted on end-to-end runs)",
            sources=(
                "Megatron-LM README, recommended flags: --overlap-grad-reduce,"
                " --overlap-param-gather with the distributed optimizer; --tp-comm-overlap needs"
                " Transformer Engine userbuffers (off by default)",
                "Transformer Engine DotProductAttention: cuDNN fused attention on Hopper and"
                " Blackwell",
                "Megatron-Core MoE README: the flex token dispatcher with DeepEP (v0.12) and"
                " HybridEP (v0.15); Megatron-Bridge's performance configs set"
                " moe_flex_dispatcher_backend hybridep for the Qwen3 and most Blackwell MoE"
                " recipes (scripts/performance/configs/qwen/qwen3_workload_base_configs.py)",
                "Megatron-Bridge's MoE performance recipes 26.02-26.08: 46 of the 83 compared"
                " runs capture attention and the MoE router with Transformer Engine's CUDA graphs"
                " (cuda_graph_scope attn, moe_router, moe_preprocess), 11 the whole iteration, 26"
                " none (validation/data/cuda_graphs.json)",
            ),
            moe_dispatcher="flex",
            cuda_graphs="partial",
        ),
        StackProfile(
            name="fsdp2",
            moe_dispatcher="alltoall",  # NCCL all-to-all: no DeepEP / HybridEP
            cuda_graphs="none",  # eager PyTorch
            label="PyTorch FSDP2 / TorchTitan",
            attention_kernel="flash2",
            tp_comm_overlap=False,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            compute_scale=1.0,
            fitted_on="not fitted: no published FSDP2 runs in validation/data",
            sources=(
                "PyTorch FSDP2 (torch.distributed.fsdp.fully_shard) docs: all-gathers"
                " prefetched for the next module, reduce-scatters issued in the backward as"
                " each module's gradients are ready",
                "TorchTitan docs: attention through F.scaled_dot_product_attention (flash"
                " backend: FlashAttention-2); asynchronous TP is an opt-in",
                "TorchTitan's train loop calls optimizers.zero_grad() each step"
                " (torchtitan/optimizer.py), set_to_none=True by default: the sharded"
                " gradients are freed between steps",
            ),
            gradients_per_step=True,
        ),
        StackProfile(
            name="deepspeed",
            moe_dispatcher="alltoall",  # NCCL all-to-all: no DeepEP / HybridEP
            cuda_graphs="none",  # eager PyTorch
            label="DeepSpeed / Megatron-DeepSpeed",
            attention_kernel="flash2",
            tp_comm_overlap=False,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            compute_scale=1.0,
            fitted_on="not fitted: no published DeepSpeed runs in validation/data",
            sources=(
                "DeepSpeed ZeRO configuration: zero_optimization.overlap_comm (gradient"
                " reduction behind the backward) as the Hugging Face and axolotl ZeRO configs"
                " set it (true); ZeRO-3 prefetches parameters (stage3_prefetch_bucket_size)",
            ),
        ),
        StackProfile(
            name="llm-foundry",
            moe_dispatcher="alltoall",  # NCCL all-to-all: no DeepEP / HybridEP
            cuda_graphs="none",  # eager PyTorch
            label="llm-foundry / Composer (PyTorch FSDP1)",
            attention_kernel="flash2",
            tp_comm_overlap=False,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            compute_scale=1.103,
            compute_scale_by_generation=(("ampere", 1.057), ("hopper", 1.184)),
            fitted_on="fitted on MosaicML's 116 published llm-foundry runs (median): on its 76"
            " A100 runs and its 40 H100 runs apart (one factor carries badly across them: fitted"
            " on the A100 runs the H100 runs are 11.9% off), on all 116 for other generations",
            sources=(
                "llm-foundry README and MPT configs: FSDP FULL_SHARD with backward prefetch,"
                " FlashAttention-2 (triton or flash_attn) attention",
                "validation/fit_stacks.py on validation/data (mosaicml_llm_foundry_mpt_benchmarks)",
            ),
        ),
    )
}


# Each profile's note, written once (every estimate carries one).
STACK_NOTES = {name: profile.note() for name, profile in STACKS.items()}


def stack_profile(name: str) -> StackProfile:
    """The profile named ``name`` (``TimingOptions.of_stack`` applies it)."""
    profile = STACKS.get(name)
    if profile is None:
        raise SpecError("stack", f"must be one of {', '.join(STACKS)}", name)
    return profile
