"""PostgreSQL behind a transaction pooler (PgBouncer in transaction mode in CI).

With ``?lovia_pooler=transaction`` in the URL, and nothing else, every store, the CLI
and ``LOVIA_STORE_URL`` work through the pooler on asyncpg and psycopg. Without it, a
statement that meets another client's server connection is a ``TransactionPoolerError``
that names the fix, never a bare "unavailable". The contract suites also run through the
pooler (the ``pgbouncer`` backends, tests/conftest.py).

``lovia_pooler_probe`` is a database that .ci/pgbouncer.sh gives one server connection,
so two clients of it deterministically meet each other's prepared statements.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from backends import _pg_admin, fresh_server_database, pooled_url, server_url
from helpers import a_run
from lovia_store import (
    Database,
    InputEntry,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    UserError,
    upgrade,
)
from lovia_store.db.urls import take_pooler, to_url

DRIVERS = ("asyncpg", "psycopg")
PROBE = "lovia_pooler_probe"

pytestmark = pytest.mark.postgres


# -- the URL parameter ---------------------------------------------------------------------------


def test_the_parameter_is_ours_and_never_reaches_the_driver() -> None:
    url, pooler = take_pooler(to_url("postgresql://u@h/db?lovia_pooler=transaction&x=1"), None)
    assert pooler == "transaction"
    assert "lovia_pooler" not in url.query and url.query["x"] == "1"
    assert take_pooler(to_url("postgresql://u@h/db"), "transaction")[1] == "transaction"
    assert take_pooler(to_url("postgresql://u@h/db"), None)[1] is None


@pytest.mark.parametrize(
    ("target", "pooler", "words"),
    [
        ("postgresql://u@h/db?lovia_pooler=session", None, "unknown pooler 'session'"),
        ("postgresql://u@h/db", "statement", "unknown pooler 'statement'"),
        ("postgresql://u@h/db?lovia_pooler=transaction", "x", "but pooler='x' was given"),
        ("mysql://u@h/db?lovia_pooler=transaction", None, "PostgreSQL URLs only"),
        ("sqlite:///x.db?lovia_pooler=transaction", None, "PostgreSQL URLs only"),
    ],
)
def test_a_wrong_pooler_is_refused_at_construction(target: str, pooler: str, words: str) -> None:
    with pytest.raises(UserError, match=words):
        Database(target, pooler=pooler)  # type: ignore[arg-type]


# -- through the pooler --------------------------------------------------------------------------


@pytest.fixture
async def pg_database() -> AsyncIterator[str]:
    """A fresh, migrated PostgreSQL database (its direct URL)."""
    async with fresh_server_database("postgres") as url:
        await upgrade(url)
        yield url


async def workload(url: str, tasks: int = 8, rounds: int = 12) -> list[BaseException]:
    """Runs appended by many tasks to shared sessions, checkpoint steps and Raw Log
    messages; the errors that reached the callers."""
    errors: list[BaseException] = []
    async with SQLSession(url) as sessions, SQLCheckpointer(url) as runs:
        storage = SQLSessionStorage(sessions.database)

        async def worker(n: int) -> None:
            for i in range(rounds):
                try:
                    await sessions.append(f"s{n % 3}", a_run(f"{n}-{i}"), run_id=f"r{n}-{i}")
                    step = [InputEntry(role="user", content=f"step {i}")]
                    await runs.append(f"run-{n}", step, RunHead(agent_name="a", turns=i))
                    await storage.append(f"raw{n % 2}", f"q{n}-{i}", step[0])
                    await sessions.load(f"s{n % 3}")
                except Exception as exc:
                    errors.append(exc)

        await asyncio.gather(*(worker(n) for n in range(tasks)))
    return errors


async def assert_all_stored_once(url: str, tasks: int = 8, rounds: int = 12) -> None:
    async with SQLSession(url) as sessions, SQLCheckpointer(url) as runs:
        storage = SQLSessionStorage(sessions.database)
        stored = [s.run_id for k in range(3) for s in await sessions.segments(f"s{k}")]
        assert sorted(stored) == sorted(f"r{n}-{i}" for n in range(tasks) for i in range(rounds))
        for n in range(tasks):
            snapshot = await runs.load(f"run-{n}")
            assert snapshot is not None and len(snapshot.entries) == rounds
        raw = [r for k in range(2) for r in await storage.list_raw_messages(f"raw{k}")]
        assert sorted(r.request_id for r in raw) == sorted(
            f"q{n}-{i}" for n in range(tasks) for i in range(rounds)
        )
        for k in range(2):  # gap-free per session
            sequences = [r.sequence for r in await storage.list_raw_messages(f"raw{k}")]
            assert sequences == list(range(1, len(sequences) + 1))


@pytest.mark.parametrize("driver", DRIVERS)
async def test_with_the_parameter_nothing_fails_is_lost_or_doubled(
    pg_database: str, driver: str
) -> None:
    url = pooled_url(pg_database, driver=driver)
    assert await workload(url) == []
    await assert_all_stored_once(url)


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_fresh_database_migrates_through_the_pooler(driver: str) -> None:
    async with fresh_server_database("postgres") as direct:
        url = pooled_url(direct, driver=driver)
        report = await upgrade(url)
        assert report.from_revision is None and report.changed
        async with SQLSession(url) as sessions:
            await sessions.append("s", a_run("1"), run_id="r1")
            assert await sessions.load("s") == a_run("1")


def test_the_command_line_works_through_the_pooler(pg_database: str, tmp_path: Path) -> None:
    url = pooled_url(pg_database)
    env = {k: v for k, v in os.environ.items() if k != "LOVIA_STORE_URL"}
    cli = [sys.executable, "-m", "lovia_store.cli"]
    for args in (["upgrade", url], ["check", url], ["sessions", url]):
        done = subprocess.run(
            cli + args, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
    done = subprocess.run(  # LOVIA_STORE_URL carries the parameter too
        [*cli, "check"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "LOVIA_STORE_URL": url},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr


# -- without the parameter: a typed error that names the fix -----------------------------------


@pytest.fixture
async def probe() -> AsyncIterator[str]:
    """The probe database (one server connection behind the pooler), migrated, through
    the pooler without the parameter: what a newcomer's URL looks like."""
    server_url("LOVIA_TEST_PGBOUNCER_URL")
    await _pg_admin(f'DROP DATABASE IF EXISTS "{PROBE}" WITH (FORCE)')
    await _pg_admin(f'CREATE DATABASE "{PROBE}"')
    direct = make_url(server_url("LOVIA_TEST_POSTGRES_URL")).set(
        drivername="postgresql+asyncpg", database=PROBE
    )
    try:
        await upgrade(direct.render_as_string(False))
        pooled = make_url(pooled_url(direct.render_as_string(False)))
        yield pooled.difference_update_query(["lovia_pooler"]).render_as_string(False)
    finally:
        await _pg_admin(f'DROP DATABASE IF EXISTS "{PROBE}" WITH (FORCE)')


_CLIENT = """
import asyncio, sys
from lovia_store import SQLSession
from lovia_store.entries import InputEntry

async def main(url: str, tag: str) -> None:
    async with SQLSession(url) as sessions:
        for n in range(6):
            await sessions.append("s", [InputEntry(role="user", content=tag)], run_id=f"{tag}{n}")
try:
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    print("ok")
except Exception as exc:
    print(type(exc).__name__, exc.retry_safe, exc)
"""


def client(url: str, tag: str) -> str:
    """What a new process appending through ``url`` ends with: "ok" or its error."""
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT, url, tag], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("driver", DRIVERS)
def test_without_the_parameter_a_pooler_s_error_names_the_fix(probe: str, driver: str) -> None:
    """Two clients, one after the other, on the probe's one server connection: the
    second prepares its statements under the names the first gave its own (asyncpg
    names them by a counter per process, psycopg by one per connection, once a
    statement ran often enough to be prepared), which the server still holds."""
    url = make_url(probe).set(drivername=f"postgresql+{driver}").render_as_string(False)
    assert client(url, "a") == "ok"
    said = client(url, "b")
    assert said.startswith("TransactionPoolerError True "), said
    assert "?lovia_pooler=transaction" in said and "nothing ran" in said
    # With the parameter, two clients of the same one server connection agree.
    pooled = make_url(url).update_query_dict({"lovia_pooler": "transaction"})
    assert client(pooled.render_as_string(False), "c") == "ok"
    assert client(pooled.render_as_string(False), "d") == "ok"


async def test_a_pooled_engine_of_the_caller_s_own_keeps_every_statement_in_a_transaction(
    pg_database: str,
) -> None:
    """A host's own engine behind the pooler: configured by the host, and ``pooler=``
    tells lovia-store not to run a lone statement outside a transaction."""
    from sqlalchemy.ext.asyncio import create_async_engine

    url = make_url(pooled_url(pg_database)).difference_update_query(["lovia_pooler"])
    engine = create_async_engine(
        url,
        connect_args={
            "statement_cache_size": 0,
            "prepared_statement_cache_size": 0,
            "prepared_statement_name_func": lambda: f"__host_{os.urandom(8).hex()}__",
        },
    )
    try:
        async with Database(engine, pooler="transaction") as db:
            assert await workload_on(db) == []
    finally:
        await engine.dispose()


async def workload_on(db: Database) -> list[BaseException]:
    errors: list[BaseException] = []
    sessions = SQLSession(db)

    async def worker(n: int) -> None:
        for i in range(10):
            try:
                await sessions.append(f"s{n % 2}", a_run(f"{n}-{i}"), run_id=f"r{n}-{i}")
                await sessions.load(f"s{n % 2}")
            except Exception as exc:
                errors.append(exc)

    await asyncio.gather(*(worker(n) for n in range(6)))
    return errors


async def test_asyncpg_is_reachable_at_all() -> None:
    """The pooler answers (a missing pooler in CI fails here, not as a skip)."""
    pooler = make_url(server_url("LOVIA_TEST_PGBOUNCER_URL"))
    conn = await asyncpg.connect(
        host=pooler.host,
        port=pooler.port,
        user=pooler.username,
        database=pooler.database,
        statement_cache_size=0,
    )
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()


# -- SERIALIZABLE: what distributed SQL runs at -----------------------------------------------


@pytest.mark.parametrize("through", ["direct", "pooler"])
async def test_serializable_contention_reaches_no_caller(pg_database: str, through: str) -> None:
    """16 writers on two shared sessions, shared run ids and shared checkpoints, at
    SERIALIZABLE: every serialization failure is run again whole, none reaches a caller,
    and nothing is lost or stored twice."""
    url = pg_database if through == "direct" else pooled_url(pg_database)
    errors: list[BaseException] = []
    # Retries last as long as busy_timeout: generous, so a loaded machine slows the test
    # down instead of failing it (a clean-clone run under load exceeded the 5 s default).
    async with Database(url, isolation_level="SERIALIZABLE", busy_timeout=120) as db:
        sessions, runs, storage = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)

        async def worker(n: int) -> None:
            for i in range(10):
                try:
                    # Run ids shared by two writers each: one stores it, the other is a no-op.
                    session, run_id = f"s{n // 2 % 2}", f"r{n // 2}-{i}"
                    await sessions.append(session, a_run(run_id), run_id=run_id)
                    await storage.append(
                        f"raw{n % 2}", f"q{n}-{i}", InputEntry(role="user", content="z")
                    )
                    step = [InputEntry(role="user", content=f"{n}-{i}")]
                    await runs.append(f"run{i % 3}", step, RunHead(agent_name="a"))
                except Exception as exc:
                    errors.append(exc)

        await asyncio.gather(*(worker(n) for n in range(16)))
        assert errors == []
        stored = [s.run_id for k in range(2) for s in await sessions.segments(f"s{k}")]
        assert sorted(stored) == sorted(f"r{m}-{i}" for m in range(8) for i in range(10))
        for k in range(2):
            records = await storage.list_raw_messages(f"raw{k}")
            assert [r.sequence for r in records] == list(range(1, len(records) + 1))
        raw = [r.request_id for k in range(2) for r in await storage.list_raw_messages(f"raw{k}")]
        assert sorted(raw) == sorted(f"q{n}-{i}" for n in range(16) for i in range(10))
        steps = []
        for i in range(3):
            snapshot = await runs.load(f"run{i}")
            assert snapshot is not None
            steps += snapshot.entries
        assert len(steps) == 160 and len({e.content for e in steps}) == 160
