"""Tensor-parallel communication overlapped with the GEMMs (``tp_comm_overlap``), as Transformer
Engine's userbuffers run it under Megatron-Core: what stays exposed, and what the overlap costs.

Each TP exchange of a layer rides beside the GEMM that produces or consumes it, in one of three
ways (Megatron-Bridge ``training/comm_overlap.py`` at v0.4.2, the ``userbuffers_*`` configs its
Llama, Qwen3 and GPT-OSS performance recipes pick):

- **ring exchange** (the column-parallel GEMMs' all-gather forward, ``qkv_fprop`` /
  ``fc1_fprop``; the row-parallel GEMMs' in the backward, ``proj_dgrad`` / ``fc2_dgrad``; and in
  the FP8 configs the forward reduce-scatter too): the GEMM runs in ``tp`` chunks, each while
  the next chunk moves peer to peer (copy engines, 1 SM): the first chunk's transfer is exposed;
- **pipeline** (the BF16 configs' forward reduce-scatter, ``proj_fprop`` / ``fc2_fprop``:
  ``num_splits=4``): the GEMM in 4 splits, each split's reduce-scatter behind the next split's
  GEMM, the last one exposed; the communication kernels take 24-32 (``proj``) and 8-16 (``fc2``)
  SMs, and ``set_sm_margin`` launches the GEMM without them;
- **bulk** (the backward's other halves, ``qkv_dgrad`` / ``fc1_dgrad`` and ``qkv_wgrad`` /
  ``fc1_wgrad``): the collective behind an independent GEMM, whole, on 2-16 (dgrad) and 4-32
  (wgrad; 24-32 for ``qkv``, 2-8 for ``fc1``) SMs.

So per pass of a layer, with ``c`` its TP traffic's time and ``g`` its forward GEMMs' time:

- forward (and a recomputed forward): ``max(phi c, c - g) + g s_row S_f / (N - S_f)``, with
  ``phi = (1/tp + 1/4) / 2`` (BF16: half the traffic ring-exchanged, half pipelined in 4) or
  ``1/tp`` (FP8: all ring-exchanged) and ``s_row`` the row-parallel GEMMs' share of ``g``;
- backward (``2 g`` of GEMMs): ``max(c / (2 tp), c - 2 g)`` plus each column-parallel GEMM's
  slowdown by its wgrad's and dgrad's bulk SMs.

A GEMM on ``N - S`` of a GPU's ``N`` SMs takes ``S / (N - S)`` longer. The SM counts are the
configs' (their middles where they vary); the shares come from the layer's own linears (dense,
TP-split, by FLOPs; routed experts are EP's, not overlapped here). The slowdown is counted with
the TP communication it pays for.
"""

from __future__ import annotations

from estimator.inputs.accelerator import Accelerator
from estimator.inputs.model import ModelSpec
from estimator.memo import per_model
from estimator.xp import Num, maximum, where

__all__ = ["SMS_BY_GENERATION", "overlapped_tp"]

PIPELINE_SPLITS = 4  # PipelineOverlapCfg num_splits, every config
# SMs the communication kernels take (the configs' values; middles where they vary)
FORWARD_RS_SMS_BF16 = 20  # proj_fprop 24-32, fc2_fprop 8-16 (pipeline)
FORWARD_RS_SMS_FP8 = 1  # proj_fprop / fc2_fprop RingExchangeOverlapCfg(num_sm=1)
WGRAD_SMS = {"attention": 24, "mlp": 4}  # qkv_wgrad 24-32, fc1_wgrad 2-8 (bulk)
DGRAD_SMS = {"attention": 4, "mlp": 2}  # qkv_dgrad 2-16, fc1_dgrad 2 (bulk)
# Streaming multiprocessors a GPU runs GEMMs on, by generation: A100 108 (NVIDIA A100 Tensor
# Core GPU Architecture whitepaper), H100 / H200 SXM 132 (NVIDIA H100 Tensor Core GPU
# Architecture whitepaper), B200 and B300 148 (as their CUDA device properties report: "NVIDIA
# B300 SXM6 AC, 148 SMs" in public benchmark logs; the same for B200's); others take Hopper's.
SMS_BY_GENERATION = {"ampere": 108, "hopper": 132, "blackwell": 148, "blackwell-ultra": 148}
DEFAULT_SMS = 132


@per_model
def _shares(model: ModelSpec, kind_index: int) -> tuple[float, float, float]:
    """(row-parallel, attention column-parallel, MLP column-parallel) shares of the dense
    TP-split GEMM FLOPs of the model's layer kind ``kind_index``."""
    flops = {"row": 0.0, "attention": 0.0, "mlp": 0.0}
    for linear in model.kinds[kind_index].linears:
        if linear.copies > 1 or linear.tp == "replicated":
            continue
        work = float(linear.in_features * linear.out_features)
        if linear.tp == "row":
            flops["row"] += work
        else:
            flops["attention" if linear.component == "attention" else "mlp"] += work
    total = sum(flops.values())
    if not total:
        return 0.0, 0.0, 0.0
    return flops["row"] / total, flops["attention"] / total, flops["mlp"] / total


def _slowdown(sms: int, n: int) -> float:
    return sms / (n - sms)


def overlapped_tp(
    model: ModelSpec,
    kind_index: int,
    acc: Accelerator,
    compute: str,
    tp: Num,
    comm: Num,
    gemm: Num,
) -> tuple[Num, Num]:
    """(a forward pass's, a backward pass's) exposed TP time of one layer of the model's layer
    kind ``kind_index`` whose
    TP traffic takes ``comm`` and forward GEMMs ``gemm`` a pass, overlapped as the module
    docstring says; ``compute`` is the GEMMs' format (BF16 / FP16 configs pipeline the forward
    reduce-scatter, the FP8 ones ring-exchange it)."""
    n = SMS_BY_GENERATION.get(acc.generation or "", DEFAULT_SMS)
    row, attention, mlp = _shares(model, kind_index)
    sixteen_bit = compute in ("bf16", "fp16")
    if sixteen_bit:
        floor = (1 / tp + 1 / PIPELINE_SPLITS) / 2
        forward_cost = row * _slowdown(FORWARD_RS_SMS_BF16, n)
    else:
        floor = 1 / tp
        forward_cost = row * _slowdown(FORWARD_RS_SMS_FP8, n)
    backward_cost = sum(
        share * (_slowdown(WGRAD_SMS[part], n) + _slowdown(DGRAD_SMS[part], n))
        for part, share in (("attention", attention), ("mlp", mlp))
    )
    forward = maximum(floor * comm, comm - gemm) + forward_cost * gemm
    backward = maximum(comm / (2 * tp), comm - 2 * gemm) + backward_cost * gemm
    overlapping = tp > 1
    return where(overlapping, forward, 0.0), where(overlapping, backward, 0.0)
