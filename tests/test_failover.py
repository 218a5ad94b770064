"""PostgreSQL with a synchronous hot standby (.ci/pg-standby.sh in CI): read replicas and
failover.

``LOVIA_TEST_PG_STANDBY_URLS`` names the primary and the standby (comma-separated).
The replica test pauses replay on the standby and shows which reads were stale (the
listings routed to the replica) and which were not (what an agent run loads). The
failover test kills the primary with SIGKILL under four writer processes on the
multi-host URL, promotes the standby, and finds every acknowledged write there once
and no outcome left unknown; it then rebuilds the pair. Both live in this one file,
so one worker runs them in order. Each waits on the servers' own state, never a clock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import URL, make_url

from backends import server_url
from helpers import a_run, eventually
from lovia_store import (
    AssistantTextEntry,
    Database,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    upgrade,
)
from lovia_store.lifecycle.stats import database_stats

pytestmark = [pytest.mark.postgres, pytest.mark.standby]

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("failover_child.py")
PAIR_DIR = Path(os.environ.get("LOVIA_TEST_PG_STANDBY_DIR", "/tmp/lovia-store-ci-pgpair"))
WRITERS = 4


def pair() -> tuple[URL, URL]:
    primary, standby = (
        make_url(u.strip()) for u in server_url("LOVIA_TEST_PG_STANDBY_URLS").split(",")
    )
    return primary, standby


async def sql(url: URL, statement: str) -> object:
    conn = await asyncpg.connect(
        host=url.host, port=url.port, user=url.username, database=url.database or "postgres"
    )
    try:
        return await conn.fetchval(statement)
    finally:
        await conn.close()


def as_text(url: URL, database: str) -> str:
    return url.set(drivername="postgresql+asyncpg", database=database).render_as_string(False)


@pytest.fixture
async def database() -> AsyncIterator[str]:
    """A new migrated database on the primary (replicated to the standby): its name."""
    primary, _ = pair()
    name = f"lovia_f_{uuid.uuid4().hex[:12]}"
    await sql(primary, f'CREATE DATABASE "{name}"')
    try:
        await upgrade(as_text(primary, name))
        yield name
    finally:
        await sql(pair()[0], f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def replayed_everything() -> bool:
    """Whether the standby has replayed all the primary has written so far."""
    primary, standby = pair()
    written = await sql(primary, "SELECT pg_current_wal_lsn()::text")
    behind = await sql(standby, f"SELECT pg_last_wal_replay_lsn() < '{written}'::pg_lsn")
    return behind is False


async def test_stale_reads_go_to_the_replica_and_agent_loads_never_do(database: str) -> None:
    primary, standby = pair()
    replica = as_text(standby, database)
    async with Database(
        as_text(primary, database), read_replicas=[replica], max_replica_lag=3600
    ) as db:
        sessions, runs, log = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)
        await sessions.append("alice", a_run("1"), run_id="r1")
        await log.append("chat", "q1", AssistantTextEntry(content="one"))
        await runs.append("run", [AssistantTextEntry(content="t1")], RunHead(agent_name="a"))
        await eventually(replayed_everything)
        await sql(standby, "SELECT pg_wal_replay_pause()")
        try:
            await eventually(
                lambda: _equals(standby, "SELECT pg_get_wal_replay_pause_state()", "paused")
            )
            await sessions.append("alice", a_run("2"), run_id="r2")
            await log.append("chat", "q2", AssistantTextEntry(content="two"))
            await log.append("later", "q3", AssistantTextEntry(content="three"))
            await runs.append("run", [AssistantTextEntry(content="t2")], RunHead(agent_name="a"))

            # Stale: the listings, paging and stats come from the paused replica.
            assert sorted(s.session_id for s in await log.list_sessions()) == ["alice", "chat"]
            assert [m.request_id for m in await log.list_raw_messages("chat")] == ["q1"]
            assert (await database_stats(db)).sessions == 2  # "later" is not there yet
            # Never stale: what an agent run loads.
            assert [s.run_id for s in await sessions.segments("alice")] == ["r1", "r2"]
            assert len(await sessions.load("alice")) == len(a_run("1")) + len(a_run("2"))
            assert [m.request_id for m in (await log.load("chat")).raw_tail] == ["q1", "q2"]
            assert (await log.get_session("later")) is not None
            snapshot = await runs.load("run")
            assert snapshot is not None and len(snapshot.entries) == 2
            # ... unless the caller asks for it.
            with db.stale_reads():
                assert [s.run_id for s in await sessions.segments("alice")] == ["r1"]

            # A replica further behind than allowed, or unreachable, is passed over.
            async with Database(
                as_text(primary, database), read_replicas=[replica], max_replica_lag=0
            ) as strict:
                listed = await SQLSessionStorage(strict).list_sessions()
                assert sorted(s.session_id for s in listed) == ["alice", "chat", "later"]
            down = as_text(make_url("postgresql://postgres@127.0.0.1:1"), database)
            async with Database(as_text(primary, database), read_replicas=[down]) as lone:
                listed = await SQLSessionStorage(lone).list_sessions()
                assert sorted(s.session_id for s in listed) == ["alice", "chat", "later"]
        finally:
            await sql(standby, "SELECT pg_wal_replay_resume()")
        await eventually(replayed_everything)
        assert sorted(s.session_id for s in await log.list_sessions()) == ["alice", "chat", "later"]


async def _equals(url: URL, statement: str, expected: object) -> bool:
    return await sql(url, statement) == expected


def _acks(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(kind, key) for kind, key in (line.split(" ", 1) for line in lines)]


@pytest.mark.slow
async def test_kill_9_of_the_primary_under_four_writers_loses_and_repeats_nothing(
    database: str,
    tmp_path: Path,
) -> None:
    primary, standby = pair()
    hosts = f"{primary.host}:{primary.port},{standby.host}:{standby.port}"
    url = f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"
    ack_files = [tmp_path / f"w{k}.acks" for k in range(WRITERS)]
    writers = await asyncio.to_thread(start_writers, url, ack_files)
    try:

        async def each_acked(count: int) -> bool:
            assert all(w.poll() is None for w in writers), "a writer exited early"
            return all(sum(k == "step" for k, _ in _acks(f)) >= count for f in ack_files)

        await eventually(lambda: each_acked(30), within=120)
        before = [len(_acks(f)) for f in ack_files]
        postmaster = int((PAIR_DIR / "primary" / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        assert await sql(standby, "SELECT pg_promote(true, 60)") is True
        await eventually(
            lambda: _all_grew(ack_files, [b + 30 for b in before], writers), within=120
        )
        for writer in writers:
            assert writer.stdin is not None
            writer.stdin.write(b"stop\n")
            writer.stdin.flush()
        for writer in writers:
            assert writer.wait(timeout=120) == 0
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait()

    try:
        acks = [_acks(f) for f in ack_files]
        survivor = as_text(standby, database)
        async with Database(survivor) as db:
            sessions, runs, log = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)
            for k, writer_acks in enumerate(acks):
                name = f"w{k}"
                assert [kind for kind, _ in writer_acks if kind == "unknown"] == []
                acked = {
                    kind: [key for k2, key in writer_acks if k2 == kind]
                    for kind in ("run", "message", "step")
                }
                stored_runs = [s.run_id for s in await sessions.segments(f"{name}-runs")]
                assert Counter(stored_runs).most_common(1)[0][1] == 1  # none twice
                assert set(acked["run"]) <= set(stored_runs)
                stored = await log.list_raw_messages(f"{name}-log", limit=100_000)
                messages = [m.request_id for m in stored]
                assert Counter(messages).most_common(1)[0][1] == 1
                assert set(acked["message"]) <= set(messages)
                snapshot = await runs.load(name)
                assert snapshot is not None
                steps = [e.content for e in snapshot.entries]  # type: ignore[attr-defined]
                assert Counter(steps).most_common(1)[0][1] == 1
                assert set(acked["step"]) <= set(steps)
                # Nothing stored out of order: every key is a round the writer reached.
                assert steps == sorted(steps, key=lambda key: int(key.rsplit("-", 1)[1]))
        settled = sum(kind == "settled" for a in acks for kind, _ in a)
        print(f"acknowledged {sum(len(a) for a in acks)} writes; {settled} lost COMMITs settled")
    finally:
        await asyncio.to_thread(rebuild_pair)


def start_writers(url: str, ack_files: list[Path]) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, str(CHILD), url, f"w{k}", str(ack_files[k])],
            stdin=subprocess.PIPE,
            cwd=ROOT,
        )
        for k in range(len(ack_files))
    ]


def rebuild_pair() -> None:
    """A primary with a synchronous standby again (the failover promoted the standby)."""
    subprocess.run(["bash", str(ROOT / ".ci" / "pg-standby.sh"), "restart"], check=True)


async def _all_grew(
    files: list[Path], targets: list[int], writers: list[subprocess.Popen[bytes]]
) -> bool:
    assert all(w.poll() is None for w in writers), "a writer exited early"
    return all(len(_acks(f)) >= t for f, t in zip(files, targets, strict=True))
