"""Saved plans in a real database: SQLAlchemy 2 over SQLite (the embedded default, WAL mode)
or PostgreSQL, the schema owned by Alembic migrations (``app/migrations``).

A plan stores its kind, its request (the API's own request body, so it re-evaluates with the
current estimator on open), the estimator version it was saved with and the headline numbers it
had then, so a reader sees what changed since. Every write is one transaction; a request that
does not validate is refused before the database is touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Engine,
    Integer,
    String,
    Text,
    create_engine,
    event,
    or_,
    select,
)
from sqlalchemy import update as sql_update
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

__all__ = ["Base", "Plan", "PlanStore", "migrate"]

MIGRATIONS = Path(__file__).parent / "migrations"


class Base(DeclarativeBase):
    pass


class Plan(Base):
    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    kind: Mapped[str] = mapped_column(String(32))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    saved_result: Mapped[dict[str, Any]] = mapped_column(JSON)
    estimator_version: Mapped[str] = mapped_column(String(32))
    revision: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        _sqlite_pragmas(engine)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=16)


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` with Alembic (from empty, or from any earlier one)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)


def _now() -> datetime:
    return datetime.now(UTC)


def _as_dict(p: Plan) -> dict[str, Any]:
    return {
        "id": p.id,
        "name": p.name,
        "description": p.description,
        "tags": list(p.tags),
        "kind": p.kind,
        "request": p.request,
        "saved_result": p.saved_result,
        "estimator_version": p.estimator_version,
        "revision": p.revision,
        "created_at": p.created_at.isoformat(),
        "updated_at": p.updated_at.isoformat(),
    }


class PlanStore:
    """Plans by id. Methods return plain dicts (the API's shapes), never live ORM objects."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        migrate(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with self.sessions.begin() as session:
            yield session

    def create(
        self,
        *,
        name: str,
        description: str,
        tags: list[str],
        kind: str,
        request: dict[str, Any],
        saved_result: dict[str, Any],
        estimator_version: str,
    ) -> dict[str, Any]:
        now = _now()
        plan = Plan(
            id=str(uuid.uuid4()),
            name=name,
            description=description,
            tags=tags,
            kind=kind,
            request=request,
            saved_result=saved_result,
            estimator_version=estimator_version,
            revision=1,
            created_at=now,
            updated_at=now,
        )
        with self._session() as s:
            s.add(plan)
        return _as_dict(plan)

    def get(self, plan_id: str) -> dict[str, Any] | None:
        with self._session() as s:
            plan = s.get(Plan, plan_id)
            return None if plan is None else _as_dict(plan)

    def list(
        self, query: str = "", tag: str = "", limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        stmt = select(Plan).order_by(Plan.updated_at.desc(), Plan.id).limit(limit).offset(offset)
        if query:
            like = f"%{query}%"
            stmt = stmt.where(or_(Plan.name.ilike(like), Plan.description.ilike(like)))
        with self._session() as s:
            plans = [_as_dict(p) for p in s.scalars(stmt)]
        if tag:  # tags are a JSON list: filtered here, the same on SQLite and PostgreSQL
            plans = [p for p in plans if tag in p["tags"]]
        return plans

    def update(self, plan_id: str, **changes: Any) -> dict[str, Any] | None:
        """Apply ``changes`` and bump the revision in one UPDATE statement, so concurrent
        edits serialize in the database and none is lost (SQLite and PostgreSQL alike)."""
        values = {k: v for k, v in changes.items() if v is not None}
        stmt = (
            sql_update(Plan)
            .where(Plan.id == plan_id)
            .values(**values, revision=Plan.revision + 1, updated_at=_now())
        )
        with self._session() as s:
            if s.execute(stmt).rowcount == 0:  # type: ignore[attr-defined]
                return None
            plan = s.get(Plan, plan_id, populate_existing=True)
            return None if plan is None else _as_dict(plan)

    def delete(self, plan_id: str) -> bool:
        with self._session() as s:
            plan = s.get(Plan, plan_id)
            if plan is None:
                return False
            s.delete(plan)
            return True
