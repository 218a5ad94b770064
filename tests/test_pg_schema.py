"""Our tables in a named PostgreSQL schema: ``Database(url, schema="agents")``.

Every statement is placed through ``schema_translate_map``; the gate reads the
version table and ``lovia_schema`` in that schema; a migration creates the
schema and runs with ``search_path`` set to it. Nothing of ours lands in
``public``, and two schemas in one database are two independent installs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Connection, MetaData, String, Table, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from helpers import a_run, say, user
from lovia_store import (
    Agent,
    CheckpointOptions,
    Database,
    RunHead,
    Runner,
    SchemaNotCurrentError,
    SchemaVersionError,
    ScriptedModel,
    SQLCheckpointer,
    SQLiteSession,
    SQLSession,
    SQLSessionStorage,
    ToolCallEntry,
    ToolContext,
    UserError,
    check,
    function_tool,
    upgrade,
)
from lovia_store.cli import main as cli
from lovia_store.db.schema import alembic_config, migrate
from lovia_store.db.tables import VERSION_TABLE, metadata

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
OURS = set(metadata.tables) | {VERSION_TABLE}
REVISIONS = [
    s.revision
    for s in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))
]

postgres = pytest.mark.postgres


async def on_connection(url: str, work: Callable[[Connection], T]) -> T:
    """``work`` on a plain connection of our own (no translate map, default search_path)."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(work)
    finally:
        await engine.dispose()


def _tables(schema: str | None) -> Callable[[Connection], set[str]]:
    def work(conn: Connection) -> set[str]:
        inspector = inspect(conn)
        if schema is not None and not inspector.has_schema(schema):
            return set()
        return set(inspector.get_table_names(schema=schema))

    return work


async def tables(url: str, schema: str | None = None) -> set[str]:
    return await on_connection(url, _tables(schema))


def _shape(schema: str) -> Callable[[Connection], dict[str, Any]]:
    """Our tables in ``schema``: columns and indexes, the revision, the store versions.

    Alembic keeps its (then empty) version table after a downgrade to base, so the
    version table counts through the revision it holds, not as a table.
    """

    def work(conn: Connection) -> dict[str, Any]:
        inspector = inspect(conn)
        present = set(inspector.get_table_names(schema=schema))
        names = present & OURS - {VERSION_TABLE}
        shape: dict[str, Any] = {
            name: (
                sorted(c["name"] for c in inspector.get_columns(name, schema=schema)),
                sorted(str(i["name"]) for i in inspector.get_indexes(name, schema=schema)),
            )
            for name in names
        }
        if VERSION_TABLE in present:
            revision = conn.execute(
                text(f'SELECT version_num FROM "{schema}".{VERSION_TABLE}')
            ).scalar_one_or_none()
            if revision is not None:
                shape["revision"] = revision
        if "lovia_schema" in names:
            rows = conn.execute(text(f'SELECT store, version FROM "{schema}".lovia_schema'))
            shape["versions"] = dict(sorted((str(s), int(v)) for s, v in rows))
        return shape

    return work


async def use_all_three(db: Database, tag: str) -> None:
    """Write through every store on ``db``."""
    await SQLSession(db).append("s-1", a_run(tag), run_id=f"run-{tag}")
    storage = SQLSessionStorage(db)
    await storage.create_session(session_id=f"raw-{tag}", title=tag)
    await storage.append(f"raw-{tag}", "req-1", user(f"hello {tag}"))
    await SQLCheckpointer(db).append(f"cp-{tag}", [say(tag)], RunHead(agent_name="a"))


def lovia_alembic(url: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [str(BIN / "alembic"), "-x", f"url={url}", "-x", f"schema={schema}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, f"{args}:\n{completed.stdout}\n{completed.stderr}"
    return completed


# -- PostgreSQL -------------------------------------------------------------------------


@postgres
async def test_every_store_works_in_a_named_schema_and_nothing_lands_in_public(
    pg_url: str,
) -> None:
    async with Database(pg_url, schema="agents") as db:
        await use_all_three(db, "one")
        assert [s.run_id for s in await SQLSession(db).segments("s-1")] == ["run-one"]
        assert await SQLSessionStorage(db).count_messages("raw-one") == 1
        snapshot = await SQLCheckpointer(db).load("cp-one")
        assert snapshot is not None and snapshot.entries == [say("one")]
        assert repr(db).endswith("schema='agents')")

    assert await tables(pg_url, "agents") == OURS
    assert await tables(pg_url) == set()  # public holds nothing of ours
    shape = await on_connection(pg_url, _shape("agents"))
    assert shape["revision"] == REVISIONS[-1]

    # A second process (a new Database) finds the install current and reads it.
    async with Database(pg_url, schema="agents", verify_only=True) as db:
        assert len(await SQLSession(db).load("s-1")) == 4


@postgres
async def test_two_schemas_in_one_database_are_independent(pg_url: str) -> None:
    agents = Database(pg_url, schema="agents")
    other = Database(pg_url, schema="other")
    public = Database(pg_url)
    try:
        await asyncio.gather(
            use_all_three(agents, "a"), use_all_three(other, "b"), use_all_three(public, "c")
        )
        for db, tag in ((agents, "a"), (other, "b"), (public, "c")):
            segments = await SQLSession(db).segments("s-1")
            assert [s.run_id for s in segments] == [f"run-{tag}"]
            listed = await SQLSessionStorage(db).list_sessions()
            assert {s.session_id for s in listed} == {"s-1", f"raw-{tag}"}
            assert [r.run_id for r in await SQLCheckpointer(db).list_runs()] == [f"cp-{tag}"]
        # Trim and rewind (prepared statements, compiled per schema) stay in theirs.
        long = a_run("long", output="x" * 500)
        await SQLSession(agents).append("s-1", long, run_id="run-long")
        assert await SQLSession(agents).trim_tool_results("s-1", keep_chars=10, keep_runs=0) == 1
        assert await SQLSession(agents).rewind("s-1", keep_entries=2) == 7
        assert len(await SQLSession(agents).load("s-1")) == 1  # the dangling call went too
        assert await SQLSession(other).load("s-1") == a_run("b")
        await SQLSession(agents).clear("s-1")
        assert await SQLSession(agents).load("s-1") == []
        assert len(await SQLSession(other).load("s-1")) == 4
        assert len(await SQLSession(public).load("s-1")) == 4
    finally:
        for db in (agents, other, public):
            await db.close()
    for schema in ("agents", "other", None):
        assert await tables(pg_url, schema) == OURS


@postgres
async def test_concurrent_first_uses_create_the_schema_once(pg_url: str) -> None:
    databases = [Database(pg_url, schema="agents") for _ in range(4)]
    try:
        await asyncio.gather(
            *(
                SQLSession(db).append(f"s-{i}", a_run(str(i)), run_id=f"r-{i}")
                for i, db in enumerate(databases)
            )
        )
        counts = [len(await SQLSession(databases[0]).load(f"s-{i}")) for i in range(4)]
        assert counts == [4, 4, 4, 4]
    finally:
        for db in databases:
            await db.close()
    assert await tables(pg_url, "agents") == OURS


@postgres
async def test_the_gate_reads_the_named_schema_and_refuses_a_newer_one(pg_url: str) -> None:
    await upgrade(pg_url, schema="agents")
    await upgrade(pg_url)  # an install in public too: it must not be confused with it

    def newer(conn: Connection) -> None:
        conn.execute(text("UPDATE agents.lovia_schema SET version = 99 WHERE store = 'session'"))

    await on_connection(pg_url, newer)
    async with Database(pg_url, schema="agents") as db:
        with pytest.raises(SchemaVersionError, match="upgrade lovia"):
            await SQLSession(db).load("s-1")
    with pytest.raises(SchemaVersionError):
        await upgrade(pg_url, schema="agents")
    with pytest.raises(SchemaVersionError):
        await check(pg_url, schema="agents")
    # The public install and another schema are unaffected.
    await check(pg_url)
    async with Database(pg_url, schema="other") as db:
        await use_all_three(db, "x")

    def unknown_revision(conn: Connection) -> None:
        conn.execute(text("UPDATE agents.lovia_schema SET version = 1 WHERE store = 'session'"))
        conn.execute(text(f"UPDATE agents.{VERSION_TABLE} SET version_num = '9999'"))

    await on_connection(pg_url, unknown_revision)
    with pytest.raises(SchemaVersionError, match="9999"):
        await check(pg_url, schema="agents")
    await check(pg_url)


@postgres
async def test_verify_only_never_creates_the_schema(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SchemaNotCurrentError):
        await check(pg_url, schema="agents")
    async with Database(pg_url, schema="agents", verify_only=True) as db:
        with pytest.raises(SchemaNotCurrentError):
            await SQLSession(db).load("s-1")
    assert await tables(pg_url, "agents") == set()
    assert not await on_connection(pg_url, lambda c: inspect(c).has_schema("agents"))

    # The command line: --schema on check and upgrade.
    assert await asyncio.to_thread(cli, ["check", "--schema", "agents", pg_url]) == 1
    assert await asyncio.to_thread(cli, ["upgrade", "--schema", "agents", pg_url]) == 0
    assert await asyncio.to_thread(cli, ["check", "--schema", "agents", pg_url]) == 0
    assert await asyncio.to_thread(cli, ["check", pg_url]) == 1  # public is still empty
    assert await tables(pg_url) == set()
    async with Database(pg_url, schema="agents") as db:
        await SQLSession(db).append("s-1", a_run("one"), run_id="run-1")
    assert await asyncio.to_thread(cli, ["sessions", "--schema", "agents", pg_url]) == 0
    assert "s-1" in capsys.readouterr().out


@postgres
async def test_an_existing_schema_is_used_as_it_is(pg_url: str) -> None:
    """A DBA may create the schema beforehand; our migration only fills it."""

    def prepare(conn: Connection) -> None:
        conn.execute(text('CREATE SCHEMA "Agent Store"'))
        conn.execute(text('CREATE TABLE "Agent Store".host_notes (id integer primary key)'))

    await on_connection(pg_url, prepare)
    async with Database(pg_url, schema="Agent Store") as db:
        await use_all_three(db, "q")
    assert await tables(pg_url, "Agent Store") == OURS | {"host_notes"}
    assert await tables(pg_url) == set()


@postgres
async def test_a_callers_engine_placed_in_a_schema_stays_unplaced(pg_url: str) -> None:
    engine = create_async_engine(pg_url)
    try:
        async with Database(engine, schema="agents") as db:
            await use_all_three(db, "e")
        async with engine.connect() as conn:  # still open, and still the caller's default
            assert (await conn.execute(text("SELECT current_schema()"))).scalar_one() == "public"
            count = await conn.execute(text("SELECT COUNT(*) FROM agents.lovia_messages"))
            assert count.scalar_one() == 5
        assert await tables(pg_url) == set()
        with pytest.raises(UserError, match="differs"):
            await upgrade(Database(engine, schema="agents"), schema="other")
    finally:
        await engine.dispose()


@postgres
@pytest.mark.slow  # the default tier downgrades one step at a time on SQLite (test_host_app.py)
async def test_our_revisions_downgrade_one_step_at_a_time_in_a_schema(pg_url: str) -> None:
    await upgrade(pg_url)  # a public install at head must stay untouched throughout
    async with SQLSession(pg_url) as session:
        await session.append("public-1", a_run("p"), run_id="run-p")
    public = await on_connection(pg_url, _shape("public"))

    seen = {None: await on_connection(pg_url, _shape("agents"))}
    async with Database(pg_url, schema="agents") as db:
        for revision in REVISIONS:
            await migrate(db, revision)
            seen[revision] = await on_connection(pg_url, _shape("agents"))
        await SQLSession(db).append("s-1", a_run("one"), run_id="run-1")
    assert seen[REVISIONS[-1]]["revision"] == REVISIONS[-1]
    assert "No new upgrade operations detected" in lovia_alembic(pg_url, "agents", "check").stdout

    for expected in [*reversed(REVISIONS[:-1]), None]:
        lovia_alembic(pg_url, "agents", "downgrade", "-1")
        now = await on_connection(pg_url, _shape("agents"))
        assert now == seen[expected], expected
        assert await on_connection(pg_url, _shape("public")) == public
    assert await tables(pg_url, "agents") == {VERSION_TABLE}

    lovia_alembic(pg_url, "agents", "upgrade", "head")
    assert await on_connection(pg_url, _shape("agents")) == seen[REVISIONS[-1]]
    assert await on_connection(pg_url, _shape("public")) == public
    async with SQLSession(pg_url) as session:
        assert len(await session.load("public-1")) == 4


@postgres
async def test_a_tools_transaction_reaches_the_host_tables(pg_url: str) -> None:
    """``ctx.transaction`` runs on our connection but without our schema placement: a
    host table is found whether it names its schema or relies on the search path."""

    def host_table(conn: Connection) -> None:
        conn.execute(text("CREATE TABLE public.payments (call_id varchar(255) primary key)"))

    await on_connection(pg_url, host_table)
    named = Table("payments", MetaData(), Column("call_id", String(255)), schema="public")
    bare = Table("payments", MetaData(), Column("call_id", String(255)))

    def pay_with(table: Table, name: str) -> Any:
        @function_tool(name=name)
        async def pay(ctx: ToolContext) -> str:
            def work(conn: Connection) -> str:
                conn.execute(table.insert().values(call_id=ctx.call_id))
                return "paid"

            return str(await ctx.transaction(work))

        return pay

    async with Database(pg_url, schema="agents") as db:
        tools = [pay_with(named, "pay_named"), pay_with(bare, "pay_bare")]
        calls = [
            ToolCallEntry(call_id="c-named", name="pay_named", arguments="{}"),
            ToolCallEntry(call_id="c-bare", name="pay_bare", arguments="{}"),
        ]
        model = ScriptedModel([calls, [say("done")]])
        result = await Runner.run(
            Agent("a", model, tools=tools),
            "go",
            checkpoint=CheckpointOptions(SQLCheckpointer(db), "pay-run"),
        )
    outputs = {e.call_id: e for e in result.entries if e.type == "tool_result"}
    assert all(e.output == "paid" and not e.is_error for e in outputs.values())

    def paid(conn: Connection) -> list[str]:
        return list(conn.execute(text("SELECT call_id FROM public.payments")).scalars())

    assert sorted(await on_connection(pg_url, paid)) == ["c-bare", "c-named"]


# -- elsewhere ----------------------------------------------------------------------------


async def test_schema_is_refused_where_it_has_no_meaning(tmp_path: Path) -> None:
    """SQLite has one namespace per file; on MySQL/MariaDB a schema is the URL's database."""
    with pytest.raises(UserError, match="only to PostgreSQL"):
        Database(tmp_path / "a.sqlite3", schema="agents")
    with pytest.raises(UserError, match="only to PostgreSQL"):
        Database(":memory:", schema="agents")
    with pytest.raises(UserError, match=r"a schema is a database.*mysql\+asyncmy://host/agents"):
        Database("mysql://root@127.0.0.1/test", schema="agents")
    with pytest.raises(UserError, match="non-empty"):
        Database("postgresql://postgres@127.0.0.1/test", schema="")
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'b.sqlite3'}")
    try:
        with pytest.raises(UserError, match="only to PostgreSQL"):
            Database(engine, schema="agents")
    finally:
        await engine.dispose()
    with pytest.raises(UserError):
        await upgrade(tmp_path / "c.sqlite3", schema="agents")
    assert (
        await asyncio.to_thread(cli, ["upgrade", "--schema", "agents", str(tmp_path / "d.sqlite3")])
        == 2  # a usage error (docs/cli.md)
    )
    assert not (tmp_path / "c.sqlite3").exists() and not (tmp_path / "d.sqlite3").exists()
    async with SQLiteSession(tmp_path / "e.sqlite3") as session:  # no schema: unaffected
        await session.append("s", a_run("x"), run_id="r")


# -- export, import and copy --------------------------------------------------------------


async def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(cli, list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def loads(url: str, schema: str, *session_ids: str) -> list[Any]:
    async with Database(url, schema=schema, verify_only=True) as db:
        session = SQLSession(db)
        return [await session.load(s) for s in session_ids]


@postgres
async def test_export_import_and_copy_take_the_schema_of_each_database(
    pg_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``export`` and ``import`` take ``--schema`` (and ``$LOVIA_STORE_SCHEMA``) as the
    other commands do; ``copy`` takes one for each side, and reads no variable."""
    monkeypatch.delenv("LOVIA_STORE_SCHEMA", raising=False)
    async with Database(pg_url, schema="tenant") as db:
        for name in ("alice", "bob"):
            await SQLSession(db).append(name, a_run(f"hi {name}"), run_id=f"r-{name}")
    expected = await loads(pg_url, "tenant", "alice", "bob")
    assert all(expected)
    # Without it, the default schema is read: it holds no lovia-store tables (exit 1).
    code, _, err = await run_cli(capsys, "export", pg_url, "-o", str(tmp_path / "none.jsonl"))
    assert code == 1 and "upgrade" in err

    exported = tmp_path / "tenant.jsonl"
    code, out, _ = await run_cli(
        capsys, "export", pg_url, "--schema", "tenant", "-o", str(exported)
    )
    assert code == 0 and "2 session" in out
    code, out, _ = await run_cli(capsys, "import", str(exported), pg_url, "--schema", "imported")
    assert code == 0 and "inserted 2 session" in out
    assert await loads(pg_url, "imported", "alice", "bob") == expected
    assert await pg_tables(pg_url, "public") == set()  # nothing in the default schema

    monkeypatch.setenv("LOVIA_STORE_SCHEMA", "tenant")
    code, out, _ = await run_cli(capsys, "export", pg_url, "-o", str(tmp_path / "env.jsonl"))
    assert code == 0 and "2 session" in out
    code, out, _ = await run_cli(
        capsys, "import", str(exported), pg_url, "--schema", "imported", "--dry-run"
    )
    assert code == 0 and "would insert nothing" in out  # the option wins over the variable
    # copy reads no variable: both sides are the default schema, which has no tables.
    code, _, err = await run_cli(capsys, "copy", pg_url, pg_url)
    assert code == 1 and "upgrade" in err

    # Between two schemas of one database, and from a SQLite file into a schema.
    code, out, _ = await run_cli(
        capsys,
        "copy",
        pg_url,
        pg_url,
        "--source-schema",
        "tenant",
        "--destination-schema",
        "copied",
        "--json",
    )
    report = json.loads(out)
    assert code == 0 and report["status"] == "ok" and report["inserted"]["session"] == 2
    assert await loads(pg_url, "copied", "alice", "bob") == expected
    path = tmp_path / "store.sqlite3"
    async with SQLiteSession(path) as session:
        await session.append("carol", a_run("hi carol"), run_id="r-carol")
    code, out, _ = await run_cli(
        capsys, "copy", str(path), pg_url, "--destination-schema", "from_file"
    )
    assert code == 0 and "every session equal on both sides" in out
    assert (await loads(pg_url, "from_file", "carol"))[0] == a_run("hi carol")
    for schema in ("tenant", "imported", "copied", "from_file"):
        assert await pg_tables(pg_url, schema) == OURS, schema
    assert await pg_tables(pg_url, "public") == set()  # nothing landed in the default one


async def pg_tables(url: str, schema: str) -> set[str]:
    async with Database(url) as db:
        return await db.read_unchecked(
            lambda conn: set(inspect(conn).get_table_names(schema=schema)) & OURS
        )


async def test_schema_options_are_refused_where_they_have_no_meaning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On SQLite, and on MySQL/MariaDB (where a schema is the URL's database), each is a
    usage error naming why, before anything is opened or created."""
    source = tmp_path / "source.sqlite3"
    async with SQLiteSession(source) as session:
        await session.append("s", a_run("x"), run_id="r")
    exported = tmp_path / "out.jsonl"
    new = tmp_path / "new.sqlite3"
    mysql = "mysql+asyncmy://root@127.0.0.1:1/test"
    for args, said in (
        (["export", str(source), "--schema", "a", "-o", str(exported)], "only to PostgreSQL"),
        (["import", str(exported), str(new), "--schema", "a"], "only to PostgreSQL"),
        (["import", str(exported), mysql, "--schema", "a"], "a schema is a database"),
        (["copy", str(source), str(new), "--source-schema", "a"], "only to PostgreSQL"),
        (["copy", str(source), str(new), "--destination-schema", "a"], "only to PostgreSQL"),
        (["copy", str(source), mysql, "--destination-schema", "a"], "a schema is a database"),
        (["copy", str(source), str(new), "--destination-schema", ""], "non-empty"),
    ):
        if args[0] == "import":
            exported.write_text("")
        code, out, err = await run_cli(capsys, *args, "--json")
        assert code == 2, (args, err)
        assert said in err and json.loads(out)["error"] == "UserError", args
    assert not new.exists() and exported.read_text() == ""
