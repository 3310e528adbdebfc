"""Mamba-2 (``Mamba2ForCausalLM``; Dao and Gu 2024, "Transformers are SSMs"): a stack of
``num_hidden_layers`` identical blocks, each an RMSNorm (``norm``) and a Mamba-2 mixer
(``mixer``, ``ssm.mamba2_mixer``), with no attention and no MLP; the embedding is
``backbone.embeddings``, the final norm ``norm_f``, the head untied unless
``tie_word_embeddings``. The mixer's fields have their own names here: ``num_heads`` heads of
``head_dim``, ``n_groups`` B/C groups of ``state_size``, ``conv_kernel``, ``chunk_size``,
``use_bias`` on both projections, ``use_conv_bias``; ``Mamba2Config`` requires
``num_heads * head_dim == expand * hidden_size`` (``expand`` sets nothing else), and so does the
planner. ``time_step_rank`` is unused by the modelling code.
"""

from __future__ import annotations

from estimator.errors import SpecError
from estimator.inputs.families.blocks import rms
from estimator.inputs.families.hybrid import hybrid_layer, hybrid_model
from estimator.inputs.families.ssm import mamba2_mixer
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("mamba2",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("hidden_size", default=4096)
    layers = c.integer("num_hidden_layers", default=64)
    heads = c.integer("num_heads", default=128)
    head_dim = c.integer("head_dim", default=64)
    expand = c.integer("expand", default=2)
    if heads * head_dim != expand * h:
        raise SpecError(
            "config.num_heads",
            f"num_heads x head_dim must equal expand x hidden_size ({expand * h}), as"
            " Mamba2Config requires",
            heads,
        )
    mixer = mamba2_mixer(
        "mixer",
        h,
        heads=heads,
        head_dim=head_dim,
        groups=c.integer("n_groups", default=8),
        state=c.integer("state_size", default=128),
        conv_kernel=c.integer("conv_kernel", default=4),
        chunk=c.integer("chunk_size", default=256),
        proj_bias=c.flag("use_bias", False),
        conv_bias=c.flag("use_conv_bias", True),
        field="config.num_heads",
    )
    layer = hybrid_layer("mamba", (rms("norm", h),), (), mixer=mixer)
    vocab = c.integer("vocab_size", default=32768)
    tie = c.flag("tie_word_embeddings", False)
    return hybrid_model(c, ident, h, [layer] * layers, vocab=vocab, tie=tie, final_norm="norm_f")
