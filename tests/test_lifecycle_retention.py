"""Retention (``lovia_store.lifecycle.prune``) on every backend: each criterion, the
protections, dry run against real run, batches, concurrent writers, a kill -9, refusals
and the command line."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import random
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, func, select

from backends import Backend
from helpers import a_run, call, say, user
from lovia_store import (
    Agent,
    CheckpointOptions,
    Database,
    InMemoryCheckpointer,
    RunHead,
    Runner,
    ScriptedModel,
    ToolContext,
    UserError,
    function_tool,
)
from lovia_store.cli import main
from lovia_store.db.tables import messages, run_entries, run_heads, session_runs, sessions
from lovia_store.lifecycle import PruneReport, prune

HERE = Path(__file__).resolve().parent


class World:
    """One backend's session store and checkpointer, and prune over both."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.session = backend.session()
        self.checkpointer = backend.checkpointer()

    async def prune(self, **options: Any) -> PruneReport:
        if isinstance(self.checkpointer, InMemoryCheckpointer):
            return await prune(self.session, checkpointer=self.checkpointer, **options)
        return await prune(self.session, **options)

    async def add(self, *session_ids: str) -> None:
        for session_id in session_ids:
            await self.session.append(session_id, a_run(session_id))
            await asyncio.sleep(0.002)  # distinct activity times, in this order

    async def run(
        self, run_id: str, status: str, session_id: str | None = None, **fence: Any
    ) -> None:
        head = RunHead(agent_name="a", status=status)  # type: ignore[arg-type]
        await self.checkpointer.append(run_id, [user("q")], head, session_id=session_id, **fence)
        await asyncio.sleep(0.002)

    async def sessions_left(self, *session_ids: str) -> list[str]:
        return [sid for sid in session_ids if await self.session.load(sid)]

    async def runs_left(self, *run_ids: str) -> list[str]:
        return [rid for rid in run_ids if await self.checkpointer.load(rid) is not None]

    async def close(self) -> None:
        await self.session.close()
        await self.checkpointer.close()


@pytest.fixture
async def world(backend: Backend) -> AsyncIterator[World]:
    opened = World(backend)
    yield opened
    await opened.close()


@pytest.fixture
async def sql_world(sql_backend: Backend) -> AsyncIterator[World]:
    opened = World(sql_backend)
    yield opened
    await opened.close()


async def cut() -> datetime:
    """A moment strictly between what was written before and what is written after."""
    await asyncio.sleep(0.002)
    moment = datetime.now(UTC)
    await asyncio.sleep(0.002)
    return moment


async def integrity(target: str) -> dict[str, int]:
    """Every session whole (its counters match its rows) and no row without its owner."""

    def work(conn: Connection) -> dict[str, int]:
        torn = 0
        for row in conn.execute(select(sessions)).mappings():
            sid = row["session_id"]
            count = select(func.count()).where(messages.c.session_id == sid)
            runs = select(func.count()).where(session_runs.c.session_id == sid)
            torn += conn.execute(count.select_from(messages)).scalar_one() != row["message_count"]
            torn += conn.execute(runs.select_from(session_runs)).scalar_one() != row["run_count"]
        owned = select(sessions.c.session_id)
        return {
            "torn": torn,
            "orphan_messages": conn.execute(
                select(func.count()).select_from(messages).where(~messages.c.session_id.in_(owned))
            ).scalar_one(),
            "orphan_entries": conn.execute(
                select(func.count())
                .select_from(run_entries)
                .where(~run_entries.c.run_id.in_(select(run_heads.c.run_id)))
            ).scalar_one(),
            "sessions": conn.execute(select(func.count()).select_from(sessions)).scalar_one(),
        }

    async with Database(target) as db:
        return await db.read(work)


# -- each criterion ----------------------------------------------------------------------


async def test_older_than_prunes_sessions_last_active_before_the_cut(world: World) -> None:
    await world.add("a", "b")
    moment = await cut()
    await world.add("c")
    assert (await world.prune(older_than=timedelta(days=1))).sessions == []
    report = await world.prune(older_than=moment)
    assert report.sessions == ["a", "b"]
    assert await world.sessions_left("a", "b", "c") == ["c"]
    assert await world.session.load("c") == a_run("c")


async def test_keep_last_keeps_the_most_recently_active(world: World) -> None:
    await world.add("s0", "s1", "s2", "s3", "s4")
    await world.session.append("s0", a_run("again"))  # s0 is now the most recent
    assert (await world.prune(keep_last=9)).sessions == []
    assert (await world.prune(keep_last=2**64)).sessions == []  # more than can exist: all
    report = await world.prune(keep_last=2, batch_size=2)
    assert report.sessions == ["s1", "s2", "s3"]
    assert await world.sessions_left("s0", "s1", "s2", "s3", "s4") == ["s0", "s4"]
    assert (await world.prune(keep_last=0)).sessions == ["s4", "s0"]


async def test_every_criterion_given_must_hold(world: World) -> None:
    await world.add("s0", "s1")
    moment = await cut()
    await world.add("s2", "s3")
    report = await world.prune(keep_last=3, older_than=moment)
    assert report.sessions == ["s0"]  # s1 is older than the cut but among the last three


async def test_session_types_select_the_sessions_pruned(backend: Backend) -> None:
    world = World(backend)
    try:
        await world.add("lovia")
        if backend.kind == "memory":  # in memory every session is of type 0
            assert (await world.prune(session_types=[3], dry_run=True)).sessions == []
            assert (await world.prune(session_types=[0])).sessions == ["lovia"]
            return
        storage = backend.storage()
        try:
            for sid in ("t3-old", "t3-new", "t4"):
                await storage.create_session(session_id=sid, session_type=4 if sid == "t4" else 3)
                await asyncio.sleep(0.002)
            assert (await world.prune(session_types=[3], keep_last=1)).sessions == ["t3-old"]
            assert (await world.prune(session_types={3, 4})).sessions == ["t3-new", "t4"]
            assert await storage.get_session("t3-old") is None
            assert await world.sessions_left("lovia") == ["lovia"]
        finally:
            await storage.close()
    finally:
        await world.close()


async def test_checkpoints_older_than_prunes_finished_runs_only(world: World) -> None:
    await world.run("done", "completed")
    await world.checkpointer.record_intent("done", "c1", "lookup")
    await world.run("bad", "failed")
    await world.run("live", "running")
    await world.run("paused", "interrupted")
    moment = await cut()
    await world.run("done-later", "completed")
    report = await world.prune(checkpoints_older_than=moment)
    assert report.sessions == [] and report.runs == ["done", "bad"]
    assert await world.checkpointer.tool_effects("done") == {}
    left = await world.runs_left("done", "bad", "live", "paused", "done-later")
    assert left == ["live", "paused", "done-later"]
    forced = await world.prune(checkpoints_older_than=moment, include_resumable=True)
    assert forced.runs == ["live", "paused"]


# -- what protects what ------------------------------------------------------------------


async def test_a_resumable_run_keeps_its_checkpoint_and_its_session(world: World) -> None:
    await world.add("a", "b")
    await world.run("r-a", "interrupted", "a")
    await world.run("r-b", "completed", "b")
    moment = await cut()
    report = await world.prune(older_than=moment, checkpoints_older_than=moment)
    assert report.sessions == ["b"] and report.spared_sessions == ["a"]
    assert report.runs == ["r-b"]  # a pruned session takes its finished runs with it
    assert await world.sessions_left("a", "b") == ["a"]
    assert await world.runs_left("r-a", "r-b") == ["r-a"]
    forced = await world.prune(older_than=moment, include_resumable=True)
    assert forced.sessions == ["a"] and forced.runs == ["r-a"]


async def test_a_leased_run_is_never_touched(world: World) -> None:
    await world.add("a")
    lease = await world.checkpointer.acquire_lease("r", ttl=60)
    await world.run("r", "completed", "a", lease=lease)
    moment = await cut()
    options: dict[str, Any] = {
        "older_than": moment,
        "checkpoints_older_than": moment,
        "include_resumable": True,
    }
    report = await world.prune(**options)
    assert (report.sessions, report.runs, report.spared_sessions) == ([], [], ["a"])
    await world.checkpointer.release_lease(lease)
    report = await world.prune(**options)
    assert (report.sessions, report.runs) == (["a"], ["r"])


async def test_runs_naming_no_session_block_session_pruning(world: World) -> None:
    await world.add("a")
    await world.run("unlinked", "interrupted")
    await world.checkpointer.acquire_lease("starting", ttl=60)  # a run before its first write
    moment = await cut()
    report = await world.prune(older_than=moment)
    assert report.sessions == [] and report.blocking_runs == ["starting", "unlinked"]
    assert await world.sessions_left("a") == ["a"]
    ignored = await world.prune(older_than=moment, unlinked_runs="ignore")
    assert ignored.sessions == ["a"] and ignored.blocking_runs == []
    assert await world.runs_left("unlinked") == ["unlinked"]


async def test_our_runner_names_its_session_so_an_interrupted_run_keeps_it(world: World) -> None:
    @function_tool
    async def stall(ctx: ToolContext) -> str:
        """Stops the run as a crash would."""
        raise asyncio.CancelledError

    first = Agent("a", ScriptedModel([[say("hello")]]))
    options = CheckpointOptions(checkpointer=world.checkpointer, run_id="first")
    await Runner.run(first, "hi", session=world.session, session_id="chat", checkpoint=options)
    agent = Agent("a", ScriptedModel([[call("c1", "stall")]]), tools=[stall])
    options = CheckpointOptions(checkpointer=world.checkpointer, run_id="second")
    task = asyncio.ensure_future(
        Runner.run(agent, "again", session=world.session, session_id="chat", checkpoint=options)
    )
    with pytest.raises(asyncio.CancelledError):
        await task
    snapshot = await world.checkpointer.load("second")
    assert snapshot is not None and snapshot.status == "interrupted"
    report = await world.prune(older_than=datetime.now(UTC) + timedelta(days=1))
    assert report.sessions == [] and report.spared_sessions == ["chat"]
    assert report.blocking_runs == []


# -- dry run, batches, concurrency -------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 3, 500])
async def test_a_dry_run_lists_exactly_what_the_real_run_deletes(
    world: World, batch_size: int
) -> None:
    ids = [f"s{i}" for i in range(8)]
    await world.add(*ids)
    await world.run("keep-s2", "running", "s2")
    await world.run("with-s3", "completed", "s3")
    await world.run("old-done", "failed")
    moment = await cut()
    await world.add("s8")
    options: dict[str, Any] = {
        "older_than": moment,
        "keep_last": 2,
        "checkpoints_older_than": moment,
        "batch_size": batch_size,
    }
    dry = await world.prune(dry_run=True, **options)
    assert await world.sessions_left(*ids) == ids  # nothing deleted
    real = await world.prune(**options)
    assert dry.dry_run and not real.dry_run
    assert (real.sessions, real.runs, real.spared_sessions) == (
        dry.sessions,
        dry.runs,
        dry.spared_sessions,
    )
    assert real.sessions == ["s0", "s1", "s3", "s4", "s5", "s6"]
    assert real.runs == ["with-s3", "old-done"] and real.spared_sessions == ["s2"]
    assert await world.sessions_left(*ids, "s8") == ["s2", "s7", "s8"]


async def test_a_session_appended_to_during_the_prune_survives(world: World) -> None:
    await world.add("s0", "s1", "s2")
    moment = await cut()
    fired = False
    if isinstance(world.checkpointer, InMemoryCheckpointer):
        target: Any = world.session
        name = "_clear_unchanged"
    else:
        target = world.session.database
        name = "write"
    original = getattr(target, name)
    other = world.session if world.backend.kind == "memory" else world.backend.session()

    async def between(*args: Any, **kwargs: Any) -> Any:
        nonlocal fired
        if not fired:  # after the selection, before the first delete
            fired = True
            await other.append("s1", a_run("late"))
        return await original(*args, **kwargs)

    setattr(target, name, between)
    try:
        report = await world.prune(older_than=moment)
    finally:
        setattr(target, name, original)
        if other is not world.session:
            await other.close()
    assert fired and report.sessions == ["s0", "s2"]
    assert await world.session.load("s1") == a_run("s1") + a_run("late")


async def test_concurrent_writers_during_a_prune_leave_every_session_whole(
    sql_world: World,
) -> None:
    ids = [f"s{i:02}" for i in range(30)]
    await sql_world.add(*ids)
    moment = await cut()
    writer = sql_world.backend.session()
    touched: list[str] = []

    async def write() -> None:
        for n in range(30):
            sid = ids[(n * 7) % len(ids)]
            await writer.append(sid, a_run(f"late{n}"))
            touched.append(sid)

    try:
        task = asyncio.ensure_future(write())
        report = await sql_world.prune(older_than=moment, batch_size=2)
        await task
    finally:
        await writer.close()
    assert sql_world.backend.target is not None
    state = await integrity(sql_world.backend.target)
    assert state["torn"] == state["orphan_messages"] == 0
    for sid in set(touched):  # survived, or recreated by an append after its delete
        assert await sql_world.session.load(sid)
    untouched = [sid for sid in ids if sid not in touched]
    assert set(untouched) <= set(report.sessions)


async def test_a_kill_during_a_prune_leaves_no_session_half_deleted(sql_world: World) -> None:
    target = sql_world.backend.target
    assert target is not None
    ids = [f"s{i:03}" for i in range(300)]
    for sid in ids:
        await sql_world.session.append(sid, a_run(sid))
    await sql_world.run("r", "completed", "s299")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "prune_child.py"),
        target,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    try:
        assert child.stdout is not None
        said = await asyncio.wait_for(child.stdout.readline(), 120)
        assert said == b"paused\n", "the prune ended before it could be killed"
        child.send_signal(signal.SIGKILL)  # mid-transaction: the 51st session half deleted
        await asyncio.wait_for(child.wait(), 30)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    state = await integrity(target)
    assert state["torn"] == state["orphan_messages"] == state["orphan_entries"] == 0
    assert state["sessions"] == 300 - 50  # the 51st session's transaction rolled back whole
    for sid in ids[-3:]:
        assert await sql_world.session.load(sid) == a_run(sid)
    report = await prune(target, keep_last=0, checkpoints_older_than=timedelta(0))
    assert len(report.sessions) == state["sessions"] and report.runs == ["r"]
    assert (await integrity(target))["sessions"] == 0


# -- refusals ----------------------------------------------------------------------------

REFUSED: list[dict[str, Any]] = [
    {},
    {"keep_last": -1},
    {"keep_last": True},
    {"keep_last": 1.5},
    {"older_than": datetime(2020, 1, 1)},  # naive
    {"older_than": timedelta(days=-1)},
    {"older_than": timedelta(days=999_999_999)},  # before any date
    {"checkpoints_older_than": timedelta.max},
    {"older_than": "30d"},
    {"checkpoints_older_than": -timedelta(seconds=1)},
    {"session_types": []},
    {"session_types": 3},
    {"session_types": ["3"]},
    {"session_types": [True]},
    {"session_types": [2**31]},
    {"keep_last": 1, "batch_size": 0},
    {"keep_last": 1, "batch_size": 10**6},
    {"keep_last": 1, "unlinked_runs": "maybe"},
    {"keep_last": 1, "dry_run": "yes"},
    {"keep_last": 1, "include_resumable": 1},
    {"keep_last": 1, "vacuum": None},
]


async def test_refused_options_change_nothing(world: World) -> None:
    await world.add("a", "b")
    await world.run("done", "completed", "a")
    for options in REFUSED:
        with pytest.raises(UserError):
            await world.prune(**options)
    assert await world.sessions_left("a", "b") == ["a", "b"]
    assert await world.runs_left("done") == ["done"]


# -- SQLite space, and the command line --------------------------------------------------


async def test_vacuum_hands_a_sqlite_files_space_back(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite3"
    store = World(Backend("sqlite", str(path)))
    try:
        for i in range(40):  # text that does not compress, so the file holds it
            noise = base64.b64encode(random.Random(i).randbytes(37_500)).decode()
            await store.session.append(f"s{i}", [user(noise)])
        before = path.stat().st_size
        report = await store.prune(keep_last=0)
        assert report.vacuum is None and path.stat().st_size == before  # freed, not returned
        await store.add("t")
        report = await store.prune(keep_last=0, vacuum=True)
        assert report.vacuum == "full" and path.stat().st_size < before / 4
    finally:
        await store.close()


async def test_a_vacuum_that_finds_the_file_locked_is_a_typed_error_after_the_prune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lovia_store import StoreBusyError
    from lovia_store.lifecycle import prune_sql

    path = tmp_path / "locked.sqlite3"
    store = World(Backend("sqlite", str(path)))
    monkeypatch.setattr(prune_sql, "VACUUM_WAIT", 0.2)
    try:
        await store.add("a")
        await store.session.load("a")
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        original = prune_sql._vacuum

        def locked(*args: Any) -> Any:  # another process writes while the prune vacuums
            holder.execute("BEGIN EXCLUSIVE")
            try:
                return original(*args)
            finally:
                holder.execute("ROLLBACK")

        monkeypatch.setattr(prune_sql, "_vacuum", locked)
        with pytest.raises(StoreBusyError, match="the prune is done"):
            await store.prune(keep_last=0, vacuum=True)
        holder.close()
        assert await store.sessions_left("a") == []
    finally:
        await store.close()


async def test_a_file_made_with_incremental_auto_vacuum_is_trimmed(tmp_path: Path) -> None:
    path = tmp_path / "incremental.sqlite3"
    with sqlite3.connect(path) as conn:  # before the first table, as SQLite requires
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")
    store = World(Backend("sqlite", str(path)))
    try:
        for i in range(40):
            await store.session.append(f"s{i}", [user("x" * 50_000)])
        report = await store.prune(keep_last=0)
        assert report.vacuum == "incremental"
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    finally:
        await store.close()


def test_the_command_asks_before_deleting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "cli.sqlite3")

    async def fill() -> None:
        store = World(Backend("sqlite", path))
        await store.add("old", "new")
        await store.close()

    asyncio.run(fill())

    def cli(*args: str, answer: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(answer))
        capsys.readouterr()
        code = main(["prune", path, *args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = cli("--keep-last", "1", "--dry-run")
    assert code == 0 and "would delete 1 session(s)" in out and "session old" in out
    code, _, err = cli("--keep-last", "1", answer="n\n")
    assert code == 0 and "delete them?" in err and "nothing deleted" in err
    code, out, _ = cli("--keep-last", "1", "--json", answer="y\n")
    assert code == 0 and json.loads(out)["sessions"] == ["old"]
    # The prompt shows the moment an age stands for.
    code, _, err = cli("--older-than", "0s", answer="n\n")
    assert code == 0 and "sessions last active before 20" in err and " UTC)" in err
    code, out, _ = cli("--older-than", "0s", "--yes", "--json")
    assert code == 0 and json.loads(out)["sessions"] == ["new"]
    # Nothing selected: the command ran (a VACUUM too), it was no dry run.
    code, out, _ = cli("--older-than", "0s", "--yes", "--vacuum", "--json")
    done = json.loads(out)
    assert code == 0 and done["sessions"] == [] and done["dry_run"] is False
    assert done["vacuum"] is not None
    code, _, err = cli("--older-than", "0s")  # nothing to ask about: nothing run
    assert code == 0 and "delete them?" not in err
    assert cli("--keep-last", "-1")[0] == 2
    assert cli("--older-than", "soon")[0] == 2
    assert cli("--yes")[0] == 2  # no criterion: a UserError
    # Units that cannot be misread: "6m" (minutes or months?) is refused, naming both.
    code, _, err = cli("--older-than", "6m")
    assert code == 2 and "minutes or months" in err and "90min" in err
    assert cli("--older-than", "1w2d3h4min5s", "--dry-run")[0] == 0
    for age in ("99999999999d", "999999999d"):  # past timedelta's range, then past any date
        code, _, err = cli("--older-than", age)
        assert code == 2 and "further than any date" in err and "Traceback" not in err


async def test_lovias_own_runner_names_no_session_so_its_interrupted_run_blocks(
    sql_backend: Backend,
) -> None:
    """lovia's Runner tells its checkpointer no session: the safe default prunes none."""
    import lovia
    from lovia.testing import ScriptedProvider, text
    from lovia.testing import call as lovia_call

    from lovia_store.integrations import lovia as ours

    assert sql_backend.target is not None
    async with Database(sql_backend.target) as db:
        session, checkpointer = ours.SQLSession(db), ours.SQLCheckpointer(db)
        done = lovia.Agent(name="bot", model=ScriptedProvider([text("hi")]))
        await lovia.Runner.run(done, "hello", session=session, session_id="u1")
        stuck = lovia.Agent(
            name="bot", model=ScriptedProvider([lovia_call("weather", {"city": "Oslo"})])
        )
        with pytest.raises(lovia.MaxTurnsExceeded):
            await lovia.Runner.run(
                stuck,
                "again",
                session=session,
                session_id="u1",
                checkpoint=lovia.CheckpointOptions(checkpointer, "h"),
                max_turns=1,
            )
        snapshot = await checkpointer.load("h")
        assert snapshot is not None and snapshot.status == "interrupted"
        later = datetime.now(UTC) + timedelta(days=1)
        report = await prune(session, older_than=later)
        assert report.sessions == [] and report.blocking_runs == ["h"]
        assert len(await session.segments("u1")) == 1
        report = await prune(session, older_than=later, unlinked_runs="ignore")
        assert report.sessions == ["u1"]
        assert await checkpointer.load("h") is not None  # resumable: kept
