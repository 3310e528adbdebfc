"""One module per model family, each mirroring the module list of its ``transformers``
implementation (5.x): same module names, same shapes, same biases, same norms, the same
defaults for fields a config leaves out. Each declares the ``MODEL_TYPES`` it reads and a
``read(config, id)``; the tests build every catalog model with ``transformers`` on the meta
device and require the parameter count and the forward FLOPs to match exactly, so a quirk
written here is a quirk checked there.

A new family is a new module here, listed below, plus its tests (CONTRIBUTING.md).
"""

from __future__ import annotations

from collections.abc import Callable

from estimator.inputs.families import (
    apertus,
    bamba,
    bloom,
    deepseek,
    deepseek_v4,
    dots1,
    ernie4_5_moe,
    exaone4,
    falcon,
    falcon_h1,
    gemma,
    glm4_moe,
    gpt2,
    gpt_neox,
    gpt_oss,
    granitemoehybrid,
    hunyuan_v1_moe,
    jamba,
    lfm2,
    llama,
    llama4,
    mamba2,
    minimax_m2,
    mixtral,
    mpt,
    nemotron,
    nemotron_h,
    olmo3,
    opt,
    phi3,
    qwen,
    qwen3_next,
    seed_oss,
    smollm3,
)
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["APPROXIMATE", "EXACT", "Reader", "reader_of"]

Reader = Callable[[ConfigReader, str], ModelSpec]

# model_type -> its family's reader: read exactly (checked against transformers)
EXACT: dict[str, Reader] = {
    model_type: family.read
    for family in (
        llama,
        mixtral,
        qwen,
        phi3,
        gemma,
        deepseek,
        deepseek_v4,
        glm4_moe,
        dots1,
        gpt2,
        opt,
        falcon,
        gpt_neox,
        bloom,
        mpt,
        nemotron_h,
        mamba2,
        bamba,
        granitemoehybrid,
        falcon_h1,
        jamba,
        qwen3_next,
        lfm2,
        gpt_oss,
        llama4,
        minimax_m2,
        hunyuan_v1_moe,
        ernie4_5_moe,
        olmo3,
        exaone4,
        seed_oss,
        smollm3,
        apertus,
        nemotron,
    )
    for model_type in family.MODEL_TYPES
}
# model_type -> a reader that reads it approximately, and says so in the spec's notes
APPROXIMATE: dict[str, Reader] = {"qwen2_moe": qwen.read_qwen2_moe}


def reader_of(model_type: str) -> Reader:
    """The reader of ``model_type``: its family's, else Llama-style with a note."""
    return EXACT.get(model_type) or APPROXIMATE.get(model_type) or llama.read_unknown
