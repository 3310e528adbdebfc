"""The model spec: a decoder-only transformer as its module inventory (``architecture``), per
layer kind, normalized from a ``config.json`` by its family's reader (``spec.config``)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from estimator.inputs.architecture import AttentionCore, LayerKind, Linear, Norm

__all__ = ["MoESpec", "ModelSpec"]


@dataclass(frozen=True, slots=True)
class MoESpec:
    """Mixture-of-experts routing: ``num_experts`` routed experts, ``top_k`` per token.
    ``activation_clamp``: the routed experts clamp their gate and up projections to this bound
    before the activation (gpt-oss's ``swiglu_limit``); None where they do not."""

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    shared_intermediate_size: int
    moe_layers: int
    activation_clamp: float | None = None


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, normalized from its config.

    ``layer_kinds`` gives, per layer, the index into ``kinds``. Sizes are in elements; nothing here
    depends on a data type or a parallel layout. ``exact`` is False where the family is not read
    exactly (an unknown ``model_type`` read Llama-style, an approximate reader): every answer
    built on it says so, and ``notes`` say how.

    ``rope_mscale``: the factor a YaRN rotary embedding scales its cos and sin by (its attention
    factor; 1.0 without one). Megatron-Core's fused RoPE takes no other, so a model with another
    runs the unfused one in training (``timing.eager_ops.unfused_rope_time``).

    ``hyper_streams``: the residual is that many copies of the hidden state, joined to each block
    by hyper-connections (DeepSeek-V4's ``hc_mult``; 0: a plain residual). Each layer's
    hyper-connection modules are in its inventory (component ``hyper_connections``); what is
    derived here is what no layer holds a weight for: the ``streams x streams`` mix of the
    residual before each block, and the head (``hc_head``) that collapses the streams before the
    final norm.

    ``mtp_depth``: the multi-token-prediction modules the checkpoint declares
    (``num_nextn_predict_layers``; transformers builds none, so none is counted here);
    ``mtp_kinds`` the layer kinds one module's decoder layers are, where not the last layer's
    (``mtp_module``): a hybrid's module pattern (Nemotron 3's ``*E``), DeepSeek-V4's
    sliding-window layer. A training plan trains such modules with
    ``TrainingSetup.mtp_layers``.

    ``checkpoint_quantization``: the format the checkpoint's weights ship in where it is
    quantized ahead of time, as its config's ``quantization_config.quant_method`` names it
    (``fp8`` for DeepSeek-V3's block-scaled FP8, ``mxfp4``, ``modelopt``, ``compressed-tensors``
    ...: the Hugging Face quantizers' names, which vLLM and SGLang read from the config); None for a
    16-bit checkpoint. It changes no count, only how the checkpoint is served
    (``serving.launch``): an engine serves such weights as they are, with no ``--quantization``.
    """

    id: str
    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    max_seq_len: int | None
    embed_dim: int
    position_embeddings: int
    tie_embeddings: bool
    kinds: tuple[LayerKind, ...]
    layer_kinds: tuple[int, ...]
    embedding_norm: Norm | None
    final_norm: Norm | None
    embedding_projections: tuple[Linear, ...]
    mlp_activation: str
    gated_mlp: bool
    norm_type: str
    attention_dropout: float
    hidden_dropout: float
    moe: MoESpec | None
    config: Mapping[str, Any] = field(repr=False, compare=False)
    notes: tuple[str, ...] = ()
    exact: bool = True
    hyper_streams: int = 0
    rope_mscale: float = 1.0
    mtp_depth: int = 0
    mtp_kinds: tuple[int, ...] = ()
    checkpoint_quantization: str | None = field(default=None, compare=False)

    # --- derived, exact integers -------------------------------------------------------------

    @cached_property
    def memo(self) -> dict[Hashable, Any]:
        """Layout-independent tables other modules derive from this spec once and reuse on every
        estimate (per-layer parameter groups, activation coefficients), keyed by their owner."""
        return {}

    @property
    def mtp_module(self) -> tuple[int, ...]:
        """The layer kinds of one multi-token-prediction module's decoder layers, in order: as
        Megatron-Core builds it, one layer of the last layer's kind unless ``mtp_kinds`` says
        otherwise."""
        return self.mtp_kinds or (self.layer_kinds[-1],)

    @cached_property
    def kind_counts(self) -> tuple[int, ...]:
        return tuple(self.layer_kinds.count(i) for i in range(len(self.kinds)))

    @cached_property
    def kind_prefix_counts(self) -> tuple[tuple[int, ...], ...]:
        """``kind_prefix_counts[k][i]``: layers of kind k among the first i layers."""
        out = []
        for k in range(len(self.kinds)):
            acc = [0]
            for kind in self.layer_kinds:
                acc.append(acc[-1] + (kind == k))
            out.append(tuple(acc))
        return tuple(out)

    @cached_property
    def _first_attention(self) -> AttentionCore | None:
        return next((k.attention for k in self.kinds if k.attention is not None), None)

    @property
    def num_heads(self) -> int:
        """Query heads of the (first) attention layers; 0 for a model without attention."""
        a = self._first_attention
        return a.num_heads if a is not None else 0

    @property
    def num_kv_heads(self) -> int:
        a = self._first_attention
        return a.num_kv_heads if a is not None else 0

    @property
    def head_dim(self) -> int:
        a = self._first_attention
        return a.qk_head_dim if a is not None else 0

    @property
    def has_recurrent_layers(self) -> bool:
        return any(k.mixer is not None for k in self.kinds)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def model_class(self) -> str:
        """``hybrid`` (any recurrent layer), ``moe`` (routed experts) or ``dense``: the coarse
        kind of model, as the accuracy lookup matches a plan to published runs."""
        if self.has_recurrent_layers:
            return "hybrid"
        return "moe" if self.is_moe else "dense"

    @property
    def token_embedding_params(self) -> int:
        return self.vocab_size * self.embed_dim

    @property
    def position_embedding_params(self) -> int:
        return self.position_embeddings * self.hidden_size

    @property
    def residual_width(self) -> int:
        """Elements per token of the residual between layers: the hidden state, or its
        ``hyper_streams`` copies."""
        return max(self.hyper_streams, 1) * self.hidden_size

    @property
    def stream_mix_flops_per_block(self) -> int:
        """FLOPs per token of one block's mix of the residual streams (DeepSeek-V4's
        ``comb^T @ streams``, a ``streams x streams`` matrix per token: a matmul torch counts)."""
        n = self.hyper_streams
        return 2 * n * n * self.hidden_size

    @property
    def stream_traffic_per_block(self) -> int:
        """Elements per token a block's hyper-connection reads and writes beyond a plain residual
        add (read the residual and the block's output, write the sum: 3 hidden), assuming each
        step is one fused kernel (an assumption: no published per-kernel measurement): the
        streams read and collapsed into the block's input (streams + 1 hidden), then read again,
        mixed and added the block's output spread over them (2 streams + 1 hidden); the weights'
        projection reads the streams inside its GEMM. 0 without hyper-connections."""
        n = self.hyper_streams
        return (3 * n - 1) * self.hidden_size if n else 0

    @property
    def stream_head_params(self) -> int:
        """DeepSeek-V4's ``hc_head``: ``hc_fn`` (``streams x streams hidden``) weighing the
        streams into one, ``hc_base`` (``streams``) and ``hc_scale`` (1); 0 without
        hyper-connections."""
        n = self.hyper_streams
        return n * n * self.hidden_size + n + 1 if n else 0

    @property
    def stream_head_flops_per_token(self) -> int:
        """The ``hc_head``'s one matmul: ``hc_fn`` over the flattened streams."""
        n = self.hyper_streams
        return 2 * n * n * self.hidden_size

    @property
    def output_head_params(self) -> int:
        """Parameters of the LM head that are not shared with the input embedding."""
        return 0 if self.tie_embeddings else self.vocab_size * self.embed_dim

    @cached_property
    def intermediate_sizes(self) -> tuple[int, ...]:
        """The MLP widths that TP splits (dense MLP, shared experts, routed experts)."""
        sizes = set()
        for kind in self.kinds:
            for m in kind.linears:
                if m.component in ("mlp", "experts", "shared_experts") and m.tp == "row":
                    sizes.add(m.in_features)
        return tuple(sorted(sizes))
