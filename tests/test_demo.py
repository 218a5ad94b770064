"""``lovia-store demo``, the README's main job: a run killed mid-way resumes and lands once.

The demo never deletes or changes data it did not write: without a target it
works in a temporary folder it removes; a named database that exists is refused
unless ``--force``, which adds only the demo's own session and run.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from backends import create_pg_database, drop_pg_database
from lovia_store import InputEntry, SQLCheckpointer, SQLiteCheckpointer, SQLiteSession, SQLSession
from lovia_store.demo import RUN_ID, SESSION

SCRIPT = Path(sys.executable).with_name("lovia-store")


def _demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "demo", *args], cwd=cwd, capture_output=True, text=True, timeout=180
    )


def _assert_story(out: str) -> None:
    assert "worker exit status: -9" in out
    assert "send_email [call-3]: NO RESULT (dangling)" in out
    assert "model calls: 1" in out and "Tools executed again: send_email." in out
    assert "duplicate suppressed by idempotency key" in out
    assert "replayed=True, model calls=0, same output: True" in out


async def _stored(target: str, session_id: str, run_id: str) -> tuple[int, int, object]:
    async with SQLSession(target) as session, SQLCheckpointer(session.database) as cp:
        segments = await session.segments(session_id)
        snapshot = await cp.load(run_id)
    assert snapshot is not None
    return len(segments), len(segments[0].entries), snapshot.status


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _scratch_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("lovia-store-demo-*")}


def test_demo_without_a_target_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "lovia-store.sqlite3").write_bytes(b"not touched")  # the CLI's default file
    before = _scratch_folders()
    done = _demo(cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_story(done.stdout)
    assert "a temporary file" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lovia-store.sqlite3"]
    assert (tmp_path / "lovia-store.sqlite3").read_bytes() == b"not touched"
    assert _scratch_folders() <= before


def test_demo_keeps_a_new_file_it_was_given(tmp_path: Path) -> None:
    done = _demo("kept.sqlite3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_story(done.stdout)
    assert f"lovia-store show {SESSION} kept.sqlite3" in done.stdout
    # Only the database (and SQLite's side files) remain: no effects log.
    assert {p.name for p in tmp_path.iterdir()} <= {
        "kept.sqlite3",
        "kept.sqlite3-wal",
        "kept.sqlite3-shm",
    }
    assert asyncio.run(_stored(str(tmp_path / "kept.sqlite3"), SESSION, RUN_ID)) == (
        1,
        9,
        "completed",
    )


def test_demo_refuses_an_existing_file_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "mine.sqlite3"

    async def write() -> None:
        async with SQLiteSession(path) as session:
            await session.append(SESSION, [InputEntry(role="user", content="mine")], run_id="m1")
        async with SQLiteCheckpointer(path) as cp:
            assert await cp.load(RUN_ID) is None

    asyncio.run(write())
    digest = _digest(path)
    done = _demo(str(path), cwd=tmp_path)
    assert done.returncode != 0
    assert "exists" in done.stderr and "--force" in done.stderr
    assert "Traceback" not in done.stderr
    assert _digest(path) == digest


def test_demo_force_adds_only_its_own_session_and_run(tmp_path: Path) -> None:
    path = tmp_path / "mine.sqlite3"
    mine = [InputEntry(role="user", content="my own customer-42 history")]

    async def write() -> None:
        async with SQLiteSession(path) as session:  # same ids as the demo's defaults
            await session.append(SESSION, mine, run_id=RUN_ID)

    asyncio.run(write())
    done = _demo(str(path), "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_story(done.stdout)

    async def read() -> tuple[list[object], list[str]]:
        async with SQLiteSession(path) as session:
            listed = await session.database.read(
                lambda conn: [
                    row[0] for row in conn.exec_driver_sql("SELECT session_id FROM lovia_sessions")
                ]
            )
            return list(await session.load(SESSION)), sorted(listed)

    history, sessions = asyncio.run(read())
    assert history == mine
    assert len(sessions) == 2 and sessions[0] == SESSION
    demo_session = sessions[1]
    assert demo_session.startswith(f"{SESSION}-")
    suffix = demo_session.removeprefix(SESSION)
    assert asyncio.run(_stored(str(path), demo_session, RUN_ID + suffix)) == (1, 9, "completed")
    assert not any(p.name.endswith(".effects.jsonl") for p in tmp_path.iterdir())


@pytest.mark.postgres
def test_demo_on_a_server_url(tmp_path: Path) -> None:
    url = asyncio.run(create_pg_database())
    try:
        done = _demo(url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        _assert_story(done.stdout)
        assert list(tmp_path.iterdir()) == []
        assert asyncio.run(_stored(url, SESSION, RUN_ID)) == (1, 9, "completed")
        again = _demo(url, cwd=tmp_path)  # it holds data now: refused, in one line
        assert again.returncode != 0 and "--force" in again.stderr
        assert "Traceback" not in again.stderr
    finally:
        asyncio.run(drop_pg_database(url))
