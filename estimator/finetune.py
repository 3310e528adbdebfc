"""Fine-tuning: what a full, LoRA or QLoRA run trains, stores and computes.

**Full** fine-tuning trains every parameter: every other module's formulas, unchanged.

**LoRA** (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", Sec. 4.1)
freezes the pretrained weights and adds beside each targeted linear ``W`` (``in -> out``) a
trainable low-rank update ``x -> B A x``, ``A: in x r`` and ``B: r x out`` (no bias), as
PEFT's ``LoraConfig`` builds it (peft 0.21, ``tuners/lora/layer.py``; ``lora_dropout`` 0,
its default, so no dropout tensors). A linear that transformers fuses (a ``qkv_proj`` the spec
lists as ``qkv_proj#q``, ``#k``, ``#v``) is one module with one adapter. Targets are matched as
PEFT matches a list of names (``check_target_module_exists``): a module whose name is the
target or ends with ``.`` + the target. Left out, they are PEFT's default for the model type
(``peft/utils/constants.py``, ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``: q_proj
and v_proj for Llama-style families); ``all-linear`` is every linear of the decoder layers,
the output head excepted, as PEFT's ``target_modules="all-linear"``.

Routed experts are refused as targets: transformers 5 stores them as fused 3-D parameters,
which PEFT adapts through ``target_parameters`` (``lora.ParamWrapper``, with its own rank
rules for fused gate/up weights), not as linears; so are routers, which transformers 5 keeps as
bare weight parameters too. On a model with routed experts the bare MLP names (``gate_proj``,
``up_proj``, ``down_proj``, ``w1``-``w3``) and ``all-linear`` are refused for the same reason:
PEFT maps them onto the fused experts (``peft/utils/transformers_weight_conversion.py``).

**QLoRA** (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs", Sec. 3) is
LoRA over base weights stored in 4-bit NormalFloat (NF4), one fp32 absmax per block of 64
weights: 0.5 + 4/64 bytes per parameter; double quantization stores those absmax in 8 bits with
one fp32 constant per 256 of them: 0.5 + 1/64 + 4/(64 x 256) (the paper's 0.127 bits of
constants per parameter). bitsandbytes quantizes ``nn.Linear`` modules only (transformers'
``replace_with_bnb_linear``, the output head kept): embeddings, norms, the output head and, in
transformers 5, the fused routed experts and the routers stay in the compute dtype (the
precision's activation format). Each GEMM dequantizes its weight to the compute dtype first,
in the forward and again in the backward (bitsandbytes ``MatMul4Bit``); the largest dequantized
weight of a layer is a transient buffer.

What a step computes (``training_flops``, ``timing.training``): the adapters' forward,
``2 r (in + out)`` FLOPs per token and adapter, and their whole backward (input and weight
gradients: twice that); the frozen GEMMs' input gradients only (once their forward: frozen
weights get no weight-gradient GEMM); the attention core's backward as in full training (both
operands are activations). Every frozen GEMM is charged its input gradient, as when the
embedding's output requires grad (PEFT/transformers' ``enable_input_require_grads``, which
gradient checkpointing turns on); without it autograd also skips the frozen GEMMs of the first
layer that precede every adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from estimator.counts.params import count_params
from estimator.errors import SpecError
from estimator.inputs.architecture import LayerKind, Linear
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, DType, Precision
from estimator.layout.sharding import Placement, rank_share
from estimator.memo import per_model
from estimator.xp import Num, maximum

__all__ = [
    "ALL_LINEAR",
    "DEFAULT_RANK",
    "FULL",
    "METHODS",
    "NF4",
    "NF4_DOUBLE_QUANT",
    "Adapter",
    "Adapters",
    "FineTune",
    "FineTuneMethod",
    "adapters",
    "base_weight_bytes",
    "check_precision",
    "dequant_buffer_elems",
    "linear_modules",
    "linear_weight_bytes",
    "quantized_modules",
]

FineTuneMethod = Literal["full", "lora", "qlora"]
METHODS: tuple[FineTuneMethod, ...] = ("full", "lora", "qlora")
ALL_LINEAR = "all-linear"
DEFAULT_RANK = 16  # the planner's default r (PEFT's LoraConfig defaults to 8; QLoRA used 64)
# PEFT's default targets by model type, for the families the planner reads whose attention
# projections are not q_proj/v_proj (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, peft
# 0.21); every other family takes the Llama entry.
DEFAULT_TARGETS = ("q_proj", "v_proj")
PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "gpt2": ("c_attn",),
    "bloom": ("query_key_value",),
    "gpt_neox": ("query_key_value",),
    "falcon": ("query_key_value",),
    "mpt": ("Wqkv",),
    "nemotron_h": ("q_proj", "k_proj", "v_proj", "o_proj"),
}
# MLP names PEFT maps onto transformers 5's fused routed experts (see the module docstring).
_EXPERT_ALIASES = ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "w1", "w2", "w3")

# bitsandbytes NF4 storage (QLoRA Sec. 3, bitsandbytes ``quantize_4bit``: blocksize 64, fp32
# absmax; with ``compress_statistics`` the absmax are 8-bit, one fp32 scale per 256 of them).
NF4 = DType("nf4", 0.5 + 4 / 64, None, "bitsandbytes NF4, fp32 absmax per 64")
NF4_DOUBLE_QUANT = DType(
    "nf4-dq", 0.5 + 1 / 64 + 4 / (64 * 256), None, "NF4 with double-quantized absmax"
)


@dataclass(frozen=True, slots=True)
class FineTune:
    """What a training run trains. ``method`` ``full`` trains every parameter; ``lora`` adds
    rank-``rank`` adapters beside the ``targets`` (None: PEFT's default for the model type;
    ``("all-linear",)``: every decoder linear) and freezes the rest; ``qlora`` does so over
    NF4 base weights (``double_quant``: QLoRA's double quantization of the block constants);
    ``dropout`` is each adapter's input dropout (PEFT's ``lora_dropout``, default 0)."""

    method: FineTuneMethod = "full"
    rank: int = DEFAULT_RANK
    targets: tuple[str, ...] | None = None
    double_quant: bool = True
    dropout: float = 0.0

    @property
    def frozen(self) -> bool:
        """Whether the base weights are frozen (LoRA, QLoRA)."""
        return self.method != "full"


FULL = FineTune()


@dataclass(frozen=True, slots=True)
class Adapter:
    """One LoRA adapter beside the transformers module ``module`` (its ``parts``: one linear,
    or the spec's parts of a fused one, which share the input)."""

    module: str
    parts: tuple[Linear, ...]
    rank: int

    @property
    def in_features(self) -> int:
        return self.parts[0].in_features

    @property
    def out_features(self) -> int:
        return sum(p.out_features for p in self.parts)

    @property
    def params(self) -> int:
        """``A`` (in x r) and ``B`` (r x out)."""
        return self.rank * (self.in_features + self.out_features)

    def forward_flops_per_token(self) -> int:
        """``A x`` then ``B (A x)``: 2 FLOPs per multiply-add (the scaling is element-wise)."""
        return 2 * self.params

    def placement(self) -> Placement:
        """Where TP puts the adapter (the planner's rule, following Megatron's split of the
        base): the matrix that meets the base's split axis splits with it, by the same whole
        units (``B`` with a column-parallel base's outputs, ``A`` with a row-parallel base's
        inputs); the other, ``r`` wide, is whole on every rank; a replicated base's adapter is
        whole."""
        r = self.rank
        split = self.parts[0].tp
        if split == "column":
            units = tuple((p.units, r * p.out_features, 0) for p in self.parts)
            return Placement(units, r * self.in_features, 0, None)
        if split == "row":
            row = self.parts[0]
            return Placement(((row.units, r * row.in_features, 0),), r * self.out_features, 0, None)
        return Placement((), self.params, 0, None)


@dataclass(frozen=True)
class Adapters:
    """A fine-tuning setting resolved against a model: the adapters of each layer kind (in
    ``model.kinds`` order; empty for full fine-tuning), the targeted module names, and the
    parameters trained and in all (PEFT's ``print_trainable_parameters``: base + adapters)."""

    finetune: FineTune
    modules: tuple[str, ...]
    per_kind: tuple[tuple[Adapter, ...], ...]
    trainable_params: int
    total_params: int
    flops_per_token: int  # the adapters' forward over every layer

    def note(self) -> str:
        """What is trained, for an answer's notes."""
        ft = self.finetune
        share = f"{self.trainable_params:,} of {self.total_params:,} parameters trained"
        if not ft.frozen:
            return f"Full fine-tuning: {share}."
        quant = ""
        if ft.method == "qlora":
            dq = "double-quantized " if ft.double_quant else ""
            quant = (
                f" over NF4 base weights ({dq}block constants; {base_weight_bytes(ft):.4f} B/param)"
            )
        fraction = self.trainable_params / self.total_params
        return (
            f"{'LoRA' if ft.method == 'lora' else 'QLoRA'} r={ft.rank} on "
            f"{', '.join(self.modules)}{quant}: {share} ({fraction:.3%}); frozen weights get "
            "no gradients or optimizer states, and their GEMMs compute input gradients only."
        )


def base_weight_bytes(ft: FineTune) -> float:
    """Bytes per parameter of the frozen linear weights QLoRA stores in NF4."""
    return (NF4_DOUBLE_QUANT if ft.double_quant else NF4).bytes


def linear_weight_bytes(ft: FineTune, precision: Precision) -> float:
    """Bytes per parameter the (non-expert) linear weights are stored in: NF4 under QLoRA,
    else the precision's weight format."""
    return base_weight_bytes(ft) if ft.method == "qlora" else DTYPES[precision.weights].bytes


def _module_name(linear: Linear) -> str:
    """The transformers module a spec linear belongs to (``qkv_proj#q`` -> ``qkv_proj``)."""
    return linear.name.partition("#")[0]


def linear_modules(kind: LayerKind) -> tuple[tuple[str, tuple[Linear, ...]], ...]:
    """A layer kind's linears grouped by transformers module, in order."""
    grouped: dict[str, list[Linear]] = {}
    for m in kind.linears:
        grouped.setdefault(_module_name(m), []).append(m)
    return tuple((name, tuple(parts)) for name, parts in grouped.items())


def _matches(module: str, target: str) -> bool:
    return module == target or module.endswith("." + target)


def _adaptable(parts: tuple[Linear, ...]) -> bool:
    """An ``nn.Linear`` in transformers 5: not a fused routed expert nor a router."""
    return all(p.copies == 1 and p.component != "router" for p in parts)


def _targets(model: ModelSpec, ft: FineTune) -> tuple[str, ...]:
    """The requested targets, refused with the field and the rule where they cannot apply."""
    targets = ft.targets
    if targets is None:
        return PEFT_DEFAULT_TARGETS.get(model.model_type, DEFAULT_TARGETS)
    if not targets or any(not t for t in targets):
        raise SpecError("lora_targets", "must name at least one module (or 'all-linear')", targets)
    if ALL_LINEAR in targets and len(targets) > 1:
        raise SpecError("lora_targets", "'all-linear' stands alone", ",".join(targets))
    return targets


def _expert_alias(target: str) -> bool:
    return target == ALL_LINEAR or target.rpartition(".")[2] in _EXPERT_ALIASES


def _available(model: ModelSpec, moe: bool = False) -> str:
    """The module names a target may take (on a model with routed experts, those PEFT does
    not map onto the experts)."""
    names = dict.fromkeys(
        name
        for kind in model.kinds
        for name, parts in linear_modules(kind)
        if _adaptable(parts) and not (moe and _expert_alias(name))
    )
    return ", ".join(names)


@per_model
def adapters(model: ModelSpec, ft: FineTune) -> Adapters:
    """``ft`` resolved against ``model`` (computed once per model and setting). Refuses an
    unknown method, a rank below 1, and targets that name no linear of the model (listing the
    ones it has) or name routed experts or routers (see the module docstring)."""
    if ft.method not in METHODS:
        raise SpecError("finetune", f"must be one of {', '.join(METHODS)}", ft.method)
    total = count_params(model).total
    if not ft.frozen:
        return Adapters(ft, (), tuple(() for _ in model.kinds), total, total, 0)
    if type(ft.rank) is not int or ft.rank < 1:
        raise SpecError("lora_rank", "must be a whole number >= 1", ft.rank)
    if not 0 <= ft.dropout < 1:
        raise SpecError("lora_dropout", "must be >= 0 and < 1", ft.dropout)
    targets = _targets(model, ft)
    moe = any(not _adaptable(parts) for k in model.kinds for _, parts in linear_modules(k))
    aliased = next((t for t in targets if _expert_alias(t)), None)
    if moe and aliased is not None:
        raise SpecError(
            "lora_targets",
            "on a model with routed experts PEFT adapts the fused expert parameters of "
            "transformers 5 (target_parameters) for this target, which the planner does not "
            f"model; target these modules by name instead: {_available(model, moe=True)}",
            aliased,
        )
    per_kind = []
    used: dict[str, None] = {}
    matched: set[str] = set()
    for kind in model.kinds:
        chosen = []
        for name, parts in linear_modules(kind):
            hits = [t for t in targets if t == ALL_LINEAR or _matches(name, t)]
            if not hits:
                continue
            if not _adaptable(parts):
                raise SpecError(
                    "lora_targets",
                    f"{name} is a routed expert or a router: transformers 5 holds it as a fused"
                    " parameter that PEFT adapts through target_parameters, which the planner"
                    f" does not model; adaptable modules: {_available(model, moe=True)}",
                    hits[0],
                )
            matched.update(hits)
            used[name] = None
            chosen.append(Adapter(name, parts, ft.rank))
        per_kind.append(tuple(chosen))
    for t in targets:
        if t not in matched:
            raise SpecError(
                "lora_targets",
                f"names no linear module of {model.id or 'the model'}; its linear modules: "
                f"{_available(model)} (or 'all-linear')",
                t,
            )
    trainable = sum(
        n * sum(a.params for a in kind) for kind, n in zip(per_kind, model.kind_counts, strict=True)
    )
    flops = sum(
        n * sum(a.forward_flops_per_token() for a in kind)
        for kind, n in zip(per_kind, model.kind_counts, strict=True)
    )
    return Adapters(ft, tuple(used), tuple(per_kind), trainable, total + trainable, flops)


# Weight formats of the low-precision training recipes (Transformer Engine tensors)
_QUANTIZED_WEIGHTS = ("fp8", "mxfp8", "nvfp4")


def check_precision(ft: FineTune, precision: Precision) -> None:
    """QLoRA dequantizes NF4 weights for 16-bit (or fp32) GEMMs: a recipe with low-precision
    GEMM inputs or a weight cache has nothing to run on. LoRA on a base kept in fp8 / MXFP8 /
    NVFP4 (the ``*-params`` presets, the fp8 serving formats) is not modelled: its adapters would
    be counted in the base's format, where they train in the compute dtype."""
    if ft.method == "lora" and precision.weights in _QUANTIZED_WEIGHTS:
        raise SpecError(
            "precision",
            "LoRA on weights stored in fp8 / MXFP8 / NVFP4 is not modelled: use fp8, mxfp8 or"
            " nvfp4, which keep the frozen base in bf16 and quantize it for the GEMMs",
            precision.name,
        )
    if ft.method != "qlora":
        return
    if precision.gemm_inputs != precision.activations or precision.weight_cache is not None:
        raise SpecError(
            "precision",
            "QLoRA dequantizes its NF4 weights to the compute dtype for the GEMMs: use a"
            " precision whose GEMM inputs are its activations (bf16, fp16, fp32)",
            precision.name,
        )
    if DTYPES[precision.activations].bytes < 2:
        raise SpecError("precision", "QLoRA computes in bf16, fp16 or fp32", precision.name)


def dequant_buffer_elems(model: ModelSpec, tp: Num) -> Num:
    """Elements of the largest base weight one GPU dequantizes at once under QLoRA: a
    quantized (``nn.Linear``) module's weight as TP shards it (``sharding.rank_share``)."""
    largest: Num = 0
    for shape in _quantized_modules(model):
        held: Num = 0
        for split, units, weights in shape:
            held = held + rank_share(split, units, 1, weights, 0, tp, 1, 1)[0]
        largest = maximum(largest, held)
    return largest


def quantized_modules(kind: LayerKind) -> int:
    """The modules of a layer kind QLoRA stores in NF4 (``nn.Linear`` in transformers 5), each
    dequantized by its own kernel."""
    return sum(1 for _, parts in linear_modules(kind) if _adaptable(parts))


@per_model
def _quantized_modules(model: ModelSpec) -> tuple[tuple[tuple[str, int, int], ...], ...]:
    """Every distinct quantized module's parts as (TP split, units, weight elements)."""
    shapes = {
        tuple((p.tp, p.units, p.weight_params) for p in parts)
        for kind in model.kinds
        for _, parts in linear_modules(kind)
        if _adaptable(parts)
    }
    return tuple(sorted(shapes))
