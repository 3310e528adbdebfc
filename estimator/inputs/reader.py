"""Typed access to a ``config.json``: every field a family reads goes through ``ConfigReader``,
which refuses a missing or mistyped required field by name and bounds every integer, so no
config can make the planner build millions of layers or overflow a sweep's 64-bit integers.

``Recorder`` wraps a config to learn which of its keys a reading asks for (``used_config``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from estimator.errors import SpecError

__all__ = [
    "CONFIG_INT_MAX",
    "CONFIG_LAYERS_MAX",
    "MAX_TOTAL_PARAMS",
    "ConfigReader",
    "Recorder",
]

# Bounds on config integers: far above any published model (the widest vocabularies are ~260k,
# the longest contexts ~10M tokens, the deepest stacks a few hundred layers), low enough that a
# mistyped or hostile config cannot make the planner build millions of layers or overflow the
# 64-bit integers of a sweep.
CONFIG_INT_MAX = 2**24
CONFIG_LAYERS_MAX = 2**14
MAX_TOTAL_PARAMS = 10**15
_LAYER_FIELDS = ("num_hidden_layers", "n_layer")


class Recorder(Mapping[str, Any]):
    """A config that remembers which of its keys the reader asked for (listing or copying it
    does not count)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return self.data.get(key, default)

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return key in self.data

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


class ConfigReader:
    """Typed access to a config dict of ``model_type``: required fields raise a SpecError naming
    them (``config.<field>``)."""

    def __init__(self, raw: Mapping[str, Any], model_type: str) -> None:
        self.raw = raw
        self.model_type = model_type

    @property
    def plain(self) -> Mapping[str, Any]:
        """The config itself (not the recorder ``used_config`` reads it through)."""
        return self.raw.data if isinstance(self.raw, Recorder) else self.raw

    def get(self, *names: str) -> Any:
        """The first of ``names`` the config sets (to anything but null), else None."""
        for name in names:
            if name in self.raw and self.raw[name] is not None:
                return self.raw[name]
        return None

    def integer(self, *names: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.get(*names)
        if value is None:
            if default is None:
                raise SpecError(
                    f"config.{names[0]}",
                    f"is required to read a {self.model_type!r} model and is missing",
                )
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise SpecError(f"config.{names[0]}", "must be an integer", value)
        if value < minimum:
            raise SpecError(f"config.{names[0]}", f"must be >= {minimum}", value)
        top = CONFIG_LAYERS_MAX if names[0] in _LAYER_FIELDS else CONFIG_INT_MAX
        if value > top:
            raise SpecError(f"config.{names[0]}", f"must be <= {top}", value)
        return int(value)

    def opt_integer(self, *names: str) -> int | None:
        if self.get(*names) is None:
            return None
        return self.integer(*names)

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"config.{name}", "must be true or false", value)
        return value

    def number(self, *names: str, default: float) -> float:
        value = self.get(*names)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"config.{names[0]}", "must be a number", value)
        return float(value)

    def text(self, *names: str, default: str) -> str:
        value = self.get(*names)
        return default if value is None else str(value)

    def int_list(self, name: str) -> tuple[int, ...]:
        value = self.raw.get(name) or []
        if not isinstance(value, list | tuple) or not all(isinstance(v, int) for v in value):
            raise SpecError(f"config.{name}", "must be a list of integers", value)
        return tuple(value)
