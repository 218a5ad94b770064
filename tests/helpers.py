"""Small builders for transcript entries used across the tests, and the test tier."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from sqlalchemy import event

from lovia_store import (
    AssistantTextEntry,
    Database,
    InputEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)

FULL_TIER = os.environ.get("LOVIA_TEST_TIER") == "full"
"""``LOVIA_TEST_TIER=full`` (CI): every test, at full size. Without it, the default tier."""


def examples(full: int) -> int:
    """Hypothesis' ``max_examples`` for a property: ``full`` in the full tier, a quarter
    of it (at least 10) in the default tier, a contributor's quick loop. Explicit
    ``@example`` cases run in both."""
    return full if FULL_TIER else max(10, full // 4)


def user(text: str) -> InputEntry:
    return InputEntry(role="user", content=text)


def say(text: str) -> AssistantTextEntry:
    return AssistantTextEntry(content=text)


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> ToolCallEntry:
    return ToolCallEntry(call_id=call_id, name=name, arguments=arguments)


def result(call_id: str, output: str = "ok", *, raw: object = None) -> ToolResultEntry:
    return ToolResultEntry(call_id=call_id, output=output, raw=raw)  # type: ignore[arg-type]


def a_run(tag: str, *, output: str = "ok") -> list[TranscriptEntry]:
    """A four-entry run: question, one tool round trip, answer."""
    return [user(f"q {tag}"), call(f"c-{tag}"), result(f"c-{tag}", output), say(f"a {tag}")]


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 60.0) -> None:
    """Wait until ``check()`` holds, however slow the machine: ``within`` is a bound on a
    hang, never a timing the test relies on."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"still not true after {within} s"
        await asyncio.sleep(0.02)


@contextlib.contextmanager
def commit_lost(db: Database, *, landed: bool = True) -> Iterator[list[int]]:
    """The next COMMIT fails on the wire: after the server committed it (``landed``: its
    reply is lost, as when a primary is killed mid-reply) or before (rolled back).
    Later COMMITs go through. Yields how many fired."""
    dialect = db.engine.sync_engine.dialect
    fired: list[int] = []

    def do_commit(dbapi_connection: Any) -> None:
        if fired:
            type(dialect).do_commit(dialect, dbapi_connection)
            return
        fired.append(1)
        if landed:
            type(dialect).do_commit(dialect, dbapi_connection)
        else:
            type(dialect).do_rollback(dialect, dbapi_connection)
        raise ConnectionResetError(
            "the reply to COMMIT was lost" if landed else "the COMMIT was lost"
        )

    dialect.do_commit = do_commit  # type: ignore[method-assign]
    try:
        yield fired
    finally:
        del dialect.do_commit


@contextlib.contextmanager
def on_first_statement(db: Database, then: Callable[[], None]) -> Iterator[None]:
    """Call ``then`` (in a thread of its own) once ``db`` sends its next statement, or
    on leaving the block: a lock is released once a call meets it, not after a guess."""
    sent = threading.Event()

    def note(*_args: Any) -> None:
        sent.set()

    event.listen(db.sync_engine, "before_cursor_execute", note)
    helper = threading.Thread(target=lambda: sent.wait(60) and then())
    helper.start()
    try:
        yield
    finally:
        sent.set()
        helper.join()
        event.remove(db.sync_engine, "before_cursor_execute", note)


def pause_forever_at(db: Database, statement: str, nth: int) -> None:
    """Once ``db`` has run its ``nth`` statement starting with ``statement`` (inside that
    transaction), print "paused" and block: a child process the test kills right there."""
    seen = [0]

    def after(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if sql.lstrip().startswith(statement):
            seen[0] += 1
            if seen[0] == nth:
                print("paused", flush=True)
                threading.Event().wait()

    event.listen(db.sync_engine, "after_cursor_execute", after)


def lapse_lease(run_id: str) -> Callable[[Any], None]:
    """Work that ages a run's stored lease past its expiry, as its ttl going by unrenewed
    would: a takeover is tested from stored state, never by sleeping past a short ttl."""
    from sqlalchemy import update

    from lovia_store.db.tables import run_leases

    def work(conn: Any) -> None:
        lease = update(run_leases).where(run_leases.c.run_id == run_id)
        assert conn.execute(lease.values(expires_ms=1)).rowcount == 1

    return work
