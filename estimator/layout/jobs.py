"""A training plan as a job: the configuration of each stack that runs its layout, and the
multi-node launcher around it.

Argument names as each stack spells them at the version named (``tests/data/stack_args.json``,
read from the sources by ``validation/stack_args.py``; a test checks every name written here
against it):

- Megatron-LM 0.20.0 (``pretrain_gpt.py``, ``megatron/training/arguments.py``): the layout
  (``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
  ``--num-layers-per-virtual-pipeline-stage``, ``--context-parallel-size``,
  ``--expert-model-parallel-size``, ``--expert-tensor-parallel-size``, ``--sequence-parallel``),
  the optimizer's sharding (``--use-distributed-optimizer``; ZeRO-2/3 as Megatron-FSDP,
  ``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads[_params]``, which requires
  ``--ckpt-format fsdp_dtensor`` and ``CUDA_DEVICE_MAX_CONNECTIONS`` unset or above 1:
  ``arguments.py``'s checks), recomputation, batch, precision (``--bf16``; FP8 with
  ``--fp8-format`` / ``--fp8-recipe``, NVFP4 with ``--fp4-format e2m1 --fp4-recipe nvfp4``,
  ``--fp8-param-gather`` / ``--fp4-param-gather`` for the ``*-params`` presets), the model's
  shape and block (``--swiglu``, ``--normalization RMSNorm``, ``--position-embedding-type rope``,
  ``--disable-bias-linear``, ``--add-qkv-bias``: Megatron-LM's GPT defaults are GeLU,
  LayerNorm, learned positions and biases), and checkpointing (``--save-interval``,
  ``--async-save``). Without FSDP the launcher exports ``CUDA_DEVICE_MAX_CONNECTIONS=1``, as
  Megatron-LM's own examples do (``examples/gpt3/train_gpt3_175b_distributed.sh``).
- TorchTitan 0.2.2 (``torchtitan.train``): a Python config (``--module`` / ``--config`` name a
  ``config_registry`` function) overridden on the command line as ``--<section>.<field>``; the
  TOML job files of earlier releases are gone. Parallel degrees in ``--parallelism.*`` (FSDP2 as
  ``data_parallel_shard_degree``, DDP as ``data_parallel_replicate_degree``), tokens rather than
  sequences in ``--training.*``, checkpoints in ``--checkpoint.*``.
- DeepSpeed 0.19.6: its JSON config (``train_micro_batch_size_per_gpu``,
  ``gradient_accumulation_steps``, ``train_batch_size``, ``bf16``, ``zero_optimization``), for
  data-parallel layouts only: tensor and pipeline parallelism need Megatron-DeepSpeed's model
  code, and the answer says so instead.

The launcher: one ``torchrun`` per node, the rendezvous on the first node
(``--rdzv-backend c10d --rdzv-endpoint $HEAD_NODE_IP:29500``, torch.distributed.elastic), as a
Slurm batch script (one task per node, ``srun`` starting them). Paths (data, tokenizer,
checkpoints) are placeholders the user fills; the network environment (``NCCL_SOCKET_IFNAME``,
``NCCL_IB_HCA``) is the cluster's and is named, not guessed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.layout.parallel import Parallelism

__all__ = ["STACK_VERSIONS", "JobConfig", "JobPlan", "training_jobs"]

STACK_VERSIONS = {"megatron": "0.20.0", "torchtitan": "0.2.2", "deepspeed": "0.19.6"}
RDZV_PORT = 29500

# Precision presets as Megatron-LM's flags (the rest of a preset is its default).
_MEGATRON_PRECISION = {
    "bf16": ("--bf16",),
    "fp16": ("--fp16",),
    "fp8": ("--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"),
    "mxfp8": ("--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"),
    "nvfp4": ("--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"),
}
_PARAMS_GATHER = {"fp8": "--fp8-param-gather", "mxfp8": "--fp8-param-gather"}


@dataclass(frozen=True)
class JobPlan:
    """What the job needs besides the layout: the batch, the run's length, the cluster's shape
    and the checkpoint cadence (``timing.effective``)."""

    seq_len: int
    micro_batch_size: int
    global_batch_size: int
    recompute: str  # none, selective, full, op
    train_steps: int | None = None
    gpus_per_node: int = 8
    checkpoint_every_steps: int | None = None
    async_checkpoint: bool = True


@dataclass(frozen=True)
class JobConfig:
    """One stack's job: its files (name, content) and what it could not say."""

    stack: str
    version: str
    files: tuple[tuple[str, str], ...]
    names: tuple[str, ...]  # the stack's argument names used (checked against the snapshot)
    notes: tuple[str, ...]


def training_jobs(
    model: ModelSpec, parallel: Parallelism, precision: Precision, job: JobPlan
) -> tuple[tuple[JobConfig, ...], tuple[str, ...]]:
    """The jobs of the stacks that run this layout, and why the others do not."""
    jobs, refused = [], []
    for stack in (_megatron, _torchtitan, _deepspeed):
        made = stack(model, parallel, precision, job)
        if isinstance(made, str):
            refused.append(made)
        else:
            jobs.append(made)
    return tuple(jobs), tuple(refused)


def _gpus(p: Parallelism) -> int:
    return p.tp * p.pp * p.dp * p.cp


def _nodes(p: Parallelism, job: JobPlan) -> tuple[int, int]:
    gpus = _gpus(p)
    per_node = min(job.gpus_per_node, gpus)
    return math.ceil(gpus / per_node), per_node


def _launcher(p: Parallelism, job: JobPlan, env: dict[str, str], entry: str) -> str:
    """A Slurm batch script starting one ``torchrun`` per node over a c10d rendezvous."""
    nodes, per_node = _nodes(p, job)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={per_node}",
        "#SBATCH --exclusive",
        "# The cluster's network: set NCCL_SOCKET_IFNAME / NCCL_IB_HCA as its admins document.",
        'HEAD_NODE_IP=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        *(f"export {k}={v}" for k, v in env.items()),
        "srun torchrun \\",
        f"  --nnodes {nodes} --nproc-per-node {per_node} \\",
        f'  --rdzv-backend c10d --rdzv-endpoint "$HEAD_NODE_IP:{RDZV_PORT}"'
        ' --rdzv-id "$SLURM_JOB_ID" \\',
        f"  {entry}",
    ]
    return "\n".join(lines) + "\n"


def _args_text(args: list[str]) -> str:
    """Arguments two a line (a flag and its value, or a switch alone), continued with ``\\``."""
    out, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append(f"{args[i]} {args[i + 1]}")
            i += 2
        else:
            out.append(args[i])
            i += 1
    return " \\\n    ".join(out)


def _flags(args: list[str]) -> tuple[str, ...]:
    return tuple(a.split("=", 1)[0] for a in args if a.startswith("--"))


# --- Megatron-LM --------------------------------------------------------------------------------


def _megatron(model: ModelSpec, p: Parallelism, precision: Precision, job: JobPlan) -> JobConfig:
    args = [
        *_megatron_layout(model, p),
        *_megatron_model(model, job),
        "--micro-batch-size", str(job.micro_batch_size),
        "--global-batch-size", str(job.global_batch_size),
        *_megatron_recompute(job.recompute),
        *_MEGATRON_PRECISION.get(precision.name.removesuffix("-params"), ("--bf16",)),
    ]  # fmt: skip
    notes = []
    base = precision.name.removesuffix("-params")
    if precision.name.endswith("-params"):
        args.append(_PARAMS_GATHER.get(base, "--fp4-param-gather"))
    if base not in _MEGATRON_PRECISION:
        notes.append(f"precision {precision.name!r} has no Megatron-LM training flag: bf16 set.")
    if job.train_steps is not None:
        args += ["--train-iters", str(job.train_steps)]
    args += ["--save", "$CHECKPOINT_DIR", "--load", "$CHECKPOINT_DIR"]
    if job.checkpoint_every_steps is not None:
        args += ["--save-interval", str(job.checkpoint_every_steps)]
    fsdp = p.zero_stage >= 2
    if job.async_checkpoint and not fsdp:
        args += ["--async-save", "--ckpt-format", "torch_dist"]
    args += ["--data-path", "$DATA_PATH", "--tokenizer-type", "HuggingFaceTokenizer"]
    args += ["--tokenizer-model", "$TOKENIZER"]
    env = {} if fsdp else {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    script = _launcher(p, job, env, "pretrain_gpt.py \\\n    " + _args_text(args))
    if model.moe is not None or model.mtp_depth:
        notes.append(
            "Architecture flags beyond the shape (router, shared experts, MLA, multi-token"
            " prediction) come from the model's Megatron-Bridge recipe or checkpoint conversion."
        )
    return JobConfig(
        "megatron", STACK_VERSIONS["megatron"], (("megatron.sbatch", script),), _flags(args),
        tuple(notes),
    )  # fmt: skip


def _megatron_layout(model: ModelSpec, p: Parallelism) -> list[str]:
    args = [
        "--tensor-model-parallel-size", str(p.tp),
        "--pipeline-model-parallel-size", str(p.pp),
        "--context-parallel-size", str(p.cp),
    ]  # fmt: skip
    if p.vp > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(model.num_layers // (p.pp * p.vp))]
    if p.ep > 1 or p.etp is not None:
        args += ["--expert-model-parallel-size", str(p.ep)]
        args += ["--expert-tensor-parallel-size", str(p.tp if p.etp is None else p.etp)]
    if p.sequence_parallel and p.tp > 1:
        args.append("--sequence-parallel")
    if p.zero_stage >= 2:
        strategy = "optim_grads_params" if p.zero_stage >= 3 else "optim_grads"
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy]
        args += ["--ckpt-format", "fsdp_dtensor"]
    elif p.zero_stage == 1 or p.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    args += ["--overlap-grad-reduce", "--overlap-param-gather"] if p.dp > 1 else []
    return args


def _megatron_model(model: ModelSpec, job: JobPlan) -> list[str]:
    args = [
        "--num-layers", str(model.num_layers),
        "--hidden-size", str(model.hidden_size),
        "--num-attention-heads", str(model.num_heads),
        "--seq-length", str(job.seq_len),
        "--max-position-embeddings", str(max(model.max_seq_len or 0, job.seq_len)),
    ]  # fmt: skip
    ffn = model.config.get("intermediate_size")
    if isinstance(ffn, int):
        args += ["--ffn-hidden-size", str(ffn)]
    if model.num_kv_heads < model.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    if model.moe is not None:
        args += ["--num-experts", str(model.moe.num_experts)]
        args += ["--moe-router-topk", str(model.moe.top_k)]
        args += ["--moe-ffn-hidden-size", str(model.moe.expert_intermediate_size)]
        args.append("--moe-grouped-gemm")
    if not model.tie_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    return args + _megatron_blocks(model)


def _megatron_blocks(model: ModelSpec) -> list[str]:
    """The block's kind: gated SiLU MLP, RMSNorm, rotary positions, biases (Llama-style defaults
    differ from Megatron-LM's GPT ones: GeLU, LayerNorm, learned positions, biases on)."""
    args = []
    if model.gated_mlp and model.mlp_activation == "silu":
        args.append("--swiglu")
    if model.norm_type == "rmsnorm":
        args += ["--normalization", "RMSNorm"]
    if model.position_embeddings == 0:
        args += ["--position-embedding-type", "rope"]
    biased = {
        lin.name.rsplit(".", 1)[-1] for kind in model.kinds for lin in kind.linears if lin.bias
    }
    if not biased:
        args.append("--disable-bias-linear")
    elif biased <= {"q_proj", "k_proj", "v_proj"}:  # Qwen2's: biases on the QKV projection only
        args += ["--disable-bias-linear", "--add-qkv-bias"]
    return args


def _megatron_recompute(recompute: str) -> list[str]:
    if recompute == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]  # fmt: skip
    if recompute == "selective":
        return ["--recompute-granularity", "selective"]
    return []


# --- TorchTitan ---------------------------------------------------------------------------------


def _torchtitan(
    model: ModelSpec, p: Parallelism, precision: Precision, job: JobPlan
) -> JobConfig | str:
    if p.zero_stage in (1, 2):
        return (
            f"TorchTitan: ZeRO-{p.zero_stage} has no TorchTitan form (FSDP2 shards weights too:"
            " plan ZeRO-3, or DDP with ZeRO 0)."
        )
    shard = p.dp if p.zero_stage >= 3 else 1
    replicate = 1 if p.zero_stage >= 3 else p.dp
    args = [
        "--module", "$MODULE", "--config", "$CONFIG",
        f"--parallelism.data_parallel_shard_degree={shard}",
        f"--parallelism.data_parallel_replicate_degree={replicate}",
        f"--parallelism.tensor_parallel_degree={p.tp}",
        f"--parallelism.pipeline_parallel_degree={p.pp}",
        f"--parallelism.context_parallel_degree={p.cp}",
        f"--parallelism.expert_parallel_degree={p.ep}",
        f"--parallelism.enable_sequence_parallel={p.sequence_parallel and p.tp > 1}",
        f"--training.num_tokens_per_microbatch_per_dp_rank={job.micro_batch_size * job.seq_len}",
        f"--training.num_tokens_per_train_step={job.global_batch_size * job.seq_len}",
        f"--training.max_context_length={job.seq_len}",
    ]  # fmt: skip
    if p.pp > 1:
        schedule = "Interleaved1F1B" if p.vp > 1 else "1F1B"
        args.append(f"--parallelism.pipeline_parallel_schedule={schedule}")
        args.append(f"--parallelism.pipeline_parallel_layers_per_stage={_per_stage(model, p)}")
        args.append(f"--parallelism.num_pp_microbatches={_microbatches(p, job)}")
    if job.train_steps is not None:
        args.append(f"--training.steps={job.train_steps}")
    args.append("--checkpoint.enable=True")
    if job.checkpoint_every_steps is not None:
        args.append(f"--checkpoint.interval={job.checkpoint_every_steps}")
    if job.async_checkpoint:
        args.append("--checkpoint.async_mode=async")
    notes = [
        "TorchTitan takes the model and its defaults from a config_registry function"
        " ($MODULE, e.g. llama3, and $CONFIG); these overrides set the plan's layout and batch.",
    ]
    if precision.gemm_inputs != "bf16":
        notes.append(
            f"{precision.name}: TorchTitan's low-precision training is set in the config"
            " function's quantize section (torchao float8 / MX), not by these overrides."
        )
    if job.recompute != "none":
        notes.append(
            f"{job.recompute} recompute: set in the config function's activation_checkpoint"
            " section (its mode is a config class in TorchTitan 0.2.2)."
        )
    script = _launcher(p, job, {}, "-m torchtitan.train \\\n    " + _args_text(args))
    return JobConfig(
        "torchtitan", STACK_VERSIONS["torchtitan"], (("torchtitan.sbatch", script),),
        _flags(args), tuple(notes),
    )  # fmt: skip


def _per_stage(model: ModelSpec, p: Parallelism) -> int:
    return max(model.num_layers // (p.pp * p.vp), 1)


def _microbatches(p: Parallelism, job: JobPlan) -> int:
    return max(job.global_batch_size // (job.micro_batch_size * p.dp), 1)


# --- DeepSpeed ----------------------------------------------------------------------------------


def _deepspeed(
    model: ModelSpec, p: Parallelism, precision: Precision, job: JobPlan
) -> JobConfig | str:
    if p.tp > 1 or p.pp > 1 or p.cp > 1 or p.ep > 1:
        return (
            "DeepSpeed: tensor, pipeline, context and expert parallelism need Megatron-DeepSpeed"
            " (its model code), not a DeepSpeed config; this layout is written for Megatron-LM."
        )
    accumulation = _microbatches(p, job)
    config = {
        "train_batch_size": job.micro_batch_size * accumulation * p.dp,
        "train_micro_batch_size_per_gpu": job.micro_batch_size,
        "gradient_accumulation_steps": accumulation,
        "bf16": {"enabled": precision.activations == "bf16"},
        "fp16": {"enabled": precision.activations == "fp16"},
        "zero_optimization": {
            "stage": p.zero_stage,
            "overlap_comm": True,
            "contiguous_gradients": True,
        },
        "gradient_clipping": 1.0,
        "steps_per_print": 100,
    }
    names = [
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
        "bf16", "fp16", "enabled", "zero_optimization", "zero_optimization.stage",
        "zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients",
        "gradient_clipping", "steps_per_print",
    ]  # fmt: skip
    notes = []
    if precision.gemm_inputs not in ("bf16", "fp16"):
        notes.append(f"{precision.name}: DeepSpeed's config has no FP8 GEMM setting; bf16 set.")
    if job.recompute != "none":
        notes.append(
            "Activation checkpointing is the model's (transformers'"
            " gradient_checkpointing_enable, or deepspeed.checkpointing in the model code)."
        )
    entry = "train.py --deepspeed --deepspeed_config ds_config.json"
    script = _launcher(p, job, {}, entry)
    files = (("ds_config.json", json.dumps(config, indent=2) + "\n"), ("deepspeed.sbatch", script))
    return JobConfig("deepspeed", STACK_VERSIONS["deepspeed"], files, tuple(names), tuple(notes))
