"""SQLite's ``busy_timeout`` is the whole call's wait for another process's lock (D16).

Each attempt waits in SQLite's busy handler already; retrying six times used to
make a 5 s timeout about 30 s. Another process really holds the lock here.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from backends import fresh_server_database
from helpers import a_run
from lovia_store import Database, SQLSession, StoreBusyError

BUSY = 1.0
_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute(sys.argv[2])
print("locked", flush=True)
time.sleep(float(sys.argv[3]))
conn.execute("ROLLBACK")
"""


@contextmanager
def lock_held_by_another_process(path: Path, begin: str, seconds: float) -> Iterator[None]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), begin, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()


async def ready_database(path: Path, wal: bool) -> Database:
    db = Database(path, wal=wal, busy_timeout=BUSY)
    await SQLSession(db).append("s", a_run("0"), run_id="r0")  # schema checked: not timed
    return db


@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal"])
async def test_a_write_waits_busy_timeout_in_all_not_per_attempt(tmp_path: Path, wal: bool) -> None:
    path = tmp_path / "busy.sqlite3"
    db = await ready_database(path, wal)
    try:
        with lock_held_by_another_process(path, "BEGIN IMMEDIATE", seconds=10):
            started = time.monotonic()
            with pytest.raises(StoreBusyError) as caught:
                await SQLSession(db).append("s", a_run("1"), run_id="r1")
            waited = time.monotonic() - started
        assert caught.value.retry_safe is True
        assert BUSY * 0.9 <= waited < BUSY * 3, waited  # about busy_timeout, not 6x
        assert [s.run_id for s in await SQLSession(db).segments("s")] == ["r0"]
    finally:
        await db.close()


async def test_a_read_blocked_by_an_exclusive_lock_waits_busy_timeout_in_all(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy-read.sqlite3"
    db = await ready_database(path, wal=False)
    try:
        with lock_held_by_another_process(path, "BEGIN EXCLUSIVE", seconds=10):
            started = time.monotonic()
            with pytest.raises(StoreBusyError):
                await SQLSession(db).load("s")
            waited = time.monotonic() - started
        assert BUSY * 0.9 <= waited < BUSY * 3, waited  # not once per retry
    finally:
        await db.close()


async def test_a_lock_released_within_busy_timeout_is_waited_out(tmp_path: Path) -> None:
    path = tmp_path / "brief.sqlite3"
    db = await ready_database(path, wal=True)
    try:
        with lock_held_by_another_process(path, "BEGIN IMMEDIATE", seconds=0.2):
            await asyncio.wait_for(SQLSession(db).append("s", a_run("1"), run_id="r1"), BUSY * 2)
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
    with lock_held_by_another_process(path, "BEGIN IMMEDIATE", seconds=BUSY * 3):
        started = time.monotonic()
        async with Database(path, busy_timeout=BUSY) as db:
            await SQLSession(db).append("s", a_run("1"), run_id="r1")
        assert time.monotonic() - started >= BUSY * 2


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
                with pytest.raises(StoreBusyError) as refused:
                    await session.append("s", a_run("1"), run_id="r1")
                waited = time.monotonic() - started
                await holder.rollback()
            assert 0.9 < waited < 4, waited  # one lock timeout, not six
            assert refused.value.retry_safe  # the caller may try again; nothing was written
            assert [s.run_id for s in await session.segments("s")] == ["r0"]
            await session.append("s", a_run("1"), run_id="r1")  # the lock gone, it goes in
        finally:
            await blocker.close()
            await db.close()
