"""Raw Log rows that stand for several entries, as lovia's rewind has to count them.

A zett-agent assistant message is one Raw Log row (one sequence) holding its
reasoning, text and tool calls as a JSON array of entries (entry type
``MULTIPLE_ENTRIES``; see ``lovia_store.entries``). lovia's view counts
entries, so a rewind that keeps the first N entries of ``load()`` counts the
entries of such rows, may cut inside one (which then keeps a prefix of its
entries), and finds dangling tool calls inside them. A row changed so no
longer says what its framework's message said: its envelope goes, as trim's
does, and the framework reads the row from its entries.

Sessions without such rows (everything lovia's own API writes) never read a
document here: one indexed probe says there is none. Every statement is scoped
by the ``tenant`` parameter as well as the session id. Documents are read through
the codec (``contents.read_documents``); a row rewritten or deleted releases the shared
values its old document named, and its new one is stored through the codec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Connection, String, bindparam, case, delete, null, select, update

from ..db.contents import read_documents, release_documents, store_documents
from ..db.prepared import Prepared
from ..db.tables import messages
from ..db.types import UTCDateTime, utcnow
from ..entries import (
    MULTIPLE_ENTRIES,
    call_id_of,
    entries_document,
    entry_from_dict,
    json_documents,
    session_rows,
)
from .stored import referring

__all__ = ["EntryCut", "drop_dangling_in_rows", "entry_cut", "rewrite_row"]

m = messages.c
_SID = bindparam("sid", type_=String())
_TENANT = bindparam("tenant", type_=String())
_SEQ = bindparam("seq", type_=BigInteger())
_HAS_MULTIPLE = Prepared(
    select(m.sequence)
    .where(m.tenant == _TENANT, m.session_id == _SID, m.entry_type == MULTIPLE_ENTRIES)
    .limit(1)
)
# Every row's sequence and type; the document only of rows that hold several entries.
_ROWS = Prepared(
    select(m.sequence, case((m.entry_type == MULTIPLE_ENTRIES, m.entry_json)))
    .where(m.tenant == _TENANT, m.session_id == _SID)
    .order_by(m.sequence)
)
_KEY = (m.tenant == _TENANT) & (m.session_id == _SID) & (m.sequence == _SEQ)
_DOCUMENT = Prepared(select(m.entry_json).where(_KEY))
_REWRITE = Prepared(
    update(messages)
    .where(_KEY)
    .values(
        entry_type=bindparam("entry_type", type_=String()),
        call_id=bindparam("call_id", type_=String()),
        entry_json=bindparam("doc", type_=String()),
        envelope_json=null(),
        updated_at=bindparam("now", type_=UTCDateTime()),
    )
)
_DELETE_ROW = Prepared(delete(messages).where(_KEY))


@dataclass(frozen=True)
class EntryCut:
    """Where keeping N entries cuts a session that holds multi-entry rows.

    ``keep_rows`` rows stay whole (the split row among them, once rewritten);
    ``split`` is the sequence of the row the cut lands inside, the entries it
    keeps and its stored document (``rewrite_row`` replaces it); ``dropped``
    counts every entry the cut removes.
    """

    keep_rows: int
    split: tuple[int, list[Any], str] | None
    dropped: int


def entry_cut(conn: Connection, tenant: str, session_id: str, keep_entries: int) -> EntryCut | None:
    """The cut in entries, or None for a session whose rows are one entry each."""
    key = {"tenant": tenant, "sid": session_id}
    if _HAS_MULTIPLE.execute(conn, key).first() is None:
        return None
    kept = rows = dropped = 0
    split: tuple[int, list[Any], str] | None = None
    stored = _ROWS.execute(conn, key).all()
    documents = read_documents(
        conn, tenant, [row[1] for row in stored], session_rows(session_id, stored)
    )
    for (sequence, text), document in zip(stored, documents, strict=True):
        entries = [None] if document is None else json_documents([document])[0]
        if kept + len(entries) <= keep_entries:
            kept += len(entries)
            rows += 1
        elif kept < keep_entries:  # the cut lands inside this row
            split = (sequence, entries[: keep_entries - kept], text)
            dropped += len(entries) - (keep_entries - kept)
            kept, rows = keep_entries, rows + 1
        else:
            dropped += len(entries)
    return EntryCut(rows, split, dropped)


def rewrite_row(
    conn: Connection, tenant: str, session_id: str, sequence: int, kept: list[Any], stored: str
) -> bool:
    """Store ``kept`` (entry dicts) as the row's entries in place of its ``stored``
    document; False when none is left (deleted)."""
    key = {"tenant": tenant, "sid": session_id, "seq": sequence}
    if not kept:
        _DELETE_ROW.execute(conn, key)
    else:
        entries = [entry_from_dict(entry) for entry in kept]
        single = len(entries) == 1
        document = entries_document(entries)
        values = {
            "entry_type": entries[0].type if single else MULTIPLE_ENTRIES,
            "call_id": call_id_of(entries[0]) if single else None,
            "doc": store_documents(conn, tenant, [document], shareable=True)[0],
            "now": utcnow(),
        }
        _REWRITE.execute(conn, {**key, **values})
    if referring(stored):  # after the new document counted the values both name
        release_documents(conn, tenant, [stored])
    return bool(kept)


def drop_dangling_in_rows(
    conn: Connection, tenant: str, session_id: str, sequences: Sequence[int], answered: set[str]
) -> tuple[int, int, list[int]]:
    """Remove tool calls without a result from the multi-entry rows ``sequences``.

    Returns the entries removed, the rows deleted (left empty) and the
    sequences changed.
    """
    removed = deleted = 0
    changed: list[int] = []
    for sequence in sequences:
        key = {"tenant": tenant, "sid": session_id, "seq": sequence}
        stored = _DOCUMENT.execute(conn, key).scalar_one()
        where = session_rows(session_id, [(sequence,)])
        entries = json_documents(read_documents(conn, tenant, [stored], where), where)[0]
        kept = [
            e
            for e in entries
            if not (e.get("type") == "tool_call" and e.get("call_id") not in answered)
        ]
        if len(kept) == len(entries):
            continue
        removed += len(entries) - len(kept)
        changed.append(sequence)
        if not rewrite_row(conn, tenant, session_id, sequence, kept, stored):
            deleted += 1
    return removed, deleted, changed
