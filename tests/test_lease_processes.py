"""Run leases with real processes: one executor per run, on SQLite (WAL), PostgreSQL, MariaDB.

Workers are separate interpreters (``lease_child.py``) that stall on purpose inside a
tool call: SIGSTOP past the lease (another worker resumes the run; the stalled one's
next write is refused), SIGKILL while holding it (re-issuing takes over at once), or a
long tool call (the background renewal keeps the lease). Each finished run is compared
with an uninterrupted run of the same agent and input, made in-process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, select, update

from backends import Backend, _backend
from helpers import lapse_lease, user
from lease_child import QUESTION, build_agent
from lovia_store import (
    CheckpointOptions,
    Database,
    RunHead,
    RunInProgressError,
    Runner,
    SQLCheckpointer,
    SQLSession,
    entry_to_dict,
)
from lovia_store.checkpoints.leases import from_epoch_ms, holder_is_gone, this_holder
from lovia_store.db.dialect import db_clock_ms
from lovia_store.db.tables import metadata, run_leases

CHILD = Path(__file__).with_name("lease_child.py")
KINDS = ("sqlite_wal", "postgres", "mariadb")
RUN_ID = "lease-run"
SESSION_ID = "lease-session"
WAIT = 90.0
"""Seconds to wait for a worker to reach a state or finish: generous, CI machines are small."""

ABSENT_PID = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
"""A pid no process on this host can have."""

pytestmark = pytest.mark.slow

Entries = list[dict[str, Any]]


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    async for value in _backend(request.param, tmp_path):
        yield value


@pytest.fixture
async def db(backend: Backend) -> AsyncIterator[Database]:
    """The test's own connection to the backend, migrated before any worker starts."""
    assert backend.target is not None
    database = Database(backend.target, wal=backend.kind == "sqlite_wal")
    await database.ensure_schema()
    try:
        yield database
    finally:
        await database.close()


# -- workers -----------------------------------------------------------------------------------


class Worker:
    """One ``lease_child.py`` process; stdout and stderr go to files (a stopped one can't block)."""

    def __init__(self, backend: Backend, mode: str, ttl: float, workdir: Path, name: str) -> None:
        assert backend.target is not None
        self.out = workdir / f"{name}.out"
        self.err = workdir / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(CHILD),
                    backend.kind,
                    backend.target,
                    mode,
                    RUN_ID,
                    SESSION_ID,
                    str(ttl),
                    str(workdir),
                ],
                stdout=out,
                stderr=err,
            )
        self.pid = self.process.pid

    def state(self) -> str:
        """The kernel's process state letter ('T' when stopped), '' once it is gone."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return ""
        return stat.rpartition(")")[2].split()[0]

    def stderr(self) -> str:
        return self.err.read_text()

    def finish(self) -> tuple[int, dict[str, Any]]:
        """Wait for the exit; the exit code and the reported outcome."""
        code = self.process.wait(timeout=WAIT)
        lines = self.out.read_text().splitlines()
        assert lines, f"worker {self.pid} exited {code} without a report:\n{self.stderr()}"
        report: dict[str, Any] = json.loads(lines[-1])
        return code, report


@pytest.fixture
def spawn(backend: Backend, tmp_path: Path) -> Iterator[Callable[[str, float, str], Worker]]:
    """Start workers; any still alive at the end (a failed test) is killed and reaped."""
    workers: list[Worker] = []

    def start(mode: str, ttl: float, name: str) -> Worker:
        worker = Worker(backend, mode, ttl, tmp_path / "work", name)
        workers.append(worker)
        return worker

    (tmp_path / "work").mkdir()
    yield start
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.kill()  # SIGKILL works on a stopped process too
            worker.process.wait(timeout=WAIT)


async def wait_for(what: str, ready: Callable[[], Awaitable[bool]], worker: Worker) -> None:
    """Poll until ``ready()``; fail early if the worker exited instead."""
    deadline = time.monotonic() + WAIT
    while not await ready():
        code = worker.process.poll()
        if code is not None:
            pytest.fail(f"worker exited {code} before {what}:\n{worker.stderr()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await _pause()


async def _pause() -> None:
    await asyncio.sleep(0.02)


async def wait_stopped(worker: Worker) -> None:
    async def stopped() -> bool:
        return worker.state() == "T"

    await wait_for("the worker to stop itself", stopped, worker)


# -- the database, read from the test ----------------------------------------------------------


async def dump(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every lovia-store table: equal dumps mean nothing changed."""

    def work(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        return {
            table.name: sorted((tuple(row) for row in conn.execute(select(table))), key=repr)
            for table in metadata.sorted_tables
        }

    return await db.read(work)


async def lease_row(db: Database) -> Any:
    def work(conn: Connection) -> Any:
        return conn.execute(select(run_leases).where(run_leases.c.run_id == RUN_ID)).one()

    return await db.read(work)


async def db_now(db: Database) -> int:
    """The database clock (epoch ms), which judges lease expiry."""

    def work(conn: Connection) -> int:
        return int(conn.execute(select(db_clock_ms())).scalar_one())

    return await db.read(work)


async def lapse(db: Database) -> int:
    """Age the run's lease past its expiry, as its ttl going by would; the expiry it had."""
    expires_ms = (await lease_row(db)).expires_ms
    await db.write(lapse_lease(RUN_ID))
    return int(expires_ms)


def reissue_options(db: Database, ttl: float) -> CheckpointOptions:
    return CheckpointOptions(SQLCheckpointer(db), RUN_ID, lease_ttl=ttl)


async def reissue(db: Database, ttl: float, workdir: Path) -> Any:
    """The same run issued again from this process (``if_run_exists="resume"``)."""
    return await Runner.run(
        build_agent("run", workdir, None, ttl),
        QUESTION,
        session=SQLSession(db),
        session_id=SESSION_ID,
        checkpoint=reissue_options(db, ttl),
    )


async def uninterrupted(db: Database, workdir: Path) -> Entries:
    """The entries of the same agent and input run without interruption, in-process."""
    result = await Runner.run(
        build_agent("run", workdir, None, 30.0),
        QUESTION,
        session=SQLSession(db),
        session_id="reference-session",
        checkpoint=CheckpointOptions(SQLCheckpointer(db), "reference-run"),
    )
    assert not result.replayed
    return [entry_to_dict(e) for e in result.entries]


async def assert_finished_once(db: Database, expected: Entries) -> None:
    """The session holds the run once, with ``expected``; its checkpoint is complete and equal."""
    segments = await SQLSession(db).segments(SESSION_ID)
    assert [s.run_id for s in segments] == [RUN_ID]
    assert [entry_to_dict(e) for e in segments[0].entries] == expected
    snapshot = await SQLCheckpointer(db).load(RUN_ID)
    assert snapshot is not None
    assert snapshot.status == "completed" and snapshot.error is None
    assert [entry_to_dict(e) for e in snapshot.entries] == expected
    assert snapshot.output == expected[-1]["content"] and snapshot.turns == 3
    answered = Counter(e["call_id"] for e in expected if e["type"] == "tool_result")
    assert answered == {"a": 1, "b": 1, "c": 1}


def tool_runs(workdir: Path) -> list[tuple[int, str]]:
    """(pid, call id) of every real tool execution, in order."""
    lines = (workdir / "tools.log").read_text().split("\n")
    return [(int(pid), call_id) for pid, call_id in (line.split() for line in lines if line)]


# -- the tests ---------------------------------------------------------------------------------


async def test_a_stalled_worker_is_fenced_off_after_a_takeover(
    db: Database, spawn: Callable[[str, float, str], Worker], tmp_path: Path
) -> None:
    """The issue's scenario: A is SIGSTOPped past its lease, B resumes, A is continued.

    A stops itself inside call ``b``, right after the write that stored result ``a``
    (which renewed the lease): the runner renews in the background only after ttl/3
    without a write, so no renewal is in flight when A stops (lease_child.py also waits
    out one that a slow write may have let start), and no transaction holds the lease
    row's lock while A is stopped.
    """
    # A long ttl: the re-issue below lands inside A's lease however loaded the machine;
    # the ttl then "goes by" when the test ages the stored lease.
    ttl = 60.0
    work = tmp_path / "work"
    a = spawn("stop", ttl, "a")
    await wait_stopped(a)  # inside call b, after result a was stored
    held = await lease_row(db)
    assert held.token == 1 and held.holder.startswith(f"pid {a.pid} on ")

    before = await dump(db)
    with pytest.raises(RunInProgressError) as refused:
        await reissue(db, ttl, tmp_path / "test-tools")
    assert refused.value.holder == held.holder
    assert refused.value.expires_at == from_epoch_ms(held.expires_ms)
    assert await dump(db) == before, "a refused re-issue changed the database"

    await lapse(db)
    assert a.state() == "T"
    b = spawn("run", ttl, "b")
    code, report = b.finish()
    assert code == 0, b.stderr()
    assert report["outcome"] == "completed" and report["replayed"] is False
    assert report["tokens"] == [2]
    after_b = await dump(db)

    os.kill(a.pid, signal.SIGCONT)
    code, lost = a.finish()
    assert code == 3, a.stderr()
    assert lost["outcome"] == "ownership_lost" and lost["token"] == 1 and lost["tokens"] == [1]
    assert await dump(db) == after_b, "the fenced-off worker still changed the database"
    final = await lease_row(db)  # B's, released when B finished (A's release was a no-op)
    assert final.token == 2 and final.holder.startswith(f"pid {b.pid} on ")
    assert final.expires_ms <= await db_now(db)

    expected = await uninterrupted(db, tmp_path / "reference-tools")
    assert report["entries"] == expected
    await assert_finished_once(db, expected)
    # A ran a and was stopped in b; B ran b again (at-least-once) and c; nobody ran more.
    assert tool_runs(work) == [(a.pid, "a"), (a.pid, "b"), (b.pid, "b"), (b.pid, "c")]
    assert not (tmp_path / "test-tools" / "tools.log").exists()


async def test_a_crashed_holder_on_this_host_is_taken_over_at_once(
    db: Database, spawn: Callable[[str, float, str], Worker], tmp_path: Path
) -> None:
    ttl = 60.0
    a = spawn("stop", ttl, "a")
    await wait_stopped(a)
    held = await lease_row(db)
    assert held.token == 1 and held.holder.startswith(f"pid {a.pid} on ")
    a.process.kill()
    assert a.process.wait(timeout=WAIT) == -signal.SIGKILL  # reaped: the pid is gone

    b = spawn("run", ttl, "b")
    code, report = b.finish()
    assert code == 0, b.stderr()
    assert report["outcome"] == "completed" and report["tokens"] == [2]
    assert await db_now(db) < held.expires_ms, "the re-issue waited for the dead lease"
    taken = await lease_row(db)
    assert taken.token == 2 and taken.holder.startswith(f"pid {b.pid} on ")

    expected = await uninterrupted(db, tmp_path / "reference-tools")
    assert report["entries"] == expected
    await assert_finished_once(db, expected)
    assert [call for _, call in tool_runs(tmp_path / "work")] == ["a", "b", "b", "c"]


async def test_a_live_holder_on_another_host_is_waited_out(db: Database, tmp_path: Path) -> None:
    """Its pid means nothing here, so only the lease's expiry lets the run be taken over."""
    ttl = 60.0  # the first re-issue lands inside it however loaded the machine
    checkpointer = SQLCheckpointer(db)
    lease = await checkpointer.acquire_lease(RUN_ID, ttl=ttl)
    # What a runner stores first: the input, under its lease. Then it "moved" hosts.
    head = RunHead(agent_name="worker", started_at=time.time())
    await checkpointer.append(RUN_ID, [user(QUESTION)], head, lease=lease)
    here = f"pid {ABSENT_PID} on {this_holder().partition(' on ')[2]}"
    assert holder_is_gone(here)  # the same holder on this host would be taken over at once
    host, _, namespace = here.partition(" on ")[2].partition(" ")
    elsewhere = f"pid {ABSENT_PID} on {host}-elsewhere {namespace}"
    assert not holder_is_gone(elsewhere)

    def move(conn: Connection) -> None:
        conn.execute(
            update(run_leases).where(run_leases.c.run_id == RUN_ID).values(holder=elsewhere)
        )

    await db.write(move)
    expires_ms = (await lease_row(db)).expires_ms
    frozen = await dump(db)

    for _ in range(2):  # refused, and refused again: its pid is never taken as gone
        with pytest.raises(RunInProgressError) as refused:
            await reissue(db, ttl, tmp_path / "tools")
        assert refused.value.holder == elsewhere
        assert refused.value.expires_at == from_epoch_ms(expires_ms)
        assert await dump(db) == frozen, "a refused re-issue changed the database"
    await lapse(db)  # its ttl went by
    result = await reissue(db, ttl, tmp_path / "tools")
    taken = await lease_row(db)
    assert taken.token == 2 and taken.holder == this_holder()

    expected = await uninterrupted(db, tmp_path / "reference-tools")
    assert [entry_to_dict(e) for e in result.entries] == expected
    await assert_finished_once(db, expected)


async def test_a_long_tool_call_keeps_the_lease(
    db: Database, spawn: Callable[[str, float, str], Worker], tmp_path: Path
) -> None:
    """No write while the tool works: the background renewal alone keeps a second worker
    out. The test ages the stored lease past its expiry twice; each time only A's renewal
    (every ttl / 3) can restore it before B is started."""
    ttl = 6.0
    work = tmp_path / "work"
    a = spawn("long", ttl, "a")

    async def in_tool() -> bool:
        return (work / "in_tool").exists()

    await wait_for("the long tool call", in_tool, a)
    first = await lease_row(db)
    for _ in range(2):
        await lapse(db)

        async def restored() -> bool:
            return (await lease_row(db)).expires_ms > await db_now(db)

        await wait_for("a background renewal", restored, a)
    renewed = await lease_row(db)
    assert renewed.token == 1 and renewed.expires_ms > first.expires_ms

    before = await dump(db)
    b = spawn("run", ttl, "b")
    code, report = b.finish()
    assert code == 4, b.stderr()
    assert report["outcome"] == "in_progress" and report["holder"] == first.holder
    assert report["tokens"] == []
    # B's refusal changed nothing; A's renewals only moved its own lease's expiry.
    after = await dump(db)
    after_lease, before_lease = after.pop(run_leases.name), before.pop(run_leases.name)
    assert after == before
    assert [row[:4] for row in after_lease] == [row[:4] for row in before_lease]  # all but expiry

    (work / "release").touch()
    code, report = a.finish()
    assert code == 0, a.stderr()
    assert report["outcome"] == "completed" and report["tokens"] == [1]
    assert report["renewals"] >= 2  # no write in the tool, renewed every ttl / 3

    expected = await uninterrupted(db, tmp_path / "reference-tools")
    assert report["entries"] == expected
    await assert_finished_once(db, expected)
    assert [call for _, call in tool_runs(work)] == ["a", "b", "c"]
