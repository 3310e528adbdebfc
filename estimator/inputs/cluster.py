"""The cluster a plan runs on, stated as it is: GPUs per node (how ranks fill machines), the
scale-up domain (GPUs joined by NVLink / xGMI / ICI: 8 in an HGX node, 72 in a GB200 NVL72 rack
of 4-GPU trays), and the scale-out network per GPU (its NIC share, divided by the fabric's
oversubscription). Each defaults to the accelerator's catalog value, whose sources the catalog
entry lists; a collective inside one scale-up domain runs at scale-up bandwidth, one across
domains at scale-out bandwidth (``timing.kernels.collective_time``).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import SpecError
from estimator.inputs.accelerator import Accelerator

__all__ = ["DEFAULT_SCALE_OUT_BYTES_PER_S", "Cluster", "cluster_of"]

# When a catalog entry has no scale-out figure: one 100 Gbit/s NIC per GPU (12.5 GB/s).
DEFAULT_SCALE_OUT_BYTES_PER_S = 12.5e9


_CATALOG_CLUSTERS: dict[tuple[str, int, int, float | None], Cluster] = {}


@dataclass(frozen=True, slots=True)
class Cluster:
    """``scale_out_bytes_per_s`` is per GPU and per direction, after oversubscription."""

    gpus_per_node: int
    scale_up_domain: int
    scale_out_bytes_per_s: float
    oversubscription: float = 1.0
    scale_out_assumed: bool = False  # neither the catalog nor the request gave it

    def notes(self) -> tuple[str, ...]:
        """What an answer over several scale-up domains should say about the network."""
        if not self.scale_out_assumed:
            return ()
        return (
            "The catalog has no scale-out bandwidth for this accelerator: "
            f"{DEFAULT_SCALE_OUT_BYTES_PER_S * 8 / 1e9:g} Gbit/s per GPU assumed"
            " (give scale_out_gbit_per_s).",
        )

    def describe(self) -> str:
        return (
            f"{self.gpus_per_node} GPUs per node, {self.scale_up_domain}-GPU scale-up domain, "
            f"{self.scale_out_bytes_per_s * 8 / 1e9:g} Gbit/s scale-out per GPU"
            + (
                f" (after {self.oversubscription:g}:1 oversubscription)"
                if self.oversubscription > 1
                else ""
            )
        )


def cluster_of(
    acc: Accelerator,
    *,
    gpus_per_node: int | None = None,
    scale_up_domain: int | None = None,
    scale_out_gbit_per_s: float | None = None,
    oversubscription: float = 1.0,
) -> Cluster:
    """The cluster of ``acc`` with the user's overrides (None: the catalog's). The catalog's own
    cluster is built once per accelerator (every estimate asks for it)."""
    plain = (
        gpus_per_node is None
        and scale_up_domain is None
        and scale_out_gbit_per_s is None
        and oversubscription == 1.0
    )
    key = (acc.id, acc.gpus_per_node, acc.scale_up_domain, acc.scale_out_bytes_per_s)
    if plain and (known := _CATALOG_CLUSTERS.get(key)) is not None:
        return known
    for name, value in (("gpus_per_node", gpus_per_node), ("scale_up_domain", scale_up_domain)):
        if value is not None and value < 1:
            raise SpecError(name, "must be >= 1", value)
    if scale_out_gbit_per_s is not None and not 1 <= scale_out_gbit_per_s <= 1e5:
        raise SpecError(
            "scale_out_gbit_per_s", "must be between 1 and 100,000", scale_out_gbit_per_s
        )
    if oversubscription < 1:
        raise SpecError(
            "oversubscription", "must be >= 1 (1: a non-blocking fabric)", oversubscription
        )
    out = (
        scale_out_gbit_per_s * 1e9 / 8
        if scale_out_gbit_per_s is not None
        else acc.scale_out_bytes_per_s or DEFAULT_SCALE_OUT_BYTES_PER_S
    )
    cluster = Cluster(
        gpus_per_node=gpus_per_node or acc.gpus_per_node,
        scale_up_domain=scale_up_domain or acc.scale_up_domain,
        scale_out_bytes_per_s=out / oversubscription,
        oversubscription=oversubscription,
        scale_out_assumed=scale_out_gbit_per_s is None and acc.scale_out_bytes_per_s is None,
    )
    if plain:
        _CATALOG_CLUSTERS[key] = cluster
    return cluster
