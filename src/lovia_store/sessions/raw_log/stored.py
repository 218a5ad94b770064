"""A Raw Log row's JSON documents as their columns hold them (``lovia_store.db.contents``).

A message row holds four documents: ``entry_json`` (the projection lovia's view
reads, where the tool outputs are: its long strings are stored once, shared), and
``envelope_json``, ``metadata_json`` and ``tags_json`` (compressed and sealed like
every document, never shared); a snapshot row two, ``summary_json`` and
``envelope_json`` (not shared). They are encoded in the transaction that writes the
row and decoded in the one that reads it, so the values they share are counted,
and read, with the rows that name them.

Rows stay as they were read while none of their documents is in the stored form
(every row written before revision 0010, every short one without keys): the
checks here cost a page one pass over four columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, select

from ..._json import Where, damaged
from ...db.contents import (
    Encoding,
    codec_of,
    decode_unshared,
    encode_documents,
    has_references,
    read_documents,
    release_documents,
    store_documents,
)
from ...db.documents import MARK, DocumentCodec
from ...db.tables import messages
from .records import RECORD_COLUMNS, SNAPSHOT_COLUMNS

__all__ = [
    "decode_records",
    "encode_message",
    "read_records",
    "read_snapshot",
    "release_session",
    "store_snapshot",
]

m = messages.c

_OTHER_DOCUMENTS = ("envelope_json", "metadata_json", "tags_json")
"""A message's documents besides its entry: never shared."""
_RECORD_NAMES = tuple(column.name for column in RECORD_COLUMNS)
_RECORD_DOCUMENTS = tuple(
    (_RECORD_NAMES.index(name), name) for name in ("entry_json", *_OTHER_DOCUMENTS)
)
_FIRST, _LAST = _RECORD_DOCUMENTS[0][0], _RECORD_DOCUMENTS[-1][0] + 1
assert [i for i, _ in _RECORD_DOCUMENTS] == list(range(_FIRST, _LAST))
# A stored form starts with MARK, as text or (SQLite's entry_json, read as bytes) bytes.
_MARKS = frozenset((MARK, MARK.encode()))


class SnapshotRow(NamedTuple):
    """A snapshot row (``SNAPSHOT_COLUMNS``) with its documents decoded, read as the
    row is: by attribute."""

    session_id: str
    version: int
    snapshot_id: str
    compacted_through_sequence: int
    summary_json: str
    envelope_json: str | None
    created_at: datetime
    updated_at: datetime


assert SnapshotRow._fields == tuple(column.name for column in SNAPSHOT_COLUMNS)

Decode = Callable[[list[str], Where], list[str] | None]


# -- writing -----------------------------------------------------------------------


def encode_message(
    conn: Connection, tenant: str, row: dict[str, Any]
) -> tuple[dict[str, Any], Encoding]:
    """``row`` with its documents as stored (``row`` itself is left as it was, for a
    retry), and what its entry shares: ``retain_shared`` counts that in the
    transaction that inserts the row, after the session's row is locked (the order
    every writer of a session takes its locks in)."""
    codec = codec_of(conn)
    entry = encode_documents(codec, tenant, [row["entry_json"]], shareable=True)
    others = encode_documents(codec, tenant, [row[name] for name in _OTHER_DOCUMENTS])
    stored = {
        **row,
        "entry_json": entry.stored[0],
        **dict(zip(_OTHER_DOCUMENTS, others.stored, strict=True)),
    }
    return stored, entry


def store_snapshot(
    conn: Connection, tenant: str, summary_json: str, envelope_json: str | None
) -> tuple[str, str | None]:
    """A snapshot's summary and envelope as stored (never shared)."""
    summary, envelope = store_documents(conn, tenant, [summary_json, envelope_json])
    assert summary is not None
    return summary, envelope


# -- releasing ---------------------------------------------------------------------

_SHARING_ENTRIES = select(m.entry_json).where(
    m.tenant == bindparam("tenant"),
    m.session_id == bindparam("sid"),
    has_references(m.entry_json),
)


def release_session(conn: Connection, tenant: str, session_id: str) -> None:
    """Uncount what the session's messages share, before they are deleted in ``conn``'s
    transaction: only the rows whose entry names shared values are read."""
    key = {"tenant": tenant, "sid": session_id}
    release_documents(conn, tenant, conn.execute(_SHARING_ENTRIES, key).scalars())


# -- reading -----------------------------------------------------------------------


def read_records(conn: Connection, tenant: str, rows: Sequence[Any]) -> Sequence[Any]:
    """Message rows (``RECORD_COLUMNS``) with their documents decoded, read in ``conn``'s
    transaction (the one that read the rows: the values they share are still there)."""
    if not _stored_forms(rows):
        return rows

    def decode(texts: list[str], where: Where) -> list[str]:
        return read_documents(conn, tenant, texts, where)

    decoded = _decoded(rows, decode)
    assert decoded is not None
    return decoded


def decode_records(codec: DocumentCodec, tenant: str, rows: Sequence[Any]) -> Sequence[Any] | None:
    """``read_records`` for rows read by one statement, outside a transaction: None when
    a document shares values, which must then be read with its rows (``read_records``)."""
    if not _stored_forms(rows):
        return rows

    def decode(texts: list[str], where: Where) -> list[str] | None:
        return decode_unshared(codec, tenant, texts, where)

    return _decoded(rows, decode)


def read_snapshot(conn: Connection, tenant: str, row: Any) -> Any:
    """A snapshot row (``SNAPSHOT_COLUMNS``) with its summary and envelope decoded."""
    if row is None or not any(_marked(text) for text in (row.summary_json, row.envelope_json)):
        return row
    texts = [row.summary_json, row.envelope_json]
    key = {"session_id": row.session_id, "version": row.version}
    summary = read_documents(conn, tenant, texts[:1], ("lovia_snapshots", "summary_json", _at(key)))
    envelope = read_documents(
        conn, tenant, texts[1:], ("lovia_snapshots", "envelope_json", _at(key))
    )
    return SnapshotRow(*row)._replace(summary_json=summary[0], envelope_json=envelope[0])


def _at(key: dict[str, object]) -> Callable[[int], dict[str, object]]:
    return lambda _index: key


def _marked(text: str | bytes | None) -> bool:
    return text is not None and text[:1] in _MARKS


def _stored_forms(rows: Sequence[Any]) -> bool:
    return any(text and text[:1] in _MARKS for row in rows for text in row[_FIRST:_LAST])


def _decoded(rows: Sequence[Any], decode: Decode) -> list[tuple[Any, ...]] | None:
    """``rows`` as tuples, each document in the stored form decoded (by column: a
    damaged one is named by its column, session and sequence)."""
    out = [list(row) for row in rows]
    for column, name in _RECORD_DOCUMENTS:
        at = [i for i, row in enumerate(out) if _marked(row[column])]
        if not at:
            continue
        where: Where = ("lovia_messages", name, _rows_at(out, at))
        texts = [_text(out[i][column], where, k) for k, i in enumerate(at)]
        decoded = decode(texts, where)
        if decoded is None:
            return None
        for i, text in zip(at, decoded, strict=True):
            out[i][column] = text
    return [tuple(row) for row in out]


def _rows_at(rows: list[list[Any]], at: list[int]) -> Callable[[int], dict[str, object]]:
    """The key of the row at ``at[index]`` (session and sequence: its first two columns)."""
    return lambda index: {"session_id": rows[at[index]][0], "sequence": rows[at[index]][1]}


def _text(value: str | bytes, where: Where, index: int) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise damaged("a stored document is not UTF-8 text", where, index) from None
