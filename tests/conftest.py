"""Backends for the contract suites, and the servers the tests need.

Server backends read their URLs from the environment:
``LOVIA_TEST_POSTGRES_URL`` and ``LOVIA_TEST_MYSQL_URL`` (MySQL or MariaDB)
name a server the tests may connect to; each test gets a fresh database
created beside the named one and dropped afterwards. Without the variable those tests skip, unless
``LOVIA_TEST_REQUIRE_SERVERS=1`` (CI sets it): then a missing server fails
the run instead of silently skipping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from divergences import DIVERGENCES, divergence_of
from lovia_store import (
    InMemoryCheckpointer,
    InMemorySession,
    SQLCheckpointer,
    SQLiteCheckpointer,
    SQLiteSession,
    SQLiteSessionStorage,
    SQLSession,
    SQLSessionStorage,
)

HERE = Path(__file__).resolve().parent
LEGACY = Path(
    os.environ.get("LOVIA_LEGACY_FIXTURES", HERE.parents[1] / "shared" / "fixtures" / "legacy")
)

SQLITE_KINDS = ("sqlite", "sqlite_wal")
# PostgreSQL twice: through asyncpg (what lovia-store ships with) and through
# psycopg (what a host's own engine may use).
SERVER_KINDS = ("postgres", "postgres_psycopg", "mariadb")
SQL_KINDS = SQLITE_KINDS + SERVER_KINDS
ALL_KINDS = ("memory", *SQL_KINDS)


def server_url(variable: str) -> str:
    url = os.environ.get(variable)
    if not url:
        if os.environ.get("LOVIA_TEST_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{variable} is not set but LOVIA_TEST_REQUIRE_SERVERS=1")
        pytest.skip(f"{variable} is not set")
    return url


async def connect_pg_admin() -> asyncpg.Connection:
    """A plain asyncpg connection to the database the test URL names."""
    url = make_url(server_url("LOVIA_TEST_POSTGRES_URL"))
    return await asyncpg.connect(
        host=url.host,
        port=url.port or 5432,
        user=url.username,
        password=url.password,
        database=url.database,
    )


async def _pg_admin(sql: str) -> None:
    conn = await connect_pg_admin()
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def create_pg_database() -> str:
    """A new empty PostgreSQL database; returns its asyncpg URL."""
    name = f"lovia_t_{uuid.uuid4().hex[:16]}"
    await _pg_admin(f'CREATE DATABASE "{name}"')
    url = make_url(server_url("LOVIA_TEST_POSTGRES_URL"))
    return url.set(drivername="postgresql+asyncpg", database=name).render_as_string(
        hide_password=False
    )


async def drop_pg_database(url: str) -> None:
    await _pg_admin(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')


async def _mysql_admin(sql: str) -> None:
    import asyncmy

    url = make_url(server_url("LOVIA_TEST_MYSQL_URL"))
    conn = await asyncmy.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
    )
    try:
        async with conn.cursor() as cursor:
            await cursor.execute(sql)
    finally:
        conn.close()


async def create_mysql_database() -> str:
    """A new empty MySQL/MariaDB database; returns its asyncmy URL."""
    name = f"lovia_t_{uuid.uuid4().hex[:16]}"
    await _mysql_admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    url = make_url(server_url("LOVIA_TEST_MYSQL_URL"))
    return url.set(drivername="mysql+asyncmy", database=name).render_as_string(hide_password=False)


async def drop_mysql_database(url: str) -> None:
    await _mysql_admin(f"DROP DATABASE IF EXISTS `{make_url(url).database}`")


@contextlib.asynccontextmanager
async def fresh_server_database(kind: str) -> AsyncIterator[str]:
    """A new empty database on the PostgreSQL (``postgres``) or MySQL server, dropped after."""
    create, drop = (
        (create_pg_database, drop_pg_database)
        if kind == "postgres"
        else (create_mysql_database, drop_mysql_database)
    )
    url = await create()
    try:
        yield url
    finally:
        await drop(url)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mysql),
    ]
)
async def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """One empty database on each SQL engine: a new SQLite file, or a fresh database
    on the PostgreSQL or MariaDB server (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'store.sqlite3'}"
        return
    async with fresh_server_database(request.param) as created:
        yield created


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    async with fresh_server_database("postgres") as url:
        yield url


@dataclass
class Backend:
    """One backend of the suites: where its data lives and how to open each store on it.

    The one registry of stores per backend: ``session()``, ``storage()`` (the Raw Log API)
    and ``checkpointer()`` (checkpoints, leases and tool effects) each open a new store on
    the same data, so a second call sees what the first wrote (on every backend but
    ``memory``, whose stores are each their own).
    """

    kind: str
    target: str | None

    @property
    def durable(self) -> bool:
        return self.kind != "memory"

    def session(self) -> InMemorySession | SQLSession:
        if self.kind == "memory":
            return InMemorySession()
        assert self.target is not None
        if self.kind in SQLITE_KINDS:
            return SQLiteSession(self.target, wal=self.kind == "sqlite_wal")
        return SQLSession(self.target)

    def storage(self) -> SQLSessionStorage:
        """The Raw Log API (zett-agent's session storage) on this backend's database."""
        if self.kind == "memory":
            pytest.skip("the Raw Log API has no in-memory store")
        assert self.target is not None
        if self.kind in SQLITE_KINDS:
            return SQLiteSessionStorage(self.target, wal=self.kind == "sqlite_wal")
        return SQLSessionStorage(self.target)

    def checkpointer(self) -> InMemoryCheckpointer | SQLCheckpointer:
        """Checkpoints, run leases and tool effects on this backend's database."""
        if self.kind == "memory":
            return InMemoryCheckpointer()
        assert self.target is not None
        if self.kind in SQLITE_KINDS:
            return SQLiteCheckpointer(self.target, wal=self.kind == "sqlite_wal")
        return SQLCheckpointer(self.target)


async def _backend(kind: str, tmp_path: Path) -> AsyncIterator[Backend]:
    if kind == "memory":
        yield Backend(kind, None)
    elif kind in SQLITE_KINDS:
        yield Backend(kind, str(tmp_path / "store.sqlite3"))
    else:
        async with fresh_server_database("mariadb" if kind == "mariadb" else "postgres") as url:
            if kind == "postgres_psycopg":
                url = make_url(url).set(drivername="postgresql+psycopg").render_as_string(False)
            yield Backend(kind, url)


@pytest.fixture(params=ALL_KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Every backend, memory included."""
    async for value in _backend(request.param, tmp_path):
        yield value


@pytest.fixture(params=SQL_KINDS)
async def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Every SQL backend."""
    async for value in _backend(request.param, tmp_path):
        yield value


@pytest.fixture(params=SERVER_KINDS)
async def server_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Every server backend (PostgreSQL, MariaDB)."""
    async for value in _backend(request.param, tmp_path):
        yield value


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each divergence tests/divergences.py declares is a strict xfail: it must still fail."""
    for item in items:
        reason = divergence_of(item.nodeid, DIVERGENCES)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.fixture
def legacy_copy(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a legacy fixture into a writable folder (shared/ is read-only in CI)."""

    def copy(name: str) -> Path:
        source = LEGACY / name
        if not source.exists():
            pytest.fail(f"legacy fixture {source} is missing (set LOVIA_LEGACY_FIXTURES)")
        target = tmp_path / name
        shutil.copyfile(source, target)
        return target

    return copy
