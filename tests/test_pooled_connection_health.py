"""A refused statement costs only its own call: the pool's connections stay usable.

On PostgreSQL through asyncpg, a lone statement (run on the AUTOCOMMIT variant
of the engine, which shares the pool) whose argument the driver refused
client-side left its connection broken: every later transaction on it failed
(``SET TRANSACTION ISOLATION LEVEL must be called before any query``, then
``SAVEPOINT can only be used in transaction blocks``) until the pool recycled
it, 30 minutes later. Now a connection on which a driver error happened is
discarded, and the arguments that reached the driver that way are taken
(``limit`` and ``offset`` up to 2**63-1, as the argument checks promise) or
refused before any SQL (a lone surrogate in an id).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Connection, Integer, bindparam, select, text

from backends import Backend
from helpers import a_run, user
from lovia_store import (
    CompactedMessage,
    Database,
    InMemorySession,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    StoreUnavailableError,
    UserError,
)

BEYOND_INT32 = 2**31  # PostgreSQL's INTEGER ends below it; asyncpg refuses it client-side
LARGEST = 2**63 - 1  # the largest count the argument checks accept
LONE = "\ud800"  # what json.loads('"\\ud800"') gives for client input
ORDINARY_CALLS = 40


@dataclass
class Stores:
    database: Database
    session: SQLSession
    storage: SQLSessionStorage
    checkpoints: SQLCheckpointer


@pytest.fixture
async def stores(sql_backend: Backend) -> AsyncIterator[Stores]:
    """The three SQL stores on one Database (one pool); session "s" holds one run."""
    assert sql_backend.target is not None
    db = Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal")
    try:
        found = Stores(db, SQLSession(db), SQLSessionStorage(db), SQLCheckpointer(db))
        await found.session.append("s", a_run("1"), run_id="r1")
        yield found
    finally:
        await db.close()


async def ordinary_calls(stores: Stores, count: int = ORDINARY_CALLS) -> list[BaseException]:
    """``count`` ordinary calls at once (so every pooled connection serves some); the failures."""

    async def get_session() -> None:
        assert await stores.storage.get_session("s") is not None

    async def load() -> None:
        assert len(await stores.session.load("s")) >= 4

    async def segments() -> None:
        assert await stores.session.segments("s")

    async def page() -> None:
        assert len(await stores.storage.list_raw_messages("s", limit=2)) == 2

    async def count_messages() -> None:
        assert await stores.storage.count_messages("s") >= 4

    async def append() -> None:
        assert await stores.storage.append("s", "later", user("more")) > 4

    kinds = itertools.cycle([get_session, load, segments, page, count_messages, append])
    outcomes = await asyncio.gather(*(next(kinds)() for _ in range(count)), return_exceptions=True)
    return [outcome for outcome in outcomes if isinstance(outcome, BaseException)]


def bad_reads(stores: Stores) -> list[Callable[[], Awaitable[Any]]]:
    """The issue's single-statement reads that asyncpg refused client-side."""

    async def iterate(session_id: str) -> list[Any]:
        return [entry async for entry in stores.session.iter_entries(session_id)]

    return [
        lambda: stores.storage.list_raw_messages("s", limit=BEYOND_INT32),
        lambda: stores.storage.list_raw_messages("s", offset=BEYOND_INT32),
        lambda: stores.storage.list_raw_messages(LONE),
        lambda: stores.session.load(LONE),
        lambda: iterate(LONE),
    ]


async def test_bad_single_statement_reads_leave_every_pooled_connection_usable(
    stores: Stores,
) -> None:
    """The issue's reproduction: each bad read, then ten at once (a pool's worth), and
    after each round 40 ordinary calls, none of which may fail."""
    reads = bad_reads(stores)
    assert len(await reads[0]()) == 4
    assert await reads[1]() == []
    for bad in reads[2:]:
        with pytest.raises(UserError, match="session_id"):
            await bad()
    assert await ordinary_calls(stores) == []

    outcomes = await asyncio.gather(
        *(reads[i % len(reads)]() for i in range(10)), return_exceptions=True
    )
    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert len(failures) == 6 and all(isinstance(f, UserError) for f in failures), failures
    assert await ordinary_calls(stores) == []


# -- limit and offset: the whole range the checks accept -----------------------------------------


async def test_limit_and_offset_take_every_value_the_checks_accept(stores: Stores) -> None:
    """Up to 2**63-1 (PostgreSQL bound them as INTEGER: 2**31 and up were refused)."""
    storage = stores.storage
    for limit in (BEYOND_INT32, LARGEST):
        assert [r.sequence for r in await storage.list_raw_messages("s", limit=limit)] == [
            1,
            2,
            3,
            4,
        ]
        page = await storage.list_raw_messages("s", after_sequence=1, offset=1, limit=limit)
        assert [r.sequence for r in page] == [3, 4]
    for offset in (BEYOND_INT32, LARGEST):
        assert await storage.list_raw_messages("s", offset=offset) == []
        assert await storage.list_raw_messages("s", offset=offset, limit=LARGEST) == []
        assert await storage.list_raw_messages("s", after_sequence=3, offset=offset) == []
        assert await storage.list_sessions(offset=offset, limit=LARGEST) == []
    (summary,) = await storage.list_sessions(limit=BEYOND_INT32)
    assert summary.session_id == "s"
    assert len(await storage.list_sessions(limit=LARGEST)) == 1

    # A log with holes pages by OFFSET itself: the large skip goes there.
    await stores.session.append("s", a_run("2"), run_id="r2")
    assert await stores.session.rewind("s", keep_entries=5) == 3  # sequences 6-8 go
    assert [r.sequence for r in await storage.list_raw_messages("s", offset=4)] == [5]
    for offset in (BEYOND_INT32, LARGEST):
        assert await storage.list_raw_messages("s", offset=offset, limit=LARGEST) == []
    page = await storage.list_raw_messages("s", offset=1, limit=BEYOND_INT32)
    assert [r.sequence for r in page] == [2, 3, 4, 5]

    await stores.checkpoints.append("run", [user("q")], RunHead(agent_name="a"))
    for limit in (BEYOND_INT32, LARGEST):
        assert [run.run_id for run in await stores.checkpoints.list_runs(limit=limit)] == ["run"]
    for offset in (BEYOND_INT32, LARGEST):
        assert await stores.checkpoints.list_runs(offset=offset, limit=LARGEST) == []
    assert await ordinary_calls(stores) == []


@pytest.mark.parametrize("argument", ["limit", "offset"])
async def test_list_runs_refuses_what_no_backend_can_bind(backend: Backend, argument: str) -> None:
    """As every other count: at most 2**63-1 (SQLite raised OverflowError beyond it)."""
    async with backend.checkpointer() as checkpoints:
        with pytest.raises(UserError, match=argument):
            await checkpoints.list_runs(**{argument: 2**63})
        assert await checkpoints.list_runs(**{argument: LARGEST}) == []


# -- lone surrogates: refused before any SQL -----------------------------------------------------


def session_calls(
    session: InMemorySession | SQLSession, bad: str
) -> list[Callable[[], Awaitable[Any]]]:
    return [
        lambda: session.load(bad),
        lambda: session.segments(bad),
        lambda: session.append(bad, a_run("x")),
        lambda: session.append("s", a_run("x"), run_id=bad),
        lambda: session.clear(bad),
        lambda: session.trim_tool_results(bad),
        lambda: session.rewind(bad, keep_entries=0),
    ]


@pytest.mark.parametrize("bad", [LONE, "run-\udfff", "\udc80abc"])
async def test_a_lone_surrogate_in_an_id_is_a_user_error_everywhere(
    backend: Backend, bad: str
) -> None:
    """Such an id cannot be encoded as UTF-8, so no backend could store or look it up:
    it is a misuse (``UserError``), the same on every backend, the in-memory one too."""
    async with backend.session() as session:
        await session.append("s", a_run("1"), run_id="r1")
        for call in session_calls(session, bad):
            with pytest.raises(UserError, match="_id"):
                await call()
        if isinstance(session, SQLSession):
            with pytest.raises(UserError, match="session_id"):
                session.iter_entries(bad)
        assert len(await session.load("s")) == 4
    async with backend.checkpointer() as checkpoints:
        run_calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: checkpoints.load(bad),
            lambda: checkpoints.delete(bad),
            lambda: checkpoints.append(bad, [user("q")], RunHead(agent_name="a")),
        ]
        for call in run_calls:
            with pytest.raises(UserError, match="run_id"):
                await call()
    if backend.kind == "memory":
        return
    async with backend.storage() as storage:
        refused: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("session_id", lambda: storage.get_session(bad)),
            ("session_id", lambda: storage.count_messages(bad)),
            ("session_id", lambda: storage.list_raw_messages(bad)),
            ("session_id", lambda: storage.load(bad)),
            ("session_id", lambda: storage.append(bad, "r", user("q"))),
            ("request_id", lambda: storage.append("s", bad, user("q"))),
            (
                "parent_session_id",
                lambda: storage.append("t", "r", user("q"), parent_session_id=bad),
            ),
            ("session_id", lambda: storage.create_session(session_id=bad)),
            ("session_id", lambda: storage.update_session(bad, title="t")),
            ("session_id", lambda: storage.delete_session(bad)),
            ("session_id", lambda: storage.snapshot(bad, CompactedMessage(content="c"), 1, 0)),
        ]
        for what, call in refused:
            with pytest.raises(UserError, match=what):
                await call()
        assert await storage.count_messages("s") == 4
        assert [s.session_id for s in await storage.list_sessions()] == ["s"]


async def test_ids_are_checked_before_anything_reaches_the_database() -> None:
    """Against a server nobody listens on, a bad id is still a UserError, not
    ``StoreUnavailableError``: nothing was sent."""
    async with SQLSessionStorage("postgresql://nobody@127.0.0.1:1/none") as storage:
        with pytest.raises(UserError, match="session_id"):
            await storage.get_session(LONE)
        with pytest.raises(UserError, match="session_id"):
            await storage.list_raw_messages(LONE)
        # A good id does go on to the server. (A refused connect currently escapes
        # asyncpg as the OSError itself, not as StoreUnavailableError.)
        with pytest.raises((StoreUnavailableError, OSError)):
            await storage.get_session("fine")


# -- the root cause: a driver error discards its connection --------------------------------------


def _refused_bind(conn: Connection) -> Any:
    """A statement the driver or server refuses for its argument (asyncpg: client-side)."""
    return conn.execute(select(bindparam("n", type_=Integer)), {"n": BEYOND_INT32}).all()


def _unknown_table(conn: Connection) -> Any:
    """A statement every server refuses."""
    return conn.execute(text("SELECT 1 FROM lovia_no_such_table")).all()


FAILURES = {"refused_bind": _refused_bind, "unknown_table": _unknown_table}


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("write", [False, True], ids=["read", "write"])
async def test_a_driver_error_discards_its_connection(
    sql_backend: Backend, failure: str, write: bool
) -> None:
    """Whatever the argument checks let through: a single-statement read or write whose
    statement fails leaves no connection behind for the next call to inherit. With a
    pool of one connection, the next multi-statement reads run on a fresh one, and work."""
    if failure == "refused_bind" and not sql_backend.kind.startswith("postgres"):
        pytest.skip("only PostgreSQL refuses a value beyond INTEGER")
    assert sql_backend.target is not None
    server = sql_backend.kind.startswith(("postgres", "mariadb"))
    options: dict[str, Any] = {"pool_size": 1, "max_overflow": 0} if server else {}
    db = Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal", **options)
    failed_on: list[Any] = []
    used: list[Any] = []

    def bad(conn: Connection) -> Any:
        failed_on.append(conn.connection.driver_connection)
        return FAILURES[failure](conn)

    def two_statements(conn: Connection) -> tuple[Any, Any]:
        used.append(conn.connection.driver_connection)
        return conn.execute(text("SELECT 1")).scalar(), conn.execute(text("SELECT 2")).scalar()

    def one_statement(conn: Connection) -> Any:
        used.append(conn.connection.driver_connection)
        return conn.execute(text("SELECT 3")).scalar()

    try:
        await db.ensure_schema()
        for _ in range(3):  # the one-statement path, given a work
            with pytest.raises(StoreUnavailableError):
                await db._run(bad, write=write, single_statement=True)
        for _ in range(ORDINARY_CALLS):
            assert await db.read(two_statements) == (1, 2)
            assert await db._run(one_statement, write=False, single_statement=True) == 3
            assert await db._run(one_statement, write=True, single_statement=True) == 3
            assert await db.write(two_statements) == (1, 2)
        assert not any(c is f for c in used for f in failed_on)
    finally:
        await db.close()


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_ten_driver_errors_at_once_leave_the_pool_usable(
    server_backend: Backend, failure: str
) -> None:
    """Ten failing single-statement reads at once take each of the pool's ten connections;
    the 40 multi-statement reads after them all succeed."""
    if failure == "refused_bind" and server_backend.kind == "mariadb":
        pytest.skip("only PostgreSQL refuses a value beyond INTEGER")
    assert server_backend.target is not None
    async with Database(server_backend.target) as db:
        await db.ensure_schema()
        gate = asyncio.Event()

        async def bad() -> None:
            await gate.wait()
            await db._run(FAILURES[failure], write=False, single_statement=True)

        tasks = [asyncio.ensure_future(bad()) for _ in range(10)]
        gate.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, StoreUnavailableError) for o in outcomes), outcomes

        def two_statements(conn: Connection) -> tuple[Any, Any]:
            return conn.execute(text("SELECT 1")).scalar(), conn.execute(text("SELECT 2")).scalar()

        results = await asyncio.gather(
            *(db.read(two_statements) for _ in range(ORDINARY_CALLS)), return_exceptions=True
        )
        assert results == [(1, 2)] * ORDINARY_CALLS
