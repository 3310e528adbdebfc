"""The ``compiled`` convention, the per-op checkpointing policy and the loss's backward buffers
against what PyTorch really keeps.

Ground truth on small real CPU layers (transformers' Llama and Qwen3 decoder layers, bf16, SDPA):

- ``torch.compile(backend="aot_eager_decomp_partition")`` runs AOTAutograd with Inductor's
  decompositions and its min-cut partitioner, without generating kernels: the tensors the
  compiled forward hands its backward are counted with ``saved_tensors_hooks`` (deduplicated by
  storage; parameters and the shared rotary tables excluded);
- TorchTitan's per-op policy (``_save_list`` and ``_custom_policy`` of its
  parallelize_llama.py, reproduced here) under ``torch.utils.checkpoint`` with
  ``create_selective_checkpoint_contexts``: the outputs its caching mode stores are counted;
- a compiled cross-entropy (as torchtune and TorchTitan compile the loss) saves model-dtype
  logits and two fp32 statistics per token instead of the fp32 log-softmax.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from estimator import (
    Parallelism,
    SpecError,
    TrainingSetup,
    get_model,
    get_precision,
    model_from_config,
)
from estimator.counts.flops import op_recomputed_flops_per_token, training_flops
from estimator.finetune import FULL
from estimator.memory.activation_bytes import (
    ActivationShard,
    head_activation_bytes,
    layer_activation_bytes,
    layer_regions,
    region_scales,
    saved_bytes,
)
from estimator.memory.activations import op_policy
from estimator.memory.training import check_op_policy
from tests.test_activations_hf import LLAMA_TINY

torch = pytest.importorskip("torch")
# torch.compile's import path touches torch.jit's deprecated script_method (torch's own warning)
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")

# the tiny Llama of the eager checks, without its model type (the layers here pick theirs)
TINY = {k: v for k, v in LLAMA_TINY.items() if k != "model_type"}
BATCH, SEQ = 2, 64


def _layer(model_type: str) -> tuple[Any, Any, tuple[Any, Any], Any]:
    """A real bf16 decoder layer, its input (requires grad), the rotary (cos, sin), positions."""
    from transformers import AutoConfig
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen3 import modeling_qwen3

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **TINY)
    cfg._attn_implementation = "sdpa"
    module = modeling_qwen3 if model_type == "qwen3" else modeling_llama
    layer_cls = module.Qwen3DecoderLayer if model_type == "qwen3" else module.LlamaDecoderLayer
    rope_cls = module.Qwen3RotaryEmbedding if model_type == "qwen3" else module.LlamaRotaryEmbedding
    layer = layer_cls(cfg, 0).to(torch.bfloat16)
    x = torch.randn(BATCH, SEQ, TINY["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(SEQ)[None].expand(BATCH, SEQ)
    return layer, x, rope_cls(cfg)(x, pos), pos


def _estimated(model_type: str, convention: str) -> float:
    model = model_from_config({"model_type": model_type, **TINY})
    return float(
        layer_activation_bytes(
            model,
            model.kinds[0],
            get_precision("bf16"),
            ActivationShard(tokens=BATCH * SEQ, keys=SEQ, tp=1, sp=False, etp=1, recompute="none"),
            flash=True,
            convention=convention,
        )
    )


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_compiled_layer_saves_what_the_min_cut_partition_saves(model_type: str) -> None:
    layer, x, (cos, sin), pos = _layer(model_type)
    excluded = {t.untyped_storage().data_ptr() for t in (*layer.parameters(), cos, sin)}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in excluded:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    torch._dynamo.reset()  # a fresh cache: past the recompile limit dynamo runs eager
    compiled = torch.compile(layer, backend="aot_eager_decomp_partition")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled(x, position_embeddings=(cos, sin), attention_mask=None, position_ids=pos)
    measured = sum(saved.values())
    assert _estimated(model_type, "compiled") == pytest.approx(measured, rel=0.01)
    # and compiling saves about a third less than the eager layer (hf convention)
    assert measured < 0.75 * _estimated(model_type, "hf")


def _titan_policy(meta: dict[str, int]) -> Any:
    """TorchTitan's per-op policy (torchtitan@9dec370 parallelize_llama.py), as written there;
    the CPU flash-attention op stands in for the CUDA ones of its save list."""
    from torch.utils.checkpoint import CheckpointPolicy

    ops = torch.ops.aten
    save = {
        ops.mm.default,
        ops._scaled_dot_product_efficient_attention.default,
        ops._scaled_dot_product_flash_attention.default,
        ops._scaled_dot_product_flash_attention_for_cpu.default,
        ops.abs.default,
        ops.max.default,
    }

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == ops.mm.default:
            meta[key] += 1
        keep = func in save and not (func == ops.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def test_op_policy_keeps_what_torchtitans_policy_stores() -> None:
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    layer, x, rope, pos = _layer("llama")
    contexts: list[Any] = []

    def context_fn() -> Any:
        pair = create_selective_checkpoint_contexts(_titan_policy(defaultdict(int)))
        contexts.append(pair)
        return pair

    checkpoint(
        layer,
        x,
        position_embeddings=rope,
        attention_mask=None,
        position_ids=pos,
        use_reentrant=False,
        context_fn=context_fn,
    )
    stored = 0
    for outputs in contexts[0][0].storage.values():
        for out in outputs.values():
            for t in out if isinstance(out, (tuple, list)) else (out,):
                t = getattr(t, "val", t)
                if isinstance(t, torch.Tensor):
                    stored += t.numel() * t.element_size()
    model = model_from_config({"model_type": "llama", **TINY})
    regions = layer_regions(model, get_precision("bf16"), True, "op")[0]
    scales = region_scales(keys=SEQ, tp=1, sp=False, etp=1, recompute="none")
    assert float(saved_bytes(regions, scales, BATCH * SEQ)) == pytest.approx(stored, rel=0.01)
    saved, recomputed = op_policy(model.kinds[0])
    assert [m.name.split(".")[-1] for m in saved] == ["q_proj", "v_proj", "gate_proj", "down_proj"]
    assert [m.name.split(".")[-1] for m in recomputed] == ["k_proj", "o_proj", "up_proj"]


def test_op_policy_skips_biased_linears_and_repeats_the_unsaved_gemms() -> None:
    qwen2 = get_model("qwen2.5-7b")  # q/k/v with bias: addmm, neither saved nor counted
    saved, _ = op_policy(qwen2.kinds[0])
    assert [m.name.split(".")[-1] for m in saved] == ["o_proj", "up_proj"]
    llama = get_model("llama-3.1-8b")
    kind = llama.kinds[0]
    per_layer = sum(m.forward_flops_per_token() for m in op_policy(kind)[1])
    assert op_recomputed_flops_per_token(llama) == llama.num_layers * per_layer
    flops = training_flops(llama, 8192, 2, "op")
    assert flops.recompute == 2 * 8192 * llama.num_layers * per_layer


def test_op_policy_refused_where_it_is_not_modelled() -> None:
    for model_id in ("deepseek-v3", "qwen3-30b-a3b"):
        with pytest.raises(SpecError, match="per-op policy"):
            check_op_policy(get_model(model_id), FULL, True)
    with pytest.raises(SpecError, match="flash"):
        check_op_policy(get_model("llama-3.1-8b"), FULL, False)


def test_compiled_loss_saves_model_dtype_logits() -> None:
    import torch.nn.functional as F

    tokens, vocab = 64, 1000
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    measured = {}
    torch._dynamo.reset()
    for name, fn in (
        ("hf", lambda x, y: F.cross_entropy(x.float(), y)),
        (
            "compiled",
            torch.compile(
                lambda x, y: F.cross_entropy(x.float(), y), backend="aot_eager_decomp_partition"
            ),
        ),
    ):
        saved: dict[int, int] = {}

        def pack(t: Any, saved: dict[int, int] = saved) -> Any:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(logits, labels)
        measured[name] = sum(saved.values())
    model = model_from_config({"model_type": "llama", **TINY, "vocab_size": vocab})
    precision = get_precision("bf16")
    head = {
        c: float(head_activation_bytes(model, precision, tokens, 1, False, vocab, c))
        for c in ("hf", "compiled")
    }
    # the loss's part of the head: the difference between the conventions is the loss's alone
    assert head["hf"] - head["compiled"] == pytest.approx(
        measured["hf"] - measured["compiled"], rel=0.02
    )


TARGET_SETS = [
    ("q_proj", "v_proj"),
    ("o_proj",),
    ("k_proj",),
    ("down_proj",),
    ("gate_proj", "up_proj", "down_proj"),
    ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
]


def _estimated_lora_layer(convention: str, targets: tuple[str, ...], dropout: float = 0.0) -> float:
    """One frozen layer's saved bytes with its adapters' (the difference of a 2- and a 1-layer
    model's micro-batch activations), as the memory model counts them."""
    from estimator.finetune import FineTune
    from estimator.memory.training import training_memory_terms

    out = []
    for layers in (1, 2):
        model = model_from_config({"model_type": "llama", **TINY, "num_hidden_layers": layers})
        setup = TrainingSetup(
            SEQ,
            micro_batch_size=BATCH,
            activation_convention=convention,
            finetune=FineTune("lora", 8, targets, dropout=dropout),
        )
        (terms,) = training_memory_terms(
            model, get_precision("bf16"), Parallelism(), setup, stages=[0], microbatches=1
        )
        out.append(float(terms["microbatch_activations_bytes"]))
    return out[1] - out[0]


@pytest.mark.parametrize(
    ("targets", "dropout"),
    [(t, 0.0) for t in TARGET_SETS] + [(TARGET_SETS[0], 0.05), (TARGET_SETS[-1], 0.05)],
    ids=lambda v: "+".join(v) if isinstance(v, tuple) else f"dropout{v}",
)
def test_frozen_layers_keep_only_what_the_adapters_and_input_gradients_need(
    targets: tuple[str, ...], dropout: float
) -> None:
    """LoRA on a real layer (PEFT's ``inject_adapter_in_model``, base frozen, rank 8), eager
    and compiled: a frozen projection's input is kept only where an adapter reads it, a frozen
    norm keeps no normalized copy; an adapter's dropout keeps its dropped-out input and, eager,
    its mask (within 1%, 2% with dropout on all seven: some dropped-out inputs share storage)."""
    from peft import LoraConfig, inject_adapter_in_model

    layer, x, (cos, sin), pos = _layer("llama")
    config = LoraConfig(r=8, lora_alpha=16, target_modules=list(targets), lora_dropout=dropout)
    layer = inject_adapter_in_model(config, layer.float()).to(torch.bfloat16)
    for name, p in layer.named_parameters():
        p.requires_grad = "lora_" in name
    excluded = {t.untyped_storage().data_ptr() for t in (*layer.parameters(), cos, sin)}
    torch._dynamo.reset()  # a fresh cache: past the recompile limit dynamo runs eager
    measured: dict[str, int] = {}
    for convention, fn in (
        ("hf", layer),
        ("compiled", torch.compile(layer, backend="aot_eager_decomp_partition")),
    ):
        saved: dict[int, int] = {}

        def pack(t: Any, saved: dict[int, int] = saved) -> Any:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in excluded:
                saved[ptr] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(x, position_embeddings=(cos, sin), attention_mask=None, position_ids=pos)
        measured[convention] = sum(saved.values())
        estimated = _estimated_lora_layer(convention, targets, dropout)
        tolerance = 0.02 if dropout and len(targets) > 2 else 0.01
        assert estimated == pytest.approx(measured[convention], rel=tolerance), convention
    assert measured["compiled"] < measured["hf"]  # the compiled graph did run
