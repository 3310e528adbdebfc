"""The team catalog beside the public one: every place that turns a model or accelerator id into
a spec (estimates, sweeps, deep dives, saved plans, the pages' pickers, the catalog listings)
asks here.

Public ids never touch the database: a team id may not repeat a public one, so a public id is
read from the bundled catalog and only other ids consult the team's. Which team catalog that is
comes from the context: each API and page request binds its app's store, the CLI binds the
configured one with ``using_settings``; where none is bound the team catalog is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import estimator
from app.settings import Settings
from estimator import Accelerator, ModelSpec
from estimator.catalog import price
from estimator.errors import UnknownIdError

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported only where a store is opened
    from app.store.team import TeamStore

__all__ = [
    "EMPTY",
    "Scope",
    "TeamCatalog",
    "accelerator_choices",
    "bind",
    "current",
    "default_price",
    "get_accelerator",
    "get_model",
    "model_choices",
    "model_entry",
    "scope_of",
    "using",
    "using_settings",
]

Scope = Literal["public", "team"]


@dataclass(frozen=True)
class TeamCatalog:
    """The team's entries at one revision, built into the core's specs (``TeamStore``). A
    stored entry the current estimator no longer reads is left out and named in ``problems``."""

    revision: int = -1
    accelerators: Mapping[str, Accelerator] = field(default_factory=dict)
    prices: Mapping[str, float] = field(default_factory=dict)  # USD per GPU-hour by id
    models: Mapping[str, ModelSpec] = field(default_factory=dict)
    accelerator_rows: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    model_rows: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


EMPTY = TeamCatalog()
_STORE: ContextVar[TeamStore | None] = ContextVar("team_store", default=None)


def current() -> TeamCatalog:
    """The bound team catalog (checked against the store's revision on every call)."""
    store = _STORE.get()
    return EMPTY if store is None else store.catalog()


def bind(store: TeamStore | None) -> None:
    """Bind ``store`` for the rest of the current context (one request)."""
    _STORE.set(store)


@contextmanager
def using(store: TeamStore | None) -> Iterator[None]:
    """Bind ``store`` while the block runs."""
    token = _STORE.set(store)
    try:
        yield
    finally:
        _STORE.reset(token)


@contextmanager
def using_settings(settings: Settings) -> Iterator[TeamStore | None]:
    """For the CLI: resolve team ids from the configured store while the block runs. The
    default SQLite file is not created just to read it: where it does not exist yet there are
    no team entries."""
    from app.store.plans import make_engine, migrate
    from app.store.team import TeamStore

    url = settings.database_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        yield None
        return
    engine = make_engine(url)
    try:
        migrate(engine)
        store = TeamStore(engine)
        with using(store):
            yield store
    finally:
        engine.dispose()


def model_choices() -> tuple[str, ...]:
    """Public model ids, then the team's."""
    return (*estimator.model_ids(), *current().models)


def accelerator_choices() -> tuple[str, ...]:
    return (*estimator.accelerator_ids(), *current().accelerators)


def scope_of(kind: Literal["model", "accelerator"], ident: str) -> Scope:
    public = estimator.model_ids() if kind == "model" else estimator.accelerator_ids()
    return "public" if ident in public else "team"


T = TypeVar("T")


def _resolve(
    kind: str,
    ident: str,
    public: tuple[str, ...],
    read: Callable[[str], T],
    team: Callable[[TeamCatalog], Mapping[str, T]],
) -> T:
    """A public id from the bundled catalog (no database), else the team's entry."""
    if ident in public:
        return read(ident)
    entries = team(current())
    if ident in entries:
        return entries[ident]
    raise UnknownIdError(kind, ident, (*public, *entries))


def get_model(model_id: str) -> ModelSpec:
    models = estimator.model_ids()
    return _resolve("model", model_id, models, estimator.get_model, lambda t: t.models)


def get_accelerator(accelerator_id: str) -> Accelerator:
    return _resolve(
        "accelerator",
        accelerator_id,
        estimator.accelerator_ids(),
        estimator.get_accelerator,
        lambda t: t.accelerators,
    )


def default_price(accelerator_id: str) -> tuple[float | None, str | None]:
    """The default price per GPU-hour and where it comes from: the catalog's dated price for a
    public accelerator, the team's negotiated one for a team accelerator."""
    if accelerator_id in estimator.accelerator_ids():
        p = price(accelerator_id)
        return (None, None) if p is None else (p.usd_per_gpu_hour, f"{p.source} ({p.date})")
    get_accelerator(accelerator_id)  # unknown ids raise
    usd = current().prices.get(accelerator_id)
    return (None, None) if usd is None else (usd, "team catalog (negotiated price)")


def model_entry(model_id: str) -> dict[str, Any]:
    """A model's catalog entry (``config``, ``hf_id``, ``sources``, ``notes``), public or the
    team's."""
    if model_id in estimator.model_ids():
        return estimator.model_entry(model_id)
    get_model(model_id)  # unknown ids raise
    row = current().model_rows[model_id]
    sources = [row["source"]] if row["source"] else []
    return {"config": row["config"], "hf_id": None, "sources": sources, "notes": row["notes"]}
