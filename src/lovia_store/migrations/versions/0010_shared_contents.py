"""Shared values: ``lovia_contents``, and documents stored compressed, shared or encrypted.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05

From this revision on a stored document may be in lovia-store's own form
(``lovia_store.db.documents``: compressed, encrypted, or naming long values kept
once in ``lovia_contents``) instead of plain JSON text. Every row written before
reads as it is; nothing is rewritten here (``lovia-store rekey`` converts rows
when asked). An older lovia-store refuses the database at this revision, so it
never reads a document it cannot decode.

``lovia_contents``: (tenant, digest) -> how many documents refer to it, its length
as text, and its bytes (LONGBLOB on MySQL and MariaDB, whose BLOB holds 64 KiB).
Creating a table locks none of ours, so the upgrade is online on every backend.
A run that failed after creating it (MySQL and MariaDB commit each DDL statement)
left it at 0009: the next run finds the table and only records the revision. A
table of that name that is not this one is refused, with nothing changed.

The downgrade drops the table. It is refused, with nothing changed, while any
document is in the new form or any value is shared: ``lovia-store rekey
--no-compression`` (with no keys) writes every document back as plain JSON text
first. Finding none reads every JSON column of every row (a full scan of each
table). A downgrade that dropped the table but failed further down (MySQL and
MariaDB: a lower revision's refusal undoes the version change, not the drop) is
run again as it was: the table is already gone.

Frozen like every revision: names are written out here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "lovia_contents"
COLUMNS = ("tenant", "digest", "refs", "size", "data")
MARIADB_COLLATION = "utf8mb4_nopad_bin"
MYSQL_COLLATION = "utf8mb4_0900_bin"

# Every column that holds a JSON document, by table.
DOCUMENTS = {
    "lovia_messages": ("entry_json", "envelope_json", "metadata_json", "tags_json"),
    "lovia_session_runs": ("meta_json",),
    "lovia_snapshots": ("summary_json", "envelope_json"),
    "lovia_run_heads": ("head_json",),
    "lovia_run_entries": ("entry_json",),
    "lovia_tool_effects": ("result_json",),
}


def upgrade() -> None:
    bind = op.get_bind()
    if _TABLE in sa.inspect(bind).get_table_names():
        # A run that failed after creating it (MySQL commits each DDL statement).
        found = tuple(c["name"] for c in sa.inspect(bind).get_columns(_TABLE))
        if sorted(found) != sorted(COLUMNS):
            raise RuntimeError(
                f"a table {_TABLE} exists with columns {', '.join(found)}, not the one "
                f"revision 0010 creates ({', '.join(COLUMNS)}): it is not lovia-store's. "
                "Rename or drop it, then upgrade; nothing was changed"
            )
        return
    collation = None
    if bind.dialect.name in ("mysql", "mariadb"):
        mariadb = getattr(bind.dialect, "is_mariadb", False)
        collation = MARIADB_COLLATION if mariadb else MYSQL_COLLATION
    op.create_table(
        _TABLE,
        sa.Column("tenant", sa.String(64, collation=collation), server_default="", nullable=False),
        sa.Column("digest", sa.String(64, collation=collation), nullable=False),
        sa.Column("refs", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column(
            "data",
            sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("tenant", "digest", name="pk_lovia_contents"),
        mysql_charset="utf8mb4",
        mysql_collate=collation,
    )


def _encoded(bind: sa.Connection) -> str | None:
    """The first column holding a document in lovia-store's own form, as table.column."""
    quote = bind.dialect.identifier_preparer.quote
    for table, columns in DOCUMENTS.items():
        for column in columns:
            found = bind.execute(
                sa.text(f"SELECT 1 FROM {quote(table)} WHERE {quote(column)} LIKE :mark LIMIT 1"),
                {"mark": "\x01%"},
            ).first()
            if found is not None:
                return f"{table}.{column}"
    return None


def downgrade() -> None:
    bind = op.get_bind()
    present = _TABLE in sa.inspect(bind).get_table_names()
    shared = present and bind.execute(sa.text(f"SELECT 1 FROM {_TABLE} LIMIT 1")).first()
    encoded = _encoded(bind)
    if shared or encoded is not None:
        where = encoded or _TABLE
        raise RuntimeError(
            f"cannot downgrade below 0010: documents are stored compressed, shared or "
            f"encrypted ({where}), which revision 0009 cannot read. Write them back as plain "
            "JSON first: lovia-store rekey --no-compression (with no encryption keys); "
            "nothing was changed"
        )
    if present:
        op.drop_table(_TABLE)
