"""The Raw Log API under real concurrency: separate processes on SQLite (WAL) and PostgreSQL.

Children are fresh interpreters ("spawn"), each with its own storage, engine
and event loop; a barrier starts the interesting part together, so only the
database keeps them apart. Sequences come from the session row's counter,
snapshot versions from a conditional update: no gaps, no duplicates, no
driver errors.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from backends import fresh_server_database
from lovia_store import (
    CompactedMessage,
    Database,
    InputEntry,
    SnapshotConflictError,
    SQLiteSessionStorage,
    SQLSessionStorage,
)

pytestmark = pytest.mark.slow

SPAWN = multiprocessing.get_context("spawn")
CHILDREN = 4
APPENDS = 200
TIMEOUT = 180.0

Barrier = Any  # multiprocessing.synchronize.Barrier
Job = Callable[..., Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class Target:
    """Where the children connect; picklable, so it crosses the process boundary."""

    kind: str
    where: str

    @asynccontextmanager
    async def storage(self) -> AsyncIterator[SQLSessionStorage]:
        if self.kind == "postgres":
            async with SQLSessionStorage(self.where) as store:
                yield store
            return
        # The writers wait for SQLite's one lock within busy_timeout: generous, so a
        # loaded machine slows the test down instead of failing it.
        async with Database(self.where, wal=True, busy_timeout=120) as db:
            yield SQLiteSessionStorage(db)


def _child(index: int, barrier: Barrier, results: Any, job: Job, args: tuple[Any, ...]) -> None:
    try:
        value = asyncio.run(job(index, barrier, *args))
    except BaseException:
        results.put((index, False, traceback.format_exc()))
        raise SystemExit(1) from None
    results.put((index, True, value))


async def _append_many(index: int, barrier: Barrier, target: Target, session_id: str) -> list[int]:
    async with target.storage() as store:
        await store.count_messages(session_id)  # connect and pass the schema gate first
        barrier.wait(timeout=60)
        return [
            await store.append(
                session_id, f"p{index}", InputEntry(role="user", content=f"{index}:{j}")
            )
            for j in range(APPENDS)
        ]


async def _snapshot_rounds(
    index: int, barrier: Barrier, target: Target, session_id: str, rounds: int
) -> list[str]:
    outcomes = []
    async with target.storage() as store:
        await store.count_messages(session_id)
        for k in range(rounds):
            barrier.wait(timeout=60)
            try:
                await store.snapshot(
                    session_id, CompactedMessage(content=f"{k}:{index}"), k + 1, expected_version=k
                )
                outcomes.append("won")
            except SnapshotConflictError:
                outcomes.append("conflict")
            except Exception as error:
                outcomes.append(f"{type(error).__module__}.{type(error).__name__}: {error}")
            barrier.wait(timeout=60)  # everyone finished this round before the next starts
    return outcomes


async def run_children(job: Job, *args: Any) -> list[Any]:
    barrier = SPAWN.Barrier(CHILDREN)
    results = SPAWN.Queue()
    children = [
        SPAWN.Process(target=_child, args=(i, barrier, results, job, args)) for i in range(CHILDREN)
    ]
    for child in children:
        child.start()
    try:
        reports = [await asyncio.to_thread(results.get, True, TIMEOUT) for _ in children]
    finally:
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
    failures = [text for _, ok, text in reports if not ok]
    assert not failures, "\n".join(failures)
    return [value for _, _, value in sorted(reports, key=lambda report: report[0])]


@pytest.fixture(params=["sqlite_wal", "postgres"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    if request.param == "postgres":
        async with fresh_server_database("postgres") as url:
            yield Target("postgres", url)
    else:
        yield Target("sqlite_wal", str(tmp_path / "race.sqlite3"))


async def test_four_processes_appending_get_every_sequence_once(target: Target) -> None:
    async with target.storage() as store:
        await store.create_session(session_id="s", title="race")
    sequences = await run_children(_append_many, target, "s")
    every = sorted(q for mine in sequences for q in mine)
    assert every == list(range(1, CHILDREN * APPENDS + 1))
    for mine in sequences:
        assert mine == sorted(mine) and len(mine) == APPENDS
    async with target.storage() as store:
        assert await store.count_messages("s") == CHILDREN * APPENDS
        records = await store.list_raw_messages("s")
        assert [r.sequence for r in records] == every
        for index, mine in enumerate(sequences):
            by_sequence = {r.sequence: r for r in records}
            assert [by_sequence[q].message.content for q in mine] == [  # type: ignore[union-attr]
                f"{index}:{j}" for j in range(APPENDS)
            ]
            assert {by_sequence[q].request_id for q in mine} == {f"p{index}"}


async def test_four_processes_snapshotting_one_version_let_exactly_one_win(
    target: Target,
) -> None:
    rounds = 5
    async with target.storage() as store:
        for j in range(rounds + 1):
            await store.append("s", "r", InputEntry(role="user", content=str(j)))
    outcomes = await run_children(_snapshot_rounds, target, "s", rounds)
    for k in range(rounds):
        this_round = sorted(mine[k] for mine in outcomes)
        assert this_round == ["conflict"] * (CHILDREN - 1) + ["won"], this_round
    async with target.storage() as store:
        view = await store.load("s")
        assert view.snapshot is not None and view.snapshot.version == rounds
        assert view.snapshot.compacted_through_sequence == rounds
        assert [r.sequence for r in view.raw_tail] == [rounds + 1]
        assert await store.count_messages("s") == rounds + 1
