"""The schema gate: migrate what is older, refuse (without writing) what is newer."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from helpers import a_run
from lovia_store import (
    Database,
    SchemaNotCurrentError,
    SchemaVersionError,
    SQLiteSession,
    SQLSession,
    check,
    upgrade,
)
from lovia_store.db.schema import KNOWN_VERSIONS, head_revision
from lovia_store.db.schema_state import HEAD_REVISION


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sql(path: Path, statement: str) -> list[tuple[object, ...]]:
    """Run one statement and close, so a WAL file is folded back into the main file."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            return list(conn.execute(statement))
    finally:
        conn.close()


async def make_current(path: Path, *, wal: bool) -> None:
    async with SQLiteSession(path, wal=wal) as store:
        await store.append("s", a_run("1"), run_id="r1")


@pytest.mark.parametrize("wal", [False, True])
async def test_newer_store_version_is_refused_and_file_untouched(tmp_path: Path, wal: bool) -> None:
    path = tmp_path / "newer.sqlite3"
    await make_current(path, wal=wal)
    sql(path, "UPDATE lovia_schema SET version = 7 WHERE store = 'session'")
    before = digest(path)
    with pytest.raises(SchemaVersionError) as caught:
        async with SQLiteSession(path, wal=wal) as store:
            await store.load("s")
    message = str(caught.value)
    assert "upgrade lovia" in message
    assert "'session'" in message and "7" in message and str(KNOWN_VERSIONS["session"]) in message
    assert str(path) in message
    assert (caught.value.store, caught.value.found) == ("session", 7)
    assert digest(path) == before


async def test_another_programs_store_row_is_left_alone(tmp_path: Path) -> None:
    """lovia's web UI keeps its ``chat`` row in ``lovia_schema``: not ours to judge.
    (A newer lovia-store with a new store of its own is refused by its revision.)"""
    path = tmp_path / "shared-store.sqlite3"
    await make_current(path, wal=False)
    sql(path, "INSERT INTO lovia_schema (store, version) VALUES ('chat', 7)")
    await check(path)
    await upgrade(path)
    async with SQLiteSession(path) as store:
        await store.append("s", a_run("1"))
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT version FROM lovia_schema WHERE store = 'chat'").fetchall()
    assert rows == [(7,)]


async def test_a_newer_version_of_a_store_we_own_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future-store.sqlite3"
    await make_current(path, wal=False)
    sql(path, "UPDATE lovia_schema SET version = version + 1 WHERE store = 'session'")
    before = digest(path)
    with pytest.raises(SchemaVersionError, match="upgrade lovia"):
        await check(path)
    with pytest.raises(SchemaVersionError, match="upgrade lovia"):
        await upgrade(path)
    assert digest(path) == before


async def test_unknown_revision_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future-revision.sqlite3"
    await make_current(path, wal=False)
    sql(path, "UPDATE lovia_alembic_version SET version_num = '9999_from_the_future'")
    before = digest(path)
    with pytest.raises(SchemaVersionError, match="upgrade lovia"):
        async with SQLiteSession(path) as store:
            await store.append("s", a_run("2"))
    assert digest(path) == before


async def test_a_newer_lovia_layout_is_refused(
    legacy_copy: Callable[[str], Path],
) -> None:
    """A lovia file some later lovia migrated (a version row, no lovia-store tables)."""
    path = legacy_copy("lovia-0.9.119.sqlite3")
    sql(path, "INSERT INTO lovia_schema (store, version) VALUES ('session', 1)")
    before = digest(path)
    with pytest.raises(SchemaVersionError, match="upgrade lovia"):
        async with SQLiteSession(path) as store:
            await store.load("alice")
    assert digest(path) == before
    assert ("session_runs",) in sql(path, "SELECT name FROM sqlite_master WHERE type='table'")


async def test_newer_postgres_is_refused_and_password_never_shown(pg_url: str) -> None:
    async with SQLSession(pg_url) as store:
        await store.append("s", a_run("1"), run_id="r1")
    url = make_url(pg_url)
    conn = await asyncpg.connect(
        host=url.host, port=url.port, user=url.username, database=url.database
    )
    try:
        await conn.execute("UPDATE lovia_schema SET version = 9 WHERE store = 'checkpoint'")
        secret = url.set(password="s3cret-pass").render_as_string(hide_password=False)
        with pytest.raises(SchemaVersionError) as caught:
            async with SQLSession(secret) as store:
                await store.append("s", a_run("2"), run_id="r2")
        message = str(caught.value)
        assert "upgrade lovia" in message and "'checkpoint'" in message
        assert url.database is not None and url.database in message
        assert "s3cret-pass" not in message
        rows = await conn.fetch("SELECT run_id FROM lovia_session_runs")
        assert [r["run_id"] for r in rows] == ["r1"]
    finally:
        await conn.close()


async def test_verify_only_refuses_an_old_database_and_writes_nothing(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("lovia-0.9.119.sqlite3")
    before = digest(path)
    with pytest.raises(SchemaNotCurrentError, match="lovia-store upgrade"):
        await check(path)
    db = Database(path, verify_only=True)
    with pytest.raises(SchemaNotCurrentError):
        async with SQLSession(db) as store:
            await store.load("alice")
    await db.close()
    assert digest(path) == before
    await upgrade(path)
    await check(path)
    async with Database(path, verify_only=True) as db, SQLSession(db) as store:
        assert len(await store.load("alice")) == 31


async def test_upgrade_is_idempotent_and_uses_our_version_table(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite3"
    # A host application's own Alembic bookkeeping shares the file.
    sql(path, "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    sql(path, "INSERT INTO alembic_version VALUES ('host_rev_1')")
    await upgrade(path)
    await upgrade(path)
    await check(path)
    assert sql(path, "SELECT version_num FROM lovia_alembic_version") == [(head_revision(),)]
    assert sql(path, "SELECT version_num FROM alembic_version") == [("host_rev_1",)]
    names = {r[0] for r in sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert all(name.startswith("lovia_") for name in names - {"alembic_version"})


async def test_postgres_upgrade_and_check(pg_url: str) -> None:
    with pytest.raises(SchemaNotCurrentError):
        await check(pg_url)
    await upgrade(pg_url)
    await check(pg_url)


def test_the_head_the_gate_knows_is_alembic_s_head() -> None:
    """The gate recognises a current database without loading Alembic, by this constant."""
    from lovia_store.db.schema_state import HEAD_REVISION, scripts

    assert scripts().get_current_head() == HEAD_REVISION


def test_opening_a_current_database_loads_no_alembic(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "current.sqlite3"
    code = (
        "import asyncio, sys\n"
        "from lovia_store import SQLiteSession, upgrade\n"
        f"asyncio.run(upgrade({str(path)!r}))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    code = (
        "import asyncio, sys\n"
        "from lovia_store import InputEntry, SQLiteSession\n"
        "async def main():\n"
        f"    async with SQLiteSession({str(path)!r}) as s:\n"
        "        await s.append('u', [InputEntry(role='user', content='hi')])\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=120, capture_output=True, text=True
    )
    assert done.stdout.strip() == "[]"


async def test_an_0008_database_is_not_current_and_upgrades_to_the_head(tmp_path: Path) -> None:
    """A database an earlier version wrote: ``check`` names both revisions, and
    ``upgrade`` brings it to the head (0009 tenant-keyed it) without refusing anything."""
    from lovia_store.db.schema import migrate

    path = tmp_path / "at-0008.sqlite3"
    async with Database(path) as db:
        await migrate(db, "0008")
    with pytest.raises(SchemaNotCurrentError) as caught:
        await check(path)
    assert (caught.value.found, caught.value.expected) == ("0008", HEAD_REVISION)
    await upgrade(path)
    await check(path)
    assert sql(path, "SELECT version_num FROM lovia_alembic_version") == [(HEAD_REVISION,)]
    columns = [r[1] for r in sql(path, "PRAGMA table_info(lovia_messages)") if r[5]]
    assert columns == ["tenant", "session_id", "sequence"]


async def test_later_columns_name_every_column_0001_did_not_create(tmp_path: Path) -> None:
    """``_LATER_COLUMNS`` lets the gate take a half-made first migration's tables for ours:
    every column a later revision added (0009's tenant included) must be listed there."""
    from lovia_store.db.schema import migrate
    from lovia_store.db.schema_state import _FIRST_TABLES, _LATER_COLUMNS
    from lovia_store.db.tables import metadata

    path = tmp_path / "at-0001.sqlite3"
    async with Database(path) as db:
        await migrate(db, "0001")
    for name in sorted(_FIRST_TABLES):
        first = {r[1] for r in sql(path, f"PRAGMA table_info({name})")}
        head = {c.name for c in metadata.tables[name].columns}
        assert head - first == _LATER_COLUMNS.get(name, frozenset()), name
