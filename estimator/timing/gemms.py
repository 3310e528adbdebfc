"""The GEMMs of one layer's linears on one rank, forward, each timed by ``kernels.gemm_time``
(roofline with fitted efficiency curves): what the layer's time (``timing.layer``), the training
step (``timing.training``) and the serving steps (``serving.steps``, ``serving.engine_step``,
``serving.speculative``) charge for the linears.

- Every linear with the TP-sharded shape (column-parallel splits N, row-parallel K); routed
  experts as ``E / ep`` grouped GEMMs over the tokens the router sends them (balanced routing,
  the busiest rank at ``expert_load`` times its share): one GEMM per touched local expert as
  Megatron-Core runs them, or one fused kernel per linear as the serving engines do
  (``linear_gemm_time``). The training step charges the backward as two GEMMs of the same size
  (input and weight gradients).
- LoRA and QLoRA (``estimator.finetune``, ``finetune_layer_time``): each layer adds its
  adapters' two skinny GEMMs (``A`` of ``in x r``, ``B`` of ``r x out``, split over TP as
  ``Adapter.placement``); QLoRA dequantizes every NF4 weight to the compute dtype before its
  GEMM (bitsandbytes ``MatMul4Bit``): one memory-bound pass reading the NF4 bytes and writing the
  dequantized weight, per quantized module.
"""

from __future__ import annotations

from estimator.context import Context
from estimator.finetune import (
    Adapter,
    FineTune,
    adapters,
    linear_weight_bytes,
    quantized_modules,
)
from estimator.inputs.architecture import LayerKind
from estimator.inputs.model import ModelSpec
from estimator.inputs.precision import DTYPES, Precision
from estimator.layout.sharding import place_layer, placements
from estimator.memo import per_model
from estimator.timing.kernels import curve_time, gemm_time, memory_time
from estimator.xp import Num, is_array, maximum, numpy

__all__ = [
    "finetune_layer_time",
    "gemm_coefficients",
    "linear_gemm_time",
    "linear_gemms",
    "weight_read_bytes",
]


def linear_gemms(
    kind: LayerKind,
    tp: Num,
    ep: Num,
    etp: Num,
    tokens: Num,
    expert_load: Num = 1.0,
    expert_tokens: Num | None = None,
) -> list[tuple[Num, Num, Num, Num, str]]:
    """(M, K, N, count, component) of each GEMM one rank runs for one layer's forward; routed
    experts at ``expert_load`` times the balanced share (the busiest rank's, which the others
    wait for: ``TrainingSetup.expert_load``). ``expert_tokens``: the tokens the whole
    expert-parallel group routes in the step; by default every TP group of it holds
    ``tokens`` (``tokens ep etp / tp``), as in training and in a symmetric serving step."""
    out: list[tuple[Num, Num, Num, Num, str]] = []
    group = tokens * ep * etp / tp if expert_tokens is None else expert_tokens
    for m in kind.linears:
        if m.copies > 1:
            # Experts that receive at least one of the group's top-k choices (all of them for a
            # training micro-batch, a few for a small decode batch), then balanced routing.
            touched = 1 - (1 - m.active / m.copies) ** group
            local = m.copies // ep * touched
            routed = group * m.active / (m.copies * touched) * expert_load
            if m.tp == "column":
                out.append((routed, m.in_features, m.out_features / etp, local, m.component))
            else:
                out.append((routed, m.in_features / etp, m.out_features, local, m.component))
        elif m.tp == "replicated":
            out.append((tokens, m.in_features, m.out_features, 1, m.component))
        else:
            frac = maximum(m.units // tp, 1) / m.units
            if m.tp == "column":
                out.append((tokens, m.in_features, m.out_features * frac, 1, m.component))
            else:
                out.append((tokens, m.in_features * frac, m.out_features, 1, m.component))
    return out


def weight_read_bytes(precision: Precision) -> float:
    """Bytes per weight element a GEMM reads: the low-precision cache of fp8 recipes, else the
    stored format (quantized weights for serving)."""
    return DTYPES[precision.weight_cache or precision.weights].bytes


def gemm_coefficients(k: Num, n: Num, gemm_b: float, act_b: float, w_b: float) -> tuple[Num, ...]:
    """A (rows x k) @ (k x n) GEMM's FLOPs per row, bytes moved per row (its input and output
    rows) and bytes moved whatever the rows (the weight): FLOPs and bytes are these times the
    rows, combined first so that an array of rows costs one operation each."""
    return 2 * k * n, k * gemm_b + n * act_b, k * n * w_b


def linear_gemm_time(
    c: Context,
    kind: LayerKind,
    tokens: Num,
    expert_load: Num = 1.0,
    grouped_experts: bool = False,
    expert_tokens: Num | None = None,
) -> Num:
    """Forward time of one layer's linears on one rank for ``tokens`` tokens (``expert_tokens``:
    the tokens its expert-parallel group routes, ``linear_gemms``).

    For one layout and an array of token counts (the serving curve's batch sizes), the linears
    whose shapes do not depend on the tokens (all but routed experts) run through ``gemm_time``
    as one (linears x token counts) array: each roofline operation is then one numpy call for
    the whole layer instead of one per linear, with the same products summed in the same order.
    Routed experts are one GEMM per touched local expert, each with its launch floor
    (Transformer Engine's ``GroupedLinear`` under Megatron-Core runs one cuBLAS GEMM per local
    expert), or with ``grouped_experts`` one fused kernel per linear over all of them (vLLM's and
    SGLang's fused MoE kernels, TensorRT-LLM's CUTLASS MoE GEMMs: the serving engines): their
    FLOPs and bytes with one launch floor and one efficiency ramp.
    """
    model, acc, prof, p, precision = c.model, c.acc, c.prof, c.p, c.precision
    gemm_b = DTYPES[precision.gemm_inputs].bytes
    act_b = DTYPES[precision.activations].bytes
    w_b = weight_read_bytes(precision)
    w_expert = DTYPES[precision.expert_weights].bytes if precision.expert_weights else w_b
    stacked = type(p.tp) is int and is_array(tokens)
    total: Num = 0.0
    if stacked:
        per_row, row_bytes, fixed = _stacked_coefficients(
            model, model.kinds.index(kind), p.tp, p.ep, p.expert_tp, gemm_b, act_b, w_b
        )
        t = gemm_time(acc, prof, per_row * tokens, row_bytes * tokens + fixed, precision.compute)
        total = numpy().sum(t, axis=0)  # zeros for a layer of experts only
    for linear, (m_rows, k, n, count, _) in zip(
        kind.linears,
        linear_gemms(kind, p.tp, p.ep, p.expert_tp, tokens, expert_load, expert_tokens),
        strict=True,
    ):
        if stacked and linear.copies == 1:
            continue
        w = w_expert if linear.copies > 1 else w_b
        per_row, row_bytes, fixed = gemm_coefficients(k, n, gemm_b, act_b, w)
        if grouped_experts and linear.copies > 1:  # one fused kernel: one launch, one ramp
            flops, moved = count * per_row * m_rows, count * (row_bytes * m_rows + fixed)
            moe = prof.moe_curve(precision.compute) if prof.moe_curves else None
            total = total + (
                gemm_time(acc, prof, flops, moved, precision.compute)
                if moe is None
                else curve_time(acc, moe, flops, moved, precision.compute)
            )
            continue
        t = gemm_time(acc, prof, per_row * m_rows, row_bytes * m_rows + fixed, precision.compute)
        total = total + (t if type(count) is int and count == 1 else count * t)
    return total


@per_model
def _stacked_coefficients(
    model: ModelSpec,
    kind_index: int,
    tp: int,
    ep: int,
    etp: int,
    gemm_b: float,
    act_b: float,
    w_b: float,
) -> tuple[Num, ...]:
    """``gemm_coefficients`` of a layer kind's non-expert linears on one layout, as column
    arrays (one row per linear)."""
    kind = model.kinds[kind_index]
    shapes = [
        (k, n)
        for linear, (_, k, n, _, _) in zip(
            kind.linears, linear_gemms(kind, tp, ep, etp, 1), strict=True
        )
        if linear.copies == 1
    ]
    k, n = numpy().array(shapes, dtype=float).reshape(-1, 2).T[:, :, None]
    return gemm_coefficients(k, n, gemm_b, act_b, w_b)


def _adapter_shapes(kind: tuple[Adapter, ...], tp: Num) -> list[tuple[Num, Num]]:
    """(K, N) of the GEMMs one rank runs for a layer's adapters: ``A x`` and ``B (A x)``,
    each split as ``Adapter.placement`` places it."""
    out: list[tuple[Num, Num]] = []
    for a in kind:
        r, split = a.rank, a.parts[0].tp
        if split == "column":
            n = sum(p.out_features * maximum(p.units // tp, 1) / p.units for p in a.parts)
            out += [(a.in_features, r), (r, n)]
        elif split == "row":
            row = a.parts[0]
            out += [
                (a.in_features * maximum(row.units // tp, 1) / row.units, r),
                (r, a.out_features),
            ]
        else:
            out += [(a.in_features, r), (r, a.out_features)]
    return out


def finetune_layer_time(
    c: Context, kind_index: int, finetune: FineTune, tokens: Num
) -> tuple[Num, Num]:
    """Forward seconds one layer of a LoRA or QLoRA run adds on one rank: its adapters' GEMMs
    (weights in the precision's weight format), and under QLoRA the dequantization of its NF4
    weights (read NF4, write the compute dtype: one kernel per quantized module)."""
    model, acc, prof, p, precision = c.model, c.acc, c.prof, c.p, c.precision
    gemm_b = DTYPES[precision.gemm_inputs].bytes
    act_b = DTYPES[precision.activations].bytes
    w_b = DTYPES[precision.weights].bytes
    adapter: Num = 0.0
    for k, n in _adapter_shapes(adapters(model, finetune).per_kind[kind_index], p.tp):
        per_row, row_bytes, fixed = gemm_coefficients(k, n, gemm_b, act_b, w_b)
        adapter = adapter + gemm_time(
            acc, prof, per_row * tokens, row_bytes * tokens + fixed, precision.compute
        )
    dequant: Num = 0.0
    if finetune.method == "qlora":
        weights = place_layer(placements(model)[kind_index], p.tp, p.ep, p.expert_tp)[0]
        moved = weights * (linear_weight_bytes(finetune, precision) + act_b)
        dequant = memory_time(acc, prof, moved, quantized_modules(model.kinds[kind_index]))
    return adapter, dequant
