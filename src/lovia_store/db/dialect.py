"""The few statements whose SQL differs by dialect: upserts, insert-if-absent, the clock.

Each statement is built and compiled once per dialect (``Prepared``), so the
hot paths pay neither statement construction nor SQLAlchemy's per-execution
parameter handling on every call.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, Connection, Table, bindparam, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from .prepared import Prepared
from .tables import sessions
from .types import UTCDateTime

__all__ = [
    "MYSQL",
    "Bumped",
    "bump_params",
    "bump_session",
    "bump_statement",
    "db_clock_ms",
    "insert_ignore",
    "upsert",
]

MYSQL = ("mysql", "mariadb")
_DISPLAY = {"parent_session_id": None, "session_type": 0, "title": None, "agent_name": None}


@cache
def _insert_ignore(dialect: str, table: Table, columns: tuple[str, ...]) -> Prepared:
    values: dict[str, Any] = {name: bindparam(name) for name in columns}
    if dialect in MYSQL:
        return Prepared(table.insert().prefix_with("IGNORE").values(values))
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return Prepared(insert(table).values(values).on_conflict_do_nothing())


def insert_ignore(conn: Connection, table: Table, values: dict[str, Any]) -> bool:
    """Insert one row unless its key exists; True when the row was inserted.

    The uniqueness check happens inside the insert (never read-then-write),
    so racing writers settle on the constraint.
    """
    statement = _insert_ignore(conn.dialect.name, table, tuple(values))
    return bool(statement.execute(conn, values).rowcount == 1)


class Bumped(NamedTuple):
    """What ``bump_session`` reserved, and the session row it reserved it on."""

    last_sequence: int
    run_count: int
    parent_session_id: str | None


c = sessions.c
_RETURNED = (c.last_sequence, c.run_count, c.parent_session_id)


def upsert(
    dialect: str, table: Table, values: dict[str, Any], changes: dict[str, Any], returning: Any
) -> Executable:
    """Insert, or update the row whose primary key exists, in one statement.

    MySQL has no RETURNING here: its callers read the (now locked) row back.
    """
    if dialect in MYSQL:
        return mysql.insert(table).values(values).on_duplicate_key_update(**changes)
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        insert(table)
        .values(values)
        .on_conflict_do_update(index_elements=list(table.primary_key.columns), set_=changes)
        .returning(*returning)
    )


@cache
def bump_statement(dialect: str) -> Executable:
    """The upsert behind ``bump_session``, with its bound parameters: ``sid``,
    ``messages``, ``runs``, ``now`` and the display columns. On PostgreSQL and
    SQLite it returns ``last_sequence, run_count, parent_session_id``."""
    now = bindparam("now", type_=UTCDateTime())
    values = {
        "session_id": bindparam("sid"),
        "last_sequence": bindparam("messages"),
        "message_count": bindparam("messages"),
        "run_count": bindparam("runs"),
        "created_at": now,
        "updated_at": now,
        **{name: bindparam(name) for name in _DISPLAY},
    }
    bumps = {
        "last_sequence": c.last_sequence + bindparam("messages"),
        "message_count": c.message_count + bindparam("messages"),
        "run_count": c.run_count + bindparam("runs"),
        "updated_at": now,
    }
    return upsert(dialect, sessions, values, bumps, _RETURNED)


@cache
def _bump(dialect: str) -> Prepared:
    return Prepared(bump_statement(dialect))


_BUMPED = Prepared(select(*_RETURNED).where(c.session_id == bindparam("sid")))


def bump_params(
    session_id: str,
    *,
    messages: int,
    runs: int,
    now: datetime,
    create: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The parameters of ``bump_statement`` (see ``bump_session``)."""
    params = {"sid": session_id, "messages": messages, "runs": runs, "now": now}
    params.update(_DISPLAY)
    params.update(create or {})
    return params


def bump_session(
    conn: Connection,
    session_id: str,
    *,
    messages: int,
    runs: int,
    now: datetime,
    create: dict[str, Any] | None = None,
) -> Bumped:
    """Create the session if needed and reserve ``messages`` sequences and ``runs`` positions.

    One statement that also takes the session's row lock, so concurrent
    appends to one session serialize here and never collide on a sequence.
    ``create`` holds display columns used only when this call creates the row.
    Returns the last reserved sequence and run position, and the row's parent
    (so a caller can refuse a parent that differs from the stored one).
    """
    params = bump_params(session_id, messages=messages, runs=runs, now=now, create=create)
    result = _bump(conn.dialect.name).execute(conn, params)
    if conn.dialect.name in MYSQL:  # no RETURNING: the row is locked, read it back
        result = _BUMPED.execute(conn, {"sid": session_id})
    row = result.one()
    return Bumped(int(row[0]), int(row[1]), row[2])


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
