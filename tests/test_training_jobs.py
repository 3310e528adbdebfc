"""A training plan as a job (``estimator.layout.jobs``): every argument name written is one the
stack takes at the version named, checked offline against the vendored snapshot of its sources
(``tests/data/stack_args.json``, written by ``validation/stack_args.py``)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from estimator import Parallelism, get_model, get_precision
from estimator.layout.jobs import STACK_VERSIONS, JobConfig, JobPlan, training_jobs

SNAPSHOT = json.loads((Path(__file__).parent / "data" / "stack_args.json").read_text())

LAYOUTS = [
    ("llama-3-70b", Parallelism(tp=8, pp=4, dp=16, vp=5, sequence_parallel=True, zero_stage=1)),
    ("llama-3-8b", Parallelism(dp=64, zero_stage=3)),
    ("llama-3-8b", Parallelism(dp=8)),
    ("mixtral-8x7b", Parallelism(tp=2, pp=2, dp=8, ep=8, sequence_parallel=True)),
    ("llama-3.1-405b", Parallelism(tp=8, pp=8, dp=4, cp=2, sequence_parallel=True)),
]
PLAN = JobPlan(
    seq_len=8192, micro_batch_size=1, global_batch_size=512, recompute="selective",
    train_steps=1000, checkpoint_every_steps=50,
)  # fmt: skip


def jobs_of(
    model: str, parallel: Parallelism, precision: str = "bf16", plan: JobPlan = PLAN
) -> tuple[tuple[JobConfig, ...], tuple[str, ...]]:
    return training_jobs(get_model(model), parallel, get_precision(precision), plan)


def args_of(job: JobConfig) -> dict[str, Any]:
    """The launcher's arguments after the entry point, as flag -> value (True for a switch)."""
    script = dict(job.files)[f"{job.stack}.sbatch"]
    tokens = shlex.split(script.split("\n", 1)[1].split("srun torchrun", 1)[1].replace("\\\n", " "))
    out: dict[str, Any] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            key, _, value = tok.partition("=")
            nxt = tokens[i + 1] if i + 1 < len(tokens) else "--"
            out[key] = value or (True if nxt.startswith("--") else nxt)
    return out


def test_the_snapshot_names_its_sources() -> None:
    for stack, version in STACK_VERSIONS.items():
        entry = SNAPSHOT[stack]
        assert entry["version"] == version
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"])
        assert entry["repo"] and entry["paths"] and len(entry["names"]) > 40


@pytest.mark.parametrize("precision", ["bf16", "fp8", "mxfp8-params", "nvfp4"])
@pytest.mark.parametrize(("model", "parallel"), LAYOUTS)
def test_every_name_written_is_the_stacks_own(
    model: str, parallel: Parallelism, precision: str
) -> None:
    jobs, refused = jobs_of(model, parallel, precision)
    assert jobs, refused
    for job in jobs:
        known = set(SNAPSHOT[job.stack]["names"])
        unknown = [n for n in job.names if n not in known]
        assert not unknown, (job.stack, unknown)
    torchrun = {"--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id"}
    for job in jobs:
        if job.stack != "deepspeed":  # its entry point is the user's script
            written = set(args_of(job)) - torchrun - {"--deepspeed", "--deepspeed_config"}
            assert written <= set(job.names)


def test_megatron_takes_the_layout_as_planned() -> None:
    jobs, _ = jobs_of(*LAYOUTS[0])
    megatron = next(j for j in jobs if j.stack == "megatron")
    a = args_of(megatron)
    assert (a["--tensor-model-parallel-size"], a["--pipeline-model-parallel-size"]) == ("8", "4")
    assert a["--num-layers-per-virtual-pipeline-stage"] == str(80 // (4 * 5))
    assert a["--sequence-parallel"] is True and a["--use-distributed-optimizer"] is True
    assert (a["--micro-batch-size"], a["--global-batch-size"]) == ("1", "512")
    assert a["--recompute-granularity"] == "selective"
    assert (a["--num-query-groups"], a["--save-interval"], a["--train-iters"]) == (
        "8",
        "50",
        "1000",
    )
    script = dict(megatron.files)["megatron.sbatch"]
    assert "#SBATCH --nodes=64" in script and "--nnodes 64 --nproc-per-node 8" in script
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script


def test_zero3_runs_as_fsdp_on_each_stack_that_has_it() -> None:
    jobs, refused = jobs_of(*LAYOUTS[1])
    by = {j.stack: j for j in jobs}
    a = args_of(by["megatron"])
    assert a["--use-megatron-fsdp"] is True
    assert a["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert a["--ckpt-format"] == "fsdp_dtensor"  # Megatron-FSDP's own format
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in dict(by["megatron"].files)["megatron.sbatch"]
    t = args_of(by["torchtitan"])
    assert t["--parallelism.data_parallel_shard_degree"] == "64"
    assert t["--parallelism.data_parallel_replicate_degree"] == "1"
    assert t["--training.num_tokens_per_train_step"] == str(512 * 8192)
    ds = json.loads(dict(by["deepspeed"].files)["ds_config.json"])
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * 8 * 64
    assert not refused


def test_layouts_a_stack_cannot_run_are_refused_with_the_reason() -> None:
    _, refused = jobs_of(*LAYOUTS[0])
    assert any(r.startswith("DeepSpeed:") and "Megatron-DeepSpeed" in r for r in refused)
    assert any(r.startswith("TorchTitan: ZeRO-1") for r in refused)
    jobs, _ = jobs_of(*LAYOUTS[3])
    megatron = next(j for j in jobs if j.stack == "megatron")
    a = args_of(megatron)
    assert (a["--expert-model-parallel-size"], a["--num-experts"], a["--moe-router-topk"]) == (
        "8", "8", "2",
    )  # fmt: skip
    assert any("Megatron-Bridge" in n for n in megatron.notes)
