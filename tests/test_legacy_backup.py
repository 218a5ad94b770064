"""Converting a lovia 0.9 or zett-agent file first keeps a copy that the real package still opens.

The copy is checked by the fixtures' own checker (``make_legacy_fixtures.py
--verify-only``), which reopens a file with the real lovia 0.9.119 or
zett-agent 0.2.1 and compares everything it reads with the manifest. A
conversion killed (SIGKILL) at any point leaves the untouched original or the
complete conversion, and the next open finishes it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from backends import LEGACY
from lovia_store import Database, LegacyBackupError, SQLiteSession, SQLSessionStorage, upgrade
from lovia_store.db.schema import head_revision

HERE = Path(__file__).resolve().parent
CHECKER = LEGACY / "make_legacy_fixtures.py"
FILES = {"lovia": "lovia-0.9.119", "zett": "zett-0.2.1"}
LEGACY_TABLES = {
    "lovia": {"session_runs", "snapshot_heads", "snapshot_turns"},
    "zett": {"agent_sessions", "raw_messages", "session_snapshots"},
}
COPY_NAME = re.compile(r"^(?P<stem>.+)\.before-lovia-store-\d{8}T\d{12}Z(-\d+)?\.sqlite3$")


def tables(path: Path) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def copies(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if COPY_NAME.match(p.name))


def verify_with_the_real_package(package: str, copy: Path, tmp_path: Path) -> None:
    """Run the fixtures' checker on ``copy`` with the real lovia / zett-agent installed."""
    folder = tmp_path / f"verify-{package}"
    folder.mkdir()
    name = FILES[package]
    shutil.copyfile(copy, folder / f"{name}.sqlite3")
    shutil.copyfile(LEGACY / f"{name}.manifest.json", folder / f"{name}.manifest.json")
    done = subprocess.run(
        [sys.executable, str(CHECKER), "--verify-only", "--only", package, "--out", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout


@pytest.mark.parametrize("package", ["lovia", "zett"])
async def test_the_copy_opens_in_the_real_package_with_everything_equal(
    package: str, legacy_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    path = legacy_copy(f"{FILES[package]}.sqlite3")
    original = dump(path)
    async with SQLiteSession(path) as session:
        await session.load("alice")  # first use converts
    assert not LEGACY_TABLES[package] & tables(path)
    (copy,) = copies(path.parent)
    assert COPY_NAME.match(copy.name)["stem"] == path.stem  # type: ignore[index]
    assert LEGACY_TABLES[package] <= tables(copy)
    assert dump(copy) == original
    verify_with_the_real_package(package, copy, tmp_path)


async def test_the_conversion_logs_where_the_copy_is(
    legacy_copy: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    with caplog.at_level(logging.WARNING, logger="lovia_store"):
        async with SQLiteSession(path) as session:
            await session.load("alice")
    (copy,) = copies(path.parent)
    (record,) = [r for r in caplog.records if "kept at" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert str(copy) in record.getMessage() and "lovia 0.9" in record.getMessage()


async def test_upgrade_reports_what_it_converted_and_where_the_copy_went(
    legacy_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    folder = tmp_path / "backups"
    folder.mkdir()
    report = await upgrade(path, legacy_backup=folder)
    assert report.from_revision is None and report.to_revision == head_revision()
    assert report.converted == {
        "zett-agent": ["agent_sessions", "raw_messages", "session_snapshots"]
    }
    assert report.backup is not None and report.backup.parent == folder
    assert copies(folder) == [report.backup] and copies(path.parent) == []
    again = await upgrade(path)
    assert not again.changed and again.converted == {} and again.backup is None
    assert copies(path.parent) == []


async def test_no_copy_when_the_caller_opts_out(legacy_copy: Callable[[str], Path]) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    async with Database(path, legacy_backup=False) as db:
        report = await upgrade(db)
    assert report.converted and report.backup is None
    assert copies(path.parent) == []


async def test_a_file_that_needs_no_conversion_gets_no_copy(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite3"
    async with SQLiteSession(path) as session:
        await session.load("nobody")
    assert (await upgrade(path)).backup is None
    assert copies(tmp_path) == []


async def test_a_copy_that_cannot_be_written_stops_the_conversion(
    legacy_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    original = dump(path)
    with pytest.raises(LegacyBackupError, match="not a folder"):
        await upgrade(path, legacy_backup=tmp_path / "no-such-folder")
    assert dump(path) == original
    # Nothing half-done: the next open with the default converts it, with its copy.
    async with SQLiteSession(path) as session:
        assert len(await session.segments("alice")) == 4
    assert len(copies(path.parent)) == 1


def test_a_bad_legacy_backup_value_is_a_user_error() -> None:
    from lovia_store import UserError

    with pytest.raises(UserError, match="legacy_backup"):
        Database(":memory:", legacy_backup=3)  # type: ignore[arg-type]


@pytest.mark.postgres
async def test_a_server_database_is_converted_only_when_told_a_dump_exists(
    legacy_copy: Callable[[str], Path], pg_url: str
) -> None:
    from test_legacy_zett import ZETT_TABLES, _copy_zett_tables_to_postgres, _table_names

    await _copy_zett_tables_to_postgres(legacy_copy("zett-0.2.1.sqlite3"), pg_url)
    with pytest.raises(LegacyBackupError, match="dump it first"):
        async with SQLSessionStorage(pg_url) as store:
            await store.list_sessions()
    async with Database(pg_url, legacy_backup=False) as db:
        assert await db.read_unchecked(_table_names) >= ZETT_TABLES
        report = await upgrade(db)
        assert report.converted and report.backup is None
        assert not ZETT_TABLES & await db.read(_table_names)


# -- kill -9 at every step -------------------------------------------------------------------


def _child(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "convert_child.py"), str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _kill_points(statements: int) -> list[tuple[str, ...]]:
    """Bounded for CI: the copy's two steps, the first and last few statements, every
    sixth one between, and the COMMIT."""
    chosen = {*range(1, 4), *range(4, statements - 2, 6), *range(statements - 2, statements + 1)}
    return [
        ("copied",),
        ("published",),
        *(("statement", str(n)) for n in sorted(chosen)),
        ("commit",),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("package", ["lovia", "zett"])
async def test_a_conversion_killed_anywhere_leaves_the_original_or_the_conversion(
    package: str, tmp_path: Path
) -> None:
    name = f"{FILES[package]}.sqlite3"
    pristine = tmp_path / "pristine" / name
    pristine.parent.mkdir()
    shutil.copyfile(LEGACY / name, pristine)
    original = dump(pristine)

    counted = tmp_path / "counted" / name
    counted.parent.mkdir()
    shutil.copyfile(pristine, counted)
    done = _child(counted, "count")
    assert done.returncode == 0, done.stderr
    statements = int(done.stdout.strip())
    assert statements > 20
    assert not LEGACY_TABLES[package] & tables(counted)  # uninterrupted, it converts

    points = _kill_points(statements)
    for number, point in enumerate(points):
        folder = tmp_path / f"kill-{number}"
        folder.mkdir()
        path = folder / name
        shutil.copyfile(pristine, path)
        killed = _child(path, *point)
        assert killed.returncode == -9, (point, killed.stdout, killed.stderr)
        # Every point is before the COMMIT: the conversion is one transaction, so
        # each leaves the original exactly as it was.
        assert dump(path) == original, point
        for copy in copies(folder):  # a copy under its final name is always whole
            assert dump(copy) == original, point
        # The next open finishes the job, and everything reads back.
        async with SQLiteSession(path) as session, SQLSessionStorage(session.database) as raw:
            sessions = await raw.list_sessions(limit=100)
            assert len(sessions) == (2 if package == "lovia" else 4)
        assert not LEGACY_TABLES[package] & tables(path)
        assert copies(folder), point  # a way back exists once converted


async def test_a_conversion_on_first_use_is_said_where_the_user_sees_it(
    legacy_copy: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A ConversionWarning names what was converted and where the copy is (the command
    line's ``upgrade`` prints its own report instead)."""
    from lovia_store import ConversionWarning
    from lovia_store.cli import main

    path = legacy_copy("lovia-0.9.119.sqlite3")
    with pytest.warns(ConversionWarning, match=r"lovia 0\.9's tables .* one-way") as caught:
        async with SQLiteSession(path) as session:
            await session.load("alice")
    (copy,) = copies(path.parent)
    assert str(copy) in str(caught[0].message)

    # The command line's only converting command, upgrade, says it once, in its report.
    capsys.readouterr()
    other = legacy_copy("zett-0.2.1.sqlite3")
    assert await asyncio.to_thread(main, ["upgrade", str(other)]) == 0
    out, err = capsys.readouterr()
    assert "converted zett-agent's tables" in out and "one-way" not in err
