"""A writer process for tests/test_failover.py: keyed writes until told to stop.

    python failover_child.py URL NAME ACKS

Each round writes three things under keys of its own: a run of session ``NAME-runs``
(run id ``NAME-i``), a message of Raw Log session ``NAME-log`` (idempotency key
``NAME-i``) and a checkpoint step of run ``NAME`` (one entry, ``NAME-i``). Each write
that returns is acknowledged by a line in ACKS (``run``/``message``/``step`` and the
key), flushed before the next write. A
call that failed with nothing run is made again; one whose outcome stayed unknown is
re-issued if keyed (the session run, the message) and recorded as ``unknown``. Lost
COMMITs lovia-store settled itself are counted from its log (``settled``). The writer
stops after the round in which a line reaches its stdin.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from lovia_store import (
    AssistantTextEntry,
    Database,
    InputEntry,
    OutcomeUnknownError,
    RunHead,
    SQLCheckpointer,
    SQLSession,
    SQLSessionStorage,
    StoreBusyError,
    StoreUnavailableError,
)


class _Settled(logging.Handler):
    def __init__(self, out: Any) -> None:
        super().__init__(logging.INFO)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("settling a lost COMMIT"):
            self.out.write("settled -\n")
            self.out.flush()


async def main(url: str, name: str, acks_path: str) -> None:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    with open(acks_path, "a", buffering=1) as acks:  # noqa: ASYNC230 (a line per write)
        logging.getLogger("lovia_store").addHandler(_Settled(acks))
        logging.getLogger("lovia_store").setLevel(logging.INFO)
        async with Database(url, busy_timeout=30) as db:
            i = 0
            while not stop.is_set():
                i += 1
                await one_round(db, name, i, acks)


async def one_round(db: Database, name: str, i: int, acks: Any) -> None:
    sessions, runs, log = SQLSession(db), SQLCheckpointer(db), SQLSessionStorage(db)
    key = f"{name}-{i}"

    async def call(kind: str, write: Callable[[], Awaitable[Any]]) -> None:
        while True:
            try:
                await write()
            except OutcomeUnknownError:
                acks.write(f"unknown {kind} {key}\n")
                if kind == "step":
                    return  # re-issuing could store it twice: left to the test
                continue
            except (StoreUnavailableError, StoreBusyError) as exc:
                if not exc.retry_safe:
                    raise
                await asyncio.sleep(0.05)  # nothing ran: no primary to take it yet
                continue
            acks.write(f"{kind} {key}\n")
            return

    turn = [InputEntry(role="user", content=key), AssistantTextEntry(content="ok")]
    await call("run", lambda: sessions.append(f"{name}-runs", turn, run_id=key))
    message = AssistantTextEntry(content=key)
    await call("message", lambda: log.append(f"{name}-log", key, message, idempotency_key=key))
    step = [AssistantTextEntry(content=key)]
    await call("step", lambda: runs.append(name, step, RunHead(agent_name="writer", turns=i)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
