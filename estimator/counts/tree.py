"""The model as a tree of modules with parameters, MACs, FLOPs and estimated time of one
forward pass, each also as a share of the model's total (DeepSpeed's flops profiler view,
computed instead of measured).

Nodes are named as the Hugging Face implementation names its submodules relative to a decoder
layer (``self_attn.q_proj``, ``mlp.down_proj``, ``input_layernorm``); the layers of one kind are
one node (``layers [dense] x 80``) whose numbers are the sum over them, since they are
identical. ``self_attn``'s own FLOPs are the attention core (``Q K^T`` and ``P V``): causal by
default (what fused kernels compute), or the full ``s x s`` products an eager implementation
multiplies (``causal=False``, what a FLOP counter on transformers' eager attention sees).

Time is the step-time model's kernel time for one forward of ``batch x seq_len`` tokens on one
GPU without parallelism: each linear a GEMM, the attention core a fused-attention kernel, norms
and the embedding lookup memory-bound passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from estimator.counts.flops import (
    attended_keys,
    core_pairs_flops,
    core_square_flops,
    core_term,
    mixer_flops,
)
from estimator.inputs.accelerator import Accelerator
from estimator.inputs.architecture import LayerKind
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.timing.kernels import (
    KernelProfile,
    attention_prefill_time,
    gemm_time,
    kernel_profile,
    memory_time,
    mixer_time,
)

__all__ = ["ModuleNode", "module_tree", "top_modules"]

MEASURES = ("params", "macs", "flops", "time_s")


@dataclass
class ModuleNode:
    name: str
    params: int = 0
    flops: float = 0.0
    time_s: float = 0.0
    repeat: int = 1  # identical instances summed in this node
    children: list[ModuleNode] = field(default_factory=list)
    shares: dict[str, float] = field(default_factory=dict)

    @property
    def macs(self) -> float:
        return self.flops / 2

    def add(self, child: ModuleNode) -> ModuleNode:
        self.children.append(child)
        return child

    def total(self) -> None:
        """Sum the children into this node (after its own numbers are set)."""
        for c in self.children:
            c.total()
            self.params += c.params
            self.flops += c.flops
            self.time_s += c.time_s

    def walk(self, depth: int = 0) -> list[tuple[int, ModuleNode]]:
        out = [(depth, self)]
        for c in self.children:
            out += c.walk(depth + 1)
        return out


@dataclass(frozen=True, slots=True)
class _Forward:
    """The forward the tree times: ``model`` on ``acc`` (its kernel profile ``prof``) in
    ``precision``, ``batch x seq_len`` tokens, the attention core causal or square."""

    model: ModelSpec
    acc: Accelerator
    prof: KernelProfile
    precision: Precision
    seq_len: int
    batch: int
    causal: bool

    @property
    def tokens(self) -> int:
        return self.seq_len * self.batch


def _layer_node(f: _Forward, kind: LayerKind, count: int) -> ModuleNode:
    """The ``count`` layers of ``kind``: their linears (grouped under their parent module),
    attention or mixer core, extras, norms and residual-stream mixing, summed over the layers."""
    model, acc, prof, precision = f.model, f.acc, f.prof, f.precision
    tokens, seq_len, batch, causal = f.tokens, f.seq_len, f.batch, f.causal
    compute = precision.compute
    w_b, a_b = DTYPES[precision.weights].bytes, DTYPES[precision.activations].bytes
    node = ModuleNode(f"layers [{kind.name}]", repeat=count)
    groups: dict[str, ModuleNode] = {}
    for m in kind.linears:
        head, _, _ = m.name.partition(".")
        parent = groups.get(head)
        if parent is None and "." in m.name:
            parent = groups[head] = node.add(ModuleNode(head, repeat=count))
        leaf = ModuleNode(m.name, repeat=count)
        leaf.params = count * m.params
        leaf.flops = count * tokens * m.forward_flops_per_token()
        rows = tokens * m.active / max(m.copies, 1) if m.copies > 1 else tokens
        moved = (tokens * m.in_features + m.in_features * m.out_features * m.copies) * w_b
        moved += rows * m.out_features * a_b
        leaf.time_s = count * float(
            gemm_time(acc, prof, tokens * m.forward_flops_per_token(), moved, compute)
        )
        (parent or node).add(leaf)
    a = kind.attention
    if a is not None:
        term = core_term(1, a)
        core_flops = batch * (
            core_pairs_flops(term, seq_len) if causal else core_square_flops(term, seq_len)
        )
        core_bytes = tokens * (a.num_heads + 2 * a.num_kv_heads) * a.qk_head_dim * a_b * 2
        keys = attended_keys(term, seq_len)
        core = ModuleNode("(attention core: QK^T, PV)", repeat=count)
        core.flops = count * float(core_flops)
        core.time_s = count * float(
            attention_prefill_time(
                acc, prof, core_flops, core_bytes, keys, compute, head_dim=a.qk_head_dim
            )
        )
        attn = groups.get("self_attn") or groups.get("attn") or groups.get("self_attention")
        (attn or node).add(core)
    if kind.mixer is not None:
        scan = ModuleNode(f"({kind.mixer.kind} core: convolution, scan)", repeat=count)
        scan.flops = count * float(batch * mixer_flops(kind.mixer, seq_len, kernel=causal))
        scan.time_s = count * float(
            mixer_time(kind.mixer, acc, prof, 1, precision, seq_len, batch, compute)
        )
        homes = ("mixer", "mamba", "linear_attn", "conv")  # the mixer's module in each family
        mixer = next((groups[g] for g in homes if g in groups), None)
        (mixer or node).add(scan)
    for x in kind.extras:
        leaf = ModuleNode(x.name, repeat=count)
        leaf.params = count * x.params
        head, _, _ = x.name.partition(".")
        (groups.get(head) or node).add(leaf)
    for nm in kind.norms:
        leaf = ModuleNode(nm.name, repeat=count)
        leaf.params = count * nm.params
        vectors = a.num_heads if a is not None and nm.size != model.hidden_size else 1
        leaf.time_s = count * float(memory_time(acc, prof, tokens * nm.size * vectors * a_b * 2))
        head, _, _ = nm.name.partition(".")
        (groups.get(head) or node).add(leaf)
    if model.hyper_streams:
        mix = node.add(ModuleNode("(residual streams: mix before each block)", repeat=count))
        mix.flops = count * tokens * kind.blocks * model.stream_mix_flops_per_block
        moved = tokens * kind.blocks * model.stream_traffic_per_block * a_b
        mix.time_s = count * float(memory_time(acc, prof, moved))
    return node


def module_tree(
    model: ModelSpec,
    accelerator: Accelerator,
    precision: Precision,
    seq_len: int,
    batch: int = 1,
    *,
    causal: bool = True,
) -> ModuleNode:
    """The module tree of one forward of ``batch x seq_len`` tokens on one GPU."""
    prof = kernel_profile(accelerator.id)
    forward = _Forward(model, accelerator, prof, precision, seq_len, batch, causal)
    a_b = DTYPES[precision.activations].bytes
    tokens = seq_len * batch
    root = ModuleNode(model.id or "model")
    emb = root.add(ModuleNode("embed_tokens"))
    emb.params = model.token_embedding_params
    emb.time_s = float(memory_time(accelerator, prof, tokens * model.embed_dim * a_b * 2))
    if model.position_embedding_params:
        pos = root.add(ModuleNode("embed_positions"))
        pos.params = model.position_embedding_params
    for m in model.embedding_projections:
        proj = root.add(ModuleNode(m.name))
        proj.params = m.params
        proj.flops = tokens * m.forward_flops_per_token()
    for kind, n in zip(model.kinds, model.kind_counts, strict=True):
        root.add(_layer_node(forward, kind, n))
    if model.hyper_streams:
        streams = root.add(ModuleNode("hc_head"))
        streams.params = model.stream_head_params
        streams.flops = tokens * model.stream_head_flops_per_token
    for nm in (model.embedding_norm, model.final_norm):
        if nm is not None:
            leaf = root.add(ModuleNode(nm.name))
            leaf.params = nm.params
    head = root.add(ModuleNode("lm_head"))
    head.params = model.output_head_params
    head.flops = 2.0 * tokens * model.vocab_size * model.embed_dim
    moved = (tokens * model.embed_dim + model.embed_dim * model.vocab_size) * DTYPES[
        precision.weights
    ].bytes + tokens * model.vocab_size * a_b
    head.time_s = float(gemm_time(accelerator, prof, head.flops, moved, precision.compute))
    root.total()
    totals = {"params": root.params, "flops": root.flops, "time_s": root.time_s}
    for _, node in root.walk():
        node.shares = {k: (getattr(node, k) / v if v else 0.0) for k, v in totals.items()}
    return root


def top_modules(root: ModuleNode, measure: str, k: int = 5) -> dict[int, list[ModuleNode]]:
    """The ``k`` largest nodes by ``measure`` at each depth below the root."""
    by_depth: dict[int, list[ModuleNode]] = {}
    for depth, node in root.walk():
        if depth:
            by_depth.setdefault(depth, []).append(node)
    return {
        d: sorted(nodes, key=lambda n: -getattr(n, measure))[:k] for d, nodes in by_depth.items()
    }
