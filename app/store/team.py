"""The team catalog in the plan store: private accelerators (with the team's negotiated price
per GPU-hour) and private models (a pasted config.json), next to the saved plans in the same
database and under the same Alembic migrations.

Entries are kept in the public catalog's own units (``memory_gb``, ``hbm_tb_per_s``,
``dense_tflops``, ...), so one conversion (``accelerator_from_entry``) serves both catalogs.
Every write bumps a one-row revision counter in the same transaction; readers keep the built
catalog in memory and rebuild it only when the counter moved, so several worker processes
see each other's writes at the cost of one single-row SELECT.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from threading import Lock
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Engine,
    Float,
    Integer,
    String,
    Text,
    select,
)
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column, sessionmaker

from app.store.catalog import TeamCatalog
from app.store.plans import PLAN_USES, Base, Plan
from estimator import Accelerator, ModelSpec, model_from_config
from estimator.errors import SpecError
from estimator.inputs.accelerator import accelerator_from_entry

__all__ = [
    "TeamAcceleratorRow",
    "TeamCatalog",
    "TeamConflict",
    "TeamInUse",
    "TeamModelRow",
    "TeamStore",
    "accelerator_spec_of",
]


class TeamConflict(Exception):
    """An id that is already taken."""


class TeamInUse(Exception):
    """Saved plans use the entry that was to be deleted."""

    def __init__(self, kind: str, entry_id: str, plans: list[dict[str, str]]) -> None:
        self.kind = kind
        self.entry_id = entry_id
        self.plans = plans
        super().__init__(
            f"team {kind[:-1]} {entry_id!r} is used by {len(plans)} saved plan(s); delete or "
            "change those plans first"
        )


class TeamRevision(Base):
    __tablename__ = "team_catalog_revision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(Integer)


class TeamAcceleratorRow(Base):
    __tablename__ = "team_accelerators"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    vendor: Mapped[str] = mapped_column(String(64), default="")
    generation: Mapped[str] = mapped_column(String(64), default="")
    memory_gb: Mapped[float] = mapped_column(Float)
    memory_bytes_reported: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    hbm_tb_per_s: Mapped[float] = mapped_column(Float)
    dense_tflops: Mapped[dict[str, float]] = mapped_column(JSON)
    scale_up_gb_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    scale_up_domain: Mapped[int] = mapped_column(Integer, default=1)
    scale_out_gbit_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpus_per_node: Mapped[int] = mapped_column(Integer, default=8)
    tdp_w: Mapped[float | None] = mapped_column(Float, nullable=True)
    price_usd_per_gpu_hour: Mapped[float | None] = mapped_column(Float, nullable=True)
    source: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TeamModelRow(Base):
    __tablename__ = "team_models"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


Row = TeamAcceleratorRow | TeamModelRow
_STAMPS = ("created_at", "updated_at")


def _as_dict(row: Any) -> dict[str, Any]:
    out = {c.key: getattr(row, c.key) for c in row.__table__.columns}
    return out | {k: out[k].isoformat() for k in _STAMPS}


def accelerator_spec_of(entry: Mapping[str, Any]) -> Accelerator:
    """A stored (or submitted) team accelerator as the core's spec, through the public
    catalog's one conversion."""
    up = entry.get("scale_up_gb_per_s")
    catalog_entry = {
        **entry,
        "scale_up": {"gb_per_s_unidir": up, "domain_gpus": entry.get("scale_up_domain") or 1},
        "sources": [entry["source"]] if entry.get("source") else [],
    }
    return accelerator_from_entry(catalog_entry)


ModelBuilds = dict[tuple[str, str], ModelSpec]  # (id, canonical config JSON) -> its spec


def _build(
    revision: int,
    accs: list[dict[str, Any]],
    models: list[dict[str, Any]],
    built: ModelBuilds,
) -> tuple[TeamCatalog, ModelBuilds]:
    """The catalog at ``revision``, and the model specs it holds by (id, config): a model whose
    config is in ``built`` (the previous build's) is reused, so a write rebuilds only the
    entries it changed (reading a deep config is the slow part: milliseconds a layer kind)."""
    specs: dict[str, Accelerator] = {}
    specs_of_models: dict[str, ModelSpec] = {}
    builds: ModelBuilds = {}
    problems = []
    for a in accs:
        try:
            specs[a["id"]] = accelerator_spec_of(a)
        except (SpecError, KeyError, TypeError, ValueError) as exc:
            problems.append(f"team accelerator {a['id']!r}: {exc}")
    for m in models:
        key = (m["id"], json.dumps(m["config"], sort_keys=True))
        try:
            spec = built.get(key) or model_from_config(m["config"], m["id"])
        except SpecError as exc:
            problems.append(f"team model {m['id']!r}: {exc}")
            continue
        specs_of_models[m["id"]] = builds[key] = spec
    prices = {
        a["id"]: a["price_usd_per_gpu_hour"]
        for a in accs
        if a["id"] in specs and a["price_usd_per_gpu_hour"] is not None
    }
    catalog = TeamCatalog(
        revision=revision,
        accelerators=specs,
        prices=prices,
        models=specs_of_models,
        accelerator_rows={a["id"]: a for a in accs if a["id"] in specs},
        model_rows={m["id"]: m for m in models if m["id"] in specs_of_models},
        problems=tuple(problems),
    )
    return catalog, builds


class TeamStore:
    """Team entries by id, on the plan store's engine. Methods return plain dicts."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self._cached = TeamCatalog()
        self._builds: ModelBuilds = {}
        self._lock = Lock()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with self.sessions.begin() as session:
            yield session

    def revision(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(select(TeamRevision.revision)).scalar_one())

    def catalog(self) -> TeamCatalog:
        """The built catalog, rebuilt only when another writer (in any process) moved the
        revision counter since it was last read."""
        revision = self.revision()
        if revision == self._cached.revision:
            return self._cached
        with self._lock:
            with self._session() as s:
                revision = s.execute(select(TeamRevision.revision)).scalar_one()
                accs = [_as_dict(r) for r in s.scalars(select(TeamAcceleratorRow))]
                models = [_as_dict(r) for r in s.scalars(select(TeamModelRow))]
            self._cached, self._builds = _build(int(revision), accs, models, self._builds)
            return self._cached

    @staticmethod
    def _bump(s: Session) -> None:
        s.execute(sql_update(TeamRevision).values(revision=TeamRevision.revision + 1))

    def list(self, kind: str) -> list[dict[str, Any]]:
        """Every entry of ``kind`` (``accelerators`` or ``models``) by id."""
        table = KINDS[kind]
        with self._session() as s:
            return [_as_dict(r) for r in s.scalars(select(table).order_by(table.id))]

    def get(self, kind: str, entry_id: str) -> dict[str, Any] | None:
        with self._session() as s:
            row = s.get(KINDS[kind], entry_id)
            return None if row is None else _as_dict(row)

    def create(self, kind: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Store a new entry; TeamConflict if its id is taken."""
        now = datetime.now(UTC)
        row = KINDS[kind](**entry, created_at=now, updated_at=now)
        try:
            with self._session() as s:
                if s.get(KINDS[kind], entry["id"]) is not None:
                    raise TeamConflict(entry["id"])
                s.add(row)
                s.flush()
                self._bump(s)
        except IntegrityError:  # a concurrent writer took the id between the check and insert
            raise TeamConflict(entry["id"]) from None
        return _as_dict(row)

    def replace(self, kind: str, entry: dict[str, Any]) -> dict[str, Any] | None:
        """Overwrite an entry's fields (None where it does not exist)."""
        with self._session() as s:
            row: Any = s.get(KINDS[kind], entry["id"], with_for_update=True)
            if row is None:
                return None
            for key, value in entry.items():
                setattr(row, key, value)
            row.updated_at = datetime.now(UTC)
            self._bump(s)
            s.flush()
            return _as_dict(row)

    def delete(self, kind: str, entry_id: str) -> bool:
        """Delete an entry (False where it does not exist); TeamInUse, naming the plans, where
        saved plans use it. The database's foreign key refuses it too, should a plan that uses
        it be saved between the check and the delete."""
        link = PLAN_USES[kind]
        key = link.c.model_id if kind == "models" else link.c.accelerator_id
        try:
            with self._session() as s:
                row = s.get(KINDS[kind], entry_id)
                if row is None:
                    return False
                users = s.execute(
                    select(Plan.id, Plan.name)
                    .join(link, link.c.plan_id == Plan.id)
                    .where(key == entry_id)
                    .order_by(Plan.name, Plan.id)
                ).all()
                if users:
                    raise TeamInUse(kind, entry_id, [{"id": i, "name": n} for i, n in users])
                s.delete(row)
                s.flush()
                self._bump(s)
                return True
        except IntegrityError:
            raise TeamInUse(kind, entry_id, []) from None


KINDS: dict[str, type[Row]] = {"accelerators": TeamAcceleratorRow, "models": TeamModelRow}
