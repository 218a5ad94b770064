"""``Database``: engine ownership, SQLite settings, typed errors, all-or-nothing writes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from backends import Backend
from helpers import a_run, on_first_statement
from lovia_store import (
    ConflictError,
    Database,
    MissingDriverError,
    SQLiteSession,
    SQLSession,
    StoreBusyError,
    StoreUnavailableError,
    UserError,
)
from lovia_store.db.tables import schema_versions


async def pragma(db: Database, name: str) -> object:
    def work(conn: Connection) -> object:
        return (conn.execute(text(f"PRAGMA {name}"))).scalar()

    return await db.read(work)


async def test_sqlite_settings(tmp_path: Path) -> None:
    async with Database(tmp_path / "plain.sqlite3") as plain:
        assert await pragma(plain, "journal_mode") == "delete"
        assert await pragma(plain, "foreign_keys") == 1
        assert await pragma(plain, "synchronous") == 2  # FULL
    async with Database(tmp_path / "wal.sqlite3", wal=True, busy_timeout=2.5) as wal:
        assert await pragma(wal, "journal_mode") == "wal"
        assert await pragma(wal, "synchronous") == 2  # FULL: durable across power loss
        assert await pragma(wal, "busy_timeout") == 2500
    async with Database(tmp_path / "fast.sqlite3", wal=True, synchronous="normal") as fast:
        assert await pragma(fast, "synchronous") == 1  # NORMAL


async def test_accepts_path_url_memory_and_engine(tmp_path: Path) -> None:
    targets = [
        tmp_path / "a.sqlite3",
        str(tmp_path / "b.sqlite3"),
        f"sqlite+aiosqlite:///{tmp_path / 'c.sqlite3'}",
        ":memory:",
    ]
    for target in targets:
        async with SQLSession(target) as store:
            await store.append("s", a_run("1"), run_id="r1")
            assert await store.load("s") == a_run("1")


async def test_memory_database_is_shared_by_its_stores() -> None:
    async with Database(":memory:") as db:
        await SQLSession(db).append("s", a_run("1"), run_id="r1")
        await asyncio.gather(*(SQLSession(db).load("s") for _ in range(10)))
        assert await SQLSession(db).load("s") == a_run("1")


async def test_closing_a_store_leaves_a_callers_engine_usable(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'host.sqlite3'}")
    async with SQLSession(engine) as store:
        await store.append("s", a_run("1"), run_id="r1")
    async with Database(engine) as db:
        assert db.url.endswith("host.sqlite3")
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM lovia_messages"))).scalar() == 4
    await engine.dispose()


async def test_a_store_on_a_shared_database_does_not_close_it(tmp_path: Path) -> None:
    db = Database(tmp_path / "shared.sqlite3")
    async with SQLSession(db) as first:
        await first.append("s", a_run("1"), run_id="r1")
    async with SQLSession(db) as second:
        assert await second.load("s") == a_run("1")
    await db.close()
    with pytest.raises(UserError, match="closed"):
        await SQLSession(db).load("s")


def test_bad_targets_and_options(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'x.sqlite3'}")
    with pytest.raises(UserError, match="engine"):
        Database(engine, wal=True)
    with pytest.raises(UserError, match="URL, a path or an AsyncEngine"):
        Database(42)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="wal"):
        SQLiteSession(Database(tmp_path / "y.sqlite3"), wal=True)  # type: ignore[arg-type]
    with pytest.raises(MissingDriverError, match="pip install") as caught:
        Database("mysql+aiomysql://u:p@localhost/db")
    assert isinstance(caught.value, ImportError)


def test_read_replicas_are_checked_before_anything_opens(tmp_path: Path) -> None:
    primary = "postgresql://app@db1.internal/app"
    with pytest.raises(UserError, match="PostgreSQL hot standbys, not to sqlite"):
        Database(tmp_path / "x.sqlite3", read_replicas=[primary])
    with pytest.raises(UserError, match="a list of URLs"):
        Database(primary, read_replicas=primary)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="max_replica_lag"):
        Database(primary, read_replicas=[primary], max_replica_lag=-1)
    with pytest.raises(UserError, match="a read replica of PostgreSQL is PostgreSQL"):
        Database(primary, read_replicas=["mysql://app@db2.internal/app"])
    with pytest.raises(UserError, match="not int"):
        Database(primary, read_replicas=[5])  # type: ignore[list-item]


def test_password_is_hidden() -> None:
    db = Database("postgresql://alice:hunter2@db.example/app")
    assert "hunter2" not in db.url and "alice" in db.url
    assert db.url.startswith("postgresql+asyncpg://")


async def test_integrity_errors_become_conflicts(tmp_path: Path) -> None:
    async with Database(tmp_path / "c.sqlite3") as db:

        def duplicate(conn: Connection) -> None:
            conn.execute(schema_versions.insert().values(store="session", version=1))

        with pytest.raises(ConflictError) as caught:
            await db.write(duplicate)
        assert isinstance(caught.value.__cause__, IntegrityError)


async def test_a_locked_file_gives_a_retry_safe_busy_error_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.sqlite3"
    async with SQLiteSession(path) as store:
        await store.append("s", a_run("0"), run_id="r0")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        async with Database(path, busy_timeout=0.05) as db:
            with pytest.raises(StoreBusyError) as caught:
                await SQLSession(db).append("s", a_run("1"), run_id="r1")
            assert caught.value.retry_safe is True
            assert "locked" in str(caught.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    async with SQLiteSession(path) as store:
        assert [s.run_id for s in await store.segments("s")] == ["r0"]


async def test_a_busy_lock_released_in_time_is_waited_out_transparently(tmp_path: Path) -> None:
    path = tmp_path / "briefly-locked.sqlite3"
    async with Database(path, busy_timeout=60) as db:  # a bound on a hang
        await SQLSession(db).append("s", a_run("0"), run_id="r0")  # connected, schema checked
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN EXCLUSIVE")
        # Released once the append has sent its BEGIN IMMEDIATE, which waits for it.
        with on_first_statement(db, lambda: (other.execute("ROLLBACK"), other.close())):
            await SQLSession(db).append("s", a_run("1"), run_id="r1")
        assert await SQLSession(db).load("s") == a_run("0") + a_run("1")


async def test_a_cancelled_append_is_all_or_nothing_and_retry_is_a_no_op(
    sql_backend: Backend,
) -> None:
    async with sql_backend.session() as store:
        await store.load("warm-up")
        for attempt in range(30):
            run_id = f"r{attempt}"
            entries = a_run(str(attempt))
            task = asyncio.create_task(store.append("s", entries, run_id=run_id))
            for _ in range(attempt % 6):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await store.append("s", entries, run_id=run_id)  # the retry
            segments = await store.segments("s")
            assert segments[-1].run_id == run_id and segments[-1].entries == entries
        assert len(await store.segments("s")) == 30
        assert len(await store.load("s")) == 120


async def test_a_second_event_loop_gets_its_own_connections(sql_backend: Backend) -> None:
    """A worker thread with its own loop uses the same store without crossing loops."""
    store = sql_backend.session()
    assert isinstance(store, SQLSession)
    await store.append("s", a_run("main"), run_id="main")

    def in_thread() -> int:
        async def work() -> int:
            await store.append("s", a_run("thread"), run_id="thread")
            count = len(await store.load("s"))
            await store.database.dispose_loop()
            return count

        return asyncio.run(work())

    assert await asyncio.to_thread(in_thread) == 8
    assert [s.run_id for s in await store.segments("s")] == ["main", "thread"]
    await store.close()


_ONE_LOOP_AFTER_ANOTHER = """
import asyncio, sys
from lovia_store import Database, SQLSession
from helpers import a_run
db = Database(sys.argv[1])
for n in range(3):  # each asyncio.run ends its loop without dispose_loop()
    asyncio.run(SQLSession(db).append("loops", a_run(str(n)), run_id=f"r{n}"))
async def last() -> None:
    print(len(await SQLSession(db).load("loops")))
    await db.close()
asyncio.run(last())
"""


async def test_one_asyncio_run_after_another_closes_cleanly(server_backend: Backend) -> None:
    """A script that calls ``asyncio.run`` per operation: each loop gets its own
    connections, those of ended loops are let go, and closing prints nothing."""
    assert server_backend.target is not None
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _ONE_LOOP_AFTER_ANOTHER,
        server_backend.target,
        cwd=Path(__file__).parent,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), timeout=120)
    assert err.decode() == "" and child.returncode == 0
    assert out.decode().split() == ["12"]


async def _drop_other_connections(url: str) -> int:
    """Have the server close every connection to this database but the caller's."""
    killer = Database(url)

    def kill(conn: Connection) -> int:
        if conn.dialect.name == "postgresql":
            query = (
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return int(conn.execute(text(query)).scalar_one())
        query = (
            "SELECT id FROM information_schema.processlist "
            "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
        ids = conn.execute(text(query)).scalars().all()
        for connection_id in ids:
            conn.execute(text(f"KILL {int(connection_id)}"))
        return len(ids)

    try:
        return await killer.read_unchecked(kill)
    finally:
        await killer.close()


async def test_connections_the_server_dropped_are_replaced(server_backend: Backend) -> None:
    """No pre-ping by default: a pooled connection the server closed fails before
    anything is sent for commit, and the call is retried on a fresh connection."""
    assert server_backend.target is not None
    db = Database(server_backend.target, pool_size=3, max_overflow=0)
    store = SQLSession(db)
    try:
        await asyncio.gather(*(store.append(f"s{i}", a_run(f"r{i}")) for i in range(3)))
        assert await _drop_other_connections(server_backend.target) >= 1
        assert len(await store.load("s0")) == 4
        await store.append("s1", a_run("again"), run_id="again")
        assert [len(await store.load(f"s{i}")) for i in range(3)] == [4, 8, 4]
    finally:
        await db.close()


def test_prepared_statements_follow_the_schema_translate_map() -> None:
    """Hot statements are compiled once, but still land in the schema an engine's
    ``schema_translate_map`` names (how tables are placed in a named schema)."""
    from sqlalchemy import bindparam, create_engine, event

    from lovia_store.db.prepared import Prepared

    statement = Prepared(
        schema_versions.select().where(schema_versions.c.store == bindparam("store"))
    )
    engine = create_engine("sqlite://")
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        seen.append(sql)

    with engine.connect() as conn:
        conn.execute(text("CREATE TABLE lovia_schema (store TEXT, version INTEGER)"))
        conn.execute(text("INSERT INTO lovia_schema VALUES ('s', 1)"))
        assert statement.execute(conn, {"store": "s"}).all() == [("s", 1)]
        placed = conn.execution_options(schema_translate_map={None: "main"})
        assert statement.execute(placed, {"store": "s"}).all() == [("s", 1)]
    assert "FROM lovia_schema" in seen[-2] and "FROM main.lovia_schema" in seen[-1]
    engine.dispose()


def test_prepared_statements_on_the_driver_cursor() -> None:
    """On the SQLite engine lovia-store makes, hot statements run on the driver's
    cursor: the same results, and driver errors still arrive as SQLAlchemy's."""
    from sqlalchemy import bindparam, create_engine
    from sqlalchemy.exc import NoResultFound

    from lovia_store.db.prepared import DRIVER_CURSOR, Prepared

    insert = Prepared(
        schema_versions.insert().values(store=bindparam("store"), version=bindparam("version"))
    )
    select_one = Prepared(
        schema_versions.select().where(schema_versions.c.store == bindparam("store"))
    )
    engine = create_engine("sqlite://", execution_options={DRIVER_CURSOR: True})
    with engine.connect() as conn:
        conn.execute(text("CREATE TABLE lovia_schema (store TEXT PRIMARY KEY, version INTEGER)"))
        rows = [{"store": "a"}, {"store": "b"}]
        assert insert.execute(conn, {"version": 1}, rows).rowcount == 2
        assert tuple(select_one.execute(conn, {"store": "a"}).one()) == ("a", 1)
        assert select_one.execute(conn, {"store": "b"}).scalar_one() == "b"
        assert select_one.execute(conn, {"store": "z"}).first() is None
        with pytest.raises(NoResultFound):
            select_one.execute(conn, {"store": "z"}).one()
        with pytest.raises(IntegrityError) as caught:
            insert.execute(conn, {"store": "a", "version": 2})
        assert isinstance(caught.value.orig, sqlite3.IntegrityError)
    engine.dispose()


@pytest.mark.parametrize("driver_cursor", [True, False])
def test_prepared_statements_take_the_values_the_statement_gives(driver_cursor: bool) -> None:
    """A value written into the statement (``limit(1)``, a literal to compare with)
    is bound as compiled; rows read whole or in batches. A statement
    whose SQL depends on its values (an expanding ``IN``) cannot be prepared."""
    from sqlalchemy import bindparam, create_engine, select

    from lovia_store.db.prepared import DRIVER_CURSOR, Prepared

    versions = schema_versions.c
    newest = Prepared(
        select(versions.store)
        .where(versions.version > bindparam("above"), versions.store != "skip")
        .order_by(versions.version.desc())
        .limit(2)
    )
    engine = create_engine("sqlite://", execution_options={DRIVER_CURSOR: driver_cursor})
    with engine.connect() as conn:
        conn.execute(text("CREATE TABLE lovia_schema (store TEXT PRIMARY KEY, version INTEGER)"))
        conn.execute(text("INSERT INTO lovia_schema VALUES ('a', 1), ('b', 2), ('c', 3)"))
        conn.execute(text("INSERT INTO lovia_schema VALUES ('skip', 4)"))
        assert [tuple(row) for row in newest.execute(conn, {"above": 0}).all()] == [("c",), ("b",)]
        rows = newest.execute(conn, {"above": 1})
        assert [tuple(row) for row in rows.fetchmany(1)] == [("c",)]
        assert [tuple(row) for row in rows.fetchmany(5)] == [("b",)]
        wide = select(versions.store).where(versions.store.in_(bindparam("s", expanding=True)))
        with pytest.raises(TypeError, match="cannot be prepared"):  # refused when built
            Prepared(wide)
    engine.dispose()


def test_a_prepared_statements_own_value_is_converted_like_a_parameter() -> None:
    """A value written into the statement goes through its type's bind processor,
    as a parameter's does: stored as Core would store it, read back the same."""
    from datetime import UTC, datetime, timedelta, timezone

    from sqlalchemy import Column, MetaData, Table, create_engine, literal, select

    from lovia_store.db.prepared import DRIVER_CURSOR, Prepared
    from lovia_store.db.types import UTCDateTime

    stamps = Table("stamps", MetaData(), Column("at", UTCDateTime()))
    noon_in_paris = datetime(2026, 12, 1, 13, 0, tzinfo=timezone(timedelta(hours=1)))
    insert = Prepared(stamps.insert().values(at=literal(noon_in_paris, UTCDateTime())))
    engine = create_engine("sqlite://", execution_options={DRIVER_CURSOR: True})
    with engine.connect() as conn:
        stamps.create(conn)
        insert.execute(conn, {})
        conn.execute(stamps.insert().values(at=noon_in_paris))
        stored = conn.execute(text("SELECT at FROM stamps")).scalars().all()
        assert stored[0] == stored[1]  # the same text Core writes
        assert conn.execute(select(stamps.c.at)).scalars().first() == datetime(
            2026, 12, 1, 12, 0, tzinfo=UTC
        )
    engine.dispose()


@pytest.mark.parametrize("target", ["file", ":memory:"])
async def test_a_job_that_leaves_its_connection_odd_does_not_break_the_next(
    tmp_path: Path, target: str
) -> None:
    """The SQLite writer keeps one connection between jobs; a job that closes it,
    commits half-way or changes its options still leaves the next job a clean one."""
    db = Database(tmp_path / "odd.db" if target == "file" else ":memory:")
    store = SQLSession(db)
    await store.load("warm-up")

    def closes(conn: Connection) -> None:
        conn.close()

    def commits_half_way(conn: Connection) -> None:
        conn.execute(text("INSERT INTO lovia_schema (store, version) VALUES ('early', 1)"))
        conn.commit()
        conn.execute(text("INSERT INTO lovia_schema (store, version) VALUES ('late', 1)"))

    def sets_options(conn: Connection) -> None:
        conn.execution_options(schema_translate_map={None: "elsewhere"})

    for index, odd in enumerate((closes, commits_half_way, sets_options)):
        with contextlib.suppress(Exception):
            await db.write(odd)
        await store.append("s", a_run(str(index)), run_id=f"r{index}")
    assert [segment.run_id for segment in await store.segments("s")] == ["r0", "r1", "r2"]
    await db.close()


async def test_a_reader_connection_that_met_a_driver_error_is_not_pooled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's BEGIN runs on the driver cursor, outside SQLAlchemy's disconnect
    check: after a driver error there, the connection is discarded, not reused."""
    from sqlalchemy import event

    from lovia_store.db import sqlite_executor
    from lovia_store.db.prepared import Prepared

    async with Database(tmp_path / "reader.db") as db:
        store = SQLSession(db)
        await store.load("warm-up")
        opened: list[object] = []
        event.listen(db.engine, "connect", lambda connection, record: opened.append(connection))
        monkeypatch.setattr(sqlite_executor, "_BEGIN", Prepared(text("BEGIN NONSENSE")))
        with pytest.raises(StoreUnavailableError):
            await store.load("s")
        monkeypatch.undo()
        assert await store.load("s") == []
        assert len(opened) == 1  # the failed connection was replaced, once


async def test_driver_errors_hide_parameters_when_asked(tmp_path: Path) -> None:
    from sqlalchemy import bindparam

    from lovia_store.db.prepared import Prepared

    insert = Prepared(
        schema_versions.insert().values(store=bindparam("store"), version=bindparam("version"))
    )
    async with Database(tmp_path / "hidden.db", hide_parameters=True) as db:

        def duplicate(conn: Connection) -> None:
            insert.execute(conn, {"store": "secret-store-name", "version": 1})
            insert.execute(conn, {"store": "secret-store-name", "version": 1})

        with pytest.raises(ConflictError) as caught:
            await db.write(duplicate)
        assert isinstance(caught.value.__cause__, IntegrityError)
        assert "secret-store-name" not in str(caught.value.__cause__)
        assert "secret-store-name" not in str(caught.value)


async def test_echo_shows_every_statement_the_writer_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``echo=True`` turns the driver-cursor path off, so the hot inserts are logged too."""
    from lovia_store.db.prepared import DRIVER_CURSOR

    async with Database(tmp_path / "quiet.db") as quiet:
        assert quiet.engine.get_execution_options()[DRIVER_CURSOR] is True
    async with Database(tmp_path / "echo.db", echo=True) as loud:
        assert loud.engine.get_execution_options()[DRIVER_CURSOR] is False
        store = SQLSession(loud)
        await store.load("warm-up")
        caplog.clear()
        with caplog.at_level("INFO", logger="sqlalchemy.engine"):
            await store.append("s", a_run("1"), run_id="r1")
        logged = [record.getMessage() for record in caplog.records]
        assert "BEGIN IMMEDIATE" in logged
        assert any("INSERT INTO lovia_messages" in message for message in logged)
        assert len(await store.load("s")) == len(a_run("1"))


async def test_queued_sqlite_writes_share_a_commit_and_fail_alone(tmp_path: Path) -> None:
    """Writes that queue while the writer thread is busy commit together (one COMMIT
    for several), yet each is all-or-nothing on its own: one that raises is rolled
    back alone, and a duplicate run id sees the run stored earlier in the batch."""
    from sqlalchemy import event

    db = Database(tmp_path / "group.db")
    store = SQLSession(db)
    await store.load("warm-up")
    commits: list[int] = []
    event.listen(db.engine, "commit", lambda _conn: commits.append(1))

    def failing(conn: Connection) -> None:
        conn.execute(text("INSERT INTO lovia_schema (store, version) VALUES ('stray', 1)"))
        raise RuntimeError("boom")

    writes = [store.append(f"s{i}", a_run(str(i)), run_id=f"r{i}") for i in range(12)]
    writes.insert(5, db.write(failing))
    writes += [store.append("s0", a_run("0"), run_id="r0") for _ in range(3)]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    assert isinstance(outcomes[5], RuntimeError)
    expected = [f"r{i}" for i in range(12)] + ["r0"] * 3
    assert [outcome for i, outcome in enumerate(outcomes) if i != 5] == expected
    assert len(commits) < len(writes)  # some writes shared a COMMIT
    for i in range(12):
        assert [s.run_id for s in await store.segments(f"s{i}")] == [f"r{i}"]

    def strays(conn: Connection) -> int:
        query = text("SELECT count(*) FROM lovia_schema WHERE store = 'stray'")
        return int(conn.execute(query).scalar_one())

    assert await db.read(strays) == 0
    await db.close()


async def test_a_database_used_after_fork_refuses_at_once_naming_the_fix(tmp_path: Path) -> None:
    """The worker threads (and any server connections) stay in the parent: the child's
    call is a UserError at once, never a hang; the parent's Database keeps working."""
    async with Database(tmp_path / "forked.sqlite3") as db:
        store = SQLSession(db)
        await store.append("s", a_run("1"))
        child = os.fork()
        if child == 0:  # the child: report through the exit code only
            code = 1
            try:
                asyncio.run(SQLSession(db).append("s", a_run("2")))
            except UserError as exc:
                code = 0 if "Open a new Database in this process" in str(exc) else 2
            finally:
                os._exit(code)
        status = await asyncio.to_thread(_exit_status, child)
        assert status == 0, "the child got no UserError naming the fix"
        await store.append("s", a_run("3"))
        assert len(await store.segments("s")) == 2


def _exit_status(child: int) -> int:
    for _ in range(600):  # a bound on a hang, not a timing
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    pytest.fail("the forked child hung")
