"""zett-agent's own ``Agent`` end to end on our storage, SQLite, PostgreSQL and MariaDB.

Each scenario runs twice with the same scripted model: on zett-agent's own
``SQLiteSessionStorage`` and on ours (``lovia_store.integrations.zett``).
What the model is sent and what the Raw Log holds must be the same, ids and
times aside. Then lovia's view of our copy must be tool-consistent: every
tool result comes after its call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from zett_agent.agent import Agent, AgentRunConfig
from zett_agent.extensions.compaction import CompactedMessage, CompactionExtension
from zett_agent.extensions.session_persistence import SessionPersistenceExtension
from zett_agent.extensions.sql import SQLSessionExtension
from zett_agent.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

from lovia_store import SQLSession, ToolCallEntry, ToolResultEntry
from zett_support import (
    KINDS,
    Gate,
    ScriptedModel,
    count_tokens,
    open_ours,
    open_zett,
    our_target,
    record_view,
    weather,
)

SID = "chat-1"
Opener = Callable[[], Any]


def config(request_id: str) -> AgentRunConfig:
    return AgentRunConfig(session_id=SID, request_id=request_id)


async def lovia_view_is_tool_consistent(target: str) -> list[Any]:
    async with SQLSession(target) as session:
        entries = await session.load(SID)
        segments = await session.segments(SID)
    called: set[str] = set()
    for entry in entries:
        if isinstance(entry, ToolCallEntry):
            called.add(entry.call_id)
        if isinstance(entry, ToolResultEntry):
            assert entry.call_id in called, f"tool result {entry.call_id} has no call before it"
    assert [entry for segment in segments for entry in segment.entries] == entries
    return entries


# -- scenario: two calls in one message, then a second Agent restores it ----------


async def tools_then_restore(open_storage: Opener) -> tuple[list[Any], list[Any]]:
    first = ScriptedModel(
        AssistantMessage(
            content="Checking both cities.",
            reasoning="Two cities: two calls.",
            tool_calls=(
                ToolCall("call-zrh", "weather", {"city": "Zürich"}),
                ToolCall("call-brn", "weather", {"city": "Bern"}),
            ),
            provider="anthropic",
            model="claude-test",
            replay_blocks=({"type": "thinking", "thinking": "Two", "signature": "c2ln"},),
        ),
        AssistantMessage(content="Rain in both, 7 °C."),
    )
    persistence = SQLSessionExtension(open_storage())
    agent = await Agent.create(
        first, config=config("req-1"), tools=[weather], extensions=[persistence]
    )
    await agent.run(
        "Weather in Zürich and Bern?",
        config=config("req-1"),
        metadata={"source": "test", "n": 1},
        tags={"topic": "weather"},
    )
    await persistence.close()

    second = ScriptedModel(AssistantMessage(content="Tomorrow: sun."))
    persistence = SQLSessionExtension(open_storage())
    agent = await Agent.create(second, config=config("req-2"), extensions=[persistence])
    answer = await agent.run("And tomorrow?", config=config("req-2"))
    assert answer.content == "Tomorrow: sun."
    records = await persistence.list_raw_messages(SID)
    await persistence.close()
    return records, second.requests


@pytest.mark.parametrize("kind", KINDS)
async def test_two_tool_calls_round_trip_and_a_second_agent_restores_them(
    kind: str, tmp_path: Path
) -> None:
    theirs, their_requests = await tools_then_restore(lambda: open_zett(tmp_path))
    async with our_target(kind, tmp_path) as target:
        ours, our_requests = await tools_then_restore(lambda: open_ours(target))
        entries = await lovia_view_is_tool_consistent(target)

    assert [record_view(r) for r in ours] == [record_view(r) for r in theirs]
    assert [r.sequence for r in ours] == list(range(1, 10))
    assert [type(r.message) for r in ours] == [
        SystemMessage,
        UserMessage,
        AssistantMessage,
        ToolMessage,
        ToolMessage,
        AssistantMessage,
        SystemMessage,
        UserMessage,
        AssistantMessage,
    ]
    calls = ours[2].message.tool_calls
    assert [c.id for c in calls] == ["call-zrh", "call-brn"]
    assert ours[2].input_tokens == 120 and ours[2].cache_read_tokens == 40
    assert (ours[1].metadata, ours[1].tags) == ({"source": "test", "n": 1}, {"topic": "weather"})
    # The second Agent was sent the first request's whole dialogue, restored.
    sent = [m for m in our_requests[0].messages if not isinstance(m, SystemMessage)]
    assert sent == [r.message for r in ours[1:6]] + [UserMessage(content="And tomorrow?")]
    assert our_requests[0].messages == their_requests[0].messages
    assert [e.call_id for e in entries if isinstance(e, ToolCallEntry)] == ["call-zrh", "call-brn"]


# -- scenario: compaction writes a snapshot, the next request restores from it ---------


def long_reply(n: int) -> AssistantMessage:
    return AssistantMessage(content=f"Answer {n}: " + "the forecast says rain, " * 12)


async def compacting(open_storage: Opener) -> tuple[list[Any], Any, list[Any]]:
    model = ScriptedModel(*(long_reply(n) for n in range(1, 5)))
    summarizer = ScriptedModel(AssistantMessage(content="The user asked about rain; it rains."))
    persistence = SessionPersistenceExtension(open_storage())
    compaction = CompactionExtension(
        summarizer, max_tokens=260, keep_recent_tokens=60, count_tokens=count_tokens
    )
    agent = await Agent.create(model, config=config("r1"), extensions=[persistence, compaction])
    for n in range(1, 4):
        await agent.run(f"Question {n} about the rain?", config=config(f"r{n}"))
    view = await persistence.storage.load(SID)
    assert view.snapshot is not None, "the third request's context was over budget"
    assert len(summarizer.requests) == 1

    # A new Agent and a new storage object: the next request restores the snapshot.
    restore = ScriptedModel(long_reply(9))
    persistence2 = SessionPersistenceExtension(open_storage())
    agent = await Agent.create(restore, config=config("r9"), extensions=[persistence2])
    await agent.run("One more question?", config=config("r9"))
    records = await persistence2.storage.list_raw_messages(SID)
    for storage in (persistence.storage, persistence2.storage):
        await storage.close()
    return records, view, restore.requests[0].messages


@pytest.mark.parametrize("kind", KINDS)
async def test_compaction_writes_a_snapshot_and_the_next_request_restores_from_it(
    kind: str, tmp_path: Path
) -> None:
    theirs, their_view, their_sent = await compacting(lambda: open_zett(tmp_path))
    async with our_target(kind, tmp_path) as target:
        ours, our_view, our_sent = await compacting(lambda: open_ours(target))
        await lovia_view_is_tool_consistent(target)

    assert [record_view(r) for r in ours] == [record_view(r) for r in theirs]
    snapshot = our_view.snapshot
    assert snapshot.version == 1
    assert isinstance(snapshot.compacted_message, CompactedMessage)
    assert snapshot.compacted_message == their_view.snapshot.compacted_message
    assert snapshot.compacted_through_sequence == their_view.snapshot.compacted_through_sequence
    assert [r.sequence for r in our_view.raw_tail] == [r.sequence for r in their_view.raw_tail]
    # Sent after the restore: instructions, the summary, then the tail after its boundary.
    assert our_sent == their_sent
    assert isinstance(our_sent[0], SystemMessage)
    assert our_sent[1] == snapshot.compacted_message
    tail = [r.message for r in our_view.raw_tail if r.message.include_in_messages]
    assert list(our_sent[2:]) == [*tail, UserMessage(content="One more question?")]


# -- scenario: a tool turn is cancelled, then the session carries on -------------------


async def cancelled_then_continued(open_storage: Opener) -> tuple[list[Any], list[Any]]:
    gate = Gate()
    model = ScriptedModel(
        AssistantMessage(
            tool_calls=(
                ToolCall("call-report", "slow_report", {"topic": "Q3"}),
                ToolCall("call-bsl", "weather", {"city": "Basel"}),
            )
        ),
        AssistantMessage(content="The report was cancelled; Basel has rain."),
    )
    persistence = SessionPersistenceExtension(open_storage())
    agent = await Agent.create(
        model, config=config("r1"), tools=[gate.tool, weather], extensions=[persistence]
    )
    running = asyncio.create_task(agent.run("Q3 report and Basel weather?", config=config("r1")))
    await asyncio.wait_for(gate.started.wait(), 60)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await agent.run("Go on without the report.", config=config("r2"))
    records = await persistence.storage.list_raw_messages(SID)
    await persistence.storage.close()
    return records, model.requests


@pytest.mark.parametrize("kind", KINDS)
async def test_a_cancelled_tool_turn_is_closed_and_the_session_continues(
    kind: str, tmp_path: Path
) -> None:
    theirs, their_requests = await cancelled_then_continued(lambda: open_zett(tmp_path))
    async with our_target(kind, tmp_path) as target:
        ours, our_requests = await cancelled_then_continued(lambda: open_ours(target))
        await lovia_view_is_tool_consistent(target)

    assert [record_view(r) for r in ours] == [record_view(r) for r in theirs]
    results = [r.message for r in ours if isinstance(r.message, ToolMessage)]
    assert {m.tool_call_id for m in results} == {"call-report", "call-bsl"}
    assert not any(m.success for m in results)
    assert our_requests[1].messages == their_requests[1].messages
    continued = [m for m in our_requests[1].messages if not isinstance(m, SystemMessage)]
    assert continued[-1] == UserMessage(content="Go on without the report.")
    assert len(continued[1].tool_calls) == 2 and continued[2:4] == results


async def test_zett_s_readme_line_is_one_import_away(tmp_path: Path) -> None:
    """``SQLiteSessionExtension("sessions.sqlite")``, zett's README line, from our module:
    a zett Agent restores the first request's dialogue from it, as from zett's own."""
    from zett_agent.extensions.sqlite import SQLiteSessionExtension as Theirs

    from lovia_store.integrations.zett import SQLiteSessionExtension as Ours
    from lovia_store.integrations.zett import SQLiteSessionStorage

    seen = []
    for extension in (Theirs, Ours):
        persistence = extension(tmp_path / extension.__module__ / "sessions.sqlite")
        agent = await Agent.create(
            ScriptedModel(AssistantMessage(content="Noted.")),
            config=config("req-1"),
            extensions=[persistence],
        )
        await agent.run("My project is Atlas.", config=config("req-1"))
        await persistence.close()
        second = ScriptedModel(AssistantMessage(content="Atlas."))
        persistence = extension(tmp_path / extension.__module__ / "sessions.sqlite")
        agent = await Agent.create(second, config=config("req-2"), extensions=[persistence])
        await agent.run("What is my project?", config=config("req-2"))
        seen.append([m for m in second.requests[0].messages if not isinstance(m, SystemMessage)])
        if extension is Ours:
            assert isinstance(persistence.storage, SQLiteSessionStorage)
        await persistence.close()
    assert seen[0] == seen[1] and len(seen[1]) == 3
