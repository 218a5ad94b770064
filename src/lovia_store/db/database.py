"""``Database``: the one owner of one ``AsyncEngine``, shared by every store."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from ..errors import LoviaStoreError, MissingDriverError, SchemaNotCurrentError, UserError
from .errors import translate

__all__ = ["Database", "as_database"]

T = TypeVar("T")
Work = Callable[[AsyncConnection], Awaitable[T]]


_WRITE = "lovia_write"
_RETRIES = 6
_DRIVERS = {
    "sqlite": "aiosqlite",
    "postgresql": "asyncpg",
    "mysql": "asyncmy",
    "mariadb": "asyncmy",
}
_EXTRAS = {"asyncmy": "lovia-store[mysql]", "aiomysql": "aiomysql"}


def _to_url(target: str | os.PathLike[str]) -> URL:
    text = os.fspath(target)
    if text == ":memory:":
        return make_url("sqlite+aiosqlite:///:memory:")
    if "://" not in text:
        path = Path(text).expanduser().resolve()
        return make_url(f"sqlite+aiosqlite:///{path}")
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise UserError(f"not a database URL: {text!r}") from exc
    backend = url.get_backend_name()
    if "+" not in url.drivername and backend in _DRIVERS:
        # A plain ``postgresql://`` URL means "the async driver we ship with".
        url = url.set(drivername=f"{backend}+{_DRIVERS[backend]}")
    return url


def _sqlite_listeners(engine: AsyncEngine, *, wal: bool, busy_timeout: float) -> None:
    """Pragmas on connect, and BEGIN IMMEDIATE for writes.

    pysqlite's own transaction handling is turned off so that a write takes the
    file's write lock at BEGIN: a deferred transaction that reads first and
    writes later can fail with SQLITE_BUSY without ever waiting.
    """

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if wal:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """One engine, one schema check, shared by every store built on it.

    ``target`` is a SQLAlchemy URL, a SQLite path (``":memory:"`` too), or an
    ``AsyncEngine`` the caller owns. ``close()`` disposes only an engine this
    object created. ``verify_only=True`` never migrates: an out-of-date database
    raises ``SchemaNotCurrentError`` (for deployments that migrate as a step).
    On SQLite, ``wal=True`` selects WAL journaling with ``synchronous=NORMAL``,
    and ``busy_timeout`` is how long (seconds) a writer waits for another
    process's lock before the write fails with ``StoreBusyError``.
    """

    def __init__(
        self,
        target: AsyncEngine | str | os.PathLike[str],
        *,
        wal: bool = False,
        echo: bool = False,
        verify_only: bool = False,
        busy_timeout: float = 5.0,
        **engine_options: Any,
    ) -> None:
        self.verify_only = verify_only
        self.wal = wal
        if isinstance(target, AsyncEngine):
            if engine_options or echo or wal:
                raise UserError(
                    "wal, echo and engine options apply only to an engine lovia-store creates; "
                    "configure your own engine yourself"
                )
            self.engine = target
            self._owns_engine = False
        elif isinstance(target, str | os.PathLike):
            url = _to_url(target)
            on_disk = url.get_backend_name() == "sqlite" and url.database not in (
                None,
                "",
                ":memory:",
            )
            if on_disk and not verify_only:  # a check must not leave folders behind
                Path(str(url.database)).parent.mkdir(parents=True, exist_ok=True)
            self.engine = self._create_engine(
                url, wal=wal, echo=echo, busy_timeout=busy_timeout, options=engine_options
            )
            self._owns_engine = True
        else:
            raise UserError(
                f"a Database target is a URL, a path or an AsyncEngine, not {type(target).__name__}"
            )
        self.url = self.engine.url.render_as_string(hide_password=True)
        self.dialect = self.engine.dialect.name
        self.is_sqlite = self.dialect == "sqlite"
        self.is_memory = self.is_sqlite and self.engine.url.database in (None, "", ":memory:")
        self._recipe = (wal, echo, busy_timeout, engine_options)
        self._loops: dict[asyncio.AbstractEventLoop, _LoopState] = {}
        self._schema_ready = False
        self._closed = False

    def _state(self) -> _LoopState:
        """This event loop's engine and locks.

        Connections never cross event loops: the first loop uses ``engine``;
        another loop (a ``sync()`` view's thread, a second loop in a worker
        thread) gets its own engine on the same URL, which that loop disposes
        with ``dispose_loop()``. A caller's engine and an in-memory database are
        shared as they are (there is only one of each).
        """
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            engine = self.engine
            if self._loops and self._owns_engine and not self.is_memory:
                wal, echo, busy_timeout, options = self._recipe
                engine = self._create_engine(
                    self.engine.url, wal=wal, echo=echo, busy_timeout=busy_timeout, options=options
                )
            state = self._loops[loop] = _LoopState(engine, self.dialect)
        return state

    @staticmethod
    def _create_engine(
        url: URL, *, wal: bool, echo: bool, busy_timeout: float, options: dict[str, Any]
    ) -> AsyncEngine:
        backend = url.get_backend_name()
        defaults: dict[str, Any] = {}
        if backend == "sqlite":
            if url.database in (None, "", ":memory:"):
                defaults["poolclass"] = StaticPool
        else:
            defaults.update(pool_pre_ping=True, pool_recycle=1800)
        try:
            engine = create_async_engine(url, echo=echo, **{**defaults, **options})
        except ModuleNotFoundError as exc:
            driver = url.get_driver_name()
            extra = _EXTRAS.get(driver, driver)
            raise MissingDriverError(
                f"the {driver!r} driver for {backend} is not installed: pip install {extra}"
            ) from exc
        if backend == "sqlite":
            _sqlite_listeners(engine, wal=wal, busy_timeout=busy_timeout)
        return engine

    # -- schema ---------------------------------------------------------------

    async def ensure_schema(self) -> None:
        """Check (and unless ``verify_only``, migrate) the schema once per Database."""
        if self._schema_ready:
            return
        from .schema import ensure_current, head_revision

        if self.verify_only and self._missing_file():
            raise SchemaNotCurrentError(database=self.url, found=None, expected=head_revision())
        async with self._state().schema_lock:
            if not self._schema_ready:
                await ensure_current(self)
                self._schema_ready = True

    def _missing_file(self) -> bool:
        path = self.engine.url.database
        return self.is_sqlite and not self.is_memory and not Path(str(path)).exists()

    # -- transactions ---------------------------------------------------------

    async def read(self, work: Work[T]) -> T:
        """Run ``work`` in one read transaction (a consistent snapshot)."""
        await self.ensure_schema()
        return await self.read_unchecked(work)

    async def read_unchecked(self, work: Work[T]) -> T:
        """``read`` without the schema check (the gate itself uses it)."""
        self._check_open()
        return await self._retrying(lambda: self._read_once(work), serialize=self.is_memory)

    async def _read_once(self, work: Work[T]) -> T:
        try:
            async with self._state().read_engine.connect() as conn:
                return await work(conn)
        except DBAPIError as exc:
            raise translate(exc, self.url, committing=False) from exc

    async def write(self, work: Work[T]) -> T:
        """Run ``work`` in one write transaction: all of it commits or none of it.

        The transaction runs in its own task, shielded from the caller's
        cancellation, so a cancelled caller never leaves a half-applied write
        (the write finishes or rolls back on its own; a retry under the same
        key is then a no-op). Busy errors that provably happened before commit
        are retried a bounded number of times.
        """
        await self.ensure_schema()
        return await self.write_unchecked(work)

    async def write_unchecked(self, work: Work[T]) -> T:
        """``write`` without the schema check (the gate itself uses it)."""
        self._check_open()
        task = asyncio.ensure_future(self._retrying(lambda: self._write_once(work), serialize=True))
        inflight = self._state().inflight
        inflight.add(task)
        task.add_done_callback(_forget(inflight))
        return await asyncio.shield(task)

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], *, serialize: bool) -> T:
        """Run ``attempt``, again after a short pause while it fails retry-safely."""
        delay = 0.01
        for remaining in range(_RETRIES - 1, -1, -1):
            try:
                lock = self._state().writer_lock
                if not serialize or lock is None:
                    return await attempt()
                async with lock:
                    return await attempt()
            except LoviaStoreError as exc:
                if not (getattr(exc, "retry_safe", False) and remaining):
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    async def _write_once(self, work: Work[T]) -> T:
        committing = False
        try:
            async with self._state().write_engine.connect() as conn:
                transaction = await conn.begin()
                try:
                    result = await work(conn)
                except BaseException:
                    await transaction.rollback()
                    raise
                committing = True
                await transaction.commit()
                return result
        except DBAPIError as exc:
            raise translate(exc, self.url, committing=committing) from exc

    # -- lifetime -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UserError(f"{self.url}: this Database is closed")

    async def dispose_loop(self) -> None:
        """Release this event loop's own engine (call it before the loop stops)."""
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.drain()
            if state.engine is not self.engine:
                await state.engine.dispose()

    async def close(self) -> None:
        """Finish in-flight writes, then dispose the engines this object created.

        A caller's engine is left as it was. Engines that other event loops
        still hold are dropped without closing their connections from here.
        """
        if self._closed:
            return
        self._closed = True
        await self.dispose_loop()
        for state in self._loops.values():
            if state.engine is not self.engine:
                await state.engine.dispose(close=False)
        self._loops.clear()
        if self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Database({self.url!r})"


class _LoopState:
    """What one event loop uses: engines sharing a pool, and its locks."""

    def __init__(self, engine: AsyncEngine, dialect: str) -> None:
        self.engine = engine
        self.write_engine = engine.execution_options(**{_WRITE: True})
        # Reads that take several statements must see one snapshot; PostgreSQL's
        # default READ COMMITTED would not give it.
        self.read_engine = (
            engine.execution_options(isolation_level="REPEATABLE READ")
            if dialect == "postgresql"
            else engine
        )
        # SQLite has one writer per file: queue this loop's writers on a lock
        # instead of letting them spin in the busy handler. An in-memory
        # database is one shared connection, so its readers queue too.
        self.writer_lock = asyncio.Lock() if dialect == "sqlite" else None
        self.schema_lock = asyncio.Lock()
        self.inflight: set[asyncio.Task[Any]] = set()

    async def drain(self) -> None:
        if self.inflight:
            await asyncio.gather(*self.inflight, return_exceptions=True)


def _forget(inflight: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        inflight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved so an abandoned write's failure is not reported as lost

    return done


def as_database(
    target: Database | AsyncEngine | str | os.PathLike[str], *, wal: bool = False
) -> tuple[Database, bool]:
    """The Database a store should use, and whether the store owns it."""
    if isinstance(target, Database):
        if wal:
            raise UserError("wal applies when the store opens the database itself")
        return target, False
    return Database(target, wal=wal), True
