"""Concurrency on every SQL backend: SQLite (WAL), PostgreSQL and MariaDB.

The race tests run in eight worker processes, fresh interpreters ("spawn")
started once for the module. Each test hands them a job that runs in a new
event loop with its own Database, engine and connections, and a barrier
releases them together, so only the database keeps them apart. Workers report
through a queue (tracebacks included); a group has a bounded time, and at the
end every worker must exit with code 0. The sharing tests at the end stay in
one process and count the server's connections instead.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import queue
import sqlite3
import time
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Connection, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

import lovia_store
from backends import connect_pg_admin, fresh_server_database, pooled_url, server_url
from helpers import a_run, eventually, user
from lovia_store import (
    CompactedMessage,
    Database,
    InputEntry,
    LoviaStoreError,
    RunHead,
    RunInProgressError,
    SnapshotConflictError,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    StoreBusyError,
)
from lovia_store.db.tables import messages, session_runs, sessions

pytestmark = pytest.mark.slow

T = TypeVar("T")
SPAWN = multiprocessing.get_context("spawn")
GROUP_TIMEOUT = 120.0
"""Seconds a whole group of workers may take; it fails the test, never hangs it."""
BARRIER_TIMEOUT = 60.0

PROCESSES = 8
APPENDS = 200
"""Per process, in the two append tests: 1,600 writes to one session."""

Barrier = Any  # multiprocessing.synchronize.Barrier; its type is not exported usefully
Job = Callable[..., Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class Target:
    """Where the workers connect: picklable, so it crosses the process boundary."""

    kind: str  # sqlite_wal, sqlite, postgres, pgbouncer, postgres_serializable, mariadb
    where: str  # a file path or a URL
    busy_timeout: float = 120.0
    """Eight writers on one row wait for SQLite's lock, or retry each other's serialization
    failures, for as long as this: generous, so a loaded machine slows the test down
    instead of failing it (what it checks is that no error reaches a caller)."""

    def database(self) -> Database:
        if self.kind.startswith("sqlite"):
            wal = self.kind == "sqlite_wal"
            return Database(self.where, wal=wal, busy_timeout=self.busy_timeout)
        if self.kind == "postgres_serializable":  # what distributed SQL runs at
            return Database(
                self.where, isolation_level="SERIALIZABLE", busy_timeout=self.busy_timeout
            )
        return Database(self.where, busy_timeout=self.busy_timeout)


# -- the worker side ---------------------------------------------------------------------------


def _worker(index: int, barriers: dict[int, Barrier], jobs: Any, results: Any) -> None:
    """A spawned worker: run each job it is handed in a fresh event loop, report the outcome.

    Jobs arrive as (group, parties, job, args); the job gets this worker's index and
    the barrier shared by ``parties`` workers. None, or a dead parent, ends the worker.
    """
    parent = multiprocessing.parent_process()
    while True:
        try:
            task = jobs.get(timeout=1.0)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if task is None:
            return
        group, parties, job, args = task
        try:
            value: Any = asyncio.run(job(index, barriers[parties], *args))
        except BaseException:
            results.put((group, index, False, traceback.format_exc()))
        else:
            results.put((group, index, True, value))


async def _append_runs(
    index: int, barrier: Barrier, target: Target, session_id: str, count: int
) -> None:
    """Append runs p{index}-r{j} through SQLSession. Every worker meets the others half
    way, so the appends overlap whatever the machine's speed."""
    async with target.database() as db:
        store = SQLSession(db)
        await store.load(session_id)  # connect and pass the schema gate before the start line
        barrier.wait(timeout=BARRIER_TIMEOUT)
        for j in range(count):
            if j == count // 2:
                barrier.wait(timeout=BARRIER_TIMEOUT)
            run_id = f"p{index}-r{j}"
            stored = await store.append(session_id, a_run(run_id), run_id=run_id)
            assert stored == run_id, (stored, run_id)


async def _append_raw(
    index: int, barrier: Barrier, target: Target, session_id: str, count: int
) -> list[int]:
    """Append messages "{index}:{j}" through the Raw Log API; return their sequences."""
    async with target.database() as db:
        store = SQLSessionStorage(db)
        await store.count_messages(session_id)
        barrier.wait(timeout=BARRIER_TIMEOUT)
        return [
            await store.append(session_id, f"p{index}", user(f"{index}:{j}")) for j in range(count)
        ]


def _candidate(round_: int, index: int) -> str:
    return f"{round_}-{index}"


async def _race_run_id(
    index: int, barrier: Barrier, target: Target, session_id: str, rounds: int
) -> None:
    """Each round, every worker appends run race-{k} with its own entries."""
    async with target.database() as db:
        store = SQLSession(db)
        await store.load(session_id)
        for k in range(rounds):
            barrier.wait(timeout=BARRIER_TIMEOUT)
            run_id = f"race-{k}"
            stored = await store.append(session_id, a_run(_candidate(k, index)), run_id=run_id)
            assert stored == run_id, (stored, run_id)


async def _race_snapshot(
    index: int, barrier: Barrier, target: Target, session_id: str, rounds: int
) -> list[str]:
    """Each round, every worker snapshots with the same expected version; name the outcome."""
    outcomes = []
    async with target.database() as db:
        store = SQLSessionStorage(db)
        await store.count_messages(session_id)
        for k in range(rounds):
            barrier.wait(timeout=BARRIER_TIMEOUT)
            try:
                await store.snapshot(
                    session_id, CompactedMessage(content=f"{k}:{index}"), k + 1, expected_version=k
                )
                outcomes.append("won")
            except SnapshotConflictError as error:
                ok = (error.expected, error.actual) == (k, k + 1)
                outcomes.append("conflict" if ok else f"conflict {error}")
            except Exception as error:
                outcomes.append(f"{type(error).__module__}.{type(error).__name__}: {error}")
            barrier.wait(timeout=BARRIER_TIMEOUT)  # the round is over for everyone
    return outcomes


async def _race_lease(index: int, barrier: Barrier, target: Target, rounds: int) -> list[str]:
    """Each round, every worker tries to take run lease-{k}; name the outcome."""
    outcomes = []
    async with target.database() as db:
        store = SQLCheckpointer(db)
        await store.list_runs()
        for k in range(rounds):
            barrier.wait(timeout=BARRIER_TIMEOUT)
            try:
                lease = await store.acquire_lease(f"lease-{k}", ttl=60)
                outcomes.append(f"won {lease.token}")
            except RunInProgressError:
                outcomes.append("in progress")
            except Exception as error:
                outcomes.append(f"{type(error).__module__}.{type(error).__name__}: {error}")
            barrier.wait(timeout=BARRIER_TIMEOUT)
    return outcomes


def _checkpoint_entry(run_id: str, step: int) -> InputEntry:
    return user(f"{run_id}:{step}")


async def _checkpoint_role(
    index: int, barrier: Barrier, target: Target, writers: int, steps: int
) -> tuple[int, int]:
    """Workers below ``writers`` drive run-{index}; the rest read every run until all finish.

    The writers wait before their last step until every reader has seen every run at
    the one before: each reader sees runs in flight, whatever the machine's speed.
    A writer returns (steps, 0); a reader returns (snapshots loaded, of which in flight).
    """
    run_ids = [f"run-{i}" for i in range(writers)]
    async with target.database() as db:
        store = SQLCheckpointer(db)
        await store.list_runs()
        barrier.wait(timeout=BARRIER_TIMEOUT)
        if index < writers:
            run_id = run_ids[index]
            for step in range(steps):
                if step == steps - 1:
                    barrier.wait(timeout=BARRIER_TIMEOUT)
                head = RunHead(agent_name="agent", turns=step + 1)
                await store.append(run_id, [_checkpoint_entry(run_id, step)], head)
            return steps, 0
        seen = dict.fromkeys(run_ids, 0)
        loaded = in_flight = 0
        deadline = time.monotonic() + GROUP_TIMEOUT
        waiting = True  # the writers are at their last step's barrier
        while min(seen.values()) < steps:
            if waiting and min(seen.values()) == steps - 1:
                barrier.wait(timeout=BARRIER_TIMEOUT)
                waiting = False
            assert time.monotonic() < deadline, f"runs never finished: {seen}"
            for summary in await store.list_runs():
                assert summary.turns == summary.entry_count, summary
            for run_id in run_ids:
                snapshot = await store.load(run_id)
                if snapshot is None:
                    continue
                turns = snapshot.turns
                assert turns == len(snapshot.entries), (run_id, turns, len(snapshot.entries))
                assert snapshot.entries == [_checkpoint_entry(run_id, j) for j in range(turns)]
                assert turns >= seen[run_id], (run_id, "went back", seen[run_id], turns)
                seen[run_id] = turns
                loaded += 1
                in_flight += turns < steps
            await asyncio.sleep(0.005)  # leave the two cores to the writers too
        return loaded, in_flight


async def _append_or_busy(
    index: int, barrier: Barrier, target: Target, session_id: str, count: int
) -> tuple[list[str], list[str]]:
    """Append runs; return (acknowledged, refused with a retry-safe StoreBusyError)."""
    acknowledged: list[str] = []
    busy: list[str] = []
    async with target.database() as db:
        store = SQLSession(db)
        await store.load(session_id)
        barrier.wait(timeout=BARRIER_TIMEOUT)
        for j in range(count):
            run_id = f"p{index}-r{j}"
            try:
                await store.append(session_id, a_run(run_id), run_id=run_id)
            except StoreBusyError as error:
                if not error.retry_safe:
                    raise
                busy.append(run_id)
            else:
                acknowledged.append(run_id)
    return acknowledged, busy


# -- the parent side ---------------------------------------------------------------------------


class _Pool:
    """Spawned workers, a job queue each, and the barriers they start on (one per group size)."""

    def __init__(self, size: int, group_sizes: tuple[int, ...]) -> None:
        self.barriers = {parties: SPAWN.Barrier(parties) for parties in group_sizes}
        self.jobs = [SPAWN.Queue() for _ in range(size)]
        self.results = SPAWN.Queue()
        self.processes = [
            SPAWN.Process(
                target=_worker, args=(i, self.barriers, self.jobs[i], self.results), daemon=True
            )
            for i in range(size)
        ]
        for process in self.processes:
            process.start()
        self.groups = 0

    def run(self, count: int, job: Job, args: tuple[Any, ...]) -> dict[int, tuple[bool, Any]]:
        """Hand ``job`` to workers 0..count-1; their reports by index, or an explanation."""
        self.groups += 1
        for i in range(count):
            self.jobs[i].put((self.groups, count, job, args))
        reports: dict[int, tuple[bool, Any]] = {}
        deadline = time.monotonic() + GROUP_TIMEOUT
        while len(reports) < count:
            try:
                group, index, ok, value = self.results.get(timeout=0.5)
            except queue.Empty:
                dead = {i: p.exitcode for i, p in enumerate(self.processes) if not p.is_alive()}
                if dead or time.monotonic() > deadline:
                    why = f"workers died (exit codes {dead})" if dead else "timed out"
                    pytest.fail(f"{why}; reported so far: {reports}")
                continue
            if group == self.groups:
                reports[index] = (ok, value)
        return reports

    def stop(self) -> list[int | None]:
        """Let every worker finish; their exit codes (a killed straggler's is negative)."""
        for jobs in self.jobs:
            jobs.put(None)
        for process in self.processes:
            process.join(timeout=60)  # a bound on a hang: exit codes are checked
        self.kill()
        return [process.exitcode for process in self.processes]

    def kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
                process.join()


class Workers:
    """Processes spawned once per module and reused by every race test.

    Spawning eight interpreters that import lovia-store costs ~5 s on a 2-core
    machine; paid per test it would dominate the module. Each job still runs in
    a fresh event loop with its own Database, engine and connections, so only
    the database keeps the workers apart. A failed or timed-out group discards
    the pool (its barrier may be broken); the next test spawns a new one.
    """

    def __init__(self) -> None:
        self._pool: _Pool | None = None
        self.exit_codes: list[int | None] = []

    def _run(self, count: int, job: Job, args: tuple[Any, ...]) -> list[Any]:
        if self._pool is None:
            self._pool = _Pool(PROCESSES, group_sizes=(4, PROCESSES))
        pool = self._pool
        assert count in pool.barriers, f"no barrier for groups of {count}"
        try:
            reports = pool.run(count, job, args)
            failures = {i: value for i, (ok, value) in reports.items() if not ok}
            assert not failures, "\n".join(f"worker {i}:\n{tb}" for i, tb in failures.items())
        except BaseException:
            self._pool = None
            pool.kill()
            raise
        return [reports[i][1] for i in range(count)]

    async def run(self, count: int, job: Job, *args: Any) -> list[Any]:
        """Run ``job`` in ``count`` workers that start together; their results by index."""
        return await asyncio.to_thread(self._run, count, job, args)

    def stop(self) -> None:
        if self._pool is not None:
            self.exit_codes += self._pool.stop()
            self._pool = None


@pytest.fixture(scope="module")
def workers() -> Iterator[Workers]:
    """The module's worker processes; at the end every one must exit cleanly (code 0)."""
    pool = Workers()
    try:
        yield pool
    finally:
        pool.stop()
    assert pool.exit_codes == [0] * len(pool.exit_codes)


async def read(target: Target, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one read transaction on a Database of the parent's own."""
    async with target.database() as db:
        return await db.read(work)


def counters_of(session_id: str) -> Callable[[Connection], tuple[int, int, int]]:
    """The session row's (last_sequence, message_count, run_count)."""
    c = sessions.c

    def work(conn: Connection) -> tuple[int, int, int]:
        query = select(c.last_sequence, c.message_count, c.run_count)
        row = conn.execute(query.where(c.session_id == session_id)).one()
        return int(row[0]), int(row[1]), int(row[2])

    return work


def log_of(session_id: str) -> Callable[[Connection], tuple[list[Any], list[Any]]]:
    """The session's message rows (sequence order) and run rows (position order)."""
    m, r = messages.c, session_runs.c

    def work(conn: Connection) -> tuple[list[Any], list[Any]]:
        rows = conn.execute(
            select(m.sequence, m.run_id, m.request_id)
            .where(m.session_id == session_id)
            .order_by(m.sequence)
        ).all()
        runs = conn.execute(
            select(r.run_id, r.position, r.first_sequence, r.entry_count)
            .where(r.session_id == session_id)
            .order_by(r.position)
        ).all()
        return list(rows), list(runs)

    return work


async def assert_runs_stored_once(target: Target, session_id: str, run_ids: list[str]) -> None:
    """Each run id stored exactly once, whole, as a_run(run_id); sequences 1..N gap-free."""
    rows, runs = await read(target, log_of(session_id))
    total = 4 * len(run_ids)
    assert [row.sequence for row in rows] == list(range(1, total + 1))
    assert sorted(run.run_id for run in runs) == sorted(run_ids)
    assert [run.position for run in runs] == list(range(1, len(run_ids) + 1))
    for run in runs:  # each run row covers exactly its own four contiguous messages
        assert run.entry_count == 4
        covered = rows[run.first_sequence - 1 : run.first_sequence + 3]
        assert {(row.run_id, row.request_id) for row in covered} == {(run.run_id, run.run_id)}
    async with target.database() as db:
        segments = await SQLSession(db).segments(session_id)
    assert [s.run_id for s in segments] == [run.run_id for run in runs]
    for segment in segments:
        assert segment.entries == a_run(segment.run_id), segment.run_id
    assert await read(target, counters_of(session_id)) == (total, total, len(run_ids))


@asynccontextmanager
async def _fresh(kind: str, tmp_path: Path) -> AsyncIterator[Target]:
    """A fresh database of ``kind`` at the current schema (migrated by the parent)."""
    if kind.startswith("sqlite"):
        target = Target(kind, str(tmp_path / "store.sqlite3"))
        async with target.database() as db:  # WAL from the start, not switched by a worker
            await lovia_store.upgrade(db)
        yield target
        return
    server = "mariadb" if kind == "mariadb" else "postgres"
    async with fresh_server_database(server) as url:
        await lovia_store.upgrade(url)
        yield Target(kind, pooled_url(url) if kind == "pgbouncer" else url)


@pytest.fixture(
    params=[
        "sqlite_wal",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgbouncer", marks=[pytest.mark.postgres, pytest.mark.pgbouncer]),
        pytest.param("postgres_serializable", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mysql),
    ]
)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    """A fresh database: a SQLite file in WAL mode, a new PostgreSQL database (directly,
    through a transaction pooler, and at SERIALIZABLE) or MariaDB database."""
    async with _fresh(request.param, tmp_path) as fresh:
        yield fresh


# -- races between processes -------------------------------------------------------------------


async def test_eight_processes_appending_runs_to_one_session(
    target: Target, workers: Workers
) -> None:
    """1,600 runs from 8 overlapping processes: each stored once, whole, gap-free, in order."""
    await workers.run(PROCESSES, _append_runs, target, "shared", APPENDS)

    expected = [f"p{i}-r{j}" for i in range(PROCESSES) for j in range(APPENDS)]
    await assert_runs_stored_once(target, "shared", expected)
    _, runs = await read(target, log_of("shared"))
    order = [run.run_id for run in runs]
    for i in range(PROCESSES):  # one process's runs keep the order it appended them in
        assert [r for r in order if r.startswith(f"p{i}-")] == [
            f"p{i}-r{j}" for j in range(APPENDS)
        ]


async def test_eight_processes_appending_raw_messages_to_one_session(
    target: Target, workers: Workers
) -> None:
    """1,600 Raw Log appends from 8 processes: sequences are exactly 1..1600, each once."""
    sequences = await workers.run(PROCESSES, _append_raw, target, "raw", APPENDS)

    every = sorted(q for mine in sequences for q in mine)
    assert every == list(range(1, PROCESSES * APPENDS + 1))
    for mine in sequences:  # one process's messages get increasing sequences
        assert mine == sorted(mine) and len(mine) == APPENDS
    async with target.database() as db:
        records = await SQLSessionStorage(db).list_raw_messages("raw")
    assert [record.sequence for record in records] == every
    by_sequence = {record.sequence: record for record in records}
    for index, mine in enumerate(sequences):  # each sequence holds the message that got it
        assert [by_sequence[q].message for q in mine] == [
            user(f"{index}:{j}") for j in range(APPENDS)
        ]
        assert {by_sequence[q].request_id for q in mine} == {f"p{index}"}
    total = PROCESSES * APPENDS
    assert await read(target, counters_of("raw")) == (total, total, 0)


async def test_eight_processes_racing_one_run_id_store_one_unmixed_segment(
    target: Target, workers: Workers
) -> None:
    """Idempotency by run id holds across 8 processes: one winner per round, never a blend."""
    rounds = 4
    await workers.run(PROCESSES, _race_run_id, target, "race", rounds)

    async with target.database() as db:
        segments = await SQLSession(db).segments("race")
    assert [s.run_id for s in segments] == [f"race-{k}" for k in range(rounds)]
    for k, segment in enumerate(segments):
        candidates = [a_run(_candidate(k, i)) for i in range(PROCESSES)]
        assert segment.entries in candidates, (k, segment.entries)
    # The losers' rows and their bumps of the session counters were rolled back.
    rows, runs = await read(target, log_of("race"))
    assert [row.sequence for row in rows] == list(range(1, 4 * rounds + 1))
    assert [(run.position, run.first_sequence) for run in runs] == [
        (k + 1, 4 * k + 1) for k in range(rounds)
    ]
    assert await read(target, counters_of("race")) == (4 * rounds, 4 * rounds, rounds)


async def test_eight_processes_snapshotting_one_version_let_exactly_one_win(
    target: Target, workers: Workers
) -> None:
    """Optimistic snapshots across 8 processes: one winner, SnapshotConflictError for the rest."""
    rounds = 3
    async with target.database() as db:
        storage = SQLSessionStorage(db)
        for j in range(rounds + 1):
            await storage.append("snap", "r", user(str(j)))
    outcomes = await workers.run(PROCESSES, _race_snapshot, target, "snap", rounds)

    winners = []
    for k in range(rounds):
        this_round = [mine[k] for mine in outcomes]
        assert sorted(this_round) == ["conflict"] * (PROCESSES - 1) + ["won"], this_round
        winners.append(this_round.index("won"))
    async with target.database() as db:
        view = await SQLSessionStorage(db).load("snap")
    assert view.snapshot is not None and view.snapshot.version == rounds
    assert view.snapshot.compacted_message.content == f"{rounds - 1}:{winners[-1]}"
    assert view.snapshot.compacted_through_sequence == rounds
    assert [record.sequence for record in view.raw_tail] == [rounds + 1]


async def test_eight_processes_racing_for_a_run_leave_one_holder(
    target: Target, workers: Workers
) -> None:
    """Run leases across 8 processes: one holder per run, RunInProgressError for the rest."""
    rounds = 3
    outcomes = await workers.run(PROCESSES, _race_lease, target, rounds)
    for k in range(rounds):
        this_round = [mine[k] for mine in outcomes]
        assert sorted(this_round) == ["in progress"] * (PROCESSES - 1) + ["won 1"], this_round


async def test_checkpoint_readers_see_head_and_entries_of_one_transaction(
    target: Target, workers: Workers
) -> None:
    """4 processes checkpoint 100 steps each while 4 others list and load: every snapshot
    read has head.turns == len(entries), never a head from one commit and entries from another."""
    writers, readers, steps = 4, 4, 100
    results = await workers.run(writers + readers, _checkpoint_role, target, writers, steps)

    assert results[:writers] == [(steps, 0)] * writers
    loaded = sum(n for n, _ in results[writers:])
    in_flight = sum(n for _, n in results[writers:])
    assert loaded >= readers * writers
    assert in_flight > 0, "the readers never saw a run in flight: the test raced nothing"
    async with target.database() as db:
        store = SQLCheckpointer(db)
        summaries = await store.list_runs()
        assert sorted((s.run_id, s.turns, s.entry_count) for s in summaries) == [
            (f"run-{i}", steps, steps) for i in range(writers)
        ]
        for i in range(writers):
            snapshot = await store.load(f"run-{i}")
            assert snapshot is not None
            assert snapshot.entries == [_checkpoint_entry(f"run-{i}", j) for j in range(steps)]


async def test_sqlite_rollback_journal_with_four_writers(tmp_path: Path, workers: Workers) -> None:
    """Without WAL, 4 writing processes still work: the busy timeout and the retries
    within it let every append through; a refusal could only be a retry-safe StoreBusyError
    that applied nothing. No run is ever half-written and the file stays intact."""
    processes, appends = 4, 40
    async with _fresh("sqlite", tmp_path) as target:
        outcomes = await workers.run(processes, _append_or_busy, target, "journal", appends)

        acknowledged = [run_id for mine, _ in outcomes for run_id in mine]
        refused = [run_id for _, mine in outcomes for run_id in mine]
        assert (len(acknowledged), refused) == (processes * appends, [])
        await assert_runs_stored_once(target, "journal", acknowledged)

        def pragmas(conn: Connection) -> tuple[Any, Any]:
            journal = conn.execute(text("PRAGMA journal_mode")).scalar()
            return journal, conn.execute(text("PRAGMA integrity_check")).scalar()

        assert await read(target, pragmas) == ("delete", "ok")


async def test_a_busy_commit_without_wal_fails_retry_safe_and_leaves_no_transaction(
    tmp_path: Path,
) -> None:
    """Rollback journal, busy_timeout=0, another connection mid-read: the append's COMMIT
    cannot take the exclusive lock. The caller must get a retry-safe StoreBusyError that
    applied nothing, and the Database must be ready for the next append. (A second
    connection locks like a second process does, and makes the collision deterministic.)"""
    async with _fresh("sqlite", tmp_path) as fresh:
        async with fresh.database() as db:
            await SQLSession(db).append("s", a_run("0"), run_id="0")
        reader = sqlite3.connect(fresh.where, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM lovia_messages").fetchall()  # a SHARED lock
            async with Target("sqlite", fresh.where, busy_timeout=0.0).database() as db:
                store = SQLSession(db)
                await store.load("s")  # past the schema gate
                with pytest.raises(LoviaStoreError) as caught:
                    await store.append("s", a_run("1"), run_id="1")
                reader.execute("COMMIT")
                await store.append("s", a_run("2"), run_id="2")
                assert [s.run_id for s in await store.segments("s")] == ["0", "2"]
            assert isinstance(caught.value, StoreBusyError), repr(caught.value)
            assert caught.value.retry_safe
        finally:
            reader.close()


# -- one pool shared by the three stores (PostgreSQL, MariaDB) --------------------------------

POOL_SIZE = 3


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mysql),
    ]
)
async def server_db(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh database on each server backend, for the sharing tests."""
    async with fresh_server_database(request.param) as url:
        yield url


class ServerConnections:
    """Samples, from a separate admin connection, how many backends serve one database:
    ``pg_stat_activity`` on PostgreSQL, ``information_schema.PROCESSLIST`` on MariaDB."""

    def __init__(self, url: str) -> None:
        self.database = make_url(url).database
        self.postgres = make_url(url).get_backend_name() == "postgresql"
        self.peak = 0
        self._admin: Any = None
        self._sampler: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def count(self) -> int:
        assert self._admin is not None
        if self.postgres:
            query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
            return int(await self._admin.fetchval(query, self.database))
        async with self._admin.cursor() as cursor:
            query = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = %s"
            await cursor.execute(query, (self.database,))
            (found,) = await cursor.fetchone()
        return int(found)

    async def settles_at(self, expected: int) -> None:
        """Wait until the count is ``expected``: backends exit asynchronously."""

        async def settled() -> bool:
            return await self.count() == expected

        await eventually(settled)

    async def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, await self.count())
            await asyncio.sleep(0.005)

    async def __aenter__(self) -> ServerConnections:
        # The database the test URL names (or none), not the fresh one being counted.
        if self.postgres:
            self._admin = await connect_pg_admin()
        else:
            import asyncmy

            url = make_url(server_url("LOVIA_TEST_MYSQL_URL"))
            self._admin = await asyncmy.connect(
                host=url.host or "127.0.0.1",
                port=url.port or 3306,
                user=url.username or "root",
                password=url.password or "",
                autocommit=True,
            )
        self._sampler = asyncio.create_task(self._sample())
        return self

    async def stop_sampling(self) -> None:
        """Let the sampler finish its query (the admin connection runs one at a time),
        then sample once more: the peak counts what is open now, however few samples
        a loaded machine took meanwhile."""
        self._stop.set()
        if self._sampler is not None:
            await self._sampler
            self.peak = max(self.peak, await self.count())

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop_sampling()
        assert self._admin is not None
        if self.postgres:
            await self._admin.close()
        else:
            self._admin.close()


TASKS, OPS = 8, 10
"""Concurrent tasks per store, and writes (each followed by a read) per task."""


async def use_three_stores(
    session: SQLSession, checkpointer: SQLCheckpointer, storage: SQLSessionStorage
) -> None:
    """Drive the three stores at once, TASKS tasks each; then check what landed."""

    async def sessions_task(t: int) -> None:
        for j in range(OPS):
            await session.append("shared", a_run(f"{t}-{j}"), run_id=f"{t}-{j}")
            await session.segments("shared")

    async def checkpoints_task(t: int) -> None:
        for j in range(OPS):
            await checkpointer.append(f"cp-{t}", [user(str(j))], RunHead(agent_name="a", turns=j))
            await checkpointer.load(f"cp-{t}")

    async def storage_task(t: int) -> None:
        for j in range(OPS):
            await storage.append("raw", f"t{t}", user(f"{t}:{j}"))
            await storage.load("raw")

    await asyncio.gather(
        *(job(t) for t in range(TASKS) for job in (sessions_task, checkpoints_task, storage_task))
    )
    assert len(await session.segments("shared")) == TASKS * OPS
    assert len(await checkpointer.list_runs()) == TASKS
    assert await storage.count_messages("raw") == TASKS * OPS


async def test_one_database_serves_three_stores_from_one_pool(server_db: str) -> None:
    """Stores built on one Database share its pool: under load the server never sees more
    than pool_size connections, and closing the Database leaves none open."""
    await lovia_store.upgrade(server_db)
    db = Database(server_db, pool_size=POOL_SIZE, max_overflow=0)
    async with ServerConnections(server_db) as server:
        try:
            stores = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)
            assert all(store.database is db for store in stores)
            await use_three_stores(*stores)
            await server.stop_sampling()
            # 24 tasks filled the one pool and never needed more than it holds.
            assert server.peak == POOL_SIZE
            pool = db.engine.pool
            assert (pool.size(), pool.checkedout()) == (POOL_SIZE, 0)
            assert await server.count() == pool.checkedin() == POOL_SIZE
            for store in stores:  # borrowed: closing a store leaves the Database open
                await store.close()
            assert await stores[0].load("shared")
        finally:
            await db.close()
        await server.settles_at(0)


async def test_a_callers_engine_shared_by_three_stores_outlives_them(server_db: str) -> None:
    """Three stores on one caller-owned AsyncEngine use its single pool; closing the stores
    leaves the engine (and its data) usable; disposing it is the caller's business."""
    await lovia_store.upgrade(server_db)
    engine = create_async_engine(server_db, pool_size=POOL_SIZE, max_overflow=0)
    async with ServerConnections(server_db) as server:
        try:
            stores = SQLSession(engine), SQLCheckpointer(engine), SQLSessionStorage(engine)
            await use_three_stores(*stores)
            await server.stop_sampling()
            assert server.peak == POOL_SIZE
            for store in stores:
                await store.close()
            # Not disposed: the pool still holds its connections, and they work.
            assert (engine.pool.checkedin(), engine.pool.checkedout()) == (POOL_SIZE, 0)
            assert await server.count() == POOL_SIZE
            async with engine.connect() as conn:
                found = await conn.execute(text("SELECT count(*) FROM lovia_messages"))
                assert found.scalar_one() == TASKS * OPS * (4 + 1)
            async with SQLSession(engine) as again:
                assert len(await again.segments("shared")) == TASKS * OPS
            assert await server.count() == POOL_SIZE
        finally:
            await engine.dispose()
        await server.settles_at(0)


async def test_closing_a_database_with_reads_in_flight_leaves_no_connection(
    server_db: str,
) -> None:
    """close() while the stores' reads still run: each read ends (with its result or a
    LoviaStoreError), and afterwards the server sees no connection of that Database.
    The collector is paused: close() must release the connections, not the GC."""
    await lovia_store.upgrade(server_db)
    db = Database(server_db, pool_size=POOL_SIZE, max_overflow=0)
    session, storage = SQLSession(db), SQLSessionStorage(db)
    await session.append("s", a_run("1"), run_id="1")
    async with ServerConnections(server_db) as server:
        await server.stop_sampling()
        collecting = gc.isenabled()
        gc.disable()
        try:
            reads = [session.segments("s") for _ in range(POOL_SIZE)]
            reads += [storage.load("s") for _ in range(POOL_SIZE)]
            running = [asyncio.ensure_future(read) for read in reads]
            await asyncio.sleep(0)  # every read has asked the pool for a connection
            await db.close()
            outcomes = await asyncio.gather(*running, return_exceptions=True)
            for outcome in outcomes:
                assert not isinstance(outcome, BaseException) or isinstance(
                    outcome, LoviaStoreError
                ), repr(outcome)
            await server.settles_at(0)
        finally:
            if collecting:
                gc.enable()
