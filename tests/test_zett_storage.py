"""``lovia_store.integrations.zett`` as a storage: zett's types in and out, exactly.

Every message kind round-trips equal (the envelope is kept whole) on SQLite,
PostgreSQL and MariaDB; errors say what zett-agent's storage says and are of
the same kind; stored metadata and tags that are not JSON objects are refused
with the row named; lovia's rewind may cut inside a zett message; and the
attributes, targets and default location zett's storage has.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import warnings
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.messages import (
    AgentMessage,
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage

from helpers import call, result, say, user
from lovia_store import (
    Database,
    DefaultPathWarning,
    SnapshotConflictError,
    SQLiteSession,
    StoredValueError,
    UserError,
)
from lovia_store import (
    SQLiteSessionStorage as CoreStorage,
)
from lovia_store.integrations.zett import (
    SQLiteSessionExtension,
    SQLiteSessionStorage,
    SQLSessionStorage,
)
from zett_support import KINDS, ZettSQLiteStorage, open_ours, open_zett, our_target, record_view

T0 = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def every_kind() -> list[tuple[Any, ModelUsage | None]]:
    return [
        (SystemMessage(content="Rules.", attributes={"v": 2}), None),
        (
            UserMessage(
                content=[
                    TextContent("Look:"),
                    ImageContent(ImageBytesSource(b"\x89PNG", "image/png")),
                ]
            ),
            None,
        ),
        (
            AssistantMessage(
                content="Two calls.",
                reasoning="Think.",
                tool_calls=(ToolCall("a", "f", {"x": [1, {"y": None}]}), ToolCall("b", "g")),
                provider="p",
                model="m",
                replay_blocks=({"type": "opaque", "data": "Zm9v"},),
            ),
            ModelUsage(100, 20, 30, 5, cache_reported=False, reasoning_tokens=7),
        ),
        (ToolMessage(tool_call_id="a", name="f", content="ok"), None),
        (ToolMessage(tool_call_id="b", name="g", content="no", success=False), None),
        (AgentMessage(content="Go on.", attributes={"resume": "x"}), None),
        (AssistantMessage(content="Done."), ModelUsage(1, 1)),
    ]


def timing(n: int) -> MessageTiming:
    start = T0 + timedelta(seconds=n)
    return MessageTiming(start, start + timedelta(seconds=1), 10**9 + n)


async def fill(storage: Any) -> list[int]:
    sequences = []
    for n, (message, usage) in enumerate(every_kind()):
        sequences.append(
            await storage.append(
                "s",
                f"r{n // 4}",
                message,
                timing(n),
                title="Round trip" if n == 0 else None,
                metadata={"n": n, "deep": {"list": [True, 1.5, "ü"]}},
                tags={"kind": type(message).__name__, "n": n},
                usage=usage,
            )
        )
    return sequences


@pytest.mark.parametrize("kind", KINDS)
async def test_every_message_kind_round_trips_equal(kind: str, tmp_path: Path) -> None:
    theirs_storage = open_zett(tmp_path)
    try:
        await fill(theirs_storage)
        theirs = await theirs_storage.list_raw_messages("s")
        their_view = await theirs_storage.load("s")
    finally:
        await theirs_storage.close()
    async with our_target(kind, tmp_path) as target:
        storage = open_ours(target)
        try:
            assert await fill(storage) == list(range(1, 8))
            ours = await storage.list_raw_messages("s")
            view = await storage.load("s")
            summary = await storage.get_session("s")
        finally:
            await storage.close()
    assert [record_view(r) for r in ours] == [record_view(r) for r in theirs]
    assert [r.message for r in ours] == [m for m, _ in every_kind()]
    assert ours[2].started_at == T0 + timedelta(seconds=2)
    assert ours[2].duration_ns == 10**9 + 2
    assert (ours[2].input_tokens, ours[2].cache_write_tokens, ours[2].reasoning_tokens) == (
        100,
        5,
        7,
    )
    assert ours[3].input_tokens is None
    assert view.messages == their_view.messages
    assert summary is not None and (summary.title, summary.message_count) == ("Round trip", 7)


# -- errors: zett's wording, the same kind ------------------------------------------

BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_raw_messages", {"session_id": "s", "after_sequence": -1}),
    ("list_raw_messages", {"session_id": "s", "through_sequence": 0}),
    ("list_raw_messages", {"session_id": "s", "limit": 0}),
    ("list_raw_messages", {"session_id": "s", "offset": -1}),
    ("list_sessions", {"limit": 0}),
    ("list_sessions", {"offset": -2}),
    ("list_sessions", {"session_types": [1, -1]}),
    ("list_sessions", {"session_types": [True]}),
    ("create_session", {"session_id": "s"}),
    ("create_session", {"session_id": "n", "parent_session_id": "n"}),
    ("create_session", {"session_id": "n", "title": "   "}),
    ("create_session", {"session_id": "n", "agent_name": "x" * 65}),
    ("create_session", {"session_id": "n", "session_type": -3}),
    ("update_session", {"session_id": "s"}),
    ("update_session", {"session_id": "s", "title": "t" * 201}),
    (
        "append",
        {
            "session_id": "s",
            "request_id": "r",
            "message": UserMessage(content="x"),
            "usage": ModelUsage(),
        },
    ),
    (
        "append",
        {
            "session_id": "s",
            "request_id": "r",
            "message": UserMessage(content="x"),
            "parent_session_id": "p",
        },
    ),
    (
        "append",
        {
            "session_id": "s",
            "request_id": "r",
            "message": UserMessage(content="x"),
            "metadata": {1: 2},
        },
    ),
    (
        "append",
        {
            "session_id": "s",
            "request_id": "r",
            "message": UserMessage(content="x"),
            "metadata": {"t": (1,)},
        },
    ),
    (
        "append",
        {
            "session_id": "s",
            "request_id": "r",
            "message": UserMessage(content="x"),
            "tags": {" ": 1},
        },
    ),
    (
        "append",
        {"session_id": "s", "request_id": "r", "message": UserMessage(content="x"), "title": ""},
    ),
    ("append", {"session_id": "s", "request_id": "r", "message": CompactedMessage(content="x")}),
    (
        "snapshot",
        {
            "session_id": "s",
            "compacted_message": CompactedMessage(content="c"),
            "compacted_through_sequence": 1,
            "expected_version": 3,
        },
    ),
    (
        "snapshot",
        {
            "session_id": "s",
            "compacted_message": CompactedMessage(content="c"),
            "compacted_through_sequence": 99,
            "expected_version": 0,
        },
    ),
    (
        "snapshot",
        {
            "session_id": "s",
            "compacted_message": CompactedMessage(content="c"),
            "compacted_through_sequence": 0,
            "expected_version": 0,
        },
    ),
    (
        "snapshot",
        {
            "session_id": "nobody",
            "compacted_message": CompactedMessage(content="c"),
            "compacted_through_sequence": 1,
            "expected_version": 0,
        },
    ),
]


async def outcome(storage: Any, method: str, arguments: dict[str, Any]) -> tuple[type, str] | str:
    try:
        await getattr(storage, method)(**arguments)
    except ValueError as exc:
        return ValueError, str(exc)
    return "no error"


async def test_errors_say_what_zett_says(tmp_path: Path) -> None:
    theirs = open_zett(tmp_path)
    ours = SQLiteSessionStorage(tmp_path / "ours.sqlite3")
    try:
        for storage in (theirs, ours):
            await storage.append("s", "r", UserMessage(content="first"))
        for method, arguments in BAD_CALLS:
            mine = await outcome(ours, method, arguments)
            assert mine == await outcome(theirs, method, arguments), (method, arguments)
            assert mine != "no error"
        # Nothing was written by a refused call.
        assert await ours.count_messages("s") == 1
        assert [s.session_id for s in await ours.list_sessions()] == ["s"]
    finally:
        await theirs.close()
        await ours.close()


async def test_refusals_are_typed(tmp_path: Path) -> None:
    async with SQLiteSessionStorage(tmp_path / "s.sqlite3") as storage:
        await storage.append("s", "r", UserMessage(content="x"))
        with pytest.raises(
            SnapshotConflictError, match=r"^Snapshot conflict; reload the session$"
        ) as info:
            await storage.snapshot("s", CompactedMessage(content="c"), 1, 2)
        assert (info.value.session_id, info.value.expected, info.value.actual) == ("s", 2, 0)
        with pytest.raises(UserError, match="zett-agent message"):
            await storage.append("s", "r", "plain text")  # type: ignore[arg-type]
        with pytest.raises(UserError, match="session_id must be a non-empty string"):
            await storage.append("", "r", UserMessage(content="x"))


async def test_a_later_append_with_a_title_sets_it_as_zetts_storage_does(tmp_path: Path) -> None:
    for storage in (open_zett(tmp_path), SQLiteSessionStorage(tmp_path / "ours.sqlite3")):
        try:
            await storage.append("s", "r", UserMessage(content="a"), title="First")
            await storage.append("s", "r", UserMessage(content="b"))
            await storage.append("s", "r", UserMessage(content="c"), agent_name="helper")
            summary = await storage.get_session("s")
            assert (summary.title, summary.agent_name, summary.message_count) == (
                "First",
                "helper",
                3,
            )
            await storage.append("s", "r", UserMessage(content="d"), title="Second")
            assert (await storage.get_session("s")).title == "Second"
        finally:
            await storage.close()


async def test_a_timing_with_an_offset_keeps_its_instant(tmp_path: Path) -> None:
    """zett stores an aware time's wall clock and reads it back as UTC (two hours off
    for +02:00); ours keeps the instant, and a naive time is UTC in both."""
    zurich = timezone(timedelta(hours=2))
    start = datetime(2026, 7, 1, 12, 0, tzinfo=zurich)
    naive = datetime(2026, 7, 1, 12, 0)
    async with SQLiteSessionStorage(tmp_path / "s.sqlite3") as storage:
        await storage.append("s", "r", UserMessage(content="x"), MessageTiming(start, start, 0))
        await storage.append("s", "r", UserMessage(content="y"), MessageTiming(naive, naive, 0))
        first, second = await storage.list_raw_messages("s")
    assert first.started_at == start and first.started_at.tzinfo == UTC
    assert second.started_at == naive.replace(tzinfo=UTC)


# -- stored values that are not what their column holds ------------------------------


@pytest.mark.parametrize("column", ["metadata_json", "tags_json"])
@pytest.mark.parametrize("stored", ["[]", '[["a", 1]]', "7", "not json"])
async def test_stored_metadata_that_is_not_an_object_is_refused_naming_the_row(
    column: str, stored: str, tmp_path: Path
) -> None:
    path = tmp_path / "s.sqlite3"
    async with SQLiteSessionStorage(path) as storage:
        await storage.append("s", "r", UserMessage(content="x"))
        await storage.append("s", "r", UserMessage(content="y"))
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE lovia_messages SET {column} = ? WHERE sequence = 2", (stored,))
    what = "metadata" if column == "metadata_json" else "tags"
    for opened in (SQLiteSessionStorage(path), CoreStorage(path)):
        async with opened as storage:
            with pytest.raises(StoredValueError, match=f"^Stored message {what}") as info:
                await storage.list_raw_messages("s")
            assert info.value.row == {"session_id": "s", "sequence": 2}
            assert info.value.column == column and "sequence=2" in str(info.value)
            assert isinstance(info.value, ValueError)  # what zett raises


# -- lovia's side of the same rows ---------------------------------------------------


async def test_lovias_rewind_may_cut_inside_a_zett_message(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    async with SQLiteSessionStorage(path) as storage:
        await storage.append("s", "r1", UserMessage(content="q"))
        turn = AssistantMessage(content="Two.", tool_calls=(ToolCall("a", "f"), ToolCall("b", "g")))
        await storage.append("s", "r1", turn)
        await storage.append("s", "r1", ToolMessage(tool_call_id="a", name="f", content="A"))
        await storage.append("s", "r1", ToolMessage(tool_call_id="b", name="g", content="B"))
        await storage.snapshot("s", CompactedMessage(content="all"), 4, 0)
    async with SQLiteSession(path) as session:
        before = await session.load("s")
        assert [e.type for e in before] == [
            "input",
            "assistant_text",
            "tool_call",
            "tool_call",
            "tool_result",
            "tool_result",
        ]
        # Keep the question, the text and the first call: its result goes, so it dangles too.
        assert await session.rewind("s", keep_entries=3) == 4
        assert await session.load("s") == before[:2]
    async with SQLiteSessionStorage(path) as storage:
        records = await storage.list_raw_messages("s")
        assert [r.message for r in records] == [
            UserMessage(content="q"),
            AssistantMessage(content="Two."),
        ]
        assert await storage.count_messages("s") == 2
        view = await storage.load("s")
        assert view.snapshot is None  # it covered what went
        assert await storage.append("s", "r2", UserMessage(content="again")) == 5


async def test_a_lovia_run_reads_as_zett_messages(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    async with SQLiteSession(path) as session:
        await session.append(
            "s", [user("q"), call("c1", "lookup"), result("c1", "ok"), say("a")], run_id="run"
        )
    async with SQLiteSessionStorage(path) as storage:
        records = await storage.list_raw_messages("s")
    assert [r.message for r in records] == [
        UserMessage(content="q"),
        AssistantMessage(tool_calls=(ToolCall("c1", "lookup", {}),)),
        ToolMessage(tool_call_id="c1", name="lookup", content="ok"),
        AssistantMessage(content="a"),
    ]
    assert [r.request_id for r in records] == ["run"] * 4
    assert all(r.duration_ns == 0 and r.metadata == {} for r in records)


# -- targets, attributes, the default location, the missing extra ----------------------


async def test_targets_and_the_attributes_zetts_storage_has(tmp_path: Path, pg_url: str) -> None:
    path = tmp_path / "deep" / "s.sqlite3"
    async with SQLiteSessionStorage(path) as storage:
        assert path.parent.is_dir()  # made at construction, as zett does
        assert storage.path == path and storage.dialect == "sqlite"
        assert storage.engine is storage.database.engine
        await storage.append("s", "r", UserMessage(content="x"))
    async with Database(path) as db:
        shared = SQLSessionStorage(db)
        assert shared.database is db
        await shared.close()  # borrowed: the Database stays open
        assert (await shared.list_raw_messages("s"))[0].message == UserMessage(content="x")
    async with SQLSessionStorage(pg_url) as server:
        assert server.path is None and server.dialect == "postgresql"
        assert await server.append("s", "r", UserMessage(content="x")) == 1
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(pg_url)
    try:
        async with SQLSessionStorage(engine) as on_engine:
            assert await on_engine.count_messages("s") == 1
        assert engine.pool is not None  # the caller's engine is left as it was
    finally:
        await engine.dispose()


async def test_the_default_file_is_ours_not_zetts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    async with SQLiteSessionStorage() as storage:
        assert storage.path == tmp_path / ".lovia-store" / "sessions.sqlite3"
        await storage.append("s", "r", UserMessage(content="x"))
    assert not (tmp_path / ".zett-agent").exists()


async def _zett_writes_its_default_file(home: Path) -> Path:
    """zett-agent's own storage, opened with no path as a zett user opens it."""
    theirs = ZettSQLiteStorage()
    await theirs.append("chat-1", "r", UserMessage(content="from zett"))
    await theirs.close()
    path = home / ".zett-agent" / "sessions.sqlite3"
    assert path.is_file()
    return path


def _opened_without_a_path(kind: str) -> Any:
    if kind == "SQLiteSessionExtension":
        return SQLiteSessionExtension()
    return SQLiteSessionStorage() if kind == "SQLiteSessionStorage" else SQLSessionStorage()


@pytest.mark.parametrize(
    "kind", ["SQLiteSessionStorage", "SQLSessionStorage", "SQLiteSessionExtension"]
)
async def test_no_path_beside_zetts_default_file_warns_naming_both_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A zett user switching with no path would see an empty history: the warning says
    where zett's is and how to open it, and zett's file is left as it was."""
    monkeypatch.setenv("HOME", str(tmp_path))
    zetts = await _zett_writes_its_default_file(tmp_path)
    ours = tmp_path / ".lovia-store" / "sessions.sqlite3"
    with pytest.warns(DefaultPathWarning) as caught:
        opened = _opened_without_a_path(kind)
    (warning,) = caught
    message = str(warning.message)
    assert str(zetts) in message and str(ours) in message and kind in message
    assert f"{kind}({str(zetts)!r})" in message  # the explicit path, ready to paste
    assert warning.filename == __file__  # it points at the caller's line
    await opened.close()
    theirs = ZettSQLiteStorage(zetts)  # not converted: zett-agent still reads it
    assert [r.message for r in await theirs.list_raw_messages("chat-1")] == [
        UserMessage(content="from zett")
    ]
    await theirs.close()
    async with SQLiteSessionStorage(zetts) as named:  # what the warning says to do
        assert [r.message for r in await named.list_raw_messages("chat-1")] == [
            UserMessage(content="from zett")
        ]


async def test_no_warning_when_ours_holds_sessions_or_a_path_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DefaultPathWarning)
        async with SQLiteSessionStorage() as storage:  # no zett file: nothing to say
            assert await storage.list_sessions() == []
        await _zett_writes_its_default_file(tmp_path)
        async with SQLiteSessionStorage(tmp_path / "named.sqlite3"):  # a path: the user chose
            pass
    with pytest.warns(DefaultPathWarning):  # ours exists but is empty: still worth saying
        storage = SQLiteSessionStorage()
    async with storage:
        await storage.append("s", "r", UserMessage(content="ours"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DefaultPathWarning)
        async with SQLiteSessionStorage() as storage:  # ours has a history: it is the one
            assert await storage.count_messages("s") == 1


def test_a_blocking_view_as_zetts_storage_has(tmp_path: Path) -> None:
    with SQLiteSessionStorage(tmp_path / "s.sqlite3").sync() as storage:
        assert storage.append("s", "r", UserMessage(content="x")) == 1
        assert storage.count_messages("s") == 1
        storage.close()


def test_without_zett_agent_the_import_says_which_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['zett_agent'] = None\n"
        "from lovia_store import MissingDriverError\n"
        "try:\n"
        "    import lovia_store.integrations.zett\n"
        "except MissingDriverError as exc:\n"
        "    assert isinstance(exc, ImportError)\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'lovia-store[zett]'" in out.stdout


async def test_a_page_at_an_offset_of_an_unknown_session_is_empty(tmp_path: Path) -> None:
    """The one-statement offset page read OFFSET NULL for a session with no row, which
    SQLite refuses ("datatype mismatch"); found by the differential test."""
    path = tmp_path / "s.sqlite3"
    async with SQLiteSessionStorage(path) as storage, CoreStorage(path) as core:
        assert await storage.list_raw_messages("nobody", offset=1) == []
        assert await core.list_raw_messages("nobody", limit=1, offset=2) == []


async def test_a_rewind_inside_the_last_message_keeps_its_prefix(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    async with SQLiteSessionStorage(path) as storage:
        await storage.append("s", "r", UserMessage(content="q"))
        await storage.append(
            "s",
            "r",
            AssistantMessage(content="", reasoning="hm", tool_calls=(ToolCall("a", "f"),)),
        )
    async with SQLiteSession(path) as session:
        assert [e.type for e in await session.load("s")] == ["input", "reasoning", "tool_call"]
        assert await session.rewind("s", keep_entries=2) == 1  # the call, dangling
        assert [e.type for e in await session.load("s")] == ["input", "reasoning"]
        assert await session.rewind("s", keep_entries=5) == 0
    async with SQLiteSessionStorage(path) as storage:
        records = await storage.list_raw_messages("s")
        assert records[1].message == AssistantMessage(reasoning="hm")
        assert await storage.count_messages("s") == 2


async def test_parent_folders_are_created_as_zett_documents(tmp_path: Path) -> None:
    """zett: "Parent directories are created during construction" (and so here)."""
    from zett_agent.storage import SQLiteSessionStorage as ZettStorage

    for storage_class, folder in ((ZettStorage, "theirs"), (SQLiteSessionStorage, "ours")):
        path = tmp_path / folder / "a" / "b" / "sessions.sqlite3"
        storage = storage_class(path)
        assert path.parent.is_dir()
        try:
            await storage.append("s", "q1", UserMessage(content="hi"))
            assert await storage.count_messages("s") == 1
        finally:
            await storage.close()
