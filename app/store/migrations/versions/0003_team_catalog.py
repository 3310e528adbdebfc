"""Team catalog: private accelerators (with a negotiated price) and private models, and the
revision counter every team write bumps.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _stamps() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column("source", sa.Text, nullable=False, server_default=""),
        sa.Column("notes", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "team_accelerators",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("vendor", sa.String(64), nullable=False, server_default=""),
        sa.Column("generation", sa.String(64), nullable=False, server_default=""),
        sa.Column("memory_gb", sa.Float, nullable=False),
        sa.Column("memory_bytes_reported", sa.BigInteger, nullable=True),
        sa.Column("hbm_tb_per_s", sa.Float, nullable=False),
        sa.Column("dense_tflops", sa.JSON, nullable=False),
        sa.Column("scale_up_gb_per_s", sa.Float, nullable=True),
        sa.Column("scale_up_domain", sa.Integer, nullable=False, server_default="1"),
        sa.Column("scale_out_gbit_per_s", sa.Float, nullable=True),
        sa.Column("gpus_per_node", sa.Integer, nullable=False, server_default="8"),
        sa.Column("tdp_w", sa.Float, nullable=True),
        sa.Column("price_usd_per_gpu_hour", sa.Float, nullable=True),
        *_stamps(),
    )
    op.create_table(
        "team_models",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        *_stamps(),
    )
    revisions = op.create_table(
        "team_catalog_revision",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("revision", sa.Integer, nullable=False),
    )
    op.bulk_insert(revisions, [{"id": 1, "revision": 0}])


def downgrade() -> None:
    op.drop_table("team_catalog_revision")
    op.drop_table("team_models")
    op.drop_table("team_accelerators")
