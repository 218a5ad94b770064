"""A worker for the lease tests: one checkpointed run under a lease, maybe stalling on purpose.

Usage: python lease_child.py KIND TARGET MODE RUN_ID SESSION_ID TTL WORKDIR. KIND is
``sqlite_wal``, ``postgres`` or ``mariadb`` and TARGET the file or URL. MODE is

- ``run``: run (or resume) the run normally;
- ``stop``: inside the tool call ``b`` write WORKDIR/in_tool and SIGSTOP this process
  (SIGCONT lets the tool return, and the run carries on: its next write is then refused
  if another worker took the run over meanwhile);
- ``long``: the tool call ``b`` writes WORKDIR/in_tool, then waits until WORKDIR/release
  exists (no checkpoint write happens meanwhile).

The run is crash_child's script (two lookups, a combine, an answer) with a session, so
a finished run lands in the session. Every real tool execution appends "PID CALL_ID" to
WORKDIR/tools.log (fsynced). The outcome is one JSON line on stdout, with exit code 0
(``completed``), 3 (``ownership_lost``: RunOwnershipLost) or 4 (``in_progress``:
RunInProgressError).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from crash_child import script
from lovia_store import (
    Agent,
    CheckpointOptions,
    Database,
    RunInProgressError,
    RunLease,
    Runner,
    RunOwnershipLost,
    SQLCheckpointer,
    SQLSession,
    ToolContext,
    entry_to_dict,
    function_tool,
)
from lovia_store.checkpoints.leases import DEFAULT_LEASE_TTL

QUESTION = "combine x and y"
EXIT_CODES = {"completed": 0, "ownership_lost": 3, "in_progress": 4}
LONG_TOOL_LIMIT = 120.0
"""Seconds after which a ``long`` tool gives up waiting for the release file (a lost test)."""


class WatchedCheckpointer(SQLCheckpointer):
    """A SQL checkpointer that counts the runner's lease calls.

    ``idle`` is set while no background renewal is in flight, so a tool can stall the
    process between renewals only; ``renewals`` counts the ones that succeeded
    and ``tokens`` the fencing tokens this worker acquired.
    """

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.idle = asyncio.Event()  # set while no renewal is in flight
        self.idle.set()
        self.renewals = 0
        self.tokens: list[int] = []

    async def acquire_lease(self, run_id: str, *, ttl: float = DEFAULT_LEASE_TTL) -> RunLease:
        lease = await super().acquire_lease(run_id, ttl=ttl)
        self.tokens.append(lease.token)
        return lease

    async def renew_lease(self, lease: RunLease) -> RunLease:
        self.idle.clear()
        try:
            renewed = await super().renew_lease(lease)
        finally:
            self.idle.set()
        self.renewals += 1
        return renewed


def log_line(path: Path, line: str) -> None:
    with open(path, "a") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())


def build_agent(
    mode: str, workdir: Path, checkpointer: WatchedCheckpointer | None, ttl: float
) -> Agent:
    """crash_child's agent; in ``stop`` and ``long`` mode the call ``b`` stalls."""
    workdir.mkdir(parents=True, exist_ok=True)

    async def stall() -> None:
        if mode == "stop":
            assert checkpointer is not None
            # The write that stored result ``a`` just renewed the lease, and the runner
            # renews in the background only after ttl/3 without a write, so normally
            # no renewal is in flight here. On a slow machine one may have started while
            # that write was slow: wait it out, because a process stopped in the middle
            # of a renewal's transaction would keep the lease row locked. From the check
            # to the SIGSTOP nothing awaits, so no renewal can start in between.
            while not checkpointer.idle.is_set():
                await checkpointer.idle.wait()
            log_line(workdir / "in_tool", str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)
        elif mode == "long":
            log_line(workdir / "in_tool", str(os.getpid()))
            started = time.monotonic()
            while not (workdir / "release").exists():
                if time.monotonic() - started > LONG_TOOL_LIMIT:
                    raise TimeoutError("the test never released the long tool call")
                await asyncio.sleep(0.02)

    @function_tool
    async def lookup(ctx: ToolContext, key: str) -> str:
        log_line(workdir / "tools.log", f"{os.getpid()} {ctx.call_id}")
        if ctx.call_id == "b":
            await stall()
        return f"value of {key}"

    @function_tool
    async def combine(ctx: ToolContext, n: int) -> dict[str, int]:
        log_line(workdir / "tools.log", f"{os.getpid()} {ctx.call_id}")
        return {"combined": n}

    return Agent("worker", script(), tools=[lookup, combine])


async def main(
    kind: str, target: str, mode: str, run_id: str, session_id: str, ttl: str, workdir: str
) -> int:
    seconds = float(ttl)
    db = Database(target, wal=kind == "sqlite_wal")
    checkpointer = WatchedCheckpointer(db)
    agent = build_agent(mode, Path(workdir), checkpointer, seconds)
    report: dict[str, Any]
    try:
        result = await Runner.run(
            agent,
            QUESTION,
            session=SQLSession(db),
            session_id=session_id,
            checkpoint=CheckpointOptions(checkpointer, run_id, lease_ttl=seconds),
        )
    except RunOwnershipLost as exc:
        report = {"outcome": "ownership_lost", "token": exc.token}
    except RunInProgressError as exc:
        report = {
            "outcome": "in_progress",
            "holder": exc.holder,
            "expires_at": exc.expires_at.isoformat(),
        }
    else:
        report = {
            "outcome": "completed",
            "output": result.final_output,
            "replayed": result.replayed,
            "entries": [entry_to_dict(e) for e in result.entries],
        }
    finally:
        await db.close()
    report |= {"tokens": checkpointer.tokens, "renewals": checkpointer.renewals}
    print(json.dumps(report), flush=True)
    return EXIT_CODES[report["outcome"]]


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:8])))
