"""Parallel layouts and the rules frameworks impose on them.

Rank order is Megatron-LM's: TP innermost, then CP, EP, DP, PP. A layout's GPU count is
``tp * cp * dp * pp``; expert parallelism is carved out of the ``tp * cp * dp`` ranks of a stage,
with expert tensor parallelism ``etp`` (Megatron-Core's ``--expert-tensor-parallel-size``,
default ``tp``) and expert data parallelism ``edp = tp * cp * dp / (ep * etp)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Literal

from estimator.errors import SpecError
from estimator.inputs.model import ModelSpec
from estimator.memo import per_model
from estimator.xp import Num, logical_and, maximum

__all__ = ["Parallelism", "Violation", "layout_passes", "layout_violations", "validate_layout"]

ZeroStage = Literal[0, 1, 2, 3]


@dataclass(frozen=True, init=False)
class Parallelism:
    """A parallel layout. ``zero_stage`` follows DeepSpeed (1: optimizer states, 2: + gradients,
    3: + weights, the FSDP FULL_SHARD equivalent); ``distributed_optimizer`` is Megatron's, which
    shards like ZeRO-1. ``vp`` is the number of virtual pipeline stages (interleaved 1F1B).

    ``stage_layers`` are the decoder layers of each virtual pipeline stage, in virtual-stage
    order, where they are not ``num_layers / (pp vp)`` each (``layout.pipeline``: Megatron-Core's
    uneven splits, DeepSpeed's partitioning); None for the even split.

    Frozen; its ``__init__`` fills the instance in one step (see ``records``), with the
    fields' own defaults (a test checks the two signatures agree)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vp: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0
    distributed_optimizer: bool = False
    stage_layers: tuple[int, ...] | None = None

    def __init__(
        self,
        tp: int = 1,
        pp: int = 1,
        dp: int = 1,
        cp: int = 1,
        ep: int = 1,
        etp: int | None = None,
        vp: int = 1,
        sequence_parallel: bool = False,
        zero_stage: int = 0,
        distributed_optimizer: bool = False,
        stage_layers: tuple[int, ...] | None = None,
    ) -> None:
        object.__setattr__(  # fill the frozen record in one step (see ``records``)
            self,
            "__dict__",
            {
                "tp": tp,
                "pp": pp,
                "dp": dp,
                "cp": cp,
                "ep": ep,
                "etp": etp,
                "vp": vp,
                "sequence_parallel": sequence_parallel,
                "zero_stage": zero_stage,
                "distributed_optimizer": distributed_optimizer,
                "stage_layers": stage_layers,
            },
        )

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def optimizer_shard_stage(self) -> Num:
        """The ZeRO stage the memory model applies (distributed optimizer = stage 1)."""
        return maximum(self.zero_stage, 1 * self.distributed_optimizer)


# (field, broken, rule, value): ``broken`` and ``value`` are a bool and an int for one layout, or
# arrays for many; ``rule`` is a template whose ``{v}`` is the offending value.
Violation = tuple[str, Num, str, Num]


def layout_violations(
    model: ModelSpec, p: Parallelism, *, training: bool, pipeline_rule: bool = True
) -> list[Violation]:
    """Every framework rule a layout must satisfy, as ``Violation`` tuples. The single estimate
    raises on the first broken rule, the sweep keeps the masks (and, when asked, the reason of
    each refused layout): ``p``'s sizes may be arrays, one entry per layout (its
    ``stage_layers`` one split for all); ``pipeline_rule`` False leaves the pipeline split's
    rule to the caller.

    Training follows Megatron-LM: TP divides attention heads, KV heads (query groups) and every
    MLP width; PP x VP divides the layers; EP divides the experts. Serving engines (vLLM,
    TensorRT-LLM) also accept TP above the KV-head count by replicating KV heads, so for serving
    TP need only divide or be a multiple of the KV heads; they split the layers unevenly over
    any ``pp`` up to the layer count (``_serving_pipeline_rule``); and a serving rule names
    only a serving layout's fields (tp, pp, ep, stage_layers): its experts' split, over
    ``dp tp / ep`` ranks, is ``inference_memory``'s to check.
    """
    tp, pp, dp, cp, ep, etp, vp = p.tp, p.pp, p.dp, p.cp, p.ep, p.expert_tp, p.vp
    stage_layers = p.stage_layers
    out: list[Violation] = []
    sizes = {"tp": tp, "etp": etp, "ep": ep}
    rules = _static_rules(model, training)
    # The experts rule (last) is checked after the pipeline rules.
    for field, operand, value, rule in rules[:-1] if model.moe is not None else rules:
        if operand == "etp" and not training:
            continue  # serving splits each expert over dp*tp/ep ranks (inference_memory checks)
        if operand == "kv":
            out.append((field, logical_and(value % tp != 0, tp % value != 0), rule, tp))
        else:
            size = sizes[operand]
            out.append((field, value % size != 0, rule, size))
    layers, stages = model.num_layers, pp * vp
    if not pipeline_rule:  # the caller checks the split itself (the sweep: by pipeline_split)
        pass
    elif not training:  # serving: pp only (no virtual stages), any pp the layers can fill
        out.append(_serving_pipeline_rule(layers, pp, stage_layers))
    elif stage_layers is None:
        rule = f"pp*vp={{v}} must divide num_hidden_layers={layers}"
        rule += " (or choose an uneven pipeline split)"
        out.append(("layout.pp", layers % stages != 0, rule, stages))
    else:
        rule = f"the pipeline split must give pp*vp={{v}} stages and {layers} layers in all"
        bad = len(stage_layers) != stages or sum(stage_layers) != layers
        out.append(("layout.pp", bad, rule, stages))
    if training:  # a serving layout has no virtual stages (inference_memory refuses vp > 1)
        rule = "vp={v}: virtual pipeline stages need pp > 1"
        out.append(("layout.vp", logical_and(vp > 1, pp == 1), rule, vp))
    if model.has_recurrent_layers and training:  # serving has no cp (inference_memory: 1)
        rule = "cp={v}: context parallelism over recurrent (SSM, linear-attention) layers is not"
        rule += " modelled"
        out.append(("layout.cp", cp > 1, rule, cp))
    if model.moe is None:
        rule = "ep={v}: expert parallelism needs a mixture-of-experts model"
        out.append(("layout.ep", ep > 1, rule, ep))
        if training:  # a serving layout has no etp
            rule = "etp={v}: expert tensor parallelism needs a mixture-of-experts model (leave"
            rule += " it out)"
            out.append(("layout.etp", etp != tp, rule, etp))
    else:
        field, _, experts, rule = rules[-1]
        out.append((field, experts % ep != 0, rule, ep))
        if training:
            rule = "ep*etp={v} must divide tp*cp*dp"
            out.append(("layout.ep", (tp * cp * dp) % (ep * etp) != 0, rule, ep * etp))
    return out


def _serving_pipeline_rule(layers: int, pp: Num, stage_layers: tuple[int, ...] | None) -> Violation:
    """Serving's pipeline rule. vLLM, SGLang and TensorRT-LLM split any layer count over any
    ``pp`` (``layout.pipeline.serving_split``: ``stage_layers``, or without one vLLM's split,
    ``distinct_stages``); a stage must hold a layer. Worded with ``pp`` only: a serving layout
    has no virtual stages."""
    if stage_layers is None:
        rule = f"pp={{v}} exceeds num_hidden_layers={layers}: some pipeline stage would hold no"
        rule += " layer"
        return ("layout.pp", pp > layers, rule, pp)
    rule = f"the pipeline split must give pp={{v}} stages of at least one layer, {layers} layers"
    rule += " in all"
    bad = len(stage_layers) != pp or sum(stage_layers) != layers or min(stage_layers) < 1
    return ("layout.stage_layers", bad, rule, pp)


# (field, operand, value, rule): ``operand`` (tp, etp or ep) must divide the model's ``value``, or,
# for "kv", tp must divide the KV heads or be a multiple of them (serving).
_Rule = tuple[str, str, int, str]


@per_model
def _static_rules(model: ModelSpec, training: bool) -> tuple[_Rule, ...]:
    """The divisibility rules a model sets, with their messages: layout-independent, so built
    once per model (a single estimate then only does the modulo arithmetic)."""
    rules: dict[tuple[str, int], _Rule] = {}

    def divides(field: str, operand: str, name: str, value: int) -> None:
        rule = f"{field[7:]}={{v}} must divide {name}={value}"
        rules.setdefault((field, value), (field, operand, value, rule))

    for kind in model.kinds:
        if kind.mixer is not None:
            divides("layout.tp", "tp", f"{kind.mixer.kind} heads", kind.mixer.heads)
            if kind.mixer.kind != "mamba1":  # its B and C leave the row-parallel x_proj whole
                divides("layout.tp", "tp", f"{kind.mixer.kind} groups", kind.mixer.groups)
        if kind.attention is None:
            continue
        divides("layout.tp", "tp", "num_attention_heads", kind.attention.num_heads)
        kv = kind.attention.num_kv_heads
        if training:
            divides("layout.tp", "tp", "num_key_value_heads", kv)
        else:
            rule = (
                f"tp={{v}} must divide num_key_value_heads={kv} or be a multiple of it "
                "(KV heads are then replicated)"
            )
            rules.setdefault(("kv", kv), ("layout.tp", "kv", kv, rule))
    for width in model.intermediate_sizes:
        expert = model.moe is not None and width == model.moe.expert_intermediate_size
        if expert:
            divides("layout.etp", "etp", "intermediate_size", width)
        else:
            divides("layout.tp", "tp", "intermediate_size", width)
    out = tuple(rules.values())
    if model.moe is not None:  # last, whatever the other rules are
        num = model.moe.num_experts
        out += (("layout.ep", "ep", num, f"ep={{v}} must divide num_experts={num}"),)
    return out


@per_model
def _training_gcds(model: ModelSpec) -> dict[str, int]:
    """The greatest common divisor of each operand's static training rules."""
    gcds = {"tp": 0, "etp": 0, "ep": 0}
    for _, operand, value, _ in _static_rules(model, True):
        gcds[operand] = gcd(gcds[operand], value)
    return gcds


def _refuse_size(p: Parallelism) -> None:
    """Raise for the first layout size that is not an integer >= 1."""
    for name in ("tp", "pp", "dp", "cp", "ep", "vp"):
        value = getattr(p, name)
        if type(value) is not int or value < 1:
            raise SpecError(f"layout.{name}", "must be an integer >= 1", value)


def validate_layout(model: ModelSpec, p: Parallelism, *, training: bool) -> None:
    """Raise SpecError for a layout the frameworks cannot run (the rules of
    ``layout_violations``), after checking that every size is an integer >= 1.

    A training layout that ``layout_passes`` is accepted without listing the rules one by one;
    any other goes through ``layout_violations``, which names the first broken rule."""
    tp, pp, dp, cp, ep, vp, etp = p.tp, p.pp, p.dp, p.cp, p.ep, p.vp, p.etp
    for value in (tp, pp, dp, cp, ep, vp):
        if type(value) is not int or value < 1:  # bool, float and numpy ints are refused
            _refuse_size(p)
    if etp is None:
        etp = tp
    elif not isinstance(etp, int) or etp < 1:
        raise SpecError("layout.etp", "must be an integer >= 1", etp)
    if p.zero_stage not in (0, 1, 2, 3):
        raise SpecError("layout.zero_stage", "must be 0, 1, 2 or 3", p.zero_stage)
    split = p.stage_layers
    if (
        training
        and split is None
        and layout_passes(model, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vp=vp)
    ):
        return
    for field, broken, rule, bad in layout_violations(model, p, training=training):
        if broken:
            raise SpecError(field, rule.format(v=bad), bad)


def layout_passes(
    model: ModelSpec, *, tp: int, pp: int, dp: int, cp: int, ep: int, etp: int, vp: int
) -> bool:
    """Whether one training layout breaks none of ``layout_violations``' rules, in a handful of
    operations: a size divides every value of its static rules exactly when it divides their
    greatest common divisor (the rules' values and their gcd come from ``_static_rules``); the
    layout rules follow ``layout_violations`` one for one (a test checks the two agree on every
    catalog model over a grid of layouts)."""
    gcds = _training_gcds(model)
    if gcds["tp"] % tp or model.num_layers % (pp * vp) or (vp > 1 and pp == 1):
        return False
    if cp > 1 and model.has_recurrent_layers:
        return False
    if model.moe is None:
        return ep == 1 and etp == tp
    return not (gcds["etp"] % etp or gcds["ep"] % ep or (tp * cp * dp) % (ep * etp))
