"""MariaDB Galera: a three-node multi-primary cluster (.ci/galera.sh in CI).

``LOVIA_TEST_GALERA_URLS`` names the nodes (comma-separated URLs). Every node takes
writes; a transaction that loses certification to another node's is rolled back at
COMMIT (error 1213), which lovia-store runs again. Here writers on every node share
sessions, run ids and checkpoints with no error reaching them, a fleet opening a new
database on every node at once all succeed, and killing a node leaves the writers on
the others unharmed. Each test stops within a bound (its own writes, not a clock).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from backends import _mysql_admin, server_url
from helpers import a_run, eventually
from lovia_store import (
    Database,
    InputEntry,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    upgrade,
)
from lovia_store.db.tables import VERSION_TABLE, metadata

pytestmark = [pytest.mark.mariadb, pytest.mark.galera]

ROOT = Path(__file__).resolve().parents[1]
GALERA_DIR = Path(os.environ.get("LOVIA_TEST_GALERA_DIR", "/tmp/lovia-store-ci-galera"))


def nodes() -> list[str]:
    return [url.strip() for url in server_url("LOVIA_TEST_GALERA_URLS").split(",")]


async def admin(node: str, sql: str) -> None:
    await _mysql_admin(sql, make_url(node))


@pytest.fixture
async def cluster() -> AsyncIterator[list[str]]:
    """A new database on the cluster: its URL on each node (nothing migrated yet)."""
    name = f"lovia_g_{uuid.uuid4().hex[:12]}"
    urls = nodes()
    await admin(urls[0], f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    try:
        yield [
            make_url(u).set(drivername="mysql+asyncmy", database=name).render_as_string(False)
            for u in urls
        ]
    finally:
        await admin(urls[0], f"DROP DATABASE IF EXISTS `{name}`")


async def write_from(
    url: str,
    node: int,
    writers: int,
    rounds: int,
    errors: list[BaseException],
) -> None:
    """``writers`` tasks on one node: runs under run ids the other nodes use too, keyed
    Raw Log appends to shared sessions, steps of shared checkpoints. Conflicts are
    retried within ``busy_timeout``, 120 s: a bound on a hang. With the default 5 s, a
    loaded two-core CI machine once ran out of it (StoreBusyError, nothing written)."""
    async with Database(url, busy_timeout=120) as db:
        sessions, runs, storage = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)

        async def writer(w: int) -> None:
            for i in range(rounds):
                try:
                    run_id = f"r{w}-{i}"  # the same on every node: one segment in all
                    await sessions.append(f"s{w % 2}", a_run(run_id), run_id=run_id)
                    message = InputEntry(role="user", content=f"{node}-{w}-{i}")
                    key = f"k{node}-{w}-{i}"
                    await storage.append(f"raw{w % 2}", key, message, idempotency_key=key)
                    step = [InputEntry(role="user", content=f"{node}-{w}-{i}")]
                    await runs.append(f"run{i % 2}", step, RunHead(agent_name="a"))
                except Exception as exc:
                    errors.append(exc)

        await asyncio.gather(*(writer(w) for w in range(writers)))


async def assert_stored_once(url: str, node_ids: list[int], writers: int, rounds: int) -> None:
    async with Database(url) as db:
        sessions, runs, storage = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)
        stored = [s.run_id for k in range(2) for s in await sessions.segments(f"s{k}")]
        assert sorted(stored) == sorted(f"r{w}-{i}" for w in range(writers) for i in range(rounds))
        keys = []
        for k in range(2):
            records = await storage.list_raw_messages(f"raw{k}")
            assert [r.sequence for r in records] == list(range(1, len(records) + 1))
            keys += [r.request_id for r in records]
        expected = [
            f"k{n}-{w}-{i}" for n in node_ids for w in range(writers) for i in range(rounds)
        ]
        assert sorted(keys) == sorted(expected)
        steps = []
        for i in range(2):
            snapshot = await runs.load(f"run{i}")
            assert snapshot is not None
            steps += [e.content for e in snapshot.entries]
        assert len(steps) == len(set(steps)) == len(expected)


async def test_writers_on_every_node_see_no_error_and_lose_nothing(cluster: list[str]) -> None:
    """Twelve writers on three nodes, on the same rows: certification conflicts are
    retried through."""
    await upgrade(cluster[0])
    errors: list[BaseException] = []
    writers, rounds = 4, 12
    await asyncio.gather(
        *(write_from(url, n, writers, rounds, errors) for n, url in enumerate(cluster))
    )
    assert errors == []
    await assert_stored_once(cluster[1], list(range(len(cluster))), writers, rounds)


_OPEN = """
import asyncio, sys
from lovia_store import SQLSession
from lovia_store.entries import InputEntry

async def main(url: str) -> None:
    async with SQLSession(url) as sessions:
        await sessions.append("s", [InputEntry(role="user", content=url)])
sys.stdin.readline()  # every process starts at once, when the test says go
try:
    asyncio.run(main(sys.argv[1]))
    print("ok")
except Exception as exc:
    print(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
"""


def open_at_once(targets: list[str]) -> list[str]:
    """A process per target, each opening a store on it at the same moment: what each said."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for url in targets
    ]
    for child in children:  # all of them are up and waiting before any goes
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    return [child.communicate(timeout=180)[0].strip() for child in children]


def restart_node(n: int) -> None:
    subprocess.run(
        [str(ROOT / ".ci" / "galera.sh"), "restart-node", str(n)], check=True, timeout=300
    )


async def test_a_fleet_opening_a_new_database_on_every_node_at_once_all_succeed() -> None:
    for _ in range(3):
        name = f"lovia_g_{uuid.uuid4().hex[:12]}"
        urls = nodes()
        await admin(urls[0], f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        try:
            targets = [
                make_url(u).set(drivername="mysql+asyncmy", database=name).render_as_string(False)
                for u in urls
            ]
            said = open_at_once(targets)
            assert said == ["ok"] * len(targets), said
            for url in targets:  # every node sees the current schema and all three messages
                async with SQLSessionStorage(url) as storage:
                    assert await storage.count_messages("s") == len(targets)
        finally:
            await admin(urls[0], f"DROP DATABASE IF EXISTS `{name}`")


async def test_the_schema_keeps_galera_s_rules(cluster: list[str]) -> None:
    """Galera replicates InnoDB tables only, and needs a primary key on each."""
    await upgrade(cluster[0])
    async with Database(cluster[2]) as db:

        def tables(conn: object) -> dict[str, tuple[str, int]]:
            rows = conn.execute(  # type: ignore[attr-defined]
                text(
                    "SELECT t.table_name, t.engine, COUNT(k.constraint_name) "
                    "FROM information_schema.tables t LEFT JOIN "
                    "information_schema.table_constraints k ON k.table_schema = t.table_schema "
                    "AND k.table_name = t.table_name AND k.constraint_type = 'PRIMARY KEY' "
                    "WHERE t.table_schema = DATABASE() GROUP BY t.table_name, t.engine"
                )
            )
            return {row[0]: (row[1], int(row[2])) for row in rows}

        found = await db.read(tables)
    assert set(found) == {*metadata.tables, VERSION_TABLE}
    assert set(found.values()) == {("InnoDB", 1)}
    source = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    assert "LOCK TABLES" not in source.upper()


async def test_killing_a_node_leaves_the_writers_on_the_others_unharmed(
    cluster: list[str],
) -> None:
    """kill -9 of node 3 while nodes 1 and 2 take writes: they see no error. Until the
    cluster declares the node gone (``evs.suspect_timeout``, 5 s by default), commits
    that need it are certified out; ``busy_timeout`` above that retries them through."""
    await upgrade(cluster[0])
    pid_file = GALERA_DIR / "n3" / "mysqld.pid"
    pid = int(pid_file.read_text())
    errors: list[BaseException] = []
    writers, rounds = 3, 30
    try:
        load = asyncio.gather(
            *(write_from(url, n, writers, rounds, errors) for n, url in enumerate(cluster[:2]))
        )
        await asyncio.sleep(0)  # the writers start before the kill
        async with SQLSession(cluster[0]) as probe:  # once writes are flowing

            async def flowing() -> bool:
                return bool(await probe.segments("s0"))

            await eventually(flowing)
        os.kill(pid, signal.SIGKILL)
        await load
        assert errors == []
        await assert_stored_once(cluster[1], [0, 1], writers, rounds)
    finally:
        restart_node(3)
