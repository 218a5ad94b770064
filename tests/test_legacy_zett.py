"""A file written by zett-agent 0.2.1 migrates in place and reads back exactly as its manifest says.

Every session (summary fields and timestamps), raw message (id, sequence,
request id, envelope, metadata, tags, timing, usage, timestamps) and snapshot
(id, version, boundary, summary, envelope, timestamps), through the Raw Log
API; and the same adoption from zett-agent's tables on PostgreSQL. A larger
seeded file (``make_legacy_fixtures.py --only zett --profile holdout``) next
to the fixture, or named by ``LOVIA_ZETT_HOLDOUT``, is checked the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text

from backends import LEGACY, ZETT_MANIFEST
from helpers import say, user
from lovia_store import (
    AssistantTextEntry,
    CompactedMessage,
    ImagePart,
    InputEntry,
    SQLiteSession,
    SQLiteSessionStorage,
    SQLSessionStorage,
    TextPart,
    ToolCallEntry,
    ToolResultEntry,
    check,
)
from lovia_store.db.tables import snapshots
from lovia_store.sessions.raw_log.records import SNAPSHOT_COLUMNS, snapshot_from_row

MANIFEST = ZETT_MANIFEST
ZETT_TABLES = {"agent_sessions", "raw_messages", "session_snapshots"}
TIMING = (
    "started_at",
    "completed_at",
    "duration_ns",
    "reasoning_started_at",
    "reasoning_completed_at",
    "reasoning_duration_ns",
    "content_started_at",
    "content_completed_at",
    "content_duration_ns",
)


def holdouts() -> list[Path]:
    found = sorted(LEGACY.glob("zett-0.2.1*.holdout.sqlite3"))
    named = os.environ.get("LOVIA_ZETT_HOLDOUT")
    return found + ([Path(named)] if named else [])


def when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


async def all_snapshots(store: SQLSessionStorage, session_id: str) -> list[Any]:
    def work(conn: Connection) -> list[Any]:
        query = (
            snapshots.select()
            .with_only_columns(*SNAPSHOT_COLUMNS)
            .where(snapshots.c.session_id == session_id)
            .order_by(snapshots.c.version)
        )
        return [snapshot_from_row(row) for row in conn.execute(query)]

    return await store.database.read(work)


async def assert_matches(store: SQLSessionStorage, manifest: dict[str, Any]) -> None:
    """Everything the manifest lists reads back through the Raw Log API, exactly."""
    expected_sessions = manifest["sessions"]
    listed = await store.list_sessions(limit=10_000)
    assert {s.session_id for s in listed} == {s["summary"]["session_id"] for s in expected_sessions}
    for session in expected_sessions:
        summary = session["summary"]
        sid = summary["session_id"]
        got = await store.get_session(sid)
        assert got is not None
        assert got.model_dump() == {
            **summary,
            "created_at": when(summary["created_at"]),
            "updated_at": when(summary["updated_at"]),
            # What zett-agent's manifest cannot know: an adopted session is no fork.
            "forked_from_session_id": None,
            "forked_at_entry": None,
        }
        assert await store.count_messages(sid) == len(session["raw_messages"])
        records = await store.list_raw_messages(sid)
        assert len(records) == len(session["raw_messages"])
        for record, raw in zip(records, session["raw_messages"], strict=True):
            assert (record.id, record.sequence, record.request_id) == (
                raw["id"],
                raw["sequence"],
                raw["request_id"],
            )
            assert record.envelope == raw["message"]
            assert (record.metadata, record.tags) == (raw["metadata"], raw["tags"])
            assert {k: getattr(record, k) for k in raw["usage"]} == raw["usage"]
            assert {k: getattr(record, k) for k in TIMING} == {
                k: (v if k.endswith("_ns") else when(v)) for k, v in raw["timing"].items()
            }
            assert record.created_at == when(raw["created_at"])
            assert record.updated_at == when(raw["updated_at"])
            assert record.run_id is None
        stored = await all_snapshots(store, sid)
        assert len(stored) == len(session["snapshots"])
        for snap, raw in zip(stored, session["snapshots"], strict=True):
            assert (snap.id, snap.version, snap.compacted_through_sequence) == (
                raw["id"],
                raw["version"],
                raw["compacted_through_sequence"],
            )
            assert snap.compacted_message == CompactedMessage(content=raw["summary"])
            assert snap.envelope == raw["message"]
            assert (snap.created_at, snap.updated_at) == (
                when(raw["created_at"]),
                when(raw["updated_at"]),
            )
        view = await store.load(sid)
        expected_view = session["load_view"]
        assert (view.snapshot.version if view.snapshot else None) == expected_view[
            "snapshot_version"
        ]
        assert [r.sequence for r in view.raw_tail] == expected_view["raw_tail_sequences"]
        assert (view.parent_session_id, view.session_type, view.title, view.agent_name) == (
            summary["parent_session_id"],
            summary["session_type"],
            summary["title"],
            summary["agent_name"],
        )


def original_message_json(path: Path) -> dict[tuple[str, int], str]:
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        rows = conn.execute("SELECT session_id, sequence, message_json FROM raw_messages")
        return {(sid, seq): text for sid, seq, text in rows}


async def test_every_record_reads_back_as_the_manifest_says(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    assert tables(path) >= ZETT_TABLES
    originals = original_message_json(path)
    async with SQLiteSessionStorage(path) as store:
        await assert_matches(store, MANIFEST)
    after = tables(path)
    assert not ZETT_TABLES & after
    assert {"lovia_sessions", "lovia_messages", "lovia_snapshots"} <= after
    await check(path)
    # Each envelope is kept byte for byte: an export can give zett's row back.
    with sqlite3.connect(path) as conn:
        kept = conn.execute("SELECT session_id, sequence, envelope_json FROM lovia_messages")
        assert {(sid, seq): f"[{envelope}]" for sid, seq, envelope in kept} == originals


@pytest.mark.parametrize("path", holdouts(), ids=[p.name for p in holdouts()])
async def test_a_holdout_file_reads_back_as_its_manifest_says(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / path.name
    shutil.copyfile(path, copy)
    manifest_path = path.with_name(path.name.replace(".sqlite3", ".manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    async with SQLiteSessionStorage(copy) as store:
        await assert_matches(store, manifest)


async def test_messages_are_shown_as_transcript_entries(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    root = "01940000-0000-7000-8000-00000000a001"
    async with SQLiteSessionStorage(path) as store:
        shown = [r.message for r in await store.list_raw_messages(root)]
        view = await store.load(root)
    png = MANIFEST["sessions"][0]["raw_messages"][1]["message"]["data"]["content"][1]
    system = "You are the zett fixture agent. Be precise."
    assert shown[0] == InputEntry(role="system", content=system)
    assert shown[1] == InputEntry(
        role="user",
        content=[
            TextPart(text="What's the weather in Zürich, and what is in this image?"),
            ImagePart(
                data=png["source"]["data"]["__kcs_bytes__"], mime_type="image/png", detail="high"
            ),
            ImagePart(url="https://example.com/photo.jpg", detail="auto"),
        ],
    )
    assert shown[2] == AssistantTextEntry(content="Let me check the weather and the file.")
    assert shown[3] == ToolResultEntry(
        call_id="call-weather-1", output='{"temp_c": 7.5, "conditions": "rain"}'
    )
    assert isinstance(shown[4], ToolResultEntry) and shown[4].is_error
    reminder = "Reminder from the scheduler extension: prefer the 3-day forecast tool."
    assert shown[7] == InputEntry(role="user", content=reminder)
    assert shown[8] == ToolCallEntry(
        call_id="call-forecast-1", name="forecast", arguments='{"city": "Zürich", "days": 3}'
    )
    assert isinstance(shown[9], ToolResultEntry) and shown[9].parts is not None
    summary = MANIFEST["sessions"][0]["snapshots"][1]["summary"]
    assert view.messages[0] == CompactedMessage(content=summary)
    # Message 9 calls two tools: lovia's view shows both calls (revision 0006).
    broken = ToolCallEntry(call_id="call-broken-1", name="forecast", arguments="{}")
    assert view.messages[1:] == [shown[8], broken, shown[9]]


async def test_lovia_sees_the_adopted_sessions_and_both_apis_continue_them(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    root, child = "01940000-0000-7000-8000-00000000a001", "01940000-0000-7000-8000-00000000a002"
    async with SQLiteSession(path) as session:
        segments = await session.segments(root)
        assert [s.run_id for s in segments] == [
            "01940000-0000-7000-8000-0000000000b1",
            "01940000-0000-7000-8000-0000000000b2",
        ]
        # Every entry of each zett message: the assistant messages 3 (reasoning,
        # text, two calls) and 9 (two calls) are several each (revision 0006).
        assert [len(s.entries) for s in segments] == [9, 5]
        await session.append(root, [user("lovia here"), say("hello")], run_id="lovia-run")
    async with SQLiteSessionStorage(path) as store:
        assert await store.append(root, "req-new", user("and zett again")) == 13
        with pytest.raises(ValueError, match="parent"):
            await store.append(child, "req", user("no parent given"))
        assert await store.append(child, "req", user("hi"), parent_session_id=root) == 5
        snap = await store.snapshot(root, CompactedMessage(content="v3"), 12, 2)
        assert snap.version == 3
        view = await store.load(root)
        assert [r.sequence for r in view.raw_tail] == [13]
        assert [r.run_id for r in await store.list_raw_messages(root, after_sequence=10)] == [
            "lovia-run",
            "lovia-run",
            None,
        ]


async def test_trimming_an_adopted_tool_result_drops_its_envelope(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    root = "01940000-0000-7000-8000-00000000a001"
    # Give the first tool result a long output, as zett-agent would have stored it.
    with sqlite3.connect(path) as conn:
        (stored,) = conn.execute(
            "SELECT message_json FROM raw_messages WHERE session_id = ? AND sequence = 4", (root,)
        ).fetchone()
        envelope = json.loads(stored)
        envelope[0]["data"]["content"] = "rain " * 1000
        conn.execute(
            "UPDATE raw_messages SET message_json = ? WHERE session_id = ? AND sequence = 4",
            (json.dumps(envelope, ensure_ascii=False), root),
        )
    async with SQLiteSession(path) as session:
        assert await session.trim_tool_results(root, keep_chars=10, keep_runs=1) == 1
    async with SQLiteSessionStorage(path) as store:
        records = {r.sequence: r for r in await store.list_raw_messages(root)}
    trimmed = records[4]
    assert trimmed.envelope is None and trimmed.updated_at > trimmed.created_at
    assert isinstance(trimmed.message, ToolResultEntry)
    assert trimmed.message.output.startswith("rain rain ")
    assert all(
        r.envelope is not None and r.updated_at == r.created_at
        for q, r in records.items()
        if q != 4
    )


async def test_adoption_happens_on_postgresql_too(
    legacy_copy: Callable[[str], Path], pg_url: str
) -> None:
    """zett-agent's tables on a PostgreSQL server are adopted by the same migration (told
    that a dump exists: a server database cannot be copied aside first)."""
    from lovia_store import Database

    await _copy_zett_tables_to_postgres(legacy_copy("zett-0.2.1.sqlite3"), pg_url)
    async with Database(pg_url, legacy_backup=False) as db, SQLSessionStorage(db) as store:
        await assert_matches(store, MANIFEST)
        assert not ZETT_TABLES & await store.database.read(_table_names)


async def assert_the_real_zett_refuses(url: str) -> None:
    """Every call of zett-agent's own storage fails on a converted database, before it
    reads or writes anything: no empty session shown, no write lovia-store never sees."""
    from sqlalchemy.exc import OperationalError, ProgrammingError
    from zett_agent.messages import UserMessage
    from zett_agent.storage import SQLSessionStorage as ZettStorage

    zett = ZettStorage(url)
    try:
        for call in (
            lambda: zett.list_sessions(),
            lambda: zett.load("alice"),
            lambda: zett.count_messages("alice"),
            lambda: zett.append("alice", "r-new", UserMessage(content="written by zett")),
            lambda: zett.create_session(title="new"),
        ):
            with pytest.raises((OperationalError, ProgrammingError), match="ADD COLUMN"):
                await call()
    finally:
        await zett.close()


async def test_the_real_zett_fails_loudly_on_a_converted_file(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    async with SQLSessionStorage(path) as store:  # the first use converts
        await store.list_sessions()
    await assert_the_real_zett_refuses(f"sqlite+aiosqlite:///{path}")
    assert not ZETT_TABLES & tables(path)  # zett created nothing beside ours
    async with SQLSessionStorage(path) as store:  # and lovia-store still reads it all
        await assert_matches(store, MANIFEST)


async def test_the_real_zett_fails_loudly_on_a_converted_postgresql_database(
    legacy_copy: Callable[[str], Path], pg_url: str
) -> None:
    from lovia_store import Database

    await _copy_zett_tables_to_postgres(legacy_copy("zett-0.2.1.sqlite3"), pg_url)
    async with Database(pg_url, legacy_backup=False) as db, SQLSessionStorage(db) as store:
        await store.list_sessions()
    await assert_the_real_zett_refuses(pg_url)
    async with Database(pg_url) as db, SQLSessionStorage(db) as store:
        await assert_matches(store, MANIFEST)
        assert not ZETT_TABLES & await store.database.read(_table_names)


def _table_names(conn: Connection) -> set[str]:
    rows = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"))
    return {row[0] for row in rows}


# zett-agent's schema on PostgreSQL (what its create_all makes there).
_ZETT_PG_DDL = """
CREATE TABLE agent_sessions (
    id VARCHAR(36) PRIMARY KEY, parent_session_id VARCHAR(36),
    session_type INTEGER DEFAULT 0 NOT NULL, title VARCHAR(200), agent_name VARCHAR(64),
    created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL);
CREATE TABLE raw_messages (
    id VARCHAR(36) PRIMARY KEY, session_id VARCHAR(36) NOT NULL, request_id VARCHAR(36) NOT NULL,
    sequence INTEGER NOT NULL, role INTEGER NOT NULL, content TEXT NOT NULL,
    tool_name VARCHAR(200), message_json TEXT NOT NULL, metadata_json TEXT NOT NULL,
    tags_json TEXT NOT NULL, started_at TIMESTAMP NOT NULL, completed_at TIMESTAMP NOT NULL,
    duration_ns BIGINT NOT NULL, reasoning_started_at TIMESTAMP,
    reasoning_completed_at TIMESTAMP, reasoning_duration_ns BIGINT, content_started_at TIMESTAMP,
    content_completed_at TIMESTAMP, content_duration_ns BIGINT, input_tokens INTEGER,
    output_tokens INTEGER, cache_read_tokens INTEGER, cache_write_tokens INTEGER,
    reasoning_tokens INTEGER, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL);
CREATE UNIQUE INDEX ux_raw_session_sequence ON raw_messages (session_id, sequence);
CREATE TABLE session_snapshots (
    id VARCHAR(36) PRIMARY KEY, session_id VARCHAR(36) NOT NULL, version INTEGER NOT NULL,
    compacted_through_sequence INTEGER NOT NULL, message_json TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL);
CREATE UNIQUE INDEX ux_snapshot_session_version ON session_snapshots (session_id, version);
"""


async def _copy_zett_tables_to_postgres(source: Path, url: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    reader = create_engine(f"sqlite:///{source}")
    try:
        async with engine.begin() as conn:
            for statement in filter(str.strip, _ZETT_PG_DDL.split(";")):
                await conn.execute(text(statement))
            with reader.connect() as lite:
                for table in sorted(ZETT_TABLES):
                    result = lite.execute(text(f"SELECT * FROM {table}"))
                    columns = list(result.keys())
                    rows = [_typed(dict(zip(columns, row, strict=True))) for row in result]
                    names = ", ".join(columns)
                    marks = ", ".join(f":{c}" for c in columns)
                    insert = text(f"INSERT INTO {table} ({names}) VALUES ({marks})")
                    await conn.execute(insert, rows)
    finally:
        reader.dispose()
        await engine.dispose()


def _typed(row: dict[str, Any]) -> dict[str, Any]:
    """SQLite hands DATETIME back as text; PostgreSQL wants datetimes."""
    return {
        key: datetime.fromisoformat(value)
        if key.endswith("_at") and isinstance(value, str)
        else value
        for key, value in row.items()
    }


async def test_a_failed_adoption_leaves_the_file_untouched(
    legacy_copy: Callable[[str], Path],
) -> None:
    """A session id both stores hold stops the migration; everything rolls back."""
    from lovia_store import Database
    from lovia_store.db.schema import migrate

    path = legacy_copy("zett-0.2.1.sqlite3")
    async with Database(path) as db:
        await migrate(db, "0001")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO lovia_sessions (session_id, created_at, updated_at) "
            "VALUES ('01940000-0000-7000-8000-00000000a003', '2026-01-01', '2026-01-01')"
        )
    before = tables(path)
    with pytest.raises(RuntimeError, match="exists in both stores"):
        async with SQLiteSessionStorage(path) as store:
            await store.list_sessions()
    assert tables(path) == before >= ZETT_TABLES
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM raw_messages").fetchone() == (16,)
        assert conn.execute("SELECT version_num FROM lovia_alembic_version").fetchone() == ("0001",)
