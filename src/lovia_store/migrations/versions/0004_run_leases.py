"""Run leases: one owner per run across processes, fenced by a token.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
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
    if _exists("lovia_run_leases"):
        _set_checkpoint_version(3)
        return
    op.create_table(
        "lovia_run_leases",
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("lease_id", sa.String(32), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_lovia_run_leases"),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    # Writers that do not know leases would write past them: refuse them.
    _set_checkpoint_version(3)


def downgrade() -> None:
    op.drop_table("lovia_run_leases")
    _set_checkpoint_version(2)
