"""Tenants on lovia's session store: two tenants on ONE Database, the same ids, kept apart.

Stores of tenants ``a`` and ``b`` (and of the default tenant) share one Database (one
pool) and use the same session ids and run ids. Every public method of ``SQLSession``
must see and change only its own tenant's rows: each test takes the other tenant's rows
as a value before, runs the method, and finds them unchanged after. The default tenant
behaves as it always did. Every SQL backend (SQLite, PostgreSQL through asyncpg and
psycopg, MariaDB); the in-memory store's tenant is checked and kept.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, select

from backends import Backend
from helpers import a_run, call, say, user
from lovia_store import (
    Database,
    ForkOrigin,
    InMemorySession,
    RunHead,
    Segment,
    SQLCheckpointer,
    SQLiteSession,
    SQLSession,
    UserError,
)
from lovia_store.db.tables import messages, session_runs, sessions, snapshots
from lovia_store.db.types import utcnow
from lovia_store.entries import MULTIPLE_ENTRIES, TranscriptEntry, entries_document
from lovia_store.sessions.log import append_message
from lovia_store.testing import SESSION_CASES, run_cases

TABLES = (sessions, messages, session_runs, snapshots)
Rows = dict[str, list[tuple[Any, ...]]]


@dataclass
class Tenants:
    """One Database and a session store of each tenant on it."""

    database: Database
    target: str
    a: SQLSession
    b: SQLSession
    default: SQLSession

    async def rows(self, tenant: str) -> Rows:
        """Every row of ``tenant`` in the session tables, in key order."""

        def work(conn: Connection) -> Rows:
            return {
                table.name: [
                    tuple(row)
                    for row in conn.execute(
                        select(table)
                        .where(table.c.tenant == tenant)
                        .order_by(*table.primary_key.columns)
                    ).all()
                ]
                for table in TABLES
            }

        return await self.database.read(work)


@pytest.fixture
async def tenants(sql_backend: Backend) -> AsyncIterator[Tenants]:
    assert sql_backend.target is not None
    async with Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal") as database:
        yield Tenants(
            database,
            sql_backend.target,
            SQLSession(database, tenant="a"),
            SQLSession(database, tenant="b"),
            SQLSession(database),
        )


def runs_of(tag: str, *, output: str = "ok") -> list[tuple[str, list[TranscriptEntry]]]:
    """Three runs under the same run ids in every tenant, their entries tagged."""
    return [(f"r{i}", a_run(f"{tag}{i}", output=output)) for i in range(1, 4)]


async def fill(store: SQLSession, tag: str, *, output: str = "ok") -> list[TranscriptEntry]:
    """Sessions ``s`` and ``other`` of the store's tenant; returns the entries of ``s``."""
    entries: list[TranscriptEntry] = []
    for run_id, run in runs_of(tag, output=output):
        await store.append("s", run, run_id=run_id, meta={"tenant": store.tenant, "run": run_id})
        entries += run
    await store.append("other", [user(f"other {tag}")], run_id="r1")
    return entries


async def add_snapshot(database: Database, tenant: str, session_id: str, through: int) -> None:
    """A compaction snapshot of the session covering its first ``through`` sequences."""
    now = utcnow()

    def work(conn: Connection) -> None:
        conn.execute(
            snapshots.insert().values(
                tenant=tenant,
                session_id=session_id,
                version=1,
                snapshot_id=f"snap-{tenant}",
                compacted_through_sequence=through,
                summary_json='{"summary": "so far"}',
                created_at=now,
                updated_at=now,
            )
        )
        conn.execute(
            sessions.update()
            .where(sessions.c.tenant == tenant, sessions.c.session_id == session_id)
            .values(snapshot_version=1)
        )

    await database.write(work)


async def add_message_row(
    database: Database, tenant: str, session_id: str, entries: list[TranscriptEntry]
) -> None:
    """One Raw Log row of ``tenant``: one entry, or several (as a zett-agent message)."""
    row: dict[str, Any] = {
        column.name: None
        for column in messages.columns
        if column.name not in ("tenant", "sequence", "created_at", "updated_at")
    }
    row.update(
        session_id=session_id,
        request_id="zett-request",
        entry_type=MULTIPLE_ENTRIES if len(entries) > 1 else entries[0].type,
        entry_json=entries_document(entries),
    )

    def work(conn: Connection) -> None:
        append_message(conn, tenant, session_id, row, create={})

    await database.write(work)


# -- reading and appending --------------------------------------------------------------------


async def test_the_same_ids_in_two_tenants_are_two_sessions(tenants: Tenants) -> None:
    a_entries = await fill(tenants.a, "a")
    b_entries = await fill(tenants.b, "b")
    for store, tag, entries in ((tenants.a, "a", a_entries), (tenants.b, "b", b_entries)):
        assert await store.load("s") == entries
        assert await store.segments("s") == [
            Segment(run_id, run, {"tenant": store.tenant, "run": run_id})
            for run_id, run in runs_of(tag)
        ]
        assert [entry async for entry in store.iter_entries("s", batch=2)] == entries
        assert await store.load("other") == [user(f"other {tag}")]
        assert len(await store.load_documents("s")) == len(entries)
        assert await store.fork_origin("s") is None
    # The default tenant has none of them.
    assert await tenants.default.load("s") == []
    assert await tenants.default.segments("s") == []
    assert [entry async for entry in tenants.default.iter_entries("s")] == []
    # Each tenant's sequences are its own: 1..12 in both.
    for tenant in ("a", "b"):
        rows = (await tenants.rows(tenant))["lovia_messages"]
        assert [row[2] for row in rows if row[1] == "s"] == list(range(1, 13))


async def test_append_is_idempotent_by_run_id_within_a_tenant_only(tenants: Tenants) -> None:
    await tenants.a.append("s", a_run("a"), run_id="r", meta={"v": "a"})
    # The same run id in another tenant is another run: stored, not a no-op.
    await tenants.b.append("s", a_run("b"), run_id="r", meta={"v": "b"})
    # Again in each tenant: the no-op (on PostgreSQL the one-statement append fails
    # on the run key and is recognised as stored).
    assert await tenants.a.append("s", a_run("x"), run_id="r") == "r"
    assert await tenants.b.append("s", a_run("y"), run_id="r") == "r"
    assert await tenants.a.segments("s") == [Segment("r", a_run("a"), {"v": "a"})]
    assert await tenants.b.segments("s") == [Segment("r", a_run("b"), {"v": "b"})]


async def test_concurrent_appends_to_the_same_ids_in_two_tenants(tenants: Tenants) -> None:
    async def appends(store: SQLSession) -> None:
        for i in range(5):
            await store.append("s", [user(f"{store.tenant}{i}")], run_id=f"r{i}")

    await asyncio.gather(appends(tenants.a), appends(tenants.b), appends(tenants.default))
    for store in (tenants.a, tenants.b, tenants.default):
        assert await store.load("s") == [user(f"{store.tenant}{i}") for i in range(5)]


async def test_a_session_of_another_tenant_is_unknown(tenants: Tenants) -> None:
    """Every public call with ids only tenant b holds: b's rows seen by none, changed by none."""
    await fill(tenants.b, "b", output="x" * 3000)
    await add_snapshot(tenants.database, "b", "s", 4)
    before = await tenants.rows("b")
    for store in (tenants.a, tenants.default):
        assert await store.load("s") == []
        assert await store.load_documents("s") == []
        assert await store.segments("s") == []
        assert [entry async for entry in store.iter_entries("s")] == []
        assert await store.fork_origin("s") is None
        assert await store.trim_tool_results("s", keep_chars=10, keep_runs=0) == 0
        assert await store.rewind("s", keep_entries=0) == 0
        with pytest.raises(UserError, match="does not exist"):
            await store.fork("s", "copy", keep_entries=0)
        await store.clear("s")
        await store.clear("other")
    assert await tenants.rows("b") == before
    assert await tenants.rows("a") == await tenants.rows("") == {t.name: [] for t in TABLES}


# -- edits ------------------------------------------------------------------------------------


async def test_clear_deletes_only_its_own_tenant(tenants: Tenants) -> None:
    await fill(tenants.a, "a")
    b_entries = await fill(tenants.b, "b")
    await add_snapshot(tenants.database, "a", "s", 4)
    await add_snapshot(tenants.database, "b", "s", 4)
    before = await tenants.rows("b")
    await tenants.a.clear("s")
    assert await tenants.a.load("s") == []
    assert await tenants.a.load("other") == [user("other a")]
    assert not [row for row in (await tenants.rows("a"))["lovia_snapshots"]]
    assert await tenants.rows("b") == before
    # b's counters are intact: its next append continues its sequences.
    await tenants.b.append("s", [say("more")], run_id="r4")
    assert await tenants.b.load("s") == [*b_entries, say("more")]
    # a's session starts over, its run ids free again.
    await tenants.a.append("s", a_run("new"), run_id="r1")
    assert await tenants.a.segments("s") == [Segment("r1", a_run("new"), None)]


async def test_trim_changes_only_its_own_tenant(tenants: Tenants) -> None:
    await fill(tenants.a, "a", output="y" * 3000)
    await fill(tenants.b, "b", output="y" * 3000)
    before = await tenants.rows("b")
    assert await tenants.a.trim_tool_results("s", keep_chars=100, keep_runs=1) == 2
    assert await tenants.a.trim_tool_results("s", keep_chars=100, keep_runs=1) == 0
    trimmed = await tenants.a.load("s")
    assert trimmed[2].type == "tool_result" and len(trimmed[2].output) < 400
    assert await tenants.rows("b") == before
    # b trims its own, as a did: the same outputs shortened, its own call ids kept.
    assert await tenants.b.trim_tool_results("s", keep_chars=100, keep_runs=1) == 2
    b_trimmed = await tenants.b.load("s")
    assert [(e.type, getattr(e, "output", None)) for e in b_trimmed if e.type == "tool_result"] == [
        (e.type, e.output.replace("c-a", "c-b")) for e in trimmed if e.type == "tool_result"
    ]


async def test_rewind_changes_only_its_own_tenant(tenants: Tenants) -> None:
    a_entries = await fill(tenants.a, "a")
    b_entries = await fill(tenants.b, "b")
    await add_snapshot(tenants.database, "a", "s", 8)
    await add_snapshot(tenants.database, "b", "s", 8)
    before = await tenants.rows("b")
    # Inside r2 (keep its question, call and result): r2 truncated, r3 gone.
    assert await tenants.a.rewind("s", keep_entries=7) == 5
    assert await tenants.a.load("s") == a_entries[:7]
    assert [s.run_id for s in await tenants.a.segments("s")] == ["r1", "r2"]
    assert (await tenants.rows("a"))["lovia_snapshots"] == []  # it covered a removed entry
    assert await tenants.rows("b") == before
    assert await tenants.b.load("s") == b_entries
    # a's run ids r3 is free again in a; in b it is still stored.
    await tenants.a.append("s", [say("again")], run_id="r3")
    assert await tenants.a.load("s") == [*a_entries[:7], say("again")]
    assert await tenants.b.append("s", [say("ignored")], run_id="r3") == "r3"
    assert await tenants.b.load("s") == b_entries
    assert await tenants.b.rewind("s", keep_entries=0) == 12
    assert await tenants.a.load("s") == [*a_entries[:7], say("again")]


async def test_rewind_inside_a_multi_entry_row_changes_only_its_own_tenant(
    tenants: Tenants,
) -> None:
    """The rows a zett-agent message leaves (several entries in one row) are cut by tenant."""
    for tenant in ("a", "b"):
        entries: list[TranscriptEntry] = [
            say(f"{tenant} thinks"),
            call(f"c-{tenant}"),
            say(f"{tenant} done"),
        ]
        await add_message_row(tenants.database, tenant, "z", [user(f"q {tenant}")])
        await add_message_row(tenants.database, tenant, "z", entries)
    before = await tenants.rows("b")
    # Keep the question and the first entry of the second row: the dangling call goes.
    assert await tenants.a.rewind("z", keep_entries=2) == 2
    assert await tenants.a.load("z") == [user("q a"), say("a thinks")]
    assert await tenants.rows("b") == before
    assert await tenants.b.load("z") == [
        user("q b"),
        say("b thinks"),
        call("c-b"),
        say("b done"),
    ]


async def test_fork_stays_within_one_tenant(tenants: Tenants) -> None:
    a_entries = await fill(tenants.a, "a")
    b_entries = await fill(tenants.b, "b")
    await add_snapshot(tenants.database, "b", "s", 4)
    before = await tenants.rows("b")
    assert await tenants.a.fork("s", "f", keep_entries=6) == 5
    assert await tenants.a.load("f") == [*a_entries[:4], a_entries[4]]
    assert await tenants.a.fork_origin("f") == ForkOrigin("s", 6)
    assert await tenants.rows("b") == before
    assert await tenants.b.load("f") == []
    assert await tenants.b.fork_origin("f") is None
    # "f" exists in a only: b may fork to it, from its own session, with its snapshot.
    assert await tenants.b.fork("s", "f", keep_entries=12) == 12
    assert await tenants.b.load("f") == b_entries
    assert await tenants.b.fork_origin("f") == ForkOrigin("s", 12)
    assert [row[1:3] for row in (await tenants.rows("b"))["lovia_snapshots"]] == [
        ("f", 1),
        ("s", 1),
    ]
    assert await tenants.a.load("f") == [*a_entries[:4], a_entries[4]]
    # A new id that exists in its own tenant is refused, and changes nothing.
    a_before = await tenants.rows("a")
    with pytest.raises(UserError, match="already exists"):
        await tenants.a.fork("s", "other", keep_entries=0)
    assert await tenants.rows("a") == a_before


async def test_rewind_refuses_a_checkpointer_of_another_tenant(tenants: Tenants) -> None:
    """The runs a rewind touches are its tenant's: another tenant's checkpointer is refused
    before anything changes."""

    class OtherTenantCheckpointer:
        tenant = "b"

        def __init__(self) -> None:
            self.deleted: list[str] = []

        async def delete(self, run_id: str) -> None:
            self.deleted.append(run_id)

    a_entries = await fill(tenants.a, "a")
    other = OtherTenantCheckpointer()
    with pytest.raises(UserError, match="tenant"):
        await tenants.a.rewind("s", keep_entries=0, checkpointer=other)  # type: ignore[arg-type]
    assert await tenants.a.load("s") == a_entries and other.deleted == []
    memory = InMemorySession(tenant="a")
    with pytest.raises(UserError, match="tenant"):
        await memory.rewind("s", keep_entries=0, checkpointer=other)  # type: ignore[arg-type]


async def test_rewind_deletes_only_its_own_tenant_s_checkpoints(tenants: Tenants) -> None:
    """With a checkpointer of its tenant on the same Database (the deletes join the rewind's
    transaction) or on another one (through ``delete``): the same run ids' checkpoints of
    the other tenant stay."""
    database = tenants.database
    checkpointers = {t: SQLCheckpointer(database, tenant=t) for t in ("a", "b")}
    for tenant, cp in checkpointers.items():
        for run_id, run in runs_of(tenant):
            await cp.append(run_id, run, RunHead(agent_name="agent", status="completed"))
    await fill(tenants.a, "a")
    await fill(tenants.b, "b")

    async def remaining(cp: SQLCheckpointer) -> list[str]:
        return [r for r in ("r1", "r2", "r3") if await cp.load(r) is not None]

    # Inside r2: r2 truncated, r3 deleted, and their checkpoints with them.
    assert await tenants.a.rewind("s", keep_entries=6, checkpointer=checkpointers["a"]) == 7
    assert await remaining(checkpointers["a"]) == ["r1"]
    assert await remaining(checkpointers["b"]) == ["r1", "r2", "r3"]
    # A checkpointer of b on another Database object: deleted through its own tenant.
    async with SQLCheckpointer(tenants.target, tenant="b") as elsewhere:
        assert await tenants.b.rewind("s", keep_entries=0, checkpointer=elsewhere) == 12
    assert await remaining(checkpointers["b"]) == []
    assert await remaining(checkpointers["a"]) == ["r1"]


async def test_the_whole_session_contract_holds_in_tenants_beside_the_same_ids(
    tenants: Tenants,
) -> None:
    """Every shipped session case, each on a store of a tenant of its own on the shared
    Database, while the default tenant and tenant ``a`` hold sessions and runs under the
    ids the cases use: any leak across tenants would show as a case failing."""
    for store in (tenants.default, tenants.a):
        for session_id in ("s", "a", "b", "anna", "Anna", "keep", "nobody", "f", "fork"):
            await store.append(session_id, [user(f"noise {store.tenant}")], run_id="r1")
            await store.append(session_id, a_run("noise"), run_id="r2", meta={"n": 1})
    before = {tenant: await tenants.rows(tenant) for tenant in ("", "a")}
    count = itertools.count()

    def make() -> SQLSession:
        return SQLSession(tenants.database, tenant=f"case-{next(count)}")

    assert await run_cases(SESSION_CASES, make) == next(count)
    for tenant, rows in before.items():
        assert await tenants.rows(tenant) == rows


# -- the default tenant, and where a store's tenant comes from ------------------------------------


async def test_the_default_tenant_is_the_empty_one(tenants: Tenants) -> None:
    assert tenants.default.tenant == ""
    await tenants.default.append("s", a_run("1"), run_id="r1")
    explicit = SQLSession(tenants.database, tenant="")
    assert await explicit.segments("s") == [Segment("r1", a_run("1"), None)]
    rows = await tenants.rows("")
    assert {row[0] for table in rows.values() for row in table} == {""}
    assert repr(tenants.default) == f"SQLSession({tenants.database.url!r})"
    assert "tenant='a'" in repr(tenants.a)


async def test_a_store_takes_the_database_s_tenant_unless_given_one(tmp_path: Path) -> None:
    async with Database(str(tmp_path / "t.sqlite3"), tenant="a") as database:
        inherited, own = SQLSession(database), SQLSession(database, tenant="b")
        assert (inherited.tenant, own.tenant) == ("a", "b")
        await inherited.append("s", [user("a")], run_id="r")
        await own.append("s", [user("b")], run_id="r")
        assert await SQLSession(database, tenant="a").load("s") == [user("a")]
        assert await SQLSession(database, tenant="").load("s") == []


async def test_sqlite_session_takes_a_tenant(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    async with SQLiteSession(path, tenant="a") as a, SQLiteSession(path, wal=False) as default:
        await a.append("s", [user("a")], run_id="r")
        assert a.tenant == "a" and default.tenant == ""
        assert await default.load("s") == []
        assert await a.load("s") == [user("a")]


@pytest.mark.parametrize("tenant", [5, "t" * 65, "t\x00", "\ud800"])
async def test_a_tenant_no_backend_can_store_is_refused(tmp_path: Path, tenant: Any) -> None:
    with pytest.raises(UserError, match="tenant"):
        SQLiteSession(tmp_path / "never.sqlite3", tenant=tenant)
    assert not (tmp_path / "never.sqlite3").exists()  # refused before a Database opened
    with pytest.raises(UserError, match="tenant"):
        InMemorySession(tenant=tenant)


async def test_the_in_memory_store_keeps_its_tenant() -> None:
    assert InMemorySession().tenant == ""
    store = InMemorySession(tenant="a" * 64)
    assert store.tenant == "a" * 64
    await store.append("s", [user("q")], run_id="r")
    assert await store.load("s") == [user("q")]
    assert await InMemorySession(tenant="a" * 64).load("s") == []  # each store its own
