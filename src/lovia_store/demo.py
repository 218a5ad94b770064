"""``lovia-store demo``: a support run that crashes mid-way and resumes with the same run id.

The conversation is scripted (no model provider needed), the storage is real:
a SQLite file holds the session and the checkpoint. A worker process runs the
agent and is killed (SIGKILL) inside a tool call; a second worker re-issues
the same call with the same ``run_id`` and finishes the run from the
checkpoint. A third call replays the completed run without touching the model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .entries import AssistantTextEntry, ReasoningEntry, ToolCallEntry
from .runs.agent import Agent, ModelTurn, ScriptedModel
from .runs.options import CheckpointOptions
from .runs.runner import Runner, RunResult
from .runs.tools import ToolContext, function_tool
from .stores.sql_checkpoints import SQLiteCheckpointer
from .stores.sql_sessions import SQLiteSession

__all__ = ["main"]

SESSION = "customer-42"
RUN_ID = "refund-A1042"


def _script() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelTurn(
                entries=[
                    ReasoningEntry(content="Check the order before promising anything."),
                    ToolCallEntry(
                        call_id="call-1", name="lookup_order", arguments='{"order": "A-1042"}'
                    ),
                ]
            ),
            ModelTurn(
                entries=[
                    ToolCallEntry(
                        call_id="call-2",
                        name="issue_refund",
                        arguments='{"order": "A-1042", "amount": 89.0}',
                    ),
                    ToolCallEntry(
                        call_id="call-3",
                        name="send_email",
                        arguments='{"to": "ana@example.com", "subject": "Your refund for A-1042"}',
                    ),
                ]
            ),
            ModelTurn(
                entries=[
                    AssistantTextEntry(
                        content="Done: 89.00 € is on its way back to your card, and a "
                        "confirmation email is in your inbox."
                    )
                ]
            ),
        ]
    )


def _effects_file(db: Path) -> Path:
    return db.with_name(db.name + ".effects.jsonl")


def _record(db: Path, event: dict[str, object]) -> None:
    with _effects_file(db).open("a") as log:
        log.write(json.dumps(event) + "\n")
        log.flush()
        os.fsync(log.fileno())


def _agent(db: Path, crash_in: str | None) -> Agent:
    @function_tool
    def lookup_order(order: str) -> dict[str, object]:
        """Find an order."""
        _record(db, {"tool": "lookup_order", "order": order})
        return {"order": order, "item": "kettle", "paid": 89.0, "status": "delivered damaged"}

    @function_tool
    def issue_refund(ctx: ToolContext, order: str, amount: float) -> str:
        """Refund an order."""
        _record(db, {"tool": "issue_refund", "key": f"{ctx.run_id}/{ctx.call_id}"})
        return f"refunded {amount:.2f} for {order}"

    @function_tool
    def send_email(ctx: ToolContext, to: str, subject: str) -> str:
        """Send an email; the mail service deduplicates on the idempotency key."""
        key = f"{ctx.run_id}/{ctx.call_id}"
        sent_before = any(
            json.loads(line).get("key") == key and json.loads(line).get("sent")
            for line in _effects_file(db).read_text().splitlines()
        )
        _record(db, {"tool": "send_email", "key": key, "sent": not sent_before, "turn": ctx.turn})
        if crash_in == "send_email":
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies before the result is stored
        return "already sent (same idempotency key)" if sent_before else f"sent to {to}"

    return Agent(
        "support",
        _script(),
        instructions="You are a careful support agent.",
        tools=[lookup_order, issue_refund, send_email],
    )


async def _run(db: Path, crash_in: str | None) -> tuple[RunResult, int]:
    agent = _agent(db, crash_in)
    async with SQLiteSession(db, wal=True) as session, SQLiteCheckpointer(db, wal=True) as cp:
        result = await Runner.run(
            agent,
            "My kettle (order A-1042) arrived broken. Refund me, and email me a confirmation.",
            session=session,
            session_id=SESSION,
            checkpoint=CheckpointOptions(cp, RUN_ID),
        )
    assert isinstance(agent.model, ScriptedModel)
    return result, agent.model.calls


def _worker(db: Path, crash_in: str | None) -> int:
    result, model_calls = asyncio.run(_run(db, crash_in))
    report = {
        "replayed": result.replayed,
        "output": result.final_output,
        "model_calls": model_calls,
    }
    print(json.dumps(report))
    return 0


def _spawn(db: Path, crash_in: str | None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lovia_store.demo", "--worker", str(db)]
    if crash_in:
        command += ["--crash-in", crash_in]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _say(text: str = "") -> None:
    print(text, flush=True)


async def _snapshot_report(db: Path) -> None:
    async with SQLiteCheckpointer(db) as cp:
        snapshot = await cp.load(RUN_ID)
    if snapshot is None:
        _say("   (no checkpoint)")
        return
    answered = {e.call_id for e in snapshot.entries if e.type == "tool_result"}
    _say(
        f"   checkpoint {RUN_ID!r}: status={snapshot.status}, turns={snapshot.turns}, "
        f"{len(snapshot.entries)} entries stored"
    )
    for entry in snapshot.entries:
        if isinstance(entry, ToolCallEntry):
            state = "result stored" if entry.call_id in answered else "NO RESULT (dangling)"
            _say(f"     - {entry.name} [{entry.call_id}]: {state}")


async def _final_report(db: Path) -> None:
    from .cli import describe

    async with SQLiteSession(db) as session:
        segments = await session.segments(SESSION)
    for segment in segments:
        _say(f"   run {segment.run_id}")
        for entry in segment.entries:
            _say("     " + describe(entry))
        timing = (segment.meta or {}).get("timing", {})
        if isinstance(timing, dict) and timing:
            start, end = timing["started_at"], timing["finished_at"]
            _say(
                f"   timing: started {_clock(start)}, finished {_clock(end)} "
                f"({end - start:.2f}s, from the first start, across the crash)"
            )


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def _effects(db: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in _effects_file(db).read_text().splitlines()]


def _demo(db: Path) -> int:
    for stale in (
        db,
        db.with_name(db.name + "-wal"),
        db.with_name(db.name + "-shm"),
        _effects_file(db),
    ):
        stale.unlink(missing_ok=True)
    _effects_file(db).touch()
    _say(f"lovia-store demo: a support run on {db}")
    _say()
    _say(f"1. A worker process starts run {RUN_ID!r} in session {SESSION!r}.")
    _say("   The model looks up the order, then asks for two tools at once:")
    _say("   issue_refund and send_email. The worker is killed (SIGKILL) inside send_email,")
    _say("   after the email went out but before its result reached the checkpoint.")
    crashed = _spawn(db, crash_in="send_email")
    _say(
        f"   worker exit status: {crashed.returncode} (killed by signal {-crashed.returncode})"
        if crashed.returncode < 0
        else f"   worker exit status: {crashed.returncode}"
    )
    asyncio.run(_snapshot_report(db))
    _say()
    _say("2. The session does not have the run yet: interrupted runs are never appended.")
    _say(f"   A new worker re-issues the same call with run_id={RUN_ID!r}.")
    before = len(_effects(db))
    resumed = _spawn(db, crash_in=None)
    if resumed.returncode != 0:
        _say(resumed.stderr)
        return 1
    outcome = json.loads(resumed.stdout.strip().splitlines()[-1])
    rerun = [str(event["tool"]) for event in _effects(db)[before:]]
    _say(
        f"   It rebuilt the run from the checkpoint; model calls: {outcome['model_calls']} "
        "(the turn after the tools).\n   The first two model turns came from the checkpoint."
    )
    _say(
        f"   Tools executed again: {', '.join(rerun) or 'none'}. Every call whose result was stored"
    )
    _say("   was skipped; the one dangling call ran again, with the same turn number.")
    _say(f"   result: {outcome['output']}")
    _say()
    _say("3. What the tools saw (their own log of side effects):")
    for event in _effects(db):
        note = ""
        if event["tool"] == "send_email":
            note = (
                "  <- email sent"
                if event["sent"]
                else "  <- duplicate suppressed by idempotency key"
            )
        _say(f"   {event['tool']:<13} {event.get('key', event.get('order'))}{note}")
    _say("   Tools re-run on resume are at-least-once: send_email used run_id + call_id as an")
    _say("   idempotency key, so the customer still got exactly one email.")
    _say()
    _say("4. Re-issuing the finished run replays it: the stored result, no model call.")
    replay = _spawn(db, crash_in=None)
    replayed = json.loads(replay.stdout.strip().splitlines()[-1])
    same = replayed["output"] == outcome["output"]
    _say(
        f"   replayed={replayed['replayed']}, model calls={replayed['model_calls']}, "
        f"same output: {same}"
    )
    _say()
    _say(f"5. The session {SESSION!r} now holds the run exactly once:")
    asyncio.run(_final_report(db))
    _say()
    _say(f"Look again any time: lovia-store show {SESSION} {db}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lovia-store demo")
    parser.add_argument("database", nargs="?", default="lovia-store.sqlite3")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--crash-in", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    db = Path(args.database).resolve()
    if args.worker:
        return _worker(db, args.crash_in)
    return _demo(db)


if __name__ == "__main__":
    raise SystemExit(main())
