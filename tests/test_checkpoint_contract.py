"""The lovia checkpoint contract, run on every backend (memory, SQLite, SQLite WAL, PostgreSQL).

A checkpointer keeps one run in flight: append-only entries plus a small head
that every append replaces. These tests pin what ``Runner`` relies on when it
resumes or replays a run, and what an operator sees through ``list_runs``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import LEGACY, SQLITE_KINDS, Backend
from helpers import a_run, call, result, say, user
from lovia_store import (
    Checkpointer,
    Database,
    InMemoryCheckpointer,
    InMemorySession,
    InputEntry,
    RunHead,
    RunSnapshot,
    SQLCheckpointer,
    SQLiteCheckpointer,
    SQLiteSession,
    SQLSession,
    TranscriptEntry,
    Usage,
    UserError,
    entry_from_dict,
    entry_to_dict,
)

MANIFEST = json.loads((LEGACY / "lovia-0.9.119.manifest.json").read_text())

AnyCheckpointer = InMemoryCheckpointer | SQLCheckpointer
AnySession = InMemorySession | SQLSession


def make_checkpointer(backend: Backend) -> AnyCheckpointer:
    """The checkpointer twin of ``Backend.session()`` (conftest stays untouched)."""
    if backend.kind == "memory":
        return InMemoryCheckpointer()
    assert backend.target is not None
    if backend.kind in SQLITE_KINDS:
        return SQLiteCheckpointer(backend.target, wal=backend.kind == "sqlite_wal")
    return SQLCheckpointer(backend.target)


@pytest.fixture
def checkpointer(backend: Backend) -> Callable[[], AnyCheckpointer]:
    """A factory: every call opens a new checkpointer on the test's backend."""
    return lambda: make_checkpointer(backend)


@pytest.fixture
def sql_checkpointer(sql_backend: Backend) -> Callable[[], AnyCheckpointer]:
    return lambda: make_checkpointer(sql_backend)


def full_head(**changes: Any) -> RunHead:
    """A head with every field away from its default, so a lost field shows."""
    values: dict[str, Any] = {
        "agent_name": "researcher",
        "usage": Usage(
            input_tokens=120,
            output_tokens=34,
            cache_read_tokens=56,
            cache_write_tokens=7,
            reasoning_tokens=8,
        ),
        "turns": 3,
        "status": "interrupted",
        "output": {"answer": [1, 2.5, "drei", None, True], "nested": {"k": {}}},
        "error": {"type": "ProviderError", "message": "overloaded", "details": {"n": 3}},
        "last_input_tokens": 99,
        "context_state": {"context": {"version": 3, "summary": {"text": "ünïcødé ✓"}}},
        "started_at": 1767261599.5,
        "pending_handoff": "writer",
        "updated_at": 1767261607.75,
    }
    values.update(changes)
    return RunHead(**values)


def rich_entries() -> list[TranscriptEntry]:
    """Every entry shape the lovia fixture holds (parts, reasoning metadata, unicode)."""
    return [
        entry_from_dict(e)
        for session in MANIFEST["sessions"]
        for run in session["runs"]
        for e in run["entries"]
    ]


# -- append and load ------------------------------------------------------------------------------


async def test_is_a_checkpointer(checkpointer: Callable[[], AnyCheckpointer]) -> None:
    """Every bundled store satisfies the runtime-checkable protocol CheckpointOptions checks."""
    async with checkpointer() as cp:
        assert isinstance(cp, Checkpointer)


async def test_load_rebuilds_entries_in_order_and_the_latest_head(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """Batches concatenate in append order; the head is the last one written, field for field."""
    entries = rich_entries()
    batches = [entries[:1], entries[1:4], entries[4:5], entries[5:]]
    async with checkpointer() as cp:
        for turns, batch in enumerate(batches):
            await cp.append("run-1", batch, full_head(turns=turns, status="running"))
        last = full_head()
        await cp.append("run-1", [], last)
        snapshot = await cp.load("run-1")
    assert snapshot is not None
    assert snapshot.run_id == "run-1"
    assert [entry_to_dict(e) for e in snapshot.entries] == [entry_to_dict(e) for e in entries]
    assert snapshot.head == last
    # Each head field survives, not just equality of the whole model.
    assert snapshot.usage == last.usage and snapshot.usage.reasoning_tokens == 8
    assert snapshot.turns == 3 and snapshot.status == "interrupted"
    assert snapshot.output == last.output and snapshot.error == last.error
    assert snapshot.context_state == last.context_state
    assert snapshot.last_input_tokens == 99
    assert snapshot.started_at == 1767261599.5 and snapshot.updated_at == 1767261607.75
    assert snapshot.pending_handoff == "writer" and snapshot.agent_name == "researcher"


async def test_a_large_batch_keeps_its_order(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """One multi-row append keeps entry order."""
    batch = [say(f"step {i}") for i in range(300)]
    async with checkpointer() as cp:
        await cp.append("big", batch[:1], RunHead(agent_name="a"))
        await cp.append("big", batch[1:], RunHead(agent_name="a", turns=300))
        snapshot = await cp.load("big")
    assert snapshot is not None and snapshot.entries == batch


async def test_head_only_append_changes_the_head_and_adds_no_entries(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """The runner's head-only writes (handoff pending, finalization) must not add entries."""
    async with checkpointer() as cp:
        await cp.append("r", a_run("1"), RunHead(agent_name="a", turns=1))
        await cp.append("r", [], RunHead(agent_name="b", turns=2, status="completed", output="x"))
        snapshot = await cp.load("r")
    assert snapshot is not None
    assert snapshot.entries == a_run("1")
    assert (snapshot.agent_name, snapshot.turns, snapshot.status, snapshot.output) == (
        "b",
        2,
        "completed",
        "x",
    )


async def test_a_head_only_first_append_creates_an_empty_run(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """A run may exist with a head and no entries yet."""
    async with checkpointer() as cp:
        await cp.append("r", [], RunHead(agent_name="a"))
        snapshot = await cp.load("r")
    assert snapshot is not None and snapshot.entries == [] and snapshot.agent_name == "a"


async def test_stored_entries_are_never_rewritten(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """Appending the same entries again adds them again; nothing earlier changes or merges."""
    async with checkpointer() as cp:
        await cp.append("r", [user("q"), call("c1")], RunHead(agent_name="a"))
        await cp.append("r", [call("c1"), result("c1", "second")], RunHead(agent_name="a"))
        snapshot = await cp.load("r")
        assert snapshot is not None
        assert snapshot.entries == [user("q"), call("c1"), call("c1"), result("c1", "second")]
        # A loaded snapshot is the caller's: changing it changes nothing stored.
        snapshot.entries.clear()
        snapshot.context_state["leak"] = True
        again = await cp.load("r")
    assert again is not None
    assert again.entries == [user("q"), call("c1"), call("c1"), result("c1", "second")]
    assert again.context_state == {}


async def test_the_stored_head_is_not_aliased(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """The runner mutates one RunHead in place; what was stored must not follow it."""
    head = full_head()
    expected = head.model_copy(deep=True)
    async with checkpointer() as cp:
        await cp.append("r", a_run("1"), head)
        head.turns = 99
        head.status = "completed"
        head.usage.input_tokens = 1
        context, output = head.context_state["context"], head.output
        assert isinstance(context, dict) and isinstance(output, dict)
        context["version"] = 4
        answer = output["answer"]
        assert isinstance(answer, list)
        answer.append("mutated")
        snapshot = await cp.load("r")
    assert snapshot is not None and snapshot.head == expected


async def test_runs_are_kept_apart(checkpointer: Callable[[], AnyCheckpointer]) -> None:
    """Concurrent runs never see each other's entries or heads."""
    async with checkpointer() as cp:
        await asyncio.gather(
            *(
                cp.append(f"r{i}", a_run(str(i)), RunHead(agent_name=f"a{i}", turns=i))
                for i in range(8)
            )
        )
        for i in range(8):
            snapshot = await cp.load(f"r{i}")
            assert snapshot is not None
            assert (snapshot.entries, snapshot.agent_name, snapshot.turns) == (
                a_run(str(i)),
                f"a{i}",
                i,
            )


async def test_concurrent_appends_to_one_run_lose_nothing(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """Positions are reserved atomically: every batch lands whole and none overwrite another."""
    async with checkpointer() as cp:
        await cp.append("r", [user("start")], RunHead(agent_name="a"))
        await asyncio.gather(
            *(cp.append("r", a_run(str(i)), RunHead(agent_name="a", turns=i)) for i in range(10))
        )
        snapshot = await cp.load("r")
    assert snapshot is not None
    assert snapshot.entries[0] == user("start") and len(snapshot.entries) == 41
    batches = [snapshot.entries[1 + 4 * k : 5 + 4 * k] for k in range(10)]
    questions = [batch[0] for batch in batches]
    assert sorted(questions, key=str) == sorted((user(f"q {i}") for i in range(10)), key=str)
    for batch, question in zip(batches, questions, strict=True):
        assert isinstance(question, InputEntry) and isinstance(question.content, str)
        assert batch == a_run(question.content.removeprefix("q "))


async def test_unknown_run_loads_none(checkpointer: Callable[[], AnyCheckpointer]) -> None:
    """None, not an empty snapshot, tells the runner to start fresh."""
    async with checkpointer() as cp:
        assert await cp.load("nobody") is None
        await cp.append("somebody", [user("q")], RunHead(agent_name="a"))
        assert await cp.load("nobody") is None


async def test_delete_removes_only_that_run_and_unknown_is_a_no_op(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """Deleting is idempotent and scoped to one run; the id can be reused afterwards."""
    async with checkpointer() as cp:
        await cp.append("gone", a_run("g"), RunHead(agent_name="a", turns=5))
        await cp.append("kept", a_run("k"), RunHead(agent_name="a"))
        await cp.delete("gone")
        await cp.delete("gone")
        await cp.delete("never-existed")
        assert await cp.load("gone") is None
        kept = await cp.load("kept")
        assert kept is not None and kept.entries == a_run("k")
        assert [r.run_id for r in await cp.list_runs()] == ["kept"]
        # A deleted id is free again: a new run under it starts from nothing.
        await cp.append("gone", [user("again")], RunHead(agent_name="b"))
        again = await cp.load("gone")
    assert again is not None
    assert again.entries == [user("again")] and again.turns == 0 and again.agent_name == "b"


# -- list_runs ------------------------------------------------------------------------------------


async def test_list_runs_by_latest_update_with_status_limit_and_offset(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """An operator finds interrupted runs, newest activity first, page by page."""
    async with checkpointer() as cp:
        statuses = {"r1": "running", "r2": "interrupted", "r3": "completed", "r4": "interrupted"}
        for run_id, status in statuses.items():
            await cp.append(run_id, a_run(run_id), RunHead(agent_name="a", status=status))
            await asyncio.sleep(0.01)
        # A head-only refresh of r2 makes it the most recently updated run.
        await cp.append(
            "r2", [], RunHead(agent_name="b", status="interrupted", turns=4, started_at=12.5)
        )
        runs = await cp.list_runs()
        assert [r.run_id for r in runs] == ["r2", "r4", "r3", "r1"]
        assert [r.run_id for r in await cp.list_runs(status="interrupted")] == ["r2", "r4"]
        assert [r.run_id for r in await cp.list_runs(status="completed")] == ["r3"]
        assert await cp.list_runs(status="failed") == []
        assert [r.run_id for r in await cp.list_runs(limit=2)] == ["r2", "r4"]
        assert [r.run_id for r in await cp.list_runs(limit=2, offset=1)] == ["r4", "r3"]
        assert [r.run_id for r in await cp.list_runs(status="interrupted", offset=1)] == ["r4"]
        assert await cp.list_runs(offset=4) == []
    top = runs[0]
    assert (top.status, top.agent_name, top.turns, top.entry_count, top.started_at) == (
        "interrupted",
        "b",
        4,
        4,
        12.5,
    )
    assert top.updated_at.tzinfo is not None
    assert all(a.updated_at >= b.updated_at for a, b in itertools.pairwise(runs))
    assert abs((datetime.now(UTC) - top.updated_at).total_seconds()) < 60


BAD_LISTINGS: list[dict[str, Any]] = [
    {"status": "paused"},
    {"status": ""},
    {"limit": 0},
    {"limit": -1},
    {"limit": True},
    {"limit": "10"},
    {"limit": 2.0},
    {"offset": -1},
    {"offset": None},
    {"offset": False},
]


async def test_list_runs_refuses_bad_arguments(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """Bad paging or status is a UserError (a ValueError), not an empty or wrong page."""
    async with checkpointer() as cp:
        await cp.append("r", [user("q")], RunHead(agent_name="a"))
        for arguments in BAD_LISTINGS:
            with pytest.raises(UserError) as raised:
                await cp.list_runs(**arguments)
            assert isinstance(raised.value, ValueError), arguments
            field = next(iter(arguments))
            assert field in str(raised.value), arguments


# -- bad input: a clear error, and nothing stored -------------------------------------------------


@pytest.mark.parametrize(
    "entries",
    [
        [{"type": "input", "role": "user", "content": "a dict, not an entry"}],
        ["text"],
        [None],
        [user("fine"), 42],
    ],
)
async def test_non_entries_are_refused_and_nothing_stored(
    checkpointer: Callable[[], AnyCheckpointer], entries: list[Any]
) -> None:
    """A batch with a non-entry is refused whole: no partial batch, no head change."""
    async with checkpointer() as cp:
        with pytest.raises(UserError, match=r"entries\[\d\]"):
            await cp.append("new", entries, RunHead(agent_name="a"))
        assert await cp.load("new") is None
        await cp.append("old", [user("q")], RunHead(agent_name="a"))
        with pytest.raises(UserError):
            await cp.append("old", entries, RunHead(agent_name="changed", turns=9))
        old = await cp.load("old")
    assert old is not None and old.entries == [user("q")] and old.agent_name == "a"


@pytest.mark.parametrize(
    "head",
    [
        None,
        {"agent_name": "a"},
        "a",
        RunSnapshot(run_id="r", agent_name="a"),
    ],
    ids=["none", "dict", "str", "snapshot"],
)
async def test_a_head_that_is_not_a_run_head_is_refused(
    checkpointer: Callable[[], AnyCheckpointer], head: Any
) -> None:
    """Only a RunHead is a head (a snapshot is not); nothing is stored otherwise."""
    async with checkpointer() as cp:
        with pytest.raises(UserError, match="head"):
            await cp.append("r", [user("q")], head)
        assert await cp.load("r") is None
        assert await cp.list_runs() == []


@pytest.mark.parametrize("run_id", ["", None, 7, "x" * 256])
async def test_bad_run_ids_are_refused(
    checkpointer: Callable[[], AnyCheckpointer], run_id: Any
) -> None:
    """run_id is the global key: empty, non-string or over-long ids are refused everywhere."""
    async with checkpointer() as cp:
        with pytest.raises(UserError, match="run_id"):
            await cp.append(run_id, [user("q")], RunHead(agent_name="a"))
        with pytest.raises(UserError, match="run_id"):
            await cp.load(run_id)
        with pytest.raises(UserError, match="run_id"):
            await cp.delete(run_id)
        assert await cp.list_runs() == []


# -- RunSnapshot ----------------------------------------------------------------------------------


def test_snapshot_from_parts_and_head_round_trip() -> None:
    """from_parts and .head are inverse, and neither shares mutable state."""
    head = full_head()
    entries = a_run("1")
    snapshot = RunSnapshot.from_parts("r", entries, head)
    assert snapshot.run_id == "r" and snapshot.entries == entries
    assert snapshot.head == head
    assert type(snapshot.head) is RunHead
    assert RunSnapshot.from_parts("r", snapshot.entries, snapshot.head) == snapshot
    # The head is a copy: changing it leaves the snapshot alone, and the reverse.
    copy = snapshot.head
    copy.turns = 42
    copy.context_state["x"] = 1
    assert snapshot.turns == 3 and "x" not in snapshot.context_state
    entries.append(say("later"))
    assert snapshot.entries == a_run("1")


def test_snapshot_reads_leniently() -> None:
    """A head written by a newer lovia loads: unknown fields are ignored."""
    data = {
        "run_id": "r",
        "entries": [entry_to_dict(e) for e in a_run("1")],
        "agent_name": "a",
        "usage": {"input_tokens": 1, "future_counter": 5},
        "future_field": {"x": 1},
    }
    snapshot = RunSnapshot.model_validate(data)
    assert snapshot.entries == a_run("1")
    assert snapshot.usage == Usage(input_tokens=1)
    assert snapshot.status == "running" and snapshot.started_at is None


# -- durability -----------------------------------------------------------------------------------


async def test_survives_reopening(sql_checkpointer: Callable[[], AnyCheckpointer]) -> None:
    """Crash recovery needs the snapshot on disk: a new store on the same database sees it."""
    head = full_head()
    async with sql_checkpointer() as cp:
        await cp.append("r", rich_entries()[:3], head.model_copy(update={"turns": 1}))
        await cp.append("r", rich_entries()[3:], head)
    async with sql_checkpointer() as cp:
        snapshot = await cp.load("r")
        assert snapshot is not None
        assert snapshot.entries == rich_entries() and snapshot.head == head
        await cp.append("r", [say("after reopening")], head)
        again = await cp.load("r")
    assert again is not None and again.entries == [*rich_entries(), say("after reopening")]


def manifest_snapshot(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The manifest's snapshot as this version dumps it (lovia had four usage counters)."""
    expected = dict(checkpoint["snapshot"])
    expected["usage"] = {**expected["usage"], "reasoning_tokens": 0}
    return expected


async def test_the_lovia_fixtures_checkpoints_load_as_the_manifest_says(
    legacy_copy: Callable[[str], Path],
) -> None:
    """Runs checkpointed by lovia 0.9.119 load (and continue) after the migration."""
    path = legacy_copy("lovia-0.9.119.sqlite3")
    checkpoints = MANIFEST["checkpoints"]
    assert len(checkpoints) == 3
    async with SQLiteCheckpointer(path) as cp:
        for checkpoint in checkpoints:
            snapshot = await cp.load(checkpoint["run_id"])
            assert snapshot is not None
            assert snapshot.model_dump(mode="json") == manifest_snapshot(checkpoint)
            assert [entry_to_dict(e) for e in snapshot.entries] == checkpoint["snapshot"]["entries"]
        runs = await cp.list_runs()
        by_id = {c["run_id"]: c for c in checkpoints}
        ordered = sorted(by_id, key=lambda r: by_id[r]["head_updated_at_column"], reverse=True)
        assert [r.run_id for r in runs] == ordered
        for summary in runs:
            stored = by_id[summary.run_id]
            assert summary.status == stored["snapshot"]["status"]
            assert summary.entry_count == len(stored["snapshot"]["entries"])
            assert summary.turns == stored["snapshot"]["turns"]
            assert summary.updated_at.timestamp() == pytest.approx(stored["head_updated_at_column"])
        interrupted_or_running = await cp.list_runs(status="running")
        assert [r.run_id for r in interrupted_or_running] == ["ckpt-running"]
        # The migrated runs keep accepting appends after their old entries.
        await cp.append("ckpt-running", [say("continued")], RunHead(agent_name="writer"))
        continued = await cp.load("ckpt-running")
    assert continued is not None
    assert [entry_to_dict(e) for e in continued.entries[:-1]] == checkpoints[0]["snapshot"][
        "entries"
    ]
    assert continued.entries[-1] == say("continued")


# -- rewind with a checkpointer -------------------------------------------------------------------


async def _three_runs_with_checkpoints(session: AnySession, cp: Any) -> None:
    for tag in ("r1", "r2", "r3"):
        await session.append("s", a_run(tag), run_id=tag)
        await cp.append(tag, a_run(tag), RunHead(agent_name="a", status="completed"))
    await cp.append("unrelated", [user("elsewhere")], RunHead(agent_name="a"))


async def _remaining(cp: Any) -> set[str]:
    return {r for r in ("r1", "r2", "r3", "unrelated") if await cp.load(r) is not None}


@pytest.mark.parametrize(
    ("keep_entries", "survivors"),
    [
        (6, {"r1", "unrelated"}),  # inside r2: r2 truncated, r3 deleted
        (4, {"r1", "unrelated"}),  # on the r1/r2 boundary
        (11, {"r1", "r2", "unrelated"}),  # inside r3 only
        (0, {"unrelated"}),  # everything
        (12, {"r1", "r2", "r3", "unrelated"}),  # at the end: a no-op touches nothing
        (50, {"r1", "r2", "r3", "unrelated"}),
    ],
)
async def test_rewind_deletes_the_checkpoints_of_the_runs_it_touched(
    backend: Backend,
    checkpointer: Callable[[], AnyCheckpointer],
    keep_entries: int,
    survivors: set[str],
) -> None:
    """A rewound run must not replay its undone tail; runs the cut spares keep theirs."""
    async with backend.session() as session, checkpointer() as cp:
        await _three_runs_with_checkpoints(session, cp)
        await session.rewind("s", keep_entries=keep_entries, checkpointer=cp)
        assert await _remaining(cp) == survivors


async def test_rewind_without_a_checkpointer_leaves_checkpoints_alone(
    backend: Backend, checkpointer: Callable[[], AnyCheckpointer]
) -> None:
    """Checkpoints are only touched when the caller passes the checkpointer."""
    async with backend.session() as session, checkpointer() as cp:
        await _three_runs_with_checkpoints(session, cp)
        assert await session.rewind("s", keep_entries=0) == 12
        assert await _remaining(cp) == {"r1", "r2", "r3", "unrelated"}


async def test_rewind_with_a_checkpointer_on_the_same_database(sql_backend: Backend) -> None:
    """Session and checkpointer sharing one Database: the deletes join the rewind's transaction."""
    assert sql_backend.target is not None
    async with Database(sql_backend.target, wal=sql_backend.kind == "sqlite_wal") as db:
        session, cp = SQLSession(db), SQLCheckpointer(db)
        await _three_runs_with_checkpoints(session, cp)
        assert await session.rewind("s", keep_entries=6, checkpointer=cp) == 7
        assert await _remaining(cp) == {"r1", "unrelated"}
        assert [s.run_id for s in await session.segments("s")] == ["r1", "r2"]


async def test_rewind_with_a_checkpointer_of_another_kind(sql_backend: Backend) -> None:
    """A SQL session may pair with any Checkpointer: it then deletes through the protocol."""
    assert sql_backend.target is not None
    session = (
        SQLiteSession(sql_backend.target)
        if sql_backend.kind in SQLITE_KINDS
        else SQLSession(sql_backend.target)
    )
    async with session:
        cp = InMemoryCheckpointer()
        await _three_runs_with_checkpoints(session, cp)
        await session.rewind("s", keep_entries=7, checkpointer=cp)
        assert await _remaining(cp) == {"r1", "unrelated"}


async def test_memory_session_rewind_with_a_sql_checkpointer(
    sql_checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """The in-memory session deletes through any Checkpointer, too."""
    async with sql_checkpointer() as cp:
        session = InMemorySession()
        await _three_runs_with_checkpoints(session, cp)
        await session.rewind("s", keep_entries=10, checkpointer=cp)
        assert await _remaining(cp) == {"r1", "r2", "unrelated"}
