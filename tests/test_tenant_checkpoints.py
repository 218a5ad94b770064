"""Checkpoints, leases and tool effects of two tenants on one Database, with the same ids.

Tenants ``a`` and ``b`` share one Database (one pool) and use the very same run ids
and call ids. Every public method of a checkpointer sees and changes only its own
tenant's run, entries, lease and tool effects; a lease in one tenant never fences
(nor is fenced by) the other's run of the same id; a write whose COMMIT was lost is
settled against its own tenant's rows; the run's link to its session is the
tenant's own. The default tenant behaves as before. On every backend of the suite
(memory, SQLite in both journal modes, PostgreSQL through asyncpg and psycopg,
MariaDB), and through the lovia drop-in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lovia import Agent as LoviaAgent
from lovia import CheckpointOptions as LoviaOptions
from lovia import Runner as LoviaRunner
from lovia.checkpointer import RunHead as LoviaHead
from lovia.messages import Usage as LoviaUsage
from lovia.testing import ScriptedProvider, text
from sqlalchemy import select, update

from backends import Backend
from helpers import call, commit_lost, result, say, user
from lovia_store import (
    Agent,
    CheckpointOptions,
    Database,
    InMemoryCheckpointer,
    RunHead,
    RunInProgressError,
    RunLease,
    Runner,
    RunOwnershipLost,
    ScriptedModel,
    SQLCheckpointer,
    SQLiteCheckpointer,
    ToolContext,
    TranscriptEntry,
    UserError,
    function_tool,
)
from lovia_store.checkpoints import sql_leases
from lovia_store.checkpoints.sql_steps import settle_step
from lovia_store.db.tables import run_entries, run_heads, run_leases, tool_effects
from lovia_store.integrations import lovia as drop_in

AnyCheckpointer = InMemoryCheckpointer | SQLCheckpointer
RUN, CALL = "run-1", "call-1"


@pytest.fixture
async def pair(backend: Backend) -> AsyncIterator[tuple[AnyCheckpointer, AnyCheckpointer]]:
    """Checkpointers of tenants ``a`` and ``b`` on one Database of this backend."""
    if backend.kind == "memory":
        yield InMemoryCheckpointer(tenant="a"), InMemoryCheckpointer(tenant="b")
        return
    assert backend.target is not None
    async with Database(backend.target, wal=backend.kind == "sqlite_wal") as db:
        yield SQLCheckpointer(db, tenant="a"), SQLCheckpointer(db, tenant="b")


@pytest.fixture
async def sql_pair(sql_backend: Backend) -> AsyncIterator[tuple[SQLCheckpointer, SQLCheckpointer]]:
    assert sql_backend.target is not None
    async with Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal") as db:
        yield SQLCheckpointer(db, tenant="a"), SQLCheckpointer(db, tenant="b")


def head(status: str = "running", turns: int = 1) -> RunHead:
    return RunHead(agent_name="agent", status=status, turns=turns, updated_at=1.0)


async def fill(cp: AnyCheckpointer, tag: str) -> RunLease:
    """A run of ``cp``'s tenant under the shared ids: leased, a step, an intent."""
    lease = await cp.acquire_lease(RUN)
    await cp.append(RUN, [user(tag), call(CALL)], head(), lease=lease, session_id=f"s-{tag}")
    await cp.record_intent(RUN, CALL, f"tool-{tag}", lease=lease)
    return lease


async def seen(cp: AnyCheckpointer) -> dict[str, Any]:
    """Everything ``cp`` shows of its tenant's run."""
    return {
        "run": await cp.load(RUN),
        "runs": [(r.run_id, r.status, r.entry_count) for r in await cp.list_runs()],
        "effects": await cp.tool_effects(RUN),
    }


# -- runs ---------------------------------------------------------------------------------


async def test_the_same_run_id_is_two_runs(pair: tuple[AnyCheckpointer, AnyCheckpointer]) -> None:
    a, b = pair
    await fill(a, "a")
    before = await seen(a)
    lease = await fill(b, "b")  # a's live lease on RUN is no obstacle in b
    assert await seen(a) == before
    stored_a, stored_b = await a.load(RUN), await b.load(RUN)
    assert stored_a is not None and stored_a.entries == [user("a"), call(CALL)]
    assert stored_b is not None and stored_b.entries == [user("b"), call(CALL)]
    # b's next steps number on from b's own two entries, and a stays as it was.
    await b.append(RUN, [result(CALL, "b")], head(turns=2), lease=lease)
    await b.append(RUN, [say("done b")], head("completed", 3), lease=lease)
    stored_b = await b.load(RUN)
    assert stored_b is not None and stored_b.entries[2:] == [result(CALL, "b"), say("done b")]
    assert await seen(a) == before
    assert [(r.run_id, r.entry_count) for r in await b.list_runs()] == [(RUN, 4)]
    assert [(r.run_id, r.entry_count) for r in await a.list_runs()] == [(RUN, 2)]
    assert [r.run_id for r in await b.list_runs(status="completed")] == [RUN]
    assert await a.list_runs(status="completed") == []
    assert [r.run_id for r in await a.list_runs(status="running")] == [RUN]
    assert await b.list_runs(status="running") == []


async def test_listing_pages_through_the_tenants_own_runs(
    pair: tuple[AnyCheckpointer, AnyCheckpointer],
) -> None:
    a, b = pair
    for n in range(5):
        await a.append(f"run-{n}", [user(f"a{n}")], head())
    for n in range(3):
        await b.append(f"run-{n}", [user(f"b{n}")], head("interrupted"))
    assert len(await a.list_runs()) == 5 and len(await b.list_runs()) == 3
    pages = [await a.list_runs(limit=2, offset=o) for o in (0, 2, 4, 6)]
    assert sorted(r.run_id for page in pages for r in page) == [f"run-{n}" for n in range(5)]
    assert await b.list_runs(offset=3) == []
    assert await a.list_runs(status="interrupted") == []
    assert len(await b.list_runs(status="interrupted")) == 3


async def test_delete_in_one_tenant_leaves_the_other_whole(
    pair: tuple[AnyCheckpointer, AnyCheckpointer],
) -> None:
    a, b = pair
    lease_a = await fill(a, "a")
    before = await seen(a)
    await b.delete(RUN)  # b has no such run: nothing of a's goes
    assert await seen(a) == before
    lease_b = await fill(b, "b")
    await b.delete(RUN, lease=lease_b)
    assert await b.load(RUN) is None and await b.tool_effects(RUN) == {}
    assert await b.list_runs() == []
    assert await seen(a) == before
    # b's lease (live) outlived its run; releasing it forgets it, and a's is untouched.
    await b.release_lease(lease_b)
    assert (await b.acquire_lease(RUN)).token == 1
    assert (await a.renew_lease(lease_a)).token == lease_a.token
    with pytest.raises(RunInProgressError):
        await a.acquire_lease(RUN)
    await a.delete(RUN, lease=lease_a)
    assert await a.load(RUN) is None


# -- leases ---------------------------------------------------------------------------------


async def test_a_lease_never_fences_the_other_tenants_run(
    pair: tuple[AnyCheckpointer, AnyCheckpointer],
) -> None:
    a, b = pair
    lease_a = await a.acquire_lease(RUN)
    lease_b = await b.acquire_lease(RUN)
    assert (lease_a.token, lease_b.token) == (1, 1)
    for cp in (a, b):  # each tenant's own live lease still keeps its own run
        with pytest.raises(RunInProgressError):
            await cp.acquire_lease(RUN)
    # a's lease is nothing in b: every write under it is refused there, nothing written.
    with pytest.raises(RunOwnershipLost):
        await b.renew_lease(lease_a)
    with pytest.raises(RunOwnershipLost):
        await b.append(RUN, [user("x")], head(), lease=lease_a)
    with pytest.raises(RunOwnershipLost):
        await b.record_intent(RUN, CALL, "tool", lease=lease_a)
    with pytest.raises(RunOwnershipLost):
        await b.delete(RUN, lease=lease_a)
    if isinstance(b, SQLCheckpointer):
        with pytest.raises(RunOwnershipLost):
            await b.run_effect(
                RUN, CALL, "tool", lambda _: 1, lambda v: result(CALL), lease=lease_a
            )
    assert await b.load(RUN) is None and await b.tool_effects(RUN) == {}
    await b.release_lease(lease_a)  # a no-op in b: a still holds RUN
    with pytest.raises(RunInProgressError):
        await a.acquire_lease(RUN)
    # Writes in b, leased or not, leave a's lease as it was; b's takeovers count in b alone.
    await b.append(RUN, [user("b")], head(), lease=lease_b)
    await b.append(RUN, [say("b")], head("interrupted", 2))
    await b.release_lease(lease_b)
    taken = await b.acquire_lease(RUN)
    assert taken.token == 2
    await b.release_lease(taken)
    assert (await b.acquire_lease(RUN)).token == 3
    renewed = await a.renew_lease(lease_a)
    assert renewed.token == 1
    await a.append(RUN, [user("a")], head(), lease=renewed)
    stored = await a.load(RUN)
    assert stored is not None and stored.entries == [user("a")]
    await a.release_lease(renewed)
    assert (await a.acquire_lease(RUN)).token == 2


async def test_leases_with_the_very_same_ids_stay_apart(
    sql_pair: tuple[SQLCheckpointer, SQLCheckpointer],
) -> None:
    """Run id, token and lease id all equal in two tenants: only the tenant tells them
    apart, and every lease statement names it."""
    a, b = sql_pair
    lease_a = await a.acquire_lease(RUN)
    await b.acquire_lease(RUN)

    def same_lease_id(conn: Any) -> None:
        rows = run_leases.c
        conn.execute(
            update(run_leases)
            .where(rows.tenant == "b", rows.run_id == RUN)
            .values(lease_id=lease_a.lease_id)
        )

    await b.database.write(same_lease_id)
    lease_b = lease_a  # the same lease, as b's store sees its own row now
    await a.append(RUN, [user("a")], head(), lease=lease_a)
    await a.release_lease(lease_a)  # releases a's only: a has a run, so its row stays
    with pytest.raises(RunInProgressError):
        await b.acquire_lease(RUN)
    assert (await b.renew_lease(lease_b)).token == 1
    taken = await a.acquire_lease(RUN)  # a takes its run over: lease_a is lost in a alone
    assert taken.token == 2
    with pytest.raises(RunOwnershipLost):
        await a.renew_lease(lease_a)
    assert (await b.renew_lease(lease_b)).token == 1
    await b.append(RUN, [user("b")], head(), lease=lease_b)
    await b.release_lease(lease_b)  # b has a run too: its row stays, expired
    assert (await b.acquire_lease(RUN)).token == 2
    assert (await a.renew_lease(taken)).token == 2
    assert await _rows(a.database, run_leases, "token") == {("a", RUN, 2), ("b", RUN, 2)}


async def test_releasing_forgets_the_lease_of_a_run_the_tenant_does_not_have(
    sql_pair: tuple[SQLCheckpointer, SQLCheckpointer],
) -> None:
    """A released lease is forgotten when its run is not stored: in its own tenant
    (b storing the same run id does not keep a's row, and the reverse)."""
    a, b = sql_pair
    lease_a = await a.acquire_lease(RUN)
    await b.append(RUN, [user("b")], head())
    lease_b = await b.acquire_lease(RUN)
    await a.release_lease(lease_a)
    await b.release_lease(lease_b)
    assert await _rows(a.database, run_leases, "token") == {("b", RUN, 1)}


# -- tool effects ---------------------------------------------------------------------------


async def test_tool_effects_are_the_tenants_own(
    pair: tuple[AnyCheckpointer, AnyCheckpointer],
) -> None:
    a, b = pair
    await a.record_intent(RUN, CALL, "tool-a")
    await b.record_intent(RUN, CALL, "tool-b")  # b's first intent, not a repeat of a's
    await a.record_intent(RUN, CALL, "tool-a again")  # a repeat keeps a's first
    assert {k: v.tool_name for k, v in (await a.tool_effects(RUN)).items()} == {CALL: "tool-a"}
    assert {k: v.tool_name for k, v in (await b.tool_effects(RUN)).items()} == {CALL: "tool-b"}
    if not isinstance(b, SQLCheckpointer) or not isinstance(a, SQLCheckpointer):
        return
    value = await b.run_effect(RUN, CALL, "tool-b", lambda _: 7, lambda v: result(CALL, f"b{v}"))
    assert value == 7
    assert (await b.tool_effects(RUN))[CALL].outcome == result(CALL, "b7")
    assert (await a.tool_effects(RUN))[CALL].outcome is None
    await a.run_effect(RUN, "call-2", "tool-a", lambda _: 1, lambda v: result("call-2", "a"))
    assert set(await a.tool_effects(RUN)) == {CALL, "call-2"}
    assert set(await b.tool_effects(RUN)) == {CALL}
    await a.run_effect(RUN, CALL, "tool-a", lambda _: 2, lambda v: result(CALL, "a2"))
    assert (await a.tool_effects(RUN))[CALL].outcome == result(CALL, "a2")
    assert (await b.tool_effects(RUN))[CALL].outcome == result(CALL, "b7")
    await a.delete(RUN)
    assert await a.tool_effects(RUN) == {}
    assert set(await b.tool_effects(RUN)) == {CALL}


# -- rows, links, settling ------------------------------------------------------------------


async def _rows(db: Database, table: Any, *columns: str) -> set[tuple[Any, ...]]:
    def read(conn: Any) -> set[tuple[Any, ...]]:
        wanted = [table.c.tenant, table.c.run_id, *(table.c[c] for c in columns)]
        return {tuple(row) for row in conn.execute(select(*wanted))}

    return await db.read(read)


async def test_every_row_carries_its_tenant_and_the_session_link_is_its_own(
    sql_pair: tuple[SQLCheckpointer, SQLCheckpointer],
) -> None:
    a, b = sql_pair
    await fill(a, "a")
    await fill(b, "b")
    db = a.database
    assert await _rows(db, run_heads, "session_id") == {("a", RUN, "s-a"), ("b", RUN, "s-b")}
    await b.append(RUN, [], head(turns=2))  # naming no session keeps b's link
    await a.append(RUN, [], head(turns=2), session_id="s-a2")
    assert await _rows(db, run_heads, "session_id") == {("a", RUN, "s-a2"), ("b", RUN, "s-b")}
    assert await _rows(db, run_entries, "position") == {
        (t, RUN, p) for t in ("a", "b") for p in (1, 2)
    }
    assert await _rows(db, tool_effects, "tool_name") == {
        ("a", RUN, "tool-a"),
        ("b", RUN, "tool-b"),
    }
    assert await _rows(db, run_leases, "token") == {("a", RUN, 1), ("b", RUN, 1)}


async def test_settling_a_step_looks_at_its_own_tenant(
    sql_pair: tuple[SQLCheckpointer, SQLCheckpointer],
) -> None:
    """The resolve path after a lost COMMIT: a's identical step is not b's step landed."""
    a, b = sql_pair
    await a.append(RUN, [user("same"), say("same")], head())
    stored = await a.load_documents(RUN)
    assert stored is not None
    head_json, documents = stored

    def settle(conn: Any) -> None:
        settle_step(conn, "b", RUN, "running", head_json, documents)

    await b.database.write(settle)
    assert await b.load_documents(RUN) == (head_json, documents)
    await b.database.write(settle)  # landed now: not appended twice
    assert await b.load_documents(RUN) == (head_json, documents)
    assert await a.load_documents(RUN) == (head_json, documents)

    lease = await a.acquire_lease("run-2")

    def acquired(conn: Any) -> RunLease | None:
        return sql_leases.acquired(conn, "b", "run-2", 30.0, lease.lease_id)

    assert await b.database.write(acquired) is None


@pytest.mark.parametrize("landed", [False, True], ids=["commit-lost", "reply-lost"])
async def test_a_lost_commit_is_settled_in_its_own_tenant(
    server_backend: Backend, landed: bool
) -> None:
    """a holds RUN's lease and stored a step; b's acquire and the very same step, their
    COMMITs lost, are settled against b's rows: taken and stored once, in b."""
    assert server_backend.target is not None
    async with Database(server_backend.target) as db:
        a, b = SQLCheckpointer(db, tenant="a"), SQLCheckpointer(db, tenant="b")
        lease_a = await a.acquire_lease(RUN)
        step: list[TranscriptEntry] = [user("same"), say("same")]
        same = head()
        await a.append(RUN, step, same, lease=lease_a)
        with commit_lost(db, landed=landed) as lost:
            lease_b = await b.acquire_lease(RUN)
        assert lost and lease_b.token == 1
        assert (await b.renew_lease(lease_b)).lease_id == lease_b.lease_id
        with commit_lost(db, landed=landed) as lost:
            await b.append(RUN, step, same, lease=lease_b)
        assert lost
        stored_b = await b.load(RUN)
        assert stored_b is not None and stored_b.entries == step
        with commit_lost(db, landed=landed) as lost:
            await b.record_intent(RUN, CALL, "tool-b", lease=lease_b)
        assert lost and set(await b.tool_effects(RUN)) == {CALL}
        with commit_lost(db, landed=landed) as lost:
            await b.delete(RUN, lease=lease_b)
        assert lost and await b.load(RUN) is None
        stored_a = await a.load(RUN)
        assert stored_a is not None and stored_a.entries == step
        assert await a.tool_effects(RUN) == {}
        assert (await a.renew_lease(lease_a)).token == 1


# -- the default tenant ---------------------------------------------------------------------


async def test_the_default_tenant_is_as_before(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    async with SQLiteCheckpointer(path) as plain:
        assert plain.tenant == "" and repr(plain) == f"SQLiteCheckpointer({plain.database.url!r})"
        await plain.append(RUN, [user("default")], head())
        assert await _rows(plain.database, run_heads) == {("", RUN)}
    async with Database(path) as db:
        assert SQLCheckpointer(db).tenant == ""
        assert await SQLCheckpointer(db, tenant="").load(RUN) is not None
        assert await SQLCheckpointer(db, tenant="a").load(RUN) is None
    async with Database(path, tenant="acme") as db:
        acme = SQLCheckpointer(db)
        assert acme.tenant == "acme" and "tenant='acme'" in repr(acme)
        assert await acme.load(RUN) is None and await acme.list_runs() == []
        await acme.append(RUN, [user("acme")], head())
        assert [r.run_id for r in await SQLCheckpointer(db, tenant="").list_runs()] == [RUN]
        default = await SQLCheckpointer(db, tenant="").load(RUN)
        assert default is not None and default.entries == [user("default")]
    assert InMemoryCheckpointer().tenant == ""
    assert InMemoryCheckpointer(tenant="x").tenant == "x"


@pytest.mark.parametrize("bad", [7, "x" * 65, "a\x00b", "\ud800"])
async def test_a_bad_tenant_is_refused(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(UserError):
        InMemoryCheckpointer(tenant=bad)
    with pytest.raises(UserError):
        SQLiteCheckpointer(tmp_path / "t.sqlite3", tenant=bad)
    with pytest.raises(UserError):
        drop_in.SQLiteCheckpointer(tmp_path / "t.sqlite3", tenant=bad)
    assert not (tmp_path / "t.sqlite3").exists()


# -- the Runner -----------------------------------------------------------------------------


async def test_the_runner_keeps_two_tenants_runs_of_one_id_apart(
    pair: tuple[AnyCheckpointer, AnyCheckpointer],
) -> None:
    keys: list[str] = []

    @function_tool
    async def count(ctx: ToolContext) -> str:
        """Note the idempotency key an outside service would see."""
        keys.append(ctx.idempotency_key)
        return "counted"

    def agent(answer: str) -> Agent:
        return Agent("a", ScriptedModel([[call(CALL, "count")], [say(answer)]]), tools=[count])

    a, b = pair
    first = await Runner.run(agent("A"), "go", checkpoint=CheckpointOptions(a, RUN))
    second = await Runner.run(agent("B"), "go", checkpoint=CheckpointOptions(b, RUN))
    assert (first.replayed, first.final_output) == (False, "A")
    assert (second.replayed, second.final_output) == (False, "B")  # not a's run replayed
    assert keys == [
        ToolContext(RUN, CALL, 0, tenant="a").idempotency_key,
        ToolContext(RUN, CALL, 0, tenant="b").idempotency_key,
    ]
    assert len(set(keys)) == 2
    again = await Runner.run(agent("never"), "go", checkpoint=CheckpointOptions(a, RUN))
    assert (again.replayed, again.final_output) == (True, "A")


class _Tenanted:
    """A session stand-in of another tenant: refused before any of its methods is called."""

    tenant = "other"


async def test_the_runner_refuses_a_session_of_another_tenant(
    pair: tuple[AnyCheckpointer, AnyCheckpointer],
) -> None:
    a, _ = pair
    agent = Agent("a", ScriptedModel([[say("x")]]))
    with pytest.raises(UserError, match="tenant"):
        await Runner.run(
            agent,
            "go",
            session=_Tenanted(),  # type: ignore[arg-type]
            session_id="s",
            checkpoint=CheckpointOptions(a, RUN),
        )
    with pytest.raises(UserError, match="tenant"):
        await Runner.abandon(a, RUN, session=_Tenanted(), session_id="s")  # type: ignore[arg-type]
    assert await a.load(RUN) is None


def test_the_default_tenant_keeps_the_idempotency_key() -> None:
    assert ToolContext(RUN, CALL, 0).idempotency_key == f"{RUN}:{CALL}"


def test_no_two_tenants_share_an_idempotency_key() -> None:
    """Tenants and ids may hold ':': a key joined by ':' would make these pairs one key."""
    pairs = [
        (("acme", "run-1", "call-1"), ("", "acme:run-1", "call-1")),
        (("a", "b:run-1", "call-1"), ("a:b", "run-1", "call-1")),
        (("a", "run", "x:call"), ("a", "run:x", "call")),
    ]
    for one, other in pairs:
        keys = {
            ToolContext(run, call, 0, tenant=t).idempotency_key for t, run, call in (one, other)
        }
        assert len(keys) == 2, (one, other)
    named = ToolContext(RUN, CALL, 0, tenant="t").idempotency_key
    assert ":" not in named and len(named) == 64  # never a default tenant's run:call


# -- the lovia drop-in ----------------------------------------------------------------------


def lovia_agent(*turns: Any) -> LoviaAgent[Any]:
    return LoviaAgent(name="bot", model=ScriptedProvider(list(turns)))


@pytest.fixture
async def lovia_pair(
    sql_backend: Backend,
) -> AsyncIterator[tuple[drop_in.SQLCheckpointer, drop_in.SQLCheckpointer]]:
    assert sql_backend.target is not None
    async with Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal") as db:
        a, b = drop_in.SQLCheckpointer(db, tenant="a"), drop_in.SQLCheckpointer(db, tenant="b")
        yield a, b
        await a.close()
        await b.close()


async def test_lovias_runner_keeps_two_tenants_apart(
    lovia_pair: tuple[drop_in.SQLCheckpointer, drop_in.SQLCheckpointer],
) -> None:
    a, b = lovia_pair
    assert (a.tenant, b.tenant) == ("a", "b") and "tenant='a'" in repr(a)
    done_a = await LoviaRunner.run(lovia_agent(text("A")), "go", checkpoint=LoviaOptions(a, "job"))
    done_b = await LoviaRunner.run(lovia_agent(text("B")), "go", checkpoint=LoviaOptions(b, "job"))
    assert (done_a.output, done_b.output) == ("A", "B")  # b's run is not a's replayed
    replay = await LoviaRunner.run(lovia_agent(), "x", checkpoint=LoviaOptions(a, "job"))
    assert replay.output == "A"
    assert [r.run_id for r in await a.list_runs()] == ["job"]
    assert [r.run_id for r in await b.list_runs()] == ["job"]
    await b.delete("job")
    assert await b.load("job") is None
    stored = await a.load("job")
    assert stored is not None and stored.output == "A"


async def test_lovias_leases_are_per_tenant(
    lovia_pair: tuple[drop_in.SQLCheckpointer, drop_in.SQLCheckpointer],
) -> None:
    """A running run leased by a's worker: b's worker runs its own run of that id."""
    a, b = lovia_pair
    running = LoviaHead(agent_name="bot", usage=LoviaUsage(), turns=1)
    await a.append("job", [], running)  # a holds "job"'s lease now
    assert await b.load("job") is None
    await b.append("job", [], running)
    await b.append("job", [], LoviaHead(agent_name="bot", usage=LoviaUsage(), turns=2))
    loaded_a, loaded_b = await a.load("job"), await b.load("job")
    assert loaded_a is not None and loaded_a.turns == 1
    assert loaded_b is not None and loaded_b.turns == 2
    other = drop_in.SQLCheckpointer(a.database, tenant="a")
    with pytest.raises(RunInProgressError):
        await other.load("job")  # a's own second worker is kept out, as before
    await other.close()


async def test_lovias_sessions_of_two_tenants_keep_their_histories(
    sql_backend: Backend,
) -> None:
    assert sql_backend.target is not None
    async with Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal") as db:
        a, b = drop_in.SQLSession(db, tenant="a"), drop_in.SQLSession(db, tenant="b")
        cp_a, cp_b = (
            drop_in.SQLCheckpointer(db, tenant="a"),
            drop_in.SQLCheckpointer(db, tenant="b"),
        )
        assert (a.tenant, b.tenant) == ("a", "b")
        await LoviaRunner.run(
            lovia_agent(text("A")),
            "hi",
            session=a,
            session_id="u",
            checkpoint=LoviaOptions(cp_a, "r"),
        )
        await LoviaRunner.run(
            lovia_agent(text("B")),
            "hi",
            session=b,
            session_id="u",
            checkpoint=LoviaOptions(cp_b, "r"),
        )
        assert [s.run_id for s in await a.segments("u")] == ["r"]
        assert [s.run_id for s in await b.segments("u")] == ["r"]
        assert [e.content for e in await a.load("u")] == ["hi", "A"]
        assert [e.content for e in await b.load("u")] == ["hi", "B"]
        with pytest.raises(UserError, match="tenant"):
            await b.rewind("u", keep_entries=0, checkpointer=cp_a)
        assert len(await b.load("u")) == 2
        await cp_a.close()
        await cp_b.close()


async def test_lovias_sqlite_classes_take_a_tenant(tmp_path: Path) -> None:
    path = tmp_path / "lovia.sqlite3"
    async with (
        drop_in.SQLiteCheckpointer(path, tenant="a") as a,
        drop_in.SQLiteCheckpointer(path, wal=False) as default,
    ):
        assert (a.tenant, default.tenant) == ("a", "")
        await a.append("job", [], LoviaHead(agent_name="bot", usage=LoviaUsage(), turns=1))
        assert await default.load("job") is None
        assert [r.run_id for r in await a.list_runs()] == ["job"]
    async with drop_in.SQLiteSession(path, tenant="a") as session:
        assert session.tenant == "a"
