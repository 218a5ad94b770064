"""Exact ids on MySQL and MariaDB: a NO PAD binary collation on every table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

``utf8mb4_bin``, which 0001-0004 gave our tables, is a PAD SPACE collation on
MariaDB and on MySQL: ``'alice'`` and ``'alice '`` were one session, one run id,
one checkpoint. Every one of our tables is converted to ``utf8mb4`` with a
NO PAD binary collation (``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin``
on MySQL 8.0.17 and later), as table default and on every text column, so it
holds whatever the database's default is, and a column a later revision adds
gets it too. No row changes: NO PAD only tells apart values PAD SPACE took for
one, so no key can collide. A server without the collation is refused before
anything is changed. SQLite and PostgreSQL compare text exactly already:
nothing to do there.

Neither server lets a column in a foreign key change its collation (not even
with ``foreign_key_checks=0``), so our four foreign keys are dropped first,
and each is added back in the statement that converts its table, parents
first. A foreign key of a host's table that references ours would block the
conversion: it is refused up front with its name.

Safe to re-run. MySQL and MariaDB commit every DDL statement on its own, so
a failure half way leaves some steps done and the revision still at 0004; the
next upgrade reads ``information_schema`` first and does only what is left (a
table already converted is skipped, a foreign key already dropped is not
dropped again, a missing one is added back). The downgrade is the same walk
back to ``utf8mb4_bin``, refused before it changes anything when ids that
differ only by trailing spaces were stored meanwhile (PAD SPACE would merge them).

Frozen like every revision: table names, foreign keys and collations are
written out here, nothing is imported from lovia_store.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MARIADB_COLLATION = "utf8mb4_nopad_bin"
MYSQL_COLLATION = "utf8mb4_0900_bin"
PREVIOUS_COLLATION = "utf8mb4_bin"

# Parents before the tables whose foreign keys reference them.
TABLES = (
    "lovia_schema",
    "lovia_sessions",
    "lovia_run_heads",
    "lovia_messages",
    "lovia_session_runs",
    "lovia_snapshots",
    "lovia_run_entries",
    "lovia_tool_effects",
    "lovia_run_leases",
)

# name: (table, column, referenced table, referenced column), as 0001 made them.
FOREIGN_KEYS = {
    "fk_lovia_messages_session_id_lovia_sessions": (
        "lovia_messages",
        "session_id",
        "lovia_sessions",
        "session_id",
    ),
    "fk_lovia_session_runs_session_id_lovia_sessions": (
        "lovia_session_runs",
        "session_id",
        "lovia_sessions",
        "session_id",
    ),
    "fk_lovia_snapshots_session_id_lovia_sessions": (
        "lovia_snapshots",
        "session_id",
        "lovia_sessions",
        "session_id",
    ),
    "fk_lovia_run_entries_run_id_lovia_run_heads": (
        "lovia_run_entries",
        "run_id",
        "lovia_run_heads",
        "run_id",
    ),
}


# Each table's primary key, for the downgrade's check; the integer columns as such.
PRIMARY_KEYS = {
    "lovia_schema": ("store",),
    "lovia_sessions": ("session_id",),
    "lovia_run_heads": ("run_id",),
    "lovia_messages": ("session_id", "sequence"),
    "lovia_session_runs": ("session_id", "run_id"),
    "lovia_snapshots": ("session_id", "version"),
    "lovia_run_entries": ("run_id", "position"),
    "lovia_tool_effects": ("run_id", "call_id"),
    "lovia_run_leases": ("run_id",),
}
INTEGER_COLUMNS = frozenset({"sequence", "version", "position"})


def _names(sql: str) -> sa.TextClause:
    return sa.text(sql).bindparams(sa.bindparam("names", expanding=True))


def _require(bind: sa.Connection, collation: str) -> None:
    found = bind.execute(
        sa.text("SELECT COUNT(*) FROM information_schema.COLLATIONS WHERE COLLATION_NAME = :name"),
        {"name": collation},
    ).scalar_one()
    if not found:
        raise RuntimeError(
            f"this server has no {collation} collation, which lovia-store needs for exact ids "
            "(MariaDB 10.2 or later, MySQL 8.0.17 or later); nothing was changed"
        )


def _refuse_others_foreign_keys(bind: sa.Connection) -> None:
    rows = bind.execute(
        _names(
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, REFERENCED_TABLE_NAME "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE UNIQUE_CONSTRAINT_SCHEMA = DATABASE() AND REFERENCED_TABLE_NAME IN :names"
        ),
        {"names": list(TABLES)},
    ).all()
    schema = bind.execute(sa.text("SELECT DATABASE()")).scalar_one()
    for owner, table, name, referenced in rows:
        if owner == schema and table in TABLES:
            continue
        raise RuntimeError(
            f"foreign key {name} of {owner}.{table} references {referenced}; MySQL and MariaDB "
            "refuse to change the collation of a column a foreign key uses, so lovia-store "
            "cannot make its ids exact. Drop that foreign key, upgrade, and add it back "
            "(its column needs our id columns' collation); nothing was changed"
        )


def _state(bind: sa.Connection, collation: str) -> tuple[set[str], set[str]]:
    """Our tables already wholly in ``collation``, and our foreign keys that exist."""
    rows = bind.execute(
        _names(
            "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN :names"
        ),
        {"names": list(TABLES)},
    )
    done = {str(name) for name, table_collation in rows if table_collation == collation}
    for table, column_collation in bind.execute(
        _names(
            "SELECT TABLE_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN :names "
            "AND COLLATION_NAME IS NOT NULL"
        ),
        {"names": list(TABLES)},
    ):
        if column_collation != collation:
            done.discard(table)
    keys = set(
        bind.execute(
            _names(
                "SELECT CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS "
                "WHERE TABLE_SCHEMA = DATABASE() AND CONSTRAINT_TYPE = 'FOREIGN KEY' "
                "AND TABLE_NAME IN :names"
            ),
            {"names": list(TABLES)},
        ).scalars()
    )
    return done, keys


def _convert(collation: str) -> None:
    """Every table of ours to ``utf8mb4``/``collation``; each step only if still needed."""
    bind = op.get_bind()
    _require(bind, collation)
    _refuse_others_foreign_keys(bind)
    done, keys = _state(bind, collation)
    for name, (table, _, referenced, _) in FOREIGN_KEYS.items():
        if name in keys and not {table, referenced} <= done:
            op.execute(f"ALTER TABLE `{table}` DROP FOREIGN KEY `{name}`")
            keys.discard(name)
    for table in TABLES:
        steps = [] if table in done else [f"CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"]
        steps += [
            f"ADD CONSTRAINT `{name}` FOREIGN KEY (`{column}`) "
            f"REFERENCES `{referenced}` (`{referenced_column}`)"
            for name, (child, column, referenced, referenced_column) in FOREIGN_KEYS.items()
            if child == table and name not in keys
        ]
        if steps:
            op.execute(f"ALTER TABLE `{table}` " + ", ".join(steps))


def _is_mysql() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    if _is_mysql():
        mariadb = getattr(op.get_bind().dialect, "is_mariadb", False)
        _convert(MARIADB_COLLATION if mariadb else MYSQL_COLLATION)


def _refuse_merging_keys(bind: sa.Connection) -> None:
    """The downgrade's PAD SPACE collation would make two stored keys one: refuse first."""
    for table, key in PRIMARY_KEYS.items():
        grouped = ", ".join(
            f"`{c}`" if c in INTEGER_COLUMNS else f"`{c}` COLLATE {PREVIOUS_COLLATION}" for c in key
        )
        clash = bind.execute(
            sa.text(f"SELECT 1 FROM `{table}` GROUP BY {grouped} HAVING COUNT(*) > 1 LIMIT 1")
        ).first()
        if clash is not None:
            raise RuntimeError(
                f"cannot downgrade below 0005: {table} holds keys that differ only by trailing "
                f"spaces, which {PREVIOUS_COLLATION} takes for one; nothing was changed"
            )


def downgrade() -> None:
    if _is_mysql():
        _refuse_merging_keys(op.get_bind())
        _convert(PREVIOUS_COLLATION)
