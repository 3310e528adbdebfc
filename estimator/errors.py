"""Typed errors of the estimator: every refusal names the field and the rule it broke."""

from __future__ import annotations

__all__ = ["SpecError", "UnknownIdError"]


class SpecError(ValueError):
    """An input that cannot be estimated.

    ``field`` is the dotted path of the offending input (``layout.tp``, ``config.hidden_size``),
    ``rule`` says what it must satisfy, ``value`` is what was given. The API layer turns this into
    a 422 with the field path.
    """

    def __init__(self, field: str, rule: str, value: object = None) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        super().__init__(f"{field}: {rule}" if value is None else f"{field}={value!r}: {rule}")


class UnknownIdError(KeyError):
    """A catalog id that is not in the catalog; ``known`` lists the ids that are."""

    def __init__(self, kind: str, ident: str, known: tuple[str, ...]) -> None:
        self.kind = kind
        self.ident = ident
        self.known = known
        super().__init__(f"unknown {kind} id {ident!r}; known: {', '.join(known)}")

    def __str__(self) -> str:
        return str(self.args[0])
