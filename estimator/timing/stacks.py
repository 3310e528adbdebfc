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
from estimator.xp import Num, logical_and, where

__all__ = [
    "AUTO_PRECEDENCE",
    "AUTO_STACK",
    "DEFAULT_STACK",
    "FSDP2_COMPUTE_SCALE",
    "MOE_EAGER_HOST_S",
    "RUNS",
    "STACKS",
    "STACK_NOTES",
    "CudaGraphs",
    "StackProfile",
    "auto_stack",
    "auto_takes",
    "runs_layout",
    "stack_choice",
    "stack_profile",
    "stack_refusal",
    "sweep_stacks",
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

# The fsdp2 profile's compute factor: the value at which the median predicted / measured
# throughput of TorchTitan's 26 published FSDP2 runs (its benchmark pages at b5bcd76c: FSDP
# alone, FSDP + CP, FSDP + TP with and without async TP, FSDP + TP + PP, float8 and bf16, eager
# and compiled) is 1, as ``validation/fit_stacks.py`` fits it. At 1.0 they are +31.7% median
# (the kernel model is Megatron-Core's; TorchTitan's H100s ran at a 500 W limit). Fitted with
# one source page left out in turn its held-out runs are 7.9% off (median), one model out 7.2%.
FSDP2_COMPUTE_SCALE = 1.332

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
            compute_scale=FSDP2_COMPUTE_SCALE,
            fitted_on="fitted on TorchTitan's 26 published FSDP2 runs (median; 24 on H100, 2 on"
            " H200; validation/data/torchtitan_throughput.json): 6.4% median APE in-sample, 7.9%"
            " leaving each benchmark page out, 7.2% leaving each model out (31.7% at 1.0)",
            sources=(
                "pytorch/torchtitan@b5bcd76c benchmarks/llama3_h100_202412_torchtitan.md,"
                " asyncTP_llama3_h100_2025-06_torchtitan.md, llama3-8b_h200_202506_trainy-"
                "whitefiber.md: tokens/s per GPU with the FSDP / TP / PP / CP degrees, batch,"
                " checkpointing, float8 and compile (validation/fit_stacks.py)",
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


# --- which stack runs which layout ------------------------------------------------------------
# What each stack can run, from its own arguments at the versions estimator/layout/jobs.py
# writes (tests/data/stack_args.json):
# - Megatron-Core (Megatron-LM 0.20.0): every layout: TP, PP, VP, CP, EP; ZeRO-1 as its
#   distributed optimizer (--use-distributed-optimizer), ZeRO-2/3 as Megatron-FSDP
#   (--data-parallel-sharding-strategy optim_grads / optim_grads_params).
# - FSDP2 / TorchTitan 0.2.2: FSDP2 (fully_shard: ZeRO-3, data_parallel_shard_degree) or DDP
#   (ZeRO 0, data_parallel_replicate_degree), composed with TP, PP, VP, CP and EP; no ZeRO-1/2.
# - DeepSpeed 0.19.6 (its JSON config): data parallelism with ZeRO 0-3; TP and PP need
#   Megatron-DeepSpeed's model code, which no profile here times.
# - llm-foundry / Composer (PyTorch FSDP1): data parallelism with FULL_SHARD (ZeRO-3),
#   SHARD_GRAD_OP (ZeRO-2) or NO_SHARD (ZeRO 0).
AUTO_STACK = "auto"
_ZERO_STAGES = {
    "megatron-core": (0, 1, 2, 3),
    "fsdp2": (0, 3),
    "deepspeed": (0, 1, 2, 3),
    "llm-foundry": (0, 2, 3),
}
_MODEL_PARALLEL = ("megatron-core", "fsdp2")  # the stacks that run TP / PP / VP / CP / EP
# What each stack runs, as a refusal says it.
RUNS = {
    "megatron-core": "every layout",
    "fsdp2": "ZeRO 0 (DDP) or 3 (FSDP), with any TP / PP / VP / CP / EP",
    "deepspeed": "data parallelism alone (ZeRO 0-3)",
    "llm-foundry": "data parallelism alone with ZeRO 0, 2 or 3 (FSDP1 NO_SHARD, SHARD_GRAD_OP,"
    " FULL_SHARD)",
}

# Stack ``auto``'s precedence, first match: the stack whose own form of the layout the
# published runs in validation/data measured, else Megatron-Core, which runs every layout.
AUTO_PRECEDENCE = (
    "stack auto: data parallelism alone with ZeRO-3 (FSDP) on FSDP2 / TorchTitan (fully_shard;"
    " its compute factor fitted on TorchTitan's published runs); data parallelism alone with"
    " ZeRO-2 on DeepSpeed (its ZeRO-2 partitioning; FSDP2 has no ZeRO-2 form); every other"
    " layout (TP, PP, VP, CP or EP > 1; ZeRO 0 as DDP; ZeRO-1 as the distributed optimizer;"
    " ZeRO-2/3 beside model parallelism as Megatron-FSDP) on Megatron-Core, which runs them all."
)


# Why ``auto`` picked each stack, as a single plan's answer says it.
_AUTO_WHY = {
    "fsdp2": "data parallelism alone with ZeRO-3 (FSDP) runs on PyTorch FSDP2 / TorchTitan"
    " (fully_shard), its compute factor fitted on TorchTitan's published runs",
    "deepspeed": "data parallelism alone with ZeRO-2 runs on DeepSpeed (its ZeRO-2"
    " partitioning; FSDP2 has no ZeRO-2 form)",
    DEFAULT_STACK: "Megatron-Core runs this layout (model parallelism, or zero_stage={zero}:"
    " ZeRO 0 as DDP, 1 as the distributed optimizer, 2/3 beside model parallelism as"
    " Megatron-FSDP); data parallelism alone with ZeRO-3 would run on FSDP2, with ZeRO-2 on"
    " DeepSpeed",
}


def _dp_only(tp: Num, pp: Num, cp: Num, ep: Num, vp: Num) -> Num:
    return logical_and(
        logical_and(logical_and(tp == 1, pp == 1), logical_and(cp == 1, ep == 1)), vp == 1
    )


def runs_layout(name: str, tp: Num, pp: Num, cp: Num, ep: Num, vp: Num, zero: Num) -> Num:
    """Whether stack ``name`` runs each layout (ints or arrays of them, as a sweep holds): the
    data-parallel-only stacks refuse model parallelism. The ZeRO stages a stack lacks
    (``_ZERO_STAGES``: FSDP2's ZeRO-1/2, FSDP1's ZeRO-1) are stated in ``RUNS`` but not yet
    refused: the fit verdicts and documented examples time fsdp2 at ZeRO 1/2 (issue 45)."""
    del zero  # see the docstring
    if name in _MODEL_PARALLEL:
        return logical_and(tp >= 1, True)
    return _dp_only(tp, pp, cp, ep, vp)


def auto_stack(tp: int, pp: int, cp: int, ep: int, vp: int, zero: int) -> str:
    """The stack ``auto`` times a layout on (``AUTO_PRECEDENCE``)."""
    if _dp_only(tp, pp, cp, ep, vp):
        if zero >= 3:
            return "fsdp2"
        if zero == 2:
            return "deepspeed"
    return DEFAULT_STACK


def auto_takes(name: str, tp: Num, pp: Num, cp: Num, ep: Num, vp: Num, zero: Num) -> Num:
    """Whether ``auto`` gives each layout to stack ``name`` (arrays, as a sweep holds them)."""
    dp_only = _dp_only(tp, pp, cp, ep, vp)
    if name == "fsdp2":
        return logical_and(dp_only, zero >= 3)
    if name == "deepspeed":
        return logical_and(dp_only, zero == 2)
    if name == DEFAULT_STACK:
        # not (a where, not ``~``: ``~True`` is -2 on a plain bool, which reads as true)
        return where(logical_and(dp_only, zero >= 2), False, True)
    return logical_and(dp_only, zero < 0)  # every entry False: auto picks no other stack


def stack_refusal(name: str, tp: int, pp: int, cp: int, ep: int, vp: int, zero: int) -> str | None:
    """Why stack ``name`` cannot run a layout, or None where it can (``runs_layout``)."""
    if bool(runs_layout(name, tp, pp, cp, ep, vp, zero)):
        return None
    return (
        f"{STACKS[name].label} runs data parallelism only (tp={tp}, pp={pp}, cp={cp}, ep={ep},"
        f" vp={vp} given): use megatron-core, fsdp2 or auto"
    )


def stack_choice(
    requested: str, tp: int, pp: int, cp: int, ep: int, vp: int, zero: int
) -> tuple[str, str]:
    """The stack a single plan is timed on and why: ``auto``'s pick for the layout, or the
    stack asked for, refused (``SpecError`` on ``stack``) where it cannot run the layout."""
    if requested == AUTO_STACK:
        name = auto_stack(tp, pp, cp, ep, vp, zero)
        return name, f"stack auto: {_AUTO_WHY[name].format(zero=zero)}"
    stack_profile(requested)
    why = stack_refusal(requested, tp, pp, cp, ep, vp, zero)
    if why is not None:
        raise SpecError("stack", why, requested)
    return requested, f"{STACKS[requested].label}, as requested."


# The stacks ``auto`` picks between in a sweep, in its precedence's order.
AUTO_STACKS = ("megatron-core", "fsdp2", "deepspeed")


def sweep_stacks(names: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
    """The stacks a sweep times and whether ``auto`` picks between them: ``auto`` alone
    stands for ``AUTO_STACKS``; listed with other stacks it is refused."""
    if AUTO_STACK not in names:
        return names, False
    if len(names) > 1:
        raise SpecError("stack", "auto picks a stack for each layout: list it alone", list(names))
    return AUTO_STACKS, True
