"""The service's own refusals as plain exceptions, apart from the FastAPI handlers that answer
them (``errors``): the core's adapters (``app.resolve``) and the CLI raise them without
importing the web framework."""

from __future__ import annotations

from estimator.errors import SpecError

__all__ = ["BodyTimeout", "ShapeError", "TooLarge"]


class TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"request body over {limit:,} bytes")


class BodyTimeout(Exception):
    """The client did not send its whole request body in time."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        super().__init__(f"the request body did not arrive within {limit_s:g} s")


class ShapeError(SpecError):
    """Input that breaks the documented request schema itself (not JSON, nested too deep, not
    an object): ``invalid_request``, like pydantic's refusals. A ``SpecError`` of the core is a
    request that fits the schema and breaks a rule of the model, layout or framework:
    ``invalid_plan``."""
