"""Exact parameter counts, total and active per token, with a per-component breakdown.

Counts are of unique trainable parameters as transformers holds them: tied embeddings once,
buffers (rotary tables, DeepSeek's ``e_score_correction_bias``, DeepSeek-V4's ``tid2eid``)
never. "Active" counts a routed expert's parameters ``top_k / num_experts`` of the time, i.e. the
parameters a single token's forward pass touches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from estimator.inputs.architecture import Component
from estimator.inputs.model import ModelSpec
from estimator.memo import per_model

__all__ = ["ParamCounts", "count_params"]

_COMPONENTS: tuple[str, ...] = get_args(Component)


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameter counts in elements; ``total`` is the sum of the component fields."""

    total: int
    active: int
    embeddings: int
    attention: int
    mixer: int
    mlp: int
    experts: int
    shared_experts: int
    router: int
    hyper_connections: int
    norms: int
    output_head: int
    active_experts: int

    def by_component(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _COMPONENTS}


@per_model
def count_params(model: ModelSpec) -> ParamCounts:
    """Exact total and active parameters by component (computed once per model: a frozen
    result of the frozen spec)."""
    parts = dict.fromkeys(_COMPONENTS, 0)
    active_experts = 0
    for kind, n in zip(model.kinds, model.kind_counts, strict=True):
        for name, value in kind.params_by_component().items():
            parts[name] += n * value
        for m in kind.linears:
            if m.component == "experts":  # as "experts" is summed: a lone expert counts too
                active_experts += n * m.params * m.active // m.copies
    parts["embeddings"] += model.token_embedding_params + model.position_embedding_params
    parts["embeddings"] += sum(m.params for m in model.embedding_projections)
    parts["hyper_connections"] += model.stream_head_params
    for norm in (model.embedding_norm, model.final_norm):
        if norm is not None:
            parts["norms"] += norm.params
    parts["output_head"] = model.output_head_params
    total = sum(parts.values())
    return ParamCounts(
        total=total,
        active=total - parts["experts"] + active_experts,
        active_experts=active_experts,
        **parts,
    )
