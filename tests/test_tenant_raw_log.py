"""The Raw Log API and the zett drop-in, two tenants on one Database with the same ids.

Tenant ``acme`` fills a session; ``beta``'s store, on the same Database (one pool),
is then given ``acme``'s very ids (session, parent, idempotency key) through every
public method: it sees nothing of ``acme``'s and changes nothing of it. ``beta``
then writes under the same ids, the same key included, and each tenant reads back
only its own; the default tenant sees neither and keeps today's behaviour. A keyed
append whose COMMIT reply is lost is settled within its own tenant. On SQLite
(both journals), PostgreSQL (asyncpg and psycopg) and MariaDB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from zett_agent.extensions.compaction import CompactedMessage as ZettCompacted
from zett_agent.messages import AssistantMessage, UserMessage

from backends import SQLITE_KINDS, Backend
from helpers import commit_lost, say, user
from lovia_store import (
    CompactedMessage,
    Database,
    SessionView,
    SnapshotConflictError,
    SQLiteSessionStorage,
    SQLSessionStorage,
    UserError,
)
from lovia_store.integrations import zett
from lovia_store.sessions.raw_log.appends import PendingMessage

A, B = "acme", "beta"
S, OTHER, PARENT, KEY = "s-1", "s-2", "p-1", "pay-1"


@pytest.fixture
async def db(sql_backend: Backend) -> AsyncIterator[Database]:
    """One Database on the backend, shared by the stores of every tenant."""
    assert sql_backend.target is not None
    async with Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal") as database:
        yield database


async def seen(store: SQLSessionStorage) -> dict[str, Any]:
    """Everything ``store`` shows of session ``S`` and its tenant's list."""
    return {
        "summary": await store.get_session(S),
        "count": await store.count_messages(S),
        "messages": await store.list_raw_messages(S),
        "page": await store.list_raw_messages(S, offset=1, limit=2),
        "view": await store.load(S),
        "listed": await store.list_sessions(),
    }


async def fill(store: SQLSessionStorage) -> None:
    """A session with a parent, a keyed message (not the first) and a snapshot; another."""
    await store.create_session(
        session_id=S, parent_session_id=PARENT, title="A's", agent_name="alpha", session_type=2
    )
    assert await store.append(S, "q1", user("a1"), parent_session_id=PARENT) == 1
    assert (
        await store.append(S, "q2", say("a2"), parent_session_id=PARENT, idempotency_key=KEY) == 2
    )
    assert await store.append(S, "q3", user("a3"), parent_session_id=PARENT) == 3
    await store.snapshot(S, CompactedMessage(content="a summary"), 1, 0)
    await store.append(OTHER, "q", user("other"))


async def test_another_tenant_with_the_same_ids_sees_and_changes_nothing(db: Database) -> None:
    a, b = SQLSessionStorage(db, tenant=A), SQLSessionStorage(db, tenant=B)
    default = SQLSessionStorage(db)
    assert (a.tenant, b.tenant, default.tenant) == (A, B, "")
    await fill(a)
    before = await seen(a)

    assert await b.get_session(S) is None
    assert await b.count_messages(S) == 0
    assert await b.list_raw_messages(S) == []
    assert await b.list_raw_messages(S, offset=1) == []
    assert await b.list_raw_messages(S, after_sequence=1, through_sequence=3) == []
    assert await b.load(S) == SessionView()
    assert await b.list_sessions() == []
    assert await b.list_sessions(session_types=[2]) == []
    assert await b.update_session(S, title="b's") is None
    assert await b.delete_session(S) is False
    assert await b.delete_session(OTHER) is False
    with pytest.raises(UserError, match="no raw messages"):
        await b.snapshot(S, CompactedMessage(content="b"), 1, 0)
    with pytest.raises(SnapshotConflictError):
        await b.snapshot(S, CompactedMessage(content="b"), 2, 1)
    for store in (b, default):
        assert await store.list_sessions() == []
        assert await store.get_session(S) is None
    assert await seen(a) == before

    # The same ids are free in b: a's session neither exists here nor lends its parent.
    made = await b.create_session(session_id=S, title="B's")
    assert (made.parent_session_id, made.message_count) == (None, 0)
    with pytest.raises(UserError, match="already exists"):
        await a.create_session(session_id=S)
    assert await b.append(S, "q1", say("b1"), idempotency_key=KEY) == 1
    assert await b.append(S, "q1", say("b1, re-issued"), idempotency_key=KEY) == 1
    assert await a.append(S, "q2", say("a2, re-issued"), idempotency_key=KEY) == 2  # as stored
    assert await b.append(S, "q2", user("b2")) == 2
    with pytest.raises(UserError, match="parent"):
        await b.append(S, "q3", user("b3"), parent_session_id=PARENT)
    snapshot = await b.snapshot(S, CompactedMessage(content="b summary"), 1, 0)
    assert (snapshot.version, snapshot.session_id) == (1, S)
    with pytest.raises(SnapshotConflictError):
        await a.snapshot(S, CompactedMessage(content="a late"), 2, 0)

    summary = await b.get_session(S)
    assert summary is not None
    assert (summary.title, summary.parent_session_id, summary.message_count) == ("B's", None, 2)
    assert await b.count_messages(S) == 2
    assert [r.message for r in await b.list_raw_messages(S)] == [say("b1"), user("b2")]
    assert [r.sequence for r in await b.list_raw_messages(S, offset=1)] == [2]
    assert [r.sequence for r in await b.list_raw_messages(S, after_sequence=1)] == [2]
    assert (await b.load(S)).messages == [CompactedMessage(content="b summary"), user("b2")]
    assert [s.session_id for s in await b.list_sessions()] == [S]
    assert await b.list_sessions(session_types=[2]) == []
    changed = await b.update_session(S, agent_name="bravo")
    assert changed is not None and changed.agent_name == "bravo"
    assert await seen(a) == before
    assert await default.list_sessions() == []

    assert await b.delete_session(S) is True
    assert await b.get_session(S) is None
    assert await seen(a) == before
    assert await a.delete_session(S) is True
    assert [s.session_id for s in await a.list_sessions()] == [OTHER]


async def test_the_default_tenant_is_the_databases(sql_backend: Backend) -> None:
    """No tenant: the Database's (``""`` unless it names one), as before tenants existed."""
    assert sql_backend.target is not None
    wal = sql_backend.kind == "sqlite_wal"
    async with Database(sql_backend.target, wal=wal) as plain:
        await SQLSessionStorage(plain).append(S, "q", user("default"))
        assert (await SQLSessionStorage(plain, tenant="").load(S)).messages == [user("default")]
        assert await SQLSessionStorage(plain, tenant=A).count_messages(S) == 0
    async with Database(sql_backend.target, wal=wal, tenant=A) as scoped:
        store = SQLSessionStorage(scoped)
        assert store.tenant == A and repr(store).endswith(f"tenant={A!r})")
        assert await store.count_messages(S) == 0
        await store.append(S, "q", user("acme's"))
        assert (await SQLSessionStorage(scoped, tenant="").load(S)).messages == [user("default")]
        assert (await SQLSessionStorage(scoped, tenant=A).load(S)).messages == [user("acme's")]


async def test_a_tenant_is_checked_before_anything_opens(tmp_path: Path) -> None:
    path = tmp_path / "never.sqlite3"
    for build in (
        lambda t: SQLiteSessionStorage(path, tenant=t),
        lambda t: SQLSessionStorage(path, tenant=t),
        lambda t: zett.SQLiteSessionStorage(path, tenant=t),
        lambda t: zett.SQLSessionStorage(path, tenant=t),
        lambda t: zett.SQLiteSessionExtension(path, tenant=t),
    ):
        with pytest.raises(UserError, match="tenant"):
            build("x" * 65)
        with pytest.raises(UserError, match="tenant"):
            build(7)
    assert not path.exists()
    async with SQLiteSessionStorage(path, tenant=A) as store:
        assert store.tenant == A
    extension = zett.SQLiteSessionExtension(path, tenant=B)
    try:
        assert extension.storage.tenant == B  # type: ignore[attr-defined]
    finally:
        await extension.close()


def test_a_refused_tenant_creates_no_folder(tmp_path: Path) -> None:
    """zett's storages create a file's parent folders, but not for a store they refuse."""
    path = tmp_path / "new" / "never.sqlite3"
    for build in (zett.SQLiteSessionStorage, zett.SQLiteSessionExtension):
        with pytest.raises(UserError, match="tenant"):
            build(path, tenant=7)  # type: ignore[arg-type]
    assert not path.parent.exists()


async def test_a_settled_key_is_looked_up_in_its_own_tenant(db: Database) -> None:
    """What ``append`` runs after a conflict or a lost COMMIT finds only its tenant's key."""
    a = SQLSessionStorage(db, tenant=A)
    await fill(a)

    def pending(tenant: str) -> PendingMessage:
        nothing = (None,) * 7  # timing, parent, title, agent, metadata, tags, usage
        return PendingMessage.check(tenant, S, "q", say("again"), *nothing, KEY)

    assert await db.read(pending(A).stored, tenant=A) == 2
    assert await db.read(pending(B).stored, tenant=B) is None
    assert await db.write(pending(B).write, resolve=pending(B).write, tenant=B) == 1
    assert await db.read(pending(B).stored, tenant=B) == 1
    assert await db.read(pending(A).stored, tenant=A) == 2


async def test_a_keyed_append_whose_commit_reply_is_lost_settles_in_its_tenant(
    sql_backend: Backend, db: Database
) -> None:
    if sql_backend.kind in SQLITE_KINDS:
        pytest.skip("a SQLite COMMIT has no reply to lose")
    a, b = SQLSessionStorage(db, tenant=A), SQLSessionStorage(db, tenant=B)
    await fill(a)
    await b.append(OTHER, "warm", user("warm"))
    with commit_lost(db) as lost:
        assert await b.append(S, "q", say("charged"), idempotency_key=KEY) == 1
    assert lost
    assert [(r.sequence, r.message) for r in await b.list_raw_messages(S)] == [(1, say("charged"))]
    assert await a.count_messages(S) == 3


def test_the_blocking_view_keeps_its_tenant(tmp_path: Path) -> None:
    path = tmp_path / "sync.sqlite3"
    with (
        SQLiteSessionStorage(path, tenant=A).sync() as a,
        SQLiteSessionStorage(path, tenant=B).sync() as b,
    ):
        assert a.append(S, "q", user("a"), idempotency_key=KEY) == 1
        assert b.get_session(S) is None
        assert b.count_messages(S) == 0
        assert b.list_sessions() == []
        assert b.load(S) == SessionView()
        assert b.append(S, "q", say("b"), idempotency_key=KEY) == 1
        assert [r.message for r in b.list_raw_messages(S)] == [say("b")]
        assert b.delete_session(S) is True
        assert [r.message for r in a.list_raw_messages(S)] == [user("a")]
        a.close()
        b.close()


async def test_fork_stays_in_its_tenant(db: Database) -> None:
    """Needs ``sessions/fork.py``'s ``fork_rows(conn, tenant, ...)`` (the sessions family)."""
    a, b = SQLSessionStorage(db, tenant=A), SQLSessionStorage(db, tenant=B)
    await fill(a)
    with pytest.raises(UserError, match="does not exist"):
        await b.fork(S, "f", keep_entries=1)
    await b.append(S, "q", say("b1"))
    forked = await b.fork(S, "f", keep_entries=1)
    assert (forked.session_id, forked.message_count) == ("f", 1)
    assert (await b.load("f")).messages == [say("b1")]
    assert await a.get_session("f") is None
    assert (await a.fork(S, "f", keep_entries=2)).message_count == 2
    assert (await b.load("f")).messages == [say("b1")]


# -- the zett drop-in -----------------------------------------------------------------------


async def zett_seen(store: zett.SQLSessionStorage) -> dict[str, Any]:
    return {
        "summary": await store.get_session(S),
        "count": await store.count_messages(S),
        "messages": await store.list_raw_messages(S),
        "page": await store.list_raw_messages(S, offset=1),
        "view": await store.load(S),
        "listed": await store.list_sessions(),
    }


async def test_the_zett_drop_in_keeps_tenants_apart(db: Database) -> None:
    a, b = zett.SQLSessionStorage(db, tenant=A), zett.SQLSessionStorage(db, tenant=B)
    default = zett.SQLSessionStorage(db)
    assert (a.tenant, b.tenant, default.tenant) == (A, B, "")
    await a.create_session(session_id=S, parent_session_id=PARENT, title="A's", session_type=3)
    assert await a.append(S, "q1", UserMessage(content="a1"), parent_session_id=PARENT) == 1
    second = AssistantMessage(content="a2")
    assert await a.append(S, "q2", second, parent_session_id=PARENT, agent_name="alpha") == 2
    await a.snapshot(S, ZettCompacted(content="a summary"), 1, 0)
    before = await zett_seen(a)

    assert await b.get_session(S) is None
    assert await b.count_messages(S) == 0
    assert await b.list_raw_messages(S) == []
    assert await b.list_raw_messages(S, offset=1) == []
    view = await b.load(S)
    assert (view.snapshot, view.raw_tail, view.title) == (None, [], None)
    assert await b.list_sessions() == []
    assert await b.list_sessions(session_types=[3]) == []
    assert await b.update_session(S, title="b's") is None
    assert await b.delete_session(S) is False
    with pytest.raises(SnapshotConflictError):
        await b.snapshot(S, ZettCompacted(content="b"), 2, 1)
    assert await default.list_sessions() == []
    assert await zett_seen(a) == before

    await b.create_session(session_id=S)
    assert await b.append(S, "q1", AssistantMessage(content="b1"), title="B's") == 1
    assert await b.append(S, "q2", UserMessage(content="b2")) == 2
    with pytest.raises(UserError):
        await b.append(S, "q3", UserMessage(content="b3"), parent_session_id=PARENT)
    assert (await b.snapshot(S, ZettCompacted(content="b summary"), 1, 0)).version == 1
    summary = await b.get_session(S)
    assert summary is not None
    assert (summary.title, summary.agent_name, summary.parent_session_id) == ("B's", None, None)
    assert [r.message for r in await b.list_raw_messages(S)] == [
        AssistantMessage(content="b1"),
        UserMessage(content="b2"),
    ]
    assert [r.message for r in (await b.load(S)).raw_tail] == [UserMessage(content="b2")]
    assert [s.session_id for s in await b.list_sessions()] == [S]
    assert (await b.update_session(S, agent_name="bravo")).agent_name == "bravo"  # type: ignore[union-attr]
    assert await zett_seen(a) == before

    # The core store of a tenant reads the drop-in's rows of that tenant only.
    assert await SQLSessionStorage(db, tenant=B).count_messages(S) == 2
    assert await SQLSessionStorage(db).count_messages(S) == 0
    assert await b.delete_session(S) is True
    assert await zett_seen(a) == before


def test_the_zett_blocking_view_keeps_its_tenant(tmp_path: Path) -> None:
    path = tmp_path / "zett.sqlite3"
    with (
        zett.SQLiteSessionStorage(path, tenant=A).sync() as a,
        zett.SQLiteSessionStorage(path, tenant=B).sync() as b,
    ):
        assert a.append(S, "q", UserMessage(content="a")) == 1
        assert b.count_messages(S) == 0
        assert b.get_session(S) is None
        assert b.append(S, "q", UserMessage(content="b")) == 1
        assert [r.message for r in a.list_raw_messages(S)] == [UserMessage(content="a")]
        a.close()
        b.close()
