"""A worker process running lovia's own Runner on lovia-store (issue 14's process tests).

``python lovia_child.py TARGET RUN_ID EFFECTS SCRIPT [--crash | --hold] [--ttl S]``

The agent looks an order up, then charges it, then answers. ``SCRIPT`` is
``full`` (all three model turns), ``tail`` (only the answer: what a resumed
run still needs) or ``none`` (a replay calls no model); lovia's
ScriptedProvider fails when called once more than its script holds. The
``charge`` tool appends a line to ``EFFECTS``; with ``--crash`` it then kills
its own process (SIGKILL) before its result can be stored, with ``--hold`` it
writes ``EFFECTS.holding`` and sleeps so the parent can act while the run is
in flight. The last line printed is a JSON report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from lovia import Agent, CheckpointOptions, Runner, tool
from lovia.testing import ScriptedProvider, call, text

from lovia_store import Database
from lovia_store.integrations.lovia import SQLCheckpointer, SQLSession

SESSION = "customer"


def build(args: argparse.Namespace) -> Agent[Any]:
    effects = Path(args.effects)

    @tool
    def lookup(order: str) -> str:
        """Find an order."""
        return f"{order}: paid 20"

    @tool
    def charge(order: str) -> str:
        """Refund an order (a side effect: it leaves a line in the effects file)."""
        with effects.open("a") as log:
            log.write(f"charge {order} pid {os.getpid()}\n")
            log.flush()
            os.fsync(log.fileno())
        if args.crash:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.hold:
            Path(f"{effects}.holding").write_text(str(os.getpid()))
            time.sleep(args.hold)
        return f"refunded {order}"

    turns = [call("lookup", {"order": "A1"}), call("charge", {"order": "A1"}), text("Refunded.")]
    script = {"full": turns, "tail": turns[-1:], "none": []}[args.script]
    return Agent(name="support", model=ScriptedProvider(script), tools=[lookup, charge])


async def main(args: argparse.Namespace) -> dict[str, Any]:
    wal = "://" not in args.target
    async with Database(args.target, wal=wal) as db:
        session, cp = SQLSession(db), SQLCheckpointer(db, lease_ttl=args.ttl)
        try:
            result = await Runner.run(
                build(args),
                "Refund order A1.",
                session=session,
                session_id=SESSION,
                checkpoint=CheckpointOptions(cp, args.run_id),
            )
        except Exception as exc:
            return {"error": type(exc).__name__, "message": str(exc)}
        finally:
            await cp.close()
    return {"output": result.output}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("run_id")
    parser.add_argument("effects")
    parser.add_argument("script", choices=["full", "tail", "none"])
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--ttl", type=float, default=30.0)
    print(json.dumps(asyncio.run(main(parser.parse_args()))), flush=True)
