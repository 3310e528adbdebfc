"""MPT (MosaicML) as transformers' MptForCausalLM builds it: ALiBi (no position parameters),
fused ``attn.Wqkv``, ``attn.out_proj``, a 4h GELU MLP (``ffn.up_proj``/``ffn.down_proj``),
LayerNorm without bias (``norm_1``, ``norm_2``, ``norm_f``), no linear biases, tied ``wte``.

transformers hard-codes that shape whatever the config's ``no_bias``, ``expansion_ratio``,
``learned_pos_emb`` or ``attn_config.attn_type`` say (MosaicML's own llm-foundry code honours
them); this reader does the same and adds a note when a config asks for something else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from estimator.inputs.architecture import Norm
from estimator.inputs.families.decoder import Stack, classic_linears, uniform_stack
from estimator.inputs.model import ModelSpec
from estimator.inputs.reader import ConfigReader

__all__ = ["MODEL_TYPES", "read"]

MODEL_TYPES = ("mpt",)


def read(c: ConfigReader, ident: str) -> ModelSpec:
    h = c.integer("d_model", "hidden_size", default=2048)
    layers = c.integer("n_layers", "num_hidden_layers", default=24)
    heads = c.integer("n_heads", "num_attention_heads", default=16)
    attn = c.raw.get("attn_config")
    attn_cfg: Mapping[str, Any] = attn if isinstance(attn, Mapping) else {}
    attn_drop = ConfigReader(attn_cfg, c.model_type).number("attn_pdrop", default=0.0)
    names = ("attn.Wqkv", "attn.out_proj", "ffn.up_proj", "ffn.down_proj")
    stack = Stack(
        hidden=h,
        layers=layers,
        heads=heads,
        linears=classic_linears(h, heads, heads, 4 * h, names, bias=False),
        norms=(Norm("norm_1", h, False), Norm("norm_2", h, False)),
        positions=0,
        max_len=c.integer("max_seq_len", default=2048),
        final=Norm("norm_f", h, False),
        activation="gelu",
        tie=c.flag("tie_word_embeddings", True),
        attention_dropout=attn_drop,
        hidden_dropout=attn_drop,  # MptMLP and the attention residual reuse attn_pdrop
    )
    spec = uniform_stack(c, ident, stack)
    ignored = []
    if c.number("expansion_ratio", default=4) != 4:
        ignored.append("expansion_ratio (the MLP is 4 x d_model)")
    if c.raw.get("no_bias") is False:
        ignored.append("no_bias=false (no linear or norm biases)")
    if attn_cfg.get("alibi") is False or attn_cfg.get("attn_type") not in (
        None,
        "multihead_attention",
    ):
        ignored.append("attn_config (ALiBi multi-head attention)")
    if not ignored:
        return spec
    note = (
        "transformers' MptForCausalLM ignores "
        + "; ".join(ignored)
        + ": read as it builds the model; check the counts against the checkpoint."
    )
    return replace(spec, notes=(*spec.notes, note))
