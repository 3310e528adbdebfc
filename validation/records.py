"""Published measurements mapped to the estimator's inputs, one case (or one skip) per record.

Reads ``validation/data/training_measured.json`` and ``inference_measured.json`` (copied into
the project with their sources, see ``validation/data/README.md``) relative to this file and
turns each record into a :class:`TrainingCase`, an :class:`InferenceCase` or a :class:`Skip`
that says in plain words why the record cannot be compared. Every value a record does not
publish and the mapping had to choose is listed in the case's ``assumptions``.

Sources and what their numbers mean:

* NVIDIA NeMo 24.07 and Megatron-Bridge performance summaries: measured tokens/s per GPU and
  model TFLOP/s per GPU of Megatron-Core pre-training (a few SFT/LoRA rows), full TP/PP/CP/VP/EP
  layout. Recompute policy is not published (for Megatron-Bridge 26.02-26.08 it is read from
  each record's recipe, as are its overlaps and MoE token dispatcher).
* MosaicML llm-foundry MPT benchmarks: PyTorch FSDP, throughput per GPU, activation
  checkpointing on or off.
* NeMo long-sequence context-parallel table: TFLOP/s per GPU only (no tokens/s, no micro-batch),
  so nothing is compared.
* TorchTitan's benchmark pages (pytorch/torchtitan ``benchmarks/``): tokens/s per GPU of FSDP2
  runs with TP / PP / CP and async TP, the layout, batch, checkpointing and float8 as given.
* TensorRT-LLM perf overview (v1.0): total output tokens/s of the whole TP x PP group in the
  offline max-throughput scenario.

Each case is checked against the estimator before it is returned (layout rules, sequence length,
batch divisibility, a tensor-core rate for the precision); a refused record becomes a Skip
carrying the estimator's message.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from estimator import (
    InferenceSetup,
    ModelSpec,
    Parallelism,
    SpecError,
    TrainingSetup,
    UnknownIdError,
    get_accelerator,
    get_model,
    get_precision,
    inference_memory,
    model_entry,
    model_from_config,
    training_memory,
)
from estimator.counts.flops import Recompute, training_flops
from estimator.finetune import FULL, FineTune
from estimator.inputs.precision import Precision
from estimator.layout.pipeline import SplitSettings, check_layout_mtp, model_split
from estimator.memory.activations import RECOMPUTE_MODULES
from estimator.offload import NO_OFFLOAD, Offload

__all__ = [
    "DATA",
    "InferenceCase",
    "Refused",
    "Skip",
    "TrainingCase",
    "inference_cases",
    "inference_records",
    "layout_of",
    "torchtitan_cases",
    "torchtitan_records",
    "training_cases",
    "training_records",
]

DATA = Path(__file__).resolve().parent / "data"

Record = Mapping[str, Any]


@dataclass(frozen=True)
class TrainingCase:
    """One measured training run, as estimator inputs."""

    id: str
    group: str
    model_name: str
    model: ModelSpec
    accelerator: str
    num_gpus: int
    gpus_per_node: int
    parallel: Parallelism
    setup: TrainingSetup
    precision: str
    measured_tokens_per_s_per_gpu: float
    measured_model_tflops_per_gpu: float | None
    source: str
    assumptions: tuple[str, ...]
    stack: str = "megatron-core"  # the software stack profile of the run's framework
    ep_comm_overlap: bool = False  # the expert all-to-all overlap its recipe sets
    tp_comm_overlap: bool = False  # the TP communication overlap its recipe sets
    moe_dispatcher: str | None = None  # the MoE token dispatcher its recipe sets (None: stack's)
    cuda_graphs: str | None = None  # what its recipe's CUDA graphs capture (None: the stack's)
    gradients: str | None = None  # the gradient dtype its recipe sets (None: the preset's)

    @property
    def training_precision(self) -> Precision:
        """The precision preset with the gradient buffers' dtype its recipe sets."""
        return _with_gradients(self.precision, self.gradients)


# The layout degrees a report row carries (``layout_of``): what the accuracy lookup
# (estimator.accuracy) reads a record's layout style from, dp-only, tp/pp or expert-parallel.
LAYOUT_FIELDS = ("tp", "pp", "cp", "ep", "dp", "zero_stage")


def layout_of(parallel: Parallelism) -> tuple[tuple[str, int], ...]:
    """A run's parallel layout as a report row carries it: its ``LAYOUT_FIELDS``, in order."""
    return tuple((name, int(getattr(parallel, name))) for name in LAYOUT_FIELDS)


def _with_gradients(precision: str, gradients: str | None) -> Precision:
    """A precision preset, its gradient buffers in ``gradients`` where a recipe sets them."""
    preset = get_precision(precision)
    return preset if gradients is None else replace(preset, gradients=gradients)


@dataclass(frozen=True)
class InferenceCase:
    """One measured serving run: one TP x PP replica, offline max-throughput."""

    id: str
    group: str
    model_name: str
    model: ModelSpec
    accelerator: str
    num_gpus: int
    tp: int
    pp: int
    ep: int
    precision: str | dict[str, str]
    input_len: int
    output_len: int
    measured_output_tokens_per_s: float
    measured_output_tokens_per_s_per_gpu: float
    source: str
    assumptions: tuple[str, ...]


@dataclass(frozen=True)
class Skip:
    """A record that is not compared, and why."""

    id: str
    group: str
    reason: str


class Refused(Exception):
    """A record cannot become a case; the message is the Skip reason."""


# --- lookup tables ---------------------------------------------------------------------------

# NeMo / Megatron-Bridge / TensorRT-LLM model names -> catalog ids.
_CATALOG_MODELS = {
    "LLAMA2-7B": "llama-2-7b",
    "LLAMA2-13B": "llama-2-13b",
    "LLAMA2-70B": "llama-2-70b",
    "LLAMA3-8B": "llama-3-8b",
    "LLAMA3_8B": "llama-3-8b",
    "LLAMA3-70B": "llama-3-70b",
    "LLAMA3_70B": "llama-3-70b",
    "LLAMA3.1_405B": "llama-3.1-405b",
    "DeepSeekV3": "deepseek-v3",
    "DeepSeekV3 (w/o MTP)": "deepseek-v3",
    "DeepSeekV3 (tokendrop)": "deepseek-v3",
    "DeepSeekV3 (dropless)": "deepseek-v3",
    "DeepSeekV4 Flash": "deepseek-v4-flash",
    "Qwen3_30B_a3B": "qwen3-30b-a3b",
    "Qwen3_30B_a3B (tokendrop)": "qwen3-30b-a3b",
    "Qwen3_235B_a22B": "qwen3-235b-a22b",
    "Llama 3.1 405B": "llama-3.1-405b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "DeepSeek-V3": "deepseek-v3",
    "DeepSeek-V4-Flash": "deepseek-v4-flash",
    "DeepSeek-V4-Pro": "deepseek-v4-pro",
    "Nemotron-8B": "nemotron-3-8b",
    "Nemotron-22B": "nemotron-3-22b",
    "Nemotron-340B": "nemotron-4-340b",
    "Nemotron_3_Nano": "nemotron-3-nano-30b-a3b",
    "Nemotron_3_Super": "nemotron-3-super-120b-a12b",
    "Nemotron_3_Ultra": "nemotron-3-ultra-550b-a55b",
    "Nemotron_3_5_Lightning": "nemotron-3.5-lightning-30b-a3b",
    "GPT OSS 120B": "gpt-oss-120b",
    "Kimi_K2": "kimi-k2-instruct",
    "Llama 4 Scout": "llama-4-scout-17b-16e-instruct",
    "Llama 4 Maverick": "llama-4-maverick-17b-128e-instruct",
}

# Llama 3.1 8B and Llama 3.3 70B share the Llama 3 8B / 70B architecture; only the context
# length (and its RoPE scaling, which changes no count) differs.
_LLAMA31_CONTEXT = {
    "Llama 3.1 8B": ("llama-3-8b", "llama-3.1-8b"),
    "Llama 3.3 70B": ("llama-3-70b", "llama-3.3-70b"),
}

# NeMo GPT-3 (launcher conf/training/gpt3/{5b,20b,175b}.yaml): layers, hidden, heads.
_GPT3 = {"GPT3-5B": (24, 4096, 32), "GPT3-20B": (44, 6144, 48), "GPT3-175B": (96, 12288, 96)}
_GPT2_BPE_VOCAB = 50257
_MAKE_VOCAB_DIVISIBLE_BY = 128
_GPT3_SOURCE = (
    "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/{5b,20b,175b}.yaml "
    "(num_layers, hidden_size, ffn 4h, heads, max_position_embeddings 2048, GPT2BPETokenizer, "
    "make_vocab_size_divisible_by 128, dropout 0.1) over NeMo's megatron_gpt_config.yaml "
    "defaults (learned absolute positions, LayerNorm and linear biases, GeLU, tied output)"
)

_ACCELERATORS = {
    "DGX-H100": "h100-sxm-80gb",
    "H100 SXM 80GB (DGX-H100)": "h100-sxm-80gb",
    "H100 SXM 80GB (DGX H100)": "h100-sxm-80gb",
    "h100_80gb": "h100-sxm-80gb",
    "H200 SXM 141GB (DGX H200)": "h200-sxm-141gb",
    "a100_40gb": "a100-sxm-40gb",
    "a100_80gb": "a100-sxm-80gb",
    "DGX-B200": "b200",
    "B200 180GB (DGX B200)": "b200",
    "DGX-B300": "b300",
    "DGX-GB200": "gb200",
    "GB200 (NVL72)": "gb200",
    "DGX-GB300": "gb300",
    "RTX 6000 Pro Blackwell Server Edition": "rtx-pro-6000-bse",
}
_NVL72 = ("gb200", "gb300")

_TRAINING_PRECISION = {
    "FP8": "fp8",
    "FP8-CS": "fp8",
    "FP8-DS": "fp8",
    "MXFP8": "mxfp8",
    "FP8-MX": "mxfp8",
    "NVFP4": "nvfp4",
    "BF16": "bf16",
    "bf16": "bf16",
    "amp_bf16": "bf16",
}
_SERVING_PRECISION = {"FP8": "fp8-serving", "FP4": "nvfp4-serving"}

_NEMO_GROUPS = ("nvidia_nemo_24.07_perf_summary", "nvidia_megatron_bridge_perf_summary")
_LONG_SEQUENCE_GROUP = "nvidia_nemo_long_sequence_cp"
_MOSAIC_GROUP = "mosaicml_llm_foundry_mpt_benchmarks"

_PRIMARY = re.compile(r"\s*([^()]*?)\s*(\(.*\))?\s*$")
# Megatron-Bridge's footnote markers (``661[^gpt-oss-note]``) and what each footnote says
# (docs/performance-summary-archive.md @ 067f987d, lines 90 and 292): a known regression is not
# the stack's throughput and is skipped; a row that only ran another layout is compared.
_FOOTNOTE = re.compile(r"\[\^([\w-]+)\]")
# Rows whose published layout is not the one their release's recipe runs, and cannot be: the
# recipe's is compared (the throughput matches the same recipe's rows of the releases before and
# after: 4,596 and 4,742 tokens/s for MXFP8, 6,798 and 7,397 for NVFP4, against these 4,798 and
# 7,002). Megatron-Bridge v0.4.0 (0fbfe7d3)
# scripts/performance/configs/llama/llama3_workload_base_configs.py: lines 219-223 and 225-231
# (micro_batch_size: WorkloadBaseConfig's default 1, scripts/performance/utils/utils.py:50).
_RECIPE_LAYOUTS: dict[str, tuple[dict[str, int], str]] = {
    "mbridge-26.02.01-LLAMA3_70B-DGX-GB300-64-MXFP8-L397": (
        {"pp": 4, "vp": 5, "micro_batch_size": 1},
        "the table's layout (micro-batch 2, PP 4, no virtual pipeline: 1.5x the GPU's memory on"
        " the planner's count) is not its recipe's; its recipe's is compared: micro-batch 1, PP"
        " 4, VP 5 (LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2, Megatron-Bridge v0.4.0"
        " llama3_workload_base_configs.py:219)",
    ),
    "mbridge-26.02.01-LLAMA3_70B-DGX-GB300-64-NVFP4-L397": (
        {"pp": 4, "vp": 5, "micro_batch_size": 1},
        "the table's layout (micro-batch 2, PP 1, no FSDP: the whole model's weights and"
        " gradients on each GPU, 2.8x its memory) is not its recipe's; its recipe's is compared:"
        " micro-batch 1, PP 4, VP 5 (LLAMA3_70B_PRETRAIN_CONFIG_GB300_NVFP4_V2, Megatron-Bridge"
        " v0.4.0 llama3_workload_base_configs.py:225)",
    ),
}

_FOOTNOTES = {
    "gpt-oss-note": (
        False,
        "the table's footnote: a known performance regression of that container"
        " (NVIDIA/cudnn-frontend#256: the Blackwell grouped-GEMM dGLU kernel 10x slower)",
    ),
    "nemotron-3-super-b200-nvfp4-note": (
        True,
        "the table's footnote: the MXFP8 layout did not fit with NVFP4, so the row ran another"
        " mapping (NVIDIA expects more once NVFP4 parameter gathers are supported)",
    ),
}

# Megatron-Bridge releases whose performance recipes were read for the expert all-to-all overlap
# (``moe_a2a_overlap`` of the workload base configs, ``overlap_moe_expert_parallel_comm`` of the
# flat recipes): each release read at the first tag whose docs/performance-summary.md lists it
# (the code as of its publication), the recipe of a record picked by its layout (GPUs, TP, PP,
# VP, EP, micro-batch and global batch). Records of these releases are compared with the overlap
# where their recipe sets it and without it where it does not; 25.11's runs are read in part
# (``_PARTLY_READ``, below).
_RELEASE = re.compile(r"\((\d+\.\d+(?:\.\d+)?) NeMo Container\)")
_MB = "NVIDIA-NeMo/Megatron-Bridge"
_CONFIGS = "scripts/performance/configs/{}_workload_base_configs.py"
_FLAT = "src/megatron/bridge/perf_recipes/{}"
_RECIPES_READ = {
    "26.02": f"{_MB}@v0.3.0 (21b02e0c) " + _CONFIGS,
    "26.02.01": f"{_MB}@v0.4.0 (0fbfe7d3) " + _CONFIGS,
    "26.04": f"{_MB}@v0.4.2 (c8101293) " + _CONFIGS,
    "26.04.01": f"{_MB}@v0.4.2 (c8101293) " + _CONFIGS,
    "26.06": f"{_MB}@v0.5.0 (fcbb6031) " + _CONFIGS,
    "26.06.01": f"{_MB}@v0.6.0 (51885cf1) " + _FLAT,
    "26.08": f"{_MB}@v0.6.0 (51885cf1) " + _FLAT,
}
_QWEN, _DEEPSEEK, _GPT_OSS = "qwen/qwen3", "deepseek/deepseek", "gpt_oss/gpt_oss"
_HYBRIDEP = "(_enable_hybridep_full_iteration_mxfp8)"
# The records whose recipe sets the overlap, with the recipe; every other MoE record of the
# releases read runs a recipe that leaves it off, but for _NO_RECIPE.
_EP_OVERLAP = {
    "mbridge-26.02-Qwen3_235B_a22B-DGX-B300-256-MXFP8-L534": (
        _QWEN,
        "QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_MX_V2",
    ),
    "mbridge-26.02-Qwen3_235B_a22B-DGX-H100-256-FP8-L534": (
        _QWEN,
        "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2",
    ),
    "mbridge-26.02.01-GPT OSS 120B-DGX-GB200-64-BF16-L429": (
        _GPT_OSS,
        "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2",
    ),
    "mbridge-26.02.01-Qwen3_235B_a22B-DGX-H100-256-FP8-L449": (
        _QWEN,
        "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2",
    ),
    "mbridge-26.04-Qwen3_235B_a22B-DGX-H100-256-FP8-L352": (
        _QWEN,
        "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2",
    ),
    "mbridge-26.04.01-DeepSeekV3-DGX-B200-256-MXFP8-L223": (
        _DEEPSEEK,
        "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2",
    ),
    "mbridge-26.04.01-GPT OSS 120B-DGX-GB200-64-BF16-L232": (
        _GPT_OSS,
        "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2",
    ),
    "mbridge-26.06-DeepSeekV3-DGX-GB300-256-MXFP8-L110-gbs4096": (
        _DEEPSEEK,
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2",
    ),
    "mbridge-26.06-DeepSeekV3-DGX-GB300-256-MXFP8-L110-gbs15360": (
        _DEEPSEEK,
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_GBS15360",
    ),
    "mbridge-26.06-Qwen3_30B_a3B-DGX-GB300-8-MXFP8-L127": (
        _QWEN,
        "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1",
    ),
    "mbridge-26.06-Qwen3_235B_a22B-DGX-GB200-256-MXFP8-L136": (
        _QWEN,
        "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2",
    ),
    "mbridge-26.06.01-DeepSeekV3-DGX-GB200-256-MXFP8-L48": (
        "deepseek/gb200/deepseek_v3.py",
        "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config (_enable_deepseek_full_iteration_mxfp8)",
    ),
    "mbridge-26.06.01-GPT OSS 120B-DGX-GB300-64-MXFP8-L55": (  # skipped: its footnote
        "gpt_oss/gb300/gpt_oss.py",
        "(_apply_gpt_oss_120b_full_iter_fp8mx_configs)",
    ),
    "mbridge-26.06.01-Qwen3_30B_a3B-DGX-GB200-8-MXFP8-L62": (
        "qwen/gb200/qwen3_moe.py",
        f"qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config {_HYBRIDEP}",
    ),
    "mbridge-26.08-Qwen3_30B_a3B-DGX-GB300-8-MXFP8-L64": (
        "qwen/gb300/qwen3_moe.py",
        f"qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config {_HYBRIDEP}",
    ),
    "mbridge-26.08-Qwen3_30B_a3B-DGX-GB200-8-MXFP8-L64": (
        "qwen/gb200/qwen3_moe.py",
        f"qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config {_HYBRIDEP}",
    ),
    "mbridge-26.08-Qwen3_235B_a22B-DGX-GB200-256-MXFP8-L71": (
        "qwen/gb200/qwen3_moe.py",
        f"qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config {_HYBRIDEP}",
    ),
}
# Records of a release read whose layout no recipe of that tag has: compared without the overlap.
_NO_RECIPE = {
    "mbridge-26.02.01-Qwen3_30B_a3B-DGX-H100-16-FP8-L439",
    "mbridge-26.02.01-Qwen3_235B_a22B-DGX-GB200-256-MXFP8-L449",
}


def _ep_overlap(ident: str, release: str, moe: bool) -> tuple[bool, list[str]]:
    """Whether the record's recipe overlaps the expert all-to-all, and the note that says
    where that was read (nothing for releases not read, or dense models)."""
    where = _RECIPES_READ.get(release)
    if where is None or not moe:
        return False, []
    if ident in _NO_RECIPE:
        return False, [
            f"expert all-to-all not overlapped: no recipe of {where.split(' ')[0]} has its layout"
        ]
    recipe = _EP_OVERLAP.get(ident)
    if recipe is None:
        return False, [f"expert all-to-all not overlapped, as its recipe: {where.format('*')}"]
    path, name = recipe
    return True, [
        f"expert all-to-all overlapped (ep_comm_overlap), as its recipe sets it:"
        f" {where.format(path)} {name}"
    ]


# TP communication overlap (Transformer Engine userbuffers) in the same releases' recipes: the
# Llama 3 / 3.1 pretraining recipes set it (src/megatron/bridge/recipes/llama/llama3.py:
# CommOverlapConfig(tp_comm_overlap=True, ...)) and the performance configs keep it but for
# NVFP4 (scripts/performance/configs/llama/llama3*_llm_pretrain.py: "tp_comm_overlap = False if
# precision == 'nvfp4'"), at every tag read; Qwen3-235B on H100 turns it off
# (qwen3_llm_pretrain.py: CommOverlapConfig(tp_comm_overlap=False)), the Nemotron 3 Super /
# Ultra recipes leave it unset. Only runs with TP > 1 overlap anything.
_TP_OVERLAP_MODELS = ("LLAMA3_70B", "LLAMA3.1_405B")


def _tp_overlap(
    release: str, name: str, task: str, precision: str, tp: int
) -> tuple[bool, list[str]]:
    """Whether the record's recipe overlaps its TP communication, and the note saying where
    that was read (nothing for releases not read, or runs without TP)."""
    where = _RECIPES_READ.get(release)
    if where is None or tp == 1:
        return False, []
    tag = where.split(" ")[0]
    if name in _TP_OVERLAP_MODELS and "pre" in task.lower() and precision.upper() != "NVFP4":
        return True, [
            f"TP communication overlapped (tp_comm_overlap), as its recipe sets it: {tag}"
            " recipes/llama/llama3.py and scripts/performance/configs/llama"
        ]
    return False, [f"TP communication not overlapped, as its recipe at {tag}"]


# The MoE token dispatcher of the same releases' MoE records (data/moe_dispatchers.json: each
# record's recipe, the line that sets its flex backend, or none: the all-to-all dispatcher).


def _dispatcher(ident: str, release: str, moe: bool) -> tuple[str | None, list[str]]:
    """The MoE token dispatcher the record's recipe sets and the note saying where it was read
    (None, nothing: releases not read, or dense models; the stack's dispatcher then)."""
    if release not in _RECIPES_READ or not moe:
        return None, []
    read = _readings("moe_dispatchers.json")[ident]
    backend = f" ({read['backend']})" if read["backend"] else ""
    where = f" ({read['set_at']})" if read["set_at"] else ": no flex backend set"
    unmatched = (
        ""
        if read["layout_match"]
        else " (no recipe of that tag has its layout; those of its GPU and precision agree)"
    )
    return read["dispatcher"], [
        f"MoE token dispatcher {read['dispatcher']}{backend}, as its recipe sets it:"
        f" {read['recipe']}{where}{unmatched}"
    ]


def _cuda_graphs(ident: str, release: str, moe: bool) -> tuple[str | None, list[str]]:
    """What the record's recipe captures in CUDA graphs (``none``, ``partial``, ``full``) and
    the note saying where it was read (None, nothing: releases not read, or dense models)."""
    if release not in _RECIPES_READ or not moe:
        return None, []
    read = _readings("cuda_graphs.json")[ident]
    graphs = {"full_iteration": "full"}.get(read["graphed"], read["graphed"])
    scope = read["cuda_graph_scope"] or read.get("cuda_graph_modules")
    captured = f", scope {scope}" if graphs == "partial" else ""
    where = f" ({read['set_at']})" if read["set_at"] else ": the default"
    return graphs, [
        f"CUDA graphs {graphs} (cuda_graph_impl {read['cuda_graph_impl']}{captured}), as its"
        f" recipe sets them: {read['recipe']}{where}"
    ]


def _recipe_graphs(args: Mapping[str, Any]) -> str:
    """What a Megatron-LM recipe's arguments capture in CUDA graphs."""
    impl, scope = args.get("cuda_graph_impl"), args.get("cuda_graph_scope")
    if scope == "full_iteration":
        return "full"
    return (
        "partial"
        if impl in ("transformer_engine", "local") or args.get("external_cuda_graph")
        else "none"
    )


@cache
def _readings(name: str) -> dict[str, dict[str, Any]]:
    """A file of recipe readings (``moe_dispatchers.json``, ``recompute_settings.json``,
    ``param_formats.json``) by record id."""
    data = json.loads((DATA / name).read_text(encoding="utf-8"))
    return {r["id"]: r for r in data["records"]}


# NeMo 25.11 ships Megatron-Bridge 0.2.0 (v0.2.0:docs/releases/software-versions.md), whose
# performance configs most of that release's rows do not match: data/recipes_25_11.json reads
# a setting only where a config of the tag has the row's layout, or where the tag's config for
# the row's GPU and precision agrees with a config that has it (an unmerged branch of the time,
# a later tag); the gradient buffers for every row (every family's perf function turns
# grad_reduce_in_fp32 off). What is null there keeps the assumptions of releases not read.
_PARTLY_READ = {"25.11": f"{_MB}@v0.2.0 (7af9601c)"}


@dataclass(frozen=True)
class _Early:
    """What data/recipes_25_11.json reads for a row (None: not read), with the notes."""

    graphs: str | None
    dispatcher: str | None
    modules: tuple[str, ...] | None
    overlap: bool | None
    gradients: str | None
    notes: tuple[str, ...]


def _early(ident: str, release: str, moe: bool) -> _Early | None:
    """The readings of a row of a release read in part (``_PARTLY_READ``), or None."""
    if release not in _PARTLY_READ:
        return None
    read = _readings("recipes_25_11.json")[ident]
    recipe = read["recipe"] or _PARTLY_READ[release]
    match = "" if read["layout_match"] else " (the tag's config for its GPU and precision)"
    notes: list[str] = []

    def at(key: str) -> str:
        return f" ({read[key]})" if read[key] else ""

    grads = None
    if read["grad_reduce_in_fp32"] is False:
        grads = "bf16"
        source = f"its release's recipe sets it: {recipe}{match}{at('grad_set_at')}"
        notes.append(_bf16_gradients(source))
    graphs = read["cuda_graphs"] if moe else None
    if graphs is not None:
        scope = f", scope {read['cuda_graph_scope']}" if graphs == "partial" else ""
        notes.append(
            f"CUDA graphs {graphs}{scope}, as its release's recipe sets them: {recipe}{match}"
            f"{at('graphs_set_at')}"
        )
    dispatcher = read["dispatcher"] if moe else None
    if dispatcher is not None:
        backend = f" ({read['backend']})" if read["backend"] else ""
        notes.append(
            f"MoE token dispatcher {dispatcher}{backend}, as its release's recipe sets it:"
            f" {recipe}{match}{at('dispatcher_set_at')}"
        )
    modules = read["recompute_modules"] if moe else None
    if modules is not None:
        what = f"selective recompute of {', '.join(modules)}" if modules else "no recomputation"
        notes.append(
            f"{what}, as its release's recipe sets it: {recipe}{match}{at('recompute_set_at')}"
        )
    overlap = read["ep_overlap"] if moe else None
    if overlap is not None:
        how = "overlapped (ep_comm_overlap)" if overlap else "not overlapped"
        notes.append(
            f"expert all-to-all {how}, as its release's recipe sets it: {recipe}{match}"
            f"{at('overlap_set_at')}"
        )
    if read["note"] and (graphs, dispatcher, modules, overlap) != (None, None, None, None):
        notes.append(f"how its release's recipe was read: {read['note']}")
    return _Early(
        graphs,
        dispatcher,
        None if modules is None else tuple(modules),
        overlap,
        grads,
        tuple(notes),
    )


# The gradient buffers of the same releases' records (data/grad_reduce.json: Megatron's
# grad_reduce_in_fp32 as each record's recipe leaves it; every one read turns it off).


def _gradients(ident: str, release: str) -> tuple[str | None, list[str]]:
    """The gradient dtype the record's recipe sets (bf16 where it turns grad_reduce_in_fp32
    off; None, the preset's fp32 main_grad, otherwise or where not read) and its note."""
    if release not in _RECIPES_READ:
        return None, []
    read = _readings("grad_reduce.json")[ident]
    where = f"{read['recipe']}" + (f" ({read['set_at']})" if read["set_at"] else "")
    if read["grad_reduce_in_fp32"]:
        return None, [f"gradients accumulated and reduced in fp32, as its recipe sets: {where}"]
    return "bf16", [_bf16_gradients(f"its recipe sets it: {where}")]


def _bf16_gradients(source: str) -> str:
    """The note of a record whose recipe keeps its gradients in bf16, ``source`` saying where."""
    return f"gradients accumulated and reduced in bf16 (grad_reduce_in_fp32 off), as {source}"


# The same releases' activation recomputation (data/recompute_settings.json: Megatron-Core's
# recompute_granularity and recompute_modules as each record's recipe leaves them).


def _recompute(ident: str, release: str) -> tuple[Recompute, tuple[str, ...], list[str]]:
    """The recomputation the record's recipe sets, its modules and the note saying where that
    was read; for releases not read, none (not published) and that assumption."""
    if release not in _RECIPES_READ:
        return "none", (), ["recompute policy not published: none assumed"]
    read = _readings("recompute_settings.json")[ident]
    where = f" ({read['set_at']})" if read["set_at"] else ""
    notes: list[str] = []
    if read["granularity"] == "selective" and read["modules"]:
        modules = tuple(read["modules"])
        return (
            "selective",
            modules,
            [
                f"selective recompute of {', '.join(modules)} (recompute_modules), as its recipe"
                f" sets it: {read['recipe']}{where}",
                *notes,
            ],
        )
    if read["granularity"] in (None, "selective"):  # selective with no modules: nothing
        return (
            "none",
            (),
            [
                f"no activation recomputation, as its recipe: {read['recipe']}{where}",
                *notes,
            ],
        )
    return (
        read["granularity"],
        (),
        [
            f"{read['granularity']} recompute, as its recipe sets it: {read['recipe']}{where}",
            *notes,
        ],
    )


# The same releases' parameter format (data/param_formats.json: whether each fp8 / MXFP8 / NVFP4
# record's recipe keeps the parameters quantized, Megatron's fp8_param_gather / fp4_param_gather,
# as Megatron-Bridge's mixed-precision presets and the recipes' overrides leave it).


def _param_format(ident: str, release: str, precision: str) -> tuple[str, list[str]]:
    """The precision preset of a low-precision record: ``<fmt>-params`` where its recipe keeps
    the parameters quantized, else the bf16 weights and weight cache of ``<fmt>``; and the note
    saying where that was read."""
    if precision not in ("fp8", "mxfp8", "nvfp4"):
        return precision, []
    if release not in _RECIPES_READ:
        return precision, [
            "parameter format not published: bf16 weights beside a quantized weight cache assumed"
        ]
    read = _readings("param_formats.json")[ident]
    where = f"{read['recipe']}" + (f" ({read['set_at']})" if read["set_at"] else "")
    if read["params_quantized"]:
        gather = "fp4_param_gather" if precision == "nvfp4" else "fp8_param_gather"
        return f"{precision}-params", [
            f"parameters kept in {precision} ({gather}), as its recipe sets it: {where}"
        ]
    return precision, [
        f"bf16 parameters beside a quantized weight cache, as its recipe leaves it: {where}"
    ]


# Megatron-Core's layer-wise CPU offloading as recompute_settings.json quotes a recipe's
# settings (activations only: cpu_offloading_weights=False)
_LAYER_OFFLOAD = re.compile(
    r"cpu_offloading=True, cpu_offloading_weights=False, cpu_offloading_num_layers=(\d+)"
)


def _offload(ident: str, release: str) -> tuple[Offload, list[str]]:
    """The activation offloading the record's recipe sets (recompute_settings.json's
    ``offload``): Megatron-Core's layer-wise offload of the first N layers as the estimator
    models it; any other (fine-grained offloading of named modules) is said, not modelled."""
    if release not in _RECIPES_READ:
        return NO_OFFLOAD, []
    read = _readings("recompute_settings.json")[ident]
    text = read["offload"]
    if not text:
        return NO_OFFLOAD, []
    if m := _LAYER_OFFLOAD.match(text):
        layers = int(m[1])
        return Offload(activations=True, activation_layers=layers), [
            f"the first {layers} layers' activations offloaded to the host"
            f" (offload_activation_layers), as its recipe sets it: {text}"
        ]
    return NO_OFFLOAD, [f"its recipe also offloads activations, not modelled here: {text}"]


# --- loading ---------------------------------------------------------------------------------


@cache
def _load(name: str) -> tuple[Record, ...]:
    data = json.loads((DATA / name).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{name}: expected a list of records")
    return tuple(data)


def training_records() -> tuple[Record, ...]:
    """The raw records of ``training_measured.json``, in file order."""
    return _load("training_measured.json")


def inference_records() -> tuple[Record, ...]:
    """The raw records of ``inference_measured.json``, in file order."""
    return _load("inference_measured.json")


def _unique_ids(records: tuple[Record, ...]) -> list[str]:
    """Record ids, made unique: a repeated id gets its global batch size (the only field that
    tells the two DeepSeek-V3 rows of one Megatron-Bridge table line apart), then a counter."""
    counts = Counter(str(r["id"]) for r in records)
    out: list[str] = []
    for r in records:
        ident = str(r["id"])
        if counts[ident] > 1:
            ident = f"{ident}-gbs{r.get('global_batch_size')}"
        base, n = ident, 2
        while ident in out:
            ident, n = f"{base}#{n}", n + 1
        out.append(ident)
    return out


# --- field helpers ---------------------------------------------------------------------------


def _primary(value: Any) -> tuple[str | None, bool]:
    """A table cell's first value and whether it carried a parenthesized alternative
    (Megatron-Bridge writes e.g. ``37556 (36108)`` for two configurations in one row)."""
    if value is None:
        return None, False
    if isinstance(value, int | float):
        return str(value), False
    match = _PRIMARY.match(str(value))
    if not match or not match.group(1) or match.group(1).lower() == "n/a":
        return None, bool(match and match.group(2))
    return match.group(1), bool(match.group(2))


def _int(value: Any, name: str, default: int | None = None) -> int:
    text, _ = _primary(value)
    if text is None:
        if default is None:
            raise Refused(f"{name} not published")
        return default
    try:
        number = float(text)
    except ValueError:
        raise Refused(f"{name}={value!r} is not a number") from None
    if not number.is_integer() or number < 0:
        raise Refused(f"{name}={value!r} is not a whole number")
    return int(number)


def _float(value: Any, name: str) -> float:
    text, _ = _primary(value)
    if text is None:
        raise Refused(f"{name} not published")
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise Refused(f"{name}={value!r} is not a number") from None


def _source(src: Any) -> str:
    if not isinstance(src, Mapping):
        return str(src)
    head = "/".join(str(src[k]) for k in ("repo", "path") if src.get(k))
    parts = [head or str(src.get("url", ""))]
    if src.get("commit"):
        parts.append(f"@ {src['commit']}")
    if src.get("line") is not None:
        parts.append(f"line {src['line']}")
    if src.get("table"):
        parts.append(f"table {src['table']!r}")
    if head and src.get("url"):
        parts.append(f"({src['url']})")
    return " ".join(parts)


def _accelerator(name: str, serving: bool = False) -> tuple[str, int, list[str]]:
    """Catalog id, GPUs per node (NVLink domain for NVL72 racks), assumptions."""
    acc_id = _ACCELERATORS.get(name)
    if acc_id is None:
        raise Refused(f"accelerator {name} not in the catalog")
    acc = get_accelerator(acc_id)
    if acc_id in _NVL72 and not serving:
        return (
            acc_id,
            acc.scale_up_domain,
            [
                f"{name}: an NVL72 rack; gpus_per_node = the catalog's scale-up domain "
                f"({acc.scale_up_domain} GPUs on one NVLink domain)"
            ],
        )
    notes = []
    if name.startswith("a100_"):
        notes.append("A100 form factor not stated by MosaicML: SXM (NVLink, 8 per node) assumed")
    return acc_id, 8, notes


def _catalog_model(name: str) -> ModelSpec:
    ident = _CATALOG_MODELS.get(name)
    if ident is None:
        raise Refused(f"model {name} not in the catalog")
    return get_model(ident)


def _gpt3_model(name: str, tp: int) -> tuple[ModelSpec, list[str]]:
    layers, hidden, heads = _GPT3[name]
    multiple = _MAKE_VOCAB_DIVISIBLE_BY * tp
    vocab = math.ceil(_GPT2_BPE_VOCAB / multiple) * multiple
    config = {
        "model_type": "gpt2",
        "n_embd": hidden,
        "n_layer": layers,
        "n_head": heads,
        "n_inner": 4 * hidden,
        "n_positions": 2048,
        "vocab_size": vocab,
        "activation_function": "gelu",
        "tie_word_embeddings": True,
        "attn_pdrop": 0.1,
        "resid_pdrop": 0.1,
    }
    ident = name.lower().replace("gpt3-", "gpt3-nemo-")
    return model_from_config(config, ident), [
        f"{name} read as a GPT-2-style decoder from {_GPT3_SOURCE}",
        f"vocabulary 50257 padded to a multiple of 128 x tp = {multiple}: {vocab} "
        "(NeMo 1.x padding; NeMo 2.0 pads to 128 only, < 0.01% of the parameters)",
    ]


def _mpt_model(record: Record) -> tuple[ModelSpec, list[str]]:
    mc = record["model_config"]
    config = {
        "model_type": "mpt",
        "d_model": mc["d_model"],
        "n_heads": mc["n_heads"],
        "n_layers": mc["n_layers"],
        "expansion_ratio": mc["expansion_ratio"],
        "max_seq_len": record["seq_len"],
        "vocab_size": mc["vocab_size"],
        "no_bias": True,
        "tie_word_embeddings": bool(mc.get("tie_word_embeddings", True)),
        "attn_config": {"alibi": True, "attn_pdrop": 0},
    }
    ident = str(record["model"]).lower()
    return model_from_config(config, ident), [
        "model read as transformers' MptForCausalLM (no biases, no position table) with "
        f"max_seq_len = seq_len; the benchmark's NumParams ({record['num_params_reported']:,}) "
        "is that count + (11 n_layers + 1) d_model + seq_len d_model exactly, i.e. llm-foundry's "
        "defaults (linear and LayerNorm biases, a learned position table) were trained; "
        "neither adds matmul FLOPs"
    ]


def _checked_training(
    model: ModelSpec,
    acc_id: str,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: str,
    gradients: str | None = None,
) -> None:
    acc = get_accelerator(acc_id)
    prec = _with_gradients(precision, gradients)
    try:
        acc.peak(prec.compute)
        training_memory(model, acc, parallel, setup, prec)
    except SpecError as exc:
        raise Refused(f"estimator refuses it: {exc}") from None


# --- training --------------------------------------------------------------------------------


def _nemo_case(r: Record, ident: str) -> TrainingCase:
    """NeMo 24.07 and Megatron-Bridge performance-summary rows (Megatron-Core)."""
    assumptions: list[str] = []
    name = str(r["model"])
    task = str(r.get("task") or "")
    finetune = FULL
    if task.lower() == "lora":
        finetune, lora_note = _nemo_lora(str(r["group"]))
        assumptions.append(lora_note)
    hw = r["hardware"]
    hw_name = str(hw.get("system") or hw.get("gpu"))
    num_gpus = _int(hw["num_gpus"], "GPU count")
    p = r["parallelism"]
    if ident in _RECIPE_LAYOUTS:  # the table's layout cannot have run: its recipe's is compared
        layout, why = _RECIPE_LAYOUTS[ident]
        p = {**p, **layout, "fsdp": 0}
        r = {**r, "micro_batch_size": layout["micro_batch_size"]}
        assumptions.append(why)
    tp = _int(p.get("tp"), "TP", 1)
    pp = _int(p.get("pp"), "PP", 1)
    cp = _int(p.get("cp"), "CP", 1)
    vp = _int(p.get("vp"), "VP", 1)
    ep = _int(p.get("ep"), "EP", 1)
    if name in _GPT3:
        model, notes = _gpt3_model(name, tp)
        assumptions += notes
    else:
        model = _catalog_model(name)
    acc_id, per_node, notes = _accelerator(hw_name)
    assumptions += notes
    raw_precision, alt = _primary(r.get("precision"))
    if raw_precision is None:
        raise Refused("precision not published")
    precision = _TRAINING_PRECISION.get(raw_precision)
    if precision is None:
        raise Refused(f"precision {raw_precision} has no preset")
    if alt:
        assumptions.append(
            f"row reports two configurations ({r['precision']}); the first ({raw_precision}) "
            "and its first throughput value are used"
        )
    if precision == "nvfp4":
        assumptions.append(
            "NVFP4 recipe modelled with every GEMM in NVFP4 (layers kept in higher precision "
            "are not published)"
        )
    if any(_primary(p.get(k))[1] for k in ("tp", "pp", "cp", "vp", "ep", "fsdp")):
        assumptions.append("parenthesized alternative layout ignored; first values used")
    if num_gpus % (tp * pp * cp):
        raise Refused(f"{num_gpus} GPUs is not a multiple of tp*pp*cp = {tp * pp * cp}")
    dp = num_gpus // (tp * pp * cp)
    fsdp = _int(p.get("fsdp"), "FSDP", 0)
    if p.get("fsdp") is None:
        assumptions.append("FSDP not published for this row: none assumed")
    etp = None
    if model.moe is not None and ep > 1:
        etp = _int(p.get("etp"), "ETP", 1)
        if p.get("etp") is None:
            assumptions.append(
                "expert tensor parallelism not published: etp = 1 (Megatron-Bridge recipes' "
                "expert_tensor_parallelism default)"
            )
    mtp = 0
    if name != "DeepSeekV3 (w/o MTP)" and name.startswith("DeepSeekV3"):
        mtp = 1
        assumptions.append(
            "1 multi-token-prediction depth trained, as Megatron-Bridge's DeepSeek-V3 recipe sets"
            " it (src/megatron/bridge/recipes/deepseek/deepseek_v3.py: mtp_num_layers 1 at"
            " v0.3.0-v0.6.0, also in its pipeline layouts' last stage)"
        )
    if name.startswith("DeepSeekV4"):
        mtp = 1
        assumptions.append(
            "1 multi-token-prediction depth trained (the provider reads the checkpoint's"
            " num_nextn_predict_layers): its published 706 model TFLOP/s at 7776 tokens/s is"
            " the planner's count with it (one more sliding-window layer, its 2h x h input"
            " projection and a second output head: 706), not without (666)"
        )
    repeated = name in _NEMOTRON_MTP
    if repeated:
        mtp = 2
        assumptions.append(
            "2 multi-token-prediction depths of one repeated attention + MoE module trained"
            f" (mtp_num_layers 2, mtp_use_repeated_layer), as {_NEMOTRON_MTP[name]} sets them;"
            " the module is kept in BF16 (keep_mtp_spec_in_bf16), timed here at the run's"
            " precision"
        )
    pipeline = _DEEPSEEK_V3_LAYOUTS.get((pp, vp)) if mtp and name.startswith("DeepSeekV3") else None
    try:
        split = (
            model_split(model, pp, vp, "layout", SplitSettings(layout=pipeline))
            if pipeline
            else model_split(model, pp, vp)
        )
        check_layout_mtp(split, mtp)
    except SpecError as exc:
        raise Refused(f"estimator refuses it: {exc}") from None
    if pipeline:
        assumptions.append(
            f"pipeline layout {pipeline}, as Megatron-Bridge's DeepSeek-V3 recipe sets it for"
            f" pp={pp}, vp={vp} (set_deepseek_v3_pipeline_model_parallel_layout, v0.3.0-v0.6.0)"
        )
    parallel = Parallelism(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=etp,
        vp=vp,
        sequence_parallel=tp > 1,
        zero_stage=3 if fsdp else 0,
        distributed_optimizer=not fsdp,
        stage_layers=None if split is None else split.stage_layers,
    )
    if split is not None:
        assumptions.append(
            f"pipeline split not published: the planner's auto split, {split.description}"
        )
    assumptions.append(f"dp = GPUs / (tp*pp*cp) = {dp}")
    if fsdp:
        assumptions.append(f"FSDP column {p.get('fsdp')}: Megatron FSDP modelled as ZeRO-3")
    else:
        assumptions.append("Megatron distributed optimizer (optimizer states sharded over DP)")
    if tp > 1:
        assumptions.append("sequence parallelism on (tp > 1)")
    if task.upper() == "SFT":
        assumptions.append(
            "SFT (full fine-tuning on packed sequences) modelled as pre-training on "
            "seq_len-token sequences; packing limits attention to each sample, so attention "
            "work is over-counted"
        )
    if "tokendrop" in name or "dropless" in name:
        assumptions.append("token-drop / dropless routing not modelled (balanced routing)")
    release = _RELEASE.search(str(r.get("framework") or ""))
    overlap, notes = _ep_overlap(ident, release[1] if release else "", model.moe is not None)
    tp_overlap, tp_notes = _tp_overlap(
        release[1] if release else "", name, task, raw_precision or "", tp
    )
    dispatcher, dispatcher_notes = _dispatcher(
        ident, release[1] if release else "", model.moe is not None
    )
    graphs, graph_notes = _cuda_graphs(ident, release[1] if release else "", model.moe is not None)
    dispatcher_notes += graph_notes
    recompute, modules, recompute_notes = _recompute(ident, release[1] if release else "")
    offload, offload_notes = _offload(ident, release[1] if release else "")
    recompute_notes += offload_notes
    gradients, gradient_notes = _gradients(ident, release[1] if release else "")
    recompute_notes += gradient_notes
    early = _early(ident, release[1] if release else "", model.moe is not None)
    if early is not None:
        graphs = early.graphs if early.graphs is not None else graphs
        dispatcher = early.dispatcher if early.dispatcher is not None else dispatcher
        overlap = early.overlap if early.overlap is not None else overlap
        gradients = early.gradients or gradients
        if early.modules is not None:
            recompute = "selective" if early.modules else "none"
            modules = early.modules
            recompute_notes = [n for n in recompute_notes if not n.startswith("recompute policy")]
        recompute_notes += list(early.notes)
    quantized, param_notes = _param_format(ident, release[1] if release else "", precision)
    if finetune is FULL:
        precision = quantized
    elif quantized != precision:  # the estimator refuses LoRA on a quantized base
        param_notes = [
            f"{param_notes[0]}; LoRA on a base kept in {precision} is not modelled: a bf16 base"
            " beside the weight cache is assumed (its weights take more memory than the run's)"
        ]
    notes += param_notes
    notes += tp_notes + dispatcher_notes
    return _case(
        r,
        ident,
        name,
        model,
        (acc_id, num_gpus, per_node),
        parallel,
        precision,
        recompute,
        [*assumptions, *recompute_notes, *notes],
        finetune=finetune,
        ep_comm_overlap=overlap,
        tp_comm_overlap=tp_overlap,
        moe_dispatcher=dispatcher,
        cuda_graphs=graphs,
        recompute_modules=modules,
        offload=offload,
        mtp_layers=mtp,
        mtp_repeated=repeated,
        gradients=gradients,
    )


def _nemo_lora(group: str) -> tuple[FineTune, str]:
    """The LoRA a NeMo / Megatron-Bridge LoRA row ran: the framework's defaults (the tables
    publish no adapter settings), rank 32 either way."""
    if group == "nvidia_nemo_24.07_perf_summary":
        return FineTune("lora", rank=32, targets=("q_proj", "k_proj", "v_proj")), (
            "LoRA settings not published: NeMo 1.x's defaults assumed (adapter_dim 32 on the"
            " fused attention_qkv, modelled as q/k/v adapters; recalled, not verified)"
        )
    return FineTune("lora", rank=32, targets=("all-linear",)), (
        "LoRA settings not published: Megatron-Bridge's LoRA defaults (dim 32 on linear_qkv,"
        " linear_proj, linear_fc1, linear_fc2; megatron/bridge/peft/lora.py), modelled as"
        " all-linear adapters (separate q/k/v and gate/up: slightly more adapter FLOPs)"
    )


def _mosaic_case(r: Record, ident: str) -> TrainingCase:
    """MosaicML llm-foundry MPT throughput table rows (Composer, PyTorch FSDP)."""
    hw = r["hardware"]
    acc_id, per_node, assumptions = _accelerator(str(hw["gpu"]))
    num_gpus = _int(hw["num_gpus"], "GPU count")
    model, notes = _mpt_model(r)
    assumptions += notes
    p = r["parallelism"]
    strategy = p.get("sharding_strategy")
    zero = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}.get(str(strategy))
    if zero is None:
        raise Refused(f"FSDP sharding strategy {strategy} has no ZeRO equivalent")
    parallel = Parallelism(tp=1, pp=1, dp=num_gpus, zero_stage=zero)
    precision = _TRAINING_PRECISION.get(str(r.get("precision")))
    if precision is None:
        raise Refused(f"precision {r.get('precision')} not published or has no preset")
    recompute: Recompute = "full" if r.get("activation_checkpointing") else "none"
    assumptions += [
        f"FSDP {strategy} modelled as ZeRO-{zero}, tp = pp = 1, dp = {num_gpus}",
        f"{r.get('precision')} (FSDP mixed_precision {r.get('mp_mode')}) modelled by the bf16 "
        "preset (fp32 master weights and AdamW states)",
        f"activation_checkpointing={r.get('activation_checkpointing')} -> recompute {recompute}",
        "attention kernel: FlashAttention-2 (llm-foundry's flash attention; these tables predate "
        "FlashAttention-3)",
    ]
    return _case(
        r,
        ident,
        str(r["model"]),
        model,
        (acc_id, num_gpus, per_node),
        parallel,
        precision,
        recompute,
        assumptions,
        tokens_key="throughput_tokens_per_s_per_gpu",
        stack="llm-foundry",
    )


# The Nemotron 3 recipes that train two depths of one repeated MTP module, where each is read
# (Megatron-Bridge; the Nano recipes train none).
_NEMOTRON_MTP = {
    "Nemotron_3_Super": "Megatron-Bridge's Nemotron 3 Super pretraining recipe"
    " (src/megatron/bridge/recipes/nemotronh/nemotron_3_super.py nemotron_3_super_pretrain_config"
    " at v0.4.2 and v0.5.0; h100/nemotron_3_super.py at v0.6.0, which the perf recipes build on)",
    "Nemotron_3_Ultra": "Megatron-Bridge's Nemotron 3 Ultra pretraining recipe"
    " (src/megatron/bridge/recipes/nemotronh/h100/nemotron_3_ultra.py at v0.6.0, which the perf"
    " recipes build on)",
    "Nemotron_3_5_Lightning": "Megatron-Bridge's GB200 perf recipe"
    " (src/megatron/bridge/perf_recipes/nemotronh/gb200/nemotronh.py at v0.6.0, pattern *E)",
}

# Megatron-Bridge's DeepSeek-V3 pipeline layouts by (pp, vp), with its one MTP depth (m) on the
# last stage (src/megatron/bridge/recipes/deepseek/deepseek_v3.py
# set_deepseek_v3_pipeline_model_parallel_layout, the same at v0.3.0-v0.6.0).
_DEEPSEEK_V3_LAYOUTS = {
    (4, 1): "Et*16|t*16|t*16|t*13mL",
    (8, 1): "Et*8|(t*8|)*6t*5mL",
    (4, 2): "Et*8|(t*8|)*6t*5mL",
    (16, 1): "Et*4|(t*4|)*14tmL",
    (8, 2): "Et*4|(t*4|)*14tmL",
    (4, 4): "Et*4|(t*4|)*14tmL",
}


def _case(
    r: Record,
    ident: str,
    name: str,
    model: ModelSpec,
    hardware: tuple[str, int, int],
    parallel: Parallelism,
    precision: str,
    recompute: Recompute,
    assumptions: list[str],
    tokens_key: str = "tokens_per_s_per_gpu",
    stack: str = "megatron-core",
    finetune: FineTune = FULL,
    ep_comm_overlap: bool = False,
    tp_comm_overlap: bool = False,
    moe_dispatcher: str | None = None,
    recompute_modules: tuple[str, ...] = (),
    offload: Offload = NO_OFFLOAD,
    cuda_graphs: str | None = None,
    mtp_layers: int = 0,
    mtp_repeated: bool = False,
    gradients: str | None = None,
) -> TrainingCase:
    """A training record's case from what its reader made of it (``hardware``: accelerator id,
    GPUs, GPUs per node), once the core accepts the layout; measured throughput under
    ``tokens_key``."""
    acc_id, num_gpus, per_node = hardware
    setup = TrainingSetup(
        seq_len=_int(r["seq_len"], "sequence length"),
        micro_batch_size=_int(r.get("micro_batch_size"), "micro-batch size"),
        global_batch_size=_int(r.get("global_batch_size"), "global batch size"),
        recompute=recompute,
        finetune=finetune,
        recompute_modules=recompute_modules,
        offload=offload,
        mtp_layers=mtp_layers,
        mtp_repeated=mtp_repeated,
    )
    _checked_training(model, acc_id, parallel, setup, precision, gradients)
    measured = r["measured"]
    tflops = measured.get("model_tflops_per_gpu")
    for note in _FOOTNOTE.findall(" ".join(str(v) for v in measured.values())):
        compared, text = _FOOTNOTES[note]
        if not compared:
            raise Refused(text)
        assumptions = [*assumptions, text]
    if isinstance(tflops, str):
        tflops = _FOOTNOTE.sub("", tflops)
    return TrainingCase(
        id=ident,
        group=str(r["group"]),
        model_name=name,
        model=model,
        accelerator=acc_id,
        num_gpus=num_gpus,
        gpus_per_node=per_node,
        parallel=parallel,
        setup=setup,
        precision=precision,
        measured_tokens_per_s_per_gpu=_float(measured.get(tokens_key), "tokens/s"),
        measured_model_tflops_per_gpu=None if tflops is None else _float(tflops, "TFLOP/s"),
        source=_source(r["source"]),
        assumptions=tuple(assumptions),
        stack=stack,
        ep_comm_overlap=ep_comm_overlap,
        tp_comm_overlap=tp_comm_overlap,
        moe_dispatcher=moe_dispatcher,
        cuda_graphs=cuda_graphs,
        gradients=gradients,
    )


def _training_case(r: Record, ident: str) -> TrainingCase:
    group = str(r.get("group"))
    if group == _LONG_SEQUENCE_GROUP:
        raise Refused("reports TFLOP/s only")
    if group in _NEMO_GROUPS:
        return _nemo_case(r, ident)
    if group == _MOSAIC_GROUP:
        return _mosaic_case(r, ident)
    raise Refused(f"group {group} has no mapping")


_Case = TypeVar("_Case")


def _map_records(
    records: tuple[Record, ...], convert: Callable[[Record, str], _Case]
) -> tuple[_Case | Skip, ...]:
    """Each record converted, or a Skip carrying why it cannot be."""
    out: list[_Case | Skip] = []
    for r, ident in zip(records, _unique_ids(records), strict=True):
        try:
            out.append(convert(r, ident))
        except (Refused, UnknownIdError) as exc:
            out.append(Skip(ident, str(r.get("group")), str(exc)))
    return tuple(out)


@cache
def _training_cases() -> tuple[TrainingCase | Skip, ...]:
    return _map_records(training_records(), _training_case)


def training_cases() -> list[TrainingCase | Skip]:
    """One TrainingCase or Skip per record of ``training_measured.json``, in file order."""
    return list(_training_cases())


@cache
def _moe_recipe_cases() -> tuple[TrainingCase | Skip, ...]:
    return _map_records(moe_recipe_records(), _moe_recipe_case)


def moe_recipe_cases() -> list[TrainingCase | Skip]:
    """One TrainingCase or Skip per record of ``moe_recipes_measured.json``, in file order."""
    return list(_moe_recipe_cases())


def all_training_cases() -> list[TrainingCase | Skip]:
    """Every published training run: ``training_cases``, ``moe_recipe_cases``, then
    ``torchtitan_cases``."""
    return [*_training_cases(), *_moe_recipe_cases(), *_torchtitan_cases()]


# --- TorchTitan's benchmark pages (FSDP2) ----------------------------------------------------
# data/torchtitan_throughput.json: tokens/s per GPU of TorchTitan runs (FSDP2 with TP / PP / CP
# / async TP) from the pages in pytorch/torchtitan's benchmarks/, the layout as each page gives
# it; compared under the fsdp2 stack profile, whose compute factor is fitted on them.

_TORCHTITAN_GROUP = "torchtitan_benchmarks"
_TORCHTITAN_MODELS = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
}
_TORCHTITAN_GPUS = {
    "NVIDIA H100 SXM 96GB HBM2e (Grand Teton, 500W power limit)": (
        "h100-sxm-80gb",
        "H100 SXM 96GB HBM2e at a 500 W power limit (Grand Teton), not in the catalog: timed as"
        " h100-sxm-80gb (700 W, HBM3); the page says its peak lies between SXM's and NVL's",
    ),
    "NVIDIA H200 141GB": ("h200-sxm-141gb", "H200 141GB read as the catalog's H200 SXM"),
}


def torchtitan_records() -> tuple[Record, ...]:
    """The records of ``torchtitan_throughput.json``, in file order."""
    data = json.loads((DATA / "torchtitan_throughput.json").read_text(encoding="utf-8"))
    return tuple(data["records"])


def _torchtitan_layout(r: Record, layers: int) -> tuple[Parallelism, str]:
    """The page's degrees as a layout: FSDP as ZeRO-3 over its degree, TorchTitan's split
    points for a pipeline (two stages a rank for Interleaved 1F1B)."""
    from validation.memory import _torchtitan_split  # one reading of TorchTitan's split

    p = r["parallel"]
    fsdp, tp, pp, cp = (_int(p.get(k), k, 1) for k in ("fsdp", "tp", "pp", "cp"))
    vp = 2 if "Interleaved" in str(p.get("pp_schedule")) else 1
    split = _torchtitan_split(layers, pp * vp) if pp > 1 else None
    layout = Parallelism(
        tp=tp, pp=pp, vp=vp, dp=fsdp, cp=cp, zero_stage=3, sequence_parallel=tp > 1,
        stage_layers=split,
    )  # fmt: skip
    note = f"FSDP2 {fsdp} x TP {tp} x PP {pp} x CP {cp}: FSDP as ZeRO-3 over {fsdp}"
    if split:
        note += f"; TorchTitan's split points {split} ({p.get('pp_schedule')}, vp {vp})"
    return layout, note


def _torchtitan_case(r: Record, ident: str) -> TrainingCase:
    """A TorchTitan benchmark row (FSDP2): its layout, batch, checkpointing and float8."""
    name = str(r["model"])
    model = get_model(_TORCHTITAN_MODELS[name])
    acc_id, acc_note = _TORCHTITAN_GPUS[str(r["gpu"])]
    layout, layout_note = _torchtitan_layout(r, model.num_layers)
    opts = r.get("options") or {}
    precision = "fp8" if opts.get("float8") else "bf16"
    ac = str(r["activation_checkpointing"])
    recompute: Recompute = "full" if ac == "full" else "op"
    local = _int(r["micro_batch_size"], "local batch")
    setup = TrainingSetup(
        seq_len=_int(r["seq_len"], "sequence length"),
        micro_batch_size=local // layout.pp,  # TorchTitan's default: pp micro-batches
        global_batch_size=_int(r["global_batch_size"], "global batch size"),
        recompute=recompute,
        activation_convention="compiled" if opts.get("compile") else "hf",
        gradients_per_step=True,
    )
    _checked_training(model, acc_id, layout, setup, precision)
    assumptions = [
        acc_note,
        layout_note,
        f"activation checkpointing {ac!r}: recompute {recompute}",
        "float8 (torchao Float8Linear, tensorwise scaling): the fp8 preset's GEMMs"
        if opts.get("float8")
        else "bf16 (FSDP2 MixedPrecisionPolicy, fp32 reduction): the bf16 preset",
        "async TP (torch's symmetric-memory micro-pipelining): timed as TP communication overlap"
        if opts.get("async_tp")
        else "TP communication not overlapped (vanilla TP)",
        f"torch.compile {'on' if opts.get('compile') else 'off'}: not distinguished in the"
        " step time (the fitted compute factor carries the group's mix)",
    ]
    return TrainingCase(
        id=ident,
        group=_TORCHTITAN_GROUP,
        model_name=name,
        model=model,
        accelerator=acc_id,
        num_gpus=_int(r["num_gpus"], "GPU count"),
        gpus_per_node=8,
        parallel=layout,
        setup=setup,
        precision=precision,
        measured_tokens_per_s_per_gpu=_float(r["measured"]["tokens_per_s_per_gpu"], "tokens/s"),
        measured_model_tflops_per_gpu=None,
        source=_source(r["source"]),
        assumptions=tuple(assumptions),
        stack="fsdp2",
        tp_comm_overlap=bool(opts.get("async_tp")),
    )


@cache
def _torchtitan_cases() -> tuple[TrainingCase | Skip, ...]:
    return _map_records(torchtitan_records(), _torchtitan_case)


def torchtitan_cases() -> list[TrainingCase | Skip]:
    """One TrainingCase or Skip per record of ``torchtitan_throughput.json``, in file order."""
    return list(_torchtitan_cases())


# --- Megatron-LM's MoE recipes ---------------------------------------------------------------
# data/moe_recipes_measured.json: NVIDIA's self-contained MoE training recipes (Megatron-LM dev,
# examples/moe_recipes), each with its measured median model TFLOP/s per GPU. The YAML's
# Megatron-LM arguments are the whole configuration; the throughput is Megatron's own FLOP
# count per second, converted here to tokens/s with the planner's FLOPs per token.

_MOE_RECIPES_GROUP = "megatron_lm_moe_recipes"
_RECIPE_GPUS = {"H100": "DGX-H100", "B200": "DGX-B200", "B300": "DGX-B300",
                "GB200": "DGX-GB200", "GB300": "DGX-GB300"}  # fmt: skip
_RECIPE_PRECISION = {"bf16": "bf16", "fp8": "fp8", "fp8-blockwise": "fp8", "mxfp8": "mxfp8"}


def moe_recipe_records() -> tuple[Record, ...]:
    """The records of ``moe_recipes_measured.json``, in file order, with its source."""
    data = json.loads((DATA / "moe_recipes_measured.json").read_text(encoding="utf-8"))
    src = data["source"]
    return tuple({**r, "source": {**src, "line": r["readme_line"]}} for r in data["records"])


def _listed(value: Any) -> tuple[str, ...]:
    """A Megatron-LM list argument as its YAML gives it: a list or one space-separated string."""
    if value is None:
        return ()
    return tuple(value.split()) if isinstance(value, str) else tuple(str(v) for v in value)


def _moe_recipe_case(r: Record, ident: str) -> TrainingCase:
    """A Megatron-LM MoE recipe as the estimator's inputs, every setting from its arguments;
    what the planner does not model is said."""
    args: Mapping[str, Any] = r["args"]
    name = str(r["model"])
    model = _catalog_model(name)
    acc_id, per_node, assumptions = _accelerator(_RECIPE_GPUS[str(r["hardware"]["gpu"])])
    num_gpus = _int(r["hardware"]["num_gpus"], "GPU count")
    p = r["parallelism"]
    tp, pp, cp, ep = (_int(p.get(k), k.upper(), 1) for k in ("tp", "pp", "cp", "ep"))
    vp = _int(p.get("vp"), "VP", 1)
    if num_gpus % (tp * pp * cp):
        raise Refused(f"{num_gpus} GPUs is not a multiple of tp*pp*cp = {tp * pp * cp}")
    dp = num_gpus // (tp * pp * cp)
    layout = args.get("pipeline_model_parallel_layout")
    mtp = _int(args.get("mtp_num_layers") or 0, "MTP layers", 0)
    try:
        split = (
            model_split(model, pp, vp, "layout", SplitSettings(layout=layout))
            if layout
            else (model_split(model, pp, vp))
        )
        check_layout_mtp(split, mtp)
    except SpecError as exc:
        raise Refused(f"estimator refuses it: {exc}") from None
    if args.get("use_megatron_fsdp"):
        raise Refused("Megatron-FSDP recipe: its sharding strategy is not read")
    parallel = Parallelism(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=_int(p.get("etp"), "ETP", 1),
        vp=vp,
        sequence_parallel=bool(args.get("sequence_parallel", tp > 1)) and tp > 1,
        distributed_optimizer=bool(args.get("use_distributed_optimizer")),
        stage_layers=None if split is None else split.stage_layers,
    )
    if split is not None:
        assumptions.append(
            f"pipeline split {split.description}"
            + (f" (pipeline_model_parallel_layout {layout})" if layout else " (auto)")
        )
    fmt = str(r["precision"])
    precision = _RECIPE_PRECISION.get(fmt)
    if precision is None:
        raise Refused(f"precision {fmt} has no preset")
    if fmt == "fp8-blockwise":
        assumptions.append("FP8 with 128-element block scaling modelled as per-tensor fp8")
    if precision != "bf16" and args.get("fp8_param_gather"):
        precision = f"{precision}-params"
        assumptions.append(f"parameters kept in {fmt} (fp8_param_gather), as its arguments set")
    modules = _listed(args.get("recompute_modules"))
    recompute: Recompute = "none"
    granularity = args.get("recompute_granularity")
    if granularity == "full":
        recompute = "full"
    elif granularity == "selective":
        recompute = "selective"
        unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
        if unknown:
            assumptions.append(
                f"recompute module(s) {', '.join(unknown)} not modelled (DeepSeek-V4's"
                " hyper-connections): not recomputed here"
            )
        modules = tuple(m for m in modules if m in RECOMPUTE_MODULES)
    dispatcher = "flex" if args.get("moe_token_dispatcher_type") == "flex" else "alltoall"
    backend = args.get("moe_flex_dispatcher_backend")
    assumptions.append(
        f"MoE token dispatcher {args.get('moe_token_dispatcher_type')}"
        + (f" ({backend})" if backend else "")
        + ", as its arguments set"
    )
    graphs = _recipe_graphs(args)
    assumptions.append(
        f"CUDA graphs {graphs} (cuda_graph_impl {args.get('cuda_graph_impl')}, scope"
        f" {args.get('cuda_graph_scope')}), as its arguments set"
    )
    if mtp:
        assumptions.append(f"{mtp} multi-token-prediction depth(s) trained, as its arguments set")
    offloaded = ", ".join(_listed(args.get("offload_modules")))
    unmodelled = [
        text
        for on, text in (
            (args.get("cuda_graph_impl") not in (None, "none"), "CUDA graphs"),
            (bool(args.get("moe_paged_stash")), "paged stash of the expert activations"),
            (
                bool(args.get("fine_grained_activation_offloading")),
                f"fine-grained activation offloading of {offloaded}",
            ),
        )
        if on
    ]
    if unmodelled:
        assumptions.append(f"not modelled: {', '.join(unmodelled)}")
    assumptions.append(
        "mock data with forced load balancing (moe_router_force_load_balancing): balanced"
        " routing, as modelled"
    )
    tflops = float(r["measured"]["model_tflops_per_gpu"])
    seq = _int(r["seq_len"], "sequence length")
    flops = training_flops(model, seq, mtp=mtp)
    per_token = float(flops.forward + flops.backward) / seq
    assumptions.append(
        f"measured {tflops:g} model TFLOP/s per GPU (Megatron's count) read as"
        f" {tflops * 1e12 / per_token:,.0f} tokens/s per GPU at the planner's"
        f" {per_token / 1e9:.2f} GFLOP per token (on NVIDIA's Megatron-Bridge runs of Qwen3 MoE the"
        " two counts agree within 1%)"
    )
    record = {
        **r,
        "measured": {"tokens_per_s_per_gpu": tflops * 1e12 / per_token,
                     "model_tflops_per_gpu": tflops},
    }  # fmt: skip
    return _case(
        record,
        ident,
        name,
        model,
        (acc_id, num_gpus, per_node),
        parallel,
        precision,
        recompute,
        [*assumptions, f"dp = GPUs / (tp*pp*cp) = {dp}"],
        moe_dispatcher=dispatcher,
        cuda_graphs=graphs,
        ep_comm_overlap=bool(args.get("overlap_moe_expert_parallel_comm")),
        tp_comm_overlap=bool(args.get("tp_comm_overlap")) and tp > 1,
        recompute_modules=modules if recompute == "selective" else (),
        mtp_layers=mtp,
    )


# --- inference -------------------------------------------------------------------------------


def _serving_model(name: str) -> tuple[ModelSpec, list[str]]:
    if name in _LLAMA31_CONTEXT:
        base, ident = _LLAMA31_CONTEXT[name]
        config = dict(model_entry(base)["config"])
        config["max_position_embeddings"] = 131072
        config["rope_scaling"] = model_entry("llama-3.1-405b")["config"].get("rope_scaling")
        return model_from_config(config, ident), [
            f"{name} read as catalog {base} (same architecture) with Llama 3.1's "
            "max_position_embeddings 131072 and llama3 RoPE scaling"
        ]
    return _catalog_model(name), []


def _inference_case(r: Record, ident: str) -> InferenceCase:
    name = str(r["model"])
    model, assumptions = _serving_model(name)
    hw = r["hardware"]
    acc_id, _, notes = _accelerator(str(hw["gpu"]), serving=True)
    assumptions += notes
    num_gpus = _int(hw["num_gpus"], "GPU count")
    p = r["parallelism"]
    tp = _int(p.get("tp"), "TP", 1)
    pp = _int(p.get("pp"), "PP", 1)
    if tp * pp != num_gpus:
        raise Refused(f"tp*pp = {tp * pp} differs from the {num_gpus} GPUs of the row")
    ep = 1
    if model.moe is not None and tp > 1:
        ep = tp
        assumptions.append(
            f"expert parallelism not published (the MoE command passes --ep with attention "
            f"data parallelism): ep = tp = {tp}, attention modelled as TP"
        )
    raw_precision = str(r.get("precision"))
    precision = _SERVING_PRECISION.get(raw_precision)
    if precision is None:
        raise Refused(f"precision {raw_precision} has no serving preset")
    assumptions.append(
        f"{raw_precision} ModelOpt checkpoint modelled by the {precision} preset "
        "(quantized linear weights, FP8 KV cache, bf16 activations)"
    )
    workload = r["workload"]
    input_len = _int(workload.get("input_len"), "input length")
    output_len = _int(workload.get("output_len"), "output length")
    layout = Parallelism(tp=tp, pp=pp, ep=ep)
    acc = get_accelerator(acc_id)
    prec = get_precision(precision)
    try:
        acc.peak(prec.compute)
        inference_memory(model, acc, layout, InferenceSetup(input_len, output_len, 1), prec)
    except SpecError as exc:
        raise Refused(f"estimator refuses it: {exc}") from None
    total = _float(r["measured"].get("total_output_tokens_per_s"), "output tokens/s")
    return InferenceCase(
        id=ident,
        group=str(r["group"]),
        model_name=name,
        model=model,
        accelerator=acc_id,
        num_gpus=num_gpus,
        tp=tp,
        pp=pp,
        ep=ep,
        precision=precision,
        input_len=input_len,
        output_len=output_len,
        measured_output_tokens_per_s=total,
        measured_output_tokens_per_s_per_gpu=total / num_gpus,
        source=_source(r["source"]),
        assumptions=tuple(assumptions),
    )


@cache
def _inference_cases() -> tuple[InferenceCase | Skip, ...]:
    return _map_records(inference_records(), _inference_case)


def inference_cases() -> list[InferenceCase | Skip]:
    """One InferenceCase or Skip per record of ``inference_measured.json``, in file order."""
    return list(_inference_cases())
