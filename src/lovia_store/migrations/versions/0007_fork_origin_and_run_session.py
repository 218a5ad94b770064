"""Where a session was forked from, and which session a run in flight appends to.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

Three nullable columns, nothing rewritten:

- ``lovia_sessions.forked_from_session_id`` and ``forked_at_entry``: a session
  made by ``fork`` names its origin and how many of the origin's entries it
  took, so a UI can show the branch. NULL for every other session.
- ``lovia_run_heads.session_id`` (indexed): the session a run will append to
  when it finishes, when the writer knows it, so retention never deletes the
  session of a run that can still resume. NULL for runs written before this
  revision and for writers that do not say.

Older lovia-store versions read and write these tables unchanged (they never
name the new columns), so no store version is bumped. On MySQL and MariaDB the
new text column takes the table's NO PAD binary collation that 0005 set.

Frozen like every revision: names are written out here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NEW_COLUMNS = (
    ("lovia_sessions", "forked_from_session_id", sa.String(255)),
    ("lovia_sessions", "forked_at_entry", sa.BigInteger()),
    ("lovia_run_heads", "session_id", sa.String(255)),
)
_INDEX = "ix_lovia_run_heads_session_id"


def _columns(table: str) -> set[str]:
    """A run of this revision that failed half-way on MySQL/MariaDB (each DDL
    statement commits by itself) may have added some columns already."""
    return {column["name"] for column in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    for table, name, type_ in _NEW_COLUMNS:
        if name not in _columns(table):
            op.add_column(table, sa.Column(name, type_, nullable=True))
    indexes = {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("lovia_run_heads")}
    if _INDEX not in indexes:
        op.create_index(_INDEX, "lovia_run_heads", ["session_id"])


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite 3.35+ has it): a batch copy of lovia_sessions
    # would break the foreign keys that reference it.
    op.drop_index(_INDEX, table_name="lovia_run_heads")
    for table, name, _type in reversed(_NEW_COLUMNS):
        op.drop_column(table, name)
