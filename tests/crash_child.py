"""A worker for the crash matrix: runs one scripted, checkpointed run, maybe dying on purpose.

Usage: python crash_child.py URL KILL EXEC_LOG, where KILL is ``none``, ``cp:N`` (SIGKILL
right after the N-th checkpoint write committed) or ``session`` (SIGKILL right after the
session append, before ``delete_on_success`` deletes the snapshot). Tools append their
call id to EXEC_LOG (fsynced) each time they really execute.

``python crash_child.py URL loop|loop-wal ACK_LOG`` is a writer for the fault suite
(tests/test_faults.py): it appends runs to one session and checkpoint steps to one
run, forever, and writes each step's number to ACK_LOG (fsynced) once both calls
returned, i.e. were acknowledged; the parent kills it at a random moment.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from lovia_store import (
    Agent,
    AssistantTextEntry,
    CheckpointOptions,
    Database,
    ModelTurn,
    ReasoningEntry,
    RunHead,
    Runner,
    RunSnapshot,
    ScriptedModel,
    SQLCheckpointer,
    SQLSession,
    ToolCallEntry,
    ToolContext,
    TranscriptEntry,
    Usage,
    entry_to_dict,
    function_tool,
)

RUN_ID = "crash-run"
SESSION_ID = "crash-session"
LOOP_SESSION = "loop-session"
LOOP_RUN = "loop-run"
LOOP_TEXT = "x" * 20_000  # big enough that a kill often lands mid-write


def loop_entries(step: int) -> list[TranscriptEntry]:
    """What step ``step`` appends to the session (one whole run): four entries."""
    return [
        ReasoningEntry(content=f"think {step}"),
        ToolCallEntry(call_id=f"c{step}", name="lookup", arguments='{"key": "x"}'),
        AssistantTextEntry(content=f"step {step} {LOOP_TEXT}"),
        AssistantTextEntry(content=f"done {step}"),
    ]


def _acknowledge(ack_path: str, step: int) -> None:
    with open(ack_path, "a") as ack:
        ack.write(f"{step}\n")
        ack.flush()
        os.fsync(ack.fileno())


async def loop(url: str, wal: bool, ack_path: str) -> None:
    """Session ``loop-session-<stem of ACK_LOG>``, checkpointed run ``loop-run-<stem>``."""
    stem = os.path.splitext(os.path.basename(ack_path))[0]
    session_id, run_id = f"{LOOP_SESSION}-{stem}", f"{LOOP_RUN}-{stem}"
    db = Database(url, wal=wal)
    session = SQLSession(db)
    checkpointer = SQLCheckpointer(db)
    step = 0
    while True:
        step += 1
        await session.append(session_id, loop_entries(step), run_id=f"run-{step:05d}")
        head = RunHead(agent_name="loop", turns=step)
        entry = AssistantTextEntry(content=f"turn {step} {LOOP_TEXT}")
        await checkpointer.append(run_id, [entry], head)
        _acknowledge(ack_path, step)


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelTurn(
                entries=[
                    ReasoningEntry(content="two lookups first"),
                    ToolCallEntry(call_id="a", name="lookup", arguments='{"key": "x"}'),
                    ToolCallEntry(call_id="b", name="lookup", arguments='{"key": "y"}'),
                ],
                usage=Usage(input_tokens=10, output_tokens=3),
            ),
            ModelTurn(
                entries=[ToolCallEntry(call_id="c", name="combine", arguments='{"n": 2}')],
                usage=Usage(input_tokens=20, output_tokens=2),
            ),
            ModelTurn(
                entries=[AssistantTextEntry(content="x and y combined: 2")],
                usage=Usage(input_tokens=30, output_tokens=5),
            ),
        ]
    )


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillingCheckpointer:
    def __init__(self, inner: SQLCheckpointer, kill_after: int | None) -> None:
        self.inner = inner
        self.kill_after = kill_after
        self.appends = 0

    async def append(self, run_id: str, entries: Sequence[TranscriptEntry], head: RunHead) -> None:
        await self.inner.append(run_id, entries, head)
        self.appends += 1
        if self.appends == self.kill_after:
            _kill()

    async def load(self, run_id: str) -> RunSnapshot | None:
        return await self.inner.load(run_id)

    async def delete(self, run_id: str) -> None:
        await self.inner.delete(run_id)


class KillingSession(SQLSession):
    kill = False

    async def append(self, session_id: str, entries: Sequence[TranscriptEntry], **kw: Any) -> str:
        run_id = await super().append(session_id, entries, **kw)
        if self.kill:
            _kill()
        return run_id


async def main(url: str, kill: str, log_path: str) -> None:
    def executed(call_id: str) -> None:
        with open(log_path, "a") as log:
            log.write(call_id + "\n")
            log.flush()
            os.fsync(log.fileno())

    @function_tool
    def lookup(ctx: ToolContext, key: str) -> str:
        executed(ctx.call_id)
        return f"value of {key}"

    @function_tool
    async def combine(ctx: ToolContext, n: int) -> dict[str, int]:
        executed(ctx.call_id)
        return {"combined": n}

    db = Database(url, wal=url.startswith("sqlite"))
    kill_after = int(kill.split(":")[1]) if kill.startswith("cp:") else None
    checkpointer = KillingCheckpointer(SQLCheckpointer(db), kill_after)
    session = KillingSession(db)
    session.kill = kill == "session"
    agent = Agent("worker", script(), tools=[lookup, combine])
    result = await Runner.run(
        agent,
        "combine x and y",
        session=session,
        session_id=SESSION_ID,
        checkpoint=CheckpointOptions(checkpointer, RUN_ID, delete_on_success=True),  # type: ignore[arg-type]
    )
    print(
        json.dumps(
            {
                "output": result.final_output,
                "replayed": result.replayed,
                "entries": [entry_to_dict(e) for e in result.entries],
                "appends": checkpointer.appends,
            }
        )
    )
    await db.close()


if __name__ == "__main__":
    if sys.argv[2].startswith("loop"):
        asyncio.run(loop(sys.argv[1], sys.argv[2] == "loop-wal", sys.argv[3]))
    else:
        asyncio.run(main(*sys.argv[1:4]))
