"""Which GPUs form each parallel group, in Megatron-LM's rank order.

Megatron-Core lays ranks out with tensor parallelism varying fastest, then context, data and
pipeline parallelism (``RankGenerator`` order ``tp-cp-ep-dp-pp``, where dense layers see
``ep = 1``): rank ``r = tp_i + tp (cp_i + cp (dp_i + dp pp_i))``. Expert layers regroup the same
ranks as expert-TP x EP x expert-DP x PP (order ``tp-ep-dp-pp`` with ``etp``, ``ep`` and
``edp = tp cp dp / (etp ep)``). A group of one dimension holds the ranks that differ only in
their coordinate along it. Ranks fill nodes in order (``gpus_per_node`` per node), so GPU ``r``
is ``n{r // gpus_per_node}_g{r % gpus_per_node}``; with TP innermost, a TP group never leaves a
node when ``tp`` divides the node size.

Reference: Megatron-LM ``parallel_state.initialize_model_parallel`` (its docstring's 16-GPU
example with tp=2, pp=4 is a test here).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import SpecError
from estimator.layout.parallel import Parallelism
from estimator.xp import Num

__all__ = [
    "DIMENSIONS",
    "RankLayout",
    "gpu_name",
    "group_shapes",
    "nodes_spanned",
    "rank_layout",
]

DIMENSIONS = ("tp", "cp", "dp", "pp", "etp", "ep", "edp")
# Groups listed in full up to this many ranks; larger layouts list the first groups per
# dimension and give the rule (size and stride) for the rest.
MAX_LISTED_RANKS = 4096
# Ranks listed per group: a data-parallel group of a large cluster holds thousands.
MAX_GROUP_LISTED = 256


def nodes_spanned(size: int, stride: int, gpus_per_node: int) -> int:
    """How many nodes the first group of ``size`` ranks ``stride`` apart touches (the other
    groups are translates of it)."""
    if stride >= gpus_per_node:  # every member on its own node
        return size
    return ((size - 1) * stride) // gpus_per_node + 1


def gpu_name(rank: int, gpus_per_node: int) -> str:
    return f"n{rank // gpus_per_node}_g{rank % gpus_per_node}"


@dataclass(frozen=True)
class RankLayout:
    """The parallel groups of a layout. ``sizes`` and ``strides`` give, per dimension, how many
    ranks a group holds and how far apart they are; ``groups`` lists the groups (every one, or
    the first ``listed`` of each dimension for large clusters)."""

    world: int
    gpus_per_node: int
    sizes: dict[str, int]
    strides: dict[str, int]
    groups: dict[str, tuple[tuple[int, ...], ...]]
    complete: bool

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The dimensions worth showing: the dense ones, and the expert ones when experts
        are laid out differently from the dense layers (ep > 1 or etp != tp)."""
        if self.sizes["ep"] > 1 or self.sizes["etp"] != self.sizes["tp"]:
            return DIMENSIONS
        return DIMENSIONS[:4]

    def group_of(self, dim: str, rank: int) -> tuple[int, ...]:
        """The ranks of ``rank``'s group along ``dim`` (computed, so it works at any size)."""
        size, stride = self.sizes[dim], self.strides[dim]
        base = rank - (rank // stride % size) * stride
        return tuple(base + i * stride for i in range(size))

    def group_index(self, dim: str, rank: int) -> int:
        """The position of ``rank``'s group among the groups of ``dim`` (ordered by their
        first rank, as ``groups`` lists them)."""
        size, stride = self.sizes[dim], self.strides[dim]
        return rank // (stride * size) * stride + rank % stride

    def coordinates(self, rank: int) -> dict[str, int]:
        """Each dimension's index of ``rank`` within its group."""
        return {d: rank // self.strides[d] % self.sizes[d] for d in DIMENSIONS}

    def nodes_spanned(self, dim: str) -> int:
        return nodes_spanned(self.sizes[dim], self.strides[dim], self.gpus_per_node)


def _groups(world: int, size: int, stride: int, limit: int | None) -> tuple[tuple[int, ...], ...]:
    """The groups in order of their first rank; for large clusters the first ``limit``, each
    cut to its first ``MAX_GROUP_LISTED`` ranks."""
    shown = size if limit is None else min(size, MAX_GROUP_LISTED)
    out = []
    for base in range(world):
        if base // stride % size:
            continue  # not the first rank of its group
        out.append(tuple(base + i * stride for i in range(shown)))
        if limit is not None and len(out) >= limit:
            break
    return tuple(out)


def group_shapes(p: Parallelism) -> dict[str, tuple[Num, Num]]:
    """(size, stride) of each group in Megatron's rank order, for one layout or arrays of
    them (the step-time model's collectives use these). ``dense_dp`` is the group dense
    gradients reduce over: data x context parallelism."""
    etp = p.expert_tp
    return {
        "tp": (p.tp, 1),
        "cp": (p.cp, p.tp),
        "dp": (p.dp, p.tp * p.cp),
        "dense_dp": (p.dp * p.cp, p.tp),
        "pp": (p.pp, p.tp * p.cp * p.dp),
        "etp": (etp, 1),
        "ep": (p.ep, etp),
        "edp": (p.expert_dp, etp * p.ep),
    }


def rank_layout(p: Parallelism, gpus_per_node: int, listed: int = 8) -> RankLayout:
    """The TP, CP, DP, PP, expert-TP, EP and expert-DP groups of ``p`` over
    ``tp cp dp pp`` GPUs. Up to ``MAX_LISTED_RANKS`` GPUs every group is listed; above, the
    first ``listed`` of each dimension (``group_of`` gives any other)."""
    if gpus_per_node < 1:
        raise SpecError("gpus_per_node", "must be >= 1", gpus_per_node)
    world = p.num_gpus
    etp = p.expert_tp
    if (p.tp * p.cp * p.dp) % (p.ep * etp):
        raise SpecError("layout.ep", f"ep*etp={p.ep * etp} must divide tp*cp*dp", p.ep)
    shapes = group_shapes(p)
    sizes = {d: int(shapes[d][0]) for d in DIMENSIONS}
    strides = {d: int(shapes[d][1]) for d in DIMENSIONS}
    complete = world <= MAX_LISTED_RANKS
    limit = None if complete else listed
    groups = {d: _groups(world, sizes[d], strides[d], limit) for d in DIMENSIONS}
    return RankLayout(world, gpus_per_node, sizes, strides, groups, complete)
