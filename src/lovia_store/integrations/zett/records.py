"""Our rows as zett-agent's read models, converted once, straight from the row.

Rows come in ``RECORD_COLUMNS``/``SNAPSHOT_COLUMNS``/``SUMMARY_COLUMNS``
order (the core's statements). A row zett's codec wrote (or an adopted zett
file kept) is decoded from its envelope; a row lovia's API wrote, from its
entry. Metadata and tags must be stored JSON objects, as zett requires:
anything else raises ``StoredValueError`` naming the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.persistence import (
    ContextSnapshot,
    RawMessageRecord,
    SessionSummary,
    SessionView,
)
from zett_agent.json_types import json_object

from ...entries import (
    ToolCallEntry,
    Where,
    entries_from_json_rows,
    expand_documents,
    stored_model,
)
from ...errors import StoredValueError
from ...sessions.raw_log import models as core
from ...sessions.raw_log.reads import view_fields
from ...sessions.raw_log.records import record_fields
from .codec import decode_compacted, decode_envelopes, message_from_entries

__all__ = ["records_from_rows", "snapshot_from_row", "summary_from_row", "view_from"]

_SUMMARY_FIELDS = tuple(SessionSummary.model_fields)
# RECORD_COLUMNS: session_id, sequence, request_id, run_id, message_id, entry, envelope, ...
_ENVELOPE = 6


def summary_from_row(row: Any) -> SessionSummary:
    """zett's summary: each of its fields is the ``SUMMARY_COLUMNS`` column of that name."""
    return SessionSummary(**{name: getattr(row, name) for name in _SUMMARY_FIELDS})


def records_from_rows(rows: Sequence[Any]) -> list[RawMessageRecord]:
    """One page of raw messages as zett's records, in the rows' order."""
    if not rows:
        return []
    messages = _messages(rows)
    return [_record(row, message) for row, message in zip(rows, messages, strict=True)]


def _messages(rows: Sequence[Any]) -> list[Any]:
    """Every row's zett message: envelopes decoded in one pass, entries in another."""
    enveloped = [i for i, row in enumerate(rows) if row[_ENVELOPE] is not None]
    decoded = decode_envelopes(
        [rows[i][_ENVELOPE] for i in enveloped],
        [{"session_id": rows[i][0], "sequence": rows[i][1]} for i in enveloped],
    )
    out: list[Any] = [None] * len(rows)
    for i, message in zip(enveloped, decoded, strict=True):
        out[i] = message
    if len(enveloped) < len(rows):
        plain = [i for i, row in enumerate(rows) if row[_ENVELOPE] is None]
        documents = [rows[i][5] for i in plain]
        where = _at(rows, plain)
        if len(expand_documents(documents, where)) == len(documents):  # one entry per row
            per_row = [[entry] for entry in entries_from_json_rows(documents, where)]
        else:  # a row a rewind shortened still holds several (and lost its envelope)
            per_row = [entries_from_json_rows([rows[i][5]], _at(rows, [i])) for i in plain]
        names = {e.call_id: e.name for es in per_row for e in es if isinstance(e, ToolCallEntry)}
        for i, entries in zip(plain, per_row, strict=True):
            out[i] = message_from_entries(entries, names)
    return out


def _at(rows: Sequence[Any], indices: Sequence[int]) -> Where:
    """The entry documents of ``rows`` at ``indices``, named by session and sequence."""
    return (
        "lovia_messages",
        "entry_json",
        lambda i: {"session_id": rows[indices[i]][0], "sequence": rows[indices[i]][1]},
    )


def _record(row: Any, message: Any) -> RawMessageRecord:
    values = record_fields(row)
    values["tags"] = _tags(values["tags"], row)
    return RawMessageRecord(message=message, **values)


def _tags(tags: dict[str, Any], row: Any) -> dict[str, Any]:
    if all(key.strip() for key in tags):
        return tags
    try:
        return json_object(tags, field_name="Stored message tags", nonempty_keys=True)
    except ValueError as exc:
        raise StoredValueError(
            str(exc),
            table="lovia_messages",
            column="tags_json",
            row={"session_id": row[0], "sequence": row[1]},
        ) from None


def snapshot_from_row(row: Any) -> ContextSnapshot:
    if row.envelope_json is not None:
        key = {"session_id": row.session_id, "version": row.version}
        compacted = decode_compacted(row.envelope_json, key)
    else:  # a snapshot our own Raw Log API wrote: its summary text
        where: Where = (
            "lovia_snapshots",
            "summary_json",
            lambda _: {"session_id": row.session_id, "version": row.version},
        )
        summary = stored_model(core.CompactedMessage, row.summary_json, where)
        compacted = CompactedMessage(content=summary.content)
    return ContextSnapshot(
        id=row.snapshot_id,
        session_id=row.session_id,
        version=row.version,
        compacted_message=compacted,
        compacted_through_sequence=row.compacted_through_sequence,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def view_from(found: tuple[Any, Any, Sequence[Any]] | None) -> SessionView:
    """zett's ``SessionView`` of what ``fetch_view`` read; an unknown session's is empty."""
    if found is None:
        return SessionView(session_type=0)
    # Built without re-validating: every part was just built (and validated) here.
    return SessionView.model_construct(**view_fields(found, snapshot_from_row, records_from_rows))
