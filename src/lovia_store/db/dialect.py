"""What differs by dialect: capability flags, upserts, insert-if-absent, the clock.

Code outside this module asks ``capabilities(conn)`` what the backend can do
(RETURNING, one-statement writes), never for its name.

Each statement is built once per dialect (when a ``Database`` opens on it:
``per_dialect``) and compiled once per engine (``Prepared``), so the hot paths pay
neither statement construction nor SQLAlchemy's per-execution parameter
handling on every call. A dialect's own module (its ``insert`` with conflict
clauses) is imported when a statement is first built for it: a SQLite process
never loads PostgreSQL's or MySQL's.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, Connection, Table, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from .prepared import Prepared, per_dialect

__all__ = [
    "MYSQL",
    "Capabilities",
    "capabilities",
    "db_clock_ms",
    "insert_ignore",
    "prepare_insert_ignore",
    "upsert",
]

MYSQL = ("mysql", "mariadb")


class Capabilities(NamedTuple):
    """What a backend's SQL can do, named after what the code paths need."""

    returning: bool
    """INSERT, UPDATE and upserts can RETURN the row written (MySQL and MariaDB
    cannot here: their callers read the row, locked by the write, back)."""
    one_statement_writes: bool
    """Data-modifying CTEs and ``unnest()`` of arrays: a whole write as one
    statement, run without BEGIN/COMMIT (PostgreSQL)."""
    subquery_limits: bool
    """LIMIT and OFFSET may be scalar subqueries (SQLite, PostgreSQL)."""


_CAPABILITIES = {
    "postgresql": Capabilities(returning=True, one_statement_writes=True, subquery_limits=True),
    "sqlite": Capabilities(returning=True, one_statement_writes=False, subquery_limits=True),
    "mysql": Capabilities(returning=False, one_statement_writes=False, subquery_limits=False),
    "mariadb": Capabilities(returning=False, one_statement_writes=False, subquery_limits=False),
}


def capabilities(backend: Connection | Dialect | str) -> Capabilities:
    """What ``backend`` (a connection, a dialect or a dialect's name) can do."""
    if isinstance(backend, str):
        return _CAPABILITIES[backend]
    dialect = backend if isinstance(backend, Dialect) else backend.dialect
    return _CAPABILITIES[dialect.name]


@cache
def _insert_ignore(dialect: str, table: Table, columns: tuple[str, ...]) -> Prepared:
    values: dict[str, Any] = {name: bindparam(name) for name in columns}
    if dialect in MYSQL:
        return Prepared(table.insert().prefix_with("IGNORE").values(values))
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return Prepared(pg_insert(table).values(values).on_conflict_do_nothing())
    from sqlalchemy.dialects.sqlite import insert

    return Prepared(insert(table).values(values).on_conflict_do_nothing())


def insert_ignore(conn: Connection, table: Table, values: dict[str, Any]) -> bool:
    """Insert one row unless its key exists; True when the row was inserted.

    The uniqueness check happens inside the insert (never read-then-write),
    so racing writers settle on the constraint.
    """
    statement = _insert_ignore(conn.dialect.name, table, tuple(values))
    return bool(statement.execute(conn, values).rowcount == 1)


def prepare_insert_ignore(table: Table, columns: tuple[str, ...]) -> None:
    """Have a Database build, when it opens, its ``insert_ignore`` of rows with these
    keys in this order (``per_dialect``)."""
    per_dialect(lambda name: _insert_ignore(name, table, columns))


def upsert(
    dialect: str, table: Table, values: dict[str, Any], changes: dict[str, Any], returning: Any
) -> Executable:
    """Insert, or update the row whose primary key exists, in one statement.

    Without ``returning`` capability (MySQL) its callers read the (now locked) row back.
    """
    if not _CAPABILITIES[dialect].returning:
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        return mysql_insert(table).values(values).on_duplicate_key_update(**changes)
    keys = list(table.primary_key.columns)
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        pg = pg_insert(table).values(values)
        return pg.on_conflict_do_update(index_elements=keys, set_=changes).returning(*returning)
    from sqlalchemy.dialects.sqlite import insert

    lite = insert(table).values(values)
    return lite.on_conflict_do_update(index_elements=keys, set_=changes).returning(*returning)


class db_clock_ms(FunctionElement[int]):  # an SQL function, named like one
    """The database server's clock in epoch milliseconds.

    Lease expiry is judged by this one clock, so hosts whose clocks disagree
    still agree on when a lease lapsed.
    """

    type = BigInteger()
    inherit_cache = True


@compiles(db_clock_ms, "sqlite")
def _sqlite_clock(_element: db_clock_ms, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"


@compiles(db_clock_ms, "postgresql")
def _postgresql_clock(_element: db_clock_ms, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"


@compiles(db_clock_ms, "mysql")
@compiles(db_clock_ms, "mariadb")
def _mysql_clock(_element: db_clock_ms, _compiler: SQLCompiler, **_kw: Any) -> str:
    # UTC_TIMESTAMP and TIMESTAMPDIFF ignore the session time zone (UNIX_TIMESTAMP does not).
    return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000"
