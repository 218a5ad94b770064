"""How a unit of work reaches the database: one transaction, one trip.

Stores write their SQL as plain synchronous Core code against a
``Connection`` (a *work* function). An executor runs one work function as one
transaction:

- ``SQLiteThreadExecutor`` (SQLite files and ``:memory:`` that lovia-store opens; in
  ``sqlite_executor``): the whole transaction runs in a worker thread, on a
  synchronous pysqlite engine.
- ``AsyncExecutor`` (PostgreSQL, MySQL, or any ``AsyncEngine`` a caller passes; in
  ``async_executor``): the work function runs in a greenlet on the running
  loop's engine; connections never cross event loops.

This module holds what both share; only ``async_executor`` imports SQLAlchemy's
asyncio extension (which imports its ORM), so a SQLite store loads neither.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ..errors import LoviaStoreError
from .errors import connect_failure, lost_connection, translate
from .prepared import Prepared, untraced

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "Bracket",
    "ConnectFailed",
    "Executor",
    "Failed",
    "Work",
    "is_async_engine",
    "transaction",
]

T = TypeVar("T")
Work = Callable[[Connection], T]


class Failed(Exception):
    """Carries a driver error out of a transaction with the phase it happened in."""

    def __init__(self, error: DBAPIError | OSError, committing: bool) -> None:
        self.error = error
        self.committing = committing

    def translated(self, database: str, *, hide: bool, wrote: bool = True) -> LoviaStoreError:
        """The typed error; a read's COMMIT (``wrote=False``) only ended its snapshot, so
        losing it leaves no outcome unknown."""
        committing = self.committing and wrote
        if isinstance(self.error, DBAPIError):
            return translate(self.error, database, committing=committing, hide=hide)
        return lost_connection(self.error, database, committing=committing)


class ConnectFailed(Exception):
    """A connection could not be opened: nothing was sent."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def translated(self, database: str, *, hide: bool) -> LoviaStoreError:
        if isinstance(self.error, DBAPIError):
            return translate(self.error, database, committing=False, connecting=True, hide=hide)
        return connect_failure(self.error, database)


class Bracket(NamedTuple):
    """The statements that open, close and undo a transaction where lovia-store issues
    them itself (pysqlite with its own transaction handling off)."""

    begin: Prepared
    commit: Prepared
    rollback: Prepared


def transaction(conn: Connection, work: Work[T], bracket: Bracket | None = None) -> T:
    """Run ``work`` in one transaction on ``conn``.

    With ``bracket``, BEGIN runs as a statement, and so do COMMIT and ROLLBACK
    whenever a listener could see them (SQLAlchemy's own commit and rollback then
    find nothing left to do): they reach the engine's cursor listeners as every
    other statement does. While nothing listens, the driver's commit() and
    rollback() end the transaction, as cheaply as before. Without ``bracket`` all
    three are the driver's (asyncpg, psycopg, asyncmy): only the engine's
    ``begin``, ``commit`` and ``rollback`` events show them.
    """
    committing = False
    try:
        transaction = conn.begin()
        try:
            if bracket is not None:
                bracket.begin.execute(conn, {})
            result = work(conn)
        except BaseException:
            # SQLite ends a transaction itself on some errors: nothing to roll back then.
            if bracket is not None and _seen_and_open(conn):
                bracket.rollback.execute(conn, {})
            transaction.rollback()
            raise
        committing = True
        try:
            # As sqlite3's own commit(): only what is open (work may have committed itself).
            if bracket is not None and _seen_and_open(conn):
                bracket.commit.execute(conn, {})
            transaction.commit()  # after our COMMIT, the driver has nothing left to commit
        except DBAPIError:
            # SQLite keeps a transaction open when COMMIT is refused as busy, and
            # the pool would take the connection back still holding the file's
            # locks: drop the connection instead.
            conn.invalidate()
            raise
        return result
    except DBAPIError as exc:
        raise Failed(exc, committing) from exc
    except (TimeoutError, ConnectionError) as exc:  # asyncpg raises the socket's own
        raise Failed(exc, committing) from exc


def _seen_and_open(conn: Connection) -> bool:
    """Whether COMMIT or ROLLBACK should run as our own statement: something could see
    it (a listener, ``echo``), and pysqlite's connection under ``conn`` is inside a
    transaction (not once ``conn`` is closed: the pool's reset rolled it back)."""
    if conn.closed or conn.invalidated or untraced(conn):
        return False
    return bool(conn.connection.driver_connection.in_transaction)  # type: ignore[union-attr]


class Executor:
    """What ``Database`` needs from an executor."""

    dialect: str
    url: URL
    engine: Any
    busy_wait: float | None = None
    """SQLite's busy timeout (seconds): how long one call may wait for another
    process's lock in all, retries included. None where lock waits are the server's."""
    hide_parameters = True
    """Whether driver errors keep bound values (conversation content) out of their
    text: always on a caller's engine, unless ``hide_parameters=False`` on ours."""

    async def run(self, work: Work[T], *, write: bool, single_statement: bool = False) -> T:
        """Run ``work`` as one transaction; ``single_statement`` allows running it
        without one where a lone statement is atomic and its own snapshot."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def close_loop(self) -> None:
        """Release what the running event loop holds (only async executors hold anything)."""


def is_async_engine(target: object) -> TypeGuard[AsyncEngine]:
    """Whether ``target`` is an ``AsyncEngine``, without importing SQLAlchemy's asyncio
    extension: no engine of that class exists before its module is imported."""
    module = sys.modules.get("sqlalchemy.ext.asyncio")
    return module is not None and isinstance(target, module.AsyncEngine)
