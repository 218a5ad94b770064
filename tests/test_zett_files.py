"""Files zett-agent wrote, opened through ``lovia_store.integrations.zett``.

The shared fixture (and the seeded holdout file, when there is one) and a
file zett-agent 0.2.1 writes during the test: every session, raw message,
snapshot and view reads back equal to what zett-agent's own storage reads
from an untouched copy, ids and timestamps included. lovia's view of the
same sessions is tool-consistent: each tool result follows its call, the two
calls of one assistant message included (``call-weather-1`` with
``call-file-1``, and ``call-search-9``, which it lost before revision 0006).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from zett_agent.agent import Agent, AgentRunConfig
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.sql import SQLSessionExtension
from zett_agent.messages import (
    AgentMessage,
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    ImageDetail,
    ImageUrlSource,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.stop import StopInfo, StopReason
from zett_agent.storage import SQLiteSessionStorage as ZettStorage

from backends import LEGACY
from lovia_store import Database, SQLiteSession, ToolCallEntry, ToolResultEntry
from lovia_store.db.schema import migrate
from lovia_store.integrations.zett import SQLiteSessionStorage
from zett_support import ScriptedModel, weather

ROOT = "01940000-0000-7000-8000-00000000a001"
CHILD = "01940000-0000-7000-8000-00000000a002"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def zett_files() -> list[Path]:
    holdouts = sorted(LEGACY.glob("zett-0.2.1*.holdout.sqlite3"))
    return [LEGACY / "zett-0.2.1.sqlite3", *holdouts]


def fields(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


async def read_everything(storage: Any) -> dict[str, Any]:
    """What a zett storage says about every session: summaries, records, views."""
    sessions = await storage.list_sessions(limit=10_000)
    out: dict[str, Any] = {"sessions": sessions}
    for summary in sessions:
        sid = summary.session_id
        records = await storage.list_raw_messages(sid)
        view = await storage.load(sid)
        out[sid] = {
            "summary": await storage.get_session(sid),
            "count": await storage.count_messages(sid),
            "records": [fields(r) for r in records],
            "view": (view.parent_session_id, view.session_type, view.title, view.agent_name),
            "snapshot": view.snapshot,
            "tail": [fields(r) for r in view.raw_tail],
            "messages": view.messages,
            "pages": [
                [r.sequence for r in await storage.list_raw_messages(sid, limit=3, offset=o)]
                for o in range(0, len(records) + 1, 3)
            ],
        }
    return out


async def assert_reads_as_zett_does(path: Path, tmp_path: Path) -> None:
    untouched = tmp_path / f"zett-{path.name}"
    ours = tmp_path / f"ours-{path.name}"
    shutil.copyfile(path, untouched)
    shutil.copyfile(path, ours)
    theirs_storage = ZettStorage(untouched)
    try:
        theirs = await read_everything(theirs_storage)
    finally:
        await theirs_storage.close()
    async with SQLiteSessionStorage(ours) as storage:
        mine = await read_everything(storage)
    assert mine.keys() == theirs.keys()
    for key in theirs:
        assert mine[key] == theirs[key], key
    await assert_tool_consistent(ours, [s.session_id for s in theirs["sessions"]])


async def assert_tool_consistent(path: Path, session_ids: list[str]) -> list[list[Any]]:
    views = []
    async with SQLiteSession(path) as session:
        for sid in session_ids:
            entries = await session.load(sid)
            called: set[str] = set()
            for entry in entries:
                if isinstance(entry, ToolCallEntry):
                    called.add(entry.call_id)
                elif isinstance(entry, ToolResultEntry):
                    assert entry.call_id in called, (sid, entry.call_id)
            segments = await session.segments(sid)
            assert [e for s in segments for e in s.entries] == entries
            views.append(entries)
    return views


@pytest.mark.parametrize("path", zett_files(), ids=lambda p: p.name)
async def test_a_shared_zett_file_reads_as_zett_reads_it(path: Path, tmp_path: Path) -> None:
    await assert_reads_as_zett_does(path, tmp_path)


async def test_the_calls_the_fixture_readme_names_are_in_lovias_view(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    root, child = await assert_tool_consistent(path, [ROOT, CHILD])
    calls = [e.call_id for e in root if isinstance(e, ToolCallEntry)]
    assert calls == ["call-weather-1", "call-file-1", "call-forecast-1", "call-broken-1"]
    assert [e.call_id for e in child if isinstance(e, ToolCallEntry)] == ["call-search-9"]
    # Message 3 is reasoning, text, then its two calls, in one Raw Log row.
    assert [e.type for e in root[2:6]] == ["reasoning", "assistant_text", "tool_call", "tool_call"]
    assert root[2].provider is None  # zett's unsigned text: no adapter replays it as its own
    async with SQLiteSessionStorage(path) as storage:
        assert await storage.count_messages(ROOT) == 10


async def test_a_file_adopted_before_revision_0006_is_projected_again(
    legacy_copy: Callable[[str], Path],
) -> None:
    path = legacy_copy("zett-0.2.1.sqlite3")
    async with Database(path) as db:
        await migrate(db, "0005")  # adopted the way lovia-store did before this revision
    with sqlite3.connect(path) as conn:
        (before,) = conn.execute(
            "SELECT entry_json FROM lovia_messages WHERE session_id = ? AND sequence = 2",
            (CHILD,),
        ).fetchone()
    assert json.loads(before)["type"] == "assistant_text"  # its call was not shown
    async with SQLiteSession(path) as session:  # opening brings it to head: 0006 runs
        entries = await session.load(CHILD)
    assert [e.type for e in entries] == [
        "input",
        "assistant_text",
        "tool_call",
        "tool_result",
        "assistant_text",
    ]


# -- a file zett-agent writes during the test ----------------------------------------


def timing(start: datetime, *, streamed: bool) -> MessageTiming:
    spans: dict[str, Any] = {}
    if streamed:
        spans = {
            "reasoning_started_at": start + timedelta(milliseconds=5),
            "reasoning_completed_at": start + timedelta(milliseconds=90),
            "reasoning_duration_ns": 85_000_000,
            "content_started_at": start + timedelta(milliseconds=95),
            "content_completed_at": start + timedelta(milliseconds=300),
            "content_duration_ns": 205_000_000,
        }
    return MessageTiming(
        started_at=start,
        completed_at=start + timedelta(milliseconds=301),
        duration_ns=301_000_123,
        **spans,
    )


async def write_with_zett(path: Path) -> None:
    """zett-agent's Agent, then every message kind appended by hand, on zett's storage."""
    model = ScriptedModel(
        AssistantMessage(
            tool_calls=(
                ToolCall("c-1", "weather", {"city": "Zürich"}),
                ToolCall("c-2", "weather", {"city": "東京"}),
            ),
            provider="openai",
            model="gpt-test",
        ),
        AssistantMessage(content="Rain in Zürich and 東京."),
    )
    persistence = SQLSessionExtension(ZettStorage(path))
    agent = await Agent.create(
        model,
        config=AgentRunConfig(session_id="agent-run"),
        tools=[weather],
        extensions=[persistence],
    )
    await agent.run("Weather?", metadata={"user": {"id": 7, "roles": ["a"]}}, tags={"k": True})
    storage = persistence.storage
    start = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    await storage.create_session(session_id="by-hand", title="  Hand-written  ", session_type=4)
    messages: list[tuple[Any, Any]] = [
        (SystemMessage(content="Be exact.", include_in_messages=True), None),
        (
            UserMessage(
                content=[
                    TextContent("What is in this image?"),
                    ImageContent(ImageBytesSource(PNG, "image/png"), ImageDetail.HIGH, "a dot"),
                    ImageContent(ImageUrlSource("https://example.com/a.jpg")),
                ],
                attributes={"client": "web", "nested": {"x": [1, 2.5, None]}},
            ),
            None,
        ),
        (
            AssistantMessage(
                content="A dot.",
                reasoning="It is one pixel.",
                tool_calls=(ToolCall("c-9", "zoom", {"level": 3}, error=None),),
                provider="anthropic",
                model="claude-test",
                replay_blocks=({"type": "thinking", "signature": "c2ln", "thinking": "…"},),
                stop=StopInfo(StopReason.MAX_OUTPUT, raw="max_tokens", detail={"n": 1}),
            ),
            ModelUsage(11, 5, 3, 2, cache_reported=False, reasoning_tokens=4),
        ),
        (
            ToolMessage(
                tool_call_id="c-9",
                name="zoom",
                content=[
                    TextContent("zoomed"),
                    ImageContent(ImageUrlSource("data:image/png;base64,AA==")),
                ],
                success=False,
            ),
            None,
        ),
        (AgentMessage(content="Continue.", persist=True, include_in_messages=False), None),
        (AssistantMessage(tool_calls=(ToolCall("c-10", "zoom", error="bad JSON"),)), None),
    ]
    for n, (message, usage) in enumerate(messages):
        await storage.append(
            "by-hand",
            f"req-{n // 3}",
            message,
            timing(start + timedelta(seconds=n), streamed=isinstance(message, AssistantMessage)),
            title="Hand-written" if n == 0 else None,
            metadata={"n": n, "ünï": "cödé"},
            tags={"kind": type(message).__name__},
            usage=usage,
        )
    await storage.append("child", "req", UserMessage(content="hi"), parent_session_id="by-hand")
    await storage.snapshot("by-hand", CompactedMessage(content="Earlier: a dot."), 3, 0)
    await storage.snapshot(
        "by-hand", CompactedMessage(content=[TextContent("Later"), TextContent("still")]), 5, 1
    )
    await persistence.close()


async def test_a_file_zett_agent_writes_now_reads_back_equal(tmp_path: Path) -> None:
    path = tmp_path / "written-by-zett.sqlite3"
    await write_with_zett(path)
    await assert_reads_as_zett_does(path, tmp_path)
    async with SQLiteSessionStorage(tmp_path / f"ours-{path.name}") as storage:
        records = await storage.list_raw_messages("by-hand")
        assert records[2].message.stop == StopInfo(
            StopReason.MAX_OUTPUT, raw="max_tokens", detail={"n": 1}
        )
        assert records[1].message.content[1].source.data == PNG
        assert (records[2].input_tokens, records[2].reasoning_tokens) == (11, 4)
        assert records[2].reasoning_duration_ns == 85_000_000
        # The same file goes on through our storage: the next sequence is 7.
        assert await storage.append("by-hand", "r", UserMessage(content="more")) == 7
