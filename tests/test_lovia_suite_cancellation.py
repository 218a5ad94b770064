"""A run lovia cancels while its lease changes hands keeps the lease accounted for.

lovia stops a run by cancelling its task (a user's stop in the web UI, a
shutdown), and the cancellation can land while the integration's checkpointer
takes or releases the run's lease. lovia's own web tests found it: the
supervisor's wind-down load then failed with RunInProgressError against this
very worker's orphaned lease. Here the cancellation is placed exactly, by
holding the checkpointer's next write at a gate (the database stays real).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from lovia.checkpointer import RunHead
from lovia.messages import Usage
from lovia.transcript import InputEntry

from backends import Backend
from lovia_store.integrations import lovia as ours
from test_lovia_suite_ports import open_checkpointer


def head(status: str) -> RunHead:
    return RunHead(agent_name="a", usage=Usage(), turns=1, status=status)  # type: ignore[arg-type]


class Gate:
    """Holds the checkpointer's ``nth`` write from now, before or after it runs."""

    def __init__(self, store: ours.SQLCheckpointer, nth: int, *, after: bool = False) -> None:
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()
        self.finished = asyncio.Event()
        self._writes = 0
        self._nth = nth
        self._after = after
        self._write: Callable[..., Awaitable[Any]] = store.database.write

    async def write(self, work: Any, **options: Any) -> Any:
        self._writes += 1
        if self._writes != self._nth:
            return await self._write(work, **options)
        try:
            if not self._after:
                self.reached.set()
                await self.opened.wait()
            result = await self._write(work, **options)
            if self._after:
                self.reached.set()
                await self.opened.wait()
            return result
        finally:
            self.finished.set()


async def cancel_at(gate: Gate, call: Awaitable[Any]) -> None:
    """Run ``call``, cancel it once it reaches the gate, then let the write go."""
    task = asyncio.ensure_future(call)
    await asyncio.wait_for(gate.reached.wait(), timeout=60)
    task.cancel()
    gate.opened.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(gate.finished.wait(), timeout=60)


@pytest.fixture
async def running(sql_backend: Backend) -> AsyncIterator[ours.SQLCheckpointer]:
    """A checkpointer holding the lease of run r1, which is running."""
    async with open_checkpointer(sql_backend) as store:
        await store.append("r1", [InputEntry(role="user", content="hi")], head("running"))
        yield store


async def test_a_release_cancelled_midway_still_lets_the_run_go(
    sql_backend: Backend, running: ours.SQLCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The terminal append writes the head (write 1), then releases (write 2).
    gate = Gate(running, 2)
    monkeypatch.setattr(running.database, "write", gate.write)
    await cancel_at(gate, running.append("r1", [], head("interrupted")))
    monkeypatch.undo()
    snap = await running.load("r1")  # the same worker, as lovia's supervisor does
    assert snap is not None and snap.status == "interrupted"
    await running.close()
    async with open_checkpointer(sql_backend) as other:  # and another worker
        assert (await other.load("r1")) is not None


async def test_a_lease_taken_for_a_cancelled_load_is_held_and_released(
    sql_backend: Backend, running: ours.SQLCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    await running.append("r1", [], head("interrupted"))  # released: resumable
    async with open_checkpointer(sql_backend) as worker:
        # Its load takes the lease (write 1); the caller is cancelled once it committed.
        gate = Gate(worker, 1, after=True)
        monkeypatch.setattr(worker.database, "write", gate.write)
        await cancel_at(gate, worker.load("r1"))
        monkeypatch.undo()
        snap = await worker.load("r1")  # the lease is this worker's, not an orphan
        assert snap is not None and snap.status == "interrupted"
    # Closing released it: a third worker may resume the run.
    async with open_checkpointer(sql_backend) as third:
        assert (await third.load("r1")) is not None
