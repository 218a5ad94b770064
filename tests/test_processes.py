"""Concurrency across real OS processes, on SQLite (WAL) and PostgreSQL.

In-loop concurrency (``asyncio.gather``) is covered by the session contract;
these tests start separate interpreters ("spawn"), each with its own store,
engine and event loop, so only the database itself can keep them apart: file
locks on SQLite, row locks and the advisory migration lock on PostgreSQL.
Children report through a queue (and a non-zero exit code on failure), and a
barrier makes them start the interesting part together.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, select, text

import lovia_store
from backends import LOVIA_MANIFEST
from helpers import a_run
from lovia_store import Database, SQLiteSession, SQLSession, entry_from_dict, entry_to_dict
from lovia_store.db.schema import KNOWN_VERSIONS, head_revision
from lovia_store.db.tables import VERSION_TABLE, sessions

pytestmark = pytest.mark.slow

SPAWN = multiprocessing.get_context("spawn")
CHILD_TIMEOUT = 180.0
"""Seconds for a whole group of children; generous because CI machines are small."""

MANIFEST = LOVIA_MANIFEST


@dataclass(frozen=True)
class Target:
    """Where the children connect: picklable, so it crosses the process boundary."""

    kind: str  # "sqlite_wal" | "sqlite" | "postgres"
    where: str  # a file path or a URL

    def session(self) -> SQLSession:
        if self.kind == "postgres":
            return SQLSession(self.where)
        return SQLiteSession(self.where, wal=self.kind == "sqlite_wal")


Barrier = Any  # multiprocessing.synchronize.Barrier; its type is not exported usefully
Job = Callable[..., Coroutine[Any, Any, Any]]


# -- the child side ----------------------------------------------------------------------------


def _child(index: int, barrier: Barrier, results: Any, job: Job, args: tuple[Any, ...]) -> None:
    """Entry point of every child: run ``job`` in a fresh loop, report the outcome."""
    try:
        value: Any = asyncio.run(job(index, barrier, *args))
    except BaseException:
        results.put((index, False, traceback.format_exc()))
        raise SystemExit(1) from None
    results.put((index, True, value))


async def _append_runs(
    index: int, barrier: Barrier, target: Target, session_id: str, count: int
) -> tuple[float, float]:
    """Append ``count`` runs p{index}-r{j}; return the wall-clock span of the appends."""
    async with target.session() as store:
        await store.load(session_id)  # connect and pass the schema gate before the start line
        barrier.wait(timeout=60)
        started = time.time()
        for j in range(count):
            run_id = f"p{index}-r{j}"
            stored = await store.append(session_id, a_run(run_id), run_id=run_id)
            assert stored == run_id, (stored, run_id)
        return started, time.time()


def _candidate(round_: int, index: int) -> str:
    return f"{round_}-{'AB'[index]}"


async def _race_one_run_id(
    index: int, barrier: Barrier, target: Target, session_id: str, rounds: int
) -> None:
    """Each round, both children append the same run id with their own entries."""
    async with target.session() as store:
        await store.load(session_id)
        for k in range(rounds):
            barrier.wait(timeout=60)
            run_id = f"race-{k}"
            stored = await store.append(session_id, a_run(_candidate(k, index)), run_id=run_id)
            assert stored == run_id, (stored, run_id)


async def _first_use(index: int, barrier: Barrier, target: Target, session_id: str) -> None:
    """Open a database nobody has opened yet and append one run (migrating on the way)."""
    async with target.session() as store:  # builds the engine; does not connect yet
        barrier.wait(timeout=60)
        await store.append(session_id, a_run(f"first-{index}"), run_id=f"first-{index}")


async def _read_alice(
    index: int, barrier: Barrier, target: Target
) -> list[tuple[str, list[dict[str, Any]]]]:
    """Open the legacy file (first use migrates it) and read session alice."""
    async with target.session() as store:
        barrier.wait(timeout=60)
        segments = await store.segments("alice")
        return [(s.run_id, [entry_to_dict(e) for e in s.entries]) for s in segments]


# -- the parent side ---------------------------------------------------------------------------


def run_children(count: int, job: Job, *args: Any) -> list[Any]:
    """Start ``count`` children on one barrier; return their results, or fail with tracebacks."""
    barrier = SPAWN.Barrier(count)
    results = SPAWN.Queue()
    children = [
        SPAWN.Process(target=_child, args=(i, barrier, results, job, args), daemon=True)
        for i in range(count)
    ]
    outcomes: dict[int, tuple[bool, Any]] = {}
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        for child in children:
            child.start()
        while len(outcomes) < count:
            try:
                index, ok, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"children timed out; reported so far: {outcomes}")
            outcomes[index] = (ok, value)
        for child in children:
            child.join(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()
    failures = {i: value for i, (ok, value) in outcomes.items() if not ok}
    assert not failures, "\n".join(f"child {i}:\n{tb}" for i, tb in failures.items())
    assert [child.exitcode for child in children] == [0] * count
    return [outcomes[i][1] for i in range(count)]


@pytest.fixture(params=["sqlite_wal", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """A fresh, not yet created database: a SQLite file in WAL mode, or a new PG database."""
    if request.param == "postgres":
        return Target("postgres", request.getfixturevalue("pg_url"))
    return Target("sqlite_wal", str(tmp_path / "store.sqlite3"))


async def counters(where: str, session_id: str) -> tuple[int, int, int]:
    """The session row's (last_sequence, message_count, run_count), read without migrating."""
    c = sessions.c

    def work(conn: Connection) -> tuple[int, int, int]:
        query = select(c.last_sequence, c.message_count, c.run_count).where(
            c.session_id == session_id
        )
        row = (conn.execute(query)).one()
        return int(row[0]), int(row[1]), int(row[2])

    async with Database(where, verify_only=True) as db:
        return await db.read(work)


async def schema_rows(where: str) -> tuple[list[str], dict[str, int]]:
    """Alembic's version rows and lovia_schema's rows, read without migrating."""

    def work(conn: Connection) -> tuple[list[str], dict[str, int]]:
        revisions = (conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))).all()
        versions = (conn.execute(text("SELECT store, version FROM lovia_schema"))).all()
        return [r[0] for r in revisions], {r[0]: int(r[1]) for r in versions}

    async with Database(where, verify_only=True) as db:
        return await db.read(work)


# -- the tests ---------------------------------------------------------------------------------


async def test_four_processes_appending_to_one_session_lose_nothing(target: Target) -> None:
    """400 runs from 4 overlapping processes: each stored once, intact, in its writer's order."""
    await lovia_store.upgrade(target.where)
    spans = await asyncio.to_thread(run_children, 4, _append_runs, target, "shared", 100)

    # The appends really ran at the same time: every child started before any finished.
    assert max(start for start, _ in spans) < min(end for _, end in spans)

    async with target.session() as store:
        segments = await store.segments("shared")
        flat = await store.load("shared")
    run_ids = [s.run_id for s in segments]
    assert len(segments) == 400
    assert sorted(run_ids) == sorted(f"p{i}-r{j}" for i in range(4) for j in range(100))
    for segment in segments:
        assert segment.entries == a_run(segment.run_id), segment.run_id
        assert segment.meta is None
    for i in range(4):  # one process's runs keep the order it appended them in
        mine = [r for r in run_ids if r.startswith(f"p{i}-")]
        assert mine == [f"p{i}-r{j}" for j in range(100)]
    assert len(flat) == 1600
    assert flat == [e for s in segments for e in s.entries]
    assert await counters(target.where, "shared") == (1600, 1600, 400)


async def test_same_run_id_from_two_processes_is_stored_once_unmixed(target: Target) -> None:
    """Idempotency by run id holds across processes: one winner per round, never a blend."""
    rounds = 20
    await lovia_store.upgrade(target.where)
    await asyncio.to_thread(run_children, 2, _race_one_run_id, target, "race", rounds)

    async with target.session() as store:
        segments = await store.segments("race")
        flat = await store.load("race")
    assert [s.run_id for s in segments] == [f"race-{k}" for k in range(rounds)]
    for k, segment in enumerate(segments):
        candidates = [a_run(_candidate(k, 0)), a_run(_candidate(k, 1))]
        assert segment.entries in candidates, (k, segment.entries)
    # The loser's rows (and its bump of the session counters) were rolled back.
    assert len(flat) == 4 * rounds
    assert await counters(target.where, "race") == (4 * rounds, 4 * rounds, rounds)


async def test_concurrent_first_open_migrates_once(target: Target) -> None:
    """Four processes open a brand-new database together; one migrates, all append."""
    await asyncio.to_thread(run_children, 4, _first_use, target, "first")

    await lovia_store.check(target.where)  # raises unless the schema is at head
    assert await schema_rows(target.where) == ([head_revision()], KNOWN_VERSIONS)
    async with target.session() as store:
        segments = await store.segments("first")
    assert sorted(s.run_id for s in segments) == [f"first-{i}" for i in range(4)]
    for segment in segments:
        assert segment.entries == a_run(segment.run_id)


@pytest.mark.parametrize("wal", [True, False], ids=["wal", "rollback_journal"])
async def test_concurrent_first_open_of_a_legacy_lovia_file(
    legacy_copy: Callable[[str], Path], wal: bool
) -> None:
    """Four processes open a lovia 0.9 file together: one adopts it, all read alice intact."""
    path = legacy_copy("lovia-0.9.119.sqlite3")
    target = Target("sqlite_wal" if wal else "sqlite", str(path))
    seen = await asyncio.to_thread(run_children, 4, _read_alice, target)

    expected_ids = [f"run-alice-000{n}" for n in range(1, 5)]
    assert [r["run_id"] for r in MANIFEST.session("alice")["runs"]] == expected_ids
    expected = [
        (run["run_id"], [entry_from_dict(e) for e in run["entries"]])
        for run in MANIFEST.session("alice")["runs"]
    ]
    for child_view in seen:
        got = [(run_id, [entry_from_dict(e) for e in entries]) for run_id, entries in child_view]
        assert got == expected
    await lovia_store.check(str(path))
    assert await schema_rows(str(path)) == ([head_revision()], KNOWN_VERSIONS)
