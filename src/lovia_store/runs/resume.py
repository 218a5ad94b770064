"""What happens to a run that is already stored: continued, replayed, restarted or given up.

``Runner.run`` asks ``existing_run`` (the ``if_run_exists`` policy, or a caller's
``resume_from``) before it executes anything; a resumed or replayed run gets its
agent back by name (``resolve_agent``). ``abandon`` is the caller's way to give
an interrupted run up: its partial transcript recorded, its checkpoint dropped.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import JsonValue

from ..checkpoints.contract import Checkpointer, RunSnapshot
from ..checkpoints.leases import DEFAULT_LEASE_TTL, HeldLease
from ..entries import TranscriptEntry, drop_dangling_tool_calls
from ..errors import UserError
from ..sessions.contract import Session
from ..validation import check_id
from .agent import Agent
from .options import CheckpointOptions

__all__ = ["abandon", "existing_run", "resolve_agent", "timing"]


async def existing_run(
    options: CheckpointOptions | None, run_id: str, held: HeldLease, link: dict[str, Any]
) -> RunSnapshot | None:
    """Apply the ``if_run_exists`` policy; the snapshot to continue, if any.

    ``held`` fences the writes made here (the run's lease); ``link`` is what every
    checkpoint write of the run passes (its session, where the checkpointer keeps it).
    """
    if options is None:
        return None
    checkpointer = options.checkpointer
    if options.resume_from is not None:
        if checkpointer is not None:
            # The checkpointer must hold the whole run before new steps join it.
            await checkpointer.delete(run_id, **held.fence)
            snapshot = options.resume_from
            await checkpointer.append(run_id, snapshot.entries, snapshot.head, **held.fence, **link)
        return options.resume_from
    assert checkpointer is not None
    existing = await checkpointer.load(run_id)
    policy = options.if_run_exists
    if policy == "restart" and existing is not None:
        await checkpointer.delete(run_id, **held.fence)
        return None
    if policy == "fail" and existing is not None:
        raise UserError(f"run {run_id!r} already exists (if_run_exists='fail')")
    if policy == "resume_only" and existing is None:
        raise UserError(f"no stored run {run_id!r} to resume (if_run_exists='resume_only')")
    return existing if policy in ("resume", "resume_only") else None


def resolve_agent(entry_agent: Agent, name: str) -> Agent:
    """The agent a stored run names, found in ``entry_agent``'s handoff graph (hard
    errors if it is gone or ambiguous: a run must not resume with another agent)."""
    candidates = entry_agent.reachable().get(name, [])
    if not candidates:
        raise UserError(
            f"agent {name!r} is not reachable from {entry_agent.name!r}: it was renamed or removed"
        )
    if len(candidates) > 1:
        raise UserError(
            f"{len(candidates)} distinct agents are named {name!r}; agent names must be "
            "unique across the handoff graph to resume a run"
        )
    return candidates[0]


def timing(started_at: float | None, finished_at: float) -> dict[str, JsonValue]:
    """The ``timing`` a finished run's segment records."""
    return {
        "started_at": started_at if started_at is not None else finished_at,
        "finished_at": finished_at,
    }


async def abandon(
    checkpointer: Checkpointer, run_id: str, *, session: Session, session_id: str
) -> list[TranscriptEntry] | None:
    """``Runner.abandon``: record an interrupted run's partial transcript as finished,
    then drop its checkpoint.

    Tool calls without a result are dropped so the stored transcript stays
    tool-consistent. The session append comes first (idempotent by run id), so
    a crash in between leaves a checkpoint that can be abandoned again.
    """
    check_id(session_id, "session_id")
    async with HeldLease(checkpointer, run_id, DEFAULT_LEASE_TTL) as held:
        snapshot = await checkpointer.load(run_id)
        if snapshot is None:
            return None
        entries = drop_dangling_tool_calls(snapshot.entries)
        meta = {"timing": timing(snapshot.started_at, time.time()), "abandoned": True}
        await session.append(session_id, entries, run_id=run_id, meta=meta)
        await checkpointer.delete(run_id, **held.fence)
        return entries
