"""The format a checkpoint ships its weights in, read from its metadata as the serving engines
read it, and the planner's precision preset that serves it: the default precision of a serving
plan of a fetched model.

Where from: ``quantization_config`` in ``config.json`` (transformers' ``QuantizationConfigMixin``:
``quant_method`` and, per method, ``bits`` / ``w_bit`` for GPTQ and AWQ, ``config_groups`` for
compressed-tensors, ``quant_algo`` for ModelOpt), else ModelOpt's ``hf_quant_config.json``
(``{"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8" | "NVFP4" |
"W4A16_AWQ", "kv_cache_quant_algo": "FP8"}}``), which vLLM and SGLang read as quantization
``modelopt``. A format with no preset here leaves the default at bf16, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from estimator.inputs.config import checkpoint_quantization

__all__ = ["Quantization", "quantization_of"]

# quant_method -> preset, where the method fixes the weight format
_BY_METHOD = {"fp8": "fp8-params", "fbgemm_fp8": "fp8-params", "mxfp4": "mxfp4-experts"}
# ModelOpt's quant_algo -> preset (weights and GEMM inputs; an FP8 KV cache picks -serving)
_MODELOPT = {
    "FP8": "fp8-params",
    "FP8_BLOCKWISE": "fp8-params",
    "NVFP4": "nvfp4-params",
    "W4A16_AWQ": "int4-wo",
    "W4A8_AWQ": "int4-wo",
}
_WITH_FP8_KV = {"fp8-params": "fp8-serving", "nvfp4-params": "nvfp4-serving"}
# compressed-tensors weights (num_bits, type) -> preset; 4-bit floats are NVFP4 (group 16)
_COMPRESSED = {(8, "float"): "fp8-params", (4, "float"): "nvfp4-params", (4, "int"): "int4-wo"}
_INT_BITS = {4: "int4-wo", 8: "int8-wo"}


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's weight format: ``method`` as the engines name it (``fp8``, ``modelopt``,
    ``awq`` ...), the file that says so, the detail read, and the preset that serves it (None:
    none of the planner's presets matches)."""

    method: str
    source: str
    detail: str
    preset: str | None

    def note(self, repo: str) -> str:
        found = f"{repo} ships {self.method} weights ({self.detail}; {self.source})"
        if self.preset is None:
            return (
                f"{found}: no precision preset matches it, so a serving plan keeps bf16; set"
                " precision to the checkpoint's weight format."
            )
        return (
            f"{found}: a serving plan's default precision is {self.preset!r} (a precision given"
            " in the request wins)."
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "source": self.source,
            "detail": self.detail,
            "preset": self.preset,
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _from_config(q: Mapping[str, Any], method: str) -> tuple[str, str | None]:
    """The detail and preset of a config's ``quantization_config``."""
    if method in _BY_METHOD:
        block = q.get("weight_block_size")
        detail = (
            f"block {block[0]}x{block[1]}" if isinstance(block, list) and len(block) == 2 else ""
        )
        return detail or "per-tensor or per-channel scales", _BY_METHOD[method]
    if method in ("gptq", "awq", "bitsandbytes"):
        bits = _int(q.get("bits")) or _int(q.get("w_bit"))
        if method == "bitsandbytes":
            bits = 8 if q.get("load_in_8bit") is True else None  # nf4 has no preset
        return (f"{bits}-bit weights" if bits else "weights only"), _INT_BITS.get(bits or 0)
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        first = next(iter(groups.values()), None) if isinstance(groups, Mapping) else None
        weights = first.get("weights") if isinstance(first, Mapping) else None
        if isinstance(weights, Mapping):
            bits, kind = _int(weights.get("num_bits")), weights.get("type")
            preset = _COMPRESSED.get((bits or 0, str(kind)))
            return f"weights {bits}-bit {kind}", preset
        return "no config_groups", None
    if method == "modelopt":
        return _modelopt(q)
    return "", None


def _modelopt(q: Mapping[str, Any]) -> tuple[str, str | None]:
    algo = str(q.get("quant_algo") or "").upper()
    kv = str(q.get("kv_cache_quant_algo") or "").upper()
    preset = _MODELOPT.get(algo)
    if preset is not None and kv == "FP8":
        preset = _WITH_FP8_KV.get(preset, preset)
    detail = f"quant_algo {algo or 'unnamed'}" + (f", KV cache {kv}" if kv else "")
    return detail, preset


def quantization_of(
    config: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None
) -> Quantization | None:
    """The checkpoint's weight format, or None for a 16-bit checkpoint."""
    method = checkpoint_quantization(config)
    if method is not None:
        scope = config if "quantization_config" in config else config.get("text_config", {})
        q = scope.get("quantization_config", {}) if isinstance(scope, Mapping) else {}
        detail, preset = _from_config(q if isinstance(q, Mapping) else {}, method)
        source = "quantization_config in config.json"
        return Quantization(method, source, detail or "its quantization_config", preset)
    quant = hf_quant_config.get("quantization") if hf_quant_config else None
    if isinstance(quant, Mapping):
        detail, preset = _modelopt(quant)
        return Quantization("modelopt", "hf_quant_config.json", detail, preset)
    return None
