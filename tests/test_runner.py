"""``Runner``: every behaviour lovia's "Sessions & checkpoints" document states.

Storage-backed tests run on every backend (memory, SQLite in both journal modes,
PostgreSQL through asyncpg and psycopg, MariaDB), each with a session and a
checkpointer of the same kind. Crashes are simulated in process: a tool
raising ``CancelledError`` (a worker stopped mid-tool), a model raising on a
chosen turn, store wrappers whose writes fail once, or a snapshot written by
hand with ``checkpointer.append``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from backends import Backend
from helpers import call, result, say, user
from lovia_store import (
    Agent,
    Checkpointer,
    CheckpointOptions,
    InMemoryCheckpointer,
    InMemorySession,
    InputEntry,
    MaxTurnsExceeded,
    ModelTurn,
    RunHead,
    Runner,
    RunResult,
    RunSnapshot,
    ScriptedModel,
    Segment,
    SQLCheckpointer,
    SQLSession,
    Tool,
    ToolCallEntry,
    ToolContext,
    ToolResultEntry,
    TranscriptEntry,
    Usage,
    UserError,
    function_tool,
)
from lovia_store.runs.agent import model_turns_since_user
from lovia_store.runs.options import IfRunExists

SID = "s"
RID = "run-1"

# -- stores ---------------------------------------------------------------------------------------


@dataclass
class Stores:
    """A session and a checkpointer of one backend kind."""

    kind: str
    session: InMemorySession | SQLSession
    checkpointer: InMemoryCheckpointer | SQLCheckpointer


@pytest.fixture
async def stores(backend: Backend) -> AsyncIterator[Stores]:
    """The session and checkpointer of every backend (conftest's registry), memory included."""
    async with backend.session() as session, backend.checkpointer() as checkpointer:
        yield Stores(backend.kind, session, checkpointer)


class StoreDown(Exception):
    """A store error injected by a wrapper."""


class RecordingCheckpointer:
    """A real checkpointer underneath; logs every write and can fail one chosen write."""

    def __init__(self, inner: Checkpointer, events: list[str] | None = None) -> None:
        self.inner = inner
        self.events = events if events is not None else []
        self.appends: list[tuple[list[TranscriptEntry], RunHead]] = []
        self.fail_append: Callable[[list[TranscriptEntry], RunHead], bool] | None = None
        self.append_error: BaseException = StoreDown("checkpoint write failed")
        self.fail_delete = False

    async def append(self, run_id: str, entries: Sequence[TranscriptEntry], head: RunHead) -> None:
        batch = list(entries)
        if self.fail_append is not None and self.fail_append(batch, head):
            self.fail_append = None
            raise self.append_error
        await self.inner.append(run_id, batch, head)
        self.appends.append((batch, head.model_copy(deep=True)))
        self.events.append(f"checkpoint.append:{head.status}")

    async def load(self, run_id: str) -> RunSnapshot | None:
        return await self.inner.load(run_id)

    async def delete(self, run_id: str) -> None:
        if self.fail_delete:
            self.fail_delete = False
            raise StoreDown("checkpoint delete failed")
        await self.inner.delete(run_id)
        self.events.append("checkpoint.delete")


class RecordingSession:
    """A real session underneath; logs appends (with the checkpoint as it stood) and can
    fail the next one."""

    def __init__(
        self,
        inner: InMemorySession | SQLSession,
        events: list[str],
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self.inner = inner
        self.events = events
        self.checkpointer = checkpointer
        self.seen_at_append: list[RunSnapshot | None] = []
        self.fail_next_append = False

    async def segments(self, session_id: str) -> list[Segment]:
        return await self.inner.segments(session_id)

    async def load(self, session_id: str) -> list[TranscriptEntry]:
        return await self.inner.load(session_id)

    async def clear(self, session_id: str) -> None:
        await self.inner.clear(session_id)

    async def append(
        self,
        session_id: str,
        entries: Sequence[TranscriptEntry],
        *,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        if self.fail_next_append:
            self.fail_next_append = False
            raise StoreDown("session append failed")
        if self.checkpointer is not None and run_id is not None:
            self.seen_at_append.append(await self.checkpointer.load(run_id))
        stored = await self.inner.append(session_id, entries, run_id=run_id, meta=meta)
        self.events.append("session.append")
        return stored


# -- models and tools -----------------------------------------------------------------------------


class Script(ScriptedModel):
    """A ``ScriptedModel`` that records every transcript it is shown and can fail once
    at chosen positions (``fail_at``: turn index -> exception)."""

    def __init__(
        self,
        turns: Sequence[ModelTurn | Sequence[TranscriptEntry]],
        *,
        fail_at: dict[int, BaseException] | None = None,
    ) -> None:
        super().__init__(turns)
        self.seen: list[list[TranscriptEntry]] = []
        self.fail_at = dict(fail_at or {})

    async def turn(self, transcript: list[TranscriptEntry], tools: Sequence[Tool]) -> ModelTurn:
        self.seen.append(list(transcript))
        failure = self.fail_at.pop(model_turns_since_user(transcript), None)
        if failure is not None:
            raise failure
        return await super().turn(transcript, tools)


def padded(skip: int, *turns: Sequence[TranscriptEntry]) -> list[Sequence[TranscriptEntry]]:
    """A script whose first ``skip`` positions are never played (another agent's turns)."""
    return [[say("never played")] for _ in range(skip)] + list(turns)


class Tally:
    """A ``count`` tool that logs every execution as (call id, turn); a call id in
    ``crash_once`` raises ``CancelledError`` on its first execution, like a worker
    stopped mid-tool."""

    def __init__(self, *, crash_once: Sequence[str] = ()) -> None:
        self.log: list[tuple[str, int]] = []
        self.deps_seen: list[Any] = []
        self.crash_once = set(crash_once)

    def tools(self) -> list[Tool]:
        tally = self

        @function_tool
        async def count(ctx: ToolContext, n: int = 1) -> dict[str, int]:
            """Count an execution."""
            tally.log.append((ctx.call_id, ctx.turn))
            tally.deps_seen.append(ctx.deps)
            if ctx.call_id in tally.crash_once:
                tally.crash_once.discard(ctx.call_id)
                raise asyncio.CancelledError
            return {"n": n}

        return [count]


def counted(call_id: str, n: int = 1) -> ToolResultEntry:
    """What ``count`` returns for ``n``."""
    return result(call_id, json.dumps({"n": n}), raw={"n": n})


def transfer(call_id: str, agent_name: str) -> ToolCallEntry:
    return call(call_id, f"transfer_to_{agent_name}")


def transferred(call_id: str, agent_name: str) -> ToolResultEntry:
    return result(call_id, json.dumps({"assistant": agent_name}))


TURN_USAGE = Usage(input_tokens=100, output_tokens=10, cache_read_tokens=5)


def two_tool_script() -> list[ModelTurn]:
    """Turn 1 asks for two counts, turn 2 answers; every turn costs ``TURN_USAGE``."""
    return [
        ModelTurn(
            entries=[
                say("looking"),
                call("c1", "count", '{"n": 1}'),
                call("c2", "count", '{"n": 2}'),
            ],
            usage=TURN_USAGE,
        ),
        ModelTurn(entries=[say("done")], usage=TURN_USAGE),
    ]


TWO_TOOL_RUN = [
    user("go"),
    say("looking"),
    call("c1", "count", '{"n": 1}'),
    call("c2", "count", '{"n": 2}'),
    counted("c1", 1),
    counted("c2", 2),
    say("done"),
]


def make_agent(
    model: Script, tally: Tally | None = None, *, name: str = "a", **kwargs: Any
) -> Agent:
    return Agent(name, model, tools=tally.tools() if tally else (), **kwargs)


async def seed(cp: Checkpointer, run_id: str, entries: list[TranscriptEntry], **head: Any) -> None:
    """Write a snapshot by hand, as a crashed worker would have left it."""
    await cp.append(run_id, entries, RunHead(**{"agent_name": "a", "started_at": 1.0, **head}))


async def loaded(cp: Checkpointer, run_id: str = RID) -> RunSnapshot:
    snapshot = await cp.load(run_id)
    assert snapshot is not None
    return snapshot


# -- the if_run_exists table ----------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["resume", "resume_only"])
async def test_an_existing_run_continues_and_the_new_input_is_ignored(
    stores: Stores, policy: IfRunExists
) -> None:
    """resume / resume_only continue an interrupted run; its transcript already has its input."""
    cp = stores.checkpointer
    await seed(cp, RID, [user("original"), call("c1", "count")], turns=1, status="interrupted")
    tally, model = Tally(), Script([[call("c1", "count")], [say("done")]])
    outcome = await Runner.run(
        make_agent(model, tally),
        "ignored",
        checkpoint=CheckpointOptions(cp, RID, if_run_exists=policy),
    )
    expected = [user("original"), call("c1", "count"), counted("c1"), say("done")]
    assert (outcome.replayed, outcome.final_output, outcome.entries) == (False, "done", expected)
    assert tally.log == [("c1", 1)]
    assert model.calls == 1
    assert all(user("ignored") not in seen for seen in model.seen)
    stored = await loaded(cp)
    assert (stored.status, stored.output, stored.entries) == ("completed", "done", expected)


@pytest.mark.parametrize("policy", ["resume", "resume_only"])
async def test_a_completed_run_replays_without_the_model(
    stores: Stores, policy: IfRunExists
) -> None:
    """A completed run replays its stored result; the new input is silently dropped (by design)."""
    cp, tally, model = stores.checkpointer, Tally(), Script(two_tool_script())
    agent = make_agent(model, tally)
    first = await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID))
    replay = await Runner.run(
        agent,
        "a different question",
        checkpoint=CheckpointOptions(cp, RID, if_run_exists=policy),
    )
    assert (first.replayed, replay.replayed) == (False, True)
    assert replay.final_output == first.final_output == "done"
    assert replay.entries == first.entries == TWO_TOOL_RUN
    assert replay.usage == first.usage == TURN_USAGE + TURN_USAGE
    assert (replay.run_id, replay.agent_name) == (RID, "a")
    assert model.calls == 2 and len(model.seen) == 2
    assert tally.log == [("c1", 1), ("c2", 1)]


@pytest.mark.parametrize("policy", ["resume", "restart", "fail"])
async def test_a_missing_run_starts_fresh(stores: Stores, policy: IfRunExists) -> None:
    """Every policy but resume_only starts a missing run fresh."""
    cp, tally, model = stores.checkpointer, Tally(), Script(two_tool_script())
    outcome = await Runner.run(
        make_agent(model, tally),
        "go",
        checkpoint=CheckpointOptions(cp, RID, if_run_exists=policy),
    )
    assert (outcome.replayed, outcome.entries, model.calls) == (False, TWO_TOOL_RUN, 2)
    stored = await loaded(cp)
    assert (stored.status, stored.entries) == ("completed", TWO_TOOL_RUN)


async def test_resume_only_refuses_a_missing_run(stores: Stores) -> None:
    """resume_only is for continuing a known run: a missing one is a UserError, nothing stored."""
    cp, model = stores.checkpointer, Script(two_tool_script())
    with pytest.raises(UserError, match="resume_only"):
        await Runner.run(
            make_agent(model),
            [],
            checkpoint=CheckpointOptions(cp, RID, if_run_exists="resume_only"),
        )
    assert await cp.load(RID) is None
    assert model.calls == 0


@pytest.mark.parametrize("status", ["interrupted", "completed"])
async def test_restart_discards_an_existing_run(stores: Stores, status: str) -> None:
    """restart throws the stored run away, finished or not, and runs the new input."""
    cp = stores.checkpointer
    await seed(
        cp, RID, [user("original"), say("old answer")], turns=1, status=status, output="old answer"
    )
    tally, model = Tally(), Script(two_tool_script())
    outcome = await Runner.run(
        make_agent(model, tally),
        "go",
        checkpoint=CheckpointOptions(cp, RID, if_run_exists="restart"),
    )
    assert (outcome.replayed, outcome.entries, model.calls) == (False, TWO_TOOL_RUN, 2)
    assert model.seen[0] == [user("go")]
    stored = await loaded(cp)
    assert (stored.status, stored.entries, stored.turns) == ("completed", TWO_TOOL_RUN, 2)


@pytest.mark.parametrize("status", ["interrupted", "completed"])
async def test_fail_refuses_an_existing_run(stores: Stores, status: str) -> None:
    """fail refuses any stored run and leaves it exactly as it was."""
    cp = stores.checkpointer
    await seed(cp, RID, [user("original"), call("c1", "count")], turns=1, status=status)
    before = await loaded(cp)
    model = Script(two_tool_script())
    with pytest.raises(UserError, match="already exists"):
        await Runner.run(
            make_agent(model), "go", checkpoint=CheckpointOptions(cp, RID, if_run_exists="fail")
        )
    assert await loaded(cp) == before
    assert model.calls == 0


async def test_a_run_id_is_generated_when_none_is_given(stores: Stores) -> None:
    """Without a checkpoint every run gets a fresh id (its segment's), so two runs never
    collide; a checkpoint needs an id of the caller's (see test_checkpoint_options)."""
    session = stores.session
    first = await Runner.run(
        make_agent(Script([[say("x")]])), "go", session=session, session_id="s"
    )
    second = await Runner.run(
        make_agent(Script([[say("y")]])), "go", session=session, session_id="s"
    )
    assert first.run_id != second.run_id and len(first.run_id) >= 16
    assert [s.run_id for s in await session.segments("s")] == [first.run_id, second.run_id]


async def test_run_ids_are_global_not_per_session(stores: Stores) -> None:
    """Sharp edge: one run id in two sessions is one run; the second "run" replays the first."""
    cp, session = stores.checkpointer, stores.session
    model = Script([[say("for alice")]])
    await Runner.run(
        make_agent(model),
        "alice asks",
        session=session,
        session_id="alice",
        checkpoint=CheckpointOptions(cp, RID),
    )
    bob = await Runner.run(
        make_agent(Script([[say("for bob")]])),
        "bob asks",
        session=session,
        session_id="bob",
        checkpoint=CheckpointOptions(cp, RID),
    )
    assert (bob.replayed, bob.final_output) == (True, "for alice")
    assert await session.load("alice") == [user("alice asks"), say("for alice")]
    assert await session.load("bob") == [user("alice asks"), say("for alice")]


# -- snapshots after the model turn and after every tool result ----------------------------------


async def test_snapshots_after_the_model_turn_and_every_tool_result(stores: Stores) -> None:
    """A crash loses at most the step in flight: one write per model turn and per tool result."""
    cp = RecordingCheckpointer(stores.checkpointer)
    await Runner.run(
        make_agent(Script(two_tool_script()), Tally()), "go", checkpoint=CheckpointOptions(cp, RID)
    )
    steps = [(batch, head.status, head.turns, head.usage) for batch, head in cp.appends]
    one, two = TURN_USAGE, TURN_USAGE + TURN_USAGE
    assert steps == [
        ([user("go")], "running", 0, Usage()),
        (TWO_TOOL_RUN[1:4], "running", 1, one),
        ([counted("c1", 1)], "running", 1, one),
        ([counted("c2", 2)], "running", 1, one),
        ([say("done")], "running", 2, two),
        ([], "completed", 2, two),
    ]
    assert cp.appends[-1][1].output == "done"
    assert all(head.started_at == cp.appends[0][1].started_at for _, head in cp.appends)


async def test_a_tool_finds_every_earlier_step_already_checkpointed(stores: Stores) -> None:
    """What a crash inside a tool leaves behind: the model turn and all earlier results."""
    seen: list[tuple[list[TranscriptEntry], str, int]] = []

    @function_tool
    async def peek(ctx: ToolContext) -> str:
        snapshot = await ctx.deps.load(ctx.run_id)
        seen.append((snapshot.entries, snapshot.status, snapshot.turns))
        return f"peeked {ctx.call_id}"

    turn = [call("p1", "peek"), call("p2", "peek")]
    agent = Agent("a", Script([turn, [say("done")]]), tools=[peek])
    cp = stores.checkpointer
    await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID), deps=cp)
    assert seen == [
        ([user("go"), *turn], "running", 1),
        ([user("go"), *turn, result("p1", "peeked p1")], "running", 1),
    ]


# -- what resume does -----------------------------------------------------------------------------


async def test_resume_reloads_history_and_reruns_only_the_dangling_call(stores: Stores) -> None:
    """Resume rebuilds prompt, session history and snapshot; only the dangling call re-runs."""
    cp, session = stores.checkpointer, stores.session
    await Runner.run(
        make_agent(Script([[say("Atlas, noted")]])),
        "My project is Atlas.",
        session=session,
        session_id=SID,
        checkpoint=CheckpointOptions(cp, "run-0"),
    )
    history = [user("My project is Atlas."), say("Atlas, noted")]
    tally, model = Tally(crash_once=["c2"]), Script(two_tool_script())
    agent = make_agent(model, tally, instructions="Be brief.")
    options = CheckpointOptions(cp, RID)
    with pytest.raises(asyncio.CancelledError):
        await Runner.run(
            agent, "go", session=session, session_id=SID, checkpoint=options, deps="worker-1"
        )
    crashed = await loaded(cp)
    assert crashed.status == "interrupted"
    assert crashed.entries == TWO_TOOL_RUN[:5]  # c2 dangling
    assert [s.run_id for s in await session.segments(SID)] == ["run-0"]  # never auto-appended

    outcome = await Runner.run(
        agent, "go again", session=session, session_id=SID, checkpoint=options, deps="worker-2"
    )
    assert outcome.entries == TWO_TOOL_RUN
    assert tally.log == [("c1", 1), ("c2", 1), ("c2", 1)]  # c1 never re-ran; c2 kept turn 1
    assert tally.deps_seen == ["worker-1", "worker-1", "worker-2"]  # deps are re-supplied
    # The resumed model turn: system prompt re-rendered, session history, then the run.
    assert model.seen[-1] == [
        InputEntry(role="system", content="Be brief."),
        *history,
        *TWO_TOOL_RUN[:6],
    ]
    assert model.calls == 2
    assert outcome.usage == TURN_USAGE + TURN_USAGE
    segments = await session.segments(SID)
    assert [(s.run_id, s.entries) for s in segments] == [("run-0", history), (RID, TWO_TOOL_RUN)]


async def test_dangling_calls_rerun_with_the_turn_number_that_asked_for_them(
    stores: Stores,
) -> None:
    """A hand-built crash snapshot: dangling calls re-run with their own turn, answered never."""
    cp = stores.checkpointer
    entries: list[TranscriptEntry] = [
        user("go"),
        call("c1", "count"),
        counted("c1"),
        say("more"),
        call("c2", "count"),
        call("c3", "count", '{"n": 3}'),
    ]
    await seed(cp, RID, entries, turns=2)  # a worker that died leaves "running" behind
    tally = Tally()
    model = Script(padded(2, [say("done")]))
    outcome = await Runner.run(make_agent(model, tally), [], checkpoint=CheckpointOptions(cp, RID))
    assert tally.log == [("c2", 2), ("c3", 2)]
    assert outcome.entries == [*entries, counted("c2"), counted("c3", 3), say("done")]
    assert model.calls == 1


async def test_a_model_error_marks_the_run_failed_and_the_same_call_resumes_it(
    stores: Stores,
) -> None:
    """A model error is recorded as {type, message}; re-issuing the call picks the run up."""
    cp, tally = stores.checkpointer, Tally()
    model = Script(two_tool_script(), fail_at={1: RuntimeError("provider overloaded")})
    agent = make_agent(model, tally)
    with pytest.raises(RuntimeError, match="provider overloaded"):
        await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID))
    failed = await loaded(cp)
    assert failed.status == "failed"
    assert failed.error == {"type": "RuntimeError", "message": "provider overloaded"}
    assert (failed.entries, failed.turns) == (TWO_TOOL_RUN[:6], 1)

    outcome = await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID))
    assert (outcome.replayed, outcome.entries) == (False, TWO_TOOL_RUN)
    assert tally.log == [("c1", 1), ("c2", 1)]
    assert len(model.seen) == 3
    done = await loaded(cp)
    assert (done.status, done.error, done.turns) == ("completed", None, 2)


async def test_cancelling_a_run_marks_it_interrupted_and_the_same_call_resumes_it(
    stores: Stores,
) -> None:
    """A real task.cancel() mid-tool: the run is interrupted and the tool re-runs on resume."""
    started, release = asyncio.Event(), asyncio.Event()
    executions: list[int] = []

    @function_tool
    async def slow(ctx: ToolContext) -> str:
        executions.append(ctx.turn)
        started.set()
        await release.wait()
        return "slow done"

    cp = stores.checkpointer
    agent = Agent("a", Script([[call("s1", "slow")], [say("done")]]), tools=[slow])
    task = asyncio.create_task(Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    interrupted = await loaded(cp)
    assert (interrupted.status, interrupted.entries) == (
        "interrupted",
        [user("go"), call("s1", "slow")],
    )

    release.set()
    outcome = await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID))
    assert outcome.entries == [
        user("go"),
        call("s1", "slow"),
        result("s1", "slow done"),
        say("done"),
    ]
    assert executions == [1, 1]


async def test_max_turns_marks_the_run_failed(stores: Stores) -> None:
    """Running out of turns fails the run (not lost): a larger budget resumes it."""
    cp, tally = stores.checkpointer, Tally()
    model = Script([[call("c1", "count")], [call("c2", "count")], [say("done")]])
    agent = make_agent(model, tally)
    with pytest.raises(MaxTurnsExceeded, match="max_turns=2"):
        await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID), max_turns=2)
    failed = await loaded(cp)
    assert (failed.status, failed.turns) == ("failed", 2)
    assert failed.error is not None and failed.error["type"] == "MaxTurnsExceeded"
    # Re-issued with a larger budget, it resumes where it stopped.
    outcome = await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID), max_turns=3)
    assert outcome.final_output == "done"
    assert tally.log == [("c1", 1), ("c2", 2)]
    assert model.calls == 3


# -- handoffs -------------------------------------------------------------------------------------


def research_team(
    researcher_turns: Sequence[Sequence[TranscriptEntry]],
    writer_turns: Sequence[Sequence[TranscriptEntry]],
    *,
    tally: Tally | None = None,
    writer_fails_at: dict[int, BaseException] | None = None,
) -> tuple[Agent, Script, Script]:
    writer_model = Script(writer_turns, fail_at=writer_fails_at)
    writer = make_agent(writer_model, tally, name="writer", instructions="You write.")
    researcher_model = Script(researcher_turns)
    researcher = make_agent(researcher_model, tally, name="researcher", handoffs=[writer])
    return researcher, researcher_model, writer_model


async def test_a_handoff_is_checkpointed_and_resume_continues_with_the_active_agent(
    stores: Stores,
) -> None:
    """The snapshot names the active agent; resume finds it through the entry agent's handoffs."""
    tally = Tally()
    researcher, researcher_model, writer_model = research_team(
        [[transfer("t1", "writer")]],
        padded(1, [call("w1", "count")], [say("written")]),
        tally=tally,
        writer_fails_at={2: RuntimeError("writer crashed")},
    )
    cp = RecordingCheckpointer(stores.checkpointer)
    with pytest.raises(RuntimeError, match="writer crashed"):
        await Runner.run(researcher, "go", checkpoint=CheckpointOptions(cp, RID))
    # The transfer's result is stored with the handoff pending; then the switch applies.
    handoff = [(batch, head.agent_name, head.pending_handoff) for batch, head in cp.appends[2:4]]
    assert handoff == [
        ([transferred("t1", "writer")], "researcher", "writer"),
        ([], "writer", None),
    ]
    crashed = await loaded(cp)
    assert (crashed.agent_name, crashed.pending_handoff, crashed.status) == (
        "writer",
        None,
        "failed",
    )

    outcome = await Runner.run(researcher, "go", checkpoint=CheckpointOptions(cp, RID))
    assert (outcome.agent_name, outcome.final_output) == ("writer", "written")
    assert researcher_model.calls == 1 and writer_model.calls == 2
    assert writer_model.seen[-1][0] == InputEntry(role="system", content="You write.")
    assert tally.log == [("w1", 2)]


async def test_a_pending_handoff_is_completed_before_the_targets_first_turn(stores: Stores) -> None:
    """A transfer that fired but was not applied is applied on resume, before the target speaks."""
    researcher, researcher_model, writer_model = research_team(
        [[transfer("t1", "writer")]], padded(1, [say("written")])
    )
    cp = RecordingCheckpointer(stores.checkpointer)
    await seed(
        cp.inner,
        RID,
        [user("go"), transfer("t1", "writer")],
        agent_name="researcher",
        pending_handoff="writer",
        turns=1,
    )
    outcome = await Runner.run(researcher, [], checkpoint=CheckpointOptions(cp, RID))
    steps = [(batch, head.agent_name, head.pending_handoff) for batch, head in cp.appends[:2]]
    assert steps == [
        ([transferred("t1", "writer")], "researcher", "writer"),
        ([], "writer", None),
    ]
    assert researcher_model.calls == 0
    assert writer_model.seen == [
        [
            InputEntry(role="system", content="You write."),
            user("go"),
            transfer("t1", "writer"),
            transferred("t1", "writer"),
        ]
    ]
    assert (outcome.agent_name, outcome.final_output) == ("writer", "written")


async def test_two_agents_sharing_a_name_is_a_hard_error_on_resume(stores: Stores) -> None:
    """Names identify agents in checkpoints: an ambiguous name must not resume the wrong agent."""
    first_twin = Agent("helper", Script([[say("one")]]))
    second_twin = Agent("helper", Script([[say("two")]]))
    middle = Agent("middle", Script([[say("m")]]), handoffs=[second_twin])
    entry = Agent("a", Script([[say("a")]]), handoffs=[first_twin, middle])
    cp = stores.checkpointer
    await seed(cp, RID, [user("go"), say("hm"), call("c1")], agent_name="helper", turns=1)
    before = await loaded(cp)
    with pytest.raises(UserError, match="2 distinct agents are named 'helper'"):
        await Runner.run(entry, [], checkpoint=CheckpointOptions(cp, RID))
    assert await loaded(cp) == before


async def test_a_renamed_agent_breaks_resume_of_an_in_flight_run(stores: Stores) -> None:
    """An in-flight run whose agent is gone cannot continue: hard error, nothing changed."""
    cp, model = stores.checkpointer, Script([[say("never")]])
    await seed(cp, RID, [user("go"), call("c1", "count")], agent_name="old-name", turns=1)
    before = await loaded(cp)
    with pytest.raises(UserError, match="renamed or removed"):
        await Runner.run(
            make_agent(model, Tally(), name="new-name"), [], checkpoint=CheckpointOptions(cp, RID)
        )
    assert await loaded(cp) == before
    assert model.calls == 0


async def test_a_completed_run_replays_with_the_entry_agent_after_a_rename(stores: Stores) -> None:
    """Finished work must not error on a deploy: replay warns and falls back to the entry agent."""
    cp, session = stores.checkpointer, stores.session
    first = await Runner.run(
        make_agent(Script([[say("answer")]]), name="v1"),
        "go",
        session=session,
        session_id=SID,
        checkpoint=CheckpointOptions(cp, RID),
    )
    renamed = Script([[say("never")]])
    with pytest.warns(RuntimeWarning, match="'v1'.*entry agent 'v2'"):
        replay = await Runner.run(
            make_agent(renamed, name="v2"),
            "go",
            session=session,
            session_id=SID,
            checkpoint=CheckpointOptions(cp, RID),
        )
    assert (replay.replayed, replay.agent_name) == (True, "v2")
    assert (replay.final_output, replay.entries) == (first.final_output, first.entries)
    assert renamed.calls == 0
    assert len(await session.segments(SID)) == 1


async def test_dangling_calls_after_a_mid_turn_handoff_rerun_with_the_callers_tools(
    stores: Stores,
) -> None:
    """The researcher asks for a transfer and a count in one turn; the count is interrupted.

    Uninterrupted, the count runs with the researcher's tool (the caller). Resumed, the
    head already names the writer, and the runner drains the dangling count against the
    writer, which has no such tool.
    """
    tally = Tally(crash_once=["c1"])
    writer_model = Script(padded(1, [say("written")]))
    writer = Agent("writer", writer_model)
    researcher = Agent(
        "researcher",
        Script([[transfer("t1", "writer"), call("c1", "count")]]),
        tools=tally.tools(),
        handoffs=[writer],
    )
    cp = stores.checkpointer
    with pytest.raises(asyncio.CancelledError):
        await Runner.run(researcher, "go", checkpoint=CheckpointOptions(cp, RID))
    outcome = await Runner.run(researcher, "go", checkpoint=CheckpointOptions(cp, RID))
    answer = next(
        e for e in outcome.entries if isinstance(e, ToolResultEntry) and e.call_id == "c1"
    )
    assert answer == counted("c1")
    assert tally.log == [("c1", 1), ("c1", 1)]


async def test_a_failed_handoff_write_is_completed_on_resume(stores: Stores) -> None:
    """A stop during the write that applies a transfer must still leave a resumable handoff."""
    researcher, _, _ = research_team([[transfer("t1", "writer")]], padded(1, [say("written")]))
    cp = RecordingCheckpointer(stores.checkpointer)
    cp.fail_append = lambda batch, head: transferred("t1", "writer") in batch
    cp.append_error = asyncio.CancelledError()  # e.g. the run is stopped during that write
    with pytest.raises(asyncio.CancelledError):
        await Runner.run(researcher, "go", checkpoint=CheckpointOptions(cp, RID))
    outcome = await Runner.run(researcher, "go", checkpoint=CheckpointOptions(cp, RID))
    assert outcome.entries == [
        user("go"),
        transfer("t1", "writer"),
        transferred("t1", "writer"),
        say("written"),
    ]


async def test_a_failed_model_turn_write_does_not_count_the_lost_turn(stores: Stores) -> None:
    """A model turn whose write failed is lost work; it must not count as a turn on resume."""
    tally = Tally()
    cp = RecordingCheckpointer(stores.checkpointer)
    cp.fail_append = lambda batch, head: call("c1", "count", '{"n": 1}') in batch
    cp.append_error = asyncio.CancelledError()
    agent = make_agent(Script(two_tool_script()), tally)
    with pytest.raises(asyncio.CancelledError):
        await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID))
    outcome = await Runner.run(agent, "go", checkpoint=CheckpointOptions(cp, RID))
    assert outcome.entries == TWO_TOOL_RUN
    assert tally.log == [("c1", 1), ("c2", 1)]
    assert (await loaded(cp)).turns == 2


# -- success: finalize, then append, then delete --------------------------------------------------


async def test_success_finalizes_then_appends_then_deletes(stores: Stores) -> None:
    """The fixed order: never both persisted as done and still resumable, never neither."""
    events: list[str] = []
    cp = RecordingCheckpointer(stores.checkpointer, events)
    session = RecordingSession(stores.session, events, checkpointer=cp)
    outcome = await Runner.run(
        make_agent(Script(two_tool_script()), Tally()),
        "go",
        session=session,
        session_id=SID,
        checkpoint=CheckpointOptions(cp, RID, delete_on_success=True),
    )
    assert events[-3:] == ["checkpoint.append:completed", "session.append", "checkpoint.delete"]
    assert events.count("session.append") == 1
    # When the session append ran, the checkpoint was already final.
    [at_append] = session.seen_at_append
    assert at_append is not None and at_append.status == "completed" and at_append.output == "done"
    assert await cp.load(RID) is None
    assert [(s.run_id, s.entries) for s in await session.segments(SID)] == [(RID, outcome.entries)]


async def test_without_delete_on_success_the_completed_snapshot_stays(stores: Stores) -> None:
    """By default the completed snapshot stays, so a re-issue replays."""
    cp, session = stores.checkpointer, stores.session
    await Runner.run(
        make_agent(Script([[say("kept")]])),
        "go",
        session=session,
        session_id=SID,
        checkpoint=CheckpointOptions(cp, RID),
    )
    assert (await loaded(cp)).status == "completed"
    assert [s.run_id for s in await session.segments(SID)] == [RID]


async def test_a_crash_between_finalization_and_the_session_append_heals(stores: Stores) -> None:
    """The re-issued call replays and re-applies the (idempotent) session append."""
    events: list[str] = []
    cp = stores.checkpointer
    session = RecordingSession(stores.session, events)
    session.fail_next_append = True
    tally, model = Tally(), Script(two_tool_script())
    agent = make_agent(model, tally)
    with pytest.raises(StoreDown):
        await Runner.run(
            agent, "go", session=session, session_id=SID, checkpoint=CheckpointOptions(cp, RID)
        )
    assert (await loaded(cp)).status == "completed"
    assert await session.segments(SID) == []

    for _ in range(2):  # re-issued, and re-issued again
        outcome = await Runner.run(
            agent, "go", session=session, session_id=SID, checkpoint=CheckpointOptions(cp, RID)
        )
        assert (outcome.replayed, outcome.final_output, outcome.entries) == (
            True,
            "done",
            TWO_TOOL_RUN,
        )
    assert (model.calls, len(tally.log)) == (2, 2)
    assert [(s.run_id, s.entries) for s in await session.segments(SID)] == [(RID, TWO_TOOL_RUN)]


async def test_a_crash_between_the_session_append_and_the_delete_heals(stores: Stores) -> None:
    """The snapshot survives a failed delete, so the re-issued call replays and then deletes."""
    cp = RecordingCheckpointer(stores.checkpointer)
    cp.fail_delete = True
    session = stores.session
    model = Script(two_tool_script())
    agent = make_agent(model, Tally())
    options = CheckpointOptions(cp, RID, delete_on_success=True)
    with pytest.raises(StoreDown):
        await Runner.run(agent, "go", session=session, session_id=SID, checkpoint=options)
    assert (await loaded(cp)).status == "completed"  # still replayable
    assert [s.run_id for s in await session.segments(SID)] == [RID]

    outcome = await Runner.run(agent, "go", session=session, session_id=SID, checkpoint=options)
    assert (outcome.replayed, outcome.final_output, outcome.entries) == (True, "done", TWO_TOOL_RUN)
    assert model.calls == 2
    assert await cp.load(RID) is None
    assert [(s.run_id, s.entries) for s in await session.segments(SID)] == [(RID, TWO_TOOL_RUN)]


async def test_a_crash_while_finalizing_resumes_without_calling_the_model(stores: Stores) -> None:
    """The answer was checkpointed before finalization: the re-issue finishes without the model."""
    cp = RecordingCheckpointer(stores.checkpointer)
    cp.fail_append = lambda batch, head: head.status == "completed"
    session = stores.session
    tally, model = Tally(), Script(two_tool_script())
    agent = make_agent(model, tally)
    with pytest.raises(StoreDown):
        await Runner.run(
            agent, "go", session=session, session_id=SID, checkpoint=CheckpointOptions(cp, RID)
        )
    stalled = await loaded(cp)
    assert (stalled.status, stalled.entries) == ("running", TWO_TOOL_RUN)
    assert await session.segments(SID) == []

    outcome = await Runner.run(
        agent, "go", session=session, session_id=SID, checkpoint=CheckpointOptions(cp, RID)
    )
    assert (outcome.final_output, outcome.entries) == ("done", TWO_TOOL_RUN)
    assert (model.calls, len(tally.log)) == (2, 2)
    assert [(s.run_id, s.entries) for s in await session.segments(SID)] == [(RID, TWO_TOOL_RUN)]


# -- timing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("checkpointed", [True, False])
async def test_the_segment_is_timed_in_epoch_seconds(stores: Stores, checkpointed: bool) -> None:
    """meta["timing"] makes the session a timed run log, with or without a checkpoint."""
    before = time.time()
    await Runner.run(
        make_agent(Script(two_tool_script()), Tally()),
        "go",
        session=stores.session,
        session_id=SID,
        checkpoint=CheckpointOptions(stores.checkpointer, RID) if checkpointed else None,
    )
    after = time.time()
    [segment] = await stores.session.segments(SID)
    assert segment.meta is not None and set(segment.meta) == {"timing"}
    timing = segment.meta["timing"]
    assert set(timing) == {"started_at", "finished_at"}
    assert all(isinstance(timing[k], float) for k in timing)
    assert before <= timing["started_at"] <= timing["finished_at"] <= after
    if checkpointed:
        assert (await loaded(stores.checkpointer)).started_at == timing["started_at"]


async def test_timing_starts_at_the_runs_first_start_across_a_resume(stores: Stores) -> None:
    """A resumed run keeps its first start (RunHead.started_at), not the resume's."""
    cp, session = stores.checkpointer, stores.session
    model = Script(two_tool_script(), fail_at={1: RuntimeError("down")})
    agent = make_agent(model, Tally())
    with pytest.raises(RuntimeError):
        await Runner.run(
            agent, "go", session=session, session_id=SID, checkpoint=CheckpointOptions(cp, RID)
        )
    first_start = (await loaded(cp)).started_at
    assert first_start is not None
    await asyncio.sleep(0.05)
    resumed_at = time.time()
    await Runner.run(
        agent, "go", session=session, session_id=SID, checkpoint=CheckpointOptions(cp, RID)
    )
    [segment] = await session.segments(SID)
    assert segment.meta is not None
    timing = segment.meta["timing"]
    assert timing["started_at"] == first_start < resumed_at <= timing["finished_at"]


# -- resume_from ----------------------------------------------------------------------------------


async def _crashed_snapshot(stores: Stores, tally: Tally) -> RunSnapshot:
    """A run interrupted while its second tool call was in flight."""
    with pytest.raises(asyncio.CancelledError):
        await Runner.run(
            make_agent(Script(two_tool_script()), tally),
            "go",
            checkpoint=CheckpointOptions(stores.checkpointer, RID),
        )
    return await loaded(stores.checkpointer)


async def test_resume_from_continues_a_snapshot_in_another_checkpointer(stores: Stores) -> None:
    """resume_from rehydrates a caller-held snapshot; the new checkpointer gets the whole run."""
    tally = Tally(crash_once=["c2"])
    snapshot = await _crashed_snapshot(stores, tally)
    other = InMemoryCheckpointer()
    model = Script(two_tool_script())
    outcome = await Runner.run(
        make_agent(model, tally),
        "ignored",
        checkpoint=CheckpointOptions(other, resume_from=snapshot),
    )
    assert (outcome.run_id, outcome.entries) == (RID, TWO_TOOL_RUN)
    assert tally.log == [("c1", 1), ("c2", 1), ("c2", 1)]
    assert model.calls == 1
    moved = await loaded(other)
    assert (moved.status, moved.entries, moved.started_at) == (
        "completed",
        TWO_TOOL_RUN,
        snapshot.started_at,
    )
    assert await loaded(stores.checkpointer) == snapshot  # the source is left alone


async def test_resume_from_without_a_checkpointer(stores: Stores) -> None:
    """resume_from alone is enough to finish a run; the session still records it."""
    tally = Tally(crash_once=["c2"])
    snapshot = await _crashed_snapshot(stores, tally)
    outcome = await Runner.run(
        make_agent(Script(two_tool_script()), tally),
        [],
        session=stores.session,
        session_id=SID,
        checkpoint=CheckpointOptions(resume_from=snapshot),
    )
    assert outcome.entries == TWO_TOOL_RUN
    assert tally.log == [("c1", 1), ("c2", 1), ("c2", 1)]
    [segment] = await stores.session.segments(SID)
    assert (segment.run_id, segment.entries) == (RID, TWO_TOOL_RUN)
    assert segment.meta is not None and segment.meta["timing"]["started_at"] == snapshot.started_at


async def test_resume_from_a_completed_snapshot_replays_it() -> None:
    """A completed snapshot replays through resume_from too, without the model."""
    snapshot = RunSnapshot.from_parts(
        "done-run",
        [user("q"), say("a")],
        RunHead(agent_name="a", status="completed", output="a", turns=1),
    )
    model = Script([[say("never")]])
    outcome = await Runner.run(
        make_agent(model), "new", checkpoint=CheckpointOptions(resume_from=snapshot)
    )
    assert (outcome.replayed, outcome.final_output, outcome.run_id) == (True, "a", "done-run")
    assert model.calls == 0


# -- abandon --------------------------------------------------------------------------------------


async def test_abandon_records_a_tool_consistent_partial_and_drops_the_checkpoint(
    stores: Stores,
) -> None:
    """Giving up is the caller's decision: the partial is stored tool-consistent, then dropped."""
    cp, session = stores.checkpointer, stores.session
    with pytest.raises(asyncio.CancelledError):
        await Runner.run(
            make_agent(Script(two_tool_script()), Tally(crash_once=["c2"])),
            "go",
            session=session,
            session_id=SID,
            checkpoint=CheckpointOptions(cp, RID),
        )
    started_at = (await loaded(cp)).started_at
    assert await session.segments(SID) == []  # interrupted runs are not auto-appended

    recorded = await Runner.abandon(cp, RID, session=session, session_id=SID)
    partial = [user("go"), say("looking"), call("c1", "count", '{"n": 1}'), counted("c1", 1)]
    assert recorded == partial  # the dangling c2 is dropped
    [segment] = await session.segments(SID)
    assert (segment.run_id, segment.entries) == (RID, partial)
    assert segment.meta is not None
    timing = segment.meta["timing"]
    assert timing["started_at"] == started_at <= timing["finished_at"]
    assert await cp.load(RID) is None
    # Abandoning again, or a run that never existed, finds nothing.
    assert await Runner.abandon(cp, RID, session=session, session_id=SID) is None
    assert await Runner.abandon(cp, "never-ran", session=session, session_id=SID) is None
    assert len(await session.segments(SID)) == 1


# -- rewind with a live checkpoint ----------------------------------------------------------------


async def _two_checkpointed_runs(stores: Stores) -> None:
    for run_id, question, answer in (("r1", "first", "one"), ("r2", "second", "two")):
        await Runner.run(
            make_agent(Script([[say(answer)]])),
            question,
            session=stores.session,
            session_id=SID,
            checkpoint=CheckpointOptions(stores.checkpointer, run_id),
        )


async def test_rewind_with_the_checkpointer_lets_a_reissue_start_fresh(stores: Stores) -> None:
    """Edit-and-resend: after a rewind with the checkpointer, the same run id runs again."""
    await _two_checkpointed_runs(stores)
    cp, session = stores.checkpointer, stores.session
    assert await session.rewind(SID, keep_entries=2, checkpointer=cp) == 2
    assert await cp.load("r2") is None and await cp.load("r1") is not None
    edited = Script([[say("two, edited")]])
    again = await Runner.run(
        make_agent(edited),
        "second, edited",
        session=session,
        session_id=SID,
        checkpoint=CheckpointOptions(cp, "r2"),
    )
    assert (again.replayed, again.final_output, edited.calls) == (False, "two, edited", 1)
    assert await session.load(SID) == [
        user("first"),
        say("one"),
        user("second, edited"),
        say("two, edited"),
    ]


async def test_rewind_without_the_checkpointer_replays_the_undone_tail(stores: Stores) -> None:
    """Why rewind takes the checkpointer: a stale snapshot brings the undone answer back."""
    await _two_checkpointed_runs(stores)
    session = stores.session
    await session.rewind(SID, keep_entries=2)
    again = await Runner.run(
        make_agent(Script([[say("two, edited")]])),
        "second, edited",
        session=session,
        session_id=SID,
        checkpoint=CheckpointOptions(stores.checkpointer, "r2"),
    )
    assert (again.replayed, again.final_output) == (True, "two")
    assert await session.load(SID) == [user("first"), say("one"), user("second"), say("two")]


# -- validation -----------------------------------------------------------------------------------

SNAPSHOT = RunSnapshot(run_id="r", agent_name="a")


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"checkpointer": InMemoryCheckpointer(), "if_run_exists": "sometimes"}, "if_run_exists"),
        ({"checkpointer": InMemoryCheckpointer(), "if_run_exists": None}, "if_run_exists"),
        ({}, "needs a checkpointer"),
        ({"run_id": "r"}, "needs a checkpointer"),
        ({"checkpointer": InMemoryCheckpointer(), "if_run_exists": "resume_only"}, "run_id"),
        # As lovia 0.9.119 decides both (docs/runs.md says why).
        ({"checkpointer": InMemoryCheckpointer()}, "needs the run_id"),
        ({"resume_from": SNAPSHOT, "delete_on_success": True}, "needs a checkpointer"),
        ({"checkpointer": InMemoryCheckpointer(), "run_id": "x", "resume_from": SNAPSHOT}, "match"),
        (
            {
                "checkpointer": InMemoryCheckpointer(),
                "resume_from": SNAPSHOT,
                "if_run_exists": "restart",
            },
            "restart",
        ),
        ({"resume_from": SNAPSHOT, "if_run_exists": "fail"}, "fail"),
        (
            {"checkpointer": InMemoryCheckpointer(), "run_id": "r", "delete_on_success": 1},
            "delete_on_success",
        ),
        (
            {"checkpointer": InMemoryCheckpointer(), "run_id": "r", "delete_on_success": "yes"},
            "delete_on_success",
        ),
        ({"checkpointer": object(), "run_id": "r"}, "checkpointer"),
        ({"checkpointer": InMemoryCheckpointer(), "run_id": ""}, "run_id"),
        ({"resume_from": {"run_id": "r", "agent_name": "a"}}, "RunSnapshot"),
    ],
)
def test_checkpoint_options_are_validated(arguments: dict[str, Any], match: str) -> None:
    """Contradictory or malformed options fail at construction, before any run."""
    with pytest.raises(UserError, match=match):
        CheckpointOptions(**arguments)


def test_valid_checkpoint_options() -> None:
    """The legal combinations construct, and key names the run they address."""
    cp = InMemoryCheckpointer()
    assert CheckpointOptions(cp, "r", if_run_exists="resume_only").key == "r"
    assert CheckpointOptions(resume_from=SNAPSHOT).key == "r"
    assert CheckpointOptions(resume_from=SNAPSHOT, if_run_exists="resume_only").key == "r"
    assert CheckpointOptions(cp, "r", resume_from=SNAPSHOT, delete_on_success=True).key == "r"


RunCall = Callable[[Agent, InMemoryCheckpointer], Awaitable[RunResult]]


@pytest.mark.parametrize(
    ("bad_call", "match"),
    [
        (lambda a, cp: Runner.run(a, "go", session=InMemorySession()), "session_id"),
        (lambda a, cp: Runner.run(a, "go", session_id=SID), "session_id"),
        (
            lambda a, cp: Runner.run(
                a, "go", checkpoint=CheckpointOptions(cp, RID, delete_on_success=True)
            ),
            "delete_on_success needs a session",
        ),
        (
            lambda a, cp: Runner.run(a, "go", checkpoint={"run_id": RID}),  # type: ignore[arg-type]
            "CheckpointOptions",
        ),
        (lambda a, cp: Runner.run(a, "go", max_turns=0), "max_turns"),
        (lambda a, cp: Runner.run(a, "go", max_turns=-1), "max_turns"),
        (lambda a, cp: Runner.run(a, "go", max_turns=True), "max_turns"),
        (lambda a, cp: Runner.run(a, "go", max_turns=2.5), "max_turns"),  # type: ignore[arg-type]
        (lambda a, cp: Runner.run(a, 42), "input"),  # type: ignore[arg-type]
        (lambda a, cp: Runner.run("agent", "go"), "Agent"),  # type: ignore[arg-type]
    ],
    ids=[
        "session-without-id",
        "id-without-session",
        "delete-without-session",
        "options-not-options",
        "max-turns-0",
        "max-turns-negative",
        "max-turns-bool",
        "max-turns-float",
        "input-not-text-or-entries",
        "agent-not-an-agent",
    ],
)
async def test_run_arguments_are_validated(bad_call: RunCall, match: str) -> None:
    """Misuse is refused before anything runs or is stored."""
    cp, model = InMemoryCheckpointer(), Script([[say("never")]])
    with pytest.raises(UserError, match=match):
        await bad_call(make_agent(model), cp)
    assert model.calls == 0
    assert await cp.list_runs() == []


# -- function_tool --------------------------------------------------------------------------------


async def test_function_tool_wraps_sync_and_async_functions() -> None:
    """Sync and async functions become tools; a ToolContext parameter is injected, not exposed."""

    @function_tool
    def add(a: int, b: int = 2) -> int:
        """Add two numbers."""
        return a + b

    @function_tool(name="whoami", description="Who is calling.")  # type: ignore[untyped-decorator]
    async def identify(ctx: ToolContext, greeting: str) -> dict[str, Any]:
        return {"greeting": greeting, "run": ctx.run_id, "call": ctx.call_id, "turn": ctx.turn}

    assert (add.name, add.description, add.takes_context) == ("add", "Add two numbers.", False)
    assert (identify.name, identify.description, identify.takes_context) == (
        "whoami",
        "Who is calling.",
        True,
    )
    assert set(add.parameters["properties"]) == {"a", "b"}
    assert set(identify.parameters["properties"]) == {"greeting"}  # the context is not an argument
    context = ToolContext("run", "call-1", 3, deps=None)
    assert await add.invoke('{"a": 1}', context) == result("call-1", "3", raw=3)
    assert await identify.invoke('{"greeting": "hi"}', context) == result(
        "call-1",
        json.dumps({"greeting": "hi", "run": "run", "call": "call-1", "turn": 3}),
        raw={"greeting": "hi", "run": "run", "call": "call-1", "turn": 3},
    )


async def test_tools_get_their_context_and_failures_become_error_results() -> None:
    """A bad argument or a raising tool is the model's to see; the run goes on."""
    contexts: list[ToolContext] = []

    @function_tool
    def add(a: int, b: int = 2) -> int:
        return a + b

    @function_tool
    async def whoami(ctx: ToolContext) -> str:
        contexts.append(ctx)
        return "noted"

    @function_tool
    def explode() -> str:
        raise ValueError("nope")

    calls = [
        call("ok", "add", '{"a": 2, "b": 3}'),
        call("me", "whoami"),
        call("type", "add", '{"a": "x"}'),
        call("extra", "add", '{"a": 1, "zzz": 2}'),
        call("missing-arg", "add", "{}"),
        call("not-json", "add", "not json"),
        call("boom", "explode"),
        call("nosuch", "teleport"),
    ]
    model = Script([calls, [say("recovered")]])
    deps = object()
    agent = Agent("a", model, tools=[add, whoami, explode])
    outcome = await Runner.run(
        agent, "go", checkpoint=CheckpointOptions(InMemoryCheckpointer(), RID), deps=deps
    )
    results = {e.call_id: e for e in outcome.entries if isinstance(e, ToolResultEntry)}
    assert results["ok"] == result("ok", "5", raw=5)
    assert results["me"] == result("me", "noted")
    assert [(c.run_id, c.call_id, c.turn) for c in contexts] == [(RID, "me", 1)]
    assert contexts[0].deps is deps
    for call_id in ("type", "extra", "missing-arg", "not-json"):
        assert results[call_id].is_error
        assert results[call_id].output.startswith("invalid arguments for add")
    assert results["boom"].is_error and results["boom"].output == "ValueError: nope"
    assert results["nosuch"].is_error and "unknown tool 'teleport'" in results["nosuch"].output
    assert not results["ok"].is_error and not results["me"].is_error
    assert outcome.final_output == "recovered"
    assert model.seen[1][-len(calls) :] == [results[c.call_id] for c in calls]


async def test_a_script_played_in_call_order_goes_on_across_runs() -> None:
    """``play="calls"`` pops turns as lovia's ScriptedProvider does; the default picks by
    position, so the same two runs would both get the first turn."""
    by_calls = ScriptedModel([[say("first")], [say("second")]], play="calls")
    by_position = ScriptedModel([[say("first")], [say("second")]])
    for model, expected in ((by_calls, ["first", "second"]), (by_position, ["first", "first"])):
        agent = Agent("bot", model)
        outputs = [(await Runner.run(agent, "hi")).final_output for _ in range(2)]
        assert outputs == expected
    with pytest.raises(UserError, match="has 2 turns"):
        await Runner.run(Agent("bot", by_calls), "again")
    with pytest.raises(UserError, match="play"):
        ScriptedModel([], play="random")  # type: ignore[arg-type]
