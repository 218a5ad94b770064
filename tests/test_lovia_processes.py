"""lovia's Runner in real processes on lovia-store: crash and resume, and run ownership.

Workers are separate interpreters (``lovia_child.py``) running lovia's own
``Runner`` with our integration stores on SQLite (WAL), PostgreSQL and MariaDB.
lovia alone has no leases: two workers re-issuing one run id both run its
tools. Through the integration the second one is refused while the first
lives, and a worker that stalled past its lease cannot write any more.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from backends import Backend, _backend
from helpers import lapse_lease
from lovia_store import SQLCheckpointer as NativeCheckpointer
from lovia_store import SQLSession as NativeSession

CHILD = Path(__file__).with_name("lovia_child.py")
KINDS = ("sqlite_wal", "postgres", "mariadb")
WAIT = 90.0

pytestmark = pytest.mark.slow


@pytest.fixture(params=KINDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    async for value in _backend(request.param, tmp_path):
        yield value


def start(backend: Backend, effects: Path, script: str, *flags: str) -> subprocess.Popen[str]:
    assert backend.target is not None
    command = [sys.executable, str(CHILD), backend.target, "job-1", str(effects), script, *flags]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def report(worker: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = worker.communicate(timeout=WAIT)
    assert worker.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def charges(effects: Path) -> list[str]:
    return effects.read_text().splitlines() if effects.exists() else []


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


async def stored(backend: Backend) -> tuple[int, Any]:
    assert backend.target is not None
    async with NativeSession(backend.target) as session:
        segments = await session.segments("customer")
        snapshot = await NativeCheckpointer(session.database).load("job-1")
    return len(segments), snapshot


async def lapse(backend: Backend) -> None:
    assert backend.target is not None
    async with NativeSession(backend.target) as session:
        await session.database.write(lapse_lease("job-1"))


async def test_a_worker_killed_inside_a_tool_call_is_resumed_by_the_next(
    backend: Backend, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    crashed = start(backend, effects, "full", "--crash")
    crashed.communicate(timeout=WAIT)
    assert crashed.returncode == -signal.SIGKILL
    assert len(charges(effects)) == 1
    segments, snapshot = await stored(backend)
    assert segments == 0 and snapshot is not None and snapshot.status == "running"

    # The re-issue resumes: the dangling charge runs once more, the model is asked
    # only for the answer (its script holds nothing else), one segment lands.
    resumed = report(start(backend, effects, "tail"))
    assert resumed == {"output": "Refunded."}
    assert len(charges(effects)) == 2
    segments, snapshot = await stored(backend)
    assert segments == 1 and snapshot.status == "completed"
    # A third re-issue replays: no tool, and no model call (its script is empty).
    assert report(start(backend, effects, "none")) == {"output": "Refunded."}
    assert len(charges(effects)) == 2


async def test_a_second_worker_is_refused_while_the_first_holds_the_run(
    backend: Backend, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    first = start(backend, effects, "full", "--hold", "60")
    try:
        wait_for(Path(f"{effects}.holding"))
        second = report(start(backend, effects, "tail"))
        assert second["error"] == "RunInProgressError", second
        assert len(charges(effects)) == 1  # the second worker ran no tool
    finally:
        first.kill()
        first.communicate(timeout=WAIT)
    # Its holder is gone (a dead process on this host): the run resumes at once.
    resumed = report(start(backend, effects, "tail"))
    assert resumed["output"] == "Refunded."
    assert len(charges(effects)) == 2


async def test_a_stalled_worker_cannot_write_once_another_took_the_run_over(
    backend: Backend, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    stalled = start(backend, effects, "full", "--hold", "3")
    try:
        wait_for(Path(f"{effects}.holding"))
        os.kill(stalled.pid, signal.SIGSTOP)  # a frozen VM, a GC pause: no renewal
        await lapse(backend)
        taken = report(start(backend, effects, "tail"))
        assert taken["output"] == "Refunded."
    finally:
        os.kill(stalled.pid, signal.SIGCONT)
    late = report(stalled)
    assert late["error"] == "RunOwnershipLost", late
    segments, snapshot = await stored(backend)
    assert segments == 1 and snapshot.status == "completed" and snapshot.output == "Refunded."
