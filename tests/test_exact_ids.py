"""Ids are exact on every backend: trailing or leading spaces, a tab or case make another id.

MariaDB's and MySQL's ``utf8mb4_bin`` is PAD SPACE (``'alice' = 'alice '``);
revision 0005 gives our tables a NO PAD binary collation. The behaviour is
checked through every public store on every backend; the collation itself in
``information_schema`` after a fresh upgrade (whatever the database's default
collation), after upgrading a database made at revision 0004, after a 0005
that stopped half way, and after a downgrade.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Table, text
from sqlalchemy import column as sa_column
from sqlalchemy import table as sa_table
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateTable
from sqlalchemy.sql.expression import TableClause

from backends import Backend, _mysql_admin, fresh_server_database
from helpers import call, result, say, user
from lovia_store import (
    Database,
    InMemoryCheckpointer,
    RunHead,
    Segment,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    entry_to_dict,
    upgrade,
)
from lovia_store.db import tables
from lovia_store.db.schema import alembic_config, head_revision
from lovia_store.db.tables import VERSION_TABLE, metadata
from lovia_store.db.types import MARIADB_ID_COLLATION, MYSQL_ID_COLLATION, Id, id_collation
from lovia_store.entries import entry_to_json

T = TypeVar("T")

VERSIONS = Path(__file__).resolve().parents[1] / "src" / "lovia_store" / "migrations" / "versions"

# One id and its near twins: trailing spaces (which PAD SPACE ignores), a leading
# space, tabs, another case.
SESSIONS = ("alice", "alice ", "alice  ", " alice", "\talice", "alice\t", "Alice")
RUNS = ("r1", "r1 ", "r1  ", " r1", "\tr1", "r1\t", "R1")

# Every id column, written out: the test's own list, checked against tables.py.
ID_COLUMNS = {
    ("lovia_sessions", "session_id"),
    ("lovia_sessions", "parent_session_id"),
    ("lovia_sessions", "forked_from_session_id"),
    ("lovia_messages", "session_id"),
    ("lovia_messages", "request_id"),
    ("lovia_messages", "run_id"),
    ("lovia_messages", "call_id"),
    ("lovia_messages", "idempotency_key"),
    ("lovia_session_runs", "session_id"),
    ("lovia_session_runs", "run_id"),
    ("lovia_snapshots", "session_id"),
    ("lovia_run_heads", "run_id"),
    ("lovia_run_heads", "session_id"),
    ("lovia_run_entries", "run_id"),
    ("lovia_tool_effects", "run_id"),
    ("lovia_tool_effects", "call_id"),
    ("lovia_run_leases", "run_id"),
}
# 0009's tenant: compared exactly like an id (TenantType is an IdType), on every table.
ADDED_BY_0009 = {
    (table, "tenant")
    for table in (
        "lovia_sessions",
        "lovia_messages",
        "lovia_session_runs",
        "lovia_snapshots",
        "lovia_run_heads",
        "lovia_run_entries",
        "lovia_tool_effects",
        "lovia_run_leases",
    )
}
ID_COLUMNS |= ADDED_BY_0009
# 0010's shared values: their tenant is compared like an id; their digest is hex (a plain
# String, collated as the table is).
ADDED_BY_0010 = {("lovia_contents", "tenant")}
ID_COLUMNS |= ADDED_BY_0010
TABLES_ADDED_BY_0010 = {"lovia_contents"}
ADDED_BY_0007 = {("lovia_sessions", "forked_from_session_id"), ("lovia_run_heads", "session_id")}
ADDED_BY_0008 = {("lovia_messages", "idempotency_key")}
ADDED_AFTER_0004 = {  # table: its columns revisions after 0004 added
    "lovia_sessions": {"forked_from_session_id", "forked_at_entry"},
    "lovia_run_heads": {"session_id"},
    "lovia_messages": {"idempotency_key"},
}
FOREIGN_KEYS = {
    "fk_lovia_messages_session_id_lovia_sessions": (
        "lovia_messages",
        "session_id",
        "lovia_sessions",
        "session_id",
    ),
    "fk_lovia_session_runs_session_id_lovia_sessions": (
        "lovia_session_runs",
        "session_id",
        "lovia_sessions",
        "session_id",
    ),
    "fk_lovia_snapshots_session_id_lovia_sessions": (
        "lovia_snapshots",
        "session_id",
        "lovia_sessions",
        "session_id",
    ),
    "fk_lovia_run_entries_run_id_lovia_run_heads": (
        "lovia_run_entries",
        "run_id",
        "lovia_run_heads",
        "run_id",
    ),
}
# From 0009 on, the tenant leads every foreign key (columns joined by commas).
TENANT_FOREIGN_KEYS = {
    f"fk_{table}_tenant_{parent}": (table, f"tenant,{column}", parent, f"tenant,{column}")
    for table, column, parent, _ in FOREIGN_KEYS.values()
}
OURS = sorted(set(metadata.tables))


def ours_at(revision: str | None) -> list[str]:
    """Our tables at ``revision`` (a later revision's table is not there yet)."""
    if revision is not None and revision < "0010":
        return [name for name in OURS if name not in TABLES_ADDED_BY_0010]
    return OURS


PAD_BIN = "utf8mb4_bin"

AnyCheckpointer = InMemoryCheckpointer | SQLCheckpointer


# -- what every backend does ----------------------------------------------------------------------


async def test_session_ids_that_differ_by_spaces_a_tab_or_case_are_separate_sessions(
    backend: Backend,
) -> None:
    async with backend.session() as store:
        for sid in SESSIONS:
            await store.append(sid, [user(f"from {sid!r}")], run_id="r")
        for sid in SESSIONS:
            assert await store.load(sid) == [user(f"from {sid!r}")]
            assert await store.segments(sid) == [Segment("r", [user(f"from {sid!r}")], None)]
        await store.clear("alice ")
        assert await store.load("alice ") == []
        assert await store.load("alice") == [user("from 'alice'")]
        assert await store.load("alice  ") == [user("from 'alice  '")]


async def test_run_ids_that_differ_by_spaces_a_tab_or_case_are_separate_runs(
    backend: Backend,
) -> None:
    """Each is its own idempotency key: ``'r1 '`` after ``'r1'`` is a new run, not a repeat."""
    async with backend.session() as store:
        for number, run_id in enumerate(RUNS):
            assert await store.append("s", [user(str(number))], run_id=run_id) == run_id
        for run_id in RUNS:  # and each repeat is recognised as its own
            assert await store.append("s", [user("again")], run_id=run_id) == run_id
        assert [s.run_id for s in await store.segments("s")] == list(RUNS)
        assert await store.load("s") == [user(str(n)) for n in range(len(RUNS))]


async def test_the_raw_log_keeps_sessions_and_request_ids_apart(sql_backend: Backend) -> None:
    async with sql_backend.storage() as store:
        for sid in SESSIONS:
            for request_id in ("q", "q ", "Q"):
                await store.append(sid, request_id, user(f"{sid!r} {request_id!r}"))
        for sid in SESSIONS:
            assert await store.count_messages(sid) == 3
            records = await store.list_raw_messages(sid)
            assert [(r.session_id, r.request_id, r.sequence) for r in records] == [
                (sid, "q", 1),
                (sid, "q ", 2),
                (sid, "Q", 3),
            ]
            view = await store.load(sid)
            assert [r.message for r in view.raw_tail] == [
                user(f"{sid!r} {q!r}") for q in ("q", "q ", "Q")
            ]
        listed = await store.list_sessions(limit=100)
        assert sorted(s.session_id for s in listed) == sorted(SESSIONS)

        assert await store.create_session(session_id="bob")
        assert (await store.create_session(session_id="bob ")).session_id == "bob "
        changed = await store.update_session("bob ", title="the other bob")
        assert changed is not None and changed.session_id == "bob "
        bob = await store.get_session("bob")
        assert bob is not None and bob.title is None
        assert await store.delete_session("alice ") is True
        assert await store.get_session("alice ") is None
        assert await store.count_messages("alice") == 3
        assert await store.count_messages("alice  ") == 3

    # Sessions the lovia API made are listed apart too.
    async with sql_backend.session() as session:
        await session.append("carol", [user("1")], run_id="r")
        await session.append("carol ", [user("2")], run_id="r")
    async with sql_backend.storage() as store:
        ids = {s.session_id for s in await store.list_sessions(limit=100)}
        assert {"carol", "carol "} <= ids
        assert await store.count_messages("carol ") == 1


async def test_checkpoint_run_ids_are_separate_checkpoints(backend: Backend) -> None:
    async with backend.checkpointer() as cp:
        for run_id in RUNS:
            await cp.append(run_id, [user(run_id)], RunHead(agent_name=f"agent {run_id!r}"))
        for run_id in RUNS:
            loaded = await cp.load(run_id)
            assert loaded is not None
            assert (loaded.run_id, loaded.entries, loaded.agent_name) == (
                run_id,
                [user(run_id)],
                f"agent {run_id!r}",
            )
        assert sorted(r.run_id for r in await cp.list_runs()) == sorted(RUNS)
        await cp.delete("r1 ")
        assert await cp.load("r1 ") is None
        kept = await cp.load("r1")
        assert kept is not None and kept.entries == [user("r1")]


async def test_tool_effects_and_leases_keep_ids_apart(backend: Backend) -> None:
    async with backend.checkpointer() as cp:
        for call_id in ("c1", "c1 ", " c1", "C1"):
            await cp.record_intent("run", call_id, f"tool for {call_id!r}")
        await cp.record_intent("run ", "c1", "the other run's tool")
        effects = await cp.tool_effects("run")
        assert {k: e.tool_name for k, e in effects.items()} == {
            "c1": "tool for 'c1'",
            "c1 ": "tool for 'c1 '",
            " c1": "tool for ' c1'",
            "C1": "tool for 'C1'",
        }
        assert list(await cp.tool_effects("run ")) == ["c1"]

        # One run's lease is not another's: none of these is "in progress" yet.
        leases = [await cp.acquire_lease(run_id, ttl=30) for run_id in RUNS]
        assert [lease.run_id for lease in leases] == list(RUNS)
        assert len({lease.lease_id for lease in leases}) == len(RUNS)
        for lease in leases:
            await cp.append(
                lease.run_id, [say("under lease")], RunHead(agent_name="a"), lease=lease
            )
            await cp.release_lease(lease)


# -- the collation on MySQL/MariaDB ---------------------------------------------------------------


@dataclass(frozen=True)
class Collations:
    revision: str | None
    tables: dict[str, str]
    columns: dict[tuple[str, str], str]
    foreign_keys: dict[str, tuple[str, str, str, str]]


async def on_connection(url: str, work: Callable[[Connection], T], *, write: bool = False) -> T:
    """``work`` on a plain engine: no schema gate, so a database below head is left as it is."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() if write else engine.connect() as conn:
            return await conn.run_sync(work)
    finally:
        await engine.dispose()


def _collations(conn: Connection) -> Collations:
    """Our tables' collations and foreign keys, as ``information_schema`` reports them."""
    here = "WHERE TABLE_SCHEMA = DATABASE()"
    table_rows = conn.execute(
        text(f"SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES {here}")
    ).all()
    column_rows = conn.execute(
        text(
            "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            f"{here} AND COLLATION_NAME IS NOT NULL"
        )
    ).all()
    key_rows = conn.execute(
        text(
            "SELECT CONSTRAINT_NAME, TABLE_NAME, COLUMN_NAME, REFERENCED_TABLE_NAME, "
            f"REFERENCED_COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE {here} "
            "AND REFERENCED_TABLE_NAME IS NOT NULL ORDER BY CONSTRAINT_NAME, ORDINAL_POSITION"
        )
    ).all()
    keys: dict[str, tuple[str, str, str, str]] = {}
    for name, t, c, rt, rc in key_rows:
        if name in keys:  # a column after the first of a composite key
            _, cs, _, rcs = keys[name]
            c, rc = f"{cs},{c}", f"{rcs},{rc}"
        keys[name] = (t, c, rt, rc)
    revision = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    return Collations(
        revision=revision,
        tables={name: value for name, value in table_rows if name in OURS},
        columns={(t, c): value for t, c, value in column_rows if t in OURS},
        foreign_keys={name: key for name, key in keys.items() if key[0] in OURS},
    )


async def collations(url: str) -> Collations:
    return await on_connection(url, _collations)


async def expected_collation(url: str) -> str:
    """The server's NO PAD binary collation, as lovia-store picks it for this dialect."""

    def pick(conn: Connection) -> str:
        chosen = id_collation(conn.dialect)
        assert chosen is not None
        return chosen

    return await on_connection(url, pick)


def assert_all(state: Collations, collation: str) -> None:
    assert state.tables == dict.fromkeys(ours_at(state.revision), collation)
    assert set(state.columns.values()) == {collation}
    expected = ID_COLUMNS
    if state.revision < "0010":
        expected = expected - ADDED_BY_0010
    if state.revision < "0009":
        expected = expected - ADDED_BY_0009
    if state.revision < "0008":
        expected = expected - ADDED_BY_0008
    if state.revision < "0007":
        expected = expected - ADDED_BY_0007
    assert set(state.columns) >= expected
    assert state.foreign_keys == (FOREIGN_KEYS if state.revision < "0009" else TENANT_FOREIGN_KEYS)


def differences(conn: Connection) -> list[Any]:
    """What autogenerate would change: our tables against the migrated database."""
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
    )
    return list(compare_metadata(context, metadata))


def alembic(url: str, name: str, revision: str) -> None:
    """Our ``alembic`` command line (``-x url=...``), in this thread."""
    cfg = alembic_config()
    cfg.cmd_opts = argparse.Namespace(x=[f"url={url}"])
    getattr(command, name)(cfg, revision)


async def run_alembic(url: str, name: str, revision: str) -> None:
    await asyncio.to_thread(alembic, url, name, revision)


@pytest.fixture
async def mysql_url() -> AsyncIterator[str]:
    """A fresh, empty database on the MySQL/MariaDB server (default collation utf8mb4_bin)."""
    async with fresh_server_database("mariadb") as url:
        yield url


async def set_default_collation(url: str, collation: str) -> None:
    """What a host may have done: another default for the database our tables go in."""
    charset = collation.split("_")[0]
    name = make_url(url).database
    await _mysql_admin(f"ALTER DATABASE `{name}` CHARACTER SET {charset} COLLATE {collation}")


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def history(sid: str) -> list[Any]:
    return [user(f"hi from {sid}"), say("hello")]


def _at_0004(table: Table) -> TableClause:
    """``table`` as 0004 had it: no tenant column (nor its server default, which would
    have SQLAlchemy ask for it back with RETURNING)."""
    return sa_table(table.name, *(sa_column(c.name) for c in table.columns if c.name != "tenant"))


def _write_0004_rows(conn: Connection) -> None:
    """Rows in every table, written as revision 0004's tables take them (no store: the
    stores would migrate first)."""
    owners = ("alice", "Alice")
    conn.execute(
        _at_0004(tables.sessions).insert(),
        [
            {
                "session_id": sid,
                "last_sequence": 2,
                "message_count": 2,
                "run_count": 1,
                "created_at": NOW,
                "updated_at": NOW,
            }
            for sid in owners
        ],
    )
    conn.execute(
        _at_0004(tables.messages).insert(),
        [
            {
                "session_id": sid,
                "sequence": number,
                "request_id": "r1",
                "run_id": "r1",
                "entry_type": entry.type,
                "call_id": None,
                "entry_json": entry_to_json(entry),
                "created_at": NOW,
            }
            for sid in owners
            for number, entry in enumerate(history(sid), start=1)
        ],
    )
    conn.execute(
        _at_0004(tables.session_runs).insert(),
        [
            {
                "session_id": sid,
                "run_id": "r1",
                "position": 1,
                "first_sequence": 1,
                "entry_count": 2,
                "meta_json": None,
                "created_at": NOW,
            }
            for sid in owners
        ],
    )
    conn.execute(
        _at_0004(tables.run_heads).insert(),
        {
            "run_id": "run-1",
            "status": "running",
            "head_json": RunHead(agent_name="a").model_dump_json(),
            "entry_count": 1,
            "created_at": NOW,
            "updated_at": NOW,
        },
    )
    conn.execute(
        _at_0004(tables.run_entries).insert(),
        {"run_id": "run-1", "position": 1, "entry_json": entry_to_json(user("step"))},
    )
    conn.execute(
        _at_0004(tables.tool_effects).insert(),
        {
            "run_id": "run-1",
            "call_id": "c1",
            "tool_name": "lookup",
            "started_at": NOW,
            "result_json": None,
        },
    )
    conn.execute(
        _at_0004(tables.run_leases).insert(),
        {"run_id": "run-1", "token": 1, "lease_id": "0" * 32, "holder": "h", "expires_ms": 0},
    )


def _padded_matches(conn: Connection) -> list[Any]:
    """What ``'alice '`` finds: alice's row under PAD SPACE, nothing once ids are exact."""
    query = text("SELECT session_id FROM lovia_sessions WHERE session_id = :sid")
    return list(conn.execute(query, {"sid": "alice "}).scalars())


def _rows(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables 0004 had, without the columns revisions after 0004 added
    (NULL in rows written at 0004), so a 0004 database's rows compare across upgrades."""

    def row(table: str, mapping: Any) -> tuple[Any, ...]:
        later = ADDED_AFTER_0004.get(table, set()) | {"tenant"}  # 0009: every table
        return tuple(value for key, value in mapping.items() if key not in later)

    return {
        name: sorted(
            (row(name, r._mapping) for r in conn.execute(text(f"SELECT * FROM {name}"))),
            key=repr,
        )
        for name in ours_at("0004")
    }


async def make_0004_database(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """A database our Alembic command brought to 0004, with rows; returns the rows."""
    await run_alembic(url, "upgrade", "0004")
    await on_connection(url, _write_0004_rows, write=True)
    state = await collations(url)
    assert state.revision == "0004"
    assert_all(state, PAD_BIN)
    assert await on_connection(url, _padded_matches) == ["alice"]  # the defect
    return await on_connection(url, _rows)


async def assert_exact_after_0004(url: str) -> None:
    """The stores on the upgraded 0004 database: its rows are there, its ids exact."""
    assert await on_connection(url, _padded_matches) == []
    async with SQLSession(url) as session:
        assert await session.load("alice") == history("alice")
        assert await session.load("Alice") == history("Alice")
        assert await session.load("alice ") == []
        assert await session.append("alice", [user("x")], run_id="r1 ") == "r1 "
        assert await session.append("alice", [user("y")], run_id="r1") == "r1"
        assert [s.run_id for s in await session.segments("alice")] == ["r1", "r1 "]
        await session.append("alice ", [user("z")], run_id="r1")
        assert await session.load("alice ") == [user("z")]
    async with SQLSessionStorage(url) as storage:
        assert await storage.count_messages("alice") == 3
        assert await storage.append("alice ", "q", user("w")) == 2
        assert {s.session_id for s in await storage.list_sessions()} == {
            "alice",
            "Alice",
            "alice ",
        }
    async with SQLCheckpointer(url) as cp:
        kept = await cp.load("run-1")
        assert kept is not None and kept.entries == [user("step")]
        assert await cp.load("run-1 ") is None
        assert list(await cp.tool_effects("run-1")) == ["c1"]
        await cp.record_intent("run-1", "c1 ", "lookup")
        assert sorted(await cp.tool_effects("run-1")) == ["c1", "c1 "]
        lease = await cp.acquire_lease("run-1 ", ttl=30)
        assert lease.run_id == "run-1 " and lease.token == 1


@pytest.mark.mysql
@pytest.mark.parametrize("default", [None, "utf8mb4_general_ci", "latin1_swedish_ci"])
async def test_a_fresh_database_gets_the_collation_whatever_its_default(
    mysql_url: str, default: str | None
) -> None:
    """Our tables carry their collation; the database's default (a host's) plays no part."""
    if default is not None:
        await set_default_collation(mysql_url, default)
    await upgrade(mysql_url)
    state = await collations(mysql_url)
    assert state.revision == head_revision()
    assert_all(state, await expected_collation(mysql_url))
    assert await on_connection(mysql_url, differences) == []
    async with SQLSession(mysql_url) as session:
        for sid in ("alice", "alice ", "ALICE", " alice"):
            await session.append(sid, [user(sid)], run_id="r")
        for sid in ("alice", "alice ", "ALICE", " alice"):
            assert await session.load(sid) == [user(sid)]


@pytest.mark.mysql
async def test_a_database_made_at_0004_keeps_its_rows_and_gets_exact_ids(mysql_url: str) -> None:
    before = await make_0004_database(mysql_url)
    await upgrade(mysql_url)
    state = await collations(mysql_url)
    assert state.revision == head_revision()
    assert_all(state, await expected_collation(mysql_url))
    assert await on_connection(mysql_url, _rows) == before
    assert await on_connection(mysql_url, differences) == []
    await assert_exact_after_0004(mysql_url)


@pytest.mark.mysql
async def test_a_0005_that_stopped_half_way_is_finished_by_the_next_upgrade(
    mysql_url: str,
) -> None:
    """Each DDL statement commits on its own: a failure leaves some of 0005 done at 0004."""
    before = await make_0004_database(mysql_url)
    collation = await expected_collation(mysql_url)

    def half_done(conn: Connection) -> None:
        for name, (table, *_) in FOREIGN_KEYS.items():
            conn.execute(text(f"ALTER TABLE {table} DROP FOREIGN KEY {name}"))
        for table in ("lovia_schema", "lovia_sessions", "lovia_messages"):
            conn.execute(
                text(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}")
            )

    await on_connection(mysql_url, half_done, write=True)
    state = await collations(mysql_url)
    assert (state.revision, state.foreign_keys) == ("0004", {})
    assert state.tables["lovia_sessions"] == collation != state.tables["lovia_session_runs"]

    await run_alembic(mysql_url, "upgrade", "0005")
    state = await collations(mysql_url)
    assert state.revision == "0005"
    assert_all(state, collation)
    assert await on_connection(mysql_url, _rows) == before

    # All of 0005 done but not recorded: running it again changes nothing.
    def forget_0005(conn: Connection) -> None:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '0004'"))

    await on_connection(mysql_url, forget_0005, write=True)
    await run_alembic(mysql_url, "upgrade", "0005")
    assert await collations(mysql_url) == state
    assert await on_connection(mysql_url, _rows) == before

    await upgrade(mysql_url)
    state = await collations(mysql_url)
    assert state.revision == head_revision()
    assert_all(state, collation)
    assert await on_connection(mysql_url, _rows) == before
    assert await on_connection(mysql_url, differences) == []
    await assert_exact_after_0004(mysql_url)


@pytest.mark.mysql
async def test_a_host_foreign_key_into_our_tables_is_refused_before_anything_changes(
    mysql_url: str,
) -> None:
    await make_0004_database(mysql_url)

    def host_table(conn: Connection) -> None:
        conn.execute(
            text(
                "CREATE TABLE host_tickets (id INT PRIMARY KEY, agent_session_id VARCHAR(255), "
                "CONSTRAINT host_tickets_session FOREIGN KEY (agent_session_id) "
                "REFERENCES lovia_sessions (session_id)) "
                "DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
            )
        )

    await on_connection(mysql_url, host_table, write=True)
    before = await collations(mysql_url)
    with pytest.raises(RuntimeError, match=r"host_tickets_session of .*host_tickets"):
        await upgrade(mysql_url)
    assert await collations(mysql_url) == before


@pytest.mark.mysql
async def test_the_downgrade_restores_utf8mb4_bin_unless_it_would_merge_ids(
    mysql_url: str,
) -> None:
    collation = await expected_collation(mysql_url)
    await upgrade(mysql_url)
    async with SQLSession(mysql_url) as session:
        await session.append("alice", history("alice"), run_id="r1")

    await run_alembic(mysql_url, "downgrade", "0004")
    state = await collations(mysql_url)
    assert state.revision == "0004"
    assert_all(state, PAD_BIN)
    assert await on_connection(mysql_url, _padded_matches) == ["alice"]

    await upgrade(mysql_url)
    assert_all(await collations(mysql_url), collation)
    async with SQLSession(mysql_url) as session:
        await session.append("alice ", [user("the other alice")], run_id="r1")
    # The revisions after 0005 step down first (each its own, DDL commits at once on
    # MariaDB); 0005's own step then refuses before it changes anything.
    await run_alembic(mysql_url, "downgrade", "0005")
    before = await collations(mysql_url)
    with pytest.raises(RuntimeError, match="lovia_sessions holds keys that differ only by"):
        await run_alembic(mysql_url, "downgrade", "0004")
    assert await collations(mysql_url) == before
    assert before.revision == "0005"


# -- the pieces, without a server -----------------------------------------------------------------


def test_each_server_gets_its_no_pad_binary_collation() -> None:
    assert id_collation(mysql.dialect(is_mariadb=True)) == MARIADB_ID_COLLATION
    assert MARIADB_ID_COLLATION == "utf8mb4_nopad_bin"
    assert id_collation(mysql.dialect()) == MYSQL_ID_COLLATION == "utf8mb4_0900_bin"
    assert id_collation(postgresql.dialect()) is None
    assert id_collation(sqlite.dialect()) is None


@pytest.mark.parametrize(
    ("dialect", "column"),
    [
        (mysql.dialect(is_mariadb=True), "VARCHAR(255) COLLATE utf8mb4_nopad_bin NOT NULL"),
        (mysql.dialect(), "VARCHAR(255) COLLATE utf8mb4_0900_bin NOT NULL"),
        (postgresql.dialect(), "VARCHAR(255) NOT NULL"),
        (sqlite.dialect(), "VARCHAR(255) NOT NULL"),
    ],
)
def test_the_tables_describe_id_columns_with_that_collation(dialect: Any, column: str) -> None:
    ddl = str(CreateTable(tables.run_leases).compile(dialect=dialect))
    assert f"run_id {column}" in ddl
    assert "holder VARCHAR(255) NOT NULL" in ddl  # not an id: no collation of its own


def test_the_id_columns_are_those_tables_py_types_as_ids() -> None:
    typed = {
        (table.name, column.name)
        for table in metadata.tables.values()
        for column in table.columns
        if isinstance(column.type, type(Id))
    }
    assert typed == ID_COLUMNS


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"revision_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_revision_0005_is_frozen_and_agrees_with_the_tables() -> None:
    """It imports nothing of ours (it must not change when the code does), and what it
    writes out is what tables.py describes."""
    (path,) = VERSIONS.glob("0005_*.py")
    tree = ast.parse(path.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {str(n.module) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] == "lovia_store"}

    revision = _load(path)
    assert (revision.revision, revision.down_revision) == ("0005", "0004")
    assert (revision.MARIADB_COLLATION, revision.MYSQL_COLLATION) == (
        MARIADB_ID_COLLATION,
        MYSQL_ID_COLLATION,
    )
    assert revision.PREVIOUS_COLLATION == PAD_BIN
    assert set(revision.TABLES) <= set(metadata.tables)
    assert revision.FOREIGN_KEYS == FOREIGN_KEYS
    # tables.py has moved on (0009's tenant leads every key): 0005 agrees with 0008's
    # keys, which 0009 writes out as what it rebuilds.
    (later,) = VERSIONS.glob("0009_*.py")
    keys_0008 = _load(later)
    declared = {
        name: (table, columns[0], parent, parent_columns[0])
        for name, (table, columns, parent, parent_columns) in keys_0008.OLD_FOREIGN_KEYS.items()
    }
    assert declared == FOREIGN_KEYS
    # Parents are converted before the tables whose keys reference them.
    order = list(revision.TABLES)
    assert all(
        order.index(parent) < order.index(child) for child, _, parent, _ in declared.values()
    )
    for table in revision.TABLES:
        key = keys_0008.KEYS.get(table, ("store",))
        assert (*(("tenant",) if table != "lovia_schema" else ()), *key) == tuple(
            c.name for c in metadata.tables[table].primary_key.columns
        )
        assert revision.PRIMARY_KEYS[table] == key
        integers = {c for c in key if c in revision.INTEGER_COLUMNS}
        assert integers == {c for c in key if (table, c) not in ID_COLUMNS and c != "store"}


async def test_the_other_backends_need_no_migration_step(tmp_path: Path) -> None:
    """SQLite compares text exactly already: 0005 leaves its tables as 0004 made them."""
    path = tmp_path / "s.sqlite3"
    await upgrade(path)
    async with Database(path) as db:
        assert await db.read(differences) == []
    async with SQLSession(path) as session:
        await session.append("alice", [call("c"), result("c")], run_id="r")
        assert await session.load("alice ") == []
        assert [entry_to_dict(e)["type"] for e in await session.load("alice")] == [
            "tool_call",
            "tool_result",
        ]
