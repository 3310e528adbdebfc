"""Tags, the numbers a plan had when saved, and a revision counter.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("tags", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("saved_result", sa.JSON, nullable=False, server_default="{}"))
        batch.add_column(sa.Column("revision", sa.Integer, nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("revision")
        batch.drop_column("saved_result")
        batch.drop_column("tags")
