"""Number formats and precision recipes: what each tensor class is stored in, in bytes.

Block-scaled formats carry their scale factors in the byte count (OCP Microscaling spec v1.0 and
NVIDIA's NVFP4): MXFP8 is 8-bit elements plus one E8M0 byte per 32 elements; MXFP4 is 4-bit
elements plus one E8M0 byte per 32; NVFP4 is 4-bit elements plus one FP8 (E4M3) byte per 16
(the per-tensor FP32 scale is negligible). Weight-only integer formats (GPTQ/AWQ style) carry an
FP16 scale per group and, for asymmetric int4, a 4-bit zero point per group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from estimator.errors import SpecError

__all__ = [
    "DTYPES",
    "PRESETS",
    "DType",
    "Precision",
    "get_precision",
    "trained_weight_bytes",
]


@dataclass(frozen=True, slots=True)
class DType:
    """A storage format. ``bytes`` is the average per element, scale factors included.

    ``compute`` names the tensor-core rate a GEMM on this format runs at (a key of an
    accelerator's ``peak_flop_per_s``); weight-only formats compute in their activation dtype.
    """

    name: str
    bytes: float
    compute: str | None
    description: str


def _grouped(bits: int, group: int, scale_bytes: float, zero_bits: int = 0) -> float:
    return bits / 8 + (scale_bytes + zero_bits / 8) / group


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp32", 4, "fp32", "IEEE single precision"),
        DType("tf32", 4, "tf32", "fp32 storage, TF32 tensor-core math"),
        DType("bf16", 2, "bf16", "bfloat16"),
        DType("fp16", 2, "fp16", "IEEE half precision"),
        DType("fp8", 1, "fp8", "FP8 E4M3/E5M2 with per-tensor scales (Transformer Engine)"),
        DType("mxfp8", 1 + 1 / 32, "fp8", "OCP MXFP8: FP8 elements + E8M0 scale per 32"),
        DType("mxfp4", _grouped(4, 32, 1), "fp4", "OCP MXFP4: FP4 E2M1 + E8M0 scale per 32"),
        DType("nvfp4", _grouped(4, 16, 1), "fp4", "NVIDIA NVFP4: FP4 E2M1 + E4M3 scale per 16"),
        DType("int8", 1, "int8", "8-bit integer (W8A8 or KV cache)"),
        DType(
            "int8-wo",
            _grouped(8, 128, 2),
            None,
            "weight-only int8, FP16 scale per group of 128 (W8A16)",
        ),
        DType(
            "int4-wo",
            _grouped(4, 128, 2, 4),
            None,
            "weight-only int4 (GPTQ/AWQ), FP16 scale + 4-bit zero per group of 128 (W4A16)",
        ),
        DType(
            "fp8-adam",
            1 + 4 / 2048,
            None,
            "8-bit optimizer state, block-wise, fp32 absmax per 2048 (bitsandbytes Adam8bit)",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Precision:
    """What each class of tensor is stored in.

    ``weights`` is the format of linear-layer weights as the GEMMs read them (embeddings, norms,
    biases and the router stay in ``activations``); ``gemm_inputs`` the format GEMM inputs are
    cast to and saved in for backward (fp8 recipes save fp8 copies); ``master_weights`` the
    optimizer's fp32 copy (None when the weights are themselves fp32); ``gradients`` the
    gradient buffer (Megatron accumulates bf16 training grads in fp32 ``main_grad``).
    ``weight_cache`` is an extra low-precision copy of linear weights kept across micro-batches
    (Transformer Engine's fp8 weight cache), None when there is none. ``expert_weights`` is the
    format of routed experts' weights where it differs from ``weights`` (gpt-oss ships its
    experts in MXFP4 and everything else in bf16), None to store them as ``weights``.
    """

    name: str
    weights: str
    activations: str
    gemm_inputs: str
    kv_cache: str
    gradients: str
    master_weights: str | None
    optimizer_states: str
    weight_cache: str | None = None
    expert_weights: str | None = None

    def bytes(self, role: str) -> float:
        fmt = getattr(self, role)
        return 0.0 if fmt is None else DTYPES[fmt].bytes

    @property
    def expert_format(self) -> str:
        """The format routed experts' weights are stored in."""
        return self.expert_weights or self.weights

    @property
    def compute(self) -> str:
        """The tensor-core rate GEMMs run at: that of the format GEMM inputs are cast to (fp8
        recipes run fp8 GEMMs on bf16 weights), or the activations' for weight-only formats."""
        return DTYPES[self.gemm_inputs].compute or DTYPES[self.activations].compute or "bf16"


_BF16 = Precision("bf16", "bf16", "bf16", "bf16", "bf16", "fp32", "fp32", "fp32")
PRESETS: dict[str, Precision] = {
    p.name: p
    for p in (
        _BF16,
        replace(
            _BF16,
            name="fp16",
            weights="fp16",
            activations="fp16",
            gemm_inputs="fp16",
            kv_cache="fp16",
        ),
        Precision("fp32", "fp32", "fp32", "fp32", "fp32", "fp32", None, "fp32"),
        Precision("tf32", "tf32", "fp32", "tf32", "fp32", "fp32", None, "fp32"),
        # Transformer Engine fp8 training: bf16 model weights, fp8 GEMMs with an fp8 weight cache,
        # fp8 copies of GEMM inputs saved for backward, fp32 master weights and Adam states.
        replace(_BF16, name="fp8", gemm_inputs="fp8", weight_cache="fp8"),
        replace(_BF16, name="mxfp8", gemm_inputs="mxfp8", weight_cache="mxfp8"),
        replace(_BF16, name="nvfp4", gemm_inputs="nvfp4", weight_cache="nvfp4"),
        # The same with the parameters themselves kept quantized, no bf16 copy beside a cache
        # (Megatron-Core's --fp8-param-gather / fp4_param_gather, Transformer Engine's
        # quantized_model_init: the model's linear weights are Float8 / MXFP8 / NVFP4 tensors,
        # the distributed optimizer's fp32 main parameters the only full-precision copy), as
        # Megatron-Bridge's mixed-precision presets run them (bf16_with_fp8_current_scaling_mixed,
        # bf16_with_mxfp8_mixed: fp8_param_gather=True; bf16_with_nvfp4_mixed:
        # fp4_param_gather=True from 0.4.2).
        replace(_BF16, name="fp8-params", weights="fp8", gemm_inputs="fp8"),
        replace(_BF16, name="mxfp8-params", weights="mxfp8", gemm_inputs="mxfp8"),
        replace(_BF16, name="nvfp4-params", weights="nvfp4", gemm_inputs="nvfp4"),
        # Serving formats: quantized weights, bf16 activations.
        replace(_BF16, name="fp8-serving", weights="fp8", gemm_inputs="fp8", kv_cache="fp8"),
        replace(_BF16, name="nvfp4-serving", weights="nvfp4", gemm_inputs="nvfp4", kv_cache="fp8"),
        # OCP MXFP4 weights and GEMMs (E8M0 scale per 32), as MI355X (CDNA4) and Blackwell run
        # them natively (``spec.support``: NVFP4 has no matrix path on CDNA4)
        replace(_BF16, name="mxfp4-serving", weights="mxfp4", gemm_inputs="mxfp4", kv_cache="fp8"),
        replace(_BF16, name="int8-wo", weights="int8-wo"),
        replace(_BF16, name="int4-wo", weights="int4-wo"),
        # gpt-oss as OpenAI ships it: MXFP4 routed experts, bf16 everything else.
        replace(_BF16, name="mxfp4-experts", expert_weights="mxfp4"),
    )
}

_ROLES = tuple(f.name for f in fields(Precision) if f.name != "name")

# Transformer Engine keeps a quantized weight in each layout the training GEMMs read it in: the
# forward's row-wise copy and, for the backward's data-gradient GEMM, a column-wise one. A
# block-scaled format (MXFP8, NVFP4) is scaled along one axis, so its column-wise copy is a
# quantization of its own on every GPU (MXFP8Tensor / NVFP4Tensor hold both). A per-tensor
# scaled fp8 weight gets a transposed copy except where cuBLASLt runs fp8 GEMMs in every layout
# (TE's Float8Quantizer: create_transpose = columnwise_usage and not
# nvte_is_non_tn_fp8_gemm_supported(), true at compute capability 10.x: the catalog's
# ``fp8_any_layout``, set on the datacenter Blackwell parts, not on the SM 12.x RTX PRO 6000;
# a team accelerator keeps the transpose).
_BLOCK_SCALED = frozenset({"mxfp8", "nvfp4"})


def trained_weight_bytes(fmt: str | None, any_layout: bool) -> float:
    """Bytes per parameter a linear weight stored in ``fmt`` takes in training, with the
    column-wise copy the backward reads where the format needs one; ``any_layout``: the GPU
    runs fp8 GEMMs in every layout (``Accelerator.fp8_any_layout``); 0 for no format."""
    if fmt is None:
        return 0.0
    copies = 2 if fmt in _BLOCK_SCALED or (fmt == "fp8" and not any_layout) else 1
    return copies * DTYPES[fmt].bytes


def get_precision(value: str | Mapping[str, Any] | Precision) -> Precision:
    """A preset name, a Precision, or a mapping of roles over the bf16 preset, e.g.
    ``{"weights": "fp8", "kv_cache": "fp8"}``. Unknown names raise SpecError."""
    if isinstance(value, Precision):
        return value
    if isinstance(value, str):
        if value not in PRESETS:
            raise SpecError("precision", f"must be one of {', '.join(PRESETS)}", value)
        return PRESETS[value]
    preset = value.get("preset")
    if preset is not None and preset not in PRESETS:
        raise SpecError("precision.preset", f"must be one of {', '.join(PRESETS)}", preset)
    base = _BF16 if preset is None else PRESETS[preset]
    changes: dict[str, Any] = {}
    for role, fmt in value.items():
        if role == "preset":
            continue
        if role not in _ROLES:
            raise SpecError(f"precision.{role}", f"is not a precision role ({', '.join(_ROLES)})")
        if fmt is not None and fmt not in DTYPES:
            raise SpecError(f"precision.{role}", f"must be one of {', '.join(DTYPES)}", fmt)
        changes[role] = fmt
    return replace(base, name="custom", **changes)
