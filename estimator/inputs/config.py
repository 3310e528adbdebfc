"""A Hugging Face ``config.json`` read into a ``ModelSpec`` by its family's reader
(``spec.families``), and the part of a config that reading uses (``used_config``).

The reader never executes anything from a config and ignores fields it does not use. A family it
does not know is read as a Llama-style decoder (RMSNorm, gated MLP, rotary positions), with a
note saying so; a field that such a reading needs and the config lacks is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from estimator.errors import SpecError
from estimator.inputs.families import EXACT, reader_of
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import MAX_TOTAL_PARAMS, ConfigReader, Recorder

__all__ = [
    "WRAPPED_NOTE",
    "checkpoint_quantization",
    "model_from_config",
    "supported_model_types",
    "used_config",
]

WRAPPED_NOTE = (
    "Read from text_config, the language model of a multimodal checkpoint: the parameters"
    " outside it (a vision tower, its projector) are not counted."
)


def supported_model_types() -> tuple[str, ...]:
    """Families read exactly (checked against transformers); others are read as Llama-style."""
    return tuple(sorted(EXACT))


def model_from_config(config: Mapping[str, Any], model_id: str = "custom") -> ModelSpec:
    """Read a Hugging Face ``config.json`` dict into a ModelSpec.

    Raises SpecError naming the field when a required field is missing or invalid. Unknown fields
    are ignored. Nothing in the config is executed and nothing is fetched.
    """
    if not isinstance(config, Mapping):
        raise SpecError(
            "config", "must be a JSON object (a config.json dict)", type(config).__name__
        )
    text_config = config.get("text_config")
    inner = text_config if isinstance(text_config, Mapping) else None
    model = _read(config, inner, model_id)
    quantized = checkpoint_quantization(config)
    return replace(model, checkpoint_quantization=quantized) if quantized else model


def checkpoint_quantization(config: Mapping[str, Any]) -> str | None:
    """The format a checkpoint ships its weights in, where it is quantized ahead of time: its
    ``quantization_config.quant_method`` (transformers' ``QuantizationConfigMixin`` field, which
    vLLM's and SGLang's loaders read to pick the quantized kernels: DeepSeek-V3's config says
    ``fp8``, gpt-oss's ``mxfp4``), lower-cased; None where the config has none (a 16-bit
    checkpoint) or a malformed one. A multimodal config may keep it in ``text_config``."""
    for scope in (config, config.get("text_config")):
        if isinstance(scope, Mapping):
            q = scope.get("quantization_config")
            method = q.get("quant_method") if isinstance(q, Mapping) else None
            if isinstance(method, str) and method.strip():
                return method.strip().lower()
    return None


def used_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``config`` the reader uses: the keys it asks for (and, for a wrapped text
    model, those of ``text_config``), which read into the same spec. What is left out changes
    no number the planner gives. Raises SpecError as ``model_from_config`` does."""
    model_from_config(config)  # refused configs are refused here, by the same rules
    outer = Recorder(config)
    text_config = config.get("text_config")
    inner = Recorder(text_config) if isinstance(text_config, Mapping) else None
    _read(outer, inner)
    used = {k: config[k] for k in sorted(outer.asked) if k in config}
    if inner is not None:
        used["text_config"] = {k: inner.data[k] for k in sorted(inner.asked) if k in inner.data}
    return used


def _read(
    config: Mapping[str, Any], inner: Mapping[str, Any] | None, model_id: str = "custom"
) -> ModelSpec:
    raw: Mapping[str, Any] = inner if inner is not None else config
    mt = raw.get("model_type") or config.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise SpecError("config.model_type", "is required (e.g. 'llama', 'qwen2', 'gpt2')")
    model = reader_of(mt)(ConfigReader(raw, mt), model_id)
    if inner is not None and WRAPPED_NOTE not in model.notes:
        model = replace(model, notes=(*model.notes, WRAPPED_NOTE))
    mtp = _mtp_layers(raw)
    if mtp:
        kinds = model.mtp_kinds or _mtp_pattern_kinds(raw, model)
        model = replace(model, mtp_depth=mtp[0], mtp_kinds=kinds)
        if not any("multi-token" in n for n in model.notes):
            model = replace(model, notes=(*model.notes, mtp_note(model, *mtp)))
    if mt not in EXACT:
        model = replace(model, exact=False)
    total = sum(n * kind.params for kind, n in zip(model.kinds, model.kind_counts, strict=True))
    if total > MAX_TOTAL_PARAMS:
        raise SpecError(
            "config",
            f"describes {total:.3g} layer parameters, beyond the {MAX_TOTAL_PARAMS:.0e} "
            "this planner models",
        )
    return model


def _mtp_layers(raw: Mapping[str, Any]) -> tuple[int, str, int] | None:
    """The multi-token-prediction modules a config declares, the key that says so, and the
    decoder layers in each (a hybrid's block pattern: Nemotron 3's ``*E``, attention and MoE)."""
    blocks = raw.get("mtp_hybrid_override_pattern") or raw.get("mtp_layers_block_type") or "*"
    per_module = len(blocks) if isinstance(blocks, str | list) else 1
    n = raw.get("num_nextn_predict_layers")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n, "num_nextn_predict_layers", per_module
    n = raw.get("num_mtp_modules")
    if raw.get("use_mtp") is True and isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n, "num_mtp_modules", per_module
    return None


def _mtp_pattern_kinds(raw: Mapping[str, Any], model: ModelSpec) -> tuple[int, ...]:
    """The layer kinds of a hybrid's multi-token-prediction module: ``mtp_hybrid_override_
    pattern`` (Nemotron 3 Super's ``*E``), each block letter standing for the kind of the
    decoder's first layer with that letter in ``hybrid_override_pattern``, or
    ``mtp_layers_block_type`` (``["attention", "moe"]``), each the kind of that name. Empty
    (the last layer's kind) without either, or where a block is not the decoder's."""
    names = raw.get("mtp_layers_block_type")
    if isinstance(names, list) and names:
        by_name = {kind.name: k for k, kind in enumerate(model.kinds)}
        found = [by_name.get(n) if isinstance(n, str) else None for n in names]
        return () if None in found else tuple(k for k in found if k is not None)
    module, main = raw.get("mtp_hybrid_override_pattern"), raw.get("hybrid_override_pattern")
    if not isinstance(module, str) or not isinstance(main, str) or not module:
        return ()
    at = [main.find(letter) for letter in module]
    if any(i < 0 or i >= len(model.layer_kinds) for i in at):
        return ()
    return tuple(model.layer_kinds[i] for i in at)


def mtp_note(model: ModelSpec, layers: int, key: str, per_module: int = 1) -> str:
    """What leaving a checkpoint's multi-token-prediction modules out misses, sized: each is
    ``per_module`` more decoder layers (the model's average, by active parameters), a 2h x h
    input projection and a pass through the output head, per token."""
    from estimator.counts.params import count_params  # counts reads specs: imported late

    p = count_params(model)
    per_layer = (p.active - p.embeddings - p.output_head) / model.num_layers
    h = model.hidden_size
    extra = layers * (per_module * per_layer + 2 * h * h + p.output_head)
    share = extra / (p.active - p.embeddings)
    many = layers > 1
    each = f", {per_module} decoder layers each" if per_module > 1 else ""
    return (
        f"The checkpoint's {layers} multi-token-prediction module{'s' if many else ''}"
        f" ({key}{each}) {'are' if many else 'is'} not counted in its parameters (transformers"
        f" does not build {'them' if many else 'it'}); a training plan trains"
        f" {'them' if many else 'it'} with mtp_layers (Megatron-Core's --mtp-num-layers), about"
        f" {share:.0%} more FLOPs per token."
    )
