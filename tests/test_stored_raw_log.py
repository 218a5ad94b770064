"""The Raw Log's documents as stored (issue 33): compressed, shared once, encrypted.

Every Raw Log operation (appends with and without an idempotency key and its
re-issue, sessions, pages, the view, the sync view, snapshots and their conflict,
metadata, tags, zett's envelopes, delete_session) reads back exactly as it does on a
Database with ``compression=False``, on a Database that compresses (at the lowest
threshold, 64 characters, so ordinary test data is compressed and shared) and on one
that encrypts. A tool output repeated in N messages is one ``lovia_contents`` row
counting N references, released by ``delete_session`` (nothing is left after). With
keys, no stored column holds plaintext (on SQLite, nor does the file), and a wrong
or missing key is an ``EncryptionKeyError`` naming the row. zett-agent's drop-in
(its storages and its own ``Agent``) round-trips through the same codec. On SQLite,
PostgreSQL and MariaDB.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, select, update
from zett_agent.agent import Agent, AgentRunConfig
from zett_agent.extensions.compaction import CompactedMessage as ZettCompacted
from zett_agent.extensions.events import MessageTiming as ZettTiming
from zett_agent.extensions.sql import SQLSessionExtension
from zett_agent.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from zett_agent.model import ModelUsage
from zett_agent.tools.base import tool

from backends import _backend
from helpers import call, result, say, user
from lovia_store import (
    CompactedMessage,
    Database,
    MessageTiming,
    SnapshotConflictError,
    SQLiteSessionStorage,
    SQLSessionStorage,
    StoredValueError,
    Usage,
)
from lovia_store.db.encryption import EncryptionKey, generate_encryption_key
from lovia_store.db.tables import contents, messages, snapshots
from lovia_store.errors import EncryptionKeyError
from lovia_store.integrations import zett
from zett_support import ScriptedModel, record_view

KINDS = ("sqlite", "postgres", "mariadb")
KEY, OTHER_KEY = generate_encryption_key(), generate_encryption_key()
PLAIN: dict[str, Any] = {"compression": False}
CODECS: dict[str, dict[str, Any]] = {
    "compressed": {"compression_threshold": 64},
    "encrypted": {"compression_threshold": 64, "encryption_keys": [KEY]},
    "sealed": {"compression": False, "encryption_keys": [KEY]},  # encrypted, not compressed
}
SHARING = ("compressed", "encrypted")
"""The codecs that share long values (sharing rides on compression)."""

S, OTHER = "s-1", "s-2"
T0 = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
# A tool output long enough to be shared, with what JSON escapes and what it does not.
OUTPUT = "".join(f'line {i}: "Zürich" \u2013 7 °C, rain 🌧\\ tab\there\n' for i in range(40))
NOTE = "a metadata value long enough to be compressed, never shared: " + "ab" * 40
SUMMARY = "The user read a file twice and was told about the rain in Zürich. " * 3


@pytest.fixture(params=KINDS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """One database of each SQL kind (a SQLite file, or the server's shared database)."""
    async for backend in _backend(request.param, tmp_path):
        assert backend.target is not None
        yield backend.target


def timing(n: int) -> MessageTiming:
    start = T0 + timedelta(seconds=n)
    return MessageTiming(
        started_at=start, completed_at=start + timedelta(milliseconds=250), duration_ns=250_000_000
    )


def zett_timing(n: int) -> ZettTiming:
    start = T0 + timedelta(seconds=n)
    return ZettTiming(start, start + timedelta(milliseconds=5), 5_000_000)


def norm(value: Any) -> Any:
    """A read model as JSON, ids and storage times aside (each run has its own)."""
    if isinstance(value, list):
        return [norm(item) for item in value]
    if value is None or isinstance(value, int):
        return value
    dumped = value.model_dump(mode="json")
    return _strip(dumped)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip(v) for k, v in value.items() if k not in ("id", "created_at", "updated_at")
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def zett_norm(value: Any) -> Any:
    """One of zett's read models, ids and times aside: its records are dataclasses,
    its snapshots and summaries pydantic models."""
    if value is None or dataclasses.is_dataclass(value):
        return value if value is None else record_view(value)
    return _strip(value.model_dump())


async def contents_rows(db: Database) -> list[tuple[str, int]]:
    """``lovia_contents`` as (tenant, refs), every tenant's."""

    def work(conn: Connection) -> list[tuple[str, int]]:
        query = select(contents.c.tenant, contents.c.refs).order_by(contents.c.refs)
        return [(tenant, int(refs)) for tenant, refs in conn.execute(query)]

    return await db.read(work)


async def stored_columns(db: Database) -> list[str | bytes]:
    """Every stored document of the Raw Log's tables, as its column holds it."""

    def work(conn: Connection) -> list[str | bytes]:
        m, p = messages.c, snapshots.c
        found: list[str | bytes] = []
        for query in (
            select(m.entry_json, m.envelope_json, m.metadata_json, m.tags_json),
            select(p.summary_json, p.envelope_json),
            select(contents.c.data),
        ):
            found += [value for row in conn.execute(query) for value in row if value is not None]
        return found

    return await db.read(work)


def stored_forms(values: list[str | bytes]) -> int:
    return sum(1 for v in values if isinstance(v, str) and v.startswith("\x01"))


# -- every operation, as without compression ------------------------------------------------


def sync_reads(store: SQLSessionStorage) -> dict[str, Any]:
    """The blocking view: one append, then the reads (run in a thread: no loop here)."""
    with store.sync() as view:
        appended = view.append(S, "r-sync", result("c-sync", OUTPUT), timing=timing(90))
        return {
            "appended": appended,
            "count": view.count_messages(S),
            "all": norm(view.list_raw_messages(S)),
            "page": norm(view.list_raw_messages(S, offset=2, limit=3)),
            "view": norm(view.load(S)),
            "summary": norm(view.get_session(S)),
        }


async def raw_log_scenario(db: Database) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every Raw Log operation on ``db``: what each one read back, and what was stored
    (before ``delete_session``)."""
    store = SQLSessionStorage(db)
    drop_in = zett.SQLSessionStorage(db)
    seen: dict[str, Any] = {}
    sequences = [
        await store.append(
            S,
            "r1",
            user("Read /etc/motd twice, please. " + NOTE),
            timing=timing(0),
            title="Files",
            agent_name="reader",
            metadata={"source": "test", "note": NOTE, "n": 2**70},
            tags={"topic": "files", "long": NOTE},
        )
    ]
    for i in range(3):
        sequences.append(
            await store.append(
                S,
                "r1",
                call(f"c{i}", "read_file", '{"path": "/etc/motd"}'),
                timing=timing(2 * i + 1),
                usage=Usage(input_tokens=100 + i, output_tokens=7, cache_read_tokens=50),
            )
        )
        sequences.append(
            await store.append(
                S, "r1", result(f"c{i}", OUTPUT), timing=timing(2 * i + 2), metadata={"i": i}
            )
        )
    # zett's messages, each kept whole beside its projection: envelopes.
    sequences.append(
        await drop_in.append(
            S,
            "r2",
            AssistantMessage(
                content="Reading it again. " + NOTE,
                reasoning="Twice, they said.",
                tool_calls=(
                    ToolCall("z1", "read_file", {"path": "/etc/motd"}),
                    ToolCall("z2", "f"),
                ),
            ),
            timing=zett_timing(10),
            usage=ModelUsage(10, 2),
            metadata={"from": "zett"},
        )
    )
    sequences.append(
        await drop_in.append(
            S,
            "r2",
            ToolMessage(tool_call_id="z1", name="read_file", content=OUTPUT),
            timing=zett_timing(11),
            tags={"z": NOTE},
        )
    )
    keyed = await store.append(
        S, "r3", say("Done: " + NOTE), timing=timing(12), idempotency_key="k"
    )
    again = await store.append(S, "r3", say("another text"), idempotency_key="k")
    seen["appended"] = [*sequences, keyed, again]
    seen["summary"] = norm(await store.get_session(S))
    seen["listed"] = norm(await store.list_sessions())
    seen["count"] = await store.count_messages(S)
    seen["all"] = norm(await store.list_raw_messages(S))
    seen["pages"] = [norm(await store.list_raw_messages(S, offset=o, limit=4)) for o in (0, 4, 8)]
    seen["range"] = norm(await store.list_raw_messages(S, after_sequence=2, through_sequence=6))
    seen["view"] = norm(await store.load(S))
    seen["zett_all"] = [record_view(r) for r in await drop_in.list_raw_messages(S)]
    first = await store.snapshot(S, CompactedMessage(content=SUMMARY), 4, 0)
    with pytest.raises(SnapshotConflictError):
        await store.snapshot(S, CompactedMessage(content="stale"), 5, 0)
    second = await drop_in.snapshot(S, ZettCompacted(content=SUMMARY + " Again."), 8, 1)
    with pytest.raises(SnapshotConflictError):
        await drop_in.snapshot(S, ZettCompacted(content="stale"), 9, 1)
    seen["snapshots"] = [norm(first), zett_norm(second)]
    seen["view_after"] = norm(await store.load(S))
    zett_view = await drop_in.load(S)
    seen["zett_view"] = (
        zett_norm(zett_view.snapshot),
        [record_view(r) for r in zett_view.raw_tail],
    )
    seen["sync"] = await asyncio.to_thread(sync_reads, store)
    stored = {"columns": await stored_columns(db), "contents": await contents_rows(db)}
    assert await store.delete_session(S)
    assert not await store.delete_session(S)
    seen["deleted"] = (
        await store.get_session(S),
        await store.list_raw_messages(S),
        norm(await store.load(S)),
        await store.count_messages(S),
    )
    return seen, stored


@pytest.mark.parametrize("mode", list(CODECS))
async def test_every_raw_log_operation_reads_back_as_without_compression(
    target: str, mode: str
) -> None:
    async with Database(target, **PLAIN) as db:
        plain, plain_stored = await raw_log_scenario(db)
        assert await contents_rows(db) == []
    async with Database(target, **CODECS[mode]) as db:
        coded, coded_stored = await raw_log_scenario(db)
        assert await contents_rows(db) == [], "delete_session released every reference"

    assert coded == plain
    assert plain["appended"] == [*range(1, 10), 10, 10]
    assert plain["all"][6]["message"]["output"] == OUTPUT
    assert plain["all"][0]["metadata"]["n"] == 2**70
    # Not vacuous: the plain run stored plain JSON, the coded one its stored forms.
    assert stored_forms(plain_stored["columns"]) == 0 and plain_stored["contents"] == []
    assert stored_forms(coded_stored["columns"]) >= 10
    if mode in SHARING:
        # The output in 3 results, zett's tool message and the sync view's: one value;
        # three long texts (the user's, zett's assistant's, the keyed one) once each.
        assert coded_stored["contents"] == [("", 1)] * 3 + [("", 5)]
    else:
        assert coded_stored["contents"] == []


# -- stored once ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", SHARING)
async def test_a_repeated_output_is_one_contents_row_until_delete_session(
    target: str, mode: str
) -> None:
    async with Database(target, **CODECS[mode]) as db:
        store = SQLSessionStorage(db)
        drop_in = zett.SQLSessionStorage(db)
        for i in range(5):
            await store.append(S, "r", result(f"c{i}", OUTPUT), metadata={"note": NOTE})
        assert await contents_rows(db) == [("", 5)]
        # A keyed append counts once; its re-issue stores nothing, counts nothing.
        assert await store.append(S, "r", result("k", OUTPUT), idempotency_key="k") == 6
        assert await store.append(S, "r", result("k", OUTPUT), idempotency_key="k") == 6
        assert await contents_rows(db) == [("", 6)]
        # A refused snapshot and a refused append change nothing.
        await store.snapshot(S, CompactedMessage(content=OUTPUT), 2, 0)
        with pytest.raises(SnapshotConflictError):
            await store.snapshot(S, CompactedMessage(content=OUTPUT), 3, 0)
        with pytest.raises(ValueError, match="parent"):
            await store.append(S, "r", result("p", OUTPUT), parent_session_id="elsewhere")
        assert await contents_rows(db) == [("", 6)]
        # Another session, and zett's drop-in (its projection shares, its envelope not).
        await store.append(OTHER, "r", result("o", OUTPUT))
        await drop_in.append(OTHER, "r", ToolMessage(tool_call_id="z", name="f", content=OUTPUT))
        assert await contents_rows(db) == [("", 8)]
        # Another tenant counts its own references (on the same Database).
        await SQLSessionStorage(db, tenant="acme").append(S, "r", result("t", OUTPUT))
        assert await contents_rows(db) == [("acme", 1), ("", 8)]

        assert await store.delete_session(S)
        assert await contents_rows(db) == [("acme", 1), ("", 2)]
        assert not await store.delete_session("unknown")
        assert await contents_rows(db) == [("acme", 1), ("", 2)]
        assert [r.message.output for r in await store.list_raw_messages(OTHER)] == [OUTPUT] * 2
        assert await drop_in.delete_session(OTHER)
        assert await SQLSessionStorage(db, tenant="acme").delete_session(S)
        assert await contents_rows(db) == []


# -- encryption -----------------------------------------------------------------------------

SECRET = "plaintext-marker-7f3a"


async def write_secrets(db: Database) -> None:
    """The marker in every kind of document the Raw Log stores, short and long."""
    store = SQLSessionStorage(db)
    drop_in = zett.SQLSessionStorage(db)
    await store.append(
        S,
        "r",
        user(f"short {SECRET}"),
        metadata={"m": SECRET},
        tags={"t": SECRET},
        timing=timing(0),
    )
    await store.append(S, "r", result("c", f"{SECRET} {OUTPUT}"), timing=timing(1))
    await store.append(S, "r", result("d", f"{SECRET} {OUTPUT}"), timing=timing(2))
    await drop_in.append(S, "r", UserMessage(content=f"zett {SECRET}"), timing=zett_timing(3))
    await drop_in.append(
        S,
        "r",
        ToolMessage(tool_call_id="z", name="f", content=f"{SECRET} {OUTPUT}"),
        timing=zett_timing(4),
    )
    await store.snapshot(S, CompactedMessage(content=f"{SECRET} summary"), 1, 0)
    await drop_in.snapshot(S, ZettCompacted(content=f"{SECRET} zett summary"), 2, 1)


async def read_everything(db: Database) -> Any:
    store = SQLSessionStorage(db)
    drop_in = zett.SQLSessionStorage(db)
    zett_view = await drop_in.load(S)
    return (
        norm(await store.list_raw_messages(S)),
        norm(await store.list_raw_messages(S, offset=1, limit=2)),
        norm(await store.load(S)),
        [record_view(r) for r in await drop_in.list_raw_messages(S)],
        zett_norm(zett_view.snapshot),
    )


@pytest.mark.parametrize("mode", ["encrypted", "sealed"])
async def test_encrypted_documents_hold_no_plaintext_and_read_back(target: str, mode: str) -> None:
    sqlite = "://" not in target
    # On SQLite the plain reference gets its own file: freed pages keep what was deleted.
    async with Database(f"{target}.plain" if sqlite else target, **PLAIN) as db:
        await write_secrets(db)
        plain = await read_everything(db)
        assert any(SECRET in str(value) for value in await stored_columns(db))
        assert await SQLSessionStorage(db).delete_session(S)
    async with Database(target, **CODECS[mode]) as db:
        await write_secrets(db)
        assert await read_everything(db) == plain
        stored = await stored_columns(db)
        assert len(stored) >= 15
        for value in stored:
            raw = value if isinstance(value, bytes) else value.encode()
            assert SECRET.encode() not in raw
            assert b"Z\xc3\xbcrich" not in raw  # nor the shared output's text
        assert stored_forms(stored) == len([v for v in stored if isinstance(v, str)])
    if sqlite:  # the file's bytes, too
        data = await asyncio.to_thread(Path(target).read_bytes)
        assert b"Z\xc3\xbcrich" not in data and b"plaintext-marker" not in data


async def test_a_wrong_or_missing_key_is_an_encryption_key_error_naming_the_row(
    target: str,
) -> None:
    key_id = EncryptionKey.of(KEY).id
    async with Database(target, **CODECS["encrypted"]) as db:
        await write_secrets(db)
        expected = await read_everything(db)
        await SQLSessionStorage(db).append(OTHER, "r", result("o", OUTPUT))  # shared only
    for wrong in ({"encryption_keys": [OTHER_KEY]}, {}):
        async with Database(target, compression_threshold=64, **wrong) as db:
            store = SQLSessionStorage(db)
            drop_in = zett.SQLSessionStorage(db)
            for lister in (store.list_raw_messages, drop_in.list_raw_messages):
                # The first message alone: its own sealed entry does not open.
                with pytest.raises(EncryptionKeyError) as raised:
                    await lister(S, limit=1)
                error = raised.value
                assert (error.table, error.column) == ("lovia_messages", "entry_json")
                assert (error.row, error.key_id) == ({"session_id": S, "sequence": 1}, key_id)
                # The whole page: the value messages 2, 3 and 5 share is read first, and
                # does not open; the first message that names it is named.
                with pytest.raises(EncryptionKeyError) as raised:
                    await lister(S)
                error = raised.value
                assert (error.table, error.column) == ("lovia_messages", "entry_json")
                assert (error.row, error.key_id) == ({"session_id": S, "sequence": 2}, key_id)
            for loader in (store.load, drop_in.load):
                with pytest.raises(EncryptionKeyError) as raised:
                    await loader(S)
                assert raised.value.table == "lovia_snapshots"
                assert raised.value.row == {"session_id": S, "version": 2}
            # A message whose entry's text is a shared value: the message is named, the
            # value's row is the cause.
            with pytest.raises(EncryptionKeyError) as raised:
                await store.list_raw_messages(OTHER)
            error = raised.value
            assert (error.table, error.column) == ("lovia_messages", "entry_json")
            assert (error.row, error.key_id) == ({"session_id": OTHER, "sequence": 1}, key_id)
            cause = error.__cause__
            assert isinstance(cause, EncryptionKeyError) and cause.table == "lovia_contents"
            # What needs no document still reads.
            assert await store.count_messages(S) == 5
    # Rotated: a new key first, the old one still opens what it sealed.
    async with Database(target, encryption_keys=[OTHER_KEY, KEY]) as db:
        assert await read_everything(db) == expected
        assert await SQLSessionStorage(db).delete_session(S)
        assert await SQLSessionStorage(db).delete_session(OTHER)
        assert await contents_rows(db) == []


async def test_a_damaged_stored_document_is_a_stored_value_error_naming_its_row(
    target: str,
) -> None:
    async with Database(target, **CODECS["compressed"]) as db:
        store = SQLSessionStorage(db)
        await store.append(S, "r", user("fine"), metadata={"note": NOTE})
        await store.append(S, "r", user("fine"), metadata={"note": NOTE})

        def damage(conn: Connection) -> None:
            m = messages.c
            conn.execute(
                update(messages)
                .where(m.session_id == S, m.sequence == 2)
                .values(metadata_json="\x01z\x1f\x1f\x1f!!not base64!!")
            )

        await db.write(damage)
        for read in (store.list_raw_messages, store.load):
            with pytest.raises(StoredValueError) as raised:
                await read(S)
            error = raised.value
            assert not isinstance(error, EncryptionKeyError)
            assert (error.table, error.column) == ("lovia_messages", "metadata_json")
            assert error.row == {"session_id": S, "sequence": 2}
        assert await store.delete_session(S)


# -- zett-agent's drop-in -------------------------------------------------------------------

ZSID = "chat-1"


async def zett_storage_scenario(storage: zett.SQLSessionStorage) -> dict[str, Any]:
    """zett's storage API through its drop-in: every read model, zett's own."""
    await storage.create_session(session_id=ZSID, title="Files", agent_name="reader")
    appended = [
        await storage.append(
            ZSID, "r1", SystemMessage(content="Rules. " + NOTE), timing=zett_timing(0)
        ),
        await storage.append(
            ZSID,
            "r1",
            UserMessage(content="Read it twice."),
            timing=zett_timing(1),
            metadata={"note": NOTE},
            tags={"topic": "files"},
        ),
    ]
    for i in range(3):
        appended.append(
            await storage.append(
                ZSID,
                "r1",
                AssistantMessage(tool_calls=(ToolCall(f"c{i}", "read_file", {"p": "/x"}),)),
                timing=zett_timing(2 + 2 * i),
                usage=ModelUsage(100, 5),
            )
        )
        appended.append(
            await storage.append(
                ZSID,
                "r1",
                ToolMessage(tool_call_id=f"c{i}", name="read_file", content=OUTPUT),
                timing=zett_timing(3 + 2 * i),
            )
        )
    snapshot = await storage.snapshot(ZSID, ZettCompacted(content=SUMMARY), 4, 0)
    with pytest.raises(SnapshotConflictError):
        await storage.snapshot(ZSID, ZettCompacted(content="stale"), 5, 0)
    view = await storage.load(ZSID)
    seen = {
        "appended": appended,
        "snapshot": zett_norm(snapshot),
        "view": (zett_norm(view.snapshot), [record_view(r) for r in view.raw_tail]),
        "all": [record_view(r) for r in await storage.list_raw_messages(ZSID)],
        "page": [record_view(r) for r in await storage.list_raw_messages(ZSID, offset=3, limit=2)],
        "count": await storage.count_messages(ZSID),
        "session": zett_norm(await storage.get_session(ZSID)),
    }
    assert seen["all"][5]["message"].content == OUTPUT
    return seen


@pytest.mark.parametrize("mode", SHARING)
async def test_zett_s_storage_round_trips_through_the_codec(target: str, mode: str) -> None:
    async with Database(target, **PLAIN) as db:
        storage = zett.SQLSessionStorage(db)
        plain = await zett_storage_scenario(storage)
        assert await storage.delete_session(ZSID)
    async with Database(target, **CODECS[mode]) as db:
        storage = zett.SQLSessionStorage(db)
        assert await zett_storage_scenario(storage) == plain
        # The output of three tool messages once; the system message's long text too.
        assert await contents_rows(db) == [("", 1), ("", 3)]
        assert await storage.delete_session(ZSID)
        assert await contents_rows(db) == []


@pytest.mark.parametrize("storage_class", [zett.SQLiteSessionStorage, SQLiteSessionStorage])
async def test_sqlite_storages_compress_and_share_by_default(
    storage_class: type[Any], tmp_path: Path
) -> None:
    """A storage opened on a path has a Database of its own, with the defaults: long
    documents compressed, long outputs (past 2,048 characters) stored once."""
    path = tmp_path / "default.sqlite3"
    long_output = OUTPUT * 3
    assert len(long_output) > 2048
    async with storage_class(path) as storage:
        for i in range(4):
            if storage_class is SQLiteSessionStorage:
                await storage.append(ZSID, "r", result(f"c{i}", long_output))
            else:
                message = ToolMessage(tool_call_id=f"c{i}", name="f", content=long_output)
                await storage.append(ZSID, "r", message)
        records = await storage.list_raw_messages(ZSID)
        view = await storage.load(ZSID)
        assert len(records) == len(view.raw_tail) == 4
        for record in (*records, *view.raw_tail):
            shown = record.message
            assert (shown.output if storage_class is SQLiteSessionStorage else shown.content) == (
                long_output
            )
        assert await contents_rows(storage.database) == [("", 4)]
        assert stored_forms(await stored_columns(storage.database)) >= 4
        assert await storage.delete_session(ZSID)
        assert await contents_rows(storage.database) == []


# zett-agent's own Agent, on the drop-in: a tool that reads the same long file twice.


@tool
def read_file(path: str) -> str:
    """Read a text file.

    Args:
        path: The file's path.

    Guidelines:
        - Read each file once.
    """
    return f"{path}:\n{OUTPUT}"


def config(request_id: str) -> AgentRunConfig:
    return AgentRunConfig(session_id=ZSID, request_id=request_id)


async def agent_scenario(db: Database) -> tuple[list[Any], list[Any]]:
    first = ScriptedModel(
        AssistantMessage(
            content="Reading both.",
            tool_calls=(
                ToolCall("call-1", "read_file", {"path": "/etc/motd"}),
                ToolCall("call-2", "read_file", {"path": "/etc/motd"}),
            ),
        ),
        AssistantMessage(content="It says the same twice: rain in Zürich."),
    )
    persistence = SQLSessionExtension(zett.SQLSessionStorage(db))  # type: ignore[arg-type]
    agent = await Agent.create(
        first, config=config("req-1"), tools=[read_file], extensions=[persistence]
    )
    await agent.run("Read /etc/motd twice.", config=config("req-1"), metadata={"note": NOTE})
    await persistence.close()
    second = ScriptedModel(AssistantMessage(content="Still rain."))
    persistence = SQLSessionExtension(zett.SQLSessionStorage(db))  # type: ignore[arg-type]
    agent = await Agent.create(second, config=config("req-2"), extensions=[persistence])
    await agent.run("And now?", config=config("req-2"))
    records = await persistence.list_raw_messages(ZSID)
    await persistence.close()
    return [record_view(r) for r in records], second.requests[0].messages


@pytest.mark.parametrize("mode", SHARING)
async def test_zett_s_agent_restores_its_session_through_the_codec(target: str, mode: str) -> None:
    async with Database(target, **PLAIN) as db:
        plain = await agent_scenario(db)
        assert await zett.SQLSessionStorage(db).delete_session(ZSID)
    async with Database(target, **CODECS[mode]) as db:
        records, sent = await agent_scenario(db)
        assert (records, sent) == plain
        tool_messages = [r["message"] for r in records if isinstance(r["message"], ToolMessage)]
        assert [m.content for m in tool_messages] == [f"/etc/motd:\n{OUTPUT}"] * 2
        # The restored request was sent both outputs, read back from one stored value.
        assert [m for m in sent if isinstance(m, ToolMessage)] == tool_messages
        assert await contents_rows(db) == [("", 2)]
        assert await zett.SQLSessionStorage(db).delete_session(ZSID)
        assert await contents_rows(db) == []


# -- a fork, which the Raw Log shares with lovia's sessions ---------------------------------


async def test_a_fork_counts_the_values_its_copies_share(target: str) -> None:
    async with Database(target, **CODECS["compressed"]) as db:
        store = SQLSessionStorage(db)
        for i in range(2):
            await store.append(S, "r", result(f"c{i}", OUTPUT))
        await store.fork(S, OTHER, keep_entries=2)
        assert await contents_rows(db) == [("", 4)]
        assert await store.delete_session(S)
        assert [r.message.output for r in await store.list_raw_messages(OTHER)] == [OUTPUT] * 2
        assert await store.delete_session(OTHER)
        assert await contents_rows(db) == []


@pytest.mark.parametrize("mode", ["plain", *CODECS])
async def test_zett_s_envelopes_read_back_exactly_through_the_raw_log_api(
    target: str, mode: str
) -> None:
    """A zett message's attributes (any JSON: integers past 64 bits, past a double's
    range) are kept in its envelope; the Raw Log API reads each envelope back exactly,
    a message's and a snapshot's, as zett's own storage does."""
    wide, huge = 2**70 + 1, -(10**400)  # a double rounds one; orjson does not read the other
    attributes = {"wide": wide, "huge": huge, "text": OUTPUT}
    async with Database(target, **(PLAIN if mode == "plain" else CODECS[mode])) as db:
        storage = zett.SQLSessionStorage(db)
        await storage.append(ZSID, "q1", UserMessage(content=OUTPUT, attributes=attributes))
        summary = ZettCompacted(content=SUMMARY, attributes=attributes)
        await storage.snapshot(ZSID, summary, 1, expected_version=0)
        [mine] = await storage.list_raw_messages(ZSID)
        assert mine.message.attributes == attributes  # zett's storage: exact
        try:
            [record] = await SQLSessionStorage(db).list_raw_messages(ZSID)
            assert record.envelope is not None
            assert record.envelope["data"]["attributes"] == attributes
            assert type(record.envelope["data"]["attributes"]["wide"]) is int
            view = await SQLSessionStorage(db).load(ZSID)
            assert view.snapshot is not None and view.snapshot.envelope is not None
            assert view.snapshot.envelope["data"]["attributes"] == attributes
        finally:
            assert await storage.delete_session(ZSID)


@pytest.mark.parametrize("mode", ["plain", *CODECS])
async def test_metadata_and_tags_keep_every_integer_exactly(target: str, mode: str) -> None:
    """Integers at and past the 64-bit bounds in a message's metadata and tags read back
    as the same integers: below -2**63 with 19 digits too (orjson reads those as
    floats), beside a value long enough to be compressed."""
    numbers = [
        -(2**63),
        -(2**63) - 1,
        -9999999999999999999,
        2**63 - 1,
        2**64 - 1,
        2**64,
        -(10**400),
    ]
    metadata = {"numbers": numbers, "note": NOTE}
    tags = {"low": -(2**63) - 1, "note": NOTE}
    async with Database(target, **(PLAIN if mode == "plain" else CODECS[mode])) as db:
        storage = SQLSessionStorage(db)
        await storage.append(S, "q1", user("hello"), metadata=metadata, tags=tags)
        try:
            [record] = await storage.list_raw_messages(S)
            assert (record.metadata, record.tags) == (metadata, tags)
            read = record.metadata["numbers"]
            assert isinstance(read, list) and all(type(n) is int for n in read)
            assert type(record.tags["low"]) is int
        finally:
            assert await storage.delete_session(S)


@pytest.mark.parametrize("mode", ["plain", "encrypted"])
async def test_a_damaged_zett_envelope_is_a_stored_value_error_naming_its_row(
    target: str, mode: str
) -> None:
    """An envelope that does not read (edited by another program), a message's or a
    snapshot's, fails the Raw Log API's reads with a ``StoredValueError`` naming its row."""
    async with Database(target, **(PLAIN if mode == "plain" else CODECS[mode])) as db:
        storage = zett.SQLSessionStorage(db)
        await storage.append(ZSID, "q1", UserMessage(content="one"))
        await storage.append(ZSID, "q2", UserMessage(content="two"))
        await storage.snapshot(ZSID, ZettCompacted(content=SUMMARY), 1, expected_version=0)
        ours = SQLSessionStorage(db)

        def damage(conn: Connection, table: Any, **key: Any) -> None:
            where = [table.c[name] == value for name, value in key.items()]
            conn.execute(update(table).where(*where).values(envelope_json='{"kind": 1, "da'))

        try:
            await db.write(lambda conn: damage(conn, messages, session_id=ZSID, sequence=2))
            with pytest.raises(StoredValueError) as raised:
                await ours.list_raw_messages(ZSID)
            assert (raised.value.table, raised.value.column) == ("lovia_messages", "envelope_json")
            assert raised.value.row == {"session_id": ZSID, "sequence": 2}
            await db.write(lambda conn: damage(conn, snapshots, session_id=ZSID, version=1))
            with pytest.raises(StoredValueError) as raised:
                await ours.load(ZSID)
            assert (raised.value.table, raised.value.column) == ("lovia_snapshots", "envelope_json")
            assert raised.value.row == {"session_id": ZSID, "version": 1}
        finally:
            assert await storage.delete_session(ZSID)
