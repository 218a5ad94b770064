"""Rows of ``lovia_sessions``/``lovia_messages``/``lovia_snapshots`` into read models.

Rows are private; these converters are the only way out. Entry documents of
one page are decoded in one pass, metadata and tags only when present.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from ..._json import load_document
from ...db.tables import messages, sessions, snapshots
from ...db.text_sql import utf8_bytes
from ...entries import Where, json_documents, name_unknown_entry
from ...errors import StoredValueError
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
    "record_fields",
    "records_from_rows",
    "snapshot_from_row",
    "stored_object",
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
    s.forked_from_session_id,
    s.forked_at_entry,
)

RECORD_COLUMNS = (
    m.session_id,
    m.sequence,
    m.request_id,
    m.run_id,
    m.message_id,
    utf8_bytes(m.entry_json).label("entry_json"),  # bytes on SQLite: no decode before orjson
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

_RECORD_NAMES = tuple(column.name for column in RECORD_COLUMNS)
_ENTRY_JSON = _RECORD_NAMES.index("entry_json")
_ENVELOPE_JSON = _RECORD_NAMES.index("envelope_json")
_RUN_ID = _RECORD_NAMES.index("run_id")
_MEASURED = (*TIMING_FIELDS, *USAGE_FIELDS)  # the columns between tags_json and created_at

_COMPACTED: TypeAdapter[CompactedMessage] = TypeAdapter(CompactedMessage)
_RECORDS: TypeAdapter[list[RawMessageRecord]] = TypeAdapter(list[RawMessageRecord])


def stored_object(
    text: str | bytes | None, what: str, column: str, session_id: str, sequence: int
) -> dict[str, Any]:
    """A stored metadata/tags document: a JSON object, else ``StoredValueError`` naming
    the row (never coerced: ``[]`` is not ``{}``). SQL NULL, which rows that lovia's
    own append wrote hold, is the empty object."""
    if text is None:
        return {}
    raw = text if isinstance(text, bytes) else text.encode()
    try:
        if _WIDE_NUMBER.search(raw):  # orjson reads an integer past 64 bits as a float
            raise orjson.JSONDecodeError("an integer wider than 64 bits", "", 0)
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # exact for integers of any size
            value = json.loads(raw)
        except (ValueError, RecursionError):
            value = _INVALID
    if not isinstance(value, dict):
        problem = "is not valid JSON" if value is _INVALID else "must be a JSON object"
        raise StoredValueError(
            f"Stored message {what} {problem}",
            table="lovia_messages",
            column=column,
            row={"session_id": session_id, "sequence": sequence},
        )
    return value


_INVALID = object()
# Possibly an integer past 64 bits, which orjson reads as a float: twenty digits or
# more (past 2**64 - 1), or a minus and nineteen (below -2**63). Digits in a string
# match too: json reads those exactly, only slower.
_WIDE_NUMBER = re.compile(rb"-\d{19}|\d{20}")


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
        forked_from_session_id=row.forked_from_session_id,
        forked_at_entry=row.forked_at_entry,
    )


def records_from_rows(rows: Sequence[Any]) -> list[RawMessageRecord]:
    """One page of raw messages, validated by pydantic in one call.

    One validation per record, its entry included: cheaper than
    ``model_construct`` field by field in Python. Rows are read as plain tuples
    in ``RECORD_COLUMNS`` order and unpacked (named attribute access on a row,
    or a dict per row rebuilt key by key, costs more than the validation).
    """
    if not rows:
        return []
    documents = json_documents([row[_ENTRY_JSON] for row in rows], _at_rows(rows))
    values = []
    for index, (row, message) in enumerate(zip(rows, documents, strict=True)):
        fields = record_fields(row)
        if isinstance(message, list):  # a message that stands for several entries
            fields["multiple"] = message
            message = _shown_entry(message)
        envelope = row[_ENVELOPE_JSON]
        fields["run_id"] = row[_RUN_ID]
        fields["message"] = message
        fields["envelope"] = None if envelope is None else _envelope(envelope, rows, index)
        values.append(fields)
    try:
        return _RECORDS.validate_python(values)
    except ValidationError:
        for index, doc in enumerate(documents):
            items = doc if isinstance(doc, list) else [doc]
            name_unknown_entry(items, _at_rows(rows), start=index)
        raise


def record_fields(row: Any) -> dict[str, Any]:
    """What every read model of a raw message takes from its row (``RECORD_COLUMNS``
    order) alike, ours and a framework's: id, session, sequence, request id,
    metadata, tags, timing, usage and times. The message is the caller's to decode."""
    session_id, sequence, request_id, _run, message_id, _entry, _env, meta, tags = row[:9]
    created, updated = row[-2:]
    values = dict(zip(_MEASURED, row[9:-2], strict=True))
    if values["started_at"] is None:
        # A row written by lovia's own append has no timing: it reads as instantaneous.
        values.update(started_at=created, completed_at=created, duration_ns=0)
    values.update(
        id=message_id or record_id(session_id, sequence),
        session_id=session_id,
        sequence=sequence,
        request_id=request_id,
        metadata=stored_object(meta, "metadata", "metadata_json", session_id, sequence),
        tags=stored_object(tags, "tags", "tags_json", session_id, sequence),
        created_at=created,
        updated_at=updated or created,
    )
    return values


def _shown_entry(entries: list[Any]) -> Any:
    """The one entry ``message`` shows for several: the text, else the first call."""
    for wanted in ("assistant_text", "tool_call"):
        for entry in entries:
            if isinstance(entry, dict) and entry.get("type") == wanted:
                return entry
    return entries[0] if entries else None


def snapshot_from_row(row: Any) -> ContextSnapshot:
    return ContextSnapshot(
        id=row.snapshot_id,
        session_id=row.session_id,
        version=row.version,
        compacted_message=_COMPACTED.validate_json(row.summary_json),
        compacted_through_sequence=row.compacted_through_sequence,
        created_at=row.created_at,
        updated_at=row.updated_at,
        envelope=None if row.envelope_json is None else _snapshot_envelope(row),
    )


def _envelope(text: str | bytes, rows: Sequence[Any], index: int) -> Any:
    """A message's stored zett envelope, exactly (``load_document``: integers of any
    size, which orjson reads as doubles or refuses); a damaged one is a
    ``StoredValueError`` naming its row."""
    table, _, key_of = _at_rows(rows)
    return load_document(text, (table, "envelope_json", key_of), index)


def _snapshot_envelope(row: Any) -> Any:
    key = {"session_id": row.session_id, "version": row.version}
    return load_document(row.envelope_json, ("lovia_snapshots", "envelope_json", lambda _: key))


def _at_rows(rows: Sequence[Any]) -> Where:
    """A page's rows: a damaged document is named by its session and sequence."""
    return (
        "lovia_messages",
        "entry_json",
        lambda i: {"session_id": rows[i][0], "sequence": rows[i][1]},
    )
