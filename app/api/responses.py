"""The API's answers as HTTP responses (apart from ``app.answers``, which the CLI shares and
which must not import the web framework)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Response
from pydantic import BaseModel
from pydantic_core import to_json

__all__ = ["json_response", "model_response"]


def json_response(payload: Any) -> Response:
    """A plain-JSON payload as the response, serialized once: the route's ``response_model``
    documents it (and the fuzz tests check every answer against it) without FastAPI validating
    the dict a second time.

    Serialized by pydantic-core's encoder (Rust; shortest round-trip floats, like ``json``, in a
    quarter of the instructions: a training estimate's 2.7 kB took 384k with ``json.dumps``,
    95k here). Non-finite numbers still raise rather than produce invalid JSON: the encoder
    writes them as ``NaN``/``Infinity``, and a body holding either is re-encoded with
    ``json.dumps(allow_nan=False)``, which raises on a real one (and gives the same document
    when the word was inside a string)."""
    body = to_json(payload)
    if b"NaN" in body or b"Infinity" in body:
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
    return Response(body, media_type="application/json")


def model_response(model: BaseModel) -> Response:
    """A response model's JSON as FastAPI would write it (by alias, every field), serialized
    where it was built: a route that runs its work in a lane returns this rather than the model,
    so the event loop never validates or serializes a large answer."""
    return Response(model.model_dump_json(by_alias=True), media_type="application/json")
