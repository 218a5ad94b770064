"""A worker for the crash matrix: runs one scripted, checkpointed run, maybe dying on purpose.

Usage: python crash_child.py URL KILL EXEC_LOG, where KILL is ``none``, ``cp:N`` (SIGKILL
right after the N-th checkpoint write committed) or ``session`` (SIGKILL right after the
session append, before ``delete_on_success`` deletes the snapshot). Tools append their
call id to EXEC_LOG (fsynced) each time they really execute.
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
    asyncio.run(main(*sys.argv[1:4]))
