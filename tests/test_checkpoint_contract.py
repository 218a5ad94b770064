"""The checkpoint contract on every backend (memory, SQLite, SQLite WAL, PostgreSQL through
asyncpg and psycopg, MariaDB).

The store-agnostic cases are shipped as ``lovia_store.testing`` (a third party's
checkpointer runs them with one import); ``TestCheckpointerContract`` runs them over
conftest's backend registry. What needs this repository (lovia's fixture file, a database
to reopen, a session beside the checkpointer) stays here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends import LOVIA_MANIFEST, SQLITE_KINDS, Backend
from helpers import a_run, say, user
from lovia_store import (
    Database,
    InMemoryCheckpointer,
    InMemorySession,
    RunHead,
    RunSnapshot,
    SQLCheckpointer,
    SQLiteCheckpointer,
    SQLiteSession,
    SQLSession,
    TranscriptEntry,
    Usage,
    entry_from_dict,
    entry_to_dict,
)
from lovia_store.testing import CheckpointerContract
from lovia_store.testing.checkpoints import full_head

MANIFEST = LOVIA_MANIFEST

AnyCheckpointer = InMemoryCheckpointer | SQLCheckpointer
AnySession = InMemorySession | SQLSession


class TestCheckpointerContract(CheckpointerContract):
    """Every shipped checkpointer case, on every backend."""

    @pytest.fixture
    def make_checkpointer(self, backend: Backend) -> Callable[[], AnyCheckpointer]:
        return backend.checkpointer


@pytest.fixture
def checkpointer(backend: Backend) -> Callable[[], AnyCheckpointer]:
    """A factory: every call opens a new checkpointer on the test's backend."""
    return backend.checkpointer


@pytest.fixture
def sql_checkpointer(sql_backend: Backend) -> Callable[[], AnyCheckpointer]:
    return sql_backend.checkpointer


def rich_entries() -> list[TranscriptEntry]:
    """Every entry shape the lovia fixture holds (parts, reasoning metadata, unicode)."""
    return [
        entry_from_dict(e)
        for session in MANIFEST["sessions"]
        for run in session["runs"]
        for e in run["entries"]
    ]


async def test_load_rebuilds_the_lovia_fixtures_entries_in_order(
    checkpointer: Callable[[], AnyCheckpointer],
) -> None:
    """Every entry lovia 0.9 wrote, in four batches, comes back in order with the last head."""
    entries = rich_entries()
    batches = [entries[:1], entries[1:4], entries[4:5], entries[5:]]
    async with checkpointer() as cp:
        for turns, batch in enumerate(batches):
            await cp.append("run-1", batch, full_head(turns=turns, status="running"))
        await cp.append("run-1", [], full_head())
        snapshot = await cp.load("run-1")
    assert snapshot is not None and snapshot.head == full_head()
    assert [entry_to_dict(e) for e in snapshot.entries] == [entry_to_dict(e) for e in entries]


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
