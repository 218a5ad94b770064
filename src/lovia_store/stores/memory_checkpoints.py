"""``InMemoryCheckpointer``: the checkpoint contract in a dict, for tests only.

Nothing survives the process, so pairing it with crash recovery is a category
error; it exists so code and tests can run without a database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..entries import ToolResultEntry, TranscriptEntry, check_entries
from ..errors import UserError
from .checkpoint_models import (
    RunHead,
    RunSnapshot,
    RunStatus,
    RunSummary,
    ToolEffect,
    check_head,
    check_listing,
    summary_of,
)
from .segments import check_id

__all__ = ["InMemoryCheckpointer"]


class InMemoryCheckpointer:
    def __init__(self) -> None:
        self._runs: dict[str, tuple[list[TranscriptEntry], str, datetime]] = {}
        self._effects: dict[str, dict[str, ToolEffect]] = {}
        self._lock = asyncio.Lock()

    async def append(self, run_id: str, entries: Sequence[TranscriptEntry], head: RunHead) -> None:
        check_id(run_id, "run_id")
        batch = check_entries(entries)
        # Stored as JSON, like the SQL stores, so later changes to the caller's
        # head (a mutable model) never reach what was stored.
        head_json = check_head(head).model_dump_json()
        async with self._lock:
            stored = self._runs.get(run_id, ([], "", datetime.now(UTC)))[0]
            self._runs[run_id] = (stored + batch, head_json, datetime.now(UTC))

    async def load(self, run_id: str) -> RunSnapshot | None:
        check_id(run_id, "run_id")
        async with self._lock:
            found = self._runs.get(run_id)
        if found is None:
            return None
        entries, head_json, _ = found
        return RunSnapshot.from_parts(run_id, entries, RunHead.model_validate_json(head_json))

    async def delete(self, run_id: str) -> None:
        check_id(run_id, "run_id")
        async with self._lock:
            self._runs.pop(run_id, None)
            self._effects.pop(run_id, None)

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

    async def tool_effects(self, run_id: str) -> dict[str, ToolEffect]:
        async with self._lock:
            return {k: v.model_copy() for k, v in self._effects.get(run_id, {}).items()}

    async def record_intent(self, run_id: str, call_id: str, tool_name: str) -> None:
        async with self._lock:
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
    ) -> Any:
        """There is no database to share: the effect cannot be transactional here."""
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
