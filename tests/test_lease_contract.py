"""The run-lease contract, on every backend: one executor per run, fenced by a token.

A lease is taken before a run executes; writes made under it renew it, and
are refused once another worker took the run over. These tests pin the
store's side; ``test_lease_processes`` proves it with real paused and killed
worker processes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from backends import Backend
from helpers import call, eventually, say, user
from lovia_store import (
    Agent,
    CheckpointOptions,
    Database,
    InMemoryCheckpointer,
    InMemorySession,
    RunHead,
    RunInProgressError,
    RunLease,
    Runner,
    RunOwnershipLost,
    ScriptedModel,
    SQLCheckpointer,
    ToolContext,
    UserError,
    function_tool,
)
from lovia_store.checkpoints.leases import this_holder
from lovia_store.db.tables import run_leases

AnyCheckpointer = InMemoryCheckpointer | SQLCheckpointer
HEAD = RunHead(agent_name="a")


@pytest.fixture
async def cp(backend: Backend) -> AsyncIterator[AnyCheckpointer]:
    """The checkpointer of every backend (conftest's registry), memory included."""
    async with backend.checkpointer() as store:
        yield store


def now_ms() -> int:
    return round(time.time() * 1000)


async def stored_expiry(cp: AnyCheckpointer, run_id: str) -> int:
    """The run lease's expiry as stored (epoch milliseconds)."""
    if isinstance(cp, InMemoryCheckpointer):
        return round(cp._leases[run_id].expires_at.timestamp() * 1000)

    def read(conn: Any) -> int:
        query = select(run_leases.c.expires_ms).where(run_leases.c.run_id == run_id)
        return int(conn.execute(query).scalar_one())

    return await cp.database.read(read)


async def store_expiry(cp: AnyCheckpointer, run_id: str, expires_ms: int) -> None:
    """Set the stored expiry, as time passing would: 1 is a lease that lapsed long ago."""
    if isinstance(cp, InMemoryCheckpointer):
        held = cp._leases[run_id]
        when = datetime.fromtimestamp(expires_ms / 1000, UTC)
        cp._leases[run_id] = held.model_copy(update={"expires_at": when})
        return

    def write(conn: Any) -> None:
        lease = update(run_leases).where(run_leases.c.run_id == run_id)
        conn.execute(lease.values(expires_ms=expires_ms))

    await cp.database.write(write)


async def renewed_in_the_background(cp: AnyCheckpointer, run_id: str) -> None:
    """Lapse the stored lease; return once its holder's background renewal restored it."""
    await store_expiry(cp, run_id, 1)

    async def restored() -> bool:
        return await stored_expiry(cp, run_id) > now_ms()

    await eventually(restored)


async def test_a_lease_names_its_holder_and_expiry(cp: AnyCheckpointer) -> None:
    before = datetime.now(UTC)
    lease = await cp.acquire_lease("r", ttl=30)
    assert (lease.run_id, lease.token, lease.holder, lease.ttl) == ("r", 1, this_holder(), 30.0)
    # The server's clock judges expiry; it agrees with ours to within a second here.
    skew = timedelta(seconds=1)
    assert before + timedelta(seconds=30) - skew <= lease.expires_at
    assert lease.expires_at <= datetime.now(UTC) + timedelta(seconds=30) + skew


async def test_a_held_run_is_refused_and_the_holder_keeps_it(cp: AnyCheckpointer) -> None:
    lease = await cp.acquire_lease("r", ttl=30)
    with pytest.raises(RunInProgressError) as caught:
        await cp.acquire_lease("r", ttl=30)
    assert caught.value.run_id == "r" and caught.value.holder == lease.holder
    assert "in progress" in str(caught.value) and lease.holder in str(caught.value)
    assert abs(caught.value.expires_at - lease.expires_at) < timedelta(seconds=1)
    # The refusal changed nothing: the holder still writes under its lease.
    await cp.append("r", [user("go")], HEAD, lease=lease)
    assert await cp.renew_lease(lease)
    snapshot = await cp.load("r")
    assert snapshot is not None and snapshot.entries == [user("go")]


async def test_a_lapsed_lease_is_taken_over_and_its_writes_are_refused(
    cp: AnyCheckpointer,
) -> None:
    stalled = await cp.acquire_lease("r", ttl=30)
    await cp.append("r", [user("go")], HEAD, lease=stalled)
    await cp.renew_lease(stalled)
    await store_expiry(cp, "r", 1)  # thirty seconds later, the holder stalled
    successor = await cp.acquire_lease("r", ttl=30)
    assert successor.token == stalled.token + 1 and successor.lease_id != stalled.lease_id

    with pytest.raises(RunOwnershipLost) as caught:
        await cp.append("r", [say("forked")], HEAD.model_copy(update={"turns": 9}), lease=stalled)
    assert caught.value.run_id == "r" and caught.value.token == stalled.token
    with pytest.raises(RunOwnershipLost):
        await cp.renew_lease(stalled)
    with pytest.raises(RunOwnershipLost):
        await cp.record_intent("r", "c1", "charge", lease=stalled)

    snapshot = await cp.load("r")
    assert snapshot is not None and snapshot.entries == [user("go")] and snapshot.turns == 0
    assert await cp.tool_effects("r") == {}
    await cp.append("r", [say("continued")], HEAD, lease=successor)
    # Releasing a lost lease leaves the successor's alone.
    await cp.release_lease(stalled)
    with pytest.raises(RunInProgressError):
        await cp.acquire_lease("r")


async def test_writes_renew_the_lease(cp: AnyCheckpointer) -> None:
    lease = await cp.acquire_lease("r", ttl=30)
    for _ in range(3):
        await store_expiry(cp, "r", now_ms() + 2_000)  # about to lapse
        before = now_ms()
        await cp.append("r", [say("step")], HEAD, lease=lease)
        # Renewed by the write to a full ttl (the judging clock agrees with ours to 1 s).
        assert await stored_expiry(cp, "r") >= before + 29_000
        with pytest.raises(RunInProgressError):
            await cp.acquire_lease("r")
    await store_expiry(cp, "r", now_ms() + 2_000)
    before = now_ms()
    renewed = await cp.renew_lease(lease)
    assert renewed.token == lease.token
    assert renewed.expires_at.timestamp() * 1000 >= before + 29_000


async def test_a_released_lease_lets_the_next_worker_in_at_once(cp: AnyCheckpointer) -> None:
    first = await cp.acquire_lease("r", ttl=30)
    await cp.append("r", [user("go")], HEAD, lease=first)
    await cp.release_lease(first)
    second = await cp.acquire_lease("r", ttl=30)
    # The run is still stored, so its token keeps growing.
    assert second.token == first.token + 1
    with pytest.raises(RunOwnershipLost):
        await cp.append("r", [say("late")], HEAD, lease=first)


async def test_a_deleted_run_keeps_a_live_lease_and_drops_an_idle_one(
    cp: AnyCheckpointer,
) -> None:
    lease = await cp.acquire_lease("r", ttl=30)
    await cp.append("r", [user("go")], HEAD, lease=lease)
    await cp.delete("r")  # what if_run_exists="restart" does while holding the run
    await cp.append("r", [user("again")], HEAD, lease=lease)
    await cp.delete("r")
    await cp.release_lease(lease)
    # Nothing is left of the run, its lease included: a new run starts afresh.
    fresh = await cp.acquire_lease("r", ttl=30)
    assert fresh.token == 1
    with pytest.raises(RunOwnershipLost):
        await cp.append("r", [user("stale")], HEAD, lease=lease)


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), True, "30", None, 10**9])
async def test_a_bad_ttl_is_refused(cp: AnyCheckpointer, ttl: Any) -> None:
    with pytest.raises(UserError, match="ttl"):
        await cp.acquire_lease("r", ttl=ttl)
    await cp.acquire_lease("r")  # nothing was taken by the refused call


async def test_a_lease_is_only_good_for_its_own_run(cp: AnyCheckpointer) -> None:
    lease = await cp.acquire_lease("r")
    with pytest.raises(UserError, match="lease is for run 'r'"):
        await cp.append("other", [user("go")], HEAD, lease=lease)
    with pytest.raises(UserError, match="RunLease"):
        await cp.append("r", [user("go")], HEAD, lease="token-1")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="RunLease"):
        await cp.renew_lease(lease.model_dump())  # type: ignore[arg-type]
    assert await cp.load("other") is None and await cp.load("r") is None


async def test_a_holder_on_another_host_is_waited_out(sql_backend: Backend) -> None:
    """Only a holder on this host can be seen to be gone; others' leases must lapse."""
    assert sql_backend.target is not None
    database = Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal")
    async with SQLCheckpointer(database) as store:
        await store.acquire_lease("r", ttl=30)

        def elsewhere(conn: Any) -> None:
            conn.execute(update(run_leases).values(holder="pid 1 on other-host pid:[1]"))

        await database.write(elsewhere)
        with pytest.raises(RunInProgressError, match="other-host"):
            await store.acquire_lease("r")
        await store_expiry(store, "r", 1)  # its ttl went by
        assert (await store.acquire_lease("r")).token == 2
    await database.close()


# -- the runner holds the lease -------------------------------------------------------------------


def waiting_agent(gate: asyncio.Event, started: asyncio.Event) -> Agent:
    @function_tool
    async def wait(ctx: ToolContext) -> str:
        """Block until the test lets the run go on."""
        started.set()
        await gate.wait()
        return "waited"

    script = ScriptedModel([[call("c1", "wait")], [say("done")]])
    return Agent("a", script, tools=[wait])


async def test_a_run_in_progress_is_not_started_twice(cp: AnyCheckpointer) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    agent = waiting_agent(gate, started)
    options = CheckpointOptions(cp, "r", lease_ttl=30)
    first = asyncio.create_task(Runner.run(agent, "go", checkpoint=options))
    await started.wait()
    for policy in ("resume", "restart", "resume_only", "fail"):
        again = CheckpointOptions(cp, "r", if_run_exists=policy)  # type: ignore[arg-type]
        with pytest.raises(RunInProgressError):
            await Runner.run(agent, "go", checkpoint=again)
    gate.set()
    outcome = await first
    assert outcome.final_output == "done"
    # Released on success: the same call now replays the stored result at once.
    replay = await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, "r"))
    assert replay.replayed and replay.entries == outcome.entries


async def test_a_waiting_tool_keeps_the_lease(cp: AnyCheckpointer) -> None:
    """The runner renews in the background while a tool waits, with no write to renew it."""
    gate, started = asyncio.Event(), asyncio.Event()
    options = CheckpointOptions(cp, "r", lease_ttl=1.5)
    run = asyncio.create_task(Runner.run(waiting_agent(gate, started), "go", checkpoint=options))
    await started.wait()
    await renewed_in_the_background(cp, "r")
    await renewed_in_the_background(cp, "r")  # and again: it keeps renewing
    gate.set()
    assert (await run).final_output == "done"


async def test_a_worker_that_lost_its_run_stops_without_writing(cp: AnyCheckpointer) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    options = CheckpointOptions(cp, "r", lease_ttl=30)
    first = asyncio.create_task(Runner.run(waiting_agent(gate, started), "go", checkpoint=options))
    await started.wait()
    before = await cp.load("r")
    # Take the run away as a worker on another host would after a stall.
    stolen = await _steal(cp, "r")
    gate.set()
    with pytest.raises(RunOwnershipLost):
        await first
    assert await cp.load("r") == before
    await cp.append("r", [], HEAD, lease=stolen)  # the new holder is unaffected


async def _steal(cp: AnyCheckpointer, run_id: str) -> RunLease:
    """The run's lease, taken from its holder as if it had lapsed."""
    await store_expiry(cp, run_id, 1)
    return await cp.acquire_lease(run_id)


async def test_leases_can_be_turned_off(cp: AnyCheckpointer) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    gate.set()
    options = CheckpointOptions(cp, "r", lease_ttl=None)
    outcome = await Runner.run(waiting_agent(gate, started), "go", checkpoint=options)
    assert outcome.final_output == "done"
    assert (await cp.acquire_lease("r")).token == 1  # the run never took one


@pytest.mark.parametrize("ttl", [0, -2.5, float("nan"), "30", True])
def test_a_bad_lease_ttl_option_is_refused(ttl: Any) -> None:
    with pytest.raises(UserError, match="ttl"):
        CheckpointOptions(InMemoryCheckpointer(), "r", lease_ttl=ttl)


async def test_a_run_in_progress_cannot_be_abandoned(cp: AnyCheckpointer) -> None:
    session = InMemorySession()
    lease = await cp.acquire_lease("r", ttl=30)
    await cp.append("r", [user("go")], HEAD, lease=lease)
    with pytest.raises(RunInProgressError):
        await Runner.abandon(cp, "r", session=session, session_id="s")
    assert await session.load("s") == [] and await cp.load("r") is not None
    await cp.release_lease(lease)
    assert await Runner.abandon(cp, "r", session=session, session_id="s") == [user("go")]
    assert await cp.load("r") is None
    assert (await cp.acquire_lease("r")).token == 1  # nothing of the run is left


async def test_a_blocking_tool_keeps_the_lease(cp: AnyCheckpointer) -> None:
    """A sync tool runs in a thread, so the renewal goes on while it blocks."""
    started, release = threading.Event(), threading.Event()

    @function_tool
    def block() -> str:
        """Block the calling thread until the test releases it."""
        started.set()
        assert release.wait(120)
        return "done blocking"

    agent = Agent("a", ScriptedModel([[call("c1", "block")], [say("done")]]), tools=[block])
    options = CheckpointOptions(cp, "r", lease_ttl=1.5)
    run = asyncio.create_task(Runner.run(agent, "go", checkpoint=options))
    assert await asyncio.to_thread(started.wait, 60)
    try:
        await renewed_in_the_background(cp, "r")
        await renewed_in_the_background(cp, "r")
    finally:
        release.set()
    assert (await run).final_output == "done"


async def test_a_stale_worker_cannot_delete_the_run(cp: AnyCheckpointer) -> None:
    stalled = await cp.acquire_lease("r", ttl=30)
    await cp.append("r", [user("go")], HEAD, lease=stalled)
    await _steal(cp, "r")
    with pytest.raises(RunOwnershipLost):
        await cp.delete("r", lease=stalled)
    assert await cp.load("r") is not None
