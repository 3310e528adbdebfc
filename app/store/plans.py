"""Saved plans in a real database: SQLAlchemy 2 over SQLite (the embedded default, WAL mode)
or PostgreSQL, the schema owned by Alembic migrations (``app/migrations``).

A plan stores its kind, its request (the API's own request body, so it re-evaluates with the
current estimator on open), the estimator version it was saved with and the headline numbers it
had then, so a reader sees what changed since. Every write is one transaction; a request that
does not validate is refused before the database is touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Engine,
    ForeignKey,
    Integer,
    String,
    Table,
    Text,
    column,
    create_engine,
    delete,
    event,
    insert,
    or_,
    select,
    table,
    text,
)
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

__all__ = [
    "PLAN_USES",
    "Base",
    "MissingTeamEntry",
    "Plan",
    "PlanStore",
    "StaleRevision",
    "like_pattern",
    "migrate",
]

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


plan_tags = Table(
    "plan_tags",
    Base.metadata,
    Column("plan_id", String(36), ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True),
    Column("tag", String(50), primary_key=True),
)
# The team entries each plan uses, by kind. Their foreign keys to the team tables (ON DELETE
# RESTRICT) live in the database (migration 0004); these light tables only read and write rows.
PLAN_USES = {
    "models": table("plan_team_models", column("plan_id"), column("model_id")),
    "accelerators": table("plan_team_accelerators", column("plan_id"), column("accelerator_id")),
}


class MissingTeamEntry(Exception):
    """A plan names a team entry that was deleted while it was being saved."""


class StaleRevision(Exception):
    """An edit was made against a revision of the plan that is no longer its latest."""

    def __init__(self, expected: int, current: int) -> None:
        self.expected, self.current = expected, current
        super().__init__(
            f"the plan changed since revision {expected} was read (it is at revision {current}"
            " now): reload it and make the change again"
        )


def like_pattern(text: str) -> str:
    """``text`` as a LIKE pattern matching it anywhere, its own ``%``, ``_`` and ``\\`` taken
    literally (escaped with a backslash: pass ``escape="\\"``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


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
    with _migration_lock(engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":  # held to the transaction's end
            lock = text("SELECT pg_advisory_xact_lock(:key)")
            connection.execute(lock, {"key": MIGRATION_LOCK})
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)


# Two processes migrating one database at once (two `serve` starts, a worker beside the CLI)
# both saw the old revision and both created the tables; the second failed. A PostgreSQL
# advisory lock (this key) or, for a SQLite file, an exclusive lock on a file beside it
# serializes them: the second waits, then finds the schema current and does nothing.
MIGRATION_LOCK = 0x504C414E  # "PLAN"


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    import fcntl

    with open(f"{database}.migrate-lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
        uses: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, Any]:
        """Store a new plan with its tags and the team entries it uses, in one transaction;
        MissingTeamEntry if one of those was deleted meanwhile."""
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
        try:
            with self._session() as s:
                s.add(plan)
                s.flush()
                _index(s, plan.id, tags, uses)
        except IntegrityError:
            raise MissingTeamEntry(str(uses)) from None
        return _as_dict(plan)

    def get(self, plan_id: str) -> dict[str, Any] | None:
        with self._session() as s:
            plan = s.get(Plan, plan_id)
            return None if plan is None else _as_dict(plan)

    def list(
        self, query: str = "", tag: str = "", limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Plans newest first: those whose name or description contains ``query`` (taken
        literally, case-insensitive) and that carry ``tag``, filtered before paging."""
        stmt = select(Plan)
        if query:
            like = like_pattern(query)
            stmt = stmt.where(
                or_(Plan.name.ilike(like, escape="\\"), Plan.description.ilike(like, escape="\\"))
            )
        if tag:
            tagged = select(plan_tags.c.plan_id).where(plan_tags.c.tag == tag)
            stmt = stmt.where(Plan.id.in_(tagged))
        stmt = stmt.order_by(Plan.updated_at.desc(), Plan.id).limit(limit).offset(offset)
        with self._session() as s:
            return [_as_dict(p) for p in s.scalars(stmt)]

    def update(
        self,
        plan_id: str,
        uses: Mapping[str, Sequence[str]] | None = None,
        expected_revision: int | None = None,
        **changes: Any,
    ) -> dict[str, Any] | None:
        """Apply ``changes`` and bump the revision in one UPDATE statement, so concurrent
        edits serialize in the database and none is lost (SQLite and PostgreSQL alike); new
        tags or a new request (``uses``) re-index the plan in the same transaction. With
        ``expected_revision`` (an edit made on what the client read: If-Match, the page's
        form) the statement changes the plan only at that revision, else raises
        ``StaleRevision``: two edits of one reading never overwrite each other silently."""
        values = {k: v for k, v in changes.items() if v is not None}
        stmt = (
            sql_update(Plan)
            .where(Plan.id == plan_id)
            .values(**values, revision=Plan.revision + 1, updated_at=_now())
        )
        if expected_revision is not None:
            stmt = stmt.where(Plan.revision == expected_revision)
        try:
            with self._session() as s:
                if s.execute(stmt).rowcount == 0:  # type: ignore[attr-defined]
                    now = s.get(Plan, plan_id)
                    if now is not None and expected_revision is not None:
                        raise StaleRevision(expected_revision, now.revision)
                    return None
                _index(s, plan_id, values.get("tags"), uses, replace=True)
                plan = s.get(Plan, plan_id, populate_existing=True)
                return None if plan is None else _as_dict(plan)
        except IntegrityError:
            raise MissingTeamEntry(str(uses)) from None

    def delete(self, plan_id: str) -> bool:
        with self._session() as s:
            plan = s.get(Plan, plan_id)
            if plan is None:
                return False
            s.delete(plan)
            return True


def _index(
    s: Session,
    plan_id: str,
    tags: list[str] | None,
    uses: Mapping[str, Sequence[str]] | None,
    replace: bool = False,
) -> None:
    """Write a plan's tag rows and team-entry rows (``None``: leave them as they are)."""
    if tags is not None:
        if replace:
            s.execute(delete(plan_tags).where(plan_tags.c.plan_id == plan_id))
        rows = [{"plan_id": plan_id, "tag": t} for t in dict.fromkeys(tags)]
        if rows:
            s.execute(insert(plan_tags), rows)
    if uses is not None:
        for kind, link in PLAN_USES.items():
            key = "model_id" if kind == "models" else "accelerator_id"
            if replace:
                s.execute(delete(link).where(link.c.plan_id == plan_id))
            rows = [{"plan_id": plan_id, key: i} for i in dict.fromkeys(uses.get(kind, []))]
            if rows:
                s.execute(insert(link), rows)
