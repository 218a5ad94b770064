"""One owner per run: leases with a fencing token.

A worker that executes a run first takes the run's lease. Every checkpoint
write it makes names the lease, and the store refuses the write once the
lease was taken over, so a worker that stalled past its lease (a GC pause, a
frozen VM, SIGSTOP) cannot fork the transcript another worker continued.
Leases expire, so a crashed worker's run can be resumed; a holder on this
host whose process is gone is recognised at once and need not be waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import time
from datetime import UTC, datetime
from functools import cache
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ..errors import RunOwnershipLost, UserError
from ..validation import check_count, check_id

__all__ = [
    "DEFAULT_LEASE_TTL",
    "HeldLease",
    "RunLease",
    "RunLeases",
    "check_ttl",
    "holder_is_gone",
    "lease_for",
    "this_holder",
]

DEFAULT_LEASE_TTL = 30.0
"""Seconds a lease lasts without a write or a renewal."""

_MAX_TTL = 365 * 24 * 3600.0


class RunLease(BaseModel):
    """A worker's hold on one run.

    ``token`` grows with every takeover of the run; ``lease_id`` is unique to
    this acquisition. A write is accepted only while both still match the
    stored lease. ``ttl`` (seconds) is how far each write or renewal pushes
    ``expires_at`` out.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    token: int
    lease_id: str
    holder: str
    ttl: float
    expires_at: datetime


@runtime_checkable
class RunLeases(Protocol):
    """A checkpointer that can fence a run's writers (the SQL and in-memory ones can).

    ``acquire_lease`` raises ``RunInProgressError`` while another live
    holder has the run; ``renew_lease`` and a write made under a lease raise
    ``RunOwnershipLost`` once it was taken over; ``release_lease`` lets the
    next worker in at once (releasing a lost lease is a no-op). Its
    ``append``, ``delete``, ``record_intent`` and ``run_effect`` take
    ``lease=`` and are refused with ``RunOwnershipLost`` under a lost lease.
    """

    async def acquire_lease(self, run_id: str, *, ttl: float = DEFAULT_LEASE_TTL) -> RunLease: ...

    async def renew_lease(self, lease: RunLease) -> RunLease: ...

    async def release_lease(self, lease: RunLease) -> None: ...


def check_ttl(ttl: Any) -> float:
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not 0 < ttl <= _MAX_TTL
    ):
        raise UserError(f"lease ttl must be a positive number of seconds, got {ttl!r}")
    return float(ttl)


def check_lease(lease: Any) -> RunLease:
    """A lease as a store hands it out: a forged or altered one is refused before any
    SQL (its ids, token and ttl would otherwise reach a driver unchecked)."""
    if not isinstance(lease, RunLease):
        raise UserError(f"lease must be a RunLease, not {type(lease).__name__}")
    check_id(lease.run_id, "lease.run_id")
    check_id(lease.lease_id, "lease.lease_id")
    check_count(lease.token, "lease.token", minimum=1)
    check_ttl(lease.ttl)
    return lease


def lease_for(lease: Any, run_id: str) -> RunLease | None:
    """A lease passed with a write (or None): it must be this run's."""
    if lease is None:
        return None
    checked = check_lease(lease)
    if checked.run_id != run_id:
        raise UserError(f"lease is for run {checked.run_id!r}, not {run_id!r}")
    return checked


def from_epoch_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@cache
def _this_host() -> str:
    """Host name plus PID namespace: PIDs are comparable only within one namespace."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "?"
    return f"{socket.gethostname()} {namespace}"


def this_holder() -> str:
    """Who holds a lease taken here, readable by an operator: ``pid 42 on host ns``."""
    return f"pid {os.getpid()} on {_this_host()}"


def holder_is_gone(holder: str) -> bool:
    """True only when ``holder`` is a process on this host that no longer exists.

    A reused PID looks alive, which errs on the safe side: the lease is then
    simply waited out. Other hosts' holders are never judged.
    """
    pid_part, on, host = holder.partition(" on ")
    if not on or host != _this_host() or host.endswith(" ?") or not pid_part.startswith("pid "):
        return False
    try:
        pid = int(pid_part.removeprefix("pid "))
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (ValueError, OSError):
        return False
    return False


class HeldLease:
    """The run's lease for the duration of a block, kept alive while the run is quiet.

    Every fenced write renews the lease; a background renewal happens only
    when no write did for a third of the ttl, so a busy run adds no load and
    a run inside a long tool call keeps its lease. A renewal that finds the
    lease taken over stops: the next write then raises ``RunOwnershipLost``.
    A checkpointer without leases (or ``ttl=None``) holds nothing.
    """

    def __init__(self, checkpointer: object, run_id: str, ttl: float | None) -> None:
        self.leases = checkpointer if isinstance(checkpointer, RunLeases) else None
        self.run_id = run_id
        self.ttl = ttl
        self.lease: RunLease | None = None
        self.renewed_at = 0.0
        self._renewing: asyncio.Task[None] | None = None

    @property
    def fence(self) -> dict[str, RunLease]:
        """Keyword arguments that make a checkpoint write conditional on the lease."""
        return {"lease": self.lease} if self.lease is not None else {}

    def renewed(self, since: float) -> None:
        """A fenced write that began at ``since`` (monotonic) succeeded."""
        self.renewed_at = max(self.renewed_at, since)

    async def __aenter__(self) -> HeldLease:
        if self.leases is not None and self.ttl is not None:
            started = time.monotonic()
            self.lease = await self.leases.acquire_lease(self.run_id, ttl=self.ttl)
            self.renewed(started)
            self._renewing = asyncio.create_task(self._renew(self.leases, self.ttl / 3))
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
        if self.leases is not None and self.lease is not None:
            with contextlib.suppress(Exception):  # unreleased, it simply expires
                await self.leases.release_lease(self.lease)

    async def _renew(self, leases: RunLeases, every: float) -> None:
        while self.lease is not None:
            due = self.renewed_at + every
            if time.monotonic() < due:
                await asyncio.sleep(due - time.monotonic())
                continue
            started = time.monotonic()
            try:
                self.lease = await leases.renew_lease(self.lease)
            except RunOwnershipLost:
                return
            except Exception:  # a transient failure: try again a little later
                self.renewed(started - every / 2)
                continue
            self.renewed(started)
