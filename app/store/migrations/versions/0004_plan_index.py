"""Plan tags and the team entries a plan uses, as rows: tags are filtered in SQL before paging,
and a team model or accelerator that a saved plan uses cannot be deleted under it (a foreign
key, ``ON DELETE RESTRICT``).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _uses(request: Any, key: str, team_ids: set[str]) -> set[str]:
    """Team ids a stored request names under ``key`` (one id, or a sweep's list of ids)."""
    value = request.get(key) if isinstance(request, dict) else None
    names = value if isinstance(value, list) else [value]
    return {n for n in names if isinstance(n, str) and n in team_ids}


def upgrade() -> None:
    op.create_table(
        "plan_tags",
        sa.Column(
            "plan_id",
            sa.String(36),
            sa.ForeignKey("plans.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tag", sa.String(50), primary_key=True),
    )
    op.create_index("ix_plan_tags_tag", "plan_tags", ["tag"])
    for table, column, target in (
        ("plan_team_models", "model_id", "team_models.id"),
        ("plan_team_accelerators", "accelerator_id", "team_accelerators.id"),
    ):
        op.create_table(
            table,
            sa.Column(
                "plan_id",
                sa.String(36),
                sa.ForeignKey("plans.id", ondelete="CASCADE"),
                primary_key=True,
            ),
            sa.Column(
                column, sa.String(64), sa.ForeignKey(target, ondelete="RESTRICT"), primary_key=True
            ),
        )
        op.create_index(f"ix_{table}_{column}", table, [column])

    conn = op.get_bind()
    models = {r[0] for r in conn.execute(sa.text("SELECT id FROM team_models"))}
    accelerators = {r[0] for r in conn.execute(sa.text("SELECT id FROM team_accelerators"))}
    plans = sa.table(
        "plans",
        sa.column("id", sa.String),
        sa.column("tags", sa.JSON),
        sa.column("request", sa.JSON),
    )
    for plan_id, tags, request in conn.execute(
        sa.select(plans.c.id, plans.c.tags, plans.c.request)
    ):
        for tag in dict.fromkeys(tags or []):
            conn.execute(
                sa.text("INSERT INTO plan_tags (plan_id, tag) VALUES (:p, :t)"),
                {"p": plan_id, "t": tag},
            )
        for ident in _uses(request, "model", models):
            conn.execute(
                sa.text("INSERT INTO plan_team_models (plan_id, model_id) VALUES (:p, :m)"),
                {"p": plan_id, "m": ident},
            )
        for ident in _uses(request, "accelerator", accelerators):
            conn.execute(
                sa.text(
                    "INSERT INTO plan_team_accelerators (plan_id, accelerator_id) VALUES (:p, :a)"
                ),
                {"p": plan_id, "a": ident},
            )


def downgrade() -> None:
    op.drop_table("plan_team_accelerators")
    op.drop_table("plan_team_models")
    op.drop_index("ix_plan_tags_tag", "plan_tags")
    op.drop_table("plan_tags")
