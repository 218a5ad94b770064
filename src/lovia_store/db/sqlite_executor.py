"""SQLite files (and ``:memory:``) that lovia-store opens itself: ``SQLiteThreadExecutor``.

The whole transaction runs in a worker thread on a pysqlite connection, so an
operation costs one thread hop, not one per statement. Writes go to a single
writer thread (SQLite has one writer per file; queueing in-process beats
spinning in the busy handler), which commits the writes queued meanwhile
together; reads go to a few reader threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from .executors import Bracket, ConnectFailed, Executor, Failed, Work, transaction
from .prepared import DRIVER_CURSOR, Prepared
from .urls import display_url
from .worker_threads import WorkerThreads

__all__ = ["SQLiteThreadExecutor", "sqlite_listeners"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_READERS = 3
# Run like the hot statements: on the driver's cursor where the engine allows, and
# through SQLAlchemy (seen by its cursor listeners, as every statement) when traced.
_BEGIN = Prepared(text("BEGIN"))
_BEGIN_IMMEDIATE = Prepared(text("BEGIN IMMEDIATE"))
_COMMIT = Prepared(text("COMMIT"))
_ROLLBACK = Prepared(text("ROLLBACK"))


def _bracket(*, write: bool) -> Bracket:
    """A read's or a write's statements, read when used (tests swap them)."""
    return Bracket(_BEGIN_IMMEDIATE if write else _BEGIN, _COMMIT, _ROLLBACK)


class _Job:
    """A unit of work handed to a SQLite thread, and the caller's future for its outcome.

    The thread settles the future on the caller's loop itself: one wake-up of the
    loop per operation, no chain of futures in between. A caller that stopped
    waiting (cancelled) is not told; its write still ran whole.

    The work runs in its caller's context (context variables), as it would in
    the caller's task on a server: an OpenTelemetry span the caller has open
    is its statements' parent, and a progress reporter reaches a migration.
    """

    __slots__ = ("context", "future", "loop", "work")

    def __init__(self, work: Work[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.work = work
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.context = contextvars.copy_context()

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
                outcomes.append((job, job.context.run(job.work, conn), None))
            except BaseException as exc:
                savepoint.rollback()
                if isinstance(exc, DBAPIError):
                    wrapped = Failed(exc, committing=False)
                    wrapped.__cause__ = exc
                    outcomes.append((job, None, wrapped))
                else:
                    outcomes.append((job, None, exc))
            else:
                savepoint.commit()
        committing = True
        try:
            _COMMIT.execute(conn, {})
            transaction.commit()
        except DBAPIError:
            conn.invalidate()  # as in transaction(): never keep a connection holding locks
            raise
    except DBAPIError as exc:
        raise Failed(exc, committing) from exc
    for job, result, error in outcomes:
        job.settle(result, error)


def sqlite_listeners(engine: Engine, *, wal: bool, synchronous: str, busy_timeout: float) -> None:
    """Pragmas on connect, and pysqlite's own transaction handling turned off.

    The transaction is begun by ``SQLiteThreadExecutor`` itself (``BEGIN IMMEDIATE`` for
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
            mode = cursor.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                _refused_wal(cursor, str(mode))
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()


_WAL_REFUSED: set[str] = set()
_WAL_REFUSED_LOCK = threading.Lock()


def _refused_wal(cursor: Any, mode: str) -> None:
    """Say once per file that WAL was refused: SQLite falls back to its old journal
    silently, and the only symptom is readers waiting for writers. File systems
    without shared memory (some network mounts, some VFSes) refuse it."""
    path = next((row[2] for row in cursor.execute("PRAGMA database_list") if row[1] == "main"), "")
    if not path:  # in memory: no journal to choose
        return
    with _WAL_REFUSED_LOCK:
        if path in _WAL_REFUSED:
            return
        _WAL_REFUSED.add(path)
    logger.warning(
        "%s: SQLite refused WAL journaling (journal mode is %r): readers will wait for "
        "writers; a file system without shared memory (some network mounts) does this",
        path,
        mode,
    )


class SQLiteThreadExecutor(Executor):
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
        self.busy_wait = busy_timeout
        memory = url.database in (None, "", ":memory:")
        # sqlite3's own timeout too: the connect pragmas run before ours is set,
        # and would wait sqlite3's default 5 s on a locked file.
        connect = {"check_same_thread": False, "timeout": busy_timeout}
        # hide_parameters: a failed statement's values (conversation content) stay
        # out of error messages and logs.
        defaults: dict[str, Any] = {"connect_args": connect, "hide_parameters": True}
        if memory:
            defaults["poolclass"] = StaticPool
        # Our hot statements skip SQLAlchemy's execution context, unless SQL is echoed
        # or something listens to the engine's cursor executions (prepared.traced).
        execution = {DRIVER_CURSOR: not echo, **options.get("execution_options", {})}
        self.engine = create_engine(
            url.set(drivername="sqlite+pysqlite"),
            echo=echo,
            **{**defaults, **options, "execution_options": execution},
        )
        self.hide_parameters = self.engine.hide_parameters
        sqlite_listeners(self.engine, wal=wal, synchronous=synchronous, busy_timeout=busy_timeout)
        self._closed = False
        self._barriers: set[asyncio.Future[None]] = set()  # see run()
        self._queue: list[_Job] = []
        self._queue_lock = threading.Lock()
        # Used on the writer thread only.
        self._writer_connection: Connection | None = None
        self._writer_options: Any = None
        self._writer = WorkerThreads(1, "lovia-sqlite-writer")
        # An in-memory database is one connection: everything goes through the writer.
        self._readers = self._writer if memory else WorkerThreads(_READERS, "lovia-sqlite-reader")
        self._read = self._on_writer_connection if memory else self._on_pooled_connection

    def _on_pooled_connection(self, job: _Job) -> None:
        try:
            result = job.context.run(self._pooled_read, job.work)
        except BaseException as exc:
            job.settle(None, exc)
        else:
            job.settle(result, None)

    def _pooled_read(self, work: Work[T]) -> T:
        """Check out, read, check in (in the caller's context: a checkout is traced too)."""
        try:
            conn = self.engine.connect()
        except DBAPIError as exc:  # e.g. the connect pragmas met a locked file
            raise ConnectFailed(exc) from exc
        with conn:
            try:
                return transaction(conn, work, _bracket(write=False))
            except Failed:
                # As the writer does: a connection a driver error left in an
                # unknown state is not pooled again.
                conn.invalidate()
                raise

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
                raise ConnectFailed(exc) from exc
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

    def _on_writer_connection(self, job: _Job, *, write: bool = False) -> None:
        try:
            result = job.context.run(self._writer_transaction, job.work, write)
        except Failed as exc:
            # Whatever state the driver left it in, start afresh.
            self._drop_connection(failed=True)
            job.settle(None, exc)
        except BaseException as exc:  # the work's own error: the transaction rolled back
            job.settle(None, exc)
        else:
            job.settle(result, None)

    def _writer_transaction(self, work: Work[T], write: bool) -> T:
        return transaction(self._connection(), work, _bracket(write=write))

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
            self._on_writer_connection(batch[0], write=True)
        elif batch:
            try:
                _run_batch(self._connection(), batch)
            except BaseException as exc:  # nothing of the batch committed
                self._drop_connection(failed=isinstance(exc, Failed))
                for job in batch:
                    job.settle(None, exc)

    async def run(self, work: Work[T], *, write: bool, single_statement: bool = False) -> T:
        # single_statement is ignored: BEGIN and COMMIT cost SQLite next to nothing.
        job = _Job(work, asyncio.get_running_loop())
        if write:
            with self._queue_lock:
                self._queue.append(job)
            self._writer.put(self._write_batch)
        else:
            self._readers.put(lambda: self._read(job))
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
        except (Failed, ConnectFailed) as failed:
            error = failed.translated(display_url(self.url), hide=self.hide_parameters)
            raise error from failed.error
        return result

    async def close_loop(self) -> None:
        """Wait for the writes already handed to the writer thread (it runs them in order)."""
        if not self._closed:
            reached = _Job(lambda _conn: None, asyncio.get_running_loop())
            self._writer.put(lambda: reached.settle(None, None))
            await reached.future

    async def close(self) -> None:
        self._closed = True

        def shut() -> None:
            self._writer.shutdown()
            self._readers.shutdown()
            self._drop_connection()  # the writer thread is gone: nothing else uses it
            self.engine.dispose()

        await asyncio.to_thread(shut)
