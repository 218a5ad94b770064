"""A Raw Log append's idempotency key, unique per session.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

``lovia_messages.idempotency_key``: NULL for every message appended without a key
(all rows before this revision), and unique with ``session_id`` where given, so a
keyed append that is re-issued after an unknown outcome finds its row instead of
writing a second one. Several NULLs never collide (every backend's unique index
allows them).

Older lovia-store versions read and write the table unchanged (they never name the
column), so no store version is bumped. On MySQL and MariaDB the new text column
takes the table's NO PAD binary collation that 0005 set.

Frozen like every revision: names are written out here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "lovia_messages"
_COLUMN = "idempotency_key"
_INDEX = "ix_lovia_messages_session_id_idempotency_key"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    # A run that failed half-way on MySQL/MariaDB (each DDL statement commits by
    # itself) may have added the column already.
    if _COLUMN not in {column["name"] for column in inspector.get_columns(_TABLE)}:
        op.add_column(_TABLE, sa.Column(_COLUMN, sa.String(255), nullable=True))
    if _INDEX not in {index["name"] for index in inspector.get_indexes(_TABLE)}:
        op.create_index(_INDEX, _TABLE, ["session_id", _COLUMN], unique=True)


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite 3.35+ has it), as 0007's downgrade does.
    op.drop_index(_INDEX, table_name=_TABLE)
    op.drop_column(_TABLE, _COLUMN)
