"""``lovia-store demo``: a support run that crashes mid-way and resumes with the same run id.

The conversation is scripted (no model provider needed), the storage is real:
a SQLite file (or the database a URL names) holds the session and the
checkpoint. A worker process runs the agent and is killed (SIGKILL) inside a
tool call; a second worker re-issues the same call with the same ``run_id``
and finishes the run from the checkpoint. A third call replays the completed
run without touching the model.

The demo never deletes or changes data it did not write: without a target it
works in a temporary folder that it removes at the end; a named file must not
exist yet, and a database that already exists (a file, or a URL's database
holding sessions) is used only with ``--force``, and then only for a session
and a run of the demo's own, under ids no earlier run used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .checkpoints.sql import SQLCheckpointer
from .db.database import Database
from .entries import AssistantTextEntry, ReasoningEntry, ToolCallEntry
from .errors import UserError
from .runs.agent import Agent, ModelTurn, ScriptedModel
from .runs.options import CheckpointOptions
from .runs.runner import Runner, RunResult
from .runs.tools import ToolContext, function_tool
from .sessions.sql import SQLSession

__all__ = ["main"]

SESSION = "customer-42"
RUN_ID = "refund-A1042"
_TARGET_VARIABLE = "LOVIA_STORE_DEMO_TARGET"  # the worker's target: a URL's password stays off argv


@dataclass(frozen=True)
class Demo:
    """Where one demo run writes: its database, its ids, and the tools' side-effect log."""

    target: str
    effects: Path
    session_id: str = SESSION
    run_id: str = RUN_ID

    def database(self) -> Database:
        return Database(self.target, wal=_is_sqlite(self.target))


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


def _is_sqlite(target: str) -> bool:
    return "://" not in target or target.startswith("sqlite")


def _record(effects: Path, event: dict[str, object]) -> None:
    with effects.open("a") as log:
        log.write(json.dumps(event) + "\n")
        log.flush()
        os.fsync(log.fileno())


def _agent(effects: Path, crash_in: str | None) -> Agent:
    @function_tool
    def lookup_order(order: str) -> dict[str, object]:
        """Find an order."""
        _record(effects, {"tool": "lookup_order", "order": order})
        return {"order": order, "item": "kettle", "paid": 89.0, "status": "delivered damaged"}

    @function_tool
    def issue_refund(ctx: ToolContext, order: str, amount: float) -> str:
        """Refund an order."""
        _record(effects, {"tool": "issue_refund", "key": f"{ctx.run_id}/{ctx.call_id}"})
        return f"refunded {amount:.2f} for {order}"

    @function_tool
    def send_email(ctx: ToolContext, to: str, subject: str) -> str:
        """Send an email; the mail service deduplicates on the idempotency key."""
        key = f"{ctx.run_id}/{ctx.call_id}"
        sent_before = any(
            json.loads(line).get("key") == key and json.loads(line).get("sent")
            for line in effects.read_text().splitlines()
        )
        _record(
            effects, {"tool": "send_email", "key": key, "sent": not sent_before, "turn": ctx.turn}
        )
        if crash_in == "send_email":
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies before the result is stored
        return "already sent (same idempotency key)" if sent_before else f"sent to {to}"

    return Agent(
        "support",
        _script(),
        instructions="You are a careful support agent.",
        tools=[lookup_order, issue_refund, send_email],
    )


async def _run(demo: Demo, crash_in: str | None) -> tuple[RunResult, int]:
    agent = _agent(demo.effects, crash_in)
    async with demo.database() as db:
        result = await Runner.run(
            agent,
            "My kettle (order A-1042) arrived broken. Refund me, and email me a confirmation.",
            session=SQLSession(db),
            session_id=demo.session_id,
            checkpoint=CheckpointOptions(SQLCheckpointer(db), demo.run_id),
        )
    assert isinstance(agent.model, ScriptedModel)
    return result, agent.model.calls


def _worker(demo: Demo, crash_in: str | None) -> int:
    result, model_calls = asyncio.run(_run(demo, crash_in))
    report = {
        "replayed": result.replayed,
        "output": result.final_output,
        "model_calls": model_calls,
    }
    print(json.dumps(report))
    return 0


def _spawn(demo: Demo, crash_in: str | None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lovia_store.demo", "--worker"]
    command += ["--effects", str(demo.effects), "--session", demo.session_id, "--run", demo.run_id]
    if crash_in:
        command += ["--crash-in", crash_in]
    env = {**os.environ, _TARGET_VARIABLE: demo.target}
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env)


def _say(text: str = "") -> None:
    print(text, flush=True)


async def _snapshot_report(demo: Demo) -> None:
    async with demo.database() as db:
        snapshot = await SQLCheckpointer(db).load(demo.run_id)
    if snapshot is None:
        _say("   (no checkpoint)")
        return
    answered = {e.call_id for e in snapshot.entries if e.type == "tool_result"}
    _say(
        f"   checkpoint {demo.run_id!r}: status={snapshot.status}, turns={snapshot.turns}, "
        f"{len(snapshot.entries)} entries stored"
    )
    for entry in snapshot.entries:
        if isinstance(entry, ToolCallEntry):
            state = "result stored" if entry.call_id in answered else "NO RESULT (dangling)"
            _say(f"     - {entry.name} [{entry.call_id}]: {state}")


async def _final_report(demo: Demo) -> None:
    from .cli import describe

    async with demo.database() as db:
        segments = await SQLSession(db).segments(demo.session_id)
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


def _effects(demo: Demo) -> list[dict[str, object]]:
    return [json.loads(line) for line in demo.effects.read_text().splitlines()]


def _demo(demo: Demo, shown_as: str) -> int:
    demo.effects.touch()
    _say(f"lovia-store demo: a support run on {shown_as}")
    _say()
    _say(f"1. A worker process starts run {demo.run_id!r} in session {demo.session_id!r}.")
    _say("   The model looks up the order, then asks for two tools at once:")
    _say("   issue_refund and send_email. The worker is killed (SIGKILL) inside send_email,")
    _say("   after the email went out but before its result reached the checkpoint.")
    crashed = _spawn(demo, crash_in="send_email")
    _say(
        f"   worker exit status: {crashed.returncode} (killed by signal {-crashed.returncode})"
        if crashed.returncode < 0
        else f"   worker exit status: {crashed.returncode}"
    )
    asyncio.run(_snapshot_report(demo))
    _say()
    _say("2. The session does not have the run yet: interrupted runs are never appended.")
    _say(f"   A new worker re-issues the same call with run_id={demo.run_id!r}.")
    before = len(_effects(demo))
    resumed = _spawn(demo, crash_in=None)
    if resumed.returncode != 0:
        _say(resumed.stderr)
        return 1
    outcome = json.loads(resumed.stdout.strip().splitlines()[-1])
    rerun = [str(event["tool"]) for event in _effects(demo)[before:]]
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
    for event in _effects(demo):
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
    replay = _spawn(demo, crash_in=None)
    replayed = json.loads(replay.stdout.strip().splitlines()[-1])
    same = replayed["output"] == outcome["output"]
    _say(
        f"   replayed={replayed['replayed']}, model calls={replayed['model_calls']}, "
        f"same output: {same}"
    )
    _say()
    _say(f"5. The session {demo.session_id!r} now holds the run exactly once:")
    asyncio.run(_final_report(demo))
    return 0


def _shown(target: str) -> str:
    """``target`` as it may be printed: a URL without its password."""
    if "://" not in target:
        return target
    from sqlalchemy.engine import make_url

    return make_url(target).render_as_string(hide_password=True)


def _sqlite_path(target: str) -> Path | None:
    if not _is_sqlite(target):
        return None
    if "://" in target:
        from sqlalchemy.engine import make_url

        database = make_url(target).database
        return None if database in (None, "", ":memory:") else Path(str(database))
    return None if target == ":memory:" else Path(target).expanduser()


async def _holds_data(target: str) -> bool:
    """Whether a server database already holds lovia-store sessions or runs (never migrates)."""
    from .db.schema import read_state

    async with Database(target) as db:
        state = await db.read_unchecked(read_state)
    return state.revision is not None or state.joined or bool(state.versions)


def _existing(target: str) -> str | None:
    """What makes ``target`` an existing database, or None for a fresh one."""
    path = _sqlite_path(target)
    if path is not None:
        found = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
        return f"{found[0]} exists" if found else None
    if _is_sqlite(target):
        return None
    return "it already holds lovia-store data" if asyncio.run(_holds_data(target)) else None


@contextlib.contextmanager
def _demo_target(target: str | None, *, force: bool) -> Iterator[tuple[Demo, str, bool]]:
    """The demo's database and scratch folder: (demo, how to show it, whether it is kept)."""
    with tempfile.TemporaryDirectory(prefix="lovia-store-demo-") as scratch:
        effects = Path(scratch) / "effects.jsonl"
        if target is None:
            path = Path(scratch) / "demo.sqlite3"
            yield Demo(str(path), effects), f"{path} (a temporary file)", False
            return
        in_use = _existing(target)
        if in_use is not None and not force:
            raise UserError(
                f"{_shown(target)}: {in_use}; the demo writes only to a new database. "
                "Name a file that does not exist yet, or pass --force to add the demo's own "
                "session and run to this one (nothing else in it is changed)"
            )
        # Ids of this run's own, so an existing database's rows are never touched.
        suffix = "" if in_use is None else f"-{uuid.uuid4().hex[:8]}"
        demo = Demo(target, effects, SESSION + suffix, RUN_ID + suffix)
        yield demo, _shown(target), True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lovia-store demo")
    parser.add_argument("target", nargs="?", default=None)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--effects", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--session", default=SESSION, help=argparse.SUPPRESS)
    parser.add_argument("--run", default=RUN_ID, help=argparse.SUPPRESS)
    parser.add_argument("--crash-in", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker = Demo(os.environ[_TARGET_VARIABLE], Path(args.effects), args.session, args.run)
        return _worker(worker, args.crash_in)
    with _demo_target(args.target, force=args.force) as (demo, shown_as, kept):
        status = _demo(demo, shown_as)
        _say()
        if kept:
            _say(f"Look again any time: lovia-store show {demo.session_id} {args.target}")
        else:
            _say("The temporary database is removed now; name a new file to keep one:")
            _say("lovia-store demo my-demo.sqlite3")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
