"""Row-level security on PostgreSQL (issue 32, item 4): the database holds a role to one tenant.

The role the application runs as (``lovia_rls_app``) logs in without owning our tables
and without superuser rights, as docs/tenants.md asks: the tables' owner and superusers
pass every policy. It is listed in .ci/pgbouncer.sh's user list, so it also logs in
through PgBouncer in transaction mode, where ``set_config(..., true)`` must still hold
for the whole transaction and never leak into another client's.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import Connection, func, insert, select, text
from sqlalchemy.engine import make_url

from backends import (
    _pg_admin,
    create_pg_database,
    drop_pg_database,
    fresh_server_database,
    pooled_url,
    server_url,
)
from helpers import a_run
from lovia_store import (
    Database,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    StoredValueError,
    UserError,
    upgrade,
)
from lovia_store.db.contents import read_documents, release_documents, store_documents
from lovia_store.db.row_security import (
    POLICY,
    disable_row_level_security,
    enable_row_level_security,
    row_level_security_status,
    tenant_tables,
)
from lovia_store.db.tables import contents, sessions
from lovia_store.models import SessionRow

ROLE = "lovia_rls_app"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# -- refused where there is no such thing ---------------------------------------------------------


def test_the_option_is_refused_off_postgresql(tmp_path: Any) -> None:
    with pytest.raises(UserError, match="only to PostgreSQL, not to sqlite"):
        Database(tmp_path / "x.db", row_level_security=True)
    with pytest.raises(UserError, match="only to PostgreSQL, not to mysql"):
        Database("mysql+asyncmy://u@h/db", row_level_security=True)
    with pytest.raises(UserError, match="True or False"):
        Database(tmp_path / "x.db", row_level_security="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("target", ["sqlite", "mysql+asyncmy://u@127.0.0.1:1/db"])
async def test_enabling_is_refused_off_postgresql(tmp_path: Any, target: str) -> None:
    url = str(tmp_path / "x.db") if target == "sqlite" else target
    with pytest.raises(UserError, match="row-level security is PostgreSQL's"):
        await enable_row_level_security(url)
    with pytest.raises(UserError, match="row-level security is PostgreSQL's"):
        await disable_row_level_security(url)


async def test_roles_are_names(tmp_path: Any) -> None:
    for roles in ([], [""], [3], "", ["a\x00"]):
        with pytest.raises(UserError, match="role"):
            await enable_row_level_security(str(tmp_path / "x.db"), roles=roles)  # type: ignore[arg-type]


TENANT_TABLES = {
    "lovia_sessions",
    "lovia_messages",
    "lovia_session_runs",
    "lovia_snapshots",
    "lovia_run_heads",
    "lovia_run_entries",
    "lovia_tool_effects",
    "lovia_run_leases",
    "lovia_contents",  # 0010: shared values are a tenant's too
}


def test_every_tenant_table_is_covered() -> None:
    assert {table.name for table in tenant_tables()} == TENANT_TABLES


# -- on PostgreSQL -------------------------------------------------------------------------------


@dataclass
class Scratch:
    owner: str  # the owner's URL (postgres, a superuser)
    app: str  # the application role's URL, direct


async def _create_role() -> None:
    """The application role: may log in, owns nothing, no superuser, no BYPASSRLS."""
    await _pg_admin(
        f"DO $$ BEGIN CREATE ROLE {ROLE} LOGIN NOSUPERUSER NOBYPASSRLS; "
        "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    )


async def _owner_sql(url: str, *statements: str, args: tuple[Any, ...] = ()) -> list[Any]:
    parsed = make_url(url)
    conn = await asyncpg.connect(
        host=parsed.host, port=parsed.port, user=parsed.username, database=parsed.database
    )
    try:
        found: list[Any] = []
        for statement in statements:
            found = await conn.fetch(statement, *args) if args else await conn.fetch(statement)
        return found
    finally:
        await conn.close()


@pytest.fixture
async def scratch() -> AsyncIterator[Scratch]:
    """A fresh migrated database with the policies on, the role granted DML, and rows of
    tenants "a", "b" and the default tenant written by the owner."""
    async with fresh_server_database("postgres") as url:
        await upgrade(url)
        await _create_role()
        await _owner_sql(
            url,
            f"GRANT USAGE ON SCHEMA public TO {ROLE}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {ROLE}",
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {ROLE}",
        )
        assert sorted(await enable_row_level_security(url)) == sorted(TENANT_TABLES)
        db = Database(url)
        try:

            def seed(conn: Connection) -> None:
                for tenant in ("a", "b", ""):
                    for sid in ("s1", "s2"):
                        row = {"tenant": tenant, "session_id": sid, "title": f"{tenant}/{sid}"}
                        conn.execute(
                            insert(sessions), {**row, "created_at": NOW, "updated_at": NOW}
                        )

            await db.write(seed)
        finally:
            await db.close()
        app = make_url(url).set(username=ROLE).render_as_string(hide_password=False)
        yield Scratch(url, app)


def _pooled(app_url: str, driver: str) -> str:
    """The role's URL through PgBouncer (the test fails, not skips, when CI requires it)."""
    through = pooled_url(app_url, driver=driver)
    return make_url(through).set(username=ROLE).render_as_string(hide_password=False)


def _app_url(scratch: Scratch, route: str) -> str:
    if route == "direct":
        return scratch.app
    if route == "direct-psycopg":
        return make_url(scratch.app).set(drivername="postgresql+psycopg").render_as_string(False)
    return _pooled(scratch.app, "psycopg" if route.endswith("psycopg") else "asyncpg")


# Not the backend kinds "pgbouncer"/"pgbouncer_psycopg": conftest keeps those in the
# contract suites. These cases are this file's own, marked as theirs are.
ROUTES = [
    "direct",
    pytest.param("direct-psycopg", marks=pytest.mark.psycopg),
    pytest.param("via-pgbouncer", marks=pytest.mark.pgbouncer),
    pytest.param("via-pgbouncer-psycopg", marks=[pytest.mark.pgbouncer, pytest.mark.psycopg]),
]


@pytest.mark.postgres
async def test_enable_is_idempotent_and_disable_undoes_it(scratch: Scratch) -> None:
    again = await enable_row_level_security(scratch.owner, roles=[ROLE], force=True)
    assert sorted(again) == sorted(table.name for table in tenant_tables())
    status = await row_level_security_status(scratch.owner)
    assert all(state == (True, True, True) for state in status.values()), status
    policies = await _owner_sql(
        scratch.owner,
        f"SELECT tablename, roles FROM pg_policies WHERE policyname = '{POLICY}'",
    )
    assert {p["tablename"] for p in policies} == TENANT_TABLES
    assert all(list(p["roles"]) == [ROLE] for p in policies)
    await disable_row_level_security(scratch.owner)
    await disable_row_level_security(scratch.owner)
    status = await row_level_security_status(scratch.owner)
    assert all(state == (False, False, False) for state in status.values()), status


@pytest.mark.postgres
async def test_in_a_named_schema() -> None:
    async with fresh_server_database("postgres") as url:
        await _owner_sql(url, "CREATE SCHEMA lovia")
        await upgrade(url, schema="lovia")
        db = Database(url, schema="lovia")
        try:
            await enable_row_level_security(db)
            assert all(
                s == (True, False, True) for s in (await row_level_security_status(db)).values()
            )
        finally:
            await db.close()


@pytest.mark.postgres
@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_a_plain_orm_query_sees_one_tenant_when_it_sets_it(
    scratch: Scratch, driver: str
) -> None:
    """A host's own ORM query on our tables: nothing without the setting, one tenant with it,
    and nothing again in the next transaction on the same connection (the setting read
    back as '' there must not mean the default tenant)."""
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    url = make_url(scratch.app).set(drivername=f"postgresql+{driver}")
    engine = create_async_engine(url, pool_size=1, max_overflow=0)
    try:
        async with AsyncSession(engine) as orm:
            assert (await orm.scalars(select(SessionRow))).all() == []
            await orm.commit()
            await orm.execute(text("SELECT set_config('lovia.tenant', 'a', true)"))
            rows = (await orm.scalars(select(SessionRow).order_by(SessionRow.session_id))).all()
            assert [(r.tenant, r.session_id) for r in rows] == [("a", "s1"), ("a", "s2")]
            # Writing another tenant's row is refused by WITH CHECK.
            orm.add(SessionRow(tenant="b", session_id="x", created_at=NOW, updated_at=NOW))
            with pytest.raises(Exception, match="row-level security"):
                await orm.flush()
            await orm.rollback()
            # Same (single) connection, a new transaction: the setting is gone.
            assert (await orm.scalars(select(SessionRow))).all() == []
            await orm.commit()
            await orm.execute(text("SELECT set_config('lovia.tenant', '', true)"))
            assert (await orm.scalars(select(SessionRow))).all() == []
    finally:
        await engine.dispose()
    # The owner (here a superuser) passes the policies: all-tenant maintenance is its.
    owner = await _owner_sql(scratch.owner, "SELECT count(*) AS n FROM lovia_sessions")
    assert owner[0]["n"] == 6


def _titles(conn: Connection) -> list[str]:
    return list(conn.execute(select(sessions.c.title).order_by(sessions.c.title)).scalars())


@pytest.mark.postgres
@pytest.mark.parametrize("route", ROUTES)
async def test_database_sets_the_tenant_of_each_transaction(scratch: Scratch, route: str) -> None:
    db = Database(_app_url(scratch, route), row_level_security=True, verify_only=True)
    try:
        for _ in range(3):  # over and over: pooled connections (and PgBouncer's) alternate
            assert await db.read(_titles, tenant="a") == ["a/s1", "a/s2"]
            assert await db.read(_titles, tenant="b") == ["b/s1", "b/s2"]
            assert await db.read(_titles) == []  # spans tenants: sets nothing, sees nothing
        one = select(sessions.c.title).where(sessions.c.session_id == "s1")
        assert [r.title for r in await db.read_one(one, {}, tenant="b")] == ["b/s1"]
        assert await db.read_one(one, {}) == []
        # write_one, a lone statement, runs inside a transaction that set the tenant.
        new = {"session_id": "s3", "created_at": NOW, "updated_at": NOW}
        added = insert(sessions).values(tenant="b", title="b/s3", **new).returning(sessions.c.title)
        assert [r.title for r in await db.write_one(added, {}, tenant="b")] == ["b/s3"]
        other = insert(sessions).values(tenant="a", title="a/s3", **new).returning(sessions.c.title)
        with pytest.raises(Exception, match="row-level security"):
            await db.write_one(other, {}, tenant="b")

        def rename(conn: Connection) -> int:
            return conn.execute(sessions.update().values(title="renamed")).rowcount

        assert await db.write(rename, tenant="a") == 2  # of tenant a's rows only
        assert await db.write(rename) == 0
        assert await db.read(_titles, tenant="b") == ["b/s1", "b/s2", "b/s3"]
        with pytest.raises(UserError, match="named tenant"):
            await db.read(_titles, tenant="")
    finally:
        await db.close()
    counted = await _owner_sql(
        scratch.owner, "SELECT tenant, count(*) AS n FROM lovia_sessions GROUP BY tenant"
    )
    assert {r["tenant"]: r["n"] for r in counted} == {"a": 2, "b": 3, "": 2}


@pytest.mark.postgres
async def test_without_the_option_a_role_held_by_the_policies_sees_nothing(
    scratch: Scratch,
) -> None:
    db = Database(scratch.app, verify_only=True)
    try:
        assert await db.read(_titles, tenant="a") == []
        count = select(func.count()).select_from(sessions)
        assert [r[0] for r in await db.read_one(count, {}, tenant="a")] == [0]
    finally:
        await db.close()


@pytest.mark.postgres
@pytest.mark.pgbouncer
async def test_the_setting_never_reaches_another_client_through_the_pooler(
    scratch: Scratch,
) -> None:
    """PgBouncer hands server connections around at each COMMIT: a client that sets nothing,
    interleaved with one that sets "a", never sees "a"'s rows."""
    import asyncio

    url = _pooled(scratch.app, "asyncpg")
    setting = Database(url, row_level_security=True, verify_only=True)
    plain = Database(url, verify_only=True)
    try:

        async def tenant_a() -> None:
            for _ in range(30):
                assert await setting.read(_titles, tenant="a") == ["a/s1", "a/s2"]

        async def no_tenant() -> None:
            for _ in range(30):
                assert await plain.read(_titles) == []

        await asyncio.gather(tenant_a(), no_tenant(), tenant_a(), no_tenant())
    finally:
        await setting.close()
        await plain.close()


# -- the stores, as the role, with row_level_security=True ---------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("route", ROUTES[::2])
async def test_the_stores_work_under_the_policies(scratch: Scratch, route: str) -> None:
    """The three native stores, as the role held by the policies: each tenant's writes and
    reads reach its own rows, the same ids in two tenants stay two things."""
    db = Database(_app_url(scratch, route), row_level_security=True, verify_only=True)
    try:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        for tenant in ("t1", "t2"):
            await SQLSession(db, tenant=tenant).append(sid, a_run(tenant))  # type: ignore[call-arg]
            runs = SQLCheckpointer(db, tenant=tenant)  # type: ignore[call-arg]
            await runs.append("run-1", a_run(tenant), RunHead(agent_name=tenant))
            storage = SQLSessionStorage(db, tenant=tenant)  # type: ignore[call-arg]
            await storage.append(f"raw-{sid}", "q1", a_run(tenant)[0])
        for tenant in ("t1", "t2"):
            assert await SQLSession(db, tenant=tenant).load(sid) == a_run(tenant)  # type: ignore[call-arg]
            snapshot = await SQLCheckpointer(db, tenant=tenant).load("run-1")  # type: ignore[call-arg]
            assert snapshot is not None and snapshot.entries == a_run(tenant)
            view = await SQLSessionStorage(db, tenant=tenant).load(f"raw-{sid}")  # type: ignore[call-arg]
            assert len(view.raw_tail) == 1
    finally:
        await db.close()
    counted = await _owner_sql(
        scratch.owner, "SELECT tenant, count(*) AS n FROM lovia_messages GROUP BY tenant"
    )
    assert {r["tenant"]: r["n"] for r in counted} == {"t1": 5, "t2": 5}


@pytest.mark.postgres
@pytest.mark.parametrize("route", ROUTES[::2])
async def test_an_append_counts_its_shared_values_under_the_policies(
    scratch: Scratch, route: str
) -> None:
    """A session append that shares values is one statement on PostgreSQL: its counts
    go to the tenant's own ``lovia_contents`` rows, under the policies."""
    output = "the same file, read by a tool again and again\n" * 4
    db = Database(
        _app_url(scratch, route),
        row_level_security=True,
        verify_only=True,
        compression_threshold=64,
    )
    try:
        for tenant in ("t1", "t2"):
            store = SQLSession(db, tenant=tenant)  # type: ignore[call-arg]
            await store.append("s", a_run(tenant, output=output), run_id="r1")
            await store.append("s", a_run(f"{tenant}-2", output=output), run_id="r2")
            await store.append("s", a_run(tenant, output=output), run_id="r1")  # stored: no-op

        def values(conn: Connection) -> list[tuple[str, int]]:
            rows = conn.execute(select(contents.c.tenant, contents.c.refs))
            return sorted((tenant, refs) for tenant, refs in rows)

        for tenant in ("t1", "t2"):
            assert await db.read(values, tenant=tenant) == [(tenant, 2)]
            loaded = await SQLSession(db, tenant=tenant).load("s")  # type: ignore[call-arg]
            expected = a_run(tenant, output=output) + a_run(f"{tenant}-2", output=output)
            assert loaded == expected
    finally:
        await db.close()


@pytest.mark.postgres
async def test_shared_values_are_held_to_their_tenant(scratch: Scratch) -> None:
    """lovia_contents under the policies: each tenant counts and reads its own copy of a
    value both store, a transaction without a tenant sees none, and a value of another
    tenant can neither be written nor released."""
    output = '"' + "the same tool output, read again " * 8 + '"'
    document = '{"result": ' + output + "}"
    db = Database(scratch.app, row_level_security=True, verify_only=True, compression_threshold=64)
    try:

        def store(tenant: str) -> Any:
            def work(conn: Connection) -> list[str]:
                return store_documents(conn, tenant, [document] * 2, shareable=True)

            return work

        def values(conn: Connection) -> list[tuple[str, int]]:
            rows = conn.execute(select(contents.c.tenant, contents.c.refs))
            return sorted((tenant, refs) for tenant, refs in rows)

        stored = {tenant: await db.write(store(tenant), tenant=tenant) for tenant in ("t1", "t2")}
        assert all(text.startswith("\x01r") for texts in stored.values() for text in texts)
        assert await db.read(values, tenant="t1") == [("t1", 2)]
        assert await db.read(values, tenant="t2") == [("t2", 2)]
        assert await db.read(values) == []  # spans tenants: sets nothing, sees nothing

        def read(tenant: str, texts: list[str]) -> Any:
            return lambda conn: read_documents(conn, tenant, texts)

        # Read by another Database (another worker): db keeps the values it wrote in
        # memory, and the policies hold what is read from the database.
        async with Database(scratch.app, row_level_security=True, verify_only=True) as other:
            # t1's documents read in t2's transaction name values it cannot see.
            with pytest.raises(StoredValueError, match="not stored"):
                await other.read(read("t1", stored["t1"]), tenant="t2")
            assert await other.read(read("t1", stored["t1"]), tenant="t1") == [document] * 2

        def release(tenant: str) -> Any:
            return lambda conn: release_documents(conn, tenant, stored[tenant])

        assert await db.write(release("t1"), tenant="t2") == 2  # counted, but touches none
        assert await db.read(values, tenant="t1") == [("t1", 2)]
        assert await db.write(release("t1"), tenant="t1") == 2
        assert await db.read(values, tenant="t1") == []

        def forge(conn: Connection) -> None:
            conn.execute(
                insert(contents),
                {"tenant": "t2", "digest": "0" * 64, "refs": 1, "size": 1, "data": b"p1"},
            )

        with pytest.raises(Exception, match="row-level security"):
            await db.write(forge, tenant="t1")
    finally:
        await db.close()
    counted = await _owner_sql(scratch.owner, "SELECT tenant, refs FROM lovia_contents")
    assert [(r["tenant"], r["refs"]) for r in counted] == [("t2", 2)]


@pytest.mark.pgbouncer
def test_the_pooled_url_names_the_role() -> None:
    server_url("LOVIA_TEST_PGBOUNCER_URL")  # fails, not skips, under LOVIA_TEST_REQUIRE_SERVERS
    assert make_url(_pooled("postgresql://postgres@h:5432/d", "asyncpg")).username == ROLE


# -- the command line ----------------------------------------------------------------------------


@pytest.fixture
def tenants_cli(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``lovia-store`` with the ``tenants`` group registered as app.py will register it."""
    from lovia_store.cli import app

    monkeypatch.setitem(app._COMMANDS, "tenants", ".rls_command:tenants_command")
    return app.main


def test_the_command_refuses_sqlite(
    tenants_cli: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tenants_cli(["tenants", "rls", "enable", str(tmp_path / "x.db")]) == 2
    assert "row-level security is PostgreSQL's" in capsys.readouterr().err


@pytest.mark.postgres
def test_the_command_enables_shows_and_disables(
    tenants_cli: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio
    import json

    async def fresh() -> str:
        url = await create_pg_database()
        await upgrade(url)
        return url

    url = asyncio.run(fresh())
    try:
        capsys.readouterr()
        assert tenants_cli(["tenants", "rls", "enable", url, "--role", ROLE, "--json"]) == 0
        done = json.loads(capsys.readouterr().out)
        assert set(done["tables"]) == TENANT_TABLES and done["roles"] == [ROLE]
        assert tenants_cli(["tenants", "rls", "status", url, "--json"]) == 0
        states = json.loads(capsys.readouterr().out)["tables"]
        assert all((s["enabled"], s["forced"], s["policy"]) == (True, False, True) for s in states)
        assert tenants_cli(["tenants", "rls", "disable", url]) == 0
        assert f"off for {len(TENANT_TABLES)} tables" in capsys.readouterr().out
        assert tenants_cli(["tenants", "rls", "status", url]) == 0
        assert "lovia_sessions: off, no policy" in capsys.readouterr().out
    finally:
        asyncio.run(drop_pg_database(url))


@pytest.mark.postgres
async def test_lifecycle_work_is_refused_on_a_database_held_by_the_policies(
    tmp_path: Any,
) -> None:
    """It sets no tenant: held by the policies it would see nothing and say all is well."""
    from lovia_store.lifecycle import export, prune, rekey
    from lovia_store.lifecycle.stats import database_stats

    url = server_url("LOVIA_TEST_POSTGRES_URL")
    db = Database(url, row_level_security=True, verify_only=True)
    try:
        for call in (
            lambda: database_stats(db),
            lambda: export(db, tmp_path / "out.jsonl"),
            lambda: prune(db, older_than=timedelta(days=1)),
            lambda: rekey(db),
        ):
            with pytest.raises(UserError, match="owner") as refused:
                await call()
            assert "rekey" in str(refused.value)  # the message lists every one refused
    finally:
        await db.close()
