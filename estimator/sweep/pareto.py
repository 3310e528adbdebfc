"""Pareto fronts of sweeps: the layouts no other beats on both of two measures.

- ``front``: training sweeps, over numpy columns (both measures maximized; exact ties all stay),
  fastest first.
- ``cheapest_front``: serving sweeps, over rows (cost per 1M output tokens minimized, output
  tokens/s per GPU maximized; of rows equal on both, the first in cost order stays), cheapest
  first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

__all__ = ["cheapest_front", "front"]

R = TypeVar("R", bound=Mapping[str, Any])


def front(speed: np.ndarray, other: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Indices (into the sweep) of the layouts no other beats on both ``speed`` and ``other``
    (both maximized; exact ties all stay), fastest first."""
    if not index.size:
        return index
    order = np.lexsort((-other, -speed))
    s, o = speed[order], other[order]
    best = np.maximum.accumulate(o)
    before = np.concatenate(([-np.inf], best[:-1]))  # best `other` among the faster layouts
    # The speed of the (fastest) layout that set that best, to tell a tie from a domination.
    setter = np.maximum.accumulate(np.where(o > before, np.arange(o.size), 0))
    setter_speed = np.concatenate(([np.inf], s[setter[:-1]]))
    dominated = (before > o) | ((before == o) & (setter_speed > s))
    kept: np.ndarray = index[order[~dominated]]
    return kept


def cheapest_front(rows: Sequence[R], cost: str, speed: str) -> list[R]:
    """The rows with a ``cost`` (minimized) that no other beats on both it and ``speed``
    (maximized), cheapest first."""
    priced = [r for r in rows if r.get(cost) is not None]
    priced.sort(key=lambda r: (r[cost], -r[speed]))
    kept, best = [], -math.inf
    for r in priced:
        if r[speed] > best:
            kept.append(r)
            best = r[speed]
    return kept
