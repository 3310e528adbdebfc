"""A pipeline step as a schedule: when each stage runs each micro-batch's forward and backward,
for the chart that shows where the bubble is.

The schedules are Megatron-Core's (``megatron/core/pipeline_parallel/schedules.py``):

- 1F1B (``forward_backward_pipelining_without_interleaving``): stage ``s`` of ``p`` runs
  ``p - s - 1`` warm-up forwards, then alternates one forward and one backward, then drains the
  remaining backwards.
- Interleaved 1F1B (``..._with_interleaving``), ``v`` model chunks a stage: virtual stage
  ``c p + s`` holds chunk ``c`` of stage ``s``; forwards go in groups of ``p`` micro-batches
  through the chunks in order (backwards through them in reverse), with
  ``2 (p - s - 1) + (v - 1) p`` warm-up forwards (all of them when that reaches the step's).

Each operation starts when its stage is free and its input is ready: a forward after the same
micro-batch's forward on the virtual stage before, a backward after its forward and the
backward of the virtual stage after. Times are per chunk (a stage's forward and backward of one
micro-batch divided by ``v``); point-to-point sends are left out, as ``timing.training``'s bubble
does. With equal stages the makespan is ``m (f + b) + (p - 1) (f + b) / v``, the bubble
``timing.training`` adds (``tests/test_schedule.py`` checks both agree).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import SpecError

__all__ = ["Operation", "Schedule", "pipeline_schedule"]


@dataclass(frozen=True, slots=True)
class Operation:
    stage: int
    microbatch: int
    chunk: int
    kind: str  # "F" or "B"
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Schedule:
    """A step's operations, its length and the stages' idle share (the bubble)."""

    name: str
    operations: tuple[Operation, ...]
    step_s: float
    busy_s: float  # one stage's forward and backward work of the step
    bubble_fraction: float  # of the step, on the busiest stage


def pipeline_schedule(
    pp: int, microbatches: int, forward_s: float, backward_s: float, vp: int = 1
) -> Schedule:
    """The 1F1B (``vp`` 1) or interleaved 1F1B schedule of one step whose stages each take
    ``forward_s`` and ``backward_s`` per micro-batch (all their layers)."""
    if pp < 1 or microbatches < 1 or vp < 1:
        raise SpecError("layout", "pp, micro-batches and vp must be positive")
    if vp > 1 and microbatches % pp:
        raise SpecError(
            "layout.vp",
            f"the interleaved schedule runs micro-batches in groups of pp: {microbatches}"
            f" micro-batches is not a multiple of pp {pp}",
        )
    f, b = forward_s / vp, backward_s / vp
    orders = [_stage_order(pp, s, microbatches, vp) for s in range(pp)]
    done: dict[tuple[str, int, int], float] = {}  # (kind, virtual stage, micro-batch) -> end
    free = [0.0] * pp
    position = [0] * pp
    out: list[Operation] = []
    last = pp * vp - 1
    while any(position[s] < len(orders[s]) for s in range(pp)):
        progressed = False
        for s in range(pp):
            while position[s] < len(orders[s]):
                kind, chunk, mb = orders[s][position[s]]
                virtual = chunk * pp + s
                ready = _ready(done, kind, virtual, mb, last)
                if ready is None:
                    break
                start = max(free[s], ready)
                end = start + (f if kind == "F" else b)
                done[(kind, virtual, mb)] = end
                free[s] = end
                out.append(Operation(s, mb, chunk, kind, start, end))
                position[s] += 1
                progressed = True
        if not progressed:  # cannot happen for Megatron's orders; a guard against a bad one
            raise RuntimeError("pipeline schedule deadlocked")
    step = max(op.end_s for op in out)
    busy = microbatches * (forward_s + backward_s)
    name = "1F1B" if vp == 1 else f"interleaved 1F1B ({vp} chunks a stage)"
    return Schedule(name, tuple(out), step, busy, 1 - busy / step)


def _ready(
    done: dict[tuple[str, int, int], float], kind: str, virtual: int, mb: int, last: int
) -> float | None:
    """When an operation's inputs are ready; None if they are not computed yet."""
    if kind == "F":
        return 0.0 if virtual == 0 else done.get(("F", virtual - 1, mb))
    own = done.get(("F", virtual, mb))
    if virtual == last or own is None:
        return own
    after = done.get(("B", virtual + 1, mb))
    return None if after is None else max(own, after)


def _stage_order(pp: int, s: int, m: int, vp: int) -> list[tuple[str, int, int]]:
    """Stage ``s``'s operations in Megatron-Core's order: (kind, chunk, micro-batch)."""
    total = m * vp
    warmup = min(pp - s - 1, m) if vp == 1 else min(2 * (pp - s - 1) + (vp - 1) * pp, total)
    forwards = [_interleaved(k, pp, vp, forward=True) for k in range(total)]
    backwards = [_interleaved(k, pp, vp, forward=False) for k in range(total)]
    order = [("F", *forwards[k]) for k in range(warmup)]
    for k in range(total - warmup):
        order.append(("F", *forwards[warmup + k]))
        order.append(("B", *backwards[k]))
    order += [("B", *backwards[k]) for k in range(total - warmup, total)]
    return order


def _interleaved(k: int, pp: int, vp: int, forward: bool) -> tuple[int, int]:
    """The chunk and micro-batch of a stage's ``k``-th forward (or backward): groups of ``pp``
    micro-batches per chunk (Megatron-Core's ``get_model_chunk_id``); for ``vp`` 1, micro-batch
    ``k``."""
    if vp == 1:
        return 0, k
    group = k // (pp * vp)
    in_group = k % (pp * vp)
    chunk = in_group // pp
    if not forward:
        chunk = vp - 1 - chunk
    return chunk, group * pp + in_group % pp
