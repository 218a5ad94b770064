"""``fork`` beyond the shipped contract: what only the SQL stores hold.

Raw Log rows copied whole and numbered 1..n, snapshots within the kept prefix, a
zett-agent session's envelopes kept byte for byte, the origin named on the Raw Log
summary, refusals that leave every table as it was, and forks racing appends to
the origin. Every SQL backend (zett's own Agent on SQLite, PostgreSQL and MariaDB).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from lovia.transcript import AssistantTextEntry, InputEntry, ToolCallEntry, ToolResultEntry
from sqlalchemy import select
from zett_agent.agent import Agent, AgentRunConfig
from zett_agent.extensions.compaction import CompactedMessage as ZettCompacted
from zett_agent.extensions.sql import SQLSessionExtension
from zett_agent.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage

from backends import Backend
from helpers import a_run, call, result, say, user
from lovia_store import Database, ForkOrigin, MessageTiming, SQLSession, Usage, UserError
from lovia_store.db.tables import messages, session_runs, sessions, snapshots
from lovia_store.integrations import lovia as lovia_integration
from lovia_store.sessions.raw_log.models import CompactedMessage
from zett_support import KINDS, ScriptedModel, open_ours, our_target, weather

T0 = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
TABLES = (sessions, messages, session_runs, snapshots)


async def table_rows(target: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the session tables, in key order: the database as a value."""
    async with Database(target) as database:

        def work(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
            return {
                table.name: [
                    tuple(row)
                    for row in conn.execute(
                        select(table).order_by(*table.primary_key.columns)
                    ).all()
                ]
                for table in TABLES
            }

        return await database.read(work)


def record_fields(record: Any) -> dict[str, Any]:
    """A record's stored fields, its id and session aside (the fork's own)."""
    return record.model_dump(exclude={"id", "session_id"})


async def fill_raw_log(storage: Any) -> None:
    """Messages one by one, with everything the Raw Log stores beside an entry."""
    for n, entry in enumerate([user("q"), call("c1"), result("c1", "out"), say("a"), user("q2")]):
        start = T0 + timedelta(seconds=n)
        await storage.append(
            "s",
            f"req-{n // 2}",
            entry,
            MessageTiming(
                started_at=start, completed_at=start + timedelta(seconds=1), duration_ns=10**9 + n
            ),
            title="Origin" if n == 0 else None,
            agent_name="helper" if n == 0 else None,
            metadata={"n": n, "deep": {"ü": [True, 1.5, None]}},
            tags={"kind": entry.type},
            usage=Usage(input_tokens=10 + n, output_tokens=n)
            if entry.type == "assistant_text"
            else None,
        )


async def test_raw_log_rows_are_copied_whole_and_numbered_from_one(sql_backend: Backend) -> None:
    async with sql_backend.storage() as storage:
        await fill_raw_log(storage)
        await storage.snapshot("s", CompactedMessage(content="first two"), 2, 0)
        await storage.snapshot("s", CompactedMessage(content="all five"), 5, 1)
    async with sql_backend.session() as session:
        assert isinstance(session, SQLSession)
        await session.append("s", a_run("x"), run_id="rx")  # sequences 6..9
        # An origin with a gap: the rewind drops the dangling call at 7 (and the tail).
        assert await session.rewind("s", keep_entries=7) == 3
        await session.append("s", [user("after")], run_id="ry")  # sequence 10
        origin = await session.segments("s")
    async with sql_backend.storage() as storage:
        before = await storage.list_raw_messages("s")
        assert [r.sequence for r in before] == [1, 2, 3, 4, 5, 6, 10]
        summary = await storage.fork("s", "f", keep_entries=7)
        assert (summary.session_id, summary.message_count) == ("f", 7)
        assert (summary.forked_from_session_id, summary.forked_at_entry) == ("s", 7)
        assert (summary.title, summary.agent_name) == ("Origin", "helper")
        assert await storage.get_session("f") == summary
        assert (await storage.get_session("s")).forked_from_session_id is None  # type: ignore[union-attr]
        copied = await storage.list_raw_messages("f")
        assert [r.sequence for r in copied] == list(range(1, 8))
        assert [record_fields(r) | {"sequence": 0} for r in copied] == [
            record_fields(r) | {"sequence": 0} for r in before
        ]
        # Both snapshots are within the kept prefix: their versions stay.
        view = await storage.load("f")
        assert view.snapshot is not None and view.snapshot.version == 2
        assert view.snapshot.compacted_through_sequence == 5
        assert [r.sequence for r in view.raw_tail] == [6, 7]
        # The next message continues at 8; the origin goes on at 11.
        assert await storage.append("f", "req-f", say("branch")) == 8
        assert await storage.append("s", "req-s", say("trunk")) == 11
        # Forked inside the first five, only the snapshot within the kept rows stays.
        short = await storage.fork("s", "g", keep_entries=3)
        assert short.message_count == 3
        view = await storage.load("g")
        assert view.snapshot is not None and view.snapshot.version == 1
        assert [r.sequence for r in view.raw_tail] == [3]
        # A cut between a call and its result (in another request) is a rewind's cut.
        assert (await storage.fork("s", "h", keep_entries=2)).message_count == 2
        await storage.fork("s", "w", keep_entries=7)
    async with sql_backend.session() as session:
        assert isinstance(session, SQLSession)
        kept = [e for s in origin for e in s.entries]
        assert await session.load("f") == [*kept, say("branch")]
        assert await session.fork_origin("g") == ForkOrigin("s", 3)
        assert await session.load("g") == kept[:3]
        await session.rewind("w", keep_entries=2)
        assert await session.segments("h") == await session.segments("w")
        assert await session.load("h") == [user("q"), call("c1")]
        assert [s.entries for s in await session.segments("s")] == [
            *[s.entries for s in origin],
            [say("trunk")],
        ]


async def test_a_refused_fork_leaves_every_table_as_it_was(sql_backend: Backend) -> None:
    async with sql_backend.session() as session:
        assert isinstance(session, SQLSession)
        await session.append("s", a_run("1"), run_id="r1", meta={"m": 1})
        await session.append("t", [user("t")], run_id="r1")
    assert sql_backend.target is not None
    before = await table_rows(sql_backend.target)
    async with sql_backend.session() as session:
        assert isinstance(session, SQLSession)
        for origin, new, keep in (("nobody", "f", 0), ("s", "t", 1), ("s", "f", 5), ("s", "s", 0)):
            with pytest.raises(UserError):
                await session.fork(origin, new, keep_entries=keep)
    async with sql_backend.storage() as storage:
        with pytest.raises(UserError, match="already exists"):
            await storage.fork("s", "t", keep_entries=4)
        with pytest.raises(UserError, match="past the end"):
            await storage.fork("s", "f", keep_entries=9)
    assert await table_rows(sql_backend.target) == before


async def test_forks_racing_appends_to_the_origin_copy_a_consistent_prefix(
    sql_backend: Backend,
) -> None:
    async with sql_backend.session() as session:
        assert isinstance(session, SQLSession)
        for n in range(10):
            await session.append("s", a_run(str(n)), run_id=f"r{n}")
        keeps = [4 * n + (n % 2) for n in range(10)]  # run boundaries, and one entry past

        async def appends() -> None:
            for n in range(10, 30):
                await session.append("s", a_run(str(n)), run_id=f"r{n}")

        async def forks() -> list[int]:
            return [await session.fork("s", f"f{k}", keep_entries=k) for k in keeps]

        _, held = await asyncio.gather(appends(), forks())
        everything = await session.load("s")
        assert everything == [e for n in range(30) for e in a_run(str(n))]
        assert held == keeps
        for keep in keeps:
            assert await session.load(f"f{keep}") == everything[:keep]
    async with sql_backend.storage() as storage:
        for keep in keeps:
            copied = await storage.list_raw_messages(f"f{keep}")
            assert [r.sequence for r in copied] == list(range(1, keep + 1))
        assert [r.sequence for r in await storage.list_raw_messages("s")] == list(range(1, 121))


async def test_rewinds_racing_forks_of_one_session_never_deadlock(
    sql_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Both take the session's row first, then its rows: one waits for the other (no
    deadlock for the server to break and lovia-store to retry), and every fork copies
    a prefix of what the origin held at that moment."""
    caplog.set_level(logging.DEBUG, logger="lovia_store")
    async with sql_backend.session() as session:
        assert isinstance(session, SQLSession)
        for n in range(40):
            await session.append("s", a_run(str(n)), run_id=f"r{n}")

        async def rewinds() -> None:
            for keep in range(156, 100, -8):
                await session.rewind("s", keep_entries=keep)

        async def forks(name: str) -> None:
            for n in range(7):
                await session.fork("s", f"{name}{n}", keep_entries=4 * (10 + n))

        await asyncio.gather(rewinds(), forks("a"), forks("b"), forks("c"))
        assert [r.message for r in caplog.records if "eadlock" in r.message] == []
        origin = await session.load("s")
        assert origin == [e for n in range(27) for e in a_run(str(n))]
        for name in "abc":
            for n in range(7):
                assert await session.load(f"{name}{n}") == origin[: 4 * (10 + n)]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_fork_of_a_zett_session_keeps_its_envelopes_and_runs_on(
    kind: str, tmp_path: Path
) -> None:
    model = ScriptedModel(
        AssistantMessage(
            content="Checking.",
            reasoning="One call.",
            tool_calls=(ToolCall("call-zrh", "weather", {"city": "Zürich"}),),
            provider="anthropic",
            model="claude-test",
        ),
        AssistantMessage(content="Rain, 7 °C."),
    )
    config = AgentRunConfig(session_id="chat", request_id="req-1")
    async with our_target(kind, tmp_path) as target:
        persistence = SQLSessionExtension(open_ours(target))
        agent = await Agent.create(model, config=config, tools=[weather], extensions=[persistence])
        await agent.run("Weather in Zürich?", config=config)
        origin = await persistence.list_raw_messages("chat")
        await persistence.close()
        zett = open_ours(target)
        await zett.snapshot("chat", ZettCompacted(content="asked"), 2, 0)
        await zett.close()
        async with SQLSession(target) as session:
            entries = await session.load("chat")
            assert await session.fork("chat", "branch", keep_entries=len(entries)) == len(entries)
        rows = await table_rows(target)
        envelopes = {
            (row[1], row[2]): row[8] for row in rows["lovia_messages"]
        }  # (session, sequence) -> envelope_json
        assert all(
            envelopes[("branch", r.sequence)] == envelopes[("chat", r.sequence)] for r in origin
        )
        assert all(envelopes[("chat", r.sequence)] is not None for r in origin)

        zett = open_ours(target)
        copied = await zett.list_raw_messages("branch")
        assert [r.message for r in copied] == [r.message for r in origin]
        assert [(r.metadata, r.tags, r.input_tokens) for r in copied] == [
            (r.metadata, r.tags, r.input_tokens) for r in origin
        ]
        view = await zett.load("branch")
        assert view.snapshot is not None and view.snapshot.compacted_through_sequence == 2
        await zett.close()

        # zett's Agent continues the branch; the origin is untouched.
        follow = ScriptedModel(AssistantMessage(content="Sun tomorrow."))
        branch = AgentRunConfig(session_id="branch", request_id="req-2")
        persistence = SQLSessionExtension(open_ours(target))
        agent = await Agent.create(follow, config=branch, extensions=[persistence])
        assert (await agent.run("And tomorrow?", config=branch)).content == "Sun tomorrow."
        assert [r.message for r in await persistence.list_raw_messages("chat")] == [
            r.message for r in origin
        ]
        after = await persistence.list_raw_messages("branch")
        await persistence.close()
        assert [r.message for r in after[: len(origin)]] == [r.message for r in origin]
        assert isinstance(after[-1].message, AssistantMessage)
        assert UserMessage(content="And tomorrow?") in [r.message for r in after]
        assert ToolMessage in {type(r.message) for r in after}


async def test_lovia_s_session_forks_with_lovia_s_entries(sql_backend: Backend) -> None:
    assert sql_backend.target is not None
    run = [
        InputEntry("user", "look it up"),
        ToolCallEntry("c1", "search", "{}"),
        ToolResultEntry("c1", "found", raw={"n": 1}),
        AssistantTextEntry("here"),
    ]
    async with lovia_integration.SQLSession(sql_backend.target) as session:
        await session.append("s", run, run_id="r1", meta={"m": 1})
        await session.append("s", run, run_id="r2", meta={"m": 2})
        # Cut between r2's call and its result: the call goes, r2 keeps its id, not its meta.
        assert await session.fork("s", "f", keep_entries=6) == 5
        assert await session.load("f") == [*run, run[0]]
        segments = await session.segments("f")
        assert [(s.run_id, s.meta) for s in segments] == [("r1", {"m": 1}), ("r2", None)]
        assert await session.fork_origin("f") == ForkOrigin("s", 6)
        assert await session.load("s") == run + run
        with pytest.raises(UserError, match="already exists"):
            await session.fork("s", "f", keep_entries=1)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_fork_cuts_inside_a_zett_message_as_a_rewind_does(
    kind: str, tmp_path: Path
) -> None:
    """At every count: a zett message holding several entries may be cut inside, and a
    fork holds what a rewind to the same count would, envelopes included."""
    async with our_target(kind, tmp_path) as target:
        zett = open_ours(target)
        await zett.append("s", "r1", UserMessage(content="q"), metadata={"n": 1})
        turn = AssistantMessage(
            content="Two.",
            reasoning="Both.",
            tool_calls=(ToolCall("a", "f"), ToolCall("b", "g")),
        )
        await zett.append("s", "r1", turn)
        await zett.append("s", "r1", ToolMessage(tool_call_id="a", name="f", content="A"))
        await zett.append("s", "r1", ToolMessage(tool_call_id="b", name="g", content="B"))
        await zett.snapshot("s", ZettCompacted(content="first two"), 2, 0)
        await zett.append("s", "r2", UserMessage(content="more"))
        await zett.append("s", "r2", AssistantMessage(content="Done."))
        origin = await zett.list_raw_messages("s")
        async with SQLSession(target) as session:
            total = len(await session.load("s"))
            assert total == 9  # one row stands for four entries
            for keep in range(total + 1):
                held = await session.fork("s", f"f{keep}", keep_entries=keep)
                await session.fork("s", f"w{keep}", keep_entries=total)
                await session.rewind(f"w{keep}", keep_entries=keep)
                assert await session.segments(f"f{keep}") == await session.segments(f"w{keep}")
                assert held == len(await session.load(f"w{keep}"))
                forked = await zett.list_raw_messages(f"f{keep}")
                rewound = await zett.list_raw_messages(f"w{keep}")
                assert [r.sequence for r in forked] == list(range(1, len(forked) + 1))
                assert [(r.message, r.metadata) for r in forked] == [
                    (r.message, r.metadata) for r in rewound
                ]
                fork_view, rewind_view = await zett.load(f"f{keep}"), await zett.load(f"w{keep}")
                assert (fork_view.snapshot is None) == (rewind_view.snapshot is None)
                assert [r.message for r in fork_view.raw_tail] == [
                    r.message for r in rewind_view.raw_tail
                ]
        assert await zett.list_raw_messages("s") == origin
        await zett.close()
        rows = await table_rows(target)
        envelopes = {(row[1], row[2]): row[8] for row in rows["lovia_messages"]}
        # The whole fork keeps every envelope; a row cut inside loses its own.
        assert all(envelopes[(f"f{total}", r.sequence)] is not None for r in origin)
        assert envelopes[("f4", 2)] is None and envelopes[("f4", 1)] is not None
