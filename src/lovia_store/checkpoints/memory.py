"""``InMemoryCheckpointer``: the checkpoint contract in a dict, for tests only.

Nothing survives the process, so pairing it with crash recovery is a category
error; it exists so code and tests can run without a database.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple
from uuid import uuid4

from .._lovia_guard import refuse_lovias_runner
from ..entries import ToolResultEntry, TranscriptEntry, check_entries
from ..errors import RunInProgressError, RunOwnershipLost, UserError
from ..validation import DEFAULT_TENANT, check_effect_ids, check_id, check_tenant
from .contract import (
    RunHead,
    RunSnapshot,
    RunStatus,
    RunSummary,
    ToolEffect,
    check_head,
    check_listing,
    summary_of,
)
from .leases import (
    DEFAULT_LEASE_TTL,
    RunLease,
    check_lease,
    check_ttl,
    from_epoch_ms,
    lease_for,
    this_holder,
)

__all__ = ["InMemoryCheckpointer", "RunState"]


class RunState(NamedTuple):
    """A run as retention sees it; ``status`` is None for a lease taken before any write."""

    run_id: str
    status: str | None
    updated_at: datetime | None
    session_id: str | None
    leased: bool


class InMemoryCheckpointer:
    """The checkpoint contract in memory. ``tenant`` is kept as the SQL stores keep it
    (checked alike, default ``""``); each instance holds its own runs, so two never
    share one."""

    links_sessions = True
    """``append`` takes ``session_id=``, as the SQL checkpointer's does."""

    def __init__(self, *, tenant: str | None = None) -> None:
        self.tenant: str = DEFAULT_TENANT if tenant is None else check_tenant(tenant)
        self._runs: dict[str, tuple[list[TranscriptEntry], str, datetime]] = {}
        self._sessions: dict[str, str] = {}
        """Each run's session, when its writer named it (``SQLCheckpointer``'s column)."""
        self._effects: dict[str, dict[str, ToolEffect]] = {}
        self._leases: dict[str, RunLease] = {}
        self._lock = asyncio.Lock()

    async def append(
        self,
        run_id: str,
        entries: Sequence[TranscriptEntry],
        head: RunHead,
        *,
        lease: RunLease | None = None,
        session_id: str | None = None,
    ) -> None:
        check_id(run_id, "run_id")
        if session_id is not None:
            check_id(session_id, "session_id")
        batch = check_entries(entries)
        # Stored as JSON, like the SQL stores, so later changes to the caller's
        # head (a mutable model) never reach what was stored.
        head_json = check_head(head).model_dump_json()
        async with self._lock:
            self._fence(lease, run_id)
            stored = self._runs.get(run_id, ([], "", datetime.now(UTC)))[0]
            self._runs[run_id] = (stored + batch, head_json, datetime.now(UTC))
            if session_id is not None:
                self._sessions[run_id] = session_id

    async def load(self, run_id: str) -> RunSnapshot | None:
        refuse_lovias_runner(self)  # lovia's Runner calls this (or delete) first
        check_id(run_id, "run_id")
        async with self._lock:
            found = self._runs.get(run_id)
        if found is None:
            return None
        entries, head_json, _ = found
        return RunSnapshot.from_parts(run_id, entries, RunHead.model_validate_json(head_json))

    async def delete(self, run_id: str, *, lease: RunLease | None = None) -> None:
        refuse_lovias_runner(self)
        check_id(run_id, "run_id")
        async with self._lock:
            self._fence(lease, run_id)
            self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        """Drop a run's checkpoint, effects and idle lease (the caller holds the lock)."""
        self._runs.pop(run_id, None)
        self._sessions.pop(run_id, None)
        self._effects.pop(run_id, None)
        held = self._leases.get(run_id)
        if held is not None and held.expires_at.timestamp() <= time.time():
            del self._leases[run_id]

    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunSummary]:
        """Runs by latest update first, optionally only those with ``status``."""
        check_listing(status, limit, offset)
        async with self._lock:
            rows = [
                summary_of(run_id, RunHead.model_validate_json(head), len(entries), stamp)
                for run_id, (entries, head, stamp) in self._runs.items()
            ]
        rows = [row for row in rows if status is None or row.status == status]
        rows.sort(key=lambda row: (row.updated_at, row.run_id), reverse=True)
        return rows[offset : offset + limit]

    async def _run_states(self) -> list[RunState]:
        """Every run as retention judges it (for ``lovia_store.lifecycle.prune``)."""
        async with self._lock:
            now = time.time()
            states = [
                RunState(
                    run_id,
                    RunHead.model_validate_json(head).status,
                    stamp,
                    self._sessions.get(run_id),
                    self._leased(run_id, now),
                )
                for run_id, (_, head, stamp) in self._runs.items()
            ]
            states += [
                RunState(run_id, None, None, None, True)
                for run_id in self._leases
                if run_id not in self._runs and self._leased(run_id, now)
            ]
            return states

    def _leased(self, run_id: str, now: float) -> bool:
        held = self._leases.get(run_id)
        return held is not None and held.expires_at.timestamp() > now

    async def _delete_unchanged(
        self, run_id: str, seen: datetime, statuses: tuple[str, ...]
    ) -> bool:
        """Delete the run unless it was written since ``seen``, left ``statuses`` or is
        leased (retention's re-check)."""
        async with self._lock:
            found = self._runs.get(run_id)
            if found is None or found[2] != seen or self._leased(run_id, time.time()):
                return False
            if RunHead.model_validate_json(found[1]).status not in statuses:
                return False
            self._forget(run_id)
            return True

    async def acquire_lease(self, run_id: str, *, ttl: float = DEFAULT_LEASE_TTL) -> RunLease:
        check_id(run_id, "run_id")
        seconds = check_ttl(ttl)
        async with self._lock:
            held = self._leases.get(run_id)
            now = time.time()
            if held is not None and held.expires_at.timestamp() > now:
                raise RunInProgressError(
                    run_id=run_id, holder=held.holder, expires_at=held.expires_at
                )
            lease = RunLease(
                run_id=run_id,
                token=held.token + 1 if held else 1,
                lease_id=uuid4().hex,
                holder=this_holder(),
                ttl=seconds,
                expires_at=from_epoch_ms(round((now + seconds) * 1000)),
            )
            self._leases[run_id] = lease
            return lease

    async def renew_lease(self, lease: RunLease) -> RunLease:
        async with self._lock:
            return self._guard(check_lease(lease), lease.run_id)

    async def release_lease(self, lease: RunLease) -> None:
        check_lease(lease)
        async with self._lock:
            held = self._leases.get(lease.run_id)
            if held is None or held.lease_id != lease.lease_id:
                return
            if lease.run_id in self._runs:
                self._leases[lease.run_id] = held.model_copy(
                    update={"expires_at": from_epoch_ms(0)}
                )
            else:
                del self._leases[lease.run_id]

    def _fence(self, lease: RunLease | None, run_id: str) -> None:
        """A write under a lease renews it, or is refused (the caller holds the lock)."""
        lease = lease_for(lease, run_id)
        if lease is not None:
            self._guard(lease, run_id)

    def _guard(self, lease: RunLease, run_id: str) -> RunLease:
        held = self._leases.get(run_id)
        if held is None or held.lease_id != lease.lease_id:
            raise RunOwnershipLost(run_id=run_id, token=lease.token)
        renewed = held.model_copy(
            update={"expires_at": from_epoch_ms(round((time.time() + held.ttl) * 1000))}
        )
        self._leases[run_id] = renewed
        return renewed

    async def tool_effects(self, run_id: str) -> dict[str, ToolEffect]:
        check_id(run_id, "run_id")  # the same refusal as the SQL stores
        async with self._lock:
            return {k: v.model_copy() for k, v in self._effects.get(run_id, {}).items()}

    async def record_intent(
        self, run_id: str, call_id: str, tool_name: str, *, lease: RunLease | None = None
    ) -> None:
        check_effect_ids(run_id, call_id, tool_name)
        async with self._lock:
            self._fence(lease, run_id)
            effects = self._effects.setdefault(run_id, {})
            if call_id not in effects:
                effects[call_id] = ToolEffect(
                    call_id=call_id, tool_name=tool_name, started_at=datetime.now(UTC)
                )

    async def run_effect(
        self,
        run_id: str,
        call_id: str,
        tool_name: str,
        work: Callable[[Any], Any],
        outcome: Callable[[Any], ToolResultEntry],
        *,
        lease: RunLease | None = None,
    ) -> Any:
        """There is no database to share: the effect cannot be transactional here."""
        check_effect_ids(run_id, call_id, tool_name)  # the same refusal as the SQL stores
        raise UserError(
            "ctx.transaction() needs a SQL checkpointer: the effect and its recorded "
            "outcome commit in one transaction of that database"
        )

    async def close(self) -> None:
        """Nothing to release."""

    async def __aenter__(self) -> InMemoryCheckpointer:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
