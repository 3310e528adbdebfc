"""Alembic environment: migrations run on the connection the service hands over (``migrate``)."""

from __future__ import annotations

from alembic import context

from app.store.plans import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
