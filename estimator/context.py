"""The context an estimate is computed in: one model on one accelerator (with the kernel
profile that times its operators) under one parallel layout, in one set of formats, on one
network.

Every formula of the step times takes it first instead of the six values one by one: the
training step, each serving step, a layer's time, its GEMMs and its exchanges. It is built
once per estimate (``Context.of``) and once per sweep block, whose layout fields may hold numpy
arrays (one entry per layout): a record of references, cheap to build and to copy with another
layout or model (``with_layout``, ``with_model``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the context imports nothing at run time
    from estimator.inputs.accelerator import Accelerator
    from estimator.inputs.cluster import Cluster
    from estimator.inputs.model import ModelSpec
    from estimator.inputs.precision import Precision
    from estimator.layout.parallel import Parallelism
    from estimator.timing.kernels import KernelProfile

__all__ = ["Context"]


@dataclass(frozen=True, slots=True)
class Context:
    """The (model, hardware, layout, precision) group the core's time formulas share.

    ``acc`` is the accelerator and ``prof`` the kernel profile its operators are timed with
    (the fitted curves, or the measured tables' when a serving plan opts in); ``p`` the layout
    (a serving replica's or a training plan's; its fields may be arrays in a sweep block);
    ``precision`` the formats; ``domain`` the network (nodes, scale-up domain, scale-out)."""

    model: ModelSpec
    acc: Accelerator
    prof: KernelProfile
    p: Parallelism
    precision: Precision
    domain: Cluster

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        acc: Accelerator,
        p: Parallelism,
        precision: Precision,
        domain: Cluster | None = None,
        prof: KernelProfile | None = None,
    ) -> Context:
        """The context with the accelerator's own kernel profile and cluster where none is
        given."""
        from estimator.inputs.cluster import cluster_of
        from estimator.timing.kernels import kernel_profile

        return cls(
            model,
            acc,
            prof if prof is not None else kernel_profile(acc.id),
            p,
            precision,
            domain if domain is not None else cluster_of(acc),
        )

    def with_layout(self, p: Parallelism) -> Context:
        """The same context under layout ``p``."""
        return replace(self, p=p)

    def with_model(self, model: ModelSpec, p: Parallelism) -> Context:
        """Another model (a drafter) on the same hardware, formats and network, under ``p``."""
        return replace(self, model=model, p=p)
