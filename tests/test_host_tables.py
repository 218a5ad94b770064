"""A host's tables beside ours (D7): generic names are the host's, our names are refused,
and a first migration that failed half-way (MariaDB commits each DDL statement) is
finished by the next open. On SQLite, PostgreSQL and MariaDB, real servers."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from backends import fresh_server_database
from helpers import a_run
from lovia_store import (
    LoviaStoreError,
    SQLiteSession,
    SQLSession,
    check,
    entry_to_dict,
)
from lovia_store.db.schema import head_revision
from lovia_store.db.tables import VERSION_TABLE, metadata
from lovia_store.errors import LegacyTableError, SchemaConflictError

KINDS = ("sqlite", "postgres", "mariadb")


class Target:
    def __init__(self, kind: str, where: str) -> None:
        self.kind = kind
        self.where = where

    def session(self) -> SQLiteSession | SQLSession:
        if self.kind == "sqlite":
            return SQLiteSession(self.where)
        return SQLSession(self.where)

    async def run(self, *statements: str) -> list[list[tuple[object, ...]]]:
        """Run a host's statements (outside lovia-store); the rows each returned."""
        found: list[list[tuple[object, ...]]] = []
        if self.kind == "sqlite":
            with sqlite3.connect(self.where) as conn:
                for statement in statements:
                    found.append([tuple(row) for row in conn.execute(statement)])
            return found
        engine = create_async_engine(self.where)
        try:
            async with engine.begin() as conn:
                for statement in statements:
                    result = await conn.execute(text(statement))
                    found.append([tuple(r) for r in result] if result.returns_rows else [])
        finally:
            await engine.dispose()
        return found

    async def tables(self) -> dict[str, set[str]]:
        """Every table and its columns, as the database has them."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.where) as conn:
                names = [
                    row[0]
                    for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                ]
                return {
                    name: {row[1] for row in conn.execute(f'PRAGMA table_info("{name}")')}
                    for name in names
                    if not name.startswith("sqlite_")
                }
        engine = create_async_engine(self.where)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda sync: {
                        name: {c["name"] for c in inspect(sync).get_columns(name)}
                        for name in inspect(sync).get_table_names()
                    }
                )
        finally:
            await engine.dispose()

    async def indexes(self, table: str) -> set[str]:
        engine = create_async_engine(self._async_url())
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda sync: {str(ix["name"]) for ix in inspect(sync).get_indexes(table)}
                )
        finally:
            await engine.dispose()

    def _async_url(self) -> str:
        return f"sqlite+aiosqlite:///{self.where}" if self.kind == "sqlite" else self.where


@pytest.fixture(params=KINDS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    kind = request.param
    if kind == "sqlite":
        yield Target(kind, str(tmp_path / "host.sqlite3"))
        return
    async with fresh_server_database(kind) as url:
        yield Target(kind, url)


def _copies(folder: Path) -> list[Path]:
    return list(folder.glob("*before-lovia-store*"))


HOST_TABLES = (
    # lovia 0.9's and zett-agent's names, with a host's own columns.
    "CREATE TABLE session_runs (id INTEGER PRIMARY KEY, label VARCHAR(40) NOT NULL)",
    "CREATE TABLE snapshot_heads (run_id VARCHAR(40) PRIMARY KEY, state VARCHAR(40))",
    "CREATE TABLE snapshot_turns (run_id VARCHAR(40), seq INTEGER, note VARCHAR(40))",
    "CREATE TABLE agent_sessions (id VARCHAR(40) PRIMARY KEY, owner VARCHAR(40))",
    "CREATE TABLE raw_messages (id INTEGER PRIMARY KEY, body VARCHAR(40))",
    "CREATE TABLE session_snapshots (id INTEGER PRIMARY KEY, taken VARCHAR(40))",
    "INSERT INTO session_runs (id, label) VALUES (1, 'host run')",
    "INSERT INTO snapshot_heads (run_id, state) VALUES ('h1', 'ready')",
    "INSERT INTO raw_messages (id, body) VALUES (7, 'host message')",
)


async def test_host_tables_with_lovia_or_zett_names_are_the_hosts(
    target: Target, tmp_path: Path
) -> None:
    await target.run(*HOST_TABLES)
    before = await target.tables()
    for _ in range(2):  # and every later open too
        async with target.session() as store:
            await store.append("alice", a_run("1"), run_id="r1")
            assert [entry_to_dict(e) for e in await store.load("alice")] == [
                entry_to_dict(e) for e in a_run("1")
            ]
    after = await target.tables()
    assert {name: after[name] for name in before} == before  # the host's, as they were
    rows = await target.run(
        "SELECT id, label FROM session_runs",
        "SELECT run_id, state FROM snapshot_heads",
        "SELECT id, body FROM raw_messages",
    )
    assert rows == [[(1, "host run")], [("h1", "ready")], [(7, "host message")]]
    assert set(after) - set(before) == set(metadata.tables) | {VERSION_TABLE}
    assert not _copies(tmp_path)  # nothing converted, so no copy kept
    await check(target.where)


async def test_lovia_columns_without_lovia_schema_or_key(target: Target) -> None:
    """lovia 0.9's own columns, without its key and without the ``lovia_schema`` table its
    stores make: on a server (lovia writes only SQLite files) the host's table; in a
    SQLite file possibly lovia's history (lovia wrote its first files without the mark),
    so refused untouched rather than shown empty (test_legacy_unmarked.py adopts it)."""
    await target.run(
        "CREATE TABLE session_runs (id INTEGER PRIMARY KEY, session_id VARCHAR(40) NOT NULL, "
        "run_id VARCHAR(40) NOT NULL, entries_json TEXT NOT NULL, meta_json TEXT, "
        "created_at FLOAT NOT NULL)",
        "INSERT INTO session_runs VALUES (1, 'alice', 'host-run', '[]', NULL, 0)",
    )
    before = await target.tables()
    if target.kind == "sqlite":
        with pytest.raises(LegacyTableError, match="--adopt-lovia"):
            async with target.session() as store:
                await store.load("alice")
        assert await target.tables() == before
    else:
        async with target.session() as store:
            assert await store.load("alice") == []
    assert (await target.run("SELECT run_id FROM session_runs")) == [[("host-run",)]]


@pytest.mark.parametrize(
    "table", ["lovia_sessions", "lovia_messages", "lovia_run_leases", "lovia_contents"]
)
async def test_a_host_table_with_our_name_is_refused_naming_it(target: Target, table: str) -> None:
    await target.run(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, note VARCHAR(40))")
    before = await target.tables()
    for _ in range(2):
        with pytest.raises(SchemaConflictError) as caught:
            async with target.session() as store:
                await store.load("alice")
        assert caught.value.table == table
        assert repr(table) in str(caught.value)
        assert await target.tables() == before  # nothing created


# An object named as one our first migration creates late, so that it fails half-way:
# MariaDB's foreign key names are per database; PostgreSQL's and SQLite's index names are.
_CONFLICT = {
    "mariadb": (
        (
            "CREATE TABLE host_parent (id INTEGER PRIMARY KEY)",
            "CREATE TABLE host_child (pid INTEGER, CONSTRAINT "
            "fk_lovia_run_entries_run_id_lovia_run_heads FOREIGN KEY (pid) "
            "REFERENCES host_parent (id))",
        ),
        ("DROP TABLE host_child", "DROP TABLE host_parent"),
    ),
    "postgres": (
        (
            "CREATE TABLE host_t (a INTEGER)",
            "CREATE INDEX ix_lovia_run_heads_status_updated_at ON host_t (a)",
        ),
        ("DROP TABLE host_t",),
    ),
}
# A new SQLite file gets the current schema in one step, under the current names.
_CONFLICT["sqlite"] = (
    (
        "CREATE TABLE host_t (a INTEGER)",
        "CREATE INDEX ix_lovia_run_heads_tenant_status_updated_at ON host_t (a)",
    ),
    ("DROP TABLE host_t",),
)


async def test_a_first_migration_that_failed_half_way_is_finished_next_time(
    target: Target,
) -> None:
    create, remove = _CONFLICT[target.kind]
    await target.run(*create)
    with pytest.raises(LoviaStoreError) as caught:
        async with target.session() as store:
            await store.load("alice")
    assert getattr(caught.value, "retry_safe", False) is False
    left = await target.tables()
    if target.kind == "mariadb":
        # The failure this covers: DDL committed one statement at a time, no version row.
        assert {"lovia_sessions", "lovia_run_heads", VERSION_TABLE} <= set(left)
        assert "lovia_run_entries" not in left
        assert (await target.run(f"SELECT * FROM {VERSION_TABLE}")) == [[]]
    else:  # transactional DDL: nothing was left
        assert not {name for name in left if name.startswith("lovia_")}
    await target.run(*remove)
    async with target.session() as store:
        await store.append("alice", a_run("1"), run_id="r1")
        assert len(await store.load("alice")) == len(a_run("1"))
    await check(target.where)
    tables = await target.tables()
    for name, table in metadata.tables.items():
        assert tables[name] == {column.name for column in table.columns}, name
    for name, table in metadata.tables.items():
        wanted = {str(ix.name) for ix in table.indexes}
        assert wanted <= await target.indexes(name), name
    assert (await target.run(f"SELECT version_num FROM {VERSION_TABLE}")) == [[(head_revision(),)]]


CONVERT_CHILD = Path(__file__).with_name("convert_child.py")


def _first_open(where: str, *mode: str) -> subprocess.CompletedProcess[str]:
    """A process that opens ``where`` (migrating it), killed as ``mode`` says."""
    return subprocess.run(
        [sys.executable, str(CONVERT_CHILD), where, *mode],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _assert_at_head_and_usable(target: Target) -> None:
    async with target.session() as store:
        await store.append("alice", a_run("1"), run_id="r1")
        assert len(await store.load("alice")) == len(a_run("1"))
    await check(target.where)
    tables = await target.tables()
    for name, table in metadata.tables.items():
        assert tables[name] == {column.name for column in table.columns}, name
        assert {str(ix.name) for ix in table.indexes} <= await target.indexes(name), name


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.default_tier_on("sqlite", "mariadb")  # MariaDB: DDL that commits by itself
async def test_a_first_migration_killed_anywhere_is_finished_by_the_next_open(
    kind: str, tmp_path: Path
) -> None:
    """kill -9 before the Nth statement of a fresh database's first migration, at points
    spread over all of it: the next open (another process) finishes it."""
    async with contextlib.AsyncExitStack() as stack:

        async def fresh(name: str) -> Target:
            if kind == "sqlite":
                return Target(kind, str(tmp_path / f"{name}.sqlite3"))
            return Target(kind, await stack.enter_async_context(fresh_server_database(kind)))

        counted = _first_open((await fresh("count")).where, "count")
        assert counted.returncode == 0, counted.stderr
        statements = int(counted.stdout)
        points = sorted({2, statements // 4, statements // 2, 3 * statements // 4, statements - 1})
        for point in points if kind == "mariadb" else points[1::2]:
            target = await fresh(f"kill-{point}")
            killed = _first_open(target.where, "statement", str(point))
            assert killed.returncode == -9, (point, killed.stderr)
            await _assert_at_head_and_usable(target)
