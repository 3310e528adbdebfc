"""Service settings, read from the environment once at startup (documented in the README).

- ``DATABASE_URL``: SQLAlchemy URL of the plan store; default a SQLite file under
  ``PLANNER_DATA_DIR`` (default ``./data``), created on first start. PostgreSQL for a shared
  deployment: ``postgresql+psycopg://user:password@host:5432/planner``.
- ``PLANNER_API_TOKEN``: when set, writes (saving, editing, deleting plans) need
  ``Authorization: Bearer <token>``; reads stay open.
- ``PLANNER_READ_ONLY``: ``1`` refuses every write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings", "settings"]


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str
    api_token: str | None
    read_only: bool

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = Path(os.environ.get("PLANNER_DATA_DIR", "data"))
        url = os.environ.get("DATABASE_URL") or f"sqlite:///{data_dir / 'planner.db'}"
        return cls(
            data_dir=data_dir,
            database_url=url,
            api_token=os.environ.get("PLANNER_API_TOKEN") or None,
            read_only=os.environ.get("PLANNER_READ_ONLY", "") in ("1", "true", "yes"),
        )


def settings() -> Settings:
    return Settings.from_env()
