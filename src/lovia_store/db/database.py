"""``Database``: the one owner of one engine, shared by every store built on it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import ArgumentError
from sqlalchemy.sql import Executable

from ..errors import (
    LoviaStoreError,
    MissingDriverError,
    OutcomeUnknownError,
    StoreBusyError,
    TransactionPoolerError,
    UserError,
)
from ..validation import DEFAULT_TENANT, check_tenant
from .contents import use_codec
from .documents import DEFAULT_THRESHOLD, DocumentCodec
from .encryption import KeySource
from .errors import read_retry_safe, worth_retrying
from .executors import Executor, Work, is_async_engine
from .prepared import Prepared, prepare_dialect
from .private_files import keep_sqlite_files_private
from .replicas import Replicas
from .sqlite_executor import SQLiteThreadExecutor
from .urls import (
    display_url,
    mask_secrets,
    prepare_sqlite_folder,
    sqlite_file,
    take_pooler,
    to_url,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Database", "Work", "as_database"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

_RETRIES = 6
# The Databases (by id) whose every read may come from a replica here: see stale_reads().
_STALE_READS: ContextVar[frozenset[int]] = ContextVar(
    "lovia_store_stale_reads", default=frozenset()
)
# SQLite takes its busy timeout as a C int of milliseconds.
_MAX_BUSY_TIMEOUT = 2**31 // 1000 - 1
# Each server driver is an extra of ours (pyproject.toml); another driver is its own package.
_EXTRAS = {
    "asyncpg": "'lovia-store[postgres]'",
    "psycopg": "'lovia-store[psycopg]'",
    "asyncmy": "'lovia-store[mysql]'",
}


class Database:
    """One engine, one schema check, shared by every store built on it.

    ``target`` is a SQLAlchemy URL, a SQLite path (``":memory:"`` too), or an
    ``AsyncEngine`` the caller owns. ``close()`` disposes only an engine this
    object created. ``verify_only=True`` never migrates: an out-of-date database
    raises ``SchemaNotCurrentError`` (for deployments that migrate as a step).
    On SQLite, ``wal=True`` selects WAL journaling (one writer, readers never
    blocked; for files several processes or stores share). ``synchronous`` is
    ``"full"`` by default, so a commit survives power loss in either journal
    mode; ``"normal"`` trades the last commits before a power loss (never a
    process crash, never corruption) for speed. ``busy_timeout`` is the longest
    (seconds) a call waits for another process's lock, retries included, before
    it fails with ``StoreBusyError`` (a migration waits for another process's
    migration longer: up to 10 minutes); on a server, how long a call is run again
    after the server rolled it back for contention (a serialization failure, a
    deadlock), and how long a keyed write whose COMMIT was lost keeps reconnecting
    to settle it (a failover takes seconds). On PostgreSQL, ``schema`` places our tables (and
    our version table) in that schema instead of the connection's default one,
    for hosts that keep each component in its own namespace.

    ``legacy_backup`` applies when a SQLite file that lovia 0.9 or zett-agent
    wrote is converted (on first use, or by ``upgrade``): the conversion drops
    their tables, so a consistent copy of the file is written first, beside it
    (``True``, the default) or into the folder given, named
    ``<stem>.before-lovia-store-<UTC time><suffix>``; ``False`` skips it, for
    callers who keep backups of their own.

    ``pooler="transaction"`` (or ``?lovia_pooler=transaction`` in the URL) says a
    transaction pooler stands between us and PostgreSQL (PgBouncer in transaction
    mode, Supavisor, RDS Proxy): no statement is prepared by name on the server nor
    run outside a transaction, so no statement depends on a server connection the
    pooler may have handed to another client (docs/deploying.md).

    ``read_replicas`` (PostgreSQL hot standbys: URLs, or engines the caller owns)
    take the reads that may be stale: listing and paging the Raw Log's sessions and
    messages, ``database_stats``, ``export`` and ``copy_database``'s reading. A replica more than
    ``max_replica_lag`` seconds behind, or unreachable, is passed over, and when
    none will do the read goes to the primary. Every other read (an agent's
    history, a run's checkpoint) stays on the primary unless made inside
    ``stale_reads()``.

    ``tenant`` is the tenant of every store built on this Database without one
    of its own (``""``, the default tenant, when not given): see docs/tenants.md.

    ``compression`` (on by default): a stored document at least
    ``compression_threshold`` characters long is compressed, and its strings that
    long (a tool output) are stored once per tenant however many documents hold
    them (docs/documents.md). ``False`` writes plain JSON text, as before; every
    database reads either way. ``encryption_keys`` (the ``encryption`` extra)
    encrypts every stored document (AES-256-GCM): a list of keys, the first of
    which encrypts and each of which decrypts (so keys rotate: ``lovia-store
    rekey``), or a function from a tenant to its list.

    ``row_level_security=True`` (PostgreSQL only) is for an application role held
    to one tenant by the policies ``enable_row_level_security`` creates: every
    transaction made for a tenant first sets ``lovia.tenant`` for itself alone
    (``set_config(..., true)``, which a transaction pooler keeps), and the
    statements that would run without a transaction run inside one. Work that
    spans tenants sets nothing and, under the policies, sees nothing: it is the
    tables' owner's (docs/tenants.md).
    """

    def __init__(
        self,
        target: AsyncEngine | str | os.PathLike[str],
        *,
        wal: bool = False,
        echo: bool = False,
        verify_only: bool = False,
        synchronous: Literal["full", "normal"] = "full",
        busy_timeout: float = 5.0,
        schema: str | None = None,
        legacy_backup: bool | str | os.PathLike[str] = True,
        pooler: Literal["transaction"] | None = None,
        read_replicas: Sequence[AsyncEngine | str] = (),
        max_replica_lag: float = 5.0,
        tenant: str = DEFAULT_TENANT,
        row_level_security: bool = False,
        compression: bool = True,
        compression_threshold: int = DEFAULT_THRESHOLD,
        encryption_keys: KeySource | None = None,
        **engine_options: Any,
    ) -> None:
        self.tenant = check_tenant(tenant)
        """The tenant of the stores built on this Database without their own."""
        self.codec = DocumentCodec(
            compression=compression,
            threshold=compression_threshold,
            encryption_keys=encryption_keys,
        )
        """How documents are stored (``lovia_store.db.documents``)."""
        if not isinstance(row_level_security, bool):
            raise UserError(f"row_level_security is True or False, not {row_level_security!r}")
        self.row_level_security = row_level_security
        """Whether each tenant's transaction sets ``lovia.tenant`` (docs/tenants.md)."""
        if synchronous not in ("full", "normal"):
            raise UserError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise UserError(f"busy_timeout is a number of seconds, not {busy_timeout!r}")
        if not 0 <= busy_timeout <= _MAX_BUSY_TIMEOUT:
            raise UserError(
                f"busy_timeout is between 0 and {_MAX_BUSY_TIMEOUT:,} seconds, not {busy_timeout!r}"
            )
        if not isinstance(legacy_backup, bool | str | os.PathLike):
            raise UserError(
                f"legacy_backup is True, False or a folder, not {type(legacy_backup).__name__}"
            )
        self.legacy_backup = legacy_backup
        self.busy_timeout = float(busy_timeout)
        self.verify_only = verify_only
        self.wal = wal
        self.schema = schema
        self._executor: Executor
        if is_async_engine(target):
            from .async_executor import AsyncExecutor, in_schema

            if engine_options or echo or wal:
                raise UserError(
                    "wal, echo and engine options apply only to an engine lovia-store creates; "
                    "configure your own engine yourself"
                )
            _check_schema(schema, target.dialect.name)
            _check_row_level_security(row_level_security, target.dialect.name)
            pooled = take_pooler(target.url, pooler)[1] is not None
            placed = in_schema(target, schema)
            self._executor = AsyncExecutor(
                placed, owned=False, recreate=lambda: placed, pooled=pooled
            )
        elif isinstance(target, str | os.PathLike):
            url, mode = take_pooler(to_url(target), pooler)
            _check_schema(schema, url.get_backend_name())
            _check_row_level_security(row_level_security, url.get_backend_name())
            sqlite = {"wal": wal, "synchronous": synchronous, "busy_timeout": busy_timeout}
            try:
                self._executor = self._open(
                    url, sqlite, echo, verify_only, engine_options, schema, mode
                )
            except (ArgumentError, TypeError) as exc:  # engine options SQLAlchemy refused
                raise UserError(f"{display_url(url)}: {mask_secrets(str(exc))}") from exc
        else:
            raise UserError(
                f"a Database target is a URL, a path or an AsyncEngine, not {type(target).__name__}"
            )
        self.url = display_url(self._executor.url)
        self.dialect = self._executor.dialect
        self._replicas = self._open_replicas(
            read_replicas, max_replica_lag, pooler, schema, engine_options
        )
        self.is_sqlite = self.dialect == "sqlite"
        self._path = sqlite_file(self._executor.url) if self.is_sqlite else None
        self._schema_ready = False
        self._schema_checks: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}
        self._closed = False
        self._pid = os.getpid()

    @staticmethod
    def _open(
        url: URL,
        sqlite: dict[str, Any],
        echo: bool,
        verify_only: bool,
        options: dict[str, Any],
        schema: str | None = None,
        pooler: str | None = None,
    ) -> Executor:
        backend = url.get_backend_name()
        if backend == "sqlite":
            path = sqlite_file(url)
            if path is not None:  # a check must not leave folders behind
                prepare_sqlite_folder(path, create=not verify_only)
            executor = SQLiteThreadExecutor(url, echo=echo, options=options, **sqlite)
            if path is not None:  # owner-only files (docs/guarantees.md)
                keep_sqlite_files_private(executor.engine, url, path)
            return executor
        # Only a server (or a caller's AsyncEngine) loads SQLAlchemy's asyncio extension.
        from .async_executor import AsyncExecutor, in_schema, make_async_engine

        def create() -> AsyncEngine:
            engine = make_async_engine(url, echo=echo, options=options, pooler=pooler)
            return in_schema(engine, schema)

        try:
            engine = create()
        except ModuleNotFoundError as exc:
            driver = url.get_driver_name()
            raise MissingDriverError(
                f"the {driver!r} driver for {backend} is not installed: "
                f"pip install {_EXTRAS.get(driver, driver)}"
            ) from exc
        return AsyncExecutor(engine, owned=True, recreate=create, pooled=pooler is not None)

    def _open_replicas(
        self,
        targets: Sequence[AsyncEngine | str],
        max_lag: float,
        pooler: str | None,
        schema: str | None,
        options: dict[str, Any],
    ) -> Replicas | None:
        if isinstance(targets, str) or not isinstance(targets, Sequence):
            raise UserError("read_replicas is a list of URLs or engines")
        if isinstance(max_lag, bool) or not isinstance(max_lag, int | float) or max_lag < 0:
            raise UserError(f"max_replica_lag is a number of seconds >= 0, not {max_lag!r}")
        if not targets:
            return None
        if self.dialect != "postgresql":
            raise UserError(
                f"read_replicas applies to PostgreSQL hot standbys, not to {self.dialect}"
            )
        executors: list[Executor] = []
        for target in targets:
            if is_async_engine(target):
                from .async_executor import AsyncExecutor, in_schema

                placed = in_schema(target, schema)
                same = functools.partial(_same, placed)
                executors.append(AsyncExecutor(placed, owned=False, recreate=same))
                continue
            if not isinstance(target, str):
                what = type(target).__name__
                raise UserError(f"a read replica is a URL or an engine, not {what}")
            url, mode = take_pooler(to_url(target), pooler)
            if url.get_backend_name() != "postgresql":
                raise UserError(f"{display_url(url)}: a read replica of PostgreSQL is PostgreSQL")
            executors.append(self._open(url, {}, False, True, options, schema, mode))
        return Replicas(executors, float(max_lag))

    @contextlib.contextmanager
    def stale_reads(self) -> Iterator[None]:
        """Every read inside may come from a read replica (up to ``max_replica_lag``
        seconds stale): for a dashboard that loads histories it only shows."""
        token = _STALE_READS.set(_STALE_READS.get() | {id(self)})
        try:
            yield
        finally:
            _STALE_READS.reset(token)

    @property
    def engine(self) -> Any:
        """The SQLAlchemy engine underneath (an ``AsyncEngine``, or for SQLite files
        lovia-store opens, the pysqlite ``Engine`` its worker threads use)."""
        return self._executor.engine

    @property
    def sync_engine(self) -> Engine:
        """The synchronous ``Engine`` that SQLAlchemy's events and instrumentations
        attach to (``engine`` itself on a SQLite file lovia-store opens, an
        ``AsyncEngine``'s ``sync_engine`` otherwise): see docs/observability.md."""
        engine = self._executor.engine
        return engine.sync_engine if is_async_engine(engine) else engine

    # -- schema ---------------------------------------------------------------

    async def ensure_schema(self) -> None:
        """Check (and unless ``verify_only``, migrate) the schema once per Database.

        Concurrent first calls on one event loop share one check, so a burst of
        first writes does not race its own migration.
        """
        if self._schema_ready:
            return
        from .schema import ensure_current

        loop = asyncio.get_running_loop()
        check = self._schema_checks.get(loop)
        if check is None:
            check = asyncio.ensure_future(ensure_current(self, verify_only=self.verify_only))
            self._schema_checks[loop] = check
        try:
            await asyncio.shield(check)
        finally:
            if check.done():
                self._schema_checks.pop(loop, None)
        prepare_dialect(self.sync_engine.dialect.name)  # connected: "mariadb" is known now
        self._schema_ready = True

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file this database is (None for a server or an in-memory database)."""
        return self._path

    def missing_file(self) -> bool:
        """A SQLite file that does not exist yet (a check must not create it)."""
        return self.sqlite_path is not None and not self.sqlite_path.exists()

    # -- transactions ---------------------------------------------------------

    async def read(self, work: Work[T], *, stale: bool = False, tenant: str | None = None) -> T:
        """Run ``work(connection)`` in one read transaction (a consistent snapshot).

        ``stale``: a read replica may answer (up to ``max_replica_lag`` behind).
        ``tenant``: the tenant the work reads for (a store's own), which row-level
        security (docs/tenants.md) holds the transaction to; None for work that
        spans tenants."""
        await self.ensure_schema()
        if self._replicas is not None and (stale or id(self) in _STALE_READS.get()):
            answered, result = await self._replicas.read(self._scoped(work, tenant))
            if answered:
                return result  # type: ignore[return-value]
        return await self._run(work, write=False, single_statement=False, tenant=tenant)

    async def write(
        self, work: Work[T], *, resolve: Work[T] | None = None, tenant: str | None = None
    ) -> T:
        """Run ``work(connection)`` in one write transaction: all of it commits or none.

        A cancelled caller never leaves a half-applied write: the transaction
        finishes or rolls back on its own, and a retry under the same key is
        then a no-op. Busy errors that provably happened before commit are
        retried a bounded number of times.

        ``resolve`` settles a lost COMMIT: a transaction that answers as ``work``
        would have (from what the first attempt stored) if it committed, and does
        ``work`` if it did not. It runs after reconnecting, for up to
        ``busy_timeout``; without it (or past that), the caller gets
        ``OutcomeUnknownError``. ``tenant`` as for ``read``.
        """
        await self.ensure_schema()
        return await self._run(
            work, write=True, single_statement=False, resolve=resolve, tenant=tenant
        )

    async def read_one(
        self,
        statement: Statement,
        params: Mapping[str, Any],
        *,
        first_column: bool = False,
        stale: bool = False,
        tenant: str | None = None,
    ) -> Sequence[Any]:
        """The rows of one statement, which sees one snapshot by itself: on
        PostgreSQL it runs without BEGIN and COMMIT (two round trips fewer).

        ``first_column``: the first value of each row instead, taken where the
        statement ran (SQLite's thread), so a long result reaches the caller as one
        list of values, not as thousands of row objects its garbage collector must
        walk while it decodes them. ``stale``: a read replica may answer.
        ``tenant`` as for ``read``."""
        await self.ensure_schema()
        work = _one(statement, params, first_column)
        if self._replicas is not None and (stale or id(self) in _STALE_READS.get()):
            answered, result = await self._replicas.read(self._scoped(work, tenant))
            if answered:
                return result  # type: ignore[return-value]
        return await self._run(work, write=False, single_statement=True, tenant=tenant)

    async def write_one(
        self, statement: Statement, params: Mapping[str, Any], *, tenant: str | None = None
    ) -> Sequence[Any]:
        """Run one statement that returns rows, atomic by itself, and return them.

        On PostgreSQL it runs without BEGIN and COMMIT. It must be idempotent:
        a connection lost mid-statement (or at COMMIT, behind a transaction
        pooler) is retried, and the first attempt may have committed. Taking a
        statement, not a work, is what keeps a second statement from running
        outside a transaction. ``tenant`` as for ``read``.
        """
        await self.ensure_schema()
        work = _one(statement, params)
        return await self._run(work, write=True, single_statement=True, resolve=work, tenant=tenant)

    async def read_unchecked(self, work: Work[T]) -> T:
        """``read`` without the schema check (the gate itself uses it)."""
        return await self._run(work, write=False, single_statement=False)

    async def write_unchecked(self, work: Work[T], *, lock_wait: float | None = None) -> T:
        """``write`` without the schema check (the gate itself uses it).

        ``lock_wait`` (seconds) replaces ``busy_timeout`` as the call's longest wait
        for another process's SQLite lock: a migration waits for another process's
        migration as long as the server backends' migration lock does.
        """
        return await self._run(work, write=True, single_statement=False, lock_wait=lock_wait)

    async def _run(
        self,
        work: Work[T],
        *,
        write: bool,
        single_statement: bool,
        lock_wait: float | None = None,
        resolve: Work[T] | None = None,
        tenant: str | None = None,
    ) -> T:
        """Run ``work`` on the executor, again after a short pause while it fails
        retry-safely.

        On SQLite, ``busy_timeout`` bounds the whole call: each attempt already
        waits in SQLite's busy handler, so a busy error is retried only while
        the call has waited less than that in all (SQLite also reports busy at
        once, without waiting, where waiting could deadlock: those are retried).
        A read that lost its connection is retried even when it was lost at
        COMMIT, which for a write leaves the outcome unknown: a read wrote nothing.
        On a server, a transaction the server rolled back for contention (a
        serialization failure or deadlock: PostgreSQL at SERIALIZABLE, a Galera
        certification failure) is run again, with jittered pauses, until
        ``busy_timeout`` has gone by in all. A write whose COMMIT was lost is
        settled by ``resolve`` (``_settle``) when the caller gave one.

        Under ``row_level_security``, ``work`` (and ``resolve``) for a tenant first
        set it, and always run in a transaction: the setting lives only as long as one.
        """
        if self._closed:
            raise UserError(f"{self.url}: this Database is closed")
        if os.getpid() != self._pid:
            raise UserError(
                f"{self.url}: this Database was opened in process {self._pid}, which this "
                "one was forked from; its connections and worker threads stayed there. "
                "Open a new Database in this process"
            )
        delay = 0.01
        started = time.monotonic()
        budget = self._executor.busy_wait
        if budget is not None and lock_wait is not None:
            budget = lock_wait
        attempts = 0
        work = self._scoped(work, tenant)
        resolve = None if resolve is None else self._scoped(resolve, tenant)
        if self.row_level_security and tenant is not None:
            single_statement = False
        while True:
            attempts += 1
            try:
                return await self._executor.run(
                    work, write=write, single_statement=single_statement
                )
            except OutcomeUnknownError as exc:
                if resolve is None:
                    raise
                return await self._settle(resolve, exc)
            except LoviaStoreError as exc:
                if not write:
                    read_retry_safe(exc)
                if not (getattr(exc, "retry_safe", False) and worth_retrying(exc)):
                    raise
                if budget is not None and isinstance(exc, StoreBusyError):
                    spent = time.monotonic() - started + delay > budget
                    if spent or (attempts >= _RETRIES and lock_wait is None):
                        raise
                elif isinstance(exc, StoreBusyError):  # a server's contention
                    if time.monotonic() - started + delay > self.busy_timeout:
                        raise
                    delay *= random.uniform(0.5, 1.5)  # writers that collided part ways
                elif attempts >= _RETRIES:
                    raise
                # Contention is routine (DEBUG); a connection that failed is news (INFO).
                logger.log(
                    logging.DEBUG if isinstance(exc, StoreBusyError) else logging.INFO,
                    "retrying after attempt %d: %s",
                    attempts,
                    exc,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _scoped(self, work: Work[T], tenant: str | None) -> Work[T]:
        """``work`` with this Database's codec on its connection (``contents.use_codec``),
        under ``row_level_security`` first setting the tenant the policies read for
        its transaction alone (``row_security.as_tenant``)."""
        work = functools.partial(_coded, work, self.codec)
        if not self.row_level_security or tenant is None:
            return work
        from .row_security import as_tenant  # only a Database held by the policies

        return as_tenant(work, tenant, self.url)

    async def _settle(self, resolve: Work[T], unknown: OutcomeUnknownError) -> T:
        """Run ``resolve`` after a lost COMMIT until it answers, for up to ``busy_timeout``.

        A failover or a restart takes seconds, so failures that ran nothing (no
        connection yet, a standby still read-only) are waited through, and so is
        ``resolve``'s own lost COMMIT: it is idempotent. What is never settled is
        the caller's ``unknown``, unchanged but for saying it was tried.
        """
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.05
        logger.info("settling a lost COMMIT: %s", unknown)
        while True:
            try:
                return await self._executor.run(resolve, write=True)
            except LoviaStoreError as exc:
                settles_later = isinstance(exc, OutcomeUnknownError) or (
                    getattr(exc, "retry_safe", False)
                    and not isinstance(exc, TransactionPoolerError)
                )
                if not settles_later:
                    raise
                if time.monotonic() + delay > deadline:
                    raise OutcomeUnknownError(
                        f"{unknown}; still unsettled after {self.busy_timeout:g} s "
                        f"(busy_timeout): {exc}"
                    ) from unknown
                logger.debug("settling: %s", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # -- lifetime -------------------------------------------------------------

    async def dispose_loop(self) -> None:
        """Release what the running event loop holds (call it before the loop stops)."""
        await self._executor.close_loop()
        if self._replicas is not None:
            await self._replicas.close_loop()

    async def close(self) -> None:
        """Finish in-flight writes, then dispose the engines this object created.

        A caller's engine is left as it was.
        """
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._pid:
            return  # a forked child's copy: what it would close belongs to the parent
        try:
            await self._executor.close()
        finally:
            if self._replicas is not None:
                await self._replicas.close()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        placed = f", schema={self.schema!r}" if self.schema is not None else ""
        return f"Database({self.url!r}{placed})"


def _coded(work: Work[T], codec: DocumentCodec, conn: Connection) -> T:
    use_codec(conn, codec)
    return work(conn)


def _same(engine: AsyncEngine) -> AsyncEngine:
    return engine


def _check_row_level_security(enabled: bool, backend: str) -> None:
    """Refuse ``row_level_security=True`` where there are no such policies."""
    if enabled and backend != "postgresql":
        raise UserError(
            f"row_level_security=True applies only to PostgreSQL, not to {backend} "
            "(its tables have no row-level security)"
        )


def _check_schema(schema: str | None, backend: str) -> None:
    """Refuse ``schema=`` where it has no meaning, before anything is opened."""
    if schema is None:
        return
    if not isinstance(schema, str) or not schema.strip():
        raise UserError(f"schema must be a non-empty name, not {schema!r}")
    if backend in ("mysql", "mariadb"):
        raise UserError(
            f"schema={schema!r}: on MySQL/MariaDB a schema is a database; "
            f"name it in the URL instead (mysql+asyncmy://host/{schema})"
        )
    if backend != "postgresql":
        raise UserError(
            f"schema={schema!r} applies only to PostgreSQL; a {backend} database "
            "has a single namespace (use another file or database instead)"
        )


def as_database(
    target: Database | AsyncEngine | str | os.PathLike[str], *, wal: bool = False
) -> tuple[Database, bool]:
    """The Database a store should use, and whether the store owns it."""
    if isinstance(target, Database):
        if wal:
            raise UserError("wal applies when the store opens the database itself")
        return target, False
    return Database(target, wal=wal), True


Statement = Prepared | Executable
"""What ``read_one`` and ``write_one`` run: a ``Prepared`` or a Core statement."""


def _one(
    statement: Statement, params: Mapping[str, Any], first_column: bool = False
) -> Work[Sequence[Any]]:
    def work(conn: Connection) -> Sequence[Any]:
        if isinstance(statement, Prepared):
            rows = statement.execute(conn, params).all()
        else:
            rows = conn.execute(statement, dict(params)).all()
        return [row[0] for row in rows] if first_column else rows

    return work
