"""Arithmetic that works the same on Python numbers and on numpy arrays.

The estimator's formulas take layout quantities (tp, pp, micro-batch, ...) that are plain ints for
a single estimate and numpy arrays for a sweep. Plain operators already work on both; these few
helpers cover what does not (min/max/where/indexing), picking the cheap scalar path when every
argument is a Python number so that a single estimate stays in microseconds.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "Num",
    "ceil_div",
    "is_array",
    "logical_and",
    "maximum",
    "minimum",
    "numpy",
    "take",
    "where",
]

# A Python number or a numpy array of them (one per layout of a sweep block). ``float`` takes
# ``int`` and ``bool`` by mypy's numeric promotion; a comparison of arrays is an array (of bools),
# hence ``NDArray[Any]``. A formula that needs a plain number (a record's float field, an index)
# says so with ``float()`` / ``int()``, which checks the scalar path under strict mypy.
Num: TypeAlias = "float | NDArray[Any]"


# Exact types of plain Python numbers: a call whose arguments are all of these takes the scalar
# path without looking for numpy (numpy scalars and arrays go the numpy way).
_PLAIN = frozenset({int, float, bool})


def numpy() -> Any:
    """numpy if it has been imported, else None: no value can be an array before it is, so a
    single estimate never pays numpy's import time."""
    return sys.modules.get("numpy")


def is_array(*values: Num) -> bool:
    np = numpy()
    if np is None:
        return False
    ndarray = np.ndarray
    for v in values:  # noqa: SIM110 (a loop, not any(generator): every array-path helper call)
        if isinstance(v, ndarray):
            return True
    return False


def minimum(a: Num, b: Num) -> Num:
    if type(a) in _PLAIN and type(b) in _PLAIN:
        return a if a <= b else b
    return numpy().minimum(a, b) if is_array(a, b) else min(a, b)


def maximum(a: Num, b: Num) -> Num:
    if type(a) in _PLAIN and type(b) in _PLAIN:
        return a if a >= b else b
    return numpy().maximum(a, b) if is_array(a, b) else max(a, b)


def where(cond: Num, a: Num, b: Num) -> Num:
    if type(cond) is bool:  # one choice for every layout: pick the operand whole
        return a if cond else b
    if is_array(cond, a, b):
        chosen: Num = numpy().where(cond, a, b)
        return chosen
    return a if cond else b


def logical_and(a: Num, b: Num) -> Num:
    if type(a) in _PLAIN and type(b) in _PLAIN:
        return bool(a) and bool(b)
    return numpy().logical_and(a, b) if is_array(a, b) else bool(a) and bool(b)


def ceil_div(a: Num, b: Num) -> Num:
    """Integer ceiling division for ints and integer arrays."""
    return -(-a // b)


def take(table: Sequence[int] | Any, index: Num) -> Num:
    """``table[index]`` for an int index or an integer index array."""
    if type(index) is not int and is_array(index):
        np = numpy()
        taken: Num = np.take(np.asarray(table), index)
        return taken
    entry: Num = table[int(index)]  # an int index (an array goes the numpy way above)
    return entry
