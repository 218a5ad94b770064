"""Two tenants on one database, with the same ids: no public call of one reaches the other.

Tenant ``a`` is filled through every store (lovia sessions with a fork, a Raw Log
session with a keyed message and a snapshot, a checkpointed run under a lease with
tool effects). Then every public method of tenant ``b``'s stores is called with
``a``'s very ids: each must see nothing of ``a`` and change nothing of it (``a``'s
fingerprint, read through ``a``'s own stores, is the same afterwards). ``b`` then
writes under the same ids, and each tenant reads back only its own.

Besides the suite's backends, this file runs on PostgreSQL under row-level security
(``postgres_rls``): the stores log in as a role that owns nothing, on a Database with
``row_level_security=True`` and the policies on (docs/tenants.md). There a statement
run without the store's ``tenant=`` sees nothing and may write nothing, so every case
also proves that each call hands its tenant to the Database.

``test_every_public_method_has_a_case`` keeps this honest: a public method added
to a store without a case here fails it. On every backend of the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from backends import (
    ALL_KINDS,
    CLUSTER_KINDS,
    Backend,
    _backend,
    _empty_pg,
    _pg_admin,
    create_pg_database,
    drop_pg_database,
)
from helpers import a_run, result, say, user
from lovia_store import (
    CompactedMessage,
    Database,
    InMemoryCheckpointer,
    InMemorySession,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    UserError,
    upgrade,
)
from lovia_store.db.row_security import enable_row_level_security
from lovia_store.db.tables import sessions
from lovia_store.errors import LoviaStoreError, RunOwnershipLost

SID, FORK, RAW, RUN, CALL, KEY = "s-1", "s-fork", "raw-1", "run-1", "call-1", "key-1"


# -- PostgreSQL under row-level security: the stores as a role the policies hold ---------

RLS = "postgres_rls"
RLS_ROLE = "lovia_rls_app"  # tests/test_tenant_rls.py's role: logs in, owns nothing


async def _as_owner(url: str, *statements: str) -> None:
    parsed = make_url(url)
    conn = await asyncpg.connect(
        host=parsed.host,
        port=parsed.port or 5432,
        user=parsed.username,
        password=parsed.password,
        database=parsed.database,
    )
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _create_rls_database() -> str:
    """A migrated database with the policies on and the role granted DML only; the
    owner's URL (the server's test user: a superuser, who passes every policy)."""
    url = await create_pg_database()
    await upgrade(url)
    await _pg_admin(
        f"DO $$ BEGIN CREATE ROLE {RLS_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS; "
        "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    )
    await _as_owner(
        url,
        f"GRANT USAGE ON SCHEMA public TO {RLS_ROLE}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {RLS_ROLE}",
    )
    assert len(await enable_row_level_security(url)) == 9
    return url


@pytest.fixture(scope="module")
def rls_databases() -> Iterator[dict[str, str]]:
    """The module's one database under the policies, made at first use (owner's URL
    under ``"owner"``) and dropped after the module: one migration, not one per case."""
    made: dict[str, str] = {}
    yield made
    if "owner" in made:
        asyncio.run(drop_pg_database(made["owner"]))


@contextlib.asynccontextmanager
async def _under_policies(made: dict[str, str]) -> AsyncIterator[str]:
    """The role's URL on the module's database under the policies, emptied (by the
    owner) after; a database left otherwise than it was made is made anew."""
    if "owner" not in made:
        made["owner"] = await _create_rls_database()
    owner = made["owner"]
    try:
        yield make_url(owner).set(username=RLS_ROLE, password=None).render_as_string(False)
    finally:
        if not await _empty_pg(owner):
            del made["owner"]
            await drop_pg_database(owner)


@pytest.fixture
async def rls_url(rls_databases: dict[str, str]) -> AsyncIterator[str]:
    async with _under_policies(rls_databases) as url:
        yield url


@pytest.fixture(params=[*ALL_KINDS, *CLUSTER_KINDS, pytest.param(RLS, marks=pytest.mark.postgres)])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, rls_databases: dict[str, str]
) -> AsyncIterator[Backend]:
    """The suite's backends (conftest's ``backend``), and PostgreSQL under row-level
    security as a role that owns nothing (this file's own kind)."""
    if request.param == RLS:
        async with _under_policies(rls_databases) as url:
            yield Backend(RLS, url)
        return
    async for value in _backend(request.param, tmp_path):
        yield value


@dataclass
class Tenant:
    name: str
    session: SQLSession | InMemorySession
    checkpointer: SQLCheckpointer | InMemoryCheckpointer
    storage: SQLSessionStorage | None  # the Raw Log API has no in-memory store


@pytest.fixture
async def tenants(backend: Backend) -> AsyncIterator[tuple[Tenant, Tenant]]:
    """Stores of tenants ``a`` and ``b`` on one Database (one pool), or in memory."""
    if backend.kind == "memory":
        yield tuple(  # type: ignore[misc]
            Tenant(n, InMemorySession(tenant=n), InMemoryCheckpointer(tenant=n), None)
            for n in ("a", "b")
        )
        return
    assert backend.target is not None
    async with Database(
        backend.target,
        wal=backend.kind == "sqlite_wal",
        row_level_security=backend.kind == RLS,
        verify_only=backend.kind == RLS,  # the role may not migrate: the owner did
    ) as db:
        pair = tuple(
            Tenant(
                n,
                SQLSession(db, tenant=n),
                SQLCheckpointer(db, tenant=n),
                SQLSessionStorage(db, tenant=n),
            )
            for n in ("a", "b")
        )
        yield pair  # type: ignore[misc]


def head(status: str = "running") -> RunHead:
    return RunHead(agent_name="agent", status=status)  # type: ignore[arg-type]


async def fill(t: Tenant) -> None:
    """Something of every kind, under the shared ids."""
    await t.session.append(SID, a_run("1"), run_id="r-1", meta={"by": t.name})
    await t.session.append(SID, a_run("2", output="x" * 2000), run_id="r-2")
    await t.session.fork(SID, FORK, keep_entries=4)
    lease = await t.checkpointer.acquire_lease(RUN)
    await t.checkpointer.append(RUN, a_run("c"), head(), lease=lease)
    await t.checkpointer.record_intent(RUN, CALL, "tool", lease=lease)
    if t.storage is not None:
        await t.storage.create_session(session_id=RAW, title=f"title {t.name}")
        await t.storage.append(RAW, "req", user(f"hello {t.name}"), idempotency_key=KEY)
        await t.storage.append(RAW, "req", say(f"hi {t.name}"))
        await t.storage.snapshot(RAW, CompactedMessage(content=f"sum {t.name}"), 1, 0)


async def fingerprint(t: Tenant) -> dict[str, Any]:
    """Everything ``t``'s stores show of its data, read through its own stores."""
    seen: dict[str, Any] = {
        "segments": [(s.run_id, s.entries, s.meta) for s in await t.session.segments(SID)],
        "fork": await t.session.load(FORK),
        "origin": await t.session.fork_origin(FORK),
        "run": await t.checkpointer.load(RUN),
        "runs": [r.run_id for r in await t.checkpointer.list_runs()],
        "effects": await t.checkpointer.tool_effects(RUN),
    }
    if t.storage is not None:
        seen["raw"] = await t.storage.get_session(RAW)
        seen["view"] = await t.storage.load(RAW)
        seen["messages"] = await t.storage.list_raw_messages(RAW)
        seen["listed"] = [s.session_id for s in await t.storage.list_sessions()]
    return seen


Case = Callable[[Tenant, Tenant], Awaitable[None]]
CASES: dict[tuple[str, str], Case] = {}


def case(store: str, *methods: str) -> Callable[[Case], Case]:
    """Register a case that calls ``methods`` of ``b``'s ``store`` with ``a``'s ids."""

    def register(fn: Case) -> Case:
        for method in methods:
            CASES[store, method] = fn
        return fn

    return register


async def refused_or(value: Awaitable[Any], expected: Any) -> None:
    """``value`` is ``expected`` (nothing of ``a``), or a typed refusal (an unknown id)."""
    try:
        got = await value
    except (UserError, LookupError, LoviaStoreError):
        return
    assert got == expected


# -- lovia sessions ---------------------------------------------------------------------


@case("session", "segments", "load", "fork_origin", "segment_parts", "load_documents")
async def _session_reads(a: Tenant, b: Tenant) -> None:
    assert await b.session.segments(SID) == []
    assert await b.session.load(SID) == []
    assert await b.session.load(FORK) == []
    assert await b.session.fork_origin(FORK) is None
    if isinstance(b.session, SQLSession):
        assert list(await b.session.load_documents(SID)) == []
        assert await b.session.segment_parts(SID, list) == []


@case("session", "iter_entries")
async def _session_iter(a: Tenant, b: Tenant) -> None:
    if isinstance(b.session, SQLSession):
        assert [e async for e in b.session.iter_entries(SID)] == []


@case("session", "clear", "trim_tool_results", "rewind")
async def _session_edits(a: Tenant, b: Tenant) -> None:
    await b.session.clear(FORK)
    assert await b.session.trim_tool_results(SID, keep_chars=1, keep_runs=0) == 0
    await refused_or(b.session.rewind(SID, keep_entries=0), 0)


@case("session", "fork")
async def _session_fork(a: Tenant, b: Tenant) -> None:
    # a's session is not b's to fork: unknown here, so refused
    await refused_or(b.session.fork(SID, "s-new", keep_entries=1), None)
    assert await b.session.load("s-new") == []


@case("session", "append", "append_encoded")
async def _session_append(a: Tenant, b: Tenant) -> None:
    # The same run id is b's own first run, not a repeat of a's.
    assert await b.session.append(SID, a_run("b"), run_id="r-1") == "r-1"
    assert [s.run_id for s in await b.session.segments(SID)] == ["r-1"]
    assert await b.session.load(SID) == a_run("b")


# -- checkpoints, leases, tool effects --------------------------------------------------


@case("checkpointer", "load", "list_runs", "tool_effects", "load_documents")
async def _checkpoint_reads(a: Tenant, b: Tenant) -> None:
    assert await b.checkpointer.load(RUN) is None
    assert await b.checkpointer.list_runs() == []
    assert await b.checkpointer.tool_effects(RUN) == {}
    if isinstance(b.checkpointer, SQLCheckpointer):
        assert await b.checkpointer.load_documents(RUN) is None


@case("checkpointer", "delete")
async def _checkpoint_delete(a: Tenant, b: Tenant) -> None:
    await b.checkpointer.delete(RUN)


@case("checkpointer", "acquire_lease", "renew_lease", "release_lease")
async def _leases(a: Tenant, b: Tenant) -> None:
    # a holds RUN's lease: b's run of the same id is free, and b's lease is b's own.
    mine = await b.checkpointer.acquire_lease(RUN)
    assert mine.token == 1
    mine = await b.checkpointer.renew_lease(mine)
    await b.checkpointer.release_lease(mine)
    # a's lease means nothing in b: not renewable, not releasable, not a fence there.
    theirs = await a.checkpointer.acquire_lease("run-2")
    with pytest.raises(RunOwnershipLost):
        await b.checkpointer.renew_lease(theirs)
    await b.checkpointer.release_lease(theirs)
    await a.checkpointer.release_lease(await a.checkpointer.renew_lease(theirs))


@case("checkpointer", "append", "append_encoded", "record_intent", "run_effect")
async def _checkpoint_writes(a: Tenant, b: Tenant) -> None:
    lease = await b.checkpointer.acquire_lease(RUN)
    await b.checkpointer.append(RUN, [user("b")], head("completed"), lease=lease)
    await b.checkpointer.record_intent(RUN, CALL, "other tool", lease=lease)
    if isinstance(b.checkpointer, SQLCheckpointer):
        value = await b.checkpointer.run_effect(
            RUN, "call-2", "tool", lambda conn: 7, lambda v: result("call-2", str(v)), lease=lease
        )
        assert value == 7
    snapshot = await b.checkpointer.load(RUN)
    assert snapshot is not None and snapshot.entries == [user("b")]
    assert snapshot.status == "completed"
    effects = await b.checkpointer.tool_effects(RUN)
    assert effects[CALL].tool_name == "other tool"


# -- the Raw Log ----------------------------------------------------------------------------


@case("storage", "get_session", "count_messages", "list_raw_messages", "load", "list_sessions")
async def _raw_reads(a: Tenant, b: Tenant) -> None:
    assert b.storage is not None
    assert await b.storage.get_session(RAW) is None
    assert await b.storage.count_messages(RAW) == 0
    assert await b.storage.list_raw_messages(RAW) == []
    assert (await b.storage.load(RAW)).messages == []
    assert await b.storage.list_sessions() == []


@case("storage", "update_session", "delete_session")
async def _raw_edits(a: Tenant, b: Tenant) -> None:
    assert b.storage is not None
    assert await b.storage.update_session(RAW, title="b's") is None
    assert await b.storage.delete_session(RAW) is False
    assert await b.storage.delete_session(SID) is False


@case("storage", "snapshot")
async def _raw_snapshot(a: Tenant, b: Tenant) -> None:
    assert b.storage is not None
    with pytest.raises((UserError, ValueError)):
        await b.storage.snapshot(RAW, CompactedMessage(content="b"), 1, 1)


@case("storage", "fork")
async def _raw_fork(a: Tenant, b: Tenant) -> None:
    assert b.storage is not None
    with pytest.raises(UserError):
        await b.storage.fork(RAW, "raw-new", keep_entries=1)


@case("storage", "create_session", "append")
async def _raw_writes(a: Tenant, b: Tenant) -> None:
    assert b.storage is not None
    created = await b.storage.create_session(session_id=RAW, title="b")
    assert created.title == "b"
    # The same key is b's first keyed append, not a repeat of a's: a new sequence 1.
    assert await b.storage.append(RAW, "req", user("b"), idempotency_key=KEY) == 1
    assert await b.storage.count_messages(RAW) == 1
    assert [s.session_id for s in await b.storage.list_sessions()] == [RAW]


@case("storage", "sync")
async def _raw_sync(a: Tenant, b: Tenant) -> None:
    assert b.storage is not None
    with b.storage.sync() as view:
        assert view.get_session(RAW) is None
        assert view.count_messages(RAW) == 0


NOT_DATA = {"close"}  # releases the store, reads and writes nothing


def _public(cls: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member) and name not in NOT_DATA
    }


@pytest.mark.parametrize(
    ("store", "classes"),
    [
        ("session", (SQLSession, InMemorySession)),
        ("checkpointer", (SQLCheckpointer, InMemoryCheckpointer)),
        ("storage", (SQLSessionStorage,)),
    ],
)
def test_every_public_method_has_a_case(store: str, classes: tuple[type, ...]) -> None:
    methods = set().union(*(_public(cls) for cls in classes))
    assert methods - {method for kind, method in CASES if kind == store} == set()


def _unique_cases() -> list[tuple[str, Case]]:
    seen: dict[Case, str] = {}
    for (store, method), fn in CASES.items():
        seen.setdefault(fn, f"{store}.{method}")
    return [(name, fn) for fn, name in seen.items()]


@pytest.mark.parametrize(("name", "call"), _unique_cases(), ids=[n for n, _ in _unique_cases()])
async def test_a_call_with_the_other_tenants_ids_reaches_nothing_of_it(
    tenants: tuple[Tenant, Tenant], name: str, call: Case
) -> None:
    a, b = tenants
    if name.startswith("storage.") and b.storage is None:
        pytest.skip("the Raw Log API has no in-memory store")
    await fill(a)
    before = await fingerprint(a)
    await call(a, b)
    assert await fingerprint(a) == before


async def test_same_ids_in_two_tenants_are_two_histories(tenants: tuple[Tenant, Tenant]) -> None:
    a, b = tenants
    await fill(a)
    await fill(b)
    seen_a, seen_b = await fingerprint(a), await fingerprint(b)
    assert seen_a["segments"][0][2] == {"by": "a"} and seen_b["segments"][0][2] == {"by": "b"}
    if a.storage is not None:
        assert seen_a["raw"].title == "title a" and seen_b["raw"].title == "title b"
        assert [m.sequence for m in seen_a["messages"]] == [1, 2]
        assert [m.sequence for m in seen_b["messages"]] == [1, 2]
    # Deleting everything of b leaves a whole.
    await b.session.clear(SID)
    await b.session.clear(FORK)
    await b.checkpointer.delete(RUN)
    if b.storage is not None:
        assert await b.storage.delete_session(RAW)
    assert await fingerprint(a) == seen_a
    assert await b.session.load(SID) == []


def test_a_tenant_is_a_short_string() -> None:
    for bad in (7, "x" * 65, "a\x00b", "\ud800"):
        with pytest.raises(UserError):
            InMemorySession(tenant=bad)  # type: ignore[arg-type]
        with pytest.raises(UserError):
            Database(":memory:", tenant=bad)  # type: ignore[arg-type]


async def test_the_default_tenant_is_the_databases(tmp_path: Any) -> None:
    async with Database(tmp_path / "t.sqlite3", tenant="acme") as db:
        acme = SQLSession(db)
        assert acme.tenant == "acme"
        await acme.append(SID, a_run("1"), run_id="r-1")
        assert await SQLSession(db, tenant="").load(SID) == []
        assert await SQLSession(db, tenant="acme").load(SID) == a_run("1")


@pytest.mark.postgres
async def test_the_row_level_security_kind_is_held_by_the_policies(rls_url: str) -> None:
    """What makes the ``postgres_rls`` cases proofs: the role passes no policy, so a
    transaction that names no tenant sees none of the rows a store wrote for its own."""
    async with Database(rls_url, row_level_security=True, verify_only=True) as db:
        a = Tenant("a", SQLSession(db, tenant="a"), SQLCheckpointer(db, tenant="a"), None)
        await fill(a)
        count = select(func.count()).select_from(sessions)
        assert await db.read(lambda conn: conn.execute(count).scalar_one(), tenant="a") == 2
        assert await db.read(lambda conn: conn.execute(count).scalar_one()) == 0
        with pytest.raises(UserError, match="default tenant"):
            await SQLSession(db).load(SID)
    # Without the option nothing sets the tenant: the same store sees nothing.
    async with Database(rls_url, verify_only=True) as plain:
        assert await SQLSession(plain, tenant="a").load(SID) == []
