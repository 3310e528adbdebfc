"""Why a plan's ZeRO-3 / FSDP communication is hidden, with the numbers.

The step time (``timing.training``) charges ZeRO-3's per-layer traffic (the weights gathered
for the forward and again for the backward, the gradients reduce-scattered in the backward,
``collectives.ZERO3_GATHERS_PER_LAYER``) only where it outlasts the layer's compute: FSDP2's
``fully_shard`` prefetches the next module's all-gather, DeepSpeed ZeRO-3 its
``stage3_prefetch_bucket_size``, Megatron-FSDP its next bucket, each behind the current
layer's kernels. Where nothing is exposed, a reader sees ``zero3_comm`` 0 and needs the
reason: this note gives both sides of the comparison per layer and micro-batch, from the same
collectives the communication plan (``timing.comms``) lists.
"""

from __future__ import annotations

from estimator.context import Context
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.cluster import Cluster
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import Precision
from estimator.layout.parallel import Parallelism
from estimator.memory.training import TrainingMemory, TrainingSetup
from estimator.timing.comms import communication_plan

__all__ = ["zero3_hidden_note"]


def zero3_hidden_note(
    model: ModelSpec,
    accelerator: Accelerator,
    parallel: Parallelism,
    setup: TrainingSetup,
    precision: Precision,
    memory: TrainingMemory,
    time: tuple[float, float, float],
    cluster: Cluster | None = None,
) -> str | None:
    """The note for a ZeRO-3 plan whose exposed ``zero3_comm`` is 0 (``time``: that exposed
    time, and one micro-batch's forward and backward on the slowest stage), else None."""
    exposed_s, forward_s, backward_s = time
    if parallel.zero_stage < 3 or exposed_s > 0:
        return None
    c = Context.of(model, accelerator, parallel, precision, cluster)
    plan = communication_plan(c, setup, memory=memory)
    events = [e for e in plan.events if e.dimension == "zero3"]
    if not events:
        return None
    layers = model.num_layers / parallel.pp
    gather_s = sum(
        e.time_per_call_s * e.calls_per_microbatch for e in events if e.collective == "all_gather"
    )
    scatter_s = sum(
        e.time_per_call_s * e.calls_per_microbatch for e in events if e.collective != "all_gather"
    )
    comm_ms = (gather_s + scatter_s) / layers * 1e3
    compute_ms = (forward_s + backward_s) / layers * 1e3
    nodes = max(e.nodes_per_group for e in events)
    where = f"across {nodes} nodes at the NIC rate per GPU" if nodes > 1 else "within a node"
    return (
        f"ZeRO-3 / FSDP communication fully hidden: per layer and micro-batch, the weight"
        f" gathers (forward and backward) and the gradient reduce-scatter take"
        f" {comm_ms:.2f} ms ({where}, over dp={parallel.dp * parallel.cp}) against the layer's"
        f" {compute_ms:.2f} ms of forward and backward compute, so each is prefetched behind the"
        f" previous layer's kernels ({comm_ms / compute_ms:.0%} of it); the exposed zero3_comm"
        " is 0. Prefetch depth, bucket sizes and the SMs NCCL's kernels take are not charged."
    )
