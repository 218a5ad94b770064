"""lovia's view of a session, read: the whole history, batches of it, and its segments.

Entry documents are read as UTF-8 bytes on SQLite (see ``utf8_bytes``), and by
the reads of a whole session on asyncpg too; those the codec wrote in its own
form are decoded (``stored``), the others pass as read. Statements are built once with
bound parameters (no construction or cache key per call). Every statement is
scoped by its ``tenant`` parameter, which leads every key and index: the same
session id in two tenants is two sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import BigInteger, Connection, String, bindparam, select

from .._json import load_object
from ..db.contents import read_documents
from ..db.prepared import Prepared
from ..db.tables import messages, session_runs
from ..db.text_sql import utf8_bytes, utf8_bytes_every_row
from ..entries import expand_documents, session_rows

if TYPE_CHECKING:
    from .._json import Where

__all__ = [
    "BATCH",
    "DOCUMENT",
    "LOAD",
    "SEGMENT_ROWS",
    "SEGMENT_RUNS",
    "build_segments",
    "decoded_segment_rows",
    "rows_below",
]

E = TypeVar("E")

m = messages.c
r = session_runs.c
SID = bindparam("sid", type_=String())
TENANT = bindparam("tenant", type_=String())
DOCUMENT = utf8_bytes(m.entry_json).label("entry_json")
EVERY_DOCUMENT = utf8_bytes_every_row(m.entry_json).label("entry_json")
LOAD = (
    select(EVERY_DOCUMENT)
    .where(m.tenant == bindparam("tenant"), m.session_id == bindparam("sid"))
    .order_by(m.sequence)
)
BATCH = (
    select(m.sequence, DOCUMENT)
    .where(
        m.tenant == bindparam("tenant"),
        m.session_id == bindparam("sid"),
        m.sequence > bindparam("after"),
    )
    .order_by(m.sequence)
    .limit(bindparam("size", type_=BigInteger))
)
SEGMENT_ROWS = (
    select(m.sequence, m.request_id, m.run_id, EVERY_DOCUMENT)
    .where(m.tenant == bindparam("tenant"), m.session_id == bindparam("sid"))
    .order_by(m.sequence)
)
SEGMENT_RUNS = (
    select(r.run_id, r.first_sequence, r.entry_count, r.meta_json)
    .where(r.tenant == bindparam("tenant"), r.session_id == bindparam("sid"))
    .order_by(r.position)
)


def _replaced(rows: Sequence[Any], column: int, values: Sequence[Any]) -> Sequence[Any]:
    """``rows`` with the values of ``column`` that decoding changed."""
    out: list[Any] | None = None
    for index, (row, value) in enumerate(zip(rows, values, strict=True)):
        if row[column] is not value:
            out = list(rows) if out is None else out
            out[index] = (*row[:column], value, *row[column + 1 :])
    return rows if out is None else out


def _runs_at(session_id: str, runs: Sequence[Any]) -> Where:
    """A session's runs as read: a damaged meta is named by its run."""
    return (
        "lovia_session_runs",
        "meta_json",
        lambda i: {"session_id": session_id, "run_id": runs[i][0]},
    )


def decoded_segment_rows(
    conn: Connection, tenant: str, session_id: str, rows: Sequence[Any], runs: Sequence[Any]
) -> tuple[Sequence[Any], Sequence[Any]]:
    """The rows of ``SEGMENT_ROWS`` and ``SEGMENT_RUNS``, read in ``conn``'s
    transaction, with their entries and metas as written."""
    where = session_rows(session_id, rows)
    documents = read_documents(conn, tenant, [row[3] for row in rows], where)
    metas = read_documents(conn, tenant, [run[3] for run in runs], _runs_at(session_id, runs))
    return _replaced(rows, 3, documents), _replaced(runs, 3, metas)


def _meta(session_id: str, run_id: str, text: str | None) -> dict[str, Any] | None:
    """A run's stored meta; a damaged one is a ``StoredValueError`` naming the run."""
    key: dict[str, object] = {"session_id": session_id, "run_id": run_id}
    return load_object(text, ("lovia_session_runs", "meta_json", lambda _: key))


def build_segments(
    session_id: str,
    rows: Sequence[Any],
    runs: Sequence[Any],
    decode: Callable[[Sequence[str | bytes]], list[E]],
) -> list[tuple[str, list[E], dict[str, Any] | None]]:
    # Rows unpack as tuples: (sequence, request_id, run_id, entry_json) and
    # (run_id, first_sequence, entry_count, meta_json), in the statements' order.
    # Decoded a segment at a time: a row may hold several entries (a zett message).
    documents = [document for _, _, _, document in rows]
    metas = {run_id: meta_json for run_id, _, _, meta_json in runs}
    # Runs with no entries have no rows to carry them; they sit before the
    # message that followed them, the first whose sequence is not below theirs
    # (by sequence, not by row: a rewind leaves the sequences it removed unused).
    empty = [(first, run_id) for run_id, first, count, _ in runs if count == 0]
    out: list[tuple[str, list[E], dict[str, Any] | None]] = []
    key: tuple[str | None, str] | None = None
    start = 0
    emitted = 0

    def flush(end: int) -> None:
        if key is not None and end > start:
            run_id, request_id = key
            meta = _meta(session_id, run_id, metas.get(run_id)) if run_id is not None else None
            where = session_rows(session_id, rows[start:end])
            entries = decode(expand_documents(documents[start:end], where))
            out.append((run_id or request_id, entries, meta))

    for index, (sequence, request_id, run_id, _) in enumerate(rows):
        while emitted < len(empty) and empty[emitted][0] <= sequence:
            flush(index)
            start, key = index, None
            empty_run = empty[emitted][1]
            out.append((empty_run, [], _meta(session_id, empty_run, metas[empty_run])))
            emitted += 1
        row_key = (run_id, request_id)
        if row_key != key:
            flush(index)
            start, key = index, row_key
    flush(len(rows))
    for _, run_id in empty[emitted:]:
        out.append((run_id, [], _meta(session_id, run_id, metas[run_id])))
    return out


_ROWS_BELOW = Prepared(
    select(m.sequence, m.run_id, m.request_id, m.entry_type, m.call_id)
    .where(
        m.tenant == TENANT,
        m.session_id == SID,
        m.sequence < bindparam("below", type_=BigInteger()),
    )
    .order_by(m.sequence.desc())
    .limit(bindparam("size", type_=BigInteger()))
)


def rows_below(conn: Connection, tenant: str, session_id: str, below: int) -> Iterator[Any]:
    """The session's rows before sequence ``below``, last first, as
    ``(sequence, run_id, request_id, entry_type, call_id)``.

    Read in growing keyset pages: callers stop after the last few segments,
    usually a few dozen rows, and a server driver would otherwise fetch the
    keys of the session's whole prefix.
    """
    size = 64
    while True:
        params = {"tenant": tenant, "sid": session_id, "below": below, "size": size}
        rows = _ROWS_BELOW.execute(conn, params).all()
        yield from rows
        if len(rows) < size:
            return
        below, size = rows[-1][0], min(size * 4, 4096)
