"""``InMemorySession``: the session contract in a dict, for tests and ephemeral chat."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._json import dump_object, load_object
from .._lovia_guard import refuse_lovias_runner
from ..entries import ToolResultEntry, TranscriptEntry, call_id_of
from ..errors import UserError
from ..validation import DEFAULT_TENANT, check_call_ids, check_count, check_id, check_tenant
from .contract import ForkOrigin, Segment, check_append, check_checkpointer_tenant
from .trimming import rewind_split, trim_entry

if TYPE_CHECKING:
    from ..checkpoints.contract import Checkpointer

__all__ = ["InMemorySession"]


class InMemorySession:
    """Keeps segments in process memory; nothing survives the process.

    Behaves exactly like the SQL stores (the same contract suite runs on
    both): meta is copied on the way in and out, so a caller never shares a
    dict with the store. Its sessions are its own, so one store is one tenant:
    ``tenant`` is checked as the SQL stores check it and kept as ``.tenant``
    (a rewind refuses a checkpointer of another tenant, as theirs does).
    """

    def __init__(self, *, tenant: str | None = None) -> None:
        self.tenant: str = DEFAULT_TENANT if tenant is None else check_tenant(tenant)
        self._segments: dict[str, list[Segment]] = {}
        self._origins: dict[str, ForkOrigin] = {}
        self._updated: dict[str, datetime] = {}
        """Each session's last change (``lovia_sessions.updated_at``), for retention."""
        self._lock = asyncio.Lock()

    async def segments(self, session_id: str) -> list[Segment]:
        refuse_lovias_runner(self)  # lovia's Runner calls this first: fail before its model
        return await self._copies(session_id)

    async def load(self, session_id: str) -> list[TranscriptEntry]:
        return [entry for segment in await self._copies(session_id) for entry in segment.entries]

    async def _copies(self, session_id: str) -> list[Segment]:
        check_id(session_id, "session_id")
        async with self._lock:
            return [_copy(segment) for segment in self._segments.get(session_id, [])]

    async def append(
        self,
        session_id: str,
        entries: Sequence[TranscriptEntry],
        *,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        run_id, stored, meta_text = check_append(session_id, entries, run_id, meta)
        check_call_ids([call_id_of(entry) for entry in stored])  # what the SQL stores refuse
        async with self._lock:
            segments = self._segments.setdefault(session_id, [])
            if not any(segment.run_id == run_id for segment in segments):
                segments.append(Segment(run_id, stored, load_object(meta_text)))
                self._updated[session_id] = datetime.now(UTC)
            return run_id

    async def clear(self, session_id: str) -> None:
        check_id(session_id, "session_id")
        async with self._lock:
            self._segments.pop(session_id, None)
            self._origins.pop(session_id, None)
            self._updated.pop(session_id, None)

    async def trim_tool_results(
        self, session_id: str, *, keep_chars: int = 400, keep_runs: int = 1
    ) -> int:
        """Truncate tool outputs older than the last ``keep_runs`` runs; idempotent."""
        check_id(session_id, "session_id")
        check_count(keep_chars, "keep_chars", minimum=0)
        check_count(keep_runs, "keep_runs", minimum=0)
        async with self._lock:
            segments = self._segments.get(session_id, [])
            old = len(segments) - keep_runs
            trimmed = 0
            for index in range(max(old, 0)):
                segment = segments[index]
                entries: list[TranscriptEntry] = []
                for entry in segment.entries:
                    short = None
                    if isinstance(entry, ToolResultEntry):
                        short = trim_entry(entry, keep_chars)
                    entries.append(short or entry)
                    trimmed += short is not None
                segments[index] = Segment(segment.run_id, entries, segment.meta)
            if trimmed:
                self._updated[session_id] = datetime.now(UTC)
            return trimmed

    async def rewind(
        self, session_id: str, *, keep_entries: int, checkpointer: Checkpointer | None = None
    ) -> int:
        """Drop everything after the first ``keep_entries`` entries of ``load()``;
        with ``checkpointer``, also the checkpoints of the runs the cut touched."""
        check_id(session_id, "session_id")
        check_count(keep_entries, "keep_entries", minimum=0)
        check_checkpointer_tenant(self.tenant, checkpointer)
        async with self._lock:
            segments = self._segments.get(session_id, [])
            kept, boundary, removed = rewind_split(segments, keep_entries)
            if removed:
                self._segments[session_id] = kept + ([boundary] if boundary else [])
                self._updated[session_id] = datetime.now(UTC)
            touched = [s.run_id for s in segments[len(kept) :]] if removed else []
        if checkpointer is not None:
            for run_id in touched:
                await checkpointer.delete(run_id)
        return removed

    async def fork(self, session_id: str, new_session_id: str, *, keep_entries: int) -> int:
        """Copy the first ``keep_entries`` entries into a new session, cut as ``rewind``
        cuts; the origin is untouched. Returns the entries the new session holds."""
        check_id(session_id, "session_id")
        check_id(new_session_id, "new_session_id")
        check_count(keep_entries, "keep_entries", minimum=0)
        async with self._lock:
            segments = self._segments.get(session_id)
            if segments is None:
                raise UserError(f"session {session_id!r} does not exist")
            total = sum(len(segment.entries) for segment in segments)
            if keep_entries > total:
                raise UserError(
                    f"keep_entries={keep_entries} is past the end of session {session_id!r} "
                    f"({total} entries)"
                )
            if new_session_id in self._segments:
                raise UserError(f"session {new_session_id!r} already exists")
            kept, boundary, _ = rewind_split(segments, keep_entries)
            copied = [_copy(segment) for segment in kept + ([boundary] if boundary else [])]
            self._segments[new_session_id] = copied
            self._origins[new_session_id] = ForkOrigin(session_id, keep_entries)
            self._updated[new_session_id] = datetime.now(UTC)
            return sum(len(segment.entries) for segment in copied)

    async def fork_origin(self, session_id: str) -> ForkOrigin | None:
        """The session and entry count ``session_id`` was forked from, or None."""
        check_id(session_id, "session_id")
        async with self._lock:
            return self._origins.get(session_id)

    async def _activity(self) -> dict[str, datetime]:
        """Every session's last change (for ``lovia_store.lifecycle.prune``)."""
        async with self._lock:
            return dict(self._updated)

    async def _clear_unchanged(self, session_id: str, seen: datetime) -> bool:
        """Delete the session unless it changed since ``seen`` (retention's re-check)."""
        async with self._lock:
            if self._updated.get(session_id) != seen:
                return False
            self._segments.pop(session_id, None)
            self._origins.pop(session_id, None)
            del self._updated[session_id]
            return True

    async def close(self) -> None:
        """Nothing to release; present so every store closes the same way."""

    async def __aenter__(self) -> InMemorySession:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


def _copy(segment: Segment) -> Segment:
    meta = None if segment.meta is None else load_object(dump_object(segment.meta, "meta"))
    return Segment(segment.run_id, list(segment.entries), meta)
