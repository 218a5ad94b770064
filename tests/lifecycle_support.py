"""What the lifecycle tests share: a deployment with every kind of row, and its public reads.

``populate`` writes, through the public stores, lovia sessions (runs with meta, a
trimmed tool output, a fork), Raw Log sessions (timings, usage, metadata, tags,
snapshots, a child session), a completed checkpointed run and one interrupted
mid-tool (in flight), with tool effects and leases. ``public_reads`` reads all of
it back through every public read, so two databases are compared as a user sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from lovia_store import (
    Agent,
    AssistantTextEntry,
    CheckpointOptions,
    CompactedMessage,
    Database,
    InputEntry,
    MessageTiming,
    ModelTurn,
    ReasoningEntry,
    Runner,
    ScriptedModel,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    ToolCallEntry,
    ToolContext,
    ToolResultEntry,
    Usage,
    function_tool,
)

IN_FLIGHT = "run-in-flight"
IN_FLIGHT_SESSION = "lovia-in-flight"
DONE = "run-done"


def lovia_entries(i: int) -> list[Any]:
    return [
        InputEntry(role="user", content=f"question {i} ünïcode ☃ 'quotes' \"double\""),
        ReasoningEntry(content=f"thinking {i}"),
        ToolCallEntry(call_id=f"c{i}", name="lookup", arguments='{"key": "x"}'),
        ToolResultEntry(call_id=f"c{i}", name="lookup", output="r" * 900),
        AssistantTextEntry(content=f"answer {i}"),
    ]


def model() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelTurn(
                entries=[ToolCallEntry(call_id="t1", name="charge", arguments='{"n": 1}')],
                usage=Usage(input_tokens=10, output_tokens=3),
            ),
            ModelTurn(
                entries=[ToolCallEntry(call_id="t2", name="slow", arguments="{}")],
                usage=Usage(input_tokens=11, output_tokens=4),
            ),
            ModelTurn(
                entries=[AssistantTextEntry(content="all done")],
                usage=Usage(input_tokens=12, output_tokens=5),
            ),
        ]
    )


class Tools:
    """The run's tools: ``charge`` keyed (leaves a tool effect), ``slow`` held until released."""

    def __init__(self, *, hold: bool) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        if not hold:
            self.release.set()
        self.calls: list[str] = []

        @function_tool(effect="at_most_once")
        async def charge(ctx: ToolContext, n: int) -> str:
            self.calls.append(ctx.call_id)
            return f"charged {n}"

        @function_tool
        async def slow(ctx: ToolContext) -> str:
            self.calls.append(ctx.call_id)
            self.started.set()
            await self.release.wait()
            return "slow done"

        self.tools = [charge, slow]


async def start_interrupted_run(db: Database, run_id: str, session_id: str) -> None:
    """A run cancelled inside its second tool call: interrupted, checkpointed, in flight."""
    tools = Tools(hold=True)
    agent = Agent("worker", model(), tools=tools.tools)
    options = CheckpointOptions(SQLCheckpointer(db), run_id)
    task = asyncio.create_task(
        Runner.run(agent, "go", session=SQLSession(db), session_id=session_id, checkpoint=options)
    )
    await tools.started.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def resume_run(db: Database, run_id: str, session_id: str) -> tuple[Any, list[str]]:
    """Resume ``run_id`` with our Runner on ``db``: its result and the tools that ran."""
    tools = Tools(hold=False)
    agent = Agent("worker", model(), tools=tools.tools)
    result = await Runner.run(
        agent,
        "go",
        session=SQLSession(db),
        session_id=session_id,
        checkpoint=CheckpointOptions(SQLCheckpointer(db), run_id),
    )
    return result, tools.calls


async def populate(target: str, *, sessions: int = 3, runs: int = 2) -> None:
    """Every kind of row, written through the public stores."""
    async with Database(target) as db:
        lovia = SQLSession(db)
        for s in range(sessions):
            for r in range(runs):
                await lovia.append(
                    f"lovia-{s}", lovia_entries(r), run_id=f"lovia-{s}-run-{r}", meta={"n": r}
                )
        await lovia.trim_tool_results("lovia-0", keep_chars=10, keep_runs=1)
        await lovia.fork(f"lovia-{sessions - 1}", "lovia-fork", keep_entries=5)
        storage = SQLSessionStorage(db)
        start = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
        for s in range(sessions):
            sid = f"zett-{s}"
            await storage.create_session(
                session_id=sid, title=f"title {s}", agent_name="zett", session_type=s
            )
            for m in range(4):
                timing = MessageTiming(
                    started_at=start + timedelta(seconds=m),
                    completed_at=start + timedelta(seconds=m, microseconds=7),
                    duration_ns=7_000 + m,
                )
                await storage.append(
                    sid,
                    f"req-{m}",
                    AssistantTextEntry(content=f"message {m}")
                    if m % 2
                    else InputEntry(role="user", content=f"hi {m}"),
                    timing=timing,
                    metadata={"m": m, "f": 0.1},
                    tags={"k": str(m)},
                    usage=Usage(input_tokens=m, output_tokens=1) if m % 2 else None,
                )
            await storage.snapshot(
                sid,
                CompactedMessage(content=f"summary {s}"),
                compacted_through_sequence=2,
                expected_version=0,
            )
        await storage.create_session(session_id="zett-child", parent_session_id="zett-0")
        tools = Tools(hold=False)
        agent = Agent("worker", model(), tools=tools.tools)
        await Runner.run(
            agent,
            "go",
            session=lovia,
            session_id="lovia-done",
            checkpoint=CheckpointOptions(SQLCheckpointer(db), DONE),
        )
        await start_interrupted_run(db, IN_FLIGHT, IN_FLIGHT_SESSION)


async def public_reads(target: str) -> dict[str, Any]:
    """Everything every public read returns, for every session and run."""
    async with Database(target) as db:
        storage = SQLSessionStorage(db)
        lovia = SQLSession(db)
        checkpointer = SQLCheckpointer(db)
        listed = await storage.list_sessions(limit=10_000)
        reads: dict[str, Any] = {"list_sessions": listed}
        for summary in listed:
            sid = summary.session_id
            reads[sid] = {
                "get_session": await storage.get_session(sid),
                "raw": await storage.list_raw_messages(sid),
                "view": await storage.load(sid),
                "load": await lovia.load(sid),
                "segments": await lovia.segments(sid),
                "fork_origin": await lovia.fork_origin(sid),
            }
        runs = await checkpointer.list_runs(limit=10_000)
        reads["list_runs"] = runs
        for run in runs:
            reads[run.run_id] = {
                "load": await checkpointer.load(run.run_id),
                "tool_effects": await checkpointer.tool_effects(run.run_id),
            }
        return reads
