"""Request fields, defined once. Each field is declared in its request model (``app/schemas``):
its name, type, bounds, default and help live there, and the OpenAPI schema is generated from
them. What a page needs beyond that (a label, a fieldset, a placeholder) and what the command
line calls it travel with the field as ``form(...)`` (the schema's ``x-form`` extension); the
pages' forms (``web/forms.py``) and the CLI's flags (``cli/commands.py``) are both read off the
models by ``leaves``, so a new request field is one declaration.

The kind of input a field gets follows its type: whole numbers, numbers, a choice (``Literal``),
a list of whole numbers or one (``ints``), a list of names or one (``multi``), a yes/no.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["Leaf", "form", "leaves"]

Choices = Literal["models", "accelerators", "presets"]


def form(
    label: str,
    group: str = "Plan",
    placeholder: str = "",
    *,
    flag: str = "",
    kind: str = "",
    choices: Choices | None = None,
) -> dict[str, Any]:
    """How a page shows the field and what the CLI calls it (``json_schema_extra``):
    ``kind`` overrides the input the type implies, ``choices`` names a catalog list."""
    hints: dict[str, str | None] = {
        "label": label,
        "group": group,
        "placeholder": placeholder,
        "flag": flag,
        "kind": kind,
        "choices": choices,
    }
    return {"x-form": {k: v for k, v in hints.items() if v}}


@dataclass(frozen=True)
class Leaf:
    """One field of a request, at its dotted ``path`` (``layout.tp``)."""

    path: str
    annotation: Any
    default: Any
    help: str
    hints: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The page's query name and the CLI flag's stem: the last part of the path."""
        return self.path.rpartition(".")[2]

    @property
    def label(self) -> str:
        return str(self.hints.get("label") or self.name)

    @property
    def flag(self) -> str:
        return str(self.hints.get("flag") or "--" + self.name.replace("_", "-"))

    @property
    def kind(self) -> str:
        """``int``, ``float``, ``text``, ``select``, ``intselect``, ``ints``, ``multi``,
        ``bool`` or ``object`` (no form or flag: a nested mapping)."""
        given = self.hints.get("kind")
        if given:
            return str(given)
        kind = _kind(self.annotation)
        return "select" if kind == "text" and self.hints.get("choices") else kind

    @property
    def values(self) -> tuple[str, ...]:
        """The choices a ``Literal`` (or a list of one) allows, as text."""
        return tuple(str(v) for v in _literals(self.annotation))


def _members(annotation: Any) -> list[Any]:
    """The non-None members of a union, each stripped of ``Annotated``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in get_args(annotation) for m in _members(a)]
    return [] if annotation is type(None) else [annotation]


def _literals(annotation: Any) -> list[Any]:
    out: list[Any] = []
    for m in _members(annotation):
        if get_origin(m) is Literal:
            out += [v for v in get_args(m) if v not in out]
        elif get_origin(m) is list:
            out += [v for v in _literals(get_args(m)[0]) if v not in out]
    return out


def _kind(annotation: Any) -> str:
    members = _members(annotation)
    lists = [get_args(m)[0] for m in members if get_origin(m) is list]
    scalars = [m for m in members if get_origin(m) is not list]
    if any(get_origin(m) is dict or m is dict or _is_model(m) for m in scalars):
        return "object" if not any(m is str for m in scalars) else "select"
    if lists:
        inner = _members(lists[0])
        if all(m is int for m in inner):
            return "ints"
        return "multi"
    literals = _literals(annotation)
    if literals:
        return "intselect" if all(type(v) is int for v in literals) else "select"
    if scalars and all(m is bool for m in scalars):
        return "bool"
    if scalars and all(m is int for m in scalars):
        return "int"
    if scalars and all(m in (int, float) for m in scalars):
        return "float"
    return "text"


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


@cache
def leaves(model: type[BaseModel], prefix: str = "") -> tuple[Leaf, ...]:
    """Every field of ``model``, nested request models (``layout``) walked into."""
    out: list[Leaf] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        nested = [m for m in _members(info.annotation) if _is_model(m)]
        if nested and len(_members(info.annotation)) == 1:
            out += leaves(nested[0], path + ".")
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        hints = extra.get("x-form", {})
        hints = hints if isinstance(hints, dict) else {}
        default = None if info.default is PydanticUndefined else info.default
        out.append(Leaf(path, info.rebuild_annotation(), default, info.description or "", hints))
    return tuple(out)
