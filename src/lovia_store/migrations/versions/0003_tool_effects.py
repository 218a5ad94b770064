"""Tool effects: the intent and outcome of side-effecting tool calls.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from lovia_store.migrations.column_types import UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _set_checkpoint_version(version: int) -> None:
    schema = sa.table("lovia_schema", sa.column("store"), sa.column("version"))
    op.execute(schema.update().where(schema.c.store == "checkpoint").values(version=version))


def _exists(name: str) -> bool:
    """A run of this revision that failed half-way on MySQL/MariaDB (each DDL statement
    commits by itself, the version row later) may have created the table already."""
    return name in sa.inspect(op.get_bind()).get_table_names()


def upgrade() -> None:
    if _exists("lovia_tool_effects"):
        _set_checkpoint_version(2)
        return
    op.create_table(
        "lovia_tool_effects",
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("call_id", sa.String(255), nullable=False),
        sa.Column("tool_name", sa.String(255), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column(
            "result_json",
            sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("run_id", "call_id", name="pk_lovia_tool_effects"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    _set_checkpoint_version(2)


def downgrade() -> None:
    op.drop_table("lovia_tool_effects")
    _set_checkpoint_version(1)
