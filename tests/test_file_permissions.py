"""SQLite files lovia-store creates are owner-only: they hold personal conversations.

A new database file and SQLite's ``-wal``, ``-shm`` and ``-journal`` files
beside it are 0600, a folder lovia-store creates for it (``~/.lovia-store/``
included) is 0700, whatever the umask; the copy kept before converting another
program's file is 0600; a file or folder that already exists keeps its mode.
Real files, and real processes for the command line and a race of creators.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection

from helpers import a_run, user
from lovia_store import (
    Database,
    RunHead,
    SQLiteCheckpointer,
    SQLiteSession,
    SQLiteSessionStorage,
    StoreUnavailableError,
)
from lovia_store.integrations.zett import SQLiteSessionStorage as ZettSQLiteSessionStorage

SCRIPT = Path(sys.executable).with_name("lovia-store")
UMASKS = [0o022, 0o000]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """A permissive umask for the test, the process's own restored after it."""
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def side_file(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def journal_mode_inside_a_write(path: Path) -> Callable[[Connection], int]:
    """A write that, mid-transaction (a page written), reports the rollback journal's mode."""

    def work(conn: Connection) -> int:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS permission_probe (x)")
        conn.exec_driver_sql("INSERT INTO permission_probe VALUES (1)")
        journal = side_file(path, "-journal")
        assert journal.exists(), "the rollback journal exists while the write is open"
        return mode(journal)

    return work


async def _session(path: Path, wal: bool) -> tuple[Any, Database]:
    store = SQLiteSession(path, wal=wal)
    await store.append("s", a_run("1"), run_id="r1")
    return store, store.database


async def _checkpointer(path: Path, wal: bool) -> tuple[Any, Database]:
    store = SQLiteCheckpointer(path, wal=wal)
    await store.append("run", [user("step")], RunHead(agent_name="a", turns=1))
    return store, store.database


async def _storage(path: Path, wal: bool) -> tuple[Any, Database]:
    store = SQLiteSessionStorage(path, wal=wal)
    await store.append("s", "req-1", user("q1"))
    return store, store.database


async def _database_url(path: Path, wal: bool) -> tuple[Any, Database]:
    db = Database(f"sqlite+aiosqlite:///{path}", wal=wal)
    await db.ensure_schema()
    return db, db


OPENERS: dict[str, Callable[[Path, bool], Awaitable[tuple[Any, Database]]]] = {
    "SQLiteSession": _session,
    "SQLiteCheckpointer": _checkpointer,
    "SQLiteSessionStorage": _storage,
    "Database(url)": _database_url,
}


@pytest.mark.parametrize("wal", [True, False], ids=["wal", "rollback"])
@pytest.mark.parametrize("opener", list(OPENERS))
async def test_a_new_file_its_side_files_and_its_folder_are_owner_only(
    tmp_path: Path, umask: int, opener: str, wal: bool
) -> None:
    path = tmp_path / "created" / "chat.sqlite3"
    store, db = await OPENERS[opener](path, wal)
    try:
        assert mode(path.parent) == 0o700
        assert mode(path) == 0o600
        if wal:
            for suffix in ("-wal", "-shm"):
                assert side_file(path, suffix).exists(), suffix
                assert mode(side_file(path, suffix)) == 0o600, suffix
        else:
            assert await db.write(journal_mode_inside_a_write(path)) == 0o600
            assert not side_file(path, "-wal").exists()
    finally:
        await store.close()
    assert mode(path) == 0o600  # closing changes nothing


@pytest.mark.parametrize("wal", [True, False], ids=["wal", "rollback"])
async def test_an_existing_file_and_folder_keep_their_modes(
    tmp_path: Path, umask: int, wal: bool
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o755)
    path = folder / "chat.sqlite3"
    path.touch()
    path.chmod(0o644)
    async with SQLiteSession(path, wal=wal) as session:
        await session.append("s", a_run("1"), run_id="r1")
        assert len(await session.load("s")) == 4
        # SQLite's side files take the main file's bits: the caller's choice.
        if wal:
            assert mode(side_file(path, "-wal")) == 0o644
        else:
            assert await session.database.write(journal_mode_inside_a_write(path)) == 0o644
    assert mode(path) == 0o644 and mode(folder) == 0o755


@pytest.mark.parametrize("integration", ["raw_log", "zett"])
async def test_the_default_file_and_lovia_store_folder_in_home_are_owner_only(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch, integration: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    storage: Any
    if integration == "zett":
        from zett_agent.messages import UserMessage

        storage, message = ZettSQLiteSessionStorage(), UserMessage(content="stored at home")
    else:
        storage, message = SQLiteSessionStorage(), user("stored at home")
    try:
        await storage.append("s", "req-1", message)
    finally:
        await storage.close()
    assert mode(home / ".lovia-store") == 0o700
    assert mode(home / ".lovia-store" / "sessions.sqlite3") == 0o600


async def test_an_existing_lovia_store_folder_keeps_its_mode(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".lovia-store").mkdir(parents=True)
    (home / ".lovia-store").chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    async with SQLiteSessionStorage() as storage:
        await storage.append("s", "req-1", user("stored at home"))
    assert mode(home / ".lovia-store") == 0o755
    assert mode(home / ".lovia-store" / "sessions.sqlite3") == 0o600


async def test_a_file_deleted_while_open_is_created_owner_only_again(
    tmp_path: Path, umask: int
) -> None:
    """Every connection lovia-store opens makes a missing file itself, not only the first."""
    path = tmp_path / "chat.sqlite3"
    async with SQLiteSession(path) as session:
        await session.append("s", a_run("1"), run_id="r1")
    path.unlink()
    async with SQLiteSession(path) as session:
        await session.append("s", a_run("2"), run_id="r2")
    assert mode(path) == 0o600


async def test_the_copy_kept_before_a_conversion_is_owner_only(
    legacy_copy: Callable[[str], Path], umask: int
) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    path.chmod(0o644)  # the other program's file, readable by others: left so
    async with SQLiteSession(path) as session:
        assert len(await session.load("alice")) > 0  # first use converts
    (copy,) = (p for p in path.parent.iterdir() if ".before-lovia-store-" in p.name)
    assert mode(copy) == 0o600
    assert mode(path) == 0o644
    assert not any(p.name.endswith(".partial") for p in path.parent.iterdir())


async def test_a_read_only_uri_creates_no_file(tmp_path: Path, umask: int) -> None:
    """``mode=ro``: SQLite would not create the file, so lovia-store does not either."""
    path = tmp_path / "absent.sqlite3"
    db = Database(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        with pytest.raises(StoreUnavailableError):
            await db.ensure_schema()
    finally:
        await db.close()
    assert not path.exists()


def _in_a_process(umask: int, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", f'umask {umask:03o} && exec "$@"', "sh", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("umask_value", UMASKS, ids=lambda m: f"umask{m:03o}")
def test_the_command_line_creates_owner_only_files(tmp_path: Path, umask_value: int) -> None:
    done = _in_a_process(umask_value, str(SCRIPT), "upgrade", "new/chat.sqlite3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert mode(tmp_path / "new") == 0o700
    assert mode(tmp_path / "new" / "chat.sqlite3") == 0o600


def test_the_demo_creates_an_owner_only_file(tmp_path: Path) -> None:
    """``lovia-store demo FILE``: its worker processes (one killed) share the new file."""
    done = _in_a_process(0o022, str(SCRIPT), "demo", "kept.sqlite3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "worker exit status: -9" in done.stdout
    assert mode(tmp_path / "kept.sqlite3") == 0o600


_CREATOR = """
import asyncio, os, sys, time
from pathlib import Path
from lovia_store import SQLiteSession

async def main() -> None:
    gate = Path(sys.argv[2])
    (gate / f"ready-{os.getpid()}").touch()
    while not (gate / "go").exists():
        time.sleep(0.001)
    async with SQLiteSession(sys.argv[1], wal=True) as session:
        await session.load("s")

asyncio.run(main())
"""


def test_processes_racing_to_create_one_file_all_open_it_owner_only(tmp_path: Path) -> None:
    """Four processes (umask 022) start at one moment on a missing file in a missing
    folder: each opens it, and the file and folder are owner-only."""
    path = tmp_path / "race" / "chat.sqlite3"
    script = tmp_path / "creator.py"
    script.write_text(_CREATOR)
    gate = tmp_path / "gate"  # each child says it is ready here, then waits for "go"
    gate.mkdir()
    children = [
        subprocess.Popen(
            [
                "sh",
                "-c",
                'umask 022 && exec "$@"',
                "sh",
                sys.executable,
                str(script),
                str(path),
                str(gate),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    # Every interpreter has imported lovia-store before any of them starts.
    deadline = time.monotonic() + 120
    while len(list(gate.glob("ready-*"))) < len(children):
        assert all(child.poll() is None for child in children), [c.poll() for c in children]
        assert time.monotonic() < deadline, "the children never got ready"
        time.sleep(0.01)
    (gate / "go").touch()
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    assert mode(path.parent) == 0o700
    assert mode(path) == 0o600
