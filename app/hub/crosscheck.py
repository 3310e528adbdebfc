"""The planner's parameter count of a fetched model against its checkpoint: the
``metadata.total_size`` of ``model.safetensors.index.json`` (the bytes of every tensor, the
files' headers left out: the safetensors format) divided by the bytes of the config's
``torch_dtype`` is the count the checkpoint implies where every tensor is stored in it.

A mismatch is explained from the index's ``weight_map`` tensor names: quantized weights (scales
and packed integers: the implied count assumes 16-bit elements), multi-token-prediction layers
past ``num_hidden_layers`` (transformers builds none, so the planner counts none), vision or
audio towers (a multimodal checkpoint read from its ``text_config``), and an output head stored
apart from tied embeddings (or tied where the config says not).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from estimator import ModelSpec, count_params

__all__ = ["MATCH_TOLERANCE", "CrossCheck", "cross_check"]

# Within 0.5% counts as a match: a few tensors kept in fp32 (router biases, Mamba's A_log) in a
# 16-bit checkpoint move the implied count by less.
MATCH_TOLERANCE = 0.005
_DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "float": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
_QUANTIZED = re.compile(
    r"(weight_scale(_inv|_2)?|input_scale|\.scales|qweight|qzeros|g_idx|weight_packed|_blocks)$"
)
_TOWER = re.compile(r"(vision|visual|audio|multi_modal_projector|mm_projector|image_newline)")
_LAYER = re.compile(r"\blayers\.(\d+)\.")


@dataclass(frozen=True)
class CrossCheck:
    """Our count against the index's implied count (None where its dtype is unknown)."""

    ours: int
    index_total_bytes: int
    dtype: str | None
    implied: int | None
    verdict: str  # "matches", "differs" or "unknown dtype"
    explanations: tuple[str, ...]

    @property
    def ratio(self) -> float | None:
        return None if self.implied is None else self.implied / self.ours - 1

    def note(self) -> str:
        head = (
            f"Parameter cross-check against model.safetensors.index.json: ours {self.ours:,};"
            f" its total_size {self.index_total_bytes:,} bytes"
        )
        if self.implied is None or self.ratio is None:
            return f"{head}, in a dtype the config does not name ({self.dtype}): not compared."
        size = _DTYPE_BYTES[str(self.dtype)]
        head += f" at {size} bytes ({self.dtype}) implies {self.implied:,} ({self.ratio:+.2%})"
        if self.verdict == "matches":
            return f"{head}: matches."
        why = "; ".join(self.explanations) or "not explained by its tensor names"
        return f"{head}: differs — {why}."

    def as_dict(self) -> dict[str, Any]:
        return {
            "ours": self.ours,
            "index_total_bytes": self.index_total_bytes,
            "dtype": self.dtype,
            "implied": self.implied,
            "ratio": self.ratio,
            "verdict": self.verdict,
            "explanations": list(self.explanations),
        }


def _dtype(config: Mapping[str, Any]) -> str | None:
    for scope in (config, config.get("text_config")):
        if isinstance(scope, Mapping):
            value = scope.get("torch_dtype") or scope.get("dtype")
            if isinstance(value, str):
                return value.removeprefix("torch.")
    return None


def _explanations(model: ModelSpec, names: list[str]) -> list[str]:
    out = []
    quantized = sum(1 for n in names if _QUANTIZED.search(n))
    if quantized:
        out.append(
            f"{quantized:,} tensors are quantization scales or packed weights (a quantized"
            " checkpoint stores fewer bytes per parameter than its dtype)"
        )
    extra = sorted(
        {
            int(m.group(1))
            for n in names
            if (m := _LAYER.search(n)) and int(m.group(1)) >= model.num_layers
        }
    )
    if extra:
        out.append(
            f"the checkpoint holds layers {extra[0]}..{extra[-1]} past num_hidden_layers"
            f" ({model.num_layers}): multi-token-prediction modules, not counted"
        )
    towers = sum(1 for n in names if _TOWER.search(n))
    if towers:
        out.append(f"{towers:,} tensors of a vision or audio tower, outside the text model counted")
    head = any(n.endswith("lm_head.weight") for n in names)
    if model.tie_embeddings and head:
        out.append("the output head is stored apart although the config ties it to the embeddings")
    if not model.tie_embeddings and names and not head:
        out.append("no lm_head.weight is stored: the checkpoint ties the head the config unties")
    return out


def cross_check(
    model: ModelSpec, config: Mapping[str, Any], index: Mapping[str, Any]
) -> CrossCheck | None:
    """Our count against the index's, None where the index has no ``metadata.total_size``."""
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, Mapping) else None
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        return None
    ours = count_params(model).total
    dtype = _dtype(config)
    size = _DTYPE_BYTES.get(str(dtype))
    weight_map = index.get("weight_map")
    names = list(weight_map) if isinstance(weight_map, Mapping) else []
    if size is None:
        return CrossCheck(ours, total, dtype, None, "unknown dtype", ())
    implied = total // size
    matches = abs(implied / ours - 1) <= MATCH_TOLERANCE
    why = () if matches else tuple(_explanations(model, names))
    return CrossCheck(ours, total, dtype, implied, "matches" if matches else "differs", why)
