"""SQL tracing sees every statement lovia-store runs, on every backend.

Listeners are attached to the engine a store uses (``Database.engine``, its
``sync_engine`` for a server) as a host or OpenTelemetry's SQLAlchemy
instrumentation would attach them, and each store operation's statements are
checked: every data statement reaches ``before_cursor_execute`` and
``after_cursor_execute``, and so does the transaction around it. On SQLite,
lovia-store issues BEGIN (or BEGIN IMMEDIATE) and COMMIT itself, as statements;
SQLite's own trace callback proves no statement ran without the listeners
seeing it. On a server the driver issues BEGIN and COMMIT, and the engine's
``begin`` and ``commit`` events frame each operation's statements.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from backends import SQL_KINDS, SQLITE_KINDS, fresh_server_database
from helpers import a_run, call, result, say, user
from lovia_store import Database, RunHead, SQLCheckpointer, SQLSession
from lovia_store.db.prepared import DRIVER_CURSOR, traced


@dataclass
class Event:
    kind: str  # before, after, error, begin, commit, rollback, driver (SQLite's own trace)
    sql: str = ""


@dataclass
class Recorder:
    """What the engine's listeners (and, on SQLite, the driver's trace) saw, per thread:
    statements of one transaction run on one thread."""

    engine: Engine
    sqlite: bool
    lock: threading.Lock = field(default_factory=threading.Lock)
    timelines: dict[int, list[Event]] = field(default_factory=dict)

    def note(self, kind: str, sql: str = "") -> None:
        with self.lock:
            self.timelines.setdefault(threading.get_ident(), []).append(Event(kind, sql))

    def attach(self) -> None:
        event.listen(self.engine, "before_cursor_execute", self._before)
        event.listen(self.engine, "after_cursor_execute", self._after)
        event.listen(self.engine, "handle_error", self._error)
        for kind in ("begin", "commit", "rollback"):
            event.listen(self.engine, kind, self._transaction(kind))
        if self.sqlite:
            # Every statement SQLite itself runs on a connection opened from now on (a
            # connection's own pragmas run before this listener: they are its setup).
            event.listen(self.engine, "connect", self._trace_driver)

    def detach(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)

    def _before(self, _conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        self.note("before", sql)

    def _after(self, _conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        self.note("after", sql)

    def _error(self, context: Any) -> None:  # a statement the driver refused: no "after"
        self.note("error", context.statement or "")

    def _transaction(self, kind: str) -> Callable[..., None]:
        def listener(*_: Any) -> None:
            self.note(kind)

        return listener

    def _trace_driver(self, dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(lambda sql: self.note("driver", sql))

    def clear(self) -> None:
        with self.lock:
            self.timelines.clear()

    def transactions(self) -> list[list[str]]:
        """The statements the listeners saw, one list per transaction (begin event to
        commit or rollback event, which ends the list as ``"<commit>"`` or
        ``"<rollback>"``), after checking each statement's before/after pair and, on SQLite,
        that every statement the driver ran was inside one of them."""
        found: list[list[str]] = []
        with self.lock:
            timelines = [list(events) for events in self.timelines.values()]
        for events in timelines:
            current: list[str] | None = None
            running: str | None = None
            for seen in events:
                if seen.kind == "begin":
                    assert current is None and running is None, events
                    current = []
                elif seen.kind in ("commit", "rollback"):
                    assert current is not None and running is None, events
                    found.append([*current, f"<{seen.kind}>"])
                    current = None
                elif seen.kind == "before":
                    assert running is None, events
                    assert current is not None, f"a statement outside a transaction: {seen.sql}"
                    running = seen.sql
                    current.append(seen.sql)
                elif seen.kind in ("after", "error"):
                    assert running == seen.sql, events
                    running = None
                else:  # what SQLite ran: inside a statement the listeners saw, and that one
                    assert running is not None, f"SQLite ran {seen.sql!r} unseen by listeners"
                    if not seen.sql.startswith("--"):  # a trigger's program is its statement's
                        assert seen.sql.startswith(running.split("?", 1)[0].rstrip()), (
                            seen.sql,
                            running,
                        )
            assert current is None and running is None, events
        return found


def sync_engine(db: Database) -> Engine:
    """The engine to attach listeners to: ``Database.sync_engine`` (a server's
    ``AsyncEngine`` has its synchronous core underneath)."""
    engine = db.sync_engine
    assert isinstance(engine, Engine)
    expected = db.engine.sync_engine if isinstance(db.engine, AsyncEngine) else db.engine
    assert engine is expected
    return engine


@contextlib.asynccontextmanager
async def database(kind: str, tmp_path: Path) -> AsyncIterator[Database]:
    if kind in SQLITE_KINDS:
        async with Database(tmp_path / "traced.sqlite3", wal=kind == "sqlite_wal") as db:
            yield db
        return
    async with fresh_server_database("mariadb" if kind == "mariadb" else "postgres") as url:
        if kind == "postgres_psycopg":
            url = make_url(url).set(drivername="postgresql+psycopg").render_as_string(False)
        async with Database(url) as db:
            yield db


def tool_run(tag: str) -> list[Any]:
    return [user(f"q{tag}"), call(f"c{tag}"), result(f"c{tag}", "x" * 300), say(f"a{tag}")]


Operation = tuple[str, Callable[[], Awaitable[object]], tuple[str, ...]]


def operations(db: Database) -> list[Operation]:
    """Each store operation, and a piece of SQL each of its statements' lists must hold."""
    session = SQLSession(db)
    checkpointer = SQLCheckpointer(db)
    head = RunHead(agent_name="agent")
    leases: list[Any] = []

    async def acquire() -> object:
        leases.append(await checkpointer.acquire_lease("run-1", ttl=30))
        return leases[-1]

    async def renew() -> object:
        leases.append(await checkpointer.renew_lease(leases[-1]))
        return leases[-1]

    async def release() -> object:
        await checkpointer.release_lease(leases[-1])
        return None

    return [
        ("append", lambda: session.append("s", tool_run("1"), run_id="r1"), ("lovia_messages",)),
        ("append again", lambda: session.append("s", tool_run("2"), run_id="r2"), ()),
        ("replay append", lambda: session.append("s", tool_run("1"), run_id="r1"), ()),
        ("load", lambda: session.load("s"), ("lovia_messages",)),
        ("segments", lambda: session.segments("s"), ("lovia_session_runs",)),
        (
            "trim",
            lambda: session.trim_tool_results("s", keep_chars=10, keep_runs=0),
            ("UPDATE lovia_messages",),
        ),
        ("rewind", lambda: session.rewind("s", keep_entries=4), ("DELETE FROM lovia_messages",)),
        ("clear", lambda: session.clear("s"), ("DELETE FROM lovia_",)),
        ("lease", acquire, ("lovia_run_leases",)),
        ("renew lease", renew, ("lovia_run_leases",)),
        (
            "checkpoint save",
            lambda: checkpointer.append("run-1", a_run("c"), head),
            ("lovia_run_entries", "lovia_run_heads"),
        ),
        ("checkpoint save head", lambda: checkpointer.append("run-1", [], head), ()),
        ("checkpoint load", lambda: checkpointer.load("run-1"), ("lovia_run_entries",)),
        ("list runs", lambda: checkpointer.list_runs(), ("lovia_run_heads",)),
        ("intent", lambda: checkpointer.record_intent("run-1", "c1", "tool"), ("effects",)),
        ("effects", lambda: checkpointer.tool_effects("run-1"), ("lovia_tool_effects",)),
        ("release lease", release, ("lovia_run_leases",)),
        ("checkpoint delete", lambda: checkpointer.delete("run-1"), ("DELETE FROM lovia_run",)),
    ]


def check_operation(
    name: str, transactions: list[list[str]], wanted: tuple[str, ...], *, sqlite: bool
) -> None:
    assert transactions, f"{name}: no transaction seen"
    statements = [sql for statements in transactions for sql in statements]
    for piece in wanted:
        assert any(piece in sql for sql in statements), (name, piece, statements)
    for *statements, ended in transactions:
        if sqlite:  # our own BEGIN and COMMIT (or ROLLBACK), as statements listeners saw
            assert statements[0] in ("BEGIN", "BEGIN IMMEDIATE"), (name, statements)
            assert statements[-1] == ended.strip("<>").upper(), (name, statements, ended)
            assert len(statements) >= 3, (name, statements)  # data between them
        else:  # the driver's BEGIN and COMMIT are the begin and commit events around them
            assert statements, (name, statements)
            assert not {"BEGIN", "COMMIT", "ROLLBACK"} & set(statements), statements


@pytest.mark.parametrize("kind", SQL_KINDS)
async def test_every_operation_is_seen_by_the_engines_listeners(kind: str, tmp_path: Path) -> None:
    async with database(kind, tmp_path) as db:
        recorder = Recorder(sync_engine(db), sqlite=db.is_sqlite)
        recorder.attach()
        await SQLSession(db).load("warm-up")  # the schema check and migration, also traced
        first = recorder.transactions()
        assert any("lovia_schema" in sql for statements in first for sql in statements)
        for name, operation, wanted in operations(db):
            recorder.clear()
            await operation()
            check_operation(name, recorder.transactions(), wanted, sqlite=db.is_sqlite)


async def test_a_group_commit_is_seen_whole(tmp_path: Path) -> None:
    """Writes queued together on SQLite share one BEGIN IMMEDIATE ... COMMIT, a savepoint
    each: all of it reaches the listeners, and SQLite ran nothing else."""
    import asyncio

    async with Database(tmp_path / "group.sqlite3") as db:
        recorder = Recorder(sync_engine(db), sqlite=True)
        recorder.attach()
        store = SQLSession(db)
        await store.load("warm-up")
        recorder.clear()
        await asyncio.gather(*(store.append(f"s{i}", a_run(str(i)), run_id="r") for i in range(8)))
        transactions = recorder.transactions()
        assert sum(len(s) for s in transactions) > 8
        grouped = [s for s in transactions if any(sql.startswith("SAVEPOINT") for sql in s)]
        assert grouped, transactions  # the writer thread was busy at least once
        for *statements, ended in transactions:
            assert ended == "<commit>"
            assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"


async def test_the_fast_path_returns_when_nothing_listens(tmp_path: Path) -> None:
    """Without a cursor listener, SQLite's statements run on the driver's cursor again:
    tracing costs nothing until someone traces. A listener attached to a store already
    running sees its next statement."""
    async with Database(tmp_path / "fast.sqlite3") as db:
        engine = sync_engine(db)
        assert engine.get_execution_options()[DRIVER_CURSOR] is True
        store = SQLSession(db)
        await store.append("s", a_run("0"), run_id="r0")
        with engine.connect() as conn:
            assert not traced(conn)
            seen: list[str] = []

            def listener(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
                seen.append(sql)

            event.listen(engine, "after_cursor_execute", listener)
            assert traced(conn)
            await store.append("s", a_run("1"), run_id="r1")
            assert seen[0] == "BEGIN IMMEDIATE" and seen[-1] == "COMMIT", seen
            assert any("INSERT INTO lovia_messages" in sql for sql in seen)
            event.remove(engine, "after_cursor_execute", listener)
            assert not traced(conn)
            seen.clear()
            await store.append("s", a_run("2"), run_id="r2")
            assert seen == []
        assert len(await store.load("s")) == 3 * len(a_run("0"))


async def test_a_handle_error_listener_sees_a_refused_statement(tmp_path: Path) -> None:
    """``handle_error`` alone (a dialect event, which sets no engine flag) also takes the
    statements off the driver's cursor: the listener sees the one SQLite refused."""
    from sqlalchemy import Connection, bindparam

    from lovia_store import ConflictError
    from lovia_store.db.prepared import Prepared
    from lovia_store.db.tables import schema_versions

    insert = Prepared(
        schema_versions.insert().values(store=bindparam("store"), version=bindparam("version"))
    )
    async with Database(tmp_path / "errors.sqlite3") as db:
        await SQLSession(db).load("warm-up")
        refused: list[str] = []
        event.listen(db.sync_engine, "handle_error", lambda ctx: refused.append(ctx.statement))

        def duplicate(conn: Connection) -> None:
            insert.execute(conn, {"store": "twice", "version": 1})
            insert.execute(conn, {"store": "twice", "version": 1})

        with pytest.raises(ConflictError):
            await db.write(duplicate)
        assert len(refused) == 1 and refused[0].startswith("INSERT INTO lovia_schema"), refused


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_callers_engine_is_traced_too(kind: str, tmp_path: Path) -> None:
    """A host passes its own ``AsyncEngine``: its listeners see our statements, and its
    driver's transactions are the begin and commit events around them."""
    async with contextlib.AsyncExitStack() as stack:
        if kind == "sqlite":
            url = f"sqlite+aiosqlite:///{tmp_path / 'host.sqlite3'}"
        else:
            url = await stack.enter_async_context(fresh_server_database("postgres"))
        engine = create_async_engine(url)
        stack.push_async_callback(engine.dispose)
        db = await stack.enter_async_context(Database(engine))
        assert db.sync_engine is engine.sync_engine
        recorder = Recorder(engine.sync_engine, sqlite=False)
        recorder.attach()
        store = SQLSession(db)
        await store.load("warm-up")
        for name, operation, wanted in operations(db)[:8]:
            recorder.clear()
            await operation()
            check_operation(name, recorder.transactions(), wanted, sqlite=False)


# -- OpenTelemetry's SQLAlchemy instrumentation ------------------------------------------------


@contextlib.contextmanager
def instrumented(engine: Engine) -> Iterator[Any]:
    """OpenTelemetry's instrumentation on ``engine``, spans kept in memory."""
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = SQLAlchemyInstrumentor()
    # The instrumentation declares sqlalchemy < 2.1; its listeners work on 2.1 (this test).
    instrumentor.instrument(engine=engine, tracer_provider=provider, skip_dep_check=True)
    exporter.provider = provider  # type: ignore[attr-defined]  # for the test's own spans
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()


def statements_of(exporter: Any) -> list[str]:
    """The statements of the spans recorded (a checkout's ``connect`` span has none)."""
    spans = exporter.get_finished_spans()
    return [
        str(span.attributes["db.statement"]) for span in spans if "db.statement" in span.attributes
    ]


@pytest.mark.parametrize("kind", SQL_KINDS)
async def test_opentelemetry_records_a_span_per_statement(kind: str, tmp_path: Path) -> None:
    """``SQLAlchemyInstrumentor().instrument(engine=db.sync_engine)`` records a span for
    each of an append's and a checkpoint step's statements, BEGIN and COMMIT included
    where lovia-store issues them (SQLite)."""
    async with database(kind, tmp_path) as db:
        session = SQLSession(db)
        checkpointer = SQLCheckpointer(db)
        await session.load("warm-up")
        with instrumented(db.sync_engine) as exporter:
            await session.append("s", tool_run("1"), run_id="r1")
            appended = statements_of(exporter)
            exporter.clear()
            await checkpointer.append("run-1", a_run("c"), RunHead(agent_name="agent"))
            checkpointed = statements_of(exporter)
            exporter.clear()
            await session.load("s")
            loaded = statements_of(exporter)
            # The caller's open span is each statement span's parent, on SQLite too
            # (where statements run in the writer thread, in the caller's context).
            exporter.clear()
            tracer = exporter.provider.get_tracer("test")
            with tracer.start_as_current_span("caller") as caller:
                await session.append("s", a_run("p"), run_id="rp")
                await session.load("s")
            children = [s for s in exporter.get_finished_spans() if s.name != "caller"]
        statements = [s for s in children if "db.statement" in s.attributes]
        assert len(statements) >= 2, children  # PostgreSQL: one statement each
        for span in children:
            assert span.parent is not None, span.name
            assert span.parent.span_id == caller.get_span_context().span_id, span.name
        assert any("INSERT INTO lovia_messages" in sql for sql in appended), appended
        assert any("lovia_run_entries" in sql for sql in checkpointed), checkpointed
        assert any("lovia_messages" in sql for sql in loaded), loaded
        if db.is_sqlite:
            for statements in (appended, checkpointed):
                assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
            assert loaded[0] == "BEGIN" and loaded[-1] == "COMMIT"
        spans = exporter.get_finished_spans()
        assert all(span.attributes.get("db.system") for span in spans if span.name != "caller")
        # Uninstrumented again: the next append adds no span.
        exporter.clear()
        await session.append("s", a_run("2"), run_id="r2")
        assert statements_of(exporter) == []
