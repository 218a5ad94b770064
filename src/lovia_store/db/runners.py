"""How a unit of work reaches the database: one transaction, one trip.

Stores write their SQL as plain synchronous Core code against a
``Connection`` (a *work* function). A runner executes one work function as one
transaction:

- ``ThreadRunner`` (SQLite files and ``:memory:`` that lovia-store opens):
  the whole transaction runs in a worker thread on a pysqlite connection, so an
  operation costs one thread hop, not one per statement. Writes go to a single
  writer thread (SQLite has one writer per file; queueing in-process beats
  spinning in the busy handler), which commits the writes queued meanwhile
  together; reads go to a few reader threads.
- ``AsyncRunner`` (PostgreSQL, MySQL, or any ``AsyncEngine`` a caller passes):
  the work function runs under ``AsyncConnection.run_sync`` on the running
  loop's engine; connections never cross event loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.util import greenlet_spawn

from .errors import translate
from .prepared import DRIVER_CURSOR, Prepared

__all__ = ["AsyncRunner", "Runner", "ThreadRunner", "Work"]

T = TypeVar("T")
Work = Callable[[Connection], T]

_READERS = 3
# Run like the hot statements: on the driver's cursor where the engine allows.
_BEGIN = Prepared(text("BEGIN"))
_BEGIN_IMMEDIATE = Prepared(text("BEGIN IMMEDIATE"))


class _Failed(Exception):
    """Carries a driver error out of a transaction with the phase it happened in."""

    def __init__(self, error: DBAPIError, committing: bool) -> None:
        self.error = error
        self.committing = committing


def _transaction(conn: Connection, work: Work[T], begin: Prepared | None = None) -> T:
    """Run ``work`` in one transaction on ``conn``; ``begin`` is the statement that
    opens it (pysqlite with its own transaction handling off), None for the driver's own."""
    committing = False
    try:
        transaction = conn.begin()
        try:
            if begin is not None:
                begin.execute(conn, {})
            result = work(conn)
        except BaseException:
            transaction.rollback()
            raise
        committing = True
        try:
            transaction.commit()
        except DBAPIError:
            # SQLite keeps a transaction open when COMMIT is refused as busy, and
            # the pool would take the connection back still holding the file's
            # locks: drop the connection instead.
            conn.invalidate()
            raise
        return result
    except DBAPIError as exc:
        raise _Failed(exc, committing) from exc


class _Job:
    """A unit of work handed to a SQLite thread, and the caller's future for its outcome.

    The thread settles the future on the caller's loop itself: one wake-up of the
    loop per operation, no chain of futures in between. A caller that stopped
    waiting (cancelled) is not told; its write still ran whole.
    """

    __slots__ = ("future", "loop", "work")

    def __init__(self, work: Work[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.work = work
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()

    def settle(self, result: Any, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self.loop.call_soon_threadsafe(_settle, self.future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _run_batch(conn: Connection, jobs: list[_Job]) -> None:
    """Run queued writes in one BEGIN IMMEDIATE ... COMMIT, each under a savepoint.

    Every outcome, a write's own failure included, is reported after the
    COMMIT: a write may have seen an earlier one of the batch (a run id found
    already stored, say), so if the COMMIT fails they all fail with it, and
    so does the exception raised here.
    """
    outcomes: list[tuple[_Job, Any, BaseException | None]] = []
    committing = False
    try:
        transaction = conn.begin()
        _BEGIN_IMMEDIATE.execute(conn, {})
        for job in jobs:
            savepoint = conn.begin_nested()
            try:
                outcomes.append((job, job.work(conn), None))
            except BaseException as exc:
                savepoint.rollback()
                if isinstance(exc, DBAPIError):
                    wrapped = _Failed(exc, committing=False)
                    wrapped.__cause__ = exc
                    outcomes.append((job, None, wrapped))
                else:
                    outcomes.append((job, None, exc))
            else:
                savepoint.commit()
        committing = True
        try:
            transaction.commit()
        except DBAPIError:
            conn.invalidate()  # as in _transaction: never keep a connection holding locks
            raise
    except DBAPIError as exc:
        raise _Failed(exc, committing) from exc
    for job, result, error in outcomes:
        job.settle(result, error)


class Runner:
    """What ``Database`` needs from a runner."""

    dialect: str
    url: URL
    engine: Any

    async def run(self, work: Work[T], *, write: bool, single_statement: bool = False) -> T:
        """Run ``work`` as one transaction; ``single_statement`` allows running it
        without one where a lone statement is atomic and its own snapshot."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def close_loop(self) -> None:
        """Release what the running event loop holds (only async runners hold anything)."""


def sqlite_listeners(engine: Engine, *, wal: bool, synchronous: str, busy_timeout: float) -> None:
    """Pragmas on connect, and pysqlite's own transaction handling turned off.

    The transaction is begun by ``ThreadRunner`` itself (``BEGIN IMMEDIATE`` for
    writes, so a write takes the file's write lock at BEGIN: a deferred
    transaction that reads first and writes later can fail with SQLITE_BUSY
    without ever waiting). This is a pool listener only: an engine-level
    listener (such as ``begin``) would make every statement dispatch events.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if wal:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()


class ThreadRunner(Runner):
    """SQLite through pysqlite in threads: one writer thread, a few reader threads.

    The writer thread keeps one connection for its lifetime (no pool checkout
    per write); a connection that failed is discarded and the next write opens
    a fresh one. Readers take pooled connections.
    """

    def __init__(
        self,
        url: URL,
        *,
        wal: bool,
        synchronous: str,
        busy_timeout: float,
        echo: bool,
        options: dict[str, Any],
    ) -> None:
        self.url = url
        self.dialect = "sqlite"
        memory = url.database in (None, "", ":memory:")
        defaults: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
        if memory:
            defaults["poolclass"] = StaticPool
        # Our hot statements skip SQLAlchemy's execution context, unless SQL is echoed.
        execution = {DRIVER_CURSOR: not echo, **options.get("execution_options", {})}
        self.engine = create_engine(
            url.set(drivername="sqlite+pysqlite"),
            echo=echo,
            **{**defaults, **options, "execution_options": execution},
        )
        sqlite_listeners(self.engine, wal=wal, synchronous=synchronous, busy_timeout=busy_timeout)
        self._closed = False
        self._barriers: set[asyncio.Future[None]] = set()  # see run()
        self._queue: list[_Job] = []
        self._queue_lock = threading.Lock()
        # Used on the writer thread only.
        self._writer_connection: Connection | None = None
        self._writer_options: Any = None
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="lovia-sqlite-writer")
        # An in-memory database is one connection: everything goes through the writer.
        self._readers = (
            self._writer
            if memory
            else ThreadPoolExecutor(_READERS, thread_name_prefix="lovia-sqlite-reader")
        )
        self._read = self._on_writer_connection if memory else self._on_pooled_connection

    def _on_pooled_connection(self, job: _Job) -> None:
        try:
            try:
                conn = self.engine.connect()
            except DBAPIError as exc:  # e.g. the connect pragmas met a locked file
                raise _Failed(exc, committing=False) from exc
            with conn:
                try:
                    result = _transaction(conn, job.work, _BEGIN)
                except _Failed:
                    # As the writer does: a connection a driver error left in an
                    # unknown state is not pooled again.
                    conn.invalidate()
                    raise
        except BaseException as exc:
            job.settle(None, exc)
        else:
            job.settle(result, None)

    def _connection(self) -> Connection:
        """The writer thread's connection, opened on first use, and again whenever
        a job left it other than it found it (closed, mid-transaction, or with
        execution options of its own): each job starts from a clean connection."""
        held = self._writer_connection
        if held is not None and (
            held.closed
            or held.invalidated
            or held.in_transaction()
            or held.get_execution_options() is not self._writer_options
        ):
            self._drop_connection()
            held = None
        if held is None:
            try:
                held = self._writer_connection = self.engine.connect()
            except DBAPIError as exc:
                raise _Failed(exc, committing=False) from exc
            self._writer_options = held.get_execution_options()
        return held

    def _drop_connection(self, *, failed: bool = False) -> None:
        """Let go of the writer's connection; one a driver error ``failed`` on is
        discarded rather than pooled again (a reader would take it next)."""
        connection, self._writer_connection = self._writer_connection, None
        if connection is not None:
            if failed:
                connection.invalidate()
            connection.close()

    def _on_writer_connection(self, job: _Job, begin: Prepared = _BEGIN) -> None:
        try:
            result = _transaction(self._connection(), job.work, begin)
        except _Failed as exc:
            # Whatever state the driver left it in, start afresh.
            self._drop_connection(failed=True)
            job.settle(None, exc)
        except BaseException as exc:  # the work's own error: the transaction rolled back
            job.settle(None, exc)
        else:
            job.settle(result, None)

    def _write_batch(self) -> None:
        """Run every write queued so far (in order) as one transaction: group commit.

        Writes that arrive while the writer thread is busy (committing, say)
        queue up and share the next commit, so concurrent writers pay one
        fsync between them instead of one each. Each write runs under its own
        savepoint: one that raises is rolled back alone and fails alone; the
        others still commit. Every write's caller hears back only after the
        shared COMMIT, so it is as durable as before. A write queued alone runs
        exactly as it did before (no savepoint).
        """
        with self._queue_lock:
            batch, self._queue = self._queue, []
        if len(batch) == 1:
            self._on_writer_connection(batch[0], _BEGIN_IMMEDIATE)
        elif batch:
            try:
                _run_batch(self._connection(), batch)
            except BaseException as exc:  # nothing of the batch committed
                self._drop_connection(failed=isinstance(exc, _Failed))
                for job in batch:
                    job.settle(None, exc)

    async def run(self, work: Work[T], *, write: bool, single_statement: bool = False) -> T:
        # single_statement is ignored: BEGIN and COMMIT cost SQLite next to nothing.
        job = _Job(work, asyncio.get_running_loop())
        if write:
            with self._queue_lock:
                self._queue.append(job)
            self._writer.submit(self._write_batch)
        else:
            self._readers.submit(self._read, job)
        try:
            result: T = await job.future
        except asyncio.CancelledError:
            if write:
                # The caller stops waiting, but its write still runs whole (the
                # writer thread runs every queued job). A task stays behind until
                # it has, so a loop that waits for its tasks before it stops (as
                # SyncRuntime.close does) waits for this write too.
                barrier = asyncio.ensure_future(self.close_loop())
                self._barriers.add(barrier)
                barrier.add_done_callback(self._barriers.discard)
            raise
        except _Failed as failed:
            raise translate(failed.error, _display(self.url), committing=failed.committing) from (
                failed.error
            )
        return result

    async def close_loop(self) -> None:
        """Wait for the writes already handed to the writer thread (it runs them in order)."""
        if not self._closed:
            await asyncio.get_running_loop().run_in_executor(self._writer, lambda: None)

    async def close(self) -> None:
        self._closed = True

        def shut() -> None:
            self._writer.shutdown(wait=True)
            self._readers.shutdown(wait=True)
            self._drop_connection()  # the writer thread is gone: nothing else uses it
            self.engine.dispose()

        await asyncio.to_thread(shut)


class _LoopEngines:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
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
        self.one_statement = (
            engine.execution_options(isolation_level="AUTOCOMMIT") if postgresql else self.read
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


class AsyncRunner(Runner):
    def __init__(self, engine: AsyncEngine, *, owned: bool, recreate: Callable[[], AsyncEngine]):
        self.engine = engine
        self.url = engine.url
        self.dialect = engine.dialect.name
        self._owned = owned
        self._recreate = recreate
        self._loops: dict[asyncio.AbstractEventLoop, _LoopEngines] = {}

    def _engines(self) -> _LoopEngines:
        """This loop's engines: the first loop uses ``engine``; another loop gets its
        own engine on the same URL (when we own it), released by ``close_loop``."""
        loop = asyncio.get_running_loop()
        found = self._loops.get(loop)
        if found is None:
            engine = self._recreate() if self._loops and self._owned else self.engine
            found = self._loops[loop] = _LoopEngines(engine)
        return found

    async def _once(self, engine: AsyncEngine, work: Work[T]) -> T:
        try:
            return await greenlet_spawn(_on_sync_engine, engine.sync_engine, work)
        except _Failed as failed:
            raise translate(
                failed.error, _display(self.url), committing=failed.committing
            ) from failed.error
        except DBAPIError as exc:  # could not connect: nothing was sent
            raise translate(exc, _display(self.url), committing=False) from exc

    async def run(self, work: Work[T], *, write: bool, single_statement: bool = False) -> T:
        engines = self._engines()
        if not write:
            engine = engines.one_statement if single_statement else engines.read
            return await engines.reading(self._once(engine, work))
        # The write runs in its own task, shielded from the caller's cancellation,
        # so it commits or rolls back whole.
        engine = engines.one_statement if single_statement else engines.write
        task = asyncio.ensure_future(self._once(engine, work))
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
        for engines in self._loops.values():
            if engines.engine is not self.engine:
                await engines.engine.dispose(close=False)
        self._loops.clear()
        if self._owned:
            await self.engine.dispose()


def _on_sync_engine(engine: Engine, work: Work[T]) -> T:
    """Check out, run ``work`` as one transaction, check in: one greenlet for all
    three (what ``AsyncConnection`` does in three, one per step).

    A connection on which the driver raised is discarded, not pooled again, as
    the SQLite runner does: a driver may leave it in a state the pool's reset
    does not undo. asyncpg does after refusing an argument client-side on an
    AUTOCOMMIT connection (nothing rolls back there): the server session is left
    mid-transaction, the next BEGIN ISOLATION LEVEL fails and asyncpg keeps that
    failed transaction as its current one, so every later transaction on the
    connection is attempted as a SAVEPOINT and fails, until ``pool_recycle``.
    Only the failure path pays (a reconnect); success costs nothing more.
    """
    with engine.connect() as conn:
        try:
            return _transaction(conn, work)
        except _Failed:
            conn.invalidate()
            raise


def _forget(inflight: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        inflight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved so an abandoned write's failure is not reported as lost

    return done


def _display(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def make_async_engine(url: URL, *, echo: bool, options: dict[str, Any]) -> AsyncEngine:
    """An engine for a server database; ``options`` override the pool defaults.

    No ``pool_pre_ping`` by default: it costs a round trip on every checkout,
    a noticeable share of a small operation. A pooled connection the server
    dropped fails on its first statement, before anything could commit;
    SQLAlchemy then invalidates the pool's older connections and ``Database``
    retries the operation on a fresh one. ``pool_recycle`` reopens connections
    before proxies' idle limits close them. Ten connections and no overflow
    (asyncpg's own pool default): calls beyond ten wait for a connection
    instead of opening and closing one each, which under a burst of writers
    costs more than the wait.
    """
    defaults = {"pool_pre_ping": False, "pool_recycle": 1800, "pool_size": 10, "max_overflow": 0}
    return create_async_engine(url, echo=echo, **{**defaults, **options})
