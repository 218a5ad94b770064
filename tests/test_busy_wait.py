"""SQLite's ``busy_timeout`` is the whole call's wait for another process's lock (D16).

Each attempt waits in SQLite's busy handler already; retrying six times used to
make a 5 s timeout about 30 s. Another process really holds the lock here, until
the test releases it. A call that was not retried met one busy error: counted, not
timed, since a loaded machine stretches every wait.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from backends import fresh_server_database
from helpers import a_run, on_first_statement
from lovia_store import Database, SQLSession, StoreBusyError

BUSY = 1.0
_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute(sys.argv[2])
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
print("released", flush=True)
"""


@contextmanager
def lock_held_by_another_process(path: Path, begin: str) -> Iterator[Callable[[], None]]:
    """Yield ``release``: the lock is held until it is called (or the block ends)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), begin],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    stdin, stdout = holder.stdin, holder.stdout

    def release() -> None:
        stdin.write("go\n")
        stdin.flush()
        assert stdout.readline().strip() == "released"

    try:
        assert stdout.readline().strip() == "locked"
        yield release
    finally:
        holder.kill()
        holder.wait()


@contextmanager
def busy_errors(db: Database) -> Iterator[list[BaseException]]:
    """The driver errors ``db``'s statements meet meanwhile: one per attempt that gave up."""
    seen: list[BaseException] = []

    def note(context: Any) -> None:
        seen.append(context.original_exception)

    event.listen(db.sync_engine, "handle_error", note)
    try:
        yield seen
    finally:
        event.remove(db.sync_engine, "handle_error", note)


async def ready_database(path: Path, wal: bool, busy_timeout: float = BUSY) -> Database:
    db = Database(path, wal=wal, busy_timeout=busy_timeout)
    await SQLSession(db).append("s", a_run("0"), run_id="r0")  # schema checked: not timed
    return db


@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal"])
async def test_a_write_waits_busy_timeout_in_all_not_per_attempt(tmp_path: Path, wal: bool) -> None:
    path = tmp_path / "busy.sqlite3"
    db = await ready_database(path, wal)
    try:
        with lock_held_by_another_process(path, "BEGIN IMMEDIATE"), busy_errors(db) as errors:
            started = time.monotonic()
            with pytest.raises(StoreBusyError) as caught:
                await SQLSession(db).append("s", a_run("1"), run_id="r1")
            waited = time.monotonic() - started
        assert caught.value.retry_safe is True
        assert waited >= BUSY * 0.9, waited  # SQLite's busy handler waited busy_timeout
        assert len(errors) == 1, errors  # and the call gave up then, not after 6 attempts
        assert [s.run_id for s in await SQLSession(db).segments("s")] == ["r0"]
    finally:
        await db.close()


async def test_a_read_blocked_by_an_exclusive_lock_waits_busy_timeout_in_all(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy-read.sqlite3"
    db = await ready_database(path, wal=False)
    try:
        with lock_held_by_another_process(path, "BEGIN EXCLUSIVE"), busy_errors(db) as errors:
            started = time.monotonic()
            with pytest.raises(StoreBusyError):
                await SQLSession(db).load("s")
            waited = time.monotonic() - started
        assert waited >= BUSY * 0.9, waited
        assert len(errors) == 1, errors  # not once per retry
    finally:
        await db.close()


async def test_a_lock_released_within_busy_timeout_is_waited_out(tmp_path: Path) -> None:
    """Released once the append has sent its BEGIN IMMEDIATE: SQLite's busy handler
    waits it out, without a busy error (``busy_timeout`` only bounds a hang here)."""
    path = tmp_path / "brief.sqlite3"
    db = await ready_database(path, wal=True, busy_timeout=60)
    try:
        with (
            lock_held_by_another_process(path, "BEGIN IMMEDIATE") as release,
            on_first_statement(db, release),
            busy_errors(db) as errors,
        ):
            await SQLSession(db).append("s", a_run("1"), run_id="r1")
        assert errors == []
        assert [s.run_id for s in await SQLSession(db).segments("s")] == ["r0", "r1"]
    finally:
        await db.close()


async def test_a_first_open_waits_for_another_process_migrating_beyond_busy_timeout(
    tmp_path: Path,
) -> None:
    """A migration (say a lovia 0.9 file's conversion) may hold the file longer than
    ``busy_timeout``; another process's first open waits for it, as the server
    backends' migration lock does, instead of failing."""
    path = tmp_path / "migrating.sqlite3"

    async def first_append() -> None:
        async with Database(path, busy_timeout=BUSY) as db:
            await SQLSession(db).append("s", a_run("1"), run_id="r1")

    with lock_held_by_another_process(path, "BEGIN IMMEDIATE") as release:
        opening = asyncio.ensure_future(first_append())
        done, _ = await asyncio.wait({opening}, timeout=BUSY * 3)
        assert not done, opening.exception()  # still waiting, three busy_timeouts on
        await asyncio.to_thread(release)
        await opening
    async with Database(path) as db:
        assert [s.run_id for s in await SQLSession(db).segments("s")] == ["r1"]


# -- servers: their own lock timeout is the call's whole wait ------------------------------------

SERVER_LOCK_TIMEOUT: dict[str, dict[str, Any]] = {  # one second, for our connections only
    "postgres": {"server_settings": {"lock_timeout": "1000"}},
    "mariadb": {"init_command": "SET SESSION innodb_lock_wait_timeout = 1"},
}
_LOCK_ROW = "SELECT session_id FROM lovia_sessions WHERE session_id = 's' FOR UPDATE"


@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
async def test_a_server_lock_timeout_is_not_retried(kind: str) -> None:
    """A lock wait timeout used to be retried: six times the server's timeout in all."""
    async with fresh_server_database(kind) as url:
        db = Database(url, connect_args=SERVER_LOCK_TIMEOUT[kind])
        blocker = Database(url)
        try:
            session = SQLSession(db)
            await session.append("s", a_run("0"), run_id="r0")
            async with blocker.engine.connect() as holder:
                await holder.begin()
                await holder.execute(text(_LOCK_ROW))  # another transaction holds the row
                started = time.monotonic()
                with busy_errors(db) as errors, pytest.raises(StoreBusyError) as refused:
                    await session.append("s", a_run("1"), run_id="r1")
                waited = time.monotonic() - started
                await holder.rollback()
            assert waited > 0.9, waited  # the server's lock timeout
            assert len(errors) == 1, errors  # met once: not retried six times
            assert refused.value.retry_safe  # the caller may try again; nothing was written
            assert [s.run_id for s in await session.segments("s")] == ["r0"]
            await session.append("s", a_run("1"), run_id="r1")  # the lock gone, it goes in
        finally:
            await blocker.close()
            await db.close()
