"""How a unit of work reaches the database: one transaction, one trip.

Stores write their SQL as plain synchronous Core code against a
``Connection`` (a *work* function). An executor runs one work function as one
transaction:

- ``SQLiteThreadExecutor`` (SQLite files and ``:memory:`` that lovia-store opens; in
  ``sqlite_executor``): the whole transaction runs in a worker thread.
- ``AsyncExecutor`` (PostgreSQL, MySQL, or any ``AsyncEngine`` a caller passes):
  the work function runs under ``AsyncConnection.run_sync`` on the running
  loop's engine; connections never cross event loops.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from ..errors import LoviaStoreError
from .errors import connect_failure, lost_connection, translate
from .prepared import DRIVER_CURSOR, Prepared, untraced
from .urls import display_url

__all__ = [
    "AsyncExecutor",
    "Bracket",
    "ConnectFailed",
    "Executor",
    "Failed",
    "Work",
    "make_async_engine",
    "transaction",
]

T = TypeVar("T")
Work = Callable[[Connection], T]


# Set while one of our units of work runs (in its task): see _DriverNotes.
_OURS: ContextVar[bool] = ContextVar("lovia_store_unit_of_work", default=False)


class _DriverNotes(logging.Filter):
    """Drops the server notes asyncmy logs (at WARNING, through ``SHOW WARNINGS``)
    for our own statements, and only those: ``INSERT IGNORE`` finding its row
    ("Duplicate entry 'alice-r1' for key 'PRIMARY'") is how an idempotent write
    works, not news, and the notes hold ids. A host's own statements keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _OURS.get()


_DRIVER_NOTES = _DriverNotes()


def _quiet_driver_notes() -> None:
    driver_logger = logging.getLogger("asyncmy")
    if _DRIVER_NOTES not in driver_logger.filters:
        driver_logger.addFilter(_DRIVER_NOTES)


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


class _LoopEngines:
    def __init__(self, engine: AsyncEngine, pooled: bool) -> None:
        self.engine = engine
        self.pooled = pooled
        self.write = engine
        # Reads that take several statements must see one snapshot; PostgreSQL's
        # default READ COMMITTED would not give it.
        postgresql = engine.dialect.name == "postgresql"
        self.read = (
            engine.execution_options(isolation_level="REPEATABLE READ") if postgresql else engine
        )
        # A lone statement is atomic and its own snapshot: no BEGIN/COMMIT round
        # trips for it. (Not on MySQL, where switching autocommit is itself a round trip.)
        # It shares the pool: on PostgreSQL's drivers the switch costs no round trip
        # (the level is applied at BEGIN, and reset when the connection is checked
        # in), and a pool of its own would hold connections idle beside the other.
        # What it must not do is hand a connection a driver error left unusable to
        # the next transaction: _on_sync_engine discards any such connection.
        # Behind a transaction pooler, a statement outside a transaction may see its Parse
        # and its Execute reach two server connections: none runs outside one there.
        self.one_statement = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if postgresql and not pooled
            else self.read
        )
        self.inflight: set[asyncio.Task[Any]] = set()
        # Reads run in their callers' tasks; closing waits until none is running.
        self.readers = 0
        self.no_readers = asyncio.Event()
        self.no_readers.set()

    async def reading(self, attempt: Awaitable[T]) -> T:
        self.readers += 1
        self.no_readers.clear()
        try:
            return await attempt
        finally:
            self.readers -= 1
            if not self.readers:
                self.no_readers.set()


class AsyncExecutor(Executor):
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        owned: bool,
        recreate: Callable[[], AsyncEngine],
        pooled: bool = False,
    ):
        self.engine = engine
        self.pooled = pooled
        self.url = engine.url
        self.dialect = engine.dialect.name
        if self.dialect == "sqlite":
            # A caller's engine keeps its own timeout, which we cannot read back:
            # assume sqlite3's default (5 s), what an engine gets unless told otherwise.
            self.busy_wait = 5.0
        self._owned = owned
        self._quiet = self.dialect in ("mysql", "mariadb")
        if self._quiet:
            _quiet_driver_notes()
        self.hide_parameters = engine.sync_engine.hide_parameters or not owned
        self._recreate = recreate
        self._loops: dict[asyncio.AbstractEventLoop, _LoopEngines] = {}

    def _engines(self) -> _LoopEngines:
        """This loop's engines: the first loop uses ``engine``; another loop gets its
        own engine on the same URL (when we own it), released by ``close_loop``."""
        loop = asyncio.get_running_loop()
        found = self._loops.get(loop)
        if found is None:
            self._forget_closed_loops()
            engine = self._recreate() if self._loops and self._owned else self.engine
            found = self._loops[loop] = _LoopEngines(engine, self.pooled)
        return found

    def _forget_closed_loops(self) -> None:
        """Drop the pools of loops that ended without ``close_loop`` (one ``asyncio.run``
        after another): their connections cannot be closed any more (closing needs their
        loop: "Event loop is closed"), so they are let go, for the collector."""
        for loop in [loop for loop in self._loops if loop.is_closed()]:
            engines = self._loops.pop(loop)
            if engines.engine is not self.engine or self._owned:
                engines.engine.sync_engine.dispose(close=False)

    async def _once(self, engine: AsyncEngine, work: Work[T], *, write: bool) -> T:
        quiet = _OURS.set(True) if self._quiet else None
        try:
            return await greenlet_spawn(_on_sync_engine, engine.sync_engine, work)
        except Failed as failed:
            shown = display_url(self.url)
            error = failed.translated(shown, hide=self.hide_parameters, wrote=write)
            raise error from failed.error
        except ConnectFailed as failed:
            error = failed.translated(display_url(self.url), hide=self.hide_parameters)
            raise error from failed.error
        finally:
            if quiet is not None:
                _OURS.reset(quiet)

    async def run(self, work: Work[T], *, write: bool, single_statement: bool = False) -> T:
        engines = self._engines()
        if not write:
            engine = engines.one_statement if single_statement else engines.read
            return await engines.reading(self._once(engine, work, write=False))
        # The write runs in its own task, shielded from the caller's cancellation,
        # so it commits or rolls back whole.
        lone = single_statement and not engines.pooled
        engine = engines.one_statement if lone else engines.write
        task = asyncio.ensure_future(self._once(engine, work, write=True))
        engines.inflight.add(task)
        task.add_done_callback(_forget(engines.inflight))
        return await asyncio.shield(task)

    async def close_loop(self) -> None:
        engines = self._loops.pop(asyncio.get_running_loop(), None)
        if engines is not None:
            if engines.inflight:
                await asyncio.gather(*engines.inflight, return_exceptions=True)
            await engines.no_readers.wait()
            # Pooled connections belong to this loop (asyncpg's cannot be used from
            # another): close them now. The base engine opens new ones on demand.
            if engines.engine is not self.engine or self._owned:
                await engines.engine.dispose()

    async def close(self) -> None:
        await self.close_loop()
        self._forget_closed_loops()
        # Loops still running elsewhere close their own connections; only ours are closed.
        elsewhere = any(engines.engine is self.engine for engines in self._loops.values())
        for engines in self._loops.values():
            if engines.engine is not self.engine:
                await engines.engine.dispose(close=False)
        self._loops.clear()
        if self._owned and not elsewhere:
            await self.engine.dispose()


def _on_sync_engine(engine: Engine, work: Work[T]) -> T:
    """Check out, run ``work`` as one transaction, check in: one greenlet for all
    three (what ``AsyncConnection`` does in three, one per step).

    A connection on which the driver raised is discarded, not pooled again, as
    the SQLite executor does: a driver may leave it in a state the pool's reset
    does not undo. asyncpg does after refusing an argument client-side on an
    AUTOCOMMIT connection (nothing rolls back there): the server session is left
    mid-transaction, the next BEGIN ISOLATION LEVEL fails and asyncpg keeps that
    failed transaction as its current one, so every later transaction on the
    connection is attempted as a SAVEPOINT and fails, until ``pool_recycle``.
    Only the failure path pays (a reconnect); success costs nothing more.

    A connection that cannot be opened is told apart: nothing was sent on it.
    asyncpg raises the socket's own errors then (refused, unknown host, TLS
    refused, ``TimeoutError``), and ``TypeError``/``ValueError`` for a URL
    parameter it does not take; SQLAlchemy passes them on untranslated.
    """
    try:
        conn = engine.connect()
    except (DBAPIError, OSError, TypeError, ValueError) as exc:
        raise ConnectFailed(exc) from exc
    with conn:
        try:
            return transaction(conn, work)
        except Failed:
            conn.invalidate()
            raise


def _forget(inflight: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        inflight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved so an abandoned write's failure is not reported as lost

    return done


def _statement_name() -> str:
    """A name no other client's statement has, on whichever server connection it lands."""
    return f"__lovia_{uuid.uuid4().hex}__"


_POOLED_CONNECT_ARGS: dict[str, dict[str, Any]] = {
    # asyncpg: no statement cache of its own nor SQLAlchemy's, unique names (each is
    # prepared and run inside one transaction, so on one server connection).
    "asyncpg": {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": _statement_name,
    },
    # psycopg: never prepare by name; each statement is one unnamed Parse-Bind-Execute.
    "psycopg": {"prepare_threshold": None},
}


def make_async_engine(
    url: URL, *, echo: bool, options: dict[str, Any], pooler: str | None = None
) -> AsyncEngine:
    """An engine for a server database; ``options`` override the pool defaults.

    No ``pool_pre_ping`` by default: it costs a round trip on every checkout,
    a noticeable share of a small operation. A pooled connection the server
    dropped fails on its first statement, before anything could commit;
    SQLAlchemy then invalidates the pool's older connections and ``Database``
    retries the operation on a fresh one. ``pool_recycle`` reopens connections
    before proxies' idle limits close them. Ten connections and no overflow
    (asyncpg's own pool default): calls beyond ten wait for a connection
    instead of opening and closing one each, which under a burst of writers
    costs more than the wait. ``hide_parameters``: a failed statement's values
    (conversation content) stay out of error messages and logs. On asyncpg,
    prepared statements run on the driver's cursor (``DRIVER_CURSOR``): SQLAlchemy's
    execution context was a tenth of a checkpoint step's instructions.
    """
    defaults = {
        "pool_pre_ping": False,
        "pool_recycle": 1800,
        "pool_size": 10,
        "max_overflow": 0,
        "hide_parameters": True,
    }
    driver = url.get_driver_name()
    if driver == "asyncpg":
        fast = not echo and pooler is None
        execution = {DRIVER_CURSOR: fast, **options.get("execution_options", {})}
        options = {**options, "execution_options": execution}
    if pooler is not None:
        connect_args = {**_POOLED_CONNECT_ARGS.get(driver, {}), **options.get("connect_args", {})}
        options = {**options, "connect_args": connect_args}
    return create_async_engine(url, echo=echo, **{**defaults, **options})
