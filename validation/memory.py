"""Peak training memory per GPU: published measurements mapped to the estimator's inputs.

Reads ``validation/data/memory_measured.json`` (copied into the project with its sources, see
``validation/data/README.md``) and turns each record into a :class:`MemoryCase` or a
:class:`Skip` that says why it cannot be compared; every value a record does not publish and the
mapping had to choose is listed in the case's ``assumptions``. ``rows()`` evaluates the cases:
error = predicted / measured - 1, and whether the planner's ``fits`` agrees with what happened
(a run that went out of memory must not be called a fit). Nothing is fitted on these records.

What is compared with what. The sources publish different statistics of PyTorch's caching
allocator, none of which counts the CUDA context or NCCL's buffers (allocated outside it):

* ``allocated`` (``torch.cuda.max_memory_allocated``: LitGPT) and ``active``
  (``active_bytes.all.peak``: torchtune's optimization-flags table) are compared with the
  estimate's allocated terms (weights, gradients, master weights, optimizer states, activations,
  logits, gather and dequantization buffers);
* ``reserved`` (torchtitan and torchao log ``reserved_bytes.all.peak``) with those plus the
  fragmentation term (``FRAGMENTATION_FRACTION``, reserved minus allocated);
* torchtune's README tables before its flags table do not say which of the three statistics it
  logs they show: compared as allocated (two of the three are allocation-level);
* a statistic the source does not name (the Qwen table): the whole estimate.

``fits`` is always the planner's total (overheads included) against the card's capacity.

When a record is skipped. A run that used an option the estimator does not model (the
optimizer step fused into the backward, 8-bit or paged optimizer states of the whole model,
float8 casts outside full checkpointing, a GPTQ base, unpacked variable-length batches ...) is
skipped with that reason: nothing here bounds what the option does to the measured memory.
What the estimator models is mapped to its inputs (torch.compile to the ``compiled``
convention, TorchTitan's per-op checkpointing to ``recompute="op"``, chunked and compiled
losses, activation and FSDP CPU offload, TorchTitan's pipeline split). An unmodelled option
confined to one term of the estimate is bounded by that term (LitGPT's bf16 chunked
cross-entropy can only shrink the logits buffers; paged optimizer states leave the allocator's
statistics): the record is compared when the bounds add up to at most ``BOUND_SHARE`` of the
prediction, and lists them; a run that went out of memory has no error, only a fits call, which
such bounds (they can only shrink the prediction) leave as it is unless they could take the
total under the card.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

from estimator import (
    GIB,
    ModelSpec,
    Parallelism,
    Precision,
    SpecError,
    TrainingMemory,
    TrainingSetup,
    get_accelerator,
    get_model,
    get_precision,
    training_memory,
)
from estimator.counts.flops import Recompute
from estimator.finetune import FULL, FineTune, adapters, base_weight_bytes
from estimator.inputs.precision import DTYPES
from estimator.offload import NO_OFFLOAD, Offload
from validation.records import layout_of

__all__ = [
    "BOUND_SHARE",
    "DATA",
    "Bound",
    "MemoryCase",
    "MemoryRow",
    "Skip",
    "cases",
    "compared_bytes",
    "fits_summary",
    "memory_records",
    "rows",
    "skip_reasons",
]

DATA = Path(__file__).resolve().parent / "data" / "memory_measured.json"

# An unmodelled option bounded by one term of the estimate is accepted when the bounds add up to
# at most this share of the prediction: a quarter of the 8% median target, so what is
# not modelled cannot move an accepted record across it.
BOUND_SHARE = 0.02

Statistic = Literal["allocated", "reserved", "device"]
Record = Mapping[str, Any]


@dataclass(frozen=True)
class Bound:
    """An unmodelled option of the run (``label``, ``why`` it is bounded) and the most it can
    change the compared prediction."""

    label: str
    why: str
    bytes: float


@dataclass(frozen=True)
class MemoryCase:
    """One measured run's peak memory per GPU, as estimator inputs.

    ``statistic`` is what the source measured (``allocated``, ``active``, ``reserved`` ...),
    ``compared`` the part of the estimate it is compared with (see the module docstring).
    ``capacity_known`` is False where the source does not say which memory size the card had:
    the bytes are compared (the estimate does not depend on the card), ``fits`` is not judged.
    ``capacity_bytes`` is the card's memory where the catalog lacks the card but the source
    states its size (the bytes are compared on a catalog card of the kind; the fits call reads
    this). ``measured_gib`` is None for a run the source reports as out of memory (``oom``)."""

    id: str
    group: str
    framework: str
    model: ModelSpec
    accelerator: str
    capacity_known: bool
    parallel: Parallelism
    setup: TrainingSetup
    precision: Precision
    statistic: str
    compared: Statistic
    measured_gib: float | None
    oom: bool
    source: str
    assumptions: tuple[str, ...]
    bounds: tuple[Bound, ...] = ()
    capacity_bytes: float | None = None


@dataclass(frozen=True)
class Skip:
    """A record that is not compared, and every reason why (each ``category: detail``)."""

    id: str
    group: str
    reasons: tuple[str, ...]

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class MemoryRow:
    """One compared record: the prediction of the measured statistic and the planner's call."""

    id: str
    group: str
    framework: str
    statistic: str
    accelerator: str
    capacity_known: bool
    oom: bool
    measured_gib: float | None
    predicted_gib: float  # the estimate's part that the measured statistic counts
    total_gib: float  # the planner's total, overheads included
    capacity_gib: float
    fits: bool  # the planner's call
    # What the accuracy lookup (estimator.accuracy) matches a plan on, and where the record is from
    model: str = ""
    family: str = ""  # the model's model_type
    model_class: str = ""  # dense, moe or hybrid
    stack: str = ""  # the software stack profile whose behaviour the framework shares
    gpus: int = 0
    precision: str = ""
    source: str = ""
    layout: tuple[tuple[str, int], ...] = ()  # its parallel layout (``records.layout_of``)

    @property
    def error(self) -> float:
        """predicted / measured - 1 (a run that went out of memory has no measurement)."""
        if self.measured_gib is None:
            raise ValueError(f"{self.id}: out of memory, nothing measured")
        return self.predicted_gib / self.measured_gib - 1

    @property
    def fits_right(self) -> bool | None:
        """Whether the planner's call matches the run (None: the card's size is not known)."""
        return self.fits == (not self.oom) if self.capacity_known else None

    @property
    def over_capacity(self) -> float:
        """The planner's total over the card's capacity, minus 1 (> 0: it says no fit)."""
        return self.total_gib / self.capacity_gib - 1


class _Refused(Exception):
    """A record cannot become a case; the arguments are the Skip's reasons."""


# --- lookup tables ---------------------------------------------------------------------------

# The records' model names (before any parenthesis) -> catalog ids. torchtitan's "llama3 8B"
# flavor is Llama 3 8B's architecture (dim 4096, 32 layers, ffn 14336, vocab 128256).
_MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b",
    "meta-llama/Llama-3.2-3B": "llama-3.2-3b",
    "meta-llama/Llama-3.2-3B-Instruct": "llama-3.2-3b",
}

# The records' GPU names -> (catalog id or None, memory size known, assumption or Skip reason).
# An unstated memory size is not guessed: the estimate's bytes do not depend on the card, so the
# record is compared on a catalog card of that kind and its fits call is not judged.
_UNSTATED = "{} memory size not stated ({}): bytes compared, fits not judged"
_IMPLIED = "A100 80GB implied by {} (SXM or PCIe: the same 80 GB)"
_ACCELERATORS: dict[str, tuple[str | None, bool, str]] = {
    "NVIDIA GeForce RTX 4090 24GB": ("rtx-4090", True, ""),
    "NVIDIA A10G 24GB": ("a10g", True, ""),
    "NVIDIA A100-SXM4-80GB": ("a100-sxm-80gb", True, ""),
    "NVIDIA H200 141GB": ("h200-sxm-141gb", True, ""),
    "AMD Instinct MI300X 192GB": ("mi300x", True, ""),
    "NVIDIA B200 (power limited)": ("b200", True, ""),
    "NVIDIA A100 (memory size not stated)": (
        "a100-sxm-80gb",
        False,
        _UNSTATED.format("A100", "40 or 80 GB"),
    ),
    "NVIDIA A100 (size not stated)": ("a100-sxm-80gb", False, _UNSTATED.format("A100", "40/80")),
    "NVIDIA H100 (variant not stated)": (
        "h100-sxm-80gb",
        False,
        _UNSTATED.format("H100", "80, 94 or 96 GB"),
    ),
    "NVIDIA A100 (80GB implied by 44.8 GB peak; not stated)": (
        "a100-sxm-80gb",
        True,
        _IMPLIED.format("the measured 44.8 GB peak"),
    ),
    "NVIDIA A100 (80GB implied by the 70.4 GB peak)": (
        "a100-sxm-80gb",
        True,
        _IMPLIED.format("the measured 70.4 GB peak"),
    ),
    "NVIDIA A100 (80GB implied by the 60.0 GiB row; not stated)": (
        "a100-sxm-80gb",
        True,
        _IMPLIED.format("the same table's 60.0 GiB row"),
    ),
    "NVIDIA RTX A6000 48GB": (None, False, "RTX A6000 48GB"),
    "NVIDIA H100 SXM 96GB HBM2e (Grand Teton, 500W power limit)": (
        "h100-sxm-80gb",
        True,
        "H100 SXM 96GB HBM2e, not in the catalog: bytes compared on h100-sxm-80gb (the "
        "estimate's bytes do not depend on the card), fits judged against 96e9 bytes (89.4 GiB: "
        "the least a card labelled 96 GB holds; an 80 GB H100 reports 79.6 GiB)",
    ),
}
# Cards the catalog lacks whose memory the source states: the bytes the fits call reads.
# The stack profile (estimator.timing.stacks) whose behaviour each framework shares, for the
# accuracy lookup: torchtitan and torchtune shard with FSDP2 (fully_shard); LitGPT runs
# Lightning Fabric's FSDP1 strategy, which no profile describes.
_STACKS = {"torchtitan": "fsdp2", "torchtitan + torchao": "fsdp2", "torchtune": "fsdp2"}

_STATED_CAPACITY = {"NVIDIA H100 SXM 96GB HBM2e (Grand Teton, 500W power limit)": 96e9}

# LoRA target names of torchtune and LitGPT -> transformers' module names (Llama).
_MLP = ("gate_proj", "up_proj", "down_proj")
_TARGETS: dict[str, tuple[str, ...]] = {
    "q_proj": ("q_proj",),
    "k_proj": ("k_proj",),
    "v_proj": ("v_proj",),
    "output_proj": ("o_proj",),
    "mlp": _MLP,
    "mlp (w1,w2,w3)": _MLP,  # torchtune's w1/w3 (gate/up) and w2 (down)
    "query": ("q_proj",),  # LitGPT's fused qkv, by part
    "key": ("k_proj",),
    "value": ("v_proj",),
    "projection": ("o_proj",),
}

# torchtune's dtype=bf16 and LitGPT's bf16-true: weights, gradients and optimizer states in
# bf16, no fp32 master copy.
_PURE_BF16 = {"gradients": "bf16", "master_weights": None, "optimizer_states": "bf16"}
_PURE_BF16_FRAMEWORKS = ("torchtune", "LitGPT")

# LoRA dropout of the runs: torchtune's lora_llama2_* builders default to 0.05 at the commit of
# its May-2024 table (torchtune@0217d44c torchtune/models/llama2/_model_builders.py), one
# nn.Dropout per adapter (modules/peft/lora.py); LitGPT's config hub sets lora_dropout 0.05
# (config_hub/finetune/llama-2-7b/lora.yaml), one dropout for its fused qkv adapter.
_LORA_DROPOUT = {"torchtune_readme_2024_05": "per adapter", "litgpt_config_hub_benchmarks": "qkv"}
_LORA_DROPOUT_RATE = 0.05


# Runs whose layers were compiled but whose cross-entropy stayed eager (the compiled convention
# compiles both, as torchtune's recipes and TorchTitan since 2025-04 do):
# - TorchTitan compiles its loss from pytorch/torchtitan#1033 (bbb1b616, 2025-04-02); its
#   December 2024 benchmark (9dec370) and torchao's H100 table (torchao 890e0ac8, 2025-02-28,
#   added to the docs by pytorch/ao#1793 on 2025-03-12) ran before it;
# - torchtune@1814feb1 recipes/full_finetune_single_device.py:292 calls
#   ``training.compile_loss(self._loss_fn)`` and drops what it returns: an unchunked loss stays
#   eager (a chunked one is compiled in place, torchtune/training/_compile.py).
_EAGER_LOSS_GROUPS = {
    "torchtitan_benchmark_llama3_h100_202412": "TorchTitan at 9dec370 compiles the blocks only",
}
_BEFORE_COMPILED_LOSS = "TorchTitan before its compiled loss (pytorch/torchtitan#1033)"
_EAGER_LOSS_IDS = {
    "ao-h100-l3-8b-bf16": _BEFORE_COMPILED_LOSS,
    "ao-h100-l3-8b-fp8-tensorwise": _BEFORE_COMPILED_LOSS,
    "ao-h100-l3-8b-fp8-rowwise": _BEFORE_COMPILED_LOSS,
    "ttflags-l32-3b-full-compile": "torchtune's full recipe drops compile_loss's result",
}


def _loss_compiled(r: Record, compiled: bool, chunked: bool) -> tuple[bool, list[str]]:
    """Whether the run's cross-entropy was compiled, and why where it differs from its layers."""
    why = _EAGER_LOSS_IDS.get(str(r["id"])) or _EAGER_LOSS_GROUPS.get(str(r["group"]))
    if compiled and why and not chunked:
        return False, [f"layers compiled, cross-entropy eager: {why}"]
    return compiled, []


# What the records' sequence lengths are, where they are caps rather than lengths.
_GROUP_NOTES = {
    "torchtune_readme_2024_05": (
        "'Seq Length' read as every sequence's length; the stock configs train on alpaca, "
        "padded to each batch's longest sample (torchtune@0217d44c utils.padded_collate) and cut "
        "at max_seq_len, so the peak may have seen shorter sequences (not verified)"
    ),
    "litgpt_config_hub_benchmarks": (
        "max_seq_length 512 is a cap (batches padded to their longest sample): the peak is "
        "assumed to come from a batch that reaches it"
    ),
}


# --- loading and the estimate ----------------------------------------------------------------


@cache
def _load() -> tuple[Record, ...]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"{DATA.name}: expected an object with a list of records")
    return tuple(data["records"])


def memory_records() -> tuple[Record, ...]:
    """The raw records of ``memory_measured.json``, in file order."""
    return _load()


def compared_bytes(memory: TrainingMemory, compared: Statistic) -> float:
    """The part of an estimate a measured statistic counts: the allocated terms
    (``allocated``), those and the allocator's fragmentation (``reserved``), or everything
    (``device``: the CUDA context and NCCL buffers too)."""
    outside = memory.cuda_context_bytes + memory.comm_buffers_bytes
    if compared == "device":
        return memory.total_bytes
    if compared == "reserved":
        return memory.total_bytes - outside
    return memory.total_bytes - outside - memory.fragmentation_bytes


def _estimate(case: MemoryCase) -> TrainingMemory:
    acc = get_accelerator(case.accelerator)
    return training_memory(case.model, acc, case.parallel, case.setup, case.precision)


# --- record fields ---------------------------------------------------------------------------


def _statistic(r: Record) -> tuple[str, Statistic, list[str]]:
    """The measured statistic, the part of the estimate it is compared with, and what was
    assumed where the source does not say."""
    m = r["measured"]
    what = str(m["what"])
    if m["oom"]:  # nothing measured: the call reads the planner's total
        return "out of memory", "device", []
    if "max_memory_allocated" in what:
        return "allocated", "allocated", []
    if "active_bytes" in what:
        return "active", "allocated", ["active bytes compared with the allocated terms"]
    if "reserved" in what and not what.startswith("torchtune"):
        return "reserved", "reserved", []
    if what.startswith("torchtune peak memory stat"):
        return (
            "torchtune (unstated)",
            "allocated",
            ["which torchtune peak statistic the table shows is not stated: compared as allocated"],
        )
    if what.startswith("unknown statistic"):
        return "unknown", "device", ["statistic not stated: compared with the whole estimate"]
    raise ValueError(f"{r['id']}: unrecognized statistic {what!r}")


def _gpu(r: Record) -> tuple[str | None, bool, str]:
    gpu = str(r["gpu"])
    if gpu not in _ACCELERATORS:
        raise ValueError(f"{r['id']}: GPU {gpu!r} has no entry in _ACCELERATORS")
    return _ACCELERATORS[gpu]


def _refusals(r: Record) -> list[str]:
    """Every reason the record cannot be compared that its fields tell, ``category: detail``."""
    opts = r.get("options") or {}
    precision, optimizer = str(r.get("precision")), str(r.get("optimizer"))
    ac, unit = r.get("activation_checkpointing"), str(r["measured"].get("published_unit"))
    out = []
    name = str(r["model"]).split(" (")[0]
    if name not in _MODELS:
        out.append(f"model not in the catalog: {name}")
    acc_id, _, note = _gpu(r)
    if acc_id is None:
        out.append(f"accelerator not in the catalog: {note}")
    if r["group"] == "torchtune_readme_2024_05" and not opts.get("packed"):
        out.append(
            "sequence lengths not fixed: unpacked alpaca padded to each batch's longest sample "
            f"and cut at {r['seq_len']}, the table's 'Seq Length'; which lengths the peak saw is "
            "not published (torchtune's own unpacked alpaca baseline peaked at 25.5 GiB against "
            "60.0 GiB packed to the same 4096, README optimization-flags table)"
        )
    if "8bit" in optimizer or "8-bit" in optimizer:
        out.append(f"8-bit optimizer states: {optimizer.split(',')[0]}")
    elif "Paged" in optimizer and r.get("finetune") not in ("lora", "qlora"):
        out.append(
            "paged optimizer states of the whole model: bitsandbytes keeps them in CUDA unified "
            "memory, evicted under pressure and outside the allocator's statistics"
        )
    if _float8(r) and ac != "full":
        out.append(
            "float8 training without full checkpointing: torchao Float8Linear's saved fp8 casts "
            "and, under the per-op policy, its amax ops (abs and max are in torchtitan's save "
            "list) are not modelled"
        )
    if ac is None:
        out.append("layout not published: activation checkpointing and sharding unknown")
    if "GPTQ" in precision:
        out.append("GPTQ int4 base weights: the estimator's QLoRA is bitsandbytes NF4")
    if unit.startswith("G") and not unit.startswith(("GiB", "GB")) and not r["measured"]["oom"]:
        out.append(f"ambiguous unit: {unit!r} (GB or GiB; the data file copies it unconverted)")
    return out


def _float8(r: Record) -> bool:
    opts = r.get("options") or {}
    scaling = str(opts.get("float8_scaling", "none"))
    return bool(opts.get("float8")) or not scaling.startswith("none")


def _recompute(r: Record) -> tuple[Recompute, str]:
    ac = r["activation_checkpointing"]
    if ac is True or ac == "full":
        return "full", f"activation checkpointing {ac!r}: recompute full"
    if isinstance(ac, str) and ac.startswith("selective (per-op"):
        return "op", "torchtitan's per-op selective checkpointing: recompute 'op'"
    return "none", f"activation checkpointing {ac!r}: recompute none"


def _measured_notes(r: Record) -> list[str]:
    m = r["measured"]
    unit = str(m.get("published_unit"))
    if unit.startswith("GB (label"):
        return [f"labelled GB, read as GiB as the data file does: {m['what']}"]
    if unit == "GB":
        return [f"published {m['published_value']} GB, converted to GiB by the data file"]
    return []


def _layers(r: Record) -> int:
    return get_model(_MODELS[str(r["model"]).split(" (")[0]]).num_layers


def _torchtitan_split(layers: int, stages: int) -> tuple[int, ...]:
    """TorchTitan's default split points (``generate_split_points``, torchtitan@9dec370
    torchtitan/parallelisms/pipelining_utils.py): ``layers // stages`` on the first and last
    stages, one more on each middle stage while the remainder lasts."""
    base, extra = divmod(layers, stages)
    sizes = [base]
    for _ in range(stages - 2):
        sizes.append(base + (extra > 0))
        extra -= extra > 0
    return (*sizes, layers - sum(sizes))


def _layout(r: Record) -> tuple[Parallelism, Offload, str]:
    p, n = r["parallel"], int(r["num_gpus"])
    cpu = bool(p.get("fsdp_cpu_offload"))
    acts = bool((r.get("options") or {}).get("activation_offloading"))
    offload = Offload(optimizer=cpu, params=cpu, activations=acts) if cpu or acts else NO_OFFLOAD
    fsdp, deepspeed = p.get("fsdp"), str(p.get("deepspeed", ""))
    if n == 1:
        return Parallelism(), offload, "single GPU"
    if isinstance(fsdp, int):  # torchtitan: every degree given
        tp, pp, cp = (int(p.get(k) or 1) for k in ("tp", "pp", "cp"))
        vp = 2 if "Interleaved" in str(p.get("pp_schedule")) else 1
        split = _torchtitan_split(_layers(r), pp * vp) if pp > 1 else None
        layout = Parallelism(
            tp=tp,
            pp=pp,
            vp=vp,
            dp=fsdp,
            cp=cp,
            zero_stage=3,
            sequence_parallel=tp > 1,
            stage_layers=split,
        )
        note = f"FSDP2 {fsdp} x TP {tp} x PP {pp} x CP {cp}, FSDP as ZeRO-3"
        if split:
            note += f"; TorchTitan's generated pipeline split {split}"
        return layout, offload, note
    if isinstance(fsdp, str) and "full shard" in fsdp.lower().replace("_", " "):
        return Parallelism(dp=n, zero_stage=3), offload, f"FSDP full shard over {n}: ZeRO-3"
    if deepspeed.startswith(("ZeRO-2", "ZeRO-3")):
        stage = int(deepspeed[5])
        return Parallelism(dp=n, zero_stage=stage), offload, f"DeepSpeed ZeRO-{stage} over {n}"
    raise _Refused(f"layout not mapped: {p}")


def _finetune(r: Record) -> tuple[FineTune, list[str]]:
    method = r["finetune"]
    if method in ("full", "pretrain"):
        return FULL, []
    targets: list[str] = []
    for name in r["lora_targets"]:
        if name not in _TARGETS:
            raise _Refused(f"LoRA target not modelled: {name}")
        targets += _TARGETS[name]
    precision = str(r["precision"])
    double_quant = "bnb.nf4" not in precision or "nf4-dq" in precision
    dropout = _LORA_DROPOUT_RATE if str(r["group"]) in _LORA_DROPOUT else 0.0
    ft = FineTune(method, int(r["lora_rank"]), tuple(dict.fromkeys(targets)), double_quant, dropout)
    notes = [f"{method} r={ft.rank} on {', '.join(ft.targets or ())}, dropout {dropout}"]
    if method == "qlora":
        notes.append(f"NF4 base, double quantization {'on' if double_quant else 'off'}")
    return ft, notes


def _precision(r: Record) -> tuple[Precision, list[str]]:
    if not str(r["framework"]).startswith(_PURE_BF16_FRAMEWORKS):
        return get_precision("bf16"), ["bf16 mixed precision: fp32 master weights and moments"]
    roles = dict(_PURE_BF16)
    notes = ["pure bf16: bf16 weights and gradients, no fp32 master copy"]
    if "32-bit" in str(r.get("optimizer")):
        roles["optimizer_states"] = "fp32"
        notes.append("bitsandbytes' 32-bit PagedAdamW keeps fp32 moments")
    else:
        notes.append("AdamW moments in the parameters' dtype (bf16)")
    return get_precision(roles), notes


# --- bounded options and known differences ---------------------------------------------------


def _bounds(r: Record, case: MemoryCase, memory: TrainingMemory) -> list[Bound]:
    """Unmodelled options confined to one term of the estimate, that term their bound."""
    opts = r.get("options") or {}
    out = []
    if opts.get("lm_head_chunk_size"):  # torchtune's chunked loss is modelled (chunked_loss)
        why = (
            "LitGPT's chunked cross-entropy runs in the logits' dtype (bf16, no fp32 upcast): "
            "it can only shrink the logits buffers"
        )
        out.append(Bound("chunked logits", why, memory.logits_bytes))
    if "Paged" in str(r.get("optimizer")) and case.compared != "device":
        why = "bitsandbytes' paged states are CUDA unified memory, outside the allocator"
        out.append(Bound("paged optimizer states", why, memory.optimizer_states_bytes))
    return out


def _differences(case: MemoryCase) -> list[str]:
    """Known differences of the run inside the modelled configuration, with their size:
    listed, not bounded (the error shows them)."""
    notes = []
    model, setup = case.model, case.setup
    act_b = DTYPES[case.precision.activations].bytes
    if setup.finetune.frozen and _LORA_DROPOUT.get(case.group) == "qkv":
        # one dropout of the layer input for LitGPT's fused qkv adapter, one per adapter in
        # the estimate (PEFT's): the estimate keeps the extra q/k/v ones
        per_layer = adapters(model, setup.finetune).per_kind[0]
        qkv = [a for a in per_layer if a.module.endswith(("q_proj", "k_proj", "v_proj"))]
        inputs = sum(a.in_features for a in qkv[1:])
        layers = 1 if setup.recompute == "full" else model.num_layers
        extra = layers * setup.seq_len * setup.micro_batch_size * inputs * (act_b + 1)
        notes.append(
            "LoRA dropout 0.05 on LitGPT's fused qkv adapter drops its input out once; the "
            f"estimate (one dropout per adapter, as PEFT) keeps {extra / GIB:.2f} GiB more"
        )
    if case.group == "litgpt_config_hub_benchmarks" and setup.finetune.method == "qlora":
        more = model.vocab_size * model.hidden_size * (act_b - base_weight_bytes(setup.finetune))
        notes.append(
            "Lightning Fabric's BitsandbytesPrecision quantizes every nn.Linear, the output head "
            f"included; the estimator keeps the head in bf16 as transformers does: {more / GIB:.2f}"
            " GiB more"
        )
    return notes


# --- records -> cases ------------------------------------------------------------------------


def _case(r: Record) -> MemoryCase:
    refusals = _refusals(r)
    if refusals:
        raise _Refused(*refusals)
    acc_id, capacity_known, acc_note = _gpu(r)
    if acc_id is None:  # refused above
        raise _Refused(f"accelerator not in the catalog: {acc_note}")
    layout, offload, layout_note = _layout(r)
    finetune, finetune_notes = _finetune(r)
    precision, precision_notes = _precision(r)
    statistic, compared, statistic_notes = _statistic(r)
    recompute, recompute_note = _recompute(r)
    opts = r.get("options") or {}
    compiled = bool(opts.get("compile"))
    chunked = "Chunked" in str(opts.get("loss")) or bool(opts.get("lm_head_chunk_size"))
    compiled_loss, loss_notes = _loss_compiled(r, compiled, chunked)
    local = int(r["micro_batch_size"])  # per data-parallel rank, before pipeline micro-batching
    no_sync = bool(opts.get("no_sync_accumulation"))
    # one micro-batch a step but where the record gives its global batch (accumulation)
    gbs = int(r.get("global_batch_size") or local * layout.dp)
    setup = TrainingSetup(
        seq_len=int(r["seq_len"]),
        micro_batch_size=local // layout.pp,  # torchtitan's default: pp micro-batches
        global_batch_size=gbs,
        recompute=recompute,
        activation_convention="compiled" if compiled else "hf",
        finetune=finetune,
        offload=offload,
        chunked_loss=chunked,
        compiled_loss=compiled_loss,
        gradients_per_step=True,  # every framework here is PyTorch's, zero_grad(set_to_none)
        optimizer_in_backward=bool(opts.get("optimizer_in_bwd")),
        no_sync_accumulation=no_sync,
    )
    assumptions = [
        *([acc_note] if acc_note else []),
        layout_note,
        *(
            ["FSDP CPU offload: parameters, gradients and optimizer on the host"]
            if offload.params
            else []
        ),
        *(["activation offloading: saved activations on the host"] if offload.activations else []),
        *finetune_notes,
        *precision_notes,
        recompute_note,
        "torch.compile'd PyTorch modules with SDPA / flash attention: the compiled convention"
        if compiled
        else "eager PyTorch modules with SDPA / flash attention: the estimator's hf convention",
        *(["chunked output head and cross-entropy"] if chunked else []),
        *(
            [
                f"gradient accumulation over {gbs // (local * layout.dp)}"
                " micro-batches inside FSDP's no_sync (Lightning Fabric's no_backward_sync):"
                " the gradients held unsharded until the last"
            ]
            if no_sync
            else []
        ),
        *loss_notes,
        (
            "optimizer in the backward (torchtune's optimizer_in_bwd): each gradient freed as"
            " its parameter is stepped"
            if opts.get("optimizer_in_bwd")
            else "gradients freed between steps (PyTorch's zero_grad(set_to_none=True))"
        ),
        *(
            [
                "float8 training under full checkpointing, compared as bf16: torchao's "
                "Float8Linear only changes the recomputed layer (fp8 copies of its GEMM inputs and "
                "weights) and, with FSDP's float8 all-gather, the gathered weights: both can only "
                "shrink against the prediction"
            ]
            if _float8(r)
            else []
        ),
        *(
            [
                "TorchTitan's loss parallel (DTensor cross-entropy over the vocabulary shards) is "
                "counted as the eager loss on each rank's shard"
            ]
            if layout.tp > 1 and str(r["framework"]).startswith("torchtitan")
            else []
        ),
        *statistic_notes,
        *_measured_notes(r),
        *([_GROUP_NOTES[str(r["group"])]] if str(r["group"]) in _GROUP_NOTES else []),
    ]
    case = MemoryCase(
        id=str(r["id"]),
        group=str(r["group"]),
        framework=str(r["framework"]).split(" (")[0],
        model=get_model(_MODELS[str(r["model"]).split(" (")[0]]),
        accelerator=acc_id,
        capacity_known=capacity_known,
        parallel=layout,
        setup=setup,
        precision=precision,
        statistic=statistic,
        compared=compared,
        measured_gib=r["measured"]["peak_memory_gib_per_gpu"],
        oom=bool(r["measured"]["oom"]),
        source=str(r["source"]),
        assumptions=tuple(assumptions),
        capacity_bytes=_STATED_CAPACITY.get(str(r["gpu"])),
    )
    try:
        memory = _estimate(case)
    except SpecError as exc:
        raise _Refused(f"estimator refuses it: {exc}") from None
    bounds = _bounds(r, case, memory)
    bounded, prediction = sum(b.bytes for b in bounds), compared_bytes(memory, compared)
    if case.oom:  # nothing measured: a bound matters only if it could flip the fits call
        capacity = case.capacity_bytes or memory.capacity_bytes
        unsettled = memory.total_bytes > capacity >= memory.total_bytes - bounded
    else:
        unsettled = bounded > BOUND_SHARE * prediction
    if unsettled:
        largest = max(bounds, key=lambda b: b.bytes)
        raise _Refused(
            f"{largest.label} (bounded options over {BOUND_SHARE:.0%} of the prediction): "
            f"{bounded / GIB:.2f} GiB together, {bounded / prediction:.1%} of "
            f"{prediction / GIB:.2f} GiB; "
            + ", ".join(f"{b.label} up to {b.bytes / GIB:.2f} GiB ({b.why})" for b in bounds)
        )
    notes = [f"bounded, {b.label}: at most {b.bytes / GIB:.2f} GiB ({b.why})" for b in bounds]
    return replace(
        case, assumptions=(*assumptions, *notes, *_differences(case)), bounds=tuple(bounds)
    )


@cache
def _cases() -> tuple[MemoryCase | Skip, ...]:
    out: list[MemoryCase | Skip] = []
    for r in memory_records():
        try:
            out.append(_case(r))
        except _Refused as exc:
            out.append(Skip(str(r["id"]), str(r["group"]), tuple(str(a) for a in exc.args)))
    return tuple(out)


def cases() -> list[MemoryCase | Skip]:
    """One MemoryCase or Skip per record of ``memory_measured.json``, in file order."""
    return list(_cases())


# --- evaluation ------------------------------------------------------------------------------


def rows() -> tuple[list[MemoryRow], list[Skip]]:
    """Every compared record's prediction (out-of-memory runs included), and the skips."""
    out: list[MemoryRow] = []
    skipped: list[Skip] = []
    for case in cases():
        if isinstance(case, Skip):
            skipped.append(case)
            continue
        memory = _estimate(case)
        capacity = case.capacity_bytes or memory.capacity_bytes
        out.append(
            MemoryRow(
                id=case.id,
                group=case.group,
                framework=case.framework,
                statistic=case.statistic,
                accelerator=case.accelerator,
                capacity_known=case.capacity_known,
                oom=case.oom,
                measured_gib=case.measured_gib,
                predicted_gib=compared_bytes(memory, case.compared) / GIB,
                total_gib=memory.total_bytes / GIB,
                capacity_gib=capacity / GIB,
                fits=memory.fits if case.capacity_bytes is None else memory.total_bytes <= capacity,
                model=case.model.id,
                family=case.model.model_type,
                model_class=case.model.model_class,
                stack=_STACKS.get(case.framework, ""),
                gpus=case.parallel.num_gpus,
                precision=case.precision.name,
                source=case.source,
                layout=layout_of(case.parallel),
            )
        )
    return out, skipped


def fits_summary(found: list[MemoryRow]) -> dict[str, Any]:
    """How often the planner's fits call matches the run, over the records whose card size is
    known (out-of-memory runs included); the wrong calls; and how far over capacity the
    planner puts each run that went out of memory."""
    judged = [r for r in found if r.fits_right is not None]
    right = [r for r in judged if r.fits_right]
    return {
        "n": len(judged),
        "right": len(right),
        "rate": len(right) / len(judged) if judged else None,
        "oom_records": len([r for r in judged if r.oom]),
        "wrong": [r.id for r in judged if not r.fits_right],
        "not_judged": [r.id for r in found if r.fits_right is None],
        "oom_over_capacity": {r.id: r.over_capacity for r in found if r.oom},
    }


def skip_reasons(skipped: list[Skip]) -> dict[str, dict[str, int]]:
    """Each reason's category (the text before its first colon): how many skipped records give
    it, and for how many it is the only reason (what modelling it alone would bring in)."""
    out: dict[str, dict[str, int]] = {}
    for s in skipped:
        categories = list(dict.fromkeys(reason.split(":")[0] for reason in s.reasons))
        for category in categories:
            counts = out.setdefault(category, {"records": 0, "sole": 0})
            counts["records"] += 1
            counts["sole"] += len(categories) == 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1]["records"], kv[0])))


def main() -> None:
    """Print every compared record, the fits calls and the skips."""
    found, skipped = rows()
    for r in found:
        measured = "OOM" if r.measured_gib is None else f"{r.measured_gib:.2f}"
        error = "" if r.measured_gib is None else f"{r.error:+.1%}"
        print(
            f"{r.id:42} {r.statistic:21} {measured:>6} {r.predicted_gib:6.2f} {error:>7}"
            f"  total {r.total_gib:6.2f} of {r.capacity_gib:5.1f}  fits={r.fits}"
        )
    errors = [abs(r.error) for r in found if r.measured_gib is not None]
    if errors:
        print(f"median APE {statistics.median(errors):.1%} over {len(errors)}")
    print(fits_summary(found))
    for category, counts in skip_reasons(skipped).items():
        print(f"{counts['records']:3} ({counts['sole']} sole)  {category}")


if __name__ == "__main__":
    main()
