"""Per-model memo tables: what a model's spec determines alone (parameter placements, FLOPs per
token, divisibility rules, activation coefficients...) is computed on first use and kept in the
spec's ``memo`` dict, so a single estimate only does the arithmetic a layout changes.

``per_model`` memoizes a function of ``(model, *args)`` under ``(function, *args)``; the
arguments must be positional, hashable and, with the model, decide the result. Functions keyed
by a layer kind take its position in ``model.kinds`` (an int hashes in nanoseconds; a kind is a
tuple of dataclasses). A cached value is shared: never modify it.

Speed: a single estimate makes a handful of these look-ups, each on its hot path, so the wrapper
is written out for the arities in use (no ``*args`` packing; measured 0.25 -> 0.12 us a call).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import update_wrapper
from typing import Any, TypeVar, cast

__all__ = ["per_model"]

F = TypeVar("F", bound=Callable[..., Any])


def per_model(fn: F) -> F:
    """``fn(model, *args)`` computed once per model and arguments."""
    arity = len(inspect.signature(fn).parameters) - 1

    def miss(model: Any, key: Any, *args: Any) -> Any:
        value = model.memo[key] = fn(model, *args)
        return value

    if arity == 0:

        def cached(model: Any) -> Any:
            try:
                return model.memo[fn]
            except KeyError:
                return miss(model, fn)

    elif arity == 1:

        def cached(model: Any, a: Any) -> Any:  # type: ignore[misc]
            key = (fn, a)
            try:
                return model.memo[key]
            except KeyError:
                return miss(model, key, a)

    else:

        def cached(model: Any, *args: Any) -> Any:  # type: ignore[misc]
            key = (fn, *args)
            try:
                return model.memo[key]
            except KeyError:
                return miss(model, key, *args)

    return cast(F, update_wrapper(cached, fn))
