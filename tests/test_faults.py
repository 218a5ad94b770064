"""The fault suite (issue 18), kept small for CI: real processes killed, real connections
terminated, a real full disk and a real read-only file system.

Asserted every time: no acknowledged write is lost, nothing is half-written (a run
is stored whole or not at all, a checkpoint's head agrees with its entries), and
every error is a ``LoviaStoreError`` with the right ``retry_safe``.

- kill -9 of a writer at random moments (tests/crash_child.py's ``loop`` writer), on
  SQLite in both journals, PostgreSQL and MariaDB. tests/test_crash_matrix.py kills at
  every run boundary instead; this kills anywhere, mid-statement included.
- connections terminated from an admin connection (``pg_terminate_backend``, MariaDB's
  ``KILL CONNECTION``) before a statement, and at COMMIT: a write's lost COMMIT is
  ``retry_safe=False`` (its outcome is unknown) and the run is whole or absent, unless
  the write is keyed (a run id, a checkpoint step, a lease, a keyed message), which
  settles it after reconnecting; a read's is retried (D15); one lost before COMMIT is
  retried by itself.
- SQLite: a file system that fills up, and one that turns read-only (a tmpfs where the
  tests may mount one, as root; otherwise ``PRAGMA max_page_count`` and ``chmod``).

``LOVIA_FAULT_SEED`` picks the random kill moments (printed on failure).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncmy
import pytest
from sqlalchemy import Connection, event, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.util import await_only

from backends import connect_pg_admin, fresh_server_database, migrated_server_database, server_url
from crash_child import LOOP_TEXT, loop_entries
from helpers import FULL_TIER, a_run, commit_lost
from lovia_store import (
    AssistantTextEntry,
    Database,
    LoviaStoreError,
    OutcomeUnknownError,
    RunHead,
    SQLCheckpointer,
    SQLiteSession,
    SQLSession,
    SQLSessionStorage,
    StoreUnavailableError,
    entry_to_dict,
)
from lovia_store.db.tables import sessions
from lovia_store.lifecycle.counters import counter_mismatches

CHILD = Path(__file__).with_name("crash_child.py")
SEED = int(os.environ.get("LOVIA_FAULT_SEED", "18"))
ROUNDS = 3 if FULL_TIER else 1  # kills per backend; the first is the same in both tiers


def _dicts(entries: Any) -> list[dict[str, Any]]:
    return [entry_to_dict(e) for e in entries]


# -- kill -9 of writers ----------------------------------------------------------------


@pytest.fixture(params=["sqlite", "sqlite_wal", "postgres", "mariadb"])
async def writer_db(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str]]:
    """(url, the writer's mode) for one backend."""
    kind = request.param
    if kind.startswith("sqlite"):
        yield str(tmp_path / "faults.sqlite3"), "loop-wal" if kind == "sqlite_wal" else "loop"
        return
    async with migrated_server_database(kind) as url:
        yield url, "loop"


def _acknowledged(path: Path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


async def _wait_for_first_ack(child: subprocess.Popen[bytes], ack: Path) -> None:
    for _ in range(600):
        if _acknowledged(ack) or child.poll() is not None:
            return
        await asyncio.sleep(0.05)


async def test_a_writer_killed_at_random_moments_loses_nothing_acknowledged(
    writer_db: tuple[str, str], tmp_path: Path
) -> None:
    url, mode = writer_db
    rng = random.Random(f"{SEED}-{mode}-{url.split(':')[0]}")
    for round_ in range(ROUNDS):
        ack = tmp_path / f"r{round_}.ack"
        session_id, run_id = f"loop-session-{ack.stem}", f"loop-run-{ack.stem}"
        child = subprocess.Popen(  # noqa: ASYNC220 (killed from here, never waited on long)
            [sys.executable, str(CHILD), url, mode, str(ack)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            await _wait_for_first_ack(child, ack)
            assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
            delay = rng.uniform(0.0, 0.6)
            await asyncio.sleep(delay)
        finally:
            child.kill()
            child.wait()
        where = f"seed {SEED}, round {round_}, killed {delay:.3f}s after the first ack"
        acked = _acknowledged(ack)
        async with Database(url, wal=mode == "loop-wal") as db:
            segments = await SQLSession(db).segments(session_id)
            snapshot = await SQLCheckpointer(db).load(run_id)
            # Each step's long text is stored once (lovia_contents): every reference a
            # stored row makes has its value, and each value counts exactly those.
            assert await counter_mismatches(db, all_tenants=True) == [], where
            # The database takes writes again at once.
            await SQLSession(db).append(f"after-{ack.stem}", a_run("x"), run_id="after")
        stored = len(segments)
        # Every acknowledged step is there; at most the one in flight beyond it.
        assert acked <= stored <= acked + 1, where
        assert [s.run_id for s in segments] == [f"run-{n:05d}" for n in range(1, stored + 1)]
        for number, segment in enumerate(segments, start=1):  # each run whole
            assert _dicts(segment.entries) == _dicts(loop_entries(number)), where
        assert snapshot is not None, where
        turns = len(snapshot.entries)
        assert snapshot.turns == turns, where  # head and entries in one write
        assert acked <= turns <= stored, where
        print(f"{mode} {url.split(':')[0]}: {where}: acked {acked}, runs {stored}, turns {turns}")
        assert [e.content for e in snapshot.entries] == [  # type: ignore[union-attr]
            f"turn {n} {LOOP_TEXT}" for n in range(1, turns + 1)
        ], where


# -- connections terminated ------------------------------------------------------------

Kill = Callable[[Connection], Awaitable[None]]


def _backend_id(conn: Connection) -> int:
    driver = conn.connection.driver_connection
    if hasattr(driver, "get_server_pid"):  # asyncpg
        return int(driver.get_server_pid())
    if hasattr(driver, "info"):  # psycopg
        return int(driver.info.backend_pid)
    return int(driver.thread_id())  # asyncmy


_IN_PROCESS_LIST = "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = %s"


@pytest.fixture(params=["postgres", "postgres_psycopg", "mariadb"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Kill]]:
    """(url, kill): ``kill(conn)`` terminates ``conn``'s server session from an admin
    connection, waiting until it is gone."""
    kind = request.param
    async with fresh_server_database("mariadb" if kind == "mariadb" else "postgres") as url:
        if kind == "mariadb":
            admin_url = make_url(server_url("LOVIA_TEST_MYSQL_URL"))
            admin = await asyncmy.connect(
                host=admin_url.host or "127.0.0.1",
                port=admin_url.port or 3306,
                user=admin_url.username or "root",
                password=admin_url.password or "",
            )

            async def kill(conn: Connection) -> None:
                victim = _backend_id(conn)
                async with admin.cursor() as cursor:
                    await cursor.execute(f"KILL CONNECTION {victim}")
                    # The server closes the socket as the session ends, soon after.
                    for _ in range(1200):  # a bound on a hang, not a timing
                        await cursor.execute(_IN_PROCESS_LIST, (victim,))
                        if not await cursor.fetchone():
                            return
                        await asyncio.sleep(0.05)
                pytest.fail(f"session {victim} still in the process list after KILL")

            try:
                yield url, kill
            finally:
                admin.close()
            return
        pg = await connect_pg_admin()

        async def kill(conn: Connection) -> None:
            assert await pg.fetchval("SELECT pg_terminate_backend($1, 5000)", _backend_id(conn))

        if kind == "postgres_psycopg":
            url = make_url(url).set(drivername="postgresql+psycopg").render_as_string(False)
        try:
            yield url, kill
        finally:
            await pg.close()


@contextlib.contextmanager
def killing(db: Database, kill: Kill, at: str, *, nth: int = 1) -> Iterator[list[int]]:
    """Terminate the connection once: at the ``nth`` COMMIT (``at="commit"``) or just
    before the ``nth`` statement (``at="statement"``). Yields the ids killed."""
    engine = db.engine.sync_engine
    killed: list[int] = []
    seen = [0]

    def fire(conn: Connection) -> None:
        seen[0] += 1
        if seen[0] == nth and not killed:
            killed.append(_backend_id(conn))
            await_only(kill(conn))

    def on_statement(conn: Connection, *_args: Any) -> None:
        fire(conn)

    name, listener = ("commit", fire) if at == "commit" else ("before_cursor_execute", on_statement)
    event.listen(engine, name, listener)
    try:
        yield killed
    finally:
        event.remove(engine, name, listener)


async def test_a_read_that_loses_its_connection_at_commit_is_retried(
    server: tuple[str, Kill],
) -> None:
    """D15: a read wrote nothing, so losing its COMMIT is safe to repeat."""
    url, kill = server
    async with Database(url) as db:
        store = SQLSession(db)
        await store.append("alice", a_run("1"), run_id="r1")

        def two_statements(conn: Connection) -> tuple[int, list[str]]:
            count = conn.execute(select(sessions.c.message_count)).scalar_one()
            ids = list(conn.execute(select(sessions.c.session_id)).scalars())
            return int(count), ids

        with killing(db, kill, "commit") as killed:
            assert await db.read(two_statements) == (4, ["alice"])
        assert len(killed) == 1
        # A store's own read too (whatever its shape: with or without COMMIT).
        with killing(db, kill, "statement") as killed:
            assert _dicts(await store.load("alice")) == _dicts(a_run("1"))
        assert len(killed) == 1


PROBE = "CREATE TABLE fault_probe (id INTEGER PRIMARY KEY, note VARCHAR(20) NOT NULL)"


def _two_rows(conn: Connection) -> None:
    """A write of two statements (on every backend in one transaction)."""
    conn.execute(text("INSERT INTO fault_probe (id, note) VALUES (1, 'one')"))
    conn.execute(text("INSERT INTO fault_probe (id, note) VALUES (2, 'two')"))


def _probe_rows(conn: Connection) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(text("SELECT id, note FROM fault_probe ORDER BY id"))]


async def test_a_write_that_loses_its_connection_at_commit_is_whole_or_absent(
    server: tuple[str, Kill],
) -> None:
    url, kill = server
    async with Database(url) as db:
        store = SQLSession(db)
        await store.append("warm", a_run("0"))  # the schema check's reads and writes are done
        await db.write(lambda c: c.execute(text(PROBE)))
        with killing(db, kill, "commit") as killed, pytest.raises(OutcomeUnknownError) as caught:
            await db.write(_two_rows)
        assert killed and caught.value.retry_safe is False  # the outcome is unknown
        assert "during COMMIT" in str(caught.value)
        assert await db.read(_probe_rows) in ([], [(1, "one"), (2, "two")])

        # A store's append is keyed by its run id: its lost COMMIT is settled by itself
        # (on PostgreSQL it is one statement without BEGIN/COMMIT: nothing to lose).
        with killing(db, kill, "commit") as killed:
            assert await store.append("alice", a_run("1"), run_id="r1") == "r1"
        assert killed
        segments = await store.segments("alice")
        assert [s.run_id for s in segments] == ["r1"]
        assert _dicts(segments[0].entries) == _dicts(a_run("1"))


async def test_a_connection_lost_before_commit_is_retried_by_itself(
    server: tuple[str, Kill],
) -> None:
    url, kill = server
    async with Database(url) as db:
        store = SQLSession(db)
        checkpointer = SQLCheckpointer(db)
        await store.append("warm", a_run("0"))
        await db.write(lambda c: c.execute(text(PROBE)))
        with killing(db, kill, "statement") as killed:
            assert await store.append("alice", a_run("1"), run_id="r1") == "r1"
        assert len(killed) == 1
        segments = await store.segments("alice")
        assert [s.run_id for s in segments] == ["r1"]
        assert _dicts(segments[0].entries) == _dicts(a_run("1"))
        head = RunHead(agent_name="a", turns=1)
        with killing(db, kill, "statement") as killed:
            await checkpointer.append("run", [AssistantTextEntry(content="t1")], head)
        assert len(killed) == 1
        snapshot = await checkpointer.load("run")
        assert snapshot is not None and (snapshot.turns, len(snapshot.entries)) == (1, 1)
        # Lost after the first of two statements: rolled back, then done once.
        with killing(db, kill, "statement", nth=2) as killed:
            await db.write(_two_rows)
        assert len(killed) == 1
        assert await db.read(_probe_rows) == [(1, "one"), (2, "two")]


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_pooled_connections_the_server_dropped_are_replaced_with_nothing_listening(
    driver: str,
) -> None:
    """Every pooled connection terminated between calls, with no listener attached (on
    asyncpg the hot statements then run on the driver's cursor, bypassing SQLAlchemy's
    execution path): the first statement on a dead connection invalidates it and the
    pool's older ones, so the call is retried on a fresh connection and succeeds; an
    append that met a dead connection is stored once."""
    async with fresh_server_database("postgres") as url:
        url = make_url(url).set(drivername=f"postgresql+{driver}").render_as_string(False)
        async with Database(url) as db:
            store, checkpointer = SQLSession(db), SQLCheckpointer(db)
            await store.append("warm", a_run("0"))
            # Fill the pool: ten reads at once hold ten connections.
            await asyncio.gather(*(store.load("warm") for _ in range(10)))
            for round_ in range(3):
                pg = await connect_pg_admin()
                try:
                    dropped = await pg.fetch(
                        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                        "WHERE datname = $1 AND pid <> pg_backend_pid()",
                        make_url(url).database,
                    )
                finally:
                    await pg.close()
                assert len(dropped) >= 1
                run_id = f"r{round_}"
                assert await store.append("alice", a_run(str(round_)), run_id=run_id) == run_id
                head = RunHead(agent_name="a", turns=round_)
                await checkpointer.append("run", [AssistantTextEntry(content=run_id)], head)
            segments = await store.segments("alice")
            assert [s.run_id for s in segments] == ["r0", "r1", "r2"]
            snapshot = await checkpointer.load("run")
            assert snapshot is not None and len(snapshot.entries) == 3


# -- SQLite: a full disk, a read-only file system ------------------------------------------


def _run(*command: str) -> bool:
    return subprocess.run(command, capture_output=True).returncode == 0


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[bool]:
    """A tmpfs of ``size`` at ``folder``; yields False where none can be mounted."""
    folder.mkdir()
    allowed = os.geteuid() == 0 and not os.environ.get("LOVIA_FAULT_NO_MOUNT")
    mounted = allowed and _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder))
    try:
        yield mounted
    finally:
        if mounted:
            _run("umount", "-l", str(folder))


def _limit_pages(db: Database, pages: int) -> None:
    """Where no tmpfs can be mounted: the database file may not grow past ``pages``."""
    event.listen(
        db.engine,
        "connect",
        lambda dbapi, _record: dbapi.execute(f"PRAGMA max_page_count = {pages}"),
    )


@pytest.mark.parametrize("wal", [False, True], ids=["rollback_journal", "wal"])
async def test_a_full_disk_refuses_the_write_and_keeps_every_acknowledged_one(
    tmp_path: Path, wal: bool
) -> None:
    with tmpfs(tmp_path / "small", "400k") as mounted:
        path = tmp_path / "small" / "full.sqlite3"

        # Text that does not compress, and differs by run (a repeated one is stored once).
        def big(number: int) -> list[AssistantTextEntry]:
            noise = random.Random(number).randbytes(45_000)
            return [
                AssistantTextEntry(content=f"{n} " + base64.b64encode(noise).decode()[n::2])
                for n in range(2)
            ]

        acknowledged: list[str] = []
        failure: LoviaStoreError | None = None
        store = SQLiteSession(path, wal=wal)
        if not mounted:
            _limit_pages(store.database, 80)
        async with store:
            await store.load("warm")  # migrated while there is room
            for number in range(200):
                run_id = f"r{number:03d}"
                try:
                    await store.append("alice", big(number), run_id=run_id)
                except LoviaStoreError as exc:
                    failure = exc
                    break
                acknowledged.append(run_id)
            assert failure is not None, "the disk never filled"
            assert isinstance(failure, StoreUnavailableError), repr(failure)
            assert failure.retry_safe is False  # retrying cannot make room
            assert "full" in str(failure) or "disk" in str(failure), str(failure)
            assert acknowledged
            # Still readable, and the refused run left nothing.
            segments = await store.segments("alice")
            assert [s.run_id for s in segments] == acknowledged
        if mounted:  # room again
            assert _run("mount", "-o", "remount,size=8m", str(tmp_path / "small"))
        async with SQLiteSession(path, wal=wal) as store:
            if not mounted:
                _limit_pages(store.database, 10_000)
            failed_id = f"r{len(acknowledged):03d}"
            await store.append("alice", big(len(acknowledged)), run_id=failed_id)
            segments = await store.segments("alice")
            assert [s.run_id for s in segments] == [*acknowledged, failed_id]
            assert all(_dicts(s.entries) == _dicts(big(n)) for n, s in enumerate(segments))


def _freeze(folder: Path, path: Path, *, frozen: bool) -> None:
    """Where no file system can be remounted read-only: make the file and its folder
    unwritable (``chmod``; for root, which ignores modes, ``chattr +i``)."""
    if os.geteuid() != 0:
        path.chmod(0o444 if frozen else 0o600)
        folder.chmod(0o555 if frozen else 0o700)
        return
    for target in (path, folder):
        assert _run("chattr", "+i" if frozen else "-i", str(target)), "chattr is needed as root"


@pytest.mark.parametrize("wal", [False, True], ids=["rollback_journal", "wal"])
async def test_a_read_only_file_system_refuses_writes_typed_and_loses_nothing(
    tmp_path: Path, wal: bool
) -> None:
    folder = tmp_path / "ro"
    with tmpfs(folder, "8m") as mounted:
        path = folder / "ro.sqlite3"
        async with SQLiteSession(path, wal=wal) as store:
            await store.append("alice", a_run("1"), run_id="r1")
        if mounted:
            assert _run("mount", "-o", "remount,ro", str(folder))
        else:
            _freeze(folder, path, frozen=True)
        try:
            async with SQLiteSession(path, wal=wal) as store:
                try:
                    assert _dicts(await store.load("alice")) == _dicts(a_run("1"))
                except StoreUnavailableError as exc:
                    # WAL cannot open a read-only file without its index (-shm): refused
                    # while connecting, before anything was sent (so retry-safe).
                    assert wal, repr(exc)
                    assert exc.retry_safe is True
                with pytest.raises(StoreUnavailableError) as caught:
                    await store.append("alice", a_run("2"), run_id="r2")
                # Nothing written either way; refused at connect in WAL (retry-safe), by the
                # write statement itself in the rollback journal (not retried).
                assert caught.value.retry_safe is wal, repr(caught.value)
        finally:
            if mounted:
                assert _run("mount", "-o", "remount,rw", str(folder))
            else:
                _freeze(folder, path, frozen=False)
        async with SQLiteSession(path, wal=wal) as store:
            assert [s.run_id for s in await store.segments("alice")] == ["r1"]
            await store.append("alice", a_run("2"), run_id="r2")
            assert [s.run_id for s in await store.segments("alice")] == ["r1", "r2"]


async def test_a_keyed_raw_log_append_lost_at_commit_is_re_issued_once(
    server: tuple[str, Kill],
) -> None:
    """The Raw Log has no run id: its idempotency key is what makes an append whose
    COMMIT was lost safe to re-issue. Either way the message is stored exactly once."""
    url, kill = server
    async with Database(url) as db:
        storage = SQLSessionStorage(db)
        await storage.append("warm", "q0", AssistantTextEntry(content="warm"))
        message = AssistantTextEntry(content="charged the card")
        with killing(db, kill, "commit") as killed:
            first = await storage.append("s", "q1", message, idempotency_key="pay-1")
        assert killed
        again = await storage.append("s", "q1", message, idempotency_key="pay-1")
        assert first == again
        records = await storage.list_raw_messages("s")
        assert [(r.sequence, r.request_id) for r in records] == [(again, "q1")]


@pytest.mark.parametrize("landed", [False, True], ids=["commit-lost", "reply-lost"])
async def test_lost_commits_of_keyed_writes_are_settled_after_reconnecting(
    server: tuple[str, Kill], landed: bool
) -> None:
    """A run id, a checkpoint step, a lease and a keyed message each tell whether their
    COMMIT landed: the caller gets the answer it would have had, stored once. What has
    no key (an unkeyed Raw Log append) stays an ``OutcomeUnknownError``."""
    url, kill = server
    async with Database(url) as db:
        sessions_, runs, storage = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)
        await storage.append("warm", "q0", AssistantTextEntry(content="warm"))
        await runs.append("warm", [], RunHead(agent_name="a"))

        def losing() -> contextlib.AbstractContextManager[list[int]]:
            return commit_lost(db) if landed else killing(db, kill, "commit")

        with losing() as lost:
            assert await sessions_.append("alice", a_run("1"), run_id="r1") == "r1"
        assert [s.run_id for s in await sessions_.segments("alice")] == ["r1"]

        lease = await runs.acquire_lease("run")
        step = [AssistantTextEntry(content="t1"), AssistantTextEntry(content="t2")]
        with losing() as lost:
            await runs.append("run", step, RunHead(agent_name="a", turns=1), lease=lease)
        assert lost
        snapshot = await runs.load("run")
        assert snapshot is not None
        assert (snapshot.turns, _dicts(snapshot.entries)) == (1, _dicts(step))
        await runs.release_lease(lease)

        with losing() as lost:
            taken = await runs.acquire_lease("other")
        assert lost
        assert (await runs.renew_lease(taken)).token == taken.token  # held, by this caller

        message = AssistantTextEntry(content="charged the card")
        with losing() as lost:
            sequence = await storage.append("s", "q1", message, idempotency_key="pay-1")
        assert lost
        records = await storage.list_raw_messages("s")
        assert [(r.sequence, r.request_id) for r in records] == [(sequence, "q1")]

        with losing() as lost, pytest.raises(OutcomeUnknownError):
            await storage.append("s", "q2", message)
        assert lost
        stored = [r.request_id for r in await storage.list_raw_messages("s")]
        assert stored == (["q1", "q2"] if landed else ["q1"])
