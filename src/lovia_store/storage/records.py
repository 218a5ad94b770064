"""Rows of ``lovia_sessions``/``lovia_messages``/``lovia_snapshots`` into read models.

Rows are private; these converters are the only way out. Entry documents of
one page are decoded in one pass, metadata and tags only when present.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import TypeAdapter

from ..db.tables import messages, sessions, snapshots
from ..entries import entries_from_json_rows
from .ids import record_id
from .models import (
    TIMING_FIELDS,
    USAGE_FIELDS,
    CompactedMessage,
    ContextSnapshot,
    RawMessageRecord,
    SessionSummary,
)

__all__ = [
    "RECORD_COLUMNS",
    "SNAPSHOT_COLUMNS",
    "SUMMARY_COLUMNS",
    "records_from_rows",
    "snapshot_from_row",
    "summary_from_row",
]

m = messages.c
s = sessions.c
p = snapshots.c

SUMMARY_COLUMNS = (
    s.session_id,
    s.parent_session_id,
    s.session_type,
    s.title,
    s.agent_name,
    s.message_count,
    s.created_at,
    s.updated_at,
)

RECORD_COLUMNS = (
    m.session_id,
    m.sequence,
    m.request_id,
    m.run_id,
    m.message_id,
    m.entry_json,
    m.envelope_json,
    m.metadata_json,
    m.tags_json,
    *(m[name] for name in TIMING_FIELDS),
    *(m[name] for name in USAGE_FIELDS),
    m.created_at,
    m.updated_at,
)

SNAPSHOT_COLUMNS = (
    p.session_id,
    p.version,
    p.snapshot_id,
    p.compacted_through_sequence,
    p.summary_json,
    p.envelope_json,
    p.created_at,
    p.updated_at,
)

_COMPACTED: TypeAdapter[CompactedMessage] = TypeAdapter(CompactedMessage)


def _object(text: str | None) -> dict[str, Any]:
    return {} if text is None else dict(orjson.loads(text))


def summary_from_row(row: Any) -> SessionSummary:
    return SessionSummary(
        session_id=row.session_id,
        parent_session_id=row.parent_session_id,
        session_type=row.session_type,
        title=row.title,
        agent_name=row.agent_name,
        message_count=row.message_count,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def records_from_rows(rows: Sequence[Any]) -> list[RawMessageRecord]:
    """One page of raw messages; the stored values were checked when written."""
    entries = entries_from_json_rows([row.entry_json for row in rows])
    out = []
    for row, entry in zip(rows, entries, strict=True):
        created = row.created_at
        # A row written by lovia's own append has no timing: it reads as instantaneous.
        timed = row.started_at is not None
        out.append(
            RawMessageRecord.model_construct(
                id=row.message_id or record_id(row.session_id, row.sequence),
                session_id=row.session_id,
                request_id=row.request_id,
                sequence=row.sequence,
                message=entry,
                metadata=_object(row.metadata_json),
                tags=_object(row.tags_json),
                started_at=row.started_at if timed else created,
                completed_at=row.completed_at if timed else created,
                duration_ns=row.duration_ns if timed else 0,
                reasoning_started_at=row.reasoning_started_at,
                reasoning_completed_at=row.reasoning_completed_at,
                reasoning_duration_ns=row.reasoning_duration_ns,
                content_started_at=row.content_started_at,
                content_completed_at=row.content_completed_at,
                content_duration_ns=row.content_duration_ns,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens,
                cache_read_tokens=row.cache_read_tokens,
                cache_write_tokens=row.cache_write_tokens,
                reasoning_tokens=row.reasoning_tokens,
                created_at=created,
                updated_at=row.updated_at or created,
                run_id=row.run_id,
                envelope=None if row.envelope_json is None else orjson.loads(row.envelope_json),
            )
        )
    return out


def snapshot_from_row(row: Any) -> ContextSnapshot:
    return ContextSnapshot(
        id=row.snapshot_id,
        session_id=row.session_id,
        version=row.version,
        compacted_message=_COMPACTED.validate_json(row.summary_json),
        compacted_through_sequence=row.compacted_through_sequence,
        created_at=row.created_at,
        updated_at=row.updated_at,
        envelope=None if row.envelope_json is None else orjson.loads(row.envelope_json),
    )
