"""``AsyncExecutor``: a unit of work on an ``AsyncEngine`` (PostgreSQL, MySQL, or
any engine a caller passes), and the engines lovia-store creates for servers.

The only module of ours that imports SQLAlchemy's asyncio extension (and with it
its ORM): ``Database`` imports it when a server URL or an ``AsyncEngine`` is used.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from .executors import ConnectFailed, Executor, Failed, Work, transaction
from .prepared import DRIVER_CURSOR
from .urls import display_url

__all__ = ["AsyncExecutor", "in_schema", "make_async_engine"]

T = TypeVar("T")


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


def in_schema(engine: AsyncEngine, schema: str | None) -> AsyncEngine:
    """``engine`` with every one of our (schema-less) tables rendered in ``schema``.

    The returned engine shares the pool; only statements made through it are placed.
    """
    if schema is None:
        return engine
    return engine.execution_options(schema_translate_map={None: schema})


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
