"""Tenants: a ``tenant`` column leads every key of every table but ``lovia_schema``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05

Each of the eight tables (sessions, messages, session runs, snapshots, run heads,
run entries, tool effects, run leases) gets ``tenant`` VARCHAR(64) NOT NULL
DEFAULT '' (on MySQL/MariaDB with the NO PAD binary collation 0005 set), and its
primary key, its foreign keys ((tenant, session_id) -> lovia_sessions,
(tenant, run_id) -> lovia_run_heads) and its indexes are rebuilt with ``tenant``
leading (index names follow the naming convention: ``ix_<table>_tenant_...``).
Every existing row belongs to the default tenant '', so no key can collide and
no row changes.

How each backend does it, keeping large tables online where it can:

- PostgreSQL: ``ADD COLUMN`` with a constant default is instant. When the
  migration's own transaction holds no lock on our tables (the usual case: 0009
  is the only revision to run), the rest runs on a second connection in
  autocommit, so the table is never locked for long: the new keys and indexes
  are built ``CONCURRENTLY`` (an invalid one a failed run left is dropped and
  built again), one short transaction swaps each primary key (``ADD CONSTRAINT
  ... PRIMARY KEY USING INDEX``), drops the old indexes and adds the foreign
  keys ``NOT VALID``, and each foreign key is then validated without blocking
  writes. Alembic's ``autocommit_block`` cannot be used: the runner's
  transaction (which holds the migration lock) was begun by the caller. When an
  earlier revision of the same run has locked our tables (a new database, an
  upgrade from before 0008), everything runs in the migration's transaction
  instead, as every other revision does.
- MySQL/MariaDB: ``ADD COLUMN ... ALGORITHM=INSTANT``, then per table one
  ``ALTER TABLE`` that changes the primary key and the indexes with
  ``ALGORITHM=INPLACE, LOCK=NONE`` (a rebuild that lets reads and writes go on),
  the foreign keys dropped first and added back ``INPLACE`` with
  ``foreign_key_checks`` off for that statement, then checked by a read.
- SQLite: a table cannot change its key in place, so every table is rebuilt:
  the old tables are renamed aside (SQLite rewrites their foreign keys to follow),
  the new ones created under the real names, the rows copied, the old tables
  dropped, children first, all in the migration's one transaction. The
  file is locked for writers for the whole copy anyway.

Safe to re-run: MySQL and MariaDB commit every DDL statement on its own, and
PostgreSQL's online path commits on its second connection, so a run that failed
half way leaves some steps done and the revision still at 0008; the next run
reads the catalog first and does only what is left.

A foreign key of a host's table onto one of ours is refused, with its name,
before anything changes: it would block the rebuild (or, on SQLite, be rewritten
by it).

The downgrade restores 0008's keys and drops the column. It is refused, before
anything changes, when any table holds a row of a tenant other than '': its keys
would collide with the default tenant's. It runs in the migration's transaction
(step by step on MySQL/MariaDB).

Frozen like every revision: names are written out here, nothing is imported from
lovia_store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT = "tenant"
MARIADB_COLLATION = "utf8mb4_nopad_bin"
MYSQL_COLLATION = "utf8mb4_0900_bin"

# Parents before the tables whose foreign keys reference them.
TABLES = (
    "lovia_sessions",
    "lovia_run_heads",
    "lovia_messages",
    "lovia_session_runs",
    "lovia_snapshots",
    "lovia_run_entries",
    "lovia_tool_effects",
    "lovia_run_leases",
)

Index = tuple[str, tuple[str, ...], bool]
ForeignKey = tuple[str, tuple[str, ...], str, tuple[str, ...]]

# Each table's primary key at 0008 (named pk_<table> on PostgreSQL and SQLite).
KEYS: dict[str, tuple[str, ...]] = {
    "lovia_sessions": ("session_id",),
    "lovia_run_heads": ("run_id",),
    "lovia_messages": ("session_id", "sequence"),
    "lovia_session_runs": ("session_id", "run_id"),
    "lovia_snapshots": ("session_id", "version"),
    "lovia_run_entries": ("run_id", "position"),
    "lovia_tool_effects": ("run_id", "call_id"),
    "lovia_run_leases": ("run_id",),
}

# name: (table, columns, unique)
OLD_INDEXES: dict[str, Index] = {
    "ix_lovia_sessions_updated_at_session_id": (
        "lovia_sessions",
        ("updated_at", "session_id"),
        False,
    ),
    "ix_lovia_sessions_parent_session_id": ("lovia_sessions", ("parent_session_id",), False),
    "ix_lovia_messages_session_id_idempotency_key": (
        "lovia_messages",
        ("session_id", "idempotency_key"),
        True,
    ),
    "ix_lovia_session_runs_session_id_position": (
        "lovia_session_runs",
        ("session_id", "position"),
        False,
    ),
    "ix_lovia_run_heads_status_updated_at": ("lovia_run_heads", ("status", "updated_at"), False),
    "ix_lovia_run_heads_session_id": ("lovia_run_heads", ("session_id",), False),
}
NEW_INDEXES: dict[str, Index] = {
    "ix_lovia_sessions_tenant_updated_at_session_id": (
        "lovia_sessions",
        ("tenant", "updated_at", "session_id"),
        False,
    ),
    "ix_lovia_sessions_tenant_parent_session_id": (
        "lovia_sessions",
        ("tenant", "parent_session_id"),
        False,
    ),
    "ix_lovia_messages_tenant_session_id_idempotency_key": (
        "lovia_messages",
        ("tenant", "session_id", "idempotency_key"),
        True,
    ),
    "ix_lovia_session_runs_tenant_session_id_position": (
        "lovia_session_runs",
        ("tenant", "session_id", "position"),
        False,
    ),
    "ix_lovia_run_heads_tenant_status_updated_at": (
        "lovia_run_heads",
        ("tenant", "status", "updated_at"),
        False,
    ),
    "ix_lovia_run_heads_tenant_session_id": ("lovia_run_heads", ("tenant", "session_id"), False),
}

# name: (table, columns, referenced table, referenced columns)
OLD_FOREIGN_KEYS: dict[str, ForeignKey] = {
    "fk_lovia_messages_session_id_lovia_sessions": (
        "lovia_messages",
        ("session_id",),
        "lovia_sessions",
        ("session_id",),
    ),
    "fk_lovia_session_runs_session_id_lovia_sessions": (
        "lovia_session_runs",
        ("session_id",),
        "lovia_sessions",
        ("session_id",),
    ),
    "fk_lovia_snapshots_session_id_lovia_sessions": (
        "lovia_snapshots",
        ("session_id",),
        "lovia_sessions",
        ("session_id",),
    ),
    "fk_lovia_run_entries_run_id_lovia_run_heads": (
        "lovia_run_entries",
        ("run_id",),
        "lovia_run_heads",
        ("run_id",),
    ),
}
NEW_FOREIGN_KEYS: dict[str, ForeignKey] = {
    "fk_lovia_messages_tenant_lovia_sessions": (
        "lovia_messages",
        ("tenant", "session_id"),
        "lovia_sessions",
        ("tenant", "session_id"),
    ),
    "fk_lovia_session_runs_tenant_lovia_sessions": (
        "lovia_session_runs",
        ("tenant", "session_id"),
        "lovia_sessions",
        ("tenant", "session_id"),
    ),
    "fk_lovia_snapshots_tenant_lovia_sessions": (
        "lovia_snapshots",
        ("tenant", "session_id"),
        "lovia_sessions",
        ("tenant", "session_id"),
    ),
    "fk_lovia_run_entries_tenant_lovia_run_heads": (
        "lovia_run_entries",
        ("tenant", "run_id"),
        "lovia_run_heads",
        ("tenant", "run_id"),
    ),
}


class Shape:
    """What the tables look like on one side of this revision. (Not a dataclass:
    Alembic loads a revision without registering its module, which dataclasses need.)"""

    def __init__(
        self, tenant: bool, indexes: dict[str, Index], foreign_keys: dict[str, ForeignKey]
    ) -> None:
        self.tenant = tenant
        self.indexes = indexes
        self.foreign_keys = foreign_keys

    def key(self, table: str) -> tuple[str, ...]:
        return ((TENANT,) if self.tenant else ()) + KEYS[table]


BEFORE = Shape(False, OLD_INDEXES, OLD_FOREIGN_KEYS)
AFTER = Shape(True, NEW_INDEXES, NEW_FOREIGN_KEYS)

logger = logging.getLogger("lovia_store.migrations.0009")
"""Says which way PostgreSQL migrates (online, or in the migration's transaction)."""

_LOCK_TIMEOUT = "2s"
"""PostgreSQL: how long a step of the online path waits for its brief lock before it
gives way (and is tried again), so writers never queue behind it for long."""
_LOCK_ATTEMPTS = 30


def _columns(names: Sequence[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)


def _mysql_columns(names: Sequence[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _report(task: str, done: int, total: int | None) -> None:
    """Progress for whoever asked (``lovia_store.db.progress``); nobody by default."""
    config = op.get_context().config
    reporter = None if config is None else config.attributes.get("lovia_store.progress")
    if reporter is not None:
        reporter(task, done, total)


def _has_tenant(bind: sa.Connection, table: str) -> bool:
    return TENANT in {c["name"] for c in sa.inspect(bind).get_columns(table)}


def _host_foreign_keys(bind: sa.Connection) -> list[tuple[str, str, str]]:
    """Foreign keys of tables not ours onto ours: (name, table, the table of ours)."""
    dialect = bind.dialect.name
    if dialect == "sqlite":
        names = bind.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")
        found = []
        for (table,) in names.all():
            if table in TABLES:
                continue
            for key in bind.exec_driver_sql(f'PRAGMA foreign_key_list("{table}")').all():
                if key[2] in TABLES:
                    found.append((f"{table}({key[3]})", table, key[2]))
        return found
    if dialect == "postgresql":
        rows = bind.execute(
            sa.text(
                "SELECT c.conname, n.nspname || '.' || t.relname, p.relname "
                "FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
                "JOIN pg_namespace n ON n.oid = t.relnamespace "
                "JOIN pg_class p ON p.oid = c.confrelid "
                "JOIN pg_namespace pn ON pn.oid = p.relnamespace "
                "WHERE c.contype = 'f' AND pn.nspname = current_schema() "
                "AND p.relname IN :names "
                "AND NOT (t.relnamespace = p.relnamespace AND t.relname IN :names)"
            ).bindparams(sa.bindparam("names", expanding=True)),
            {"names": list(TABLES)},
        ).all()
        return [(name, table, parent) for name, table, parent in rows]
    rows = bind.execute(
        sa.text(
            "SELECT CONSTRAINT_NAME, CONCAT(CONSTRAINT_SCHEMA, '.', TABLE_NAME), "
            "REFERENCED_TABLE_NAME, CONSTRAINT_SCHEMA = DATABASE(), TABLE_NAME "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE UNIQUE_CONSTRAINT_SCHEMA = DATABASE() AND REFERENCED_TABLE_NAME IN :names"
        ).bindparams(sa.bindparam("names", expanding=True)),
        {"names": list(TABLES)},
    ).all()
    return [
        (name, table, parent)
        for name, table, parent, here, bare in rows
        if not (here and bare in TABLES)
    ]


def _refuse_host_foreign_keys(bind: sa.Connection) -> None:
    """A host's foreign key onto a key of ours would block the rebuild (PostgreSQL,
    MySQL/MariaDB) or be silently rewritten by it (SQLite): refused first."""
    found = _host_foreign_keys(bind)
    if found:
        name, table, parent = found[0]
        raise RuntimeError(
            f"foreign key {name} of {table} references {parent}, whose key revision 0009 "
            "rebuilds with a tenant column in front; drop that foreign key, upgrade, and "
            "add it back on (tenant, id) if you need it (docs/embedding.md); nothing was changed"
        )


def _refuse_other_tenants(bind: sa.Connection) -> None:
    """0008's keys have no tenant: rows of two tenants would collide. Refuse first."""
    quote = bind.dialect.identifier_preparer.quote
    for table in TABLES:
        if not _has_tenant(bind, table):
            continue  # a downgrade that failed half way (MySQL/MariaDB) got past it
        found = bind.execute(
            sa.text(
                f"SELECT {quote(TENANT)} FROM {quote(table)} WHERE {quote(TENANT)} <> '' LIMIT 1"
            )
        ).first()
        if found is not None:
            raise RuntimeError(
                f"cannot downgrade below 0009: {table} holds rows of tenant {found[0]!r}; "
                "0008's keys have no tenant, so they would collide with the default "
                "tenant's. Export or delete every tenant but the default one first "
                "(lovia-store export/prune --tenant); nothing was changed"
            )


# SQLite: every table rebuilt, in the migration's transaction.


def _sqlite_rebuild(shape: Shape) -> None:
    """The 8 tables rebuilt to ``shape``: renamed aside, created anew, copied, dropped.

    Our connections run with ``foreign_keys=ON``, which cannot change inside a
    transaction, and with it a rename rewrites the foreign keys that name the
    renamed table, and dropping a referenced table deletes its rows first. So the
    old tables move aside together (their foreign keys follow them), the new ones
    reference only new ones, and the old ones are dropped children first, when
    nothing references them any more.
    """
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    old = {t: inspector.get_columns(t) for t in TABLES}
    for table in reversed(TABLES):
        op.execute(f'ALTER TABLE "{table}" RENAME TO "_lovia_0009_{table}"')
    for done, table in enumerate(TABLES):
        columns = [c for c in old[table] if c["name"] != TENANT]
        new_columns: list[sa.Column[Any]] = [
            sa.Column(
                str(c["name"]),
                c["type"],
                nullable=bool(c["nullable"]),
                server_default=None if c["default"] is None else sa.text(str(c["default"])),
                autoincrement=False,
            )
            for c in columns
        ]
        if shape.tenant:
            tenant = sa.Column(
                TENANT, sa.String(64), nullable=False, server_default="", autoincrement=False
            )
            new_columns.insert(0, tenant)
        constraints: list[sa.schema.SchemaItem] = [
            sa.PrimaryKeyConstraint(*shape.key(table), name=f"pk_{table}")
        ]
        constraints += [
            sa.ForeignKeyConstraint(list(cols), [f"{parent}.{c}" for c in parent_cols], name=name)
            for name, (child, cols, parent, parent_cols) in shape.foreign_keys.items()
            if child == table
        ]
        op.create_table(table, *new_columns, *constraints)
        for name, (on, cols, unique) in shape.indexes.items():
            if on == table:
                op.create_index(name, table, list(cols), unique=unique)
        names = _columns([str(c["name"]) for c in columns])
        op.execute(f'INSERT INTO "{table}" ({names}) SELECT {names} FROM "_lovia_0009_{table}"')
        _report("tenant keys", done + 1, len(TABLES))
    for table in reversed(TABLES):
        op.execute(f'DROP TABLE "_lovia_0009_{table}"')


# PostgreSQL.


def _pg_locked_by_us(bind: sa.Connection) -> bool:
    """Whether the migration's transaction holds a lock on any of our tables (an
    earlier revision of this run changed them, or created them): then a second
    connection would wait for it forever, and everything runs in the transaction."""
    return bool(
        bind.execute(
            sa.text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' "
                "AND c.relname = ANY(:names))"
            ),
            {"names": list(TABLES)},
        ).scalar_one()
    )


def _pg_primary_key(conn: sa.Connection, table: str) -> tuple[str, ...]:
    """The primary key's columns of ``table`` (a name as ``to_regclass`` reads it)."""
    rows = conn.execute(
        sa.text(
            "SELECT a.attname FROM pg_constraint c "
            "CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum "
            "WHERE c.contype = 'p' AND c.conrelid = to_regclass(:table) ORDER BY k.n"
        ),
        {"table": table},
    )
    return tuple(rows.scalars())


def _pg_indexes(conn: sa.Connection, table: str) -> dict[str, bool]:
    """The table's indexes by name, with whether each is valid (a CONCURRENTLY build
    that failed leaves an invalid one)."""
    rows = conn.execute(
        sa.text(
            "SELECT i.relname, x.indisvalid FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = to_regclass(:table)"
        ),
        {"table": table},
    )
    return {str(name): bool(valid) for name, valid in rows}


def _pg_foreign_keys(conn: sa.Connection, tables: list[str]) -> dict[str, bool]:
    """The foreign keys of ``tables`` (names as ``to_regclass`` reads them) by name,
    with whether each is validated."""
    rows = conn.execute(
        sa.text(
            "SELECT conname, convalidated FROM pg_constraint WHERE contype = 'f' "
            "AND conrelid = ANY(SELECT to_regclass(n) FROM unnest(CAST(:names AS text[])) AS n)"
        ),
        {"names": tables},
    )
    return {str(name): bool(valid) for name, valid in rows}


def _pg_add_tenant(table: str) -> str:
    """Instant: a constant default is kept in the catalog, no row is rewritten."""
    return (
        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS \"{TENANT}\" VARCHAR(64) DEFAULT '' NOT NULL"
    )


def _pg_in_transaction(shape: Shape) -> None:
    """Every step in the migration's transaction (a new database, an upgrade that ran
    earlier revisions first, every downgrade): locks held until it commits."""
    bind = op.get_bind()
    if shape.tenant:
        for table in TABLES:
            op.execute(_pg_add_tenant(f'"{table}"'))
    for table in TABLES:  # what an online run that failed half way left
        for name, valid in _pg_indexes(bind, f'"{table}"').items():
            if name.endswith("_0009") or (name in shape.indexes and not valid):
                op.execute(f'DROP INDEX "{name}"')
    for name in {**OLD_FOREIGN_KEYS, **NEW_FOREIGN_KEYS}:
        table = {**OLD_FOREIGN_KEYS, **NEW_FOREIGN_KEYS}[name][0]
        op.execute(f'ALTER TABLE "{table}" DROP CONSTRAINT IF EXISTS "{name}"')
    for table in TABLES:
        if _pg_primary_key(bind, f'"{table}"') != shape.key(table):
            op.execute(
                f'ALTER TABLE "{table}" DROP CONSTRAINT IF EXISTS "pk_{table}", '
                f'ADD CONSTRAINT "pk_{table}" PRIMARY KEY ({_columns(shape.key(table))})'
            )
    other = NEW_INDEXES if shape is BEFORE else OLD_INDEXES
    for name in other:
        op.execute(f'DROP INDEX IF EXISTS "{name}"')
    for name, (table, cols, unique) in shape.indexes.items():
        kind = "UNIQUE INDEX" if unique else "INDEX"
        op.execute(f'CREATE {kind} IF NOT EXISTS "{name}" ON "{table}" ({_columns(cols)})')
    for name, (table, cols, parent, parent_cols) in shape.foreign_keys.items():
        op.execute(
            f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" FOREIGN KEY ({_columns(cols)}) '
            f'REFERENCES "{parent}" ({_columns(parent_cols)})'
        )
    if not shape.tenant:
        for table in TABLES:
            op.execute(f'ALTER TABLE "{table}" DROP COLUMN IF EXISTS "{TENANT}"')


def _pg_release_snapshot(bind: sa.Connection) -> None:
    """Let the migration's transaction drop the snapshot it idles with.

    ``CREATE INDEX CONCURRENTLY`` waits for every transaction whose snapshot is
    older than the index; asyncpg's extended-protocol statements leave the
    transaction's last one held (its ``backend_xmin``) until the next simple-protocol
    statement, which this is. The transaction itself stays open, with its lock.
    """
    if bind.dialect.driver == "asyncpg":
        driver = bind.connection.driver_connection
        sa.util.await_only(driver.execute("SELECT 1"))  # type: ignore[union-attr]
    else:
        bind.exec_driver_sql("SELECT 1")


@contextmanager
def _pg_second_connection(bind: sa.Connection) -> Iterator[sa.Connection | None]:
    """An autocommit connection beside the migration's, or None when the migration's
    transaction would hold back its index builds (a snapshot it could not let go).

    Discarded after (``invalidate``): nothing it set returns to the pool.
    """
    pid = bind.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    _pg_release_snapshot(bind)
    conn = bind.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        idle = conn.execute(
            sa.text(
                "SELECT backend_xmin IS NULL AND backend_xid IS NULL "
                "FROM pg_stat_activity WHERE pid = :pid"
            ),
            {"pid": pid},
        ).scalar()
        yield conn if idle else None
    finally:
        conn.invalidate()
        conn.close()


def _pg_retry(conn: sa.Connection, statements: Sequence[str]) -> None:
    """Run ``statements`` in one transaction that waits at most ``_LOCK_TIMEOUT`` for a
    lock (so writers never queue long behind it), again while it gives way."""
    for attempt in range(1, _LOCK_ATTEMPTS + 1):
        _pg_autocommit(conn, False)
        try:
            with conn.begin():
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
                for statement in statements:
                    conn.exec_driver_sql(statement)
            return
        except sa.exc.DBAPIError as exc:
            code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
            if code not in ("55P03", "40P01") or attempt == _LOCK_ATTEMPTS:
                raise
            time.sleep(min(0.05 * attempt, 1.0))
        finally:
            _pg_autocommit(conn, True)


def _pg_autocommit(conn: sa.Connection, on: bool) -> None:
    """Switch the second connection between autocommit (``CONCURRENTLY`` needs it) and
    transactions; SQLAlchemy's own bookkeeping transaction is ended first."""
    if conn.in_transaction():
        conn.commit()
    conn.execution_options(isolation_level="AUTOCOMMIT" if on else "READ COMMITTED")


def _pg_online(conn: sa.Connection, schema: str) -> None:
    """The upgrade on a second connection, in steps that each lock only briefly.

    Names are qualified with the migration's schema: nothing is set on the session,
    so it works through a transaction pooler too.
    """

    def q(name: str) -> str:
        return f'"{schema}"."{name}"'

    def regclass(name: str) -> str:
        return q(name)

    def key(table: str) -> tuple[str, ...]:
        return _pg_primary_key(conn, regclass(table))

    for table in TABLES:
        if key(table) != AFTER.key(table):
            _pg_retry(conn, [_pg_add_tenant(q(table))])
    # The new keys and indexes, built while reads and writes go on.
    builds = [(f"pk_{t}_0009", t, AFTER.key(t), True) for t in TABLES if key(t) != AFTER.key(t)]
    builds += [(name, t, cols, unique) for name, (t, cols, unique) in NEW_INDEXES.items()]
    for done, (name, table, cols, unique) in enumerate(builds):
        valid = _pg_indexes(conn, regclass(table)).get(name)
        if valid is False:
            _pg_autocommit(conn, True)
            conn.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {q(name)}")
        if not valid:
            _pg_autocommit(conn, True)
            kind = "UNIQUE INDEX" if unique else "INDEX"
            conn.exec_driver_sql(
                f'CREATE {kind} CONCURRENTLY "{name}" ON {q(table)} ({_columns(cols)})'
            )
        _report("tenant keys", done + 1, len(builds))
    # One short transaction swaps the keys: catalog changes only.
    existing = _pg_foreign_keys(conn, [regclass(t) for t in TABLES])
    swap = ["LOCK TABLE " + ", ".join(q(t) for t in TABLES) + " IN ACCESS EXCLUSIVE MODE"]
    swap += [
        f'ALTER TABLE {q(table)} DROP CONSTRAINT "{name}"'
        for name, (table, *_) in OLD_FOREIGN_KEYS.items()
        if name in existing
    ]
    swap += [
        f'ALTER TABLE {q(table)} DROP CONSTRAINT "pk_{table}", '
        f'ADD CONSTRAINT "pk_{table}" PRIMARY KEY USING INDEX "pk_{table}_0009"'
        for table in TABLES
        if key(table) != AFTER.key(table)
    ]
    swap += [f"DROP INDEX IF EXISTS {q(name)}" for name in OLD_INDEXES]
    swap += [
        f'ALTER TABLE {q(table)} ADD CONSTRAINT "{name}" FOREIGN KEY ({_columns(cols)}) '
        f"REFERENCES {q(parent)} ({_columns(parent_cols)}) NOT VALID"
        for name, (table, cols, parent, parent_cols) in NEW_FOREIGN_KEYS.items()
        if name not in existing
    ]
    if len(swap) > 1:  # not when a run that failed after its swap is run again
        _pg_retry(conn, swap)
    # Validation reads the child table without blocking its writers.
    for name, valid in _pg_foreign_keys(conn, [regclass(t) for t in TABLES]).items():
        if name in NEW_FOREIGN_KEYS and not valid:
            table = NEW_FOREIGN_KEYS[name][0]
            _pg_retry(conn, [f'ALTER TABLE {q(table)} VALIDATE CONSTRAINT "{name}"'])


def _pg_upgrade() -> None:
    bind = op.get_bind()
    if not _pg_locked_by_us(bind):
        schema = str(bind.execute(sa.text("SELECT current_schema()")).scalar_one())
        with _pg_second_connection(bind) as conn:
            if conn is not None:
                logger.info("0009: building the tenant keys online (CONCURRENTLY)")
                _pg_online(conn, schema)
                return
        logger.info("0009: the migration's transaction keeps a snapshot: not online")
    else:
        logger.info("0009: earlier revisions of this run hold our tables: not online")
    _pg_in_transaction(AFTER)


# MySQL and MariaDB: every DDL statement commits by itself, so every step checks first.


def _mysql_state(bind: sa.Connection) -> tuple[dict[str, tuple[str, ...]], dict[str, set[str]]]:
    """Each table's primary key columns and its index names, from information_schema."""
    keys: dict[str, list[str]] = {t: [] for t in TABLES}
    indexes: dict[str, set[str]] = {t: set() for t in TABLES}
    rows = bind.execute(
        sa.text(
            "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN :names "
            "ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX"
        ).bindparams(sa.bindparam("names", expanding=True)),
        {"names": list(TABLES)},
    )
    for table, index, column in rows:
        if index == "PRIMARY":
            keys[str(table)].append(str(column))
        else:
            indexes[str(table)].add(str(index))
    return {t: tuple(k) for t, k in keys.items()}, indexes


def _mysql_foreign_keys(bind: sa.Connection) -> set[str]:
    return set(
        bind.execute(
            sa.text(
                "SELECT CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS "
                "WHERE TABLE_SCHEMA = DATABASE() AND CONSTRAINT_TYPE = 'FOREIGN KEY' "
                "AND TABLE_NAME IN :names"
            ).bindparams(sa.bindparam("names", expanding=True)),
            {"names": list(TABLES)},
        ).scalars()
    )


def _mysql_try_online(statement: str, online: str) -> None:
    """``statement`` with ``online`` (its ALGORITHM and LOCK clauses); without them on a
    server that cannot do it that way (an older one), as a plain ALTER TABLE."""
    bind = op.get_bind()
    try:
        bind.exec_driver_sql(f"{statement}, {online}")
    except sa.exc.DBAPIError as exc:
        # 1845/1846: ALGORITHM or LOCK not supported for this operation.
        if getattr(exc.orig, "args", (None,))[0] not in (1845, 1846):
            raise
        bind.exec_driver_sql(statement)


def _mysql_migrate(shape: Shape) -> None:
    bind = op.get_bind()
    mariadb = getattr(bind.dialect, "is_mariadb", False)
    collation = MARIADB_COLLATION if mariadb else MYSQL_COLLATION
    other = AFTER if shape is BEFORE else BEFORE
    if shape.tenant:
        for table in TABLES:
            if not _has_tenant(bind, table):
                _mysql_try_online(
                    f"ALTER TABLE `{table}` ADD COLUMN `{TENANT}` VARCHAR(64) "
                    f"CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL DEFAULT ''",
                    "ALGORITHM=INSTANT",
                )
    existing = _mysql_foreign_keys(bind)
    for name, (table, *_) in other.foreign_keys.items():
        if name in existing:
            bind.exec_driver_sql(f"ALTER TABLE `{table}` DROP FOREIGN KEY `{name}`")
    keys, indexes = _mysql_state(bind)
    for done, table in enumerate(TABLES):
        steps = []
        if keys[table] != shape.key(table):
            steps += ["DROP PRIMARY KEY", f"ADD PRIMARY KEY ({_mysql_columns(shape.key(table))})"]
        steps += [
            f"DROP INDEX `{name}`"
            for name, (on, *_) in other.indexes.items()
            if on == table and name in indexes[table]
        ]
        steps += [
            f"ADD {'UNIQUE ' if unique else ''}INDEX `{name}` ({_mysql_columns(cols)})"
            for name, (on, cols, unique) in shape.indexes.items()
            if on == table and name not in indexes[table]
        ]
        if not shape.tenant and _has_tenant(bind, table):
            steps.append(f"DROP COLUMN `{TENANT}`")
        if steps:
            _mysql_try_online(
                f"ALTER TABLE `{table}` " + ", ".join(steps), "ALGORITHM=INPLACE, LOCK=NONE"
            )
        _report("tenant keys", done + 1, len(TABLES))
    existing = _mysql_foreign_keys(bind)
    missing = {n: fk for n, fk in shape.foreign_keys.items() if n not in existing}
    if not missing:
        return
    # Adding a foreign key in place (writes go on) needs foreign_key_checks off; the rows
    # are checked by a read instead, below.
    bind.exec_driver_sql("SET SESSION foreign_key_checks = 0")
    try:
        for name, (table, cols, parent, parent_cols) in missing.items():
            _mysql_try_online(
                f"ALTER TABLE `{table}` ADD CONSTRAINT `{name}` FOREIGN KEY "
                f"({_mysql_columns(cols)}) REFERENCES `{parent}` ({_mysql_columns(parent_cols)})",
                "ALGORITHM=INPLACE, LOCK=NONE",
            )
    finally:
        bind.exec_driver_sql("SET SESSION foreign_key_checks = 1")
    for name, (table, cols, parent, parent_cols) in missing.items():
        on = " AND ".join(f"p.`{p}` = c.`{c}`" for c, p in zip(cols, parent_cols, strict=True))
        orphan = bind.exec_driver_sql(
            f"SELECT 1 FROM `{table}` c WHERE NOT EXISTS "
            f"(SELECT 1 FROM `{parent}` p WHERE {on}) LIMIT 1"
        ).first()
        if orphan is not None:
            raise RuntimeError(
                f"{table} holds rows without their {parent} row ({name}): written while the "
                "foreign key was being rebuilt. Delete them and run the upgrade again"
            )


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    _refuse_host_foreign_keys(bind)
    if dialect == "sqlite":
        if not _has_tenant(bind, "lovia_sessions"):
            _sqlite_rebuild(AFTER)
    elif dialect == "postgresql":
        _pg_upgrade()
    elif dialect in ("mysql", "mariadb"):
        _mysql_migrate(AFTER)
    else:
        raise RuntimeError(f"lovia-store's revision 0009 does not know {dialect}")


def downgrade() -> None:
    bind = op.get_bind()
    _refuse_other_tenants(bind)
    dialect = bind.dialect.name
    if dialect == "sqlite":
        _sqlite_rebuild(BEFORE)
    elif dialect == "postgresql":
        _pg_in_transaction(BEFORE)
    else:
        _mysql_migrate(BEFORE)
