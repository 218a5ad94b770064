"""``Runner.run``: the run lifecycle of lovia's sessions-and-checkpoints document.

The loop snapshots after every model turn and every tool result. On success
the order is fixed: the checkpoint is finalized first, then the run is
appended to the session (idempotent by run id), then, with
``delete_on_success``, the snapshot is deleted. A crash between any two steps
heals when the same call is issued again: the completed snapshot replays.

With a checkpointer that supports leases, each execution holds the run's
lease, renews it in the background and fences every write with it, so two
workers never execute one run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from pydantic import JsonValue

from .._lovia_guard import own_calls
from ..checkpoints.contract import Checkpointer, EffectLog, RunHead, RunSnapshot, ToolEffect
from ..checkpoints.leases import HeldLease
from ..entries import (
    AssistantTextEntry,
    InputEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
    Usage,
    check_entries,
)
from ..errors import LoviaStoreError, UserError
from ..sessions.contract import Session
from ..validation import check_id
from .agent import MODEL_OUTPUT, Agent
from .options import CheckpointOptions
from .resume import abandon, existing_run, resolve_agent, timing
from .tools import Tool, ToolContext, result_entry

__all__ = ["MaxTurnsExceeded", "RunResult", "Runner"]


class MaxTurnsExceeded(LoviaStoreError):
    """The run used ``max_turns`` model turns without finishing."""


@dataclass(frozen=True)
class RunResult:
    final_output: JsonValue
    entries: list[TranscriptEntry]
    usage: Usage
    run_id: str
    replayed: bool
    agent_name: str


class Runner:
    @staticmethod
    async def run(
        agent: Agent,
        input: str | Sequence[TranscriptEntry],
        *,
        session: Session | None = None,
        session_id: str | None = None,
        checkpoint: CheckpointOptions | None = None,
        deps: Any = None,
        max_turns: int = 20,
    ) -> RunResult:
        """Run ``agent`` on ``input`` (ignored when an existing run resumes or replays)."""
        run = _Run(agent, session, session_id, checkpoint, deps, max_turns)
        with own_calls():  # its stores are its own, even inside a lovia tool
            return await run.execute(input)

    @staticmethod
    async def abandon(
        checkpointer: Checkpointer,
        run_id: str,
        *,
        session: Session,
        session_id: str,
    ) -> list[TranscriptEntry] | None:
        """Record an interrupted run's partial transcript as finished, then drop its checkpoint.

        Interrupted runs are never appended automatically; this is for the
        caller who decides to give one up (see ``resume.abandon``). Returns the
        entries recorded, or None when no such run is stored.
        """
        _check_tenants(session, checkpointer)
        with own_calls():
            return await abandon(checkpointer, run_id, session=session, session_id=session_id)


def _input_entries(value: str | Sequence[TranscriptEntry]) -> list[TranscriptEntry]:
    if isinstance(value, str):
        return [InputEntry(role="user", content=value)]
    if isinstance(value, Sequence):
        return check_entries(value)
    raise UserError(f"input must be a string or a list of entries, not {type(value).__name__}")


def _check_tenants(session: object, checkpointer: object) -> None:
    """A run links its checkpoint to its session (by id, in the checkpointer's tenant):
    stores of two tenants would link it to a session of the wrong one."""
    ours, theirs = getattr(session, "tenant", None), getattr(checkpointer, "tenant", None)
    if isinstance(ours, str) and isinstance(theirs, str) and ours != theirs:
        raise UserError(
            f"the session works for tenant {ours!r} and the checkpointer for {theirs!r}: "
            "a run's stores must share its tenant"
        )


def _tenant_of(store: object) -> str:
    tenant = getattr(store, "tenant", "")
    return tenant if isinstance(tenant, str) else ""


class _Run:
    """One execution of a run: fresh, resumed or replayed."""

    def __init__(
        self,
        agent: Agent,
        session: Session | None,
        session_id: str | None,
        options: CheckpointOptions | None,
        deps: Any,
        max_turns: int,
    ) -> None:
        if not isinstance(agent, Agent):
            raise UserError(f"agent must be an Agent, not {type(agent).__name__}")
        if (session is None) != (session_id is None):
            raise UserError("session and session_id go together: pass both or neither")
        if session_id is not None:
            check_id(session_id, "session_id")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise UserError(f"max_turns must be a positive integer, got {max_turns!r}")
        if options is not None and not isinstance(options, CheckpointOptions):
            raise UserError("checkpoint must be a CheckpointOptions")
        if options is not None and options.delete_on_success and session is None:
            raise UserError("delete_on_success needs a session: the session is the run's record")
        _check_tenants(session, options.checkpointer if options else None)
        self.entry_agent = agent
        self.active = agent
        self.session = session
        self.session_id = session_id
        self.options = options
        self.checkpointer = options.checkpointer if options else None
        self.deps = deps
        self.max_turns = max_turns
        self.run_id = (options.key if options else None) or uuid4().hex
        self.entries: list[TranscriptEntry] = []
        self.head = RunHead(agent_name=agent.name)
        self.resumed = False
        self.held = HeldLease(
            self.checkpointer, self.run_id, options.lease_ttl if options else None
        )
        # Our checkpointers keep the run's session on its head (retention spares it).
        links = getattr(self.checkpointer, "links_sessions", False)
        self.link = {"session_id": session_id} if links and session_id is not None else {}
        self.tenant = _tenant_of(self.checkpointer) or _tenant_of(session)

    # -- the lifecycle ----------------------------------------------------------------------

    async def execute(self, input: str | Sequence[TranscriptEntry]) -> RunResult:
        fresh_input = _input_entries(input)
        async with self.held:
            return await self._execute(fresh_input)

    async def _execute(self, fresh_input: list[TranscriptEntry]) -> RunResult:
        snapshot = await existing_run(self.options, self.run_id, self.held, self.link)
        if snapshot is not None and snapshot.status == "completed":
            return await self._replay(snapshot)
        if snapshot is not None:
            self._restore(snapshot)
        else:
            self.head = RunHead(agent_name=self.entry_agent.name, started_at=time.time())
            await self._commit(fresh_input)
        history = (
            await self.session.load(self.session_id) if self.session and self.session_id else []
        )
        try:
            output = await self._loop(history)
        except asyncio.CancelledError:
            await self._mark("interrupted", None)
            raise
        except Exception as exc:
            await self._mark("failed", {"type": type(exc).__name__, "message": str(exc)})
            raise
        await self._commit([], status="completed", output=output)
        await self._persist(self.entries, self.head)
        return self._result(replayed=False)

    async def _replay(self, snapshot: RunSnapshot) -> RunResult:
        """A completed run: its stored result, without calling any model."""
        try:
            self.active = resolve_agent(self.entry_agent, snapshot.agent_name)
        except UserError as exc:
            warnings.warn(
                f"run {self.run_id!r}: {exc}; replaying with the entry agent "
                f"{self.entry_agent.name!r}",
                RuntimeWarning,
                stacklevel=3,
            )
            self.active = self.entry_agent
        self.entries, self.head = list(snapshot.entries), snapshot.head
        # Re-applied idempotently: heals a crash between finalization and the append.
        await self._persist(self.entries, self.head)
        return self._result(replayed=True)

    def _restore(self, snapshot: RunSnapshot) -> None:
        """An interrupted run: rebuild it from its snapshot (hard errors if its agent is gone)."""
        self.active = resolve_agent(self.entry_agent, snapshot.agent_name)
        self.resumed = True
        self.entries = list(snapshot.entries)
        self.head = snapshot.head.model_copy(update={"status": "running", "error": None})

    # -- the loop ---------------------------------------------------------------------------

    async def _loop(self, history: list[TranscriptEntry]) -> JsonValue:
        while True:
            await self._drain()
            finished, output = self._finished()
            if finished:
                return output
            if self.head.turns >= self.max_turns:
                raise MaxTurnsExceeded(f"run {self.run_id!r} reached max_turns={self.max_turns}")
            system = (
                [InputEntry(role="system", content=self.active.instructions)]
                if self.active.instructions
                else []
            )
            transcript = [*system, *history, *self.entries]
            turn = await self.active.model.turn(transcript, self.active.visible_tools())
            produced = check_entries(turn.entries)
            if not produced or not all(isinstance(e, MODEL_OUTPUT) for e in produced):
                raise UserError(
                    f"model of {self.active.name!r} must return assistant text, reasoning or "
                    "tool calls (at least one)"
                )
            await self._commit(
                produced,
                turns=self.head.turns + 1,
                usage=self.head.usage + turn.usage,
                last_input_tokens=turn.usage.input_tokens,
            )

    def _finished(self) -> tuple[bool, JsonValue]:
        """Done when the latest model turn asked for no tools; its last text is the output."""
        tail: list[TranscriptEntry] = []
        for entry in reversed(self.entries):
            if not isinstance(entry, MODEL_OUTPUT):
                break
            tail.append(entry)
        if not tail or any(isinstance(e, ToolCallEntry) for e in tail):
            return False, None
        texts = [e.content for e in reversed(tail) if isinstance(e, AssistantTextEntry)]
        return True, texts[-1] if texts else ""

    async def _drain(self) -> None:
        """Execute tool calls that have no result yet, in order (also after a resume)."""
        answered = {e.call_id for e in self.entries if isinstance(e, ToolResultEntry)}
        pending = [
            e for e in self.entries if isinstance(e, ToolCallEntry) and e.call_id not in answered
        ]
        known: dict[str, ToolEffect] = {}
        if pending and self.resumed and isinstance(self.checkpointer, EffectLog):
            # Only calls a crash left behind can have recorded intents or outcomes.
            known = await self.checkpointer.tool_effects(self.run_id)
        self.resumed = False
        # Every pending call belongs to the agent that made it, the active one: a
        # handoff among them takes effect only once all of them are answered.
        caller = self.active
        for call in pending:
            target = caller.handoff_target(call.name)
            if target is not None:
                result = ToolResultEntry(
                    call_id=call.call_id, output=json.dumps({"assistant": target.name})
                )
                # Fired, not yet applied: a resume completes the switch.
                await self._commit([result], pending_handoff=target.name)
                continue
            result = await self._call(caller.tool(call.name), call, known.get(call.call_id))
            await self._commit([result])
        if self.head.pending_handoff is not None:
            self.active = resolve_agent(self.entry_agent, self.head.pending_handoff)
            await self._commit([], agent_name=self.active.name, pending_handoff=None)

    async def _call(
        self, tool: Tool | None, call: ToolCallEntry, known: ToolEffect | None
    ) -> ToolResultEntry:
        """One tool call, as its declared effect mode allows after a crash."""
        if tool is None:
            return ToolResultEntry(
                call_id=call.call_id, output=f"unknown tool {call.name!r}", is_error=True
            )
        if known is not None and known.outcome is not None:
            return known.outcome  # it finished before the crash: never run it twice
        if known is not None and tool.effect == "at_most_once":
            return ToolResultEntry(
                call_id=call.call_id,
                output=f"{tool.name} was interrupted by a crash after it started; its outcome "
                "is unknown and it was not run again (at-most-once)",
                is_error=True,
            )
        log = self.checkpointer if isinstance(self.checkpointer, EffectLog) else None
        effect = None
        if log is not None:
            if tool.effect != "at_least_once":
                await log.record_intent(self.run_id, call.call_id, tool.name, **self.held.fence)

            def effect(work: Callable[[Any], Any]) -> Awaitable[Any]:
                return log.run_effect(
                    self.run_id,
                    call.call_id,
                    tool.name,
                    work,
                    lambda value: result_entry(call.call_id, value),
                    **self.held.fence,
                )

        context = ToolContext(
            self.run_id, call.call_id, self.head.turns, self.deps, effect, tenant=self.tenant
        )
        return await tool.invoke(call.arguments, context)

    # -- persistence ------------------------------------------------------------------------

    async def _commit(self, batch: Sequence[TranscriptEntry], **changes: Any) -> None:
        """Store a step: new entries plus head changes, applied here only once stored.

        A failed write therefore leaves the run's state as the checkpoint has
        it, so a later status write can never pair a newer head with older
        entries.
        """
        head = self.head.model_copy(update={**changes, "updated_at": time.time()})
        if self.checkpointer is not None:
            started = time.monotonic()
            await self.checkpointer.append(self.run_id, batch, head, **self.held.fence, **self.link)
            self.held.renewed(started)
        self.head = head
        self.entries.extend(batch)

    async def _mark(self, status: str, error: dict[str, JsonValue] | None) -> None:
        """Best effort: record why the run stopped; the original error still propagates."""
        if self.checkpointer is None:
            return
        with contextlib.suppress(Exception):  # never mask the error that stopped the run
            await self._commit([], status=status, error=error)

    async def _persist(self, entries: list[TranscriptEntry], head: RunHead) -> None:
        if self.session is not None and self.session_id is not None:
            finished = head.updated_at if self.checkpointer is not None else time.time()
            meta: dict[str, Any] = {"timing": timing(head.started_at, finished)}
            await self.session.append(self.session_id, entries, run_id=self.run_id, meta=meta)
        if self.options is not None and self.options.delete_on_success and self.checkpointer:
            await self.checkpointer.delete(self.run_id, **self.held.fence)

    def _result(self, *, replayed: bool) -> RunResult:
        return RunResult(
            final_output=self.head.output,
            entries=list(self.entries),
            usage=self.head.usage,
            run_id=self.run_id,
            replayed=replayed,
            agent_name=self.active.name,
        )
