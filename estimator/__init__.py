"""LLM Planner's analytical core: parameters, FLOPs and memory of transformer training and serving.

Pure functions over frozen specs; no I/O beyond reading the bundled catalogs, no logging, no
printing. Every quantity that a layout changes (tp, pp, micro-batch ...) may be an int or a numpy
array, so a single estimate and a sweep run the same formulas.
"""

from __future__ import annotations

from estimator.catalog import (
    accelerator_entry,
    accelerator_ids,
    get_accelerator,
    get_model,
    model_entry,
    model_ids,
)
from estimator.counts.flops import ForwardFlops, TrainingFlops, forward_flops, training_flops
from estimator.counts.params import ParamCounts, count_params
from estimator.errors import SpecError, UnknownIdError
from estimator.inputs.accelerator import GIB, Accelerator
from estimator.inputs.config import model_from_config, supported_model_types, used_config
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import PRESETS, Precision, get_precision
from estimator.layout.parallel import Parallelism
from estimator.memory.inference import (
    InferenceMemory,
    InferenceSetup,
    inference_memory,
    kv_cache_bytes_per_token,
)
from estimator.memory.training import TrainingMemory, TrainingSetup, training_memory

__version__ = "0.1.0"

__all__ = [
    "GIB",
    "PRESETS",
    "Accelerator",
    "ForwardFlops",
    "InferenceMemory",
    "InferenceSetup",
    "ModelSpec",
    "Parallelism",
    "ParamCounts",
    "Precision",
    "SpecError",
    "TrainingFlops",
    "TrainingMemory",
    "TrainingSetup",
    "UnknownIdError",
    "__version__",
    "accelerator_entry",
    "accelerator_ids",
    "count_params",
    "forward_flops",
    "get_accelerator",
    "get_model",
    "get_precision",
    "inference_memory",
    "kv_cache_bytes_per_token",
    "model_entry",
    "model_from_config",
    "model_ids",
    "supported_model_types",
    "training_flops",
    "training_memory",
    "used_config",
]
