"""CPU offload: what moves to host memory, what the GPU keeps, and what the moves cost.

Three switches, as the frameworks offer them:

- **optimizer** (DeepSpeed ZeRO-Offload ``offload_optimizer: cpu``, Megatron-Core
  ``--optimizer-cpu-offload``, FSDP ``CPUOffload``): the fp32 master weights and the optimizer
  states live in host memory and the optimizer step runs on the CPU (DeepSpeed's CPU Adam).
  Each step the GPU's gradient shard goes down the host link and its updated weights come back
  up (with ZeRO stage 2 or 3, DeepSpeed's and FSDP's offload, the gradient shard itself lives in
  host memory; Megatron's distributed optimizer keeps its gradient buffer on the GPU); the CPU
  reads and writes, per parameter, the fp32 gradient (4 bytes read), master weight
  (4 + 4), two Adam moments (8 + 8) and writes the 16-bit weight sent back (2):
  ``CPU_ADAM_BYTES_PER_PARAM`` = 30 bytes, at the host's memory bandwidth (ZeRO-Offload,
  Ren et al. 2021, Sec. 4: the optimizer step is memory-bound on the CPU). The transfers and
  the CPU step are counted exposed, after the backward (ZeRO-Offload's one-step delayed update
  that hides them is off by default).
- **params** (ZeRO-3 ``offload_param: cpu``, FSDP ``CPUOffload(offload_params=True)``): the
  GPU's shard of the weights lives in host memory and comes up the link before each use
  (forward, backward and a full recompute), prefetched behind the previous layer's compute;
  ZeRO-3 only (DeepSpeed requires stage 3 for it).
- **activations** (activation offloading, as torchtune's ``enable_activation_offloading`` and
  Megatron-Core's fine-grained activation offloading): the tensors saved for backward go down
  the link during the forward and come back during the backward, overlapped with compute; the
  GPU keeps the layer being computed and the next one in flight. ``activation_layers`` offloads
  the first that many transformer layers only, as Megatron-Core's layer-wise CPU offloading
  (``--cpu-offloading-num-layers``, Transformer Engine's ``get_cpu_offload_context``: each
  offloaded layer's saved tensors go down as the forward leaves it and are prefetched back,
  double-buffered, as the backward nears it); the GPU keeps the other layers' and, at least,
  two layers' worth. Megatron-Core refuses it with pipeline parallelism and with activation
  recomputation, and for as many layers as the model has or more; so does the planner.

The host (``catalog/hosts.json``): link bandwidth per direction, host memory per GPU and host
memory bandwidth per GPU from the accelerator's reference system, or a stated default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from estimator.catalog.files import load
from estimator.errors import SpecError

__all__ = ["CPU_ADAM_BYTES_PER_PARAM", "NO_OFFLOAD", "Host", "Offload", "host_of"]

CPU_ADAM_BYTES_PER_PARAM = 4 + 2 * 4 + 2 * 2 * 4 + 2


@dataclass(frozen=True, slots=True)
class Offload:
    optimizer: bool = False
    params: bool = False
    activations: bool = False
    activation_layers: int | None = None  # the first N layers only (None: every layer)
    # Overrides of the catalog's host figures (None: the catalog's, or the default)
    host_link_gb_per_s: float | None = None
    host_memory_gb_per_gpu: float | None = None
    host_memory_gb_per_s: float | None = None
    any: bool = field(init=False, default=False)  # something is offloaded (derived)

    def __post_init__(self) -> None:
        object.__setattr__(self, "any", self.optimizer or self.params or self.activations)


NO_OFFLOAD = Offload()


@dataclass(frozen=True, slots=True)
class Host:
    """One GPU's share of its host: link bytes/s per direction, memory bytes and bytes/s."""

    link: str
    link_bytes_per_s: float
    memory_bytes: float
    memory_bytes_per_s: float
    assumed: bool  # neither the catalog nor the request gave the figures

    def note(self) -> str:
        where = "assumed (no reference host in the catalog)" if self.assumed else "the catalog's"
        return (
            f"Offload over {self.link} at {self.link_bytes_per_s / 1e9:g} GB/s per direction, "
            f"{self.memory_bytes / 1e9:g} GB of host memory and "
            f"{self.memory_bytes_per_s / 1e9:g} GB/s of host memory bandwidth per GPU, {where}."
        )


def host_of(accelerator_id: str, offload: Offload = NO_OFFLOAD) -> Host:
    """The host figures for ``accelerator_id`` with the request's overrides."""
    data = load("hosts.json")
    entry = data["hosts"].get(accelerator_id)
    base = entry or data["default"]
    given = {
        "host_link_gb_per_s": offload.host_link_gb_per_s,
        "host_memory_gb_per_gpu": offload.host_memory_gb_per_gpu,
        "host_memory_gb_per_s": offload.host_memory_gb_per_s,
    }
    for name, value in given.items():
        if value is not None and not 0 < value <= 1e6:
            raise SpecError(name, "must be > 0 and <= 1,000,000", value)
    link = offload.host_link_gb_per_s or base["link_gb_per_s"]
    memory = offload.host_memory_gb_per_gpu or base["memory_gb_per_gpu"]
    bandwidth = offload.host_memory_gb_per_s or base["memory_gb_per_s_per_gpu"]
    return Host(
        link=base["link"] if offload.host_link_gb_per_s is None else "the stated link",
        link_bytes_per_s=link * 1e9,
        memory_bytes=memory * 1e9,
        memory_bytes_per_s=bandwidth * 1e9,
        assumed=entry is None and None in given.values(),
    )
