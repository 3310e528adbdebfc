"""Models named by their Hugging Face id (``org/name``, ``org/name@revision``) wherever a plan
names a model: the API, the pages and the CLI all resolve the request's ``model`` here
(``app.resolve.resolve_model``).

- An id the public catalog knows (an entry's ``hf_id``), with no revision, is that entry, read
  offline from the bundled config; the model's notes say so.
- Another id, or any id with a revision, is fetched by the service (``app.hub.fetch``: bounded,
  cached, ``HF_ENDPOINT`` only, never code), read by the core's config reader, its checkpoint
  quantization found (``app.hub.quant``) and its parameter count cross-checked against the
  safetensors index (``app.hub.crosscheck``); each is a note the answers carry.
- A saved plan keeps a snapshot of the config and the commit (``HubModel.snapshot``); reopened
  under ``pinned``, the plan is read from it, with no fetch.

The core never sees any of this: it is handed a ModelSpec as for a pasted config.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType
from typing import Any

import estimator
from app.hub.crosscheck import CrossCheck, cross_check
from app.hub.quant import _BY_METHOD, Quantization, quantization_of
from app.hub.refs import HubRef, HubRefusal, catalog_id_of, is_hub_ref, parse_ref
from app.settings import current
from estimator import ModelSpec, model_from_config
from estimator.errors import SpecError

__all__ = [
    "BRANCH_TTL_S",
    "HubModel",
    "HubRefusal",
    "default_preset",
    "forget",
    "is_hub_ref",
    "pinned",
    "resolve",
    "resolve_spec",
    "snapshot_of",
]

# A branch (main) is asked again after this long: a plan computed twice a minute does not
# re-ask the hub each time, and a new commit shows within five minutes. A commit never changes.
BRANCH_TTL_S = 300.0
_MEMO_SIZE = 64
_REMOTE_CODE_NOTE = (
    "Its config.json declares remote code (auto_map): read as data only; no code is fetched or run."
)


@dataclass(frozen=True)
class HubModel:
    """A Hugging Face id resolved: where from (``catalog``: the bundled entry; ``hub``: fetched
    now; ``cache``: the cache's copy, the hub not answering or offline; ``snapshot``: a saved
    plan's), the spec the core reads, and what was found on the way."""

    ref: HubRef
    origin: str
    spec: ModelSpec
    catalog_id: str | None = None
    commit: str | None = None
    endpoint: str | None = None
    config: Mapping[str, Any] | None = None
    quantization: Quantization | None = None
    check: CrossCheck | None = None

    @property
    def default_precision(self) -> str | None:
        return default_preset(self.spec)

    def snapshot(self) -> dict[str, Any] | None:
        """What a saved plan keeps so it reopens with no fetch (None for a catalog entry, which
        ships with the planner): the commit and the config's keys the reader uses (and its
        quantization). Never the token."""
        if self.config is None or self.commit is None:
            return None
        used = estimator.used_config(self.config)
        if "quantization_config" in self.config:
            used["quantization_config"] = self.config["quantization_config"]
        return {
            "hf_id": self.ref.text,
            "commit": self.commit,
            "endpoint": self.endpoint,
            "config": used,
            "cross_check": None if self.check is None else self.check.as_dict(),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "hf_id": self.ref.text,
            "repo_id": self.ref.repo_id,
            "revision": self.ref.revision,
            "origin": self.origin,
            "catalog_id": self.catalog_id,
            "commit": self.commit,
            "endpoint": self.endpoint,
            "quantization": None if self.quantization is None else self.quantization.as_dict(),
            "default_precision": self.default_precision,
            "cross_check": None if self.check is None else self.check.as_dict(),
            "notes": [n for n in self.spec.notes],
        }


_NONE_PINNED: Mapping[str, Mapping[str, Any]] = MappingProxyType({})
_PINNED: ContextVar[Mapping[str, Mapping[str, Any]]] = ContextVar(
    "hub_pinned", default=_NONE_PINNED
)
_MEMO: OrderedDict[tuple[Any, ...], tuple[float, HubModel]] = OrderedDict()
_LOCK = threading.Lock()


@contextmanager
def pinned(*snapshots: Mapping[str, Any] | None) -> Iterator[None]:
    """Resolve the ids of ``snapshots`` (``HubModel.snapshot``) from them while the block runs:
    a saved plan reopened offline, or after its repository went gated or away."""
    given = {s["hf_id"]: s for s in snapshots if s}
    token = _PINNED.set({**_PINNED.get(), **given})
    try:
        yield
    finally:
        _PINNED.reset(token)


def forget() -> None:
    """Drop the fetched models held in memory (tests; the disk cache stays)."""
    with _LOCK:
        _MEMO.clear()


def default_preset(model: ModelSpec) -> str | None:
    """The precision preset that serves the checkpoint's weights as they ship: from its
    config's quantization, else a catalog entry's ``checkpoint_quantization``."""
    found = quantization_of(model.config, None)
    if found is not None:
        return found.preset
    method = model.checkpoint_quantization
    return _BY_METHOD.get(method) if method else None


def resolve_spec(ref: str, field: str = "model") -> ModelSpec:
    return resolve(ref, field).spec


def snapshot_of(ref: object) -> dict[str, Any] | None:
    """A request's ``model`` as a saved plan keeps it (None: not a fetched Hugging Face id)."""
    if not is_hub_ref(ref):
        return None
    return resolve(str(ref)).snapshot()


def resolve(text: str, field: str = "model") -> HubModel:
    """A Hugging Face id as a HubModel; HubRefusal naming ``field`` where it cannot be."""
    ref = parse_ref(text, field)
    saved = _PINNED.get().get(ref.text)
    if saved is not None:
        return _from_snapshot(ref, saved, field)
    catalog_id = catalog_id_of(ref.repo_id) if ref.revision is None else None
    if catalog_id is not None:
        return _from_catalog(ref, catalog_id)
    s = current()
    if not s.hf_fetch:
        rule = (
            f"{ref.text} is not in the catalog, and fetching from the Hub is off"
            " (PLANNER_HF_FETCH=0): use a catalog id or paste its config.json"
        )
        raise HubRefusal(field, rule, text, status=422)
    key = (ref, s.hf_endpoint, s.hf_offline, s.hf_cache_dir, s.hf_token is not None)
    now = time.monotonic()
    with _LOCK:
        held = _MEMO.get(key)
        if held is not None and held[0] > now:
            _MEMO.move_to_end(key)
            return held[1]
    model = _fetched(ref, field)
    expires = float("inf") if ref.pinned else now + BRANCH_TTL_S
    if model.origin == "hub":  # a cache read is retried on the next request
        with _LOCK:
            _MEMO[key] = (expires, model)
            while len(_MEMO) > _MEMO_SIZE:
                _MEMO.popitem(last=False)
    return model


@cache
def _from_catalog(ref: HubRef, catalog_id: str) -> HubModel:
    spec = estimator.get_model(catalog_id)
    note = (
        f"{ref.repo_id} is the catalog's {catalog_id!r}: read offline from its bundled config"
        " (nothing fetched); name a revision (@main) to read the repository's own."
    )
    preset = default_preset(spec)
    if preset is not None:
        note += (
            f" Its checkpoint ships {spec.checkpoint_quantization} weights (the entry's"
            f" checkpoint_quantization): a serving plan's default precision is {preset!r}."
        )
    return HubModel(ref, "catalog", replace(spec, notes=(*spec.notes, note)), catalog_id)


def _read(ref: HubRef, config: Mapping[str, Any], field: str) -> ModelSpec:
    try:
        return model_from_config(config, ref.text)
    except SpecError as exc:
        key = exc.field.removeprefix("config").lstrip(".") or "config"
        rule = f"{ref.text}'s config.json cannot be read: {key} {exc.rule}"
        raise HubRefusal(field, rule, exc.value, status=422) from None


def _fetched(ref: HubRef, field: str) -> HubModel:
    from app.hub.fetch import fetch

    s = current()
    got = fetch(s, ref, field)
    config = dict(got.config)
    if got.quant_config is not None and isinstance(got.quant_config.get("quantization"), dict):
        # ModelOpt's file folded in as the quantization_config the engines derive from it
        config["quantization_config"] = {
            "quant_method": "modelopt",
            **got.quant_config["quantization"],
        }
    spec = _read(ref, config, field)
    quant = quantization_of(got.config, got.quant_config)
    check = cross_check(spec, config, got.index) if got.index is not None else None
    where = (
        f"read from the cache at commit {got.commit} (the hub did not answer, or offline)"
        if got.from_cache
        else f"fetched from {s.hf_endpoint} at commit {got.commit}"
    )
    notes = [f"{ref.text}: {where}; config.json read as data, nothing in it run."]
    if "auto_map" in config or config.get("trust_remote_code"):
        notes.append(_REMOTE_CODE_NOTE)
    if quant is not None:
        notes.append(quant.note(ref.text))
    if check is not None:
        notes.append(check.note())
    elif got.index is None:
        notes.append(
            "No model.safetensors.index.json was read: the parameter count is not cross-checked."
        )
    notes.extend(got.notes)
    spec = replace(spec, notes=(*spec.notes, *notes))
    origin = "cache" if got.from_cache else "hub"
    return HubModel(ref, origin, spec, None, got.commit, s.hf_endpoint, config, quant, check)


def _from_snapshot(ref: HubRef, saved: Mapping[str, Any], field: str) -> HubModel:
    config = saved.get("config")
    if not isinstance(config, Mapping):
        raise HubRefusal(field, "the saved plan's model snapshot has no config", ref.text)
    spec = _read(ref, config, field)
    quant = quantization_of(config, None)
    note = (
        f"{ref.text}: read from the snapshot saved with the plan (commit {saved.get('commit')},"
        f" fetched from {saved.get('endpoint')}); nothing fetched."
    )
    notes = [note] + ([quant.note(ref.text)] if quant is not None else [])
    spec = replace(spec, notes=(*spec.notes, *notes))
    commit, endpoint = saved.get("commit"), saved.get("endpoint")
    return HubModel(
        ref, "snapshot", spec, None, str(commit), str(endpoint), dict(config), quant, None
    )
