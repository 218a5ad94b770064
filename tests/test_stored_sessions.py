"""lovia's sessions over stored documents: compressed, shared once, encrypted (issue 33).

Every session operation on a Database that compresses (``compression_threshold=64``,
the minimum, so ordinary test data is compressed and its tool outputs shared) or
that also encrypts reads back exactly what an ``InMemorySession`` given the same
calls holds, and the same document texts as a ``compression=False`` store (another
tenant of the same database). ``lovia_contents`` is checked after each operation:
one row per distinct long value, ``refs`` the references that remain, nothing
once everything is cleared. On SQLite, PostgreSQL (asyncpg and psycopg) and MariaDB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event, select

from backends import Backend, _backend
from helpers import call, result, say, user
from lovia_store import (
    Database,
    InMemorySession,
    SQLSession,
    SQLSessionStorage,
    TranscriptEntry,
)
from lovia_store.db.contents import store_document
from lovia_store.db.encryption import generate_encryption_key
from lovia_store.db.tables import contents, messages, session_runs
from lovia_store.entries import MULTIPLE_ENTRIES, entries_document
from lovia_store.errors import EncryptionKeyError
from lovia_store.sessions.log import append_message

KINDS = ("sqlite", "postgres", "postgres_psycopg", "mariadb")
MODES = ("compressed", "encrypted")
NEEDLE = "SECRET-OUTPUT-7f3a"
BIG = "".join(f"{i:04d} {NEEDLE} a file read by a tool, line after line\n" for i in range(100))
OTHER = "".join(f"{i:04d} another page fetched by another tool {NEEDLE}\n" for i in range(80))
META = {"note": f"a run's meta long enough to be compressed {NEEDLE} " * 3, "n": 2**70}


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    async for value in _backend(request.param, tmp_path):
        yield value


@pytest.fixture(params=("postgres", "postgres_psycopg"))
async def pg_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    async for value in _backend(request.param, tmp_path):
        yield value


def file_bytes(path: str | None) -> bytes:
    assert path is not None
    return Path(path).read_bytes()


def options(mode: str) -> dict[str, Any]:
    if mode == "encrypted":
        return {"compression_threshold": 64, "encryption_keys": [generate_encryption_key()]}
    return {"compression_threshold": 64}


@asynccontextmanager
async def opened(backend: Backend, **kwargs: Any) -> AsyncIterator[Database]:
    assert backend.target is not None
    async with Database(backend.target, **kwargs) as db:
        yield db


async def stored_values(db: Database, tenant: str = "") -> list[int]:
    """The ``refs`` of every value ``tenant`` has in ``lovia_contents``."""

    def work(conn: Connection) -> list[int]:
        query = select(contents.c.refs).where(contents.c.tenant == tenant)
        return sorted(int(refs) for (refs,) in conn.execute(query))

    return await db.read(work)


def run_of(tag: str, output: str, *, raw: object = None) -> list[TranscriptEntry]:
    return [
        user(f"q {tag}"),
        call(f"c-{tag}"),
        result(f"c-{tag}", output, raw=raw),
        say(f"a {tag}"),
    ]


class Stores:
    """The same calls on three stores: the coded one under test, lovia-store's
    uncompressed one (another tenant of the same database) and the in-memory one."""

    def __init__(self, coded: SQLSession, plain: SQLSession) -> None:
        self.coded = coded
        self.plain = plain
        self.memory = InMemorySession()

    async def each(self, act: Callable[[Any], Any]) -> list[Any]:
        return [await act(store) for store in (self.coded, self.plain, self.memory)]

    async def same(self, session_id: str) -> None:
        """The coded store reads back what the others hold: entries, segments,
        batches, and the very document texts."""
        expected = await self.memory.load(session_id)
        assert await self.coded.load(session_id) == expected
        assert await self.plain.load(session_id) == expected
        assert await self.coded.segments(session_id) == await self.memory.segments(session_id)
        batches = [entry async for entry in self.coded.iter_entries(session_id, batch=3)]
        assert batches == expected
        texts = [_text(d) for d in await self.coded.load_documents(session_id)]
        assert texts == [_text(d) for d in await self.plain.load_documents(session_id)]


def agree(given: list[Any]) -> Any:
    """The one answer every store gave."""
    assert given.count(given[0]) == len(given), given
    return given[0]


def _text(document: str | bytes) -> str:
    return document.decode() if isinstance(document, bytes) else document


@pytest.mark.parametrize("mode", MODES)
async def test_every_operation_reads_back_what_an_uncompressed_store_holds(
    backend: Backend, mode: str
) -> None:
    async with opened(backend, **options(mode)) as db, opened(backend, compression=False) as plain:
        stores = Stores(SQLSession(db), SQLSession(plain, tenant="plain"))
        runs: list[tuple[str, list[TranscriptEntry], dict[str, Any] | None]] = [
            ("r1", run_of("1", BIG), META),
            ("r2", run_of("2", BIG, raw={"text": BIG, "pages": [OTHER]}), None),
            ("r3", [], {"empty": True}),
            ("r4", run_of("4", OTHER), {"short": 1}),
            ("r5", run_of("5", "short"), None),
            ("r6", run_of("6", BIG), None),
        ]
        for run_id, entries, meta in runs:
            await stores.each(
                lambda s, r=run_id, e=entries, m=meta: s.append("s", e, run_id=r, meta=m)
            )
        await stores.same("s")
        # Appending a stored run id again is a no-op, with the values it would share too.
        before = await stored_values(db)
        await stores.each(lambda s: s.append("s", run_of("x", OTHER), run_id="r2"))
        await stores.same("s")
        assert await stored_values(db) == before

        agree(await stores.each(lambda s: s.fork("s", "f", keep_entries=10)))
        await stores.same("f")
        await stores.same("s")
        assert agree(await stores.each(lambda s: s.trim_tool_results("s", keep_chars=100))) == 3
        await stores.same("s")
        assert await stores.each(lambda s: s.trim_tool_results("s", keep_chars=100)) == [0, 0, 0]
        agree(await stores.each(lambda s: s.rewind("s", keep_entries=7)))
        await stores.same("s")
        agree(await stores.each(lambda s: s.rewind("f", keep_entries=6)))
        await stores.same("f")
        await stores.each(lambda s: s.clear("s"))
        await stores.same("s")
        await stores.same("f")
        # The Raw Log's delete_session deletes as clear() does.
        assert await SQLSessionStorage(db).delete_session("f")
        assert await stores.coded.load("f") == []
        assert await stored_values(db) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_repeated_output_is_stored_once_and_counted(backend: Backend, mode: str) -> None:
    async with opened(backend, **options(mode)) as db:
        store = SQLSession(db)
        for i in range(5):
            await store.append("s", run_of(str(i), BIG), run_id=f"r{i}")
        assert await stored_values(db) == [5]
        await store.append("s", run_of("0", BIG), run_id="r0")  # stored already
        assert await stored_values(db) == [5]

        assert await store.fork("s", "f", keep_entries=12) == 12  # three runs' outputs
        assert await stored_values(db) == [8]
        assert await store.rewind("s", keep_entries=8) == 12  # two runs stay
        assert await stored_values(db) == [5]
        # Trimmed outputs are other values (each its own call id): BIG loses two.
        assert await store.trim_tool_results("s", keep_chars=100, keep_runs=0) == 2
        refs = await stored_values(db)
        assert sorted(refs) == [1, 1, 3]
        await store.append("t", run_of("t", BIG), run_id="t1")
        assert await stored_values(db) == [1, 1, 4]
        await store.clear("f")
        assert await stored_values(db) == [1, 1, 1]
        await store.clear("s")
        assert await stored_values(db) == [1]
        assert (await store.load("t"))[2] == result("c-t", BIG)
        await store.clear("t")
        assert await stored_values(db) == []


async def test_encrypted_rows_hold_no_output_text(backend: Backend) -> None:
    async with opened(backend, **options("encrypted")) as db:
        store = SQLSession(db)
        await store.append("s", run_of("1", BIG), run_id="r1", meta=META)
        await store.append("s", run_of("2", "short " + NEEDLE), run_id="r2", meta={"k": NEEDLE})
        await store.fork("s", "f", keep_entries=4)
        await store.trim_tool_results("s", keep_chars=200, keep_runs=1)

        def work(conn: Connection) -> list[Any]:
            rows = list(conn.execute(select(messages)))
            rows += conn.execute(select(session_runs))
            rows += conn.execute(select(contents))
            return rows

        rows = await db.read(work)
        assert len(rows) > 10
        for row in rows:
            for value in row:
                text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
                assert NEEDLE not in text
        if backend.kind == "sqlite":
            assert NEEDLE.encode() not in file_bytes(backend.target)
        assert (await store.load("f"))[2] == result("c-1", BIG)


async def test_a_wrong_or_missing_key_is_an_error_naming_the_row(backend: Backend) -> None:
    async with opened(backend, **options("encrypted")) as db:
        await SQLSession(db).append("s", run_of("1", "short"), run_id="r1", meta=META)
        await SQLSession(db).append("big", run_of("1", BIG), run_id="r1")
        (digest,) = await db.read(lambda conn: conn.execute(select(contents.c.digest)).one())
    for wrong in ({"encryption_keys": [generate_encryption_key()]}, {}):
        async with opened(backend, **wrong) as db:
            store = SQLSession(db)
            with pytest.raises(EncryptionKeyError) as load:
                await store.load("s")
            assert (load.value.table, load.value.column) == ("lovia_messages", "entry_json")
            assert load.value.row == {"session_id": "s", "index": 0}
            with pytest.raises(EncryptionKeyError) as segments:
                await store.segments("s")
            assert (segments.value.table, segments.value.row) == (
                "lovia_messages",
                {"session_id": "s", "sequence": 1},
            )
            with pytest.raises(EncryptionKeyError) as batches:
                _ = [entry async for entry in store.iter_entries("s")]
            assert batches.value.row == {"session_id": "s", "sequence": 1}
            with pytest.raises(EncryptionKeyError):
                await store.trim_tool_results("s", keep_chars=1, keep_runs=0)
            # A shared value that does not open is named by the first message that
            # names it; its own row is the cause.
            with pytest.raises(EncryptionKeyError) as shared:
                await store.load("big")
            assert (shared.value.table, shared.value.row) == (
                "lovia_messages",
                {"session_id": "big", "index": 2},
            )
            cause = shared.value.__cause__
            assert isinstance(cause, EncryptionKeyError)
            assert (cause.table, cause.row) == ("lovia_contents", {"tenant": "", "digest": digest})
            assert await store.load("other") == []


async def test_a_wrong_key_on_a_run_meta_names_the_run(backend: Backend) -> None:
    async with opened(backend, **options("encrypted")) as db:
        await SQLSession(db).append("s", [], run_id="r1", meta=META)
    async with opened(backend, encryption_keys=[generate_encryption_key()]) as db:
        with pytest.raises(EncryptionKeyError) as raised:
            await SQLSession(db).segments("s")
        assert raised.value.table == "lovia_session_runs"
        assert raised.value.row == {"session_id": "s", "run_id": "r1"}


@pytest.mark.parametrize("mode", MODES)
async def test_postgresql_appends_in_one_statement_shared_values_counted_in_it(
    pg_backend: Backend, mode: str
) -> None:
    async with opened(pg_backend, **options(mode)) as db:
        store = SQLSession(db)
        statements: list[str] = []

        def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements.append(statement)

        event.listen(db.engine.sync_engine, "before_cursor_execute", seen)
        await store.append("s", run_of("1", "short"), run_id="r1", meta=META)
        [write] = [s for s in statements if "INSERT" in s]
        assert "WITH bump AS" in write and "lovia_contents" not in write, statements

        statements.clear()
        await store.append("s", run_of("2", BIG), run_id="r2")
        [write] = statements
        assert "WITH bump AS" in write and "INSERT INTO lovia_contents" in write
        # Counted after the session's row is taken (the lock order of every writer).
        assert write.index("counted AS") > write.index("entries AS") > write.index("bump AS")
        assert await stored_values(db) == [1]
        await store.append("s", run_of("4", BIG), run_id="r4")
        assert await stored_values(db) == [2]

        # Stored run ids are no-ops (the one statement fails whole: nothing counted).
        await store.append("s", run_of("3", BIG), run_id="r2")
        await store.append("s", run_of("3", "short"), run_id="r1")
        assert await stored_values(db) == [2]
        expected = run_of("1", "short") + run_of("2", BIG) + run_of("4", BIG)
        assert await store.load("s") == expected
        event.remove(db.engine.sync_engine, "before_cursor_execute", seen)


async def test_a_value_released_after_a_one_statement_read_is_read_again(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-statement read sees no transaction: a clear committed between the rows
    and the values they name is read again, in one snapshot (here: nothing). The
    reader is a Database of its own: one that wrote or read a value keeps it in
    memory (by its digest, never stale) and needs no second read."""
    async with (
        opened(backend, **options("compressed")) as db,
        opened(backend, **options("compressed")) as reader,
    ):
        writer = SQLSession(db)
        store = SQLSession(reader)
        await writer.append("s", run_of("1", BIG), run_id="r1")
        read_one = reader.read_one

        async def then_cleared(*args: Any, **kwargs: Any) -> Any:
            rows = await read_one(*args, **kwargs)
            await writer.clear("s")
            return rows

        monkeypatch.setattr(reader, "read_one", then_cleared)
        assert await store.load("s") == []
        await writer.append("s", run_of("1", "x" + BIG), run_id="r1")
        assert [entry async for entry in store.iter_entries("s")] == []
        monkeypatch.undo()
        assert await stored_values(db) == []


async def add_row(db: Database, tenant: str, entries: list[TranscriptEntry]) -> None:
    """One Raw Log row holding ``entries`` (several: a zett-agent message), its
    document stored through the codec as the Raw Log stores it."""
    row: dict[str, Any] = {
        column.name: None
        for column in messages.columns
        if column.name not in ("tenant", "sequence", "created_at", "updated_at")
    }
    row.update(
        session_id="z",
        request_id="zett-request",
        entry_type=MULTIPLE_ENTRIES if len(entries) > 1 else entries[0].type,
    )

    def work(conn: Connection) -> None:
        document = store_document(conn, tenant, entries_document(entries), shareable=True)
        append_message(conn, tenant, "z", {**row, "entry_json": document}, create={})

    await db.write(work)


@pytest.mark.parametrize("mode", MODES)
async def test_rows_of_several_entries_release_what_a_rewind_drops(
    backend: Backend, mode: str
) -> None:
    """A zett-agent message is one row of several entries: a rewind that cuts inside
    it rewrites the row (storing it anew, releasing the old), a fork copies it."""
    async with opened(backend, **options(mode)) as db, opened(backend, compression=False) as plain:
        coded, flat = SQLSession(db), SQLSession(plain, tenant="plain")

        async def each(act: Callable[[SQLSession], Awaitable[Any]]) -> list[Any]:
            return [await act(store) for store in (coded, flat)]

        rows: list[list[TranscriptEntry]] = [
            [user("read it")],
            [say("reading"), call("c1", arguments='{"path": "a"}'), call("c2")],
            [result("c1", BIG)],
            [say("and again"), call("c3"), call("c4")],
            [result("c3", BIG)],
            [result("c4", OTHER)],
        ]
        for entries in rows:
            await add_row(db, "", entries)
            await add_row(plain, "plain", entries)
        assert await coded.load("z") == await flat.load("z")
        assert await stored_values(db) == [1, 2]
        agree(await each(lambda s: s.fork("z", "y", keep_entries=9)))  # c2 and c4 dangle
        agree(await each(lambda s: s.rewind("z", keep_entries=6)))  # inside row 4
        for session_id in ("y", "z"):
            assert await coded.load(session_id) == await flat.load(session_id)
            assert await coded.segments(session_id) == await flat.segments(session_id)
        assert await stored_values(db) == [3]  # OTHER went with z's and y's last rows
        agree(await each(lambda s: s.rewind("y", keep_entries=2)))  # inside row 2
        assert await coded.load("y") == await flat.load("y")
        assert await stored_values(db) == [1]
        await coded.clear("z")
        await coded.clear("y")
        assert await stored_values(db) == []


async def test_trim_finds_outputs_stored_shorter_than_kept(backend: Backend) -> None:
    """A document stored shared or compressed can be shorter than ``keep_chars``
    while its output is longer: trim finds it all the same."""
    async with opened(backend) as db:  # the default threshold: 2048 characters
        store, memory = SQLSession(db), InMemorySession()
        shared = "a tool output, line after line\n" * 100  # 3,100 characters: stored once
        compressed = "abc " * 375  # 1,500: not shared, but its document is compressed
        padding = ["a short string"] * 100
        for each in (store, memory):
            await each.append("s", run_of("1", shared), run_id="r1")
            await each.append("s", run_of("2", compressed, raw=padding), run_id="r2")
            await each.append("s", run_of("3", "last"), run_id="r3")

        def lengths(conn: Connection) -> list[tuple[str, int]]:
            query = select(messages.c.entry_json).where(messages.c.entry_type == "tool_result")
            return [(text[:2], len(text)) for (text,) in conn.execute(query.order_by("sequence"))]

        stored = await db.read(lengths)
        assert [flags for flags, _ in stored] == ["\x01r", "\x01z", '{"']
        assert all(length < 1000 for _, length in stored[:2])
        for each in (store, memory):
            assert await each.trim_tool_results("s", keep_chars=1000) == 2
        assert await store.load("s") == await memory.load("s")
        assert await store.segments("s") == await memory.segments("s")
        assert await stored_values(db) == []


@pytest.mark.parametrize("mode", MODES)
async def test_lovias_drop_in_reads_back_what_an_uncompressed_store_holds(
    backend: Backend, mode: str
) -> None:
    """lovia's own ``SQLSession`` (the drop-in) on a compressing or encrypting
    Database: lovia's entries and segments come back as from an uncompressed one."""
    lovia = pytest.importorskip("lovia.transcript")
    from lovia_store.integrations.lovia import SQLSession as LoviaSession

    def lovia_run(tag: str, output: str) -> list[Any]:
        return [
            lovia.InputEntry("user", f"q {tag}"),
            lovia.ToolCallEntry(f"c-{tag}", "read", '{"path": "a"}'),
            lovia.ToolResultEntry(f"c-{tag}", output, raw={"copy": output}),
            lovia.AssistantTextEntry(f"a {tag}"),
        ]

    async with opened(backend, **options(mode)) as db, opened(backend, compression=False) as plain:
        coded, flat = LoviaSession(db), LoviaSession(plain, tenant="plain")

        async def each(act: Callable[[Any], Awaitable[Any]]) -> Any:
            return agree([await act(store) for store in (coded, flat)])

        for i, output in enumerate((BIG, OTHER, BIG, "short")):
            await each(
                lambda s, i=i, o=output: s.append(
                    "s", lovia_run(str(i), o), run_id=f"r{i}", meta=META
                )
            )
        await each(lambda s: s.append("s", lovia_run("x", BIG), run_id="r1"))  # stored: no-op
        await each(lambda s: s.load("s"))
        await each(lambda s: s.segments("s"))
        assert await stored_values(db) == [2, 4]  # BIG twice per run, OTHER twice
        await each(lambda s: s.fork("s", "f", keep_entries=8))
        await each(lambda s: s.load("f"))
        assert await each(lambda s: s.trim_tool_results("s", keep_chars=50)) == 3
        await each(lambda s: s.segments("s"))
        await each(lambda s: s.rewind("f", keep_entries=4))
        await each(lambda s: s.segments("f"))
        await each(lambda s: s.clear("s"))
        await each(lambda s: s.clear("f"))
        assert await stored_values(db) == []
