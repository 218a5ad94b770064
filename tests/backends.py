"""The backends the suites run on, and the servers behind them: what tests import.

Server backends read their URLs from the environment:
``LOVIA_TEST_POSTGRES_URL`` and ``LOVIA_TEST_MYSQL_URL`` (MySQL or MariaDB)
name a server the tests may connect to. Without the variable those tests skip,
unless ``LOVIA_TEST_REQUIRE_SERVERS=1`` (CI sets it): then a missing server fails
the run instead of silently skipping.

The contract suites' server backends share one migrated database per server for
the whole run, emptied after each test (``shared_server_database``): creating and
migrating a database per test cost about 0.3 s each. A test that leaves anything
else behind (a table, a schema, another revision) gets the database dropped and
made anew for the next one, so no test sees another's rows or schema. Other tests
that need current databases of their own, several at once if they like (copies,
exports, rekeys), take them from a pool of migrated databases given back empty
(``migrated_server_database``). Tests about schemas, migrations and first opens
take a fresh database (``fresh_server_database``).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from lovia_store import (
    Database,
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


class Manifest(Mapping[str, Any]):
    """A legacy fixture's manifest, read at first use: a missing fixture fails the tests
    that read it, never the collection of every test."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def available(self) -> bool:
        return (LEGACY / self.name).exists()

    @cached_property
    def _data(self) -> dict[str, Any]:
        if not self.available:
            pytest.fail(
                f"legacy fixture {LEGACY / self.name} is missing (set LOVIA_LEGACY_FIXTURES)"
            )
        data: dict[str, Any] = json.loads((LEGACY / self.name).read_text())
        return data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def session(self, session_id: str) -> dict[str, Any]:
        return next(s for s in self["sessions"] if s["session_id"] == session_id)


LOVIA_MANIFEST = Manifest("lovia-0.9.119.manifest.json")
ZETT_MANIFEST = Manifest("zett-0.2.1.manifest.json")

SQLITE_KINDS = ("sqlite", "sqlite_wal", "sqlite_compressed")
# SQLite with compression_threshold=64 (the least): ordinary test data is then
# compressed and its long strings stored once (docs/documents.md), so every case of
# the contract suites reads, edits and deletes shared values. Kept to those suites.
COMPRESSED_KINDS = ("sqlite_compressed",)
# PostgreSQL twice: through asyncpg (what lovia-store ships with) and through
# psycopg (what a host's own engine may use).
SERVER_KINDS = ("postgres", "postgres_psycopg", "mariadb")
SQL_KINDS = SQLITE_KINDS + SERVER_KINDS
ALL_KINDS = ("memory", *SQL_KINDS)
# PostgreSQL through a transaction pooler (LOVIA_TEST_PGBOUNCER_URL, PgBouncer in
# transaction mode in CI), on both drivers, with ?lovia_pooler=transaction: the
# backend fixtures offer them, and conftest keeps them in the contract suites only.
POOLED_KINDS = ("pgbouncer", "pgbouncer_psycopg")
# One node of a MariaDB Galera cluster (LOVIA_TEST_GALERA_URLS), kept to the same suites.
CLUSTER_KINDS = (*POOLED_KINDS, "galera")


def pooled_url(url: str, *, driver: str = "asyncpg") -> str:
    """``url``'s database, reached through the pooler, in transaction-pooler mode."""
    pooler = make_url(server_url("LOVIA_TEST_PGBOUNCER_URL"))
    through = make_url(url).set(
        drivername=f"postgresql+{driver}",
        host=pooler.host,
        port=pooler.port,
        username=pooler.username,
        password=pooler.password,
    )
    return through.update_query_dict({"lovia_pooler": "transaction"}).render_as_string(False)


def server_url(variable: str) -> str:
    url = os.environ.get(variable)
    if not url:
        if os.environ.get("LOVIA_TEST_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{variable} is not set but LOVIA_TEST_REQUIRE_SERVERS=1")
        pytest.skip(f"{variable} is not set")
    return url


async def connect_pg_admin() -> asyncpg.Connection:
    """A plain asyncpg connection to the database the test URL names."""
    return await connect_pg(server_url("LOVIA_TEST_POSTGRES_URL"))


async def connect_pg(url: str) -> asyncpg.Connection:
    """A plain asyncpg connection to the database ``url`` names."""
    parsed = make_url(url)
    return await asyncpg.connect(
        host=parsed.host,
        port=parsed.port or 5432,
        user=parsed.username,
        password=parsed.password,
        database=parsed.database,
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


def _mysql_server(server: str = "mariadb") -> Any:
    """The URL of the MySQL/MariaDB server (or the first Galera node) the tests may use."""
    if server == "galera":
        return make_url(server_url("LOVIA_TEST_GALERA_URLS").split(",")[0].strip())
    return make_url(server_url("LOVIA_TEST_MYSQL_URL"))


async def _mysql_admin(sql: str, server: Any = None) -> None:
    import asyncmy

    url = server if server is not None else _mysql_server()
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


async def create_mysql_database(server: str = "mariadb") -> str:
    """A new empty MySQL/MariaDB database (on a Galera cluster: ``server="galera"``);
    returns its asyncmy URL."""
    name = f"lovia_t_{uuid.uuid4().hex[:16]}"
    url = _mysql_server(server)
    await _mysql_admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", url)
    return url.set(drivername="mysql+asyncmy", database=name).render_as_string(hide_password=False)


async def drop_mysql_database(url: str) -> None:
    parsed = make_url(url)
    await _mysql_admin(f"DROP DATABASE IF EXISTS `{parsed.database}`", parsed)


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


_SHARED: dict[str, str] = {}
_MANY_ROWS = 1_000
"""The migrated database each server's backends share, by server."""


@contextlib.asynccontextmanager
async def shared_server_database(server: str) -> AsyncIterator[str]:
    """The run's migrated database on ``server`` (``postgres`` or ``mariadb``), empty,
    emptied again after the test; dropped and made anew if the test left anything else."""
    from lovia_store import upgrade

    url = _SHARED.get(server)
    if url is None:
        url = await (
            create_pg_database() if server == "postgres" else create_mysql_database(server)
        )
        await upgrade(url)
        _SHARED[server] = url
    try:
        yield url
    finally:
        if not await (_empty_pg if server == "postgres" else _empty_mysql)(url):
            del _SHARED[server]
            await (drop_pg_database if server == "postgres" else drop_mysql_database)(url)


def _our_tables() -> tuple[list[str], set[str], dict[str, int], str]:
    """Our tables children first, every table a migrated database has, the store
    versions it records and its revision."""
    from lovia_store.db.schema import KNOWN_VERSIONS, head_revision
    from lovia_store.db.tables import VERSION_TABLE, metadata, schema_versions

    tables = [t.name for t in reversed(metadata.sorted_tables) if t is not schema_versions]
    return tables, {*metadata.tables, VERSION_TABLE}, KNOWN_VERSIONS, head_revision()


async def _empty_pg(url: str) -> bool:
    """Delete every row the test wrote; False if the database is not as it was made."""
    tables, expected, versions, head = _our_tables()
    conn = await connect_pg(url)
    try:
        await conn.execute("SET lock_timeout = '10s'")
        # A test that wrote many rows leaves as many dead ones behind a DELETE, and the
        # next test's query plans would see that bloat: TRUNCATE (23 ms, DELETE 0.2 ms)
        # gives it empty tables as a new database has.
        many = await conn.fetchval(f"SELECT count(*) > {_MANY_ROWS} FROM lovia_messages")
        if many:
            await conn.execute(f"TRUNCATE {', '.join(tables)}")
        else:
            await conn.execute("; ".join(f"DELETE FROM {t}" for t in tables))
        names = {
            r[0]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        schemas = await conn.fetchval(
            "SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname NOT IN ('public', 'information_schema')"
        )
        revision = await conn.fetch("SELECT version_num FROM lovia_alembic_version")
        stored = dict(await conn.fetch("SELECT store, version FROM lovia_schema"))
        return (
            names == expected
            and not schemas
            and [r[0] for r in revision] == [head]
            and stored == versions
        )
    except (asyncpg.PostgresError, OSError):
        return False
    finally:
        await conn.close()


async def connect_mysql(url: str, **options: Any) -> Any:
    """A plain asyncmy connection to the database ``url`` names."""
    import asyncmy

    parsed = make_url(url)
    return await asyncmy.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        db=parsed.database,
        **options,
    )


async def _empty_mysql(url: str) -> bool:
    """Delete every row the test wrote; False if the database is not as it was made."""
    import asyncmy

    tables, expected, versions, head = _our_tables()
    conn = await connect_mysql(url, autocommit=True)
    try:
        async with conn.cursor() as cursor:
            await cursor.execute(
                "SET SESSION innodb_lock_wait_timeout = 10, lock_wait_timeout = 10"
            )
            for table in tables:
                await cursor.execute(f"DELETE FROM {table}")
            await cursor.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
            )
            names = {row[0] for row in await cursor.fetchall()}
            await cursor.execute("SELECT version_num FROM lovia_alembic_version")
            revision = [row[0] for row in await cursor.fetchall()]
            await cursor.execute("SELECT store, version FROM lovia_schema")
            stored = {row[0]: int(row[1]) for row in await cursor.fetchall()}
        return names == expected and revision == [head] and stored == versions
    except (asyncmy.errors.Error, OSError):
        return False
    finally:
        conn.close()


_POOL: dict[str, list[tuple[str, str]]] = {}
"""Migrated databases tests gave back empty, by server, each with its fingerprint."""


@contextlib.asynccontextmanager
async def migrated_server_database(server: str) -> AsyncIterator[str]:
    """A migrated, empty database on ``server`` (``postgres`` or ``mariadb``) for this
    test alone, which may hold several at once: one an earlier test gave back, or a new
    one. After the test it is emptied and given back, or dropped if the test left
    anything but rows behind (its fingerprint, ``_fingerprint``, says: tables, columns,
    indexes, constraints, schemas, policies, triggers, views, routines), another revision
    or other store versions. For tests that need a current database and are not about
    how a database becomes current (those take ``fresh_server_database``)."""
    from lovia_store import upgrade

    pool = _POOL.setdefault(server, [])
    if pool:
        url, made = pool.pop()
    else:
        url = await (
            create_pg_database() if server == "postgres" else create_mysql_database(server)
        )
        await upgrade(url)
        made = await _fingerprint(url)
    try:
        yield url
    finally:
        emptied = await (_empty_pg if server == "postgres" else _empty_mysql)(url)
        if emptied and await _fingerprint(url) == made:
            pool.append((url, made))
        else:
            await (drop_pg_database if server == "postgres" else drop_mysql_database)(url)


_PG_FINGERPRINT = """
SELECT md5(coalesce(string_agg(x, ',' ORDER BY x), '')) FROM (
  SELECT 'c ' || table_schema || '.' || table_name || '.' || column_name || ' '
         || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
         || ' ' || coalesce(collation_name, '')
    FROM information_schema.columns
   WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
  UNION ALL
  SELECT 'i ' || schemaname || '.' || indexname || ' ' || indexdef
    FROM pg_indexes WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
  UNION ALL
  SELECT 'k ' || conrelid::regclass::text || '.' || conname || ' '
         || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace::regnamespace::text NOT LIKE 'pg\\_%'
         AND connamespace::regnamespace::text <> 'information_schema'
  UNION ALL
  SELECT 'r ' || oid::regclass::text || ' ' || relkind::text || ' ' || relrowsecurity::text
         || relforcerowsecurity::text || ' ' || coalesce(relacl::text, '')
    FROM pg_class WHERE relnamespace::regnamespace::text NOT LIKE 'pg\\_%'
         AND relnamespace::regnamespace::text <> 'information_schema'
  UNION ALL
  SELECT 'p ' || schemaname || '.' || tablename || '.' || policyname FROM pg_policies
  UNION ALL
  SELECT 't ' || tgrelid::regclass::text || '.' || tgname FROM pg_trigger
   WHERE NOT tgisinternal
  UNION ALL
  SELECT 'f ' || p.oid::regprocedure::text FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
  UNION ALL
  SELECT 's ' || nspname || ' ' || coalesce(nspacl::text, '') FROM pg_namespace
   WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
  UNION ALL
  SELECT 'd ' || coalesce(setconfig::text, '') FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
) AS shape(x)
"""

_MYSQL_FINGERPRINT = """
SELECT MD5(COALESCE(GROUP_CONCAT(x ORDER BY x SEPARATOR ','), '')) FROM (
  SELECT CONCAT_WS(' ', 'c', table_name, column_name, column_type, is_nullable,
                   COALESCE(column_default, ''), COALESCE(collation_name, ''), extra) AS x
    FROM information_schema.columns WHERE table_schema = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(' ', 'i', table_name, index_name, seq_in_index, column_name,
                   non_unique, COALESCE(sub_part, ''))
    FROM information_schema.statistics WHERE table_schema = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(' ', 'k', table_name, constraint_name, constraint_type)
    FROM information_schema.table_constraints WHERE table_schema = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(' ', 'r', table_name, table_type, engine, table_collation,
                   create_options)
    FROM information_schema.tables WHERE table_schema = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(' ', 't', trigger_name)
    FROM information_schema.triggers WHERE trigger_schema = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(' ', 'f', routine_type, routine_name)
    FROM information_schema.routines WHERE routine_schema = DATABASE()
  UNION ALL
  SELECT CONCAT_WS(' ', 'd', default_character_set_name, default_collation_name)
    FROM information_schema.schemata WHERE schema_name = DATABASE()
) AS shape
"""


async def _fingerprint(url: str) -> str:
    """A digest of everything in the database but its rows (see ``_PG_FINGERPRINT``)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        conn = await connect_pg(url)
        try:
            return str(await conn.fetchval(_PG_FINGERPRINT))
        finally:
            await conn.close()
    mysql = await connect_mysql(url)
    try:
        async with mysql.cursor() as cursor:
            await cursor.execute("SET SESSION group_concat_max_len = 16777216")
            await cursor.execute(_MYSQL_FINGERPRINT)
            row = await cursor.fetchone()
            return str(row[0])
    finally:
        mysql.close()


async def drop_shared_databases() -> None:
    for server, url in list(_SHARED.items()):
        del _SHARED[server]
        await (drop_pg_database if server == "postgres" else drop_mysql_database)(url)
    for server, pool in list(_POOL.items()):
        while pool:
            url, _ = pool.pop()
            await (drop_pg_database if server == "postgres" else drop_mysql_database)(url)


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
    _database: Database | None = None

    @property
    def durable(self) -> bool:
        return self.kind != "memory"

    def _sqlite(self) -> Database | str:
        """What a SQLite store opens: the file, or the compressing kind's Database."""
        assert self.target is not None
        if self.kind not in COMPRESSED_KINDS:
            return self.target
        if self._database is None:
            self._database = Database(self.target, compression_threshold=64)
        return self._database

    async def close(self) -> None:
        if self._database is not None:
            await self._database.close()

    def session(self) -> InMemorySession | SQLSession:
        if self.kind == "memory":
            return InMemorySession()
        assert self.target is not None
        if self.kind in COMPRESSED_KINDS:
            return SQLiteSession(self._sqlite())
        if self.kind in SQLITE_KINDS:
            return SQLiteSession(self.target, wal=self.kind == "sqlite_wal")
        return SQLSession(self.target)

    def storage(self) -> SQLSessionStorage:
        """The Raw Log API (zett-agent's session storage) on this backend's database."""
        if self.kind == "memory":
            pytest.skip("the Raw Log API has no in-memory store")
        assert self.target is not None
        if self.kind in COMPRESSED_KINDS:
            return SQLSessionStorage(self._sqlite())
        if self.kind in SQLITE_KINDS:
            return SQLiteSessionStorage(self.target, wal=self.kind == "sqlite_wal")
        return SQLSessionStorage(self.target)

    def checkpointer(self) -> InMemoryCheckpointer | SQLCheckpointer:
        """Checkpoints, run leases and tool effects on this backend's database."""
        if self.kind == "memory":
            return InMemoryCheckpointer()
        assert self.target is not None
        if self.kind in COMPRESSED_KINDS:
            return SQLiteCheckpointer(self._sqlite())
        if self.kind in SQLITE_KINDS:
            return SQLiteCheckpointer(self.target, wal=self.kind == "sqlite_wal")
        return SQLCheckpointer(self.target)


async def _backend(kind: str, tmp_path: Path) -> AsyncIterator[Backend]:
    if kind == "memory":
        yield Backend(kind, None)
    elif kind in SQLITE_KINDS:
        backend = Backend(kind, str(tmp_path / "store.sqlite3"))
        try:
            yield backend
        finally:
            await backend.close()
    elif kind == "galera":
        async with shared_server_database("galera") as url:
            yield Backend(kind, url)
    elif kind in POOLED_KINDS:
        driver = "psycopg" if kind == "pgbouncer_psycopg" else "asyncpg"
        async with shared_server_database("postgres") as url:
            yield Backend(kind, pooled_url(url, driver=driver))
    else:
        async with shared_server_database("mariadb" if kind == "mariadb" else "postgres") as url:
            if kind == "postgres_psycopg":
                url = make_url(url).set(drivername="postgresql+psycopg").render_as_string(False)
            yield Backend(kind, url)
