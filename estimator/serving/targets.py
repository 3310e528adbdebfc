"""Latency targets and the fleet a request rate needs: whether a steady state meets TTFT p99 and
TPOT targets (``meets_targets``), the most requests in flight (``concurrency_within_targets``)
and the highest Poisson rate (``rate_within_targets``) one replica serves within them, and the
replicas a rate needs (``fleet_need``, ``fleet_replicas``). Each search reads steady states
through a callable (``at``) the caller builds: ``estimate_load`` at a concurrency or a rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from estimator.errors import SpecError
from estimator.serving.load import LoadPoint
from estimator.serving.steady import MAX_REQUEST_RATE

__all__ = [
    "NEAR_CAPACITY",
    "RATE_STEPS",
    "FleetNeed",
    "concurrency_within_targets",
    "fleet_need",
    "fleet_replicas",
    "meets_targets",
    "rate_within_targets",
]

# Poisson arrivals this close to the replica's capacity are ill-conditioned: TTFT and TPOT move
# several-fold with a few percent of capacity (docs/validation.md: the MLPerf server runs).
NEAR_CAPACITY = 0.85
RATE_STEPS = 10  # bisection steps on the rate per replica: within 0.1% of the capacity


@dataclass(frozen=True, slots=True)
class FleetNeed:
    """The replicas a request rate needs: each planned at ``planned_rate_per_replica``, its
    highest rate within the latency targets (``within_targets``; without targets,
    ``NEAR_CAPACITY`` of its capacity, where the latencies are still well conditioned) over
    ``1 + headroom``; ``rate_per_replica`` None where one replica meets the targets at the
    whole rate with the headroom (not searched further)."""

    request_rate: float
    replicas: int | None  # None: no replica count meets the targets (not even one at no load)
    headroom: float
    within_targets: bool
    rate_per_replica: float | None
    basis: str

    @property
    def planned_rate_per_replica(self) -> float | None:
        if not self.rate_per_replica:
            return None
        return self.rate_per_replica / (1 + self.headroom)


def fleet_need(
    at: Callable[[float], LoadPoint],
    load: LoadPoint,
    request_rate: float,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
    headroom: float,
) -> FleetNeed:
    """The ``FleetNeed`` of ``request_rate`` on the replica whose steady state at a rate is
    ``at(rate)`` (``load``: at the whole rate). With targets, one replica where it meets them
    at the rate times ``1 + headroom`` (one more steady state), else the rate within them
    (``rate_within_targets``, ten); without, ``NEAR_CAPACITY`` of the capacity."""
    if headroom < 0:
        raise SpecError("rate_headroom", "must be >= 0", headroom)
    targets = ttft_target_s is not None or tpot_target_s is not None
    kept = f"{headroom:.0%} headroom"
    if not targets:
        per = NEAR_CAPACITY * load.capacity_requests_per_s
        basis = f"each at {NEAR_CAPACITY:.0%} of its capacity, no latency targets given; {kept}"
        return FleetNeed(
            request_rate, fleet_replicas(request_rate, per, headroom), headroom, False, per, basis
        )
    padded = request_rate * (1 + headroom)
    basis = f"within the TTFT p99/TPOT targets, {kept}"
    if padded <= MAX_REQUEST_RATE and meets_targets(at(padded), ttft_target_s, tpot_target_s):
        return FleetNeed(request_rate, 1, headroom, True, None, basis)
    per = rate_within_targets(at, ttft_target_s, tpot_target_s)
    if per <= 0:
        basis = "no load meets the TTFT p99/TPOT targets on one replica of this layout"
        return FleetNeed(request_rate, None, headroom, True, 0.0, basis)
    return FleetNeed(
        request_rate, fleet_replicas(request_rate, per, headroom), headroom, True, per, basis
    )


def meets_targets(
    point: LoadPoint, ttft_target_s: float | None, tpot_target_s: float | None
) -> bool:
    """Whether a steady state meets the latency targets as a serving SLO reads them: TTFT at its
    99th percentile, TPOT (the same for every request in a steady state); an overloaded replica,
    whose queue grows without end, meets none."""
    if point.regime == "overloaded":
        return False
    return (ttft_target_s is None or point.ttft_p99_s <= ttft_target_s) and (
        tpot_target_s is None or point.tpot_s <= tpot_target_s
    )


def _slack(point: LoadPoint, ttft_target_s: float | None, tpot_target_s: float | None) -> float:
    """How far a steady state is inside its targets: 1 less the larger of its latencies over
    their targets (negative beyond them); -inf for an overloaded replica."""
    if point.regime == "overloaded":
        return -math.inf
    ratios = [
        value / target
        for value, target in ((point.ttft_p99_s, ttft_target_s), (point.tpot_s, tpot_target_s))
        if target is not None
    ]
    return 1.0 - max(ratios, default=0.0)


def concurrency_within_targets(
    at: Callable[[int], LoadPoint],
    cap: int,
    ttft_target_s: float | None,
    tpot_target_s: float | None,
) -> tuple[int, LoadPoint | None]:
    """The most requests kept in flight, 1 to ``cap``, whose closed-loop steady state
    (``at(concurrency)``) meets the targets (``meets_targets``), with that steady state; (0,
    None) where not even one request alone does. The steady state's latencies grow with the
    requests in flight, so the answer is the edge of a bracket (``lo`` meets them, ``hi`` does
    not) narrowed until ``hi = lo + 1``: each probe at the concurrency where the latencies'
    slack (``_slack``), interpolated linearly between the bracket's ends, reaches zero, or at
    the bracket's middle where the last interpolation did not halve it (the safeguard that
    keeps bisection's worst case); a few steady states per layout instead of bisection's ~10."""
    point = at(1)
    if not meets_targets(point, ttft_target_s, tpot_target_s):
        return 0, None
    lo, hi = 1, max(cap, 1)
    top = at(hi)
    if meets_targets(top, ttft_target_s, tpot_target_s):
        return hi, top
    slack_lo = _slack(point, ttft_target_s, tpot_target_s)
    slack_hi = _slack(top, ttft_target_s, tpot_target_s)
    interpolate = True
    while hi - lo > 1:  # at(lo) meets them (``point``), at(hi) does not
        width = hi - lo
        if interpolate and math.isfinite(slack_hi) and slack_lo > slack_hi:
            guess = lo + width * slack_lo / (slack_lo - slack_hi)
            mid = min(max(round(guess), lo + 1), hi - 1)
        else:
            mid = (lo + hi) // 2
        probe = at(mid)
        if meets_targets(probe, ttft_target_s, tpot_target_s):
            lo, point, slack_lo = mid, probe, _slack(probe, ttft_target_s, tpot_target_s)
        else:
            hi, slack_hi = mid, _slack(probe, ttft_target_s, tpot_target_s)
        interpolate = 2 * (hi - lo) <= width
    return lo, point


def rate_within_targets(
    at: Callable[[float], LoadPoint],
    ttft_target_s: float | None,
    tpot_target_s: float | None,
    steps: int = RATE_STEPS,
) -> float:
    """The highest Poisson rate per replica whose steady state (``at(rate)``) meets TTFT p99 <=
    ``ttft_target_s`` and TPOT <= ``tpot_target_s``: bisection below the replica's capacity, to
    ``2^-steps`` of it (0: not even the lightest load meets them)."""
    lo, hi = 0.0, at(1e-6).capacity_requests_per_s
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets_targets(at(mid), ttft_target_s, tpot_target_s) else (lo, mid)
    return lo


def fleet_replicas(request_rate: float, rate_per_replica: float, headroom: float = 0.0) -> int:
    """The replicas that carry ``request_rate`` requests/s when each is planned at
    ``rate_per_replica / (1 + headroom)`` (the rate within the targets less the optimism kept
    in hand); at least one."""
    if rate_per_replica <= 0:
        raise SpecError("request_rate", "no load meets the latency targets on one replica", 0)
    if headroom < 0:
        raise SpecError("rate_headroom", "must be >= 0", headroom)
    need = request_rate * (1 + headroom) / rate_per_replica
    return max(math.ceil(need * (1 - 1e-12)), 1)
