"""How a pipeline spreads the decoder layers over its stages, as the frameworks do it.

The result is ``stage_layers``: the decoder layers of each virtual stage, in virtual-stage order
(stage ``v = j * pp + r`` is chunk ``j`` of pipeline rank ``r``; with ``vp = 1``, simply rank
``r``). The input embedding always sits on the first virtual stage and the output head and loss
on the last, whatever the split.

Megatron-Core (``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build`` and
``pipeline_parallel_layer_layout.py``, NVIDIA/Megatron-LM at d98e8a6) splits:

- ``even``: ``L / pp`` layers per rank, ``/ vp`` per chunk; both must divide (its default).
- ``embedding_loss``: ``--account-for-embedding-in-pipeline-split`` and/or
  ``--account-for-loss-in-pipeline-split`` count the embedding and the loss as one layer each:
  ``L + e + l`` must divide by ``pp`` (then by ``vp``), and the first (last) virtual stage builds
  one transformer layer fewer.
- ``first_last``: ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  give the first and last rank's layers; the rest must divide evenly over the middle ranks, and
  each rank's layers over its ``vp`` chunks.
- ``layout``: ``--pipeline-model-parallel-layout``, an explicit string such as
  ``"Et|(tt|)*30,tL"`` (``E`` embedding, ``t`` a decoder layer, ``L`` loss, ``|`` between virtual
  stages in virtual-stage order, ``(...)*n`` and ``x*n`` repeat, commas are cosmetic); its stage
  count must be a multiple of ``pp``, which sets ``vp``.

DeepSpeed's ``PipelineModule`` (``partition_method``) splits contiguous layers over ``pp`` ranks
(no virtual stages): ``uniform`` spreads the decoder layers as ``partition_uniform`` does (the
first ``L mod pp`` ranks one more), ``parameters`` balances the trainable parameters, the
embedding and the head counting as layers of their size: the split whose heaviest rank is
lightest, as DeepSpeed's ``partition_balanced`` finds it (among splits with the same heaviest
rank, this module fills each rank as far as that bound allows, which may differ from DeepSpeed's
choice; the memory and time of the heaviest rank do not).

``auto`` (the planner's default) takes the first of ``even``, ``embedding_loss`` (embedding and
loss both, then either) and ``first_last`` (the lightest first/last pair whose remainder divides)
that Megatron-Core accepts for the layout; failing those, a balanced ``layout`` string (the
embedding, the layers and the loss spread as evenly as they go, the extra ones on the stages
after the first, as Megatron-Bridge's recipes write one for DeepSeek-V3), and says which it took.

Serving engines split a replica's decoder layers over its ``pp`` ranks by their own rules, with
no virtual stages and whatever ``pp`` is (``serving_split``): ``vllm_stage_layers``,
``sglang_stage_layers`` and ``trtllm_stage_layers`` give the defaults, and an explicit split
(``VLLM_PP_LAYER_PARTITION`` / ``SGLANG_PP_LAYER_PARTITION``) replaces them. The embedding sits
on the first rank and the final norm and LM head on the last, whatever the split.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from estimator.errors import SpecError
from estimator.inputs.model import ModelSpec
from estimator.layout.sharding import embedding_extras

__all__ = [
    "SERVING_SPLITS",
    "SPLITS",
    "PipelineSplit",
    "ServingSplitRule",
    "Split",
    "SplitSettings",
    "check_layout_mtp",
    "check_serving_stage_layers",
    "check_stage_count",
    "model_split",
    "parse_layout",
    "pipeline_split",
    "serving_split",
    "serving_stage_layers",
    "sglang_stage_layers",
    "trtllm_stage_layers",
    "vllm_stage_layers",
]

Split = Literal["auto", "even", "embedding_loss", "first_last", "layout", "uniform", "parameters"]
SPLITS: tuple[Split, ...] = (
    "auto",
    "even",
    "embedding_loss",
    "first_last",
    "layout",
    "uniform",
    "parameters",
)


@dataclass(frozen=True, slots=True)
class PipelineSplit:
    """A resolved split: ``stage_layers`` in virtual-stage order, and how it was reached (the
    framework rule and its settings, for the answer's notes)."""

    stage_layers: tuple[int, ...]
    rule: str
    description: str
    mtp_layers: int = 0  # the layout's multi-token-prediction layers (m), on its last stage

    @property
    def even(self) -> bool:
        return len(set(self.stage_layers)) == 1


@dataclass(frozen=True, slots=True)
class SplitSettings:
    """The settings a split rule reads (Megatron-Core's flags): ``first_stage_layers`` and
    ``last_stage_layers`` the first and last rank's layers (``first_last``,
    ``--decoder-first/last-pipeline-num-layers``); ``embedding_in_split`` and ``loss_in_split``
    whether the embedding and the loss count as a layer (``embedding_loss``,
    ``--account-for-embedding/loss-in-pipeline-split``); ``layout`` the layout string
    (``layout``, ``--pipeline-model-parallel-layout``). The other rules read none."""

    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    embedding_in_split: bool = True
    loss_in_split: bool = True
    layout: str | None = None


_DEFAULT_SETTINGS = SplitSettings()


def pipeline_split(
    layers: int,
    pp: int,
    vp: int = 1,
    split: Split = "auto",
    settings: SplitSettings = _DEFAULT_SETTINGS,
    *,
    layer_weights: Sequence[int] | None = None,
) -> PipelineSplit:
    """The decoder layers of each virtual stage under ``split`` and its ``settings`` (see the
    module docstring). ``layer_weights`` (``parameters`` only): the embedding's, each decoder
    layer's and the head's parameters, in order. Refusals name the field and the framework's
    rule."""
    if pp < 1 or vp < 1:
        raise SpecError("layout.pp", "pp and vp must be >= 1", pp)
    check_stage_count(layers, pp, vp)
    if split == "layout":
        if not settings.layout:
            raise SpecError("layout.pipeline_layout", "is required with pipeline_split=layout")
        return _from_layout(settings.layout, layers, pp, vp)
    if split in ("uniform", "parameters"):
        return _deepspeed(layers, pp, vp, split, layer_weights)
    if split == "first_last":
        first, last = settings.first_stage_layers, settings.last_stage_layers
        return _first_last(layers, pp, vp, first, last)
    if split == "embedding_loss":
        e, loss = settings.embedding_in_split, settings.loss_in_split
        return _embedding_loss(layers, pp, vp, e, loss)
    if split == "even":
        return _embedding_loss(layers, pp, vp, False, False)
    errors = []
    for e, loss in ((False, False), (True, True), (True, False), (False, True)):
        try:
            return _embedding_loss(layers, pp, vp, e, loss)
        except SpecError as exc:
            errors.append(exc)
    try:
        return _balanced_first_last(layers, pp, vp)
    except SpecError:
        pass
    return _balanced_layout(layers, pp, vp)


def check_stage_count(layers: int, pp: int, vp: int) -> None:
    """At most one virtual stage per pipeline item (the embedding, each decoder layer, the
    loss), whatever the split: a stage past that holds nothing to run. Checked before any split
    is searched, so the work a request can ask for is bounded by its model's depth."""
    stages = pp * vp
    if stages > layers + 2:
        raise SpecError(
            "layout.pp",
            f"pp*vp={stages} virtual stages exceed the {layers} layers plus the embedding and"
            " the loss: some stage would hold nothing",
            pp,
        )


def _balanced_layout(layers: int, pp: int, vp: int) -> PipelineSplit:
    """The embedding, ``layers`` and the loss over ``pp x vp`` virtual stages as evenly as they
    go (the remainder one each on the stages after the first), as a layout string."""
    stages = pp * vp
    base, extra = divmod(layers + 2, stages)
    if base == 0:
        raise SpecError(
            "layout.pp",
            f"pp*vp={stages} virtual stages exceed the {layers} layers plus the embedding and"
            " the loss: some stage would hold nothing",
            stages,
        )
    sizes = [base + (1 <= v <= extra) for v in range(stages)]
    counts = [*sizes]
    counts[0] -= 1  # the embedding
    counts[-1] -= 1  # the loss
    if min(counts) < 0:
        raise SpecError("layout.pp", f"pp*vp={stages} leaves a stage without room", stages)
    text = "|".join(
        ("E" if v == 0 else "") + "t" * n + ("L" if v == stages - 1 else "")
        for v, n in enumerate(counts)
    )
    return PipelineSplit(
        tuple(counts),
        "layout",
        f"Megatron-Core pipeline_model_parallel_layout (balanced, by the planner): {text}",
    )


def _per_chunk(rank_layers: int, vp: int, field: str) -> int:
    if rank_layers % vp:
        raise SpecError(
            field, f"{rank_layers} layers on a rank must divide by vp={vp} (Megatron-Core)", vp
        )
    return rank_layers // vp


def _embedding_loss(layers: int, pp: int, vp: int, e: bool, loss: bool) -> PipelineSplit:
    counted = layers + e + loss
    if counted % pp:
        what = " + ".join(["layers"] + ["embedding"] * e + ["loss"] * loss)
        raise SpecError(
            "layout.pp",
            f"pp={pp} must divide {what} = {counted} (Megatron-Core: num_layers should be "
            "divisible by pipeline_model_parallel_size)",
            pp,
        )
    chunk = _per_chunk(counted // pp, vp, "layout.vp")
    stages = [chunk] * (pp * vp)
    stages[0] -= e
    stages[-1] -= loss
    if min(stages) < 0 or (e and loss and pp * vp == 1 and stages[0] < 0):
        raise SpecError("layout.pp", "not enough layers for the embedding/loss stages", pp)
    rule = "even" if not (e or loss) else "embedding_loss"
    parts = ["account_for_embedding_in_pipeline_split"] * e + [
        "account_for_loss_in_pipeline_split"
    ] * loss
    description = (
        f"Megatron-Core even split: {chunk} layers per virtual stage"
        if rule == "even"
        else f"Megatron-Core {' + '.join(parts)}: {chunk} per virtual stage counting "
        + " and ".join(["the embedding"] * e + ["the loss"] * loss)
        + " as layers"
    )
    return PipelineSplit(tuple(stages), rule, description)


def _first_last(
    layers: int, pp: int, vp: int, first: int | None, last: int | None
) -> PipelineSplit:
    if first is None and last is None:
        raise SpecError(
            "layout.first_stage_layers",
            "first_stage_layers or last_stage_layers is required with pipeline_split=first_last",
        )
    rest, middle = layers, pp
    for value, name in ((first, "first_stage_layers"), (last, "last_stage_layers")):
        if value is not None:
            if value < 0:
                raise SpecError(f"layout.{name}", "must be >= 0", value)
            rest -= value
            middle -= 1
    if middle < 0 or rest < 0:
        raise SpecError("layout.first_stage_layers", f"exceed the model's {layers} layers", first)
    if middle == 0 and rest:
        raise SpecError(
            "layout.first_stage_layers",
            f"first + last stage layers must equal the {layers} layers with pp={pp}",
            first,
        )
    if middle and rest % middle:
        raise SpecError(
            "layout.first_stage_layers",
            f"the {rest} layers left must divide over the {middle} middle stages "
            "(Megatron-Core: uneven pipelining)",
            first,
        )
    per_rank = [rest // middle if middle else 0] * pp
    if first is not None:
        per_rank[0] = first
    if last is not None:
        per_rank[-1] = last
    chunks = [_per_chunk(n, vp, "layout.vp") for n in per_rank]
    stages = tuple(chunks[r] for _ in range(vp) for r in range(pp))
    description = (
        "Megatron-Core uneven pipeline: "
        + (f"decoder_first_pipeline_num_layers={first}" if first is not None else "")
        + (", " if first is not None and last is not None else "")
        + (f"decoder_last_pipeline_num_layers={last}" if last is not None else "")
        + (f", {rest // middle} on each middle stage" if middle else "")
    )
    return PipelineSplit(stages, "first_last", description)


def _balanced_first_last(layers: int, pp: int, vp: int) -> PipelineSplit:
    """The first/last pair Megatron-Core accepts whose heaviest stage is lightest (ties: the
    lighter first stage, which also holds the embedding), with at least one layer on every
    middle stage (a rank that holds nothing is a layout nobody runs; the balanced layout string
    is tried next). Searched by arithmetic over the middle ranks' count ``m`` and the first
    rank's layers: the rest go to the last rank, and every rank's layers divide by ``vp``."""
    middle = pp - 2
    best: tuple[tuple[int, int], int, int] | None = None  # (key, first, last)
    if middle < 0:
        raise SpecError("layout.pp", f"no first/last split of {layers} layers over pp={pp}", pp)
    counts = [0] if middle == 0 else range(vp, layers // middle + 1, vp)
    for m in counts:
        ends = layers - m * middle
        if ends < 0 or ends % vp:
            continue
        for first in range(0, ends + 1, vp):
            last = ends - first
            key = (max(first, m, last) // vp, ends // vp)
            if best is None or key < best[0]:
                best = (key, first, last)
    if best is None:
        raise SpecError("layout.pp", f"no first/last split of {layers} layers over pp={pp}", pp)
    return _first_last(layers, pp, vp, best[1], best[2])


def check_layout_mtp(split: PipelineSplit | None, mtp_layers: int) -> None:
    """A layout string's MTP layers (m) are the plan's: Megatron-Core asserts that a layout
    places all of ``--mtp-num-layers`` or none."""
    placed = 0 if split is None else split.mtp_layers
    if placed and placed != mtp_layers:
        raise SpecError(
            "mtp_layers",
            f"the pipeline layout places {placed} MTP layer(s) (m): set mtp_layers to {placed},"
            " or leave the m out",
            mtp_layers,
        )


def parse_layout(text: str) -> list[str]:
    """Megatron-Core's layout string unrolled into one string per virtual stage."""
    if len(text) > 10_000:
        raise SpecError("layout.pipeline_layout", "must be at most 10,000 characters")
    s = text.replace(",", "").replace(" ", "")
    for pattern in (r"\(([^()]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pattern, lambda m: m.group(1) * min(int(m.group(2)), 100_000), s)
        if len(s) > 1_000_000:
            raise SpecError("layout.pipeline_layout", "unrolls to too many layers", text)
    stages = s.split("|")
    bad = sorted(set(s) - set("Etlm|L"))
    if bad:
        raise SpecError(
            "layout.pipeline_layout",
            f"has unknown layer characters {''.join(bad)} (E embedding, t decoder layer, "
            "L loss, m MTP, | between virtual stages)",
            text,
        )
    return stages


def _from_layout(text: str, layers: int, pp: int, vp: int) -> PipelineSplit:
    stages = parse_layout(text)
    if len(stages) % pp:
        raise SpecError(
            "layout.pipeline_layout",
            f"has {len(stages)} stages, not a multiple of pp={pp} (Megatron-Core)",
            text,
        )
    if len(stages) // pp != vp:
        raise SpecError(
            "layout.vp",
            f"must equal the layout's stages / pp = {len(stages) // pp} (Megatron-Core sets vp "
            "from the layout)",
            vp,
        )
    flat = "".join(stages)
    if not flat.startswith("E") or not flat.endswith("L"):
        raise SpecError(
            "layout.pipeline_layout", "must start with the embedding E and end with the loss L"
        )
    if flat.count("E") != 1 or flat.count("L") != 1:
        raise SpecError("layout.pipeline_layout", "must hold one embedding E and one loss L")
    decoders = flat.count("t")
    if decoders != layers:
        raise SpecError(
            "layout.pipeline_layout",
            f"places {decoders} decoder layers; the model has {layers}",
            text,
        )
    mtp = flat.count("m")
    if mtp != stages[-1].count("m"):
        raise SpecError(
            "layout.pipeline_layout",
            "places MTP layers (m) on the last stage only (as Megatron-Core does without a"
            " layout; the planner times and sizes them there)",
            text,
        )
    counts = tuple(stage.count("t") for stage in stages)
    description = f"Megatron-Core pipeline_model_parallel_layout {text}"
    return PipelineSplit(counts, "layout", description, mtp)


def _deepspeed(
    layers: int, pp: int, vp: int, method: str, weights: Sequence[int] | None
) -> PipelineSplit:
    if vp != 1:
        raise SpecError("layout.vp", "DeepSpeed's pipeline has no virtual stages: vp must be 1", vp)
    if method == "uniform":
        base, extra = divmod(layers, pp)
        counts = tuple(base + (r < extra) for r in range(pp))
        return PipelineSplit(
            counts, "uniform", "DeepSpeed partition_method=uniform: " + ", ".join(map(str, counts))
        )
    if weights is None or len(weights) != layers + 2:
        raise ValueError("parameters partitioning needs embedding, layer and head weights")
    items = list(weights)
    cuts = _balanced_cuts(items, pp)
    per_rank = tuple(
        sum(1 for i in range(cuts[r], cuts[r + 1]) if 0 < i < layers + 1) for r in range(pp)
    )
    description = "DeepSpeed partition_method=parameters: " + ", ".join(map(str, per_rank))
    return PipelineSplit(per_rank, method, description)


def _balanced_cuts(weights: Sequence[int], parts: int) -> list[int]:
    """Contiguous cuts of ``weights`` into ``parts`` minimising the heaviest part (binary search
    on that bound; each part filled as far as the bound allows, one item left per part)."""
    if parts > len(weights):
        raise SpecError("layout.pp", f"pp={parts} exceeds the {len(weights)} pipeline items", parts)
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)

    def fits(bound: int) -> list[int] | None:
        cuts, start = [0], 0
        for _ in range(parts - 1):
            end = start
            while end < len(weights) and prefix[end + 1] - prefix[start] <= bound:
                end += 1
            # leave at least one item for each remaining part
            end = min(end, len(weights) - (parts - len(cuts)))
            if end <= start:
                return None
            cuts.append(end)
            start = end
        if prefix[-1] - prefix[start] > bound:
            return None
        return [*cuts, len(weights)]

    lo, hi = max(weights), prefix[-1]
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    found = fits(lo)
    assert found is not None
    return found


def model_split(
    model: ModelSpec,
    pp: int,
    vp: int = 1,
    split: Split = "auto",
    settings: SplitSettings = _DEFAULT_SETTINGS,
) -> PipelineSplit | None:
    """``pipeline_split`` of a model's layers; None where every stage gets ``L / (pp vp)``
    layers (the layout's ``stage_layers`` is then left at None, the even split). A split of one
    stage is always even."""
    if pp * vp == 1 and split != "layout":
        return None
    weights = None
    if split == "parameters":
        per_layer = [model.kinds[k].params for k in model.layer_kinds]
        first = model.token_embedding_params + model.position_embedding_params
        last = model.output_head_params + embedding_extras(model)[1]
        weights = [first, *per_layer, last]
    found = pipeline_split(model.num_layers, pp, vp, split, settings, layer_weights=weights)
    return None if found.rule == "even" else found


# --- serving engines ----------------------------------------------------------------------------

ServingSplitRule = Literal["vllm", "sglang", "trtllm"]


def vllm_stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """vLLM's decoder layers on each of ``pp`` pipeline ranks (``vllm/distributed/utils.py``
    ``get_pp_indices``, vllm-project/vllm at 5a6541d; the rule of PR #13839): ``layers // pp``
    each, and the ``layers % pp`` left over one each to the ranks counted from the second-to-last
    backwards (``partitions[-2]``, ``partitions[-3]``, ...): the last rank, which also holds the
    final norm and the LM head, never takes one, and the first (the embedding's) only when
    ``pp - 1`` are left over. 61 layers: pp 2 -> (31, 30), pp 3 -> (20, 21, 20), pp 4 ->
    (15, 15, 16, 15), pp 8 -> (7, 7, 8, 8, 8, 8, 8, 7). ``VLLM_PP_LAYER_PARTITION`` (a
    comma-separated split) overrides it: ``serving_split``'s ``partition``."""
    base, extra = divmod(layers, pp)
    out = [base] * pp
    for i in range(2, extra + 2):
        out[-i] += 1
    return tuple(out)


def sglang_stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """SGLang's decoder layers on each of ``pp`` pipeline ranks
    (``python/sglang/srt/distributed/utils.py`` ``get_pp_indices``, sgl-project/sglang since
    PR #13977, Nov 2025): ``layers // pp`` each, and the ``layers % pp`` left over one each to
    the last ranks (``pp_rank >= pp_size - remainder``), which wait longest for their first work
    in the pipeline. 61 layers: pp 2 -> (30, 31), pp 3 -> (20, 20, 21), pp 4 -> (15, 15, 15, 16),
    pp 8 -> (7, 7, 7, 8, 8, 8, 8, 8). (Releases before PR #13282 gave the whole remainder to the
    last rank: 7 x 7 and 12 for 61 layers over 8; this module follows the current rule.)
    ``SGLANG_PP_LAYER_PARTITION`` overrides it: ``serving_split``'s ``partition``."""
    base, extra = divmod(layers, pp)
    return tuple(base + (r >= pp - extra) for r in range(pp))


def trtllm_stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """TensorRT-LLM's decoder layers on each of ``pp`` pipeline ranks (``tensorrt_llm/mapping.py``
    ``MappingBase.pp_layers``, NVIDIA/TensorRT-LLM at b35ac1b: ``torch.tensor_split`` of the
    layer indices into ``pp`` parts): ``layers // pp`` each, the first ``layers % pp`` ranks one
    more. 61 layers: pp 2 -> (31, 30), pp 4 -> (16, 15, 15, 15), pp 8 -> (8, 8, 8, 8, 8, 7, 7, 7).
    Assumed: an explicit split (``partition``) is taken as the other engines take theirs."""
    base, extra = divmod(layers, pp)
    return tuple(base + (r < extra) for r in range(pp))


SERVING_SPLITS: dict[ServingSplitRule, Callable[[int, int], tuple[int, ...]]] = {
    "vllm": vllm_stage_layers,
    "sglang": sglang_stage_layers,
    "trtllm": trtllm_stage_layers,
}
_ENGINE_FUNCTIONS = {
    "vllm": "vLLM get_pp_indices",
    "sglang": "SGLang get_pp_indices",
    "trtllm": "TensorRT-LLM Mapping.pp_layers",
}
_PARTITION_SETTINGS = {
    "vllm": "VLLM_PP_LAYER_PARTITION",
    "sglang": "SGLANG_PP_LAYER_PARTITION",
    "trtllm": "an explicit split",
}


def serving_split(
    layers: int,
    pp: int,
    rule: ServingSplitRule = "vllm",
    partition: Sequence[int] | None = None,
) -> PipelineSplit:
    """The decoder layers of each pipeline rank of a serving replica: ``partition`` where one is
    given (as ``VLLM_PP_LAYER_PARTITION`` / ``SGLANG_PP_LAYER_PARTITION`` give it: the engines
    check that it has ``pp`` entries that sum to the layers; this also refuses a rank without a
    layer), else the engine's default (``SERVING_SPLITS[rule]``). Refusals name ``layout.pp`` or
    ``layout.stage_layers``, never a training-only field."""
    if rule not in SERVING_SPLITS:
        known = ", ".join(SERVING_SPLITS)
        raise SpecError("engine", f"has no pipeline split rule (one of {known})", rule)
    if type(pp) is not int or pp < 1:
        raise SpecError("layout.pp", "must be an integer >= 1", pp)
    if pp > layers:
        raise SpecError(
            "layout.pp",
            f"pp={pp} exceeds num_hidden_layers={layers}: some pipeline stage would hold no layer",
            pp,
        )
    if partition is None:
        counts = SERVING_SPLITS[rule](layers, pp)
        how = f"{_ENGINE_FUNCTIONS[rule]} default"
    else:
        counts = tuple(partition)
        check_serving_stage_layers(layers, pp, counts)
        how = f"explicit split ({_PARTITION_SETTINGS[rule]})"
    text = " + ".join(map(str, counts))
    return PipelineSplit(counts, rule, f"{how}: {text} decoder layers over pp={pp}")


def check_serving_stage_layers(layers: int, pp: int, counts: Sequence[int]) -> None:
    """An explicit serving split: ``pp`` entries, each at least one layer, ``layers`` in all
    (``get_pp_indices``' checks in vLLM and SGLang, and a rank that holds no layer refused)."""
    if len(counts) != pp:
        raise SpecError(
            "layout.stage_layers",
            f"gives {len(counts)} stages; pp={pp} needs one entry per pipeline stage",
            list(counts),
        )
    if any(type(n) is not int or n < 1 for n in counts):
        raise SpecError(
            "layout.stage_layers", "every pipeline stage must hold at least one layer",
            list(counts),
        )  # fmt: skip
    if sum(counts) != layers:
        raise SpecError(
            "layout.stage_layers",
            f"places {sum(counts)} decoder layers; the model has num_hidden_layers={layers}",
            list(counts),
        )


def serving_stage_layers(
    model: ModelSpec,
    pp: int,
    rule: ServingSplitRule = "vllm",
    partition: Sequence[int] | None = None,
) -> tuple[int, ...] | None:
    """``serving_split`` of a model's layers as ``Parallelism.stage_layers`` takes it: None
    where every rank holds ``num_layers / pp`` (the even split, whatever the rule)."""
    found = serving_split(model.num_layers, pp, rule, partition)
    return None if found.even else found.stage_layers
