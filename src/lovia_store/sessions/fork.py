"""``fork`` in SQL: copy a session's first entries into a new session, the origin untouched.

The non-destructive sibling of ``rewind``. In the caller's transaction, with the
origin's row locked (so no append to it interleaves; SQLite's writer lock does the
same): the origin's rows up to the first one the cut removes are copied whole into
the new session (entry JSON, envelope, metadata, tags, timing, usage, request and
run ids, timestamps), with its runs and the snapshots within them; ``rewind_rows``
then cuts the copy exactly as a rewind of the origin would (the run cut inside keeps
its id, loses its dangling tool calls and its meta; later runs and covering snapshots
go), and the copy's rows are numbered 1..n. Snapshot versions are kept as they were
(the session's version is the newest kept), their boundaries follow the renumbering.
A fork stays within one tenant: every statement is scoped by the ``tenant`` parameter,
and the copies keep the origin's tenant. The copied entries are stored as they were
(the codec's form names no row): the shared values they name are counted once more
(``retain_references``), and the cut of the copy releases what it drops.
"""

from __future__ import annotations

import bisect
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    String,
    Table,
    bindparam,
    case,
    func,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from ..db.contents import has_references, read_documents, retain_references
from ..db.dialect import insert_ignore
from ..db.prepared import Prepared
from ..db.tables import messages, session_runs, sessions, snapshots
from ..db.types import utcnow
from ..entries import MULTIPLE_ENTRIES, json_documents, session_rows
from ..errors import UserError
from .rewind import rewind_rows
from .stored import referring_rows

__all__ = ["FORK_ORIGIN", "count_entries", "fork_rows", "unknown_session"]

m = messages.c
r = session_runs.c
p = snapshots.c
s = sessions.c
_SID = bindparam("sid", type_=String())
_TENANT = bindparam("tenant", type_=String())
_NEW = bindparam("new", type_=String())
_SEQ = bindparam("seq", type_=BigInteger())
_BOUND = bindparam("bound", type_=BigInteger())

FORK_ORIGIN = select(s.forked_from_session_id, s.forked_at_entry).where(
    s.tenant == bindparam("tenant"), s.session_id == bindparam("sid")
)
# The origin's row, locked: its appends wait until the fork commits.
_ORIGIN = select(
    s.parent_session_id, s.session_type, s.title, s.agent_name, s.message_count, s.run_count
).where(s.tenant == _TENANT, s.session_id == _SID)
_ORIGIN_LOCKED = _ORIGIN.with_for_update()
# The origin's rows that name shared values, share-locked before they are copied. A
# rekey rewrites rows (and releases their former values) without the session's lock:
# this waits for it, so the copy (a later statement) copies the rows it left, whose
# values are stored. PostgreSQL's INSERT ... SELECT alone reads its snapshot: it
# copied former documents naming values the rekey had just deleted.
_ORIGIN_SHARING = Prepared(
    select(m.sequence)
    .where(m.tenant == _TENANT, m.session_id == _SID, has_references(m.entry_json))
    .with_for_update(read=True)
)
_MULTIPLE_DOCUMENTS = Prepared(
    select(m.entry_json).where(
        m.tenant == _TENANT, m.session_id == _SID, m.entry_type == MULTIPLE_ENTRIES
    )
)
_ROW_COUNT = Prepared(
    select(func.count()).select_from(messages).where(m.tenant == _TENANT, m.session_id == _SID)
)
_NTH_SEQUENCE = Prepared(
    select(m.sequence)
    .where(m.tenant == _TENANT, m.session_id == _SID)
    .order_by(m.sequence)
    .limit(1)
    .offset(bindparam("n", type_=BigInteger()))
)


def _copy(table: Table, bounded: ColumnElement[bool] | None) -> Prepared:
    """INSERT ... SELECT of the origin's rows of ``table``, whole, under the new session id
    (in the origin's tenant: the rows selected are that tenant's)."""
    columns = list(table.c)
    chosen = [_NEW if c.name == "session_id" else c for c in columns]
    where = (table.c.tenant == _TENANT) & (table.c.session_id == _SID)
    query = select(*chosen).where(where if bounded is None else where & bounded)
    return Prepared(table.insert().from_select([c.name for c in columns], query))


_COPY_MESSAGES = {True: _copy(messages, m.sequence <= _BOUND), False: _copy(messages, None)}
_COPY_RUNS = {
    True: _copy(session_runs, r.first_sequence <= _BOUND),
    False: _copy(session_runs, None),
}
_COPY_SNAPSHOTS = {
    True: _copy(snapshots, p.compacted_through_sequence <= _BOUND),
    False: _copy(snapshots, None),
}
_SEQUENCES = Prepared(
    select(m.sequence).where(m.tenant == _TENANT, m.session_id == _NEW).order_by(m.sequence)
)
_RENUMBER = Prepared(
    update(messages)
    .where(m.tenant == _TENANT, m.session_id == _NEW, m.sequence == _SEQ)
    .values(sequence=bindparam("to", type_=BigInteger()))
)
_RUN_STARTS = Prepared(
    select(r.run_id, r.first_sequence).where(r.tenant == _TENANT, r.session_id == _NEW)
)
_MOVE_RUN = Prepared(
    update(session_runs)
    .where(
        r.tenant == _TENANT,
        r.session_id == _NEW,
        r.run_id == bindparam("run_id", type_=String()),
    )
    .values(first_sequence=bindparam("to", type_=BigInteger()))
)
_SNAPSHOT_BOUNDS = Prepared(
    select(p.version, p.compacted_through_sequence).where(p.tenant == _TENANT, p.session_id == _NEW)
)
_MOVE_SNAPSHOT = Prepared(
    update(snapshots)
    .where(
        p.tenant == _TENANT,
        p.session_id == _NEW,
        p.version == bindparam("version", type_=BigInteger()),
    )
    .values(compacted_through_sequence=bindparam("to", type_=BigInteger()))
)
_FINISH = Prepared(
    update(sessions)
    .where(s.tenant == _TENANT, s.session_id == _NEW)
    .values(
        last_sequence=bindparam("rows", type_=BigInteger()),
        message_count=bindparam("rows", type_=BigInteger()),
        snapshot_version=select(func.coalesce(func.max(p.version), 0))
        .where(p.tenant == _TENANT, p.session_id == _NEW)
        .scalar_subquery(),
    )
)


def unknown_session(session_id: str) -> UserError:
    """The error a call naming a session that does not exist raises."""
    return UserError(f"session {session_id!r} does not exist")


def count_entries(conn: Connection, tenant: str, session_id: str, rows: int | None = None) -> int:
    """How many entries ``load()`` shows: one per row, a multi-entry row's each.
    ``rows``: the session's row count when known (its ``message_count``)."""
    key = {"tenant": tenant, "sid": session_id}
    if rows is None:
        rows = int(_ROW_COUNT.execute(conn, key).scalar_one())
    stored = [doc for (doc,) in _MULTIPLE_DOCUMENTS.execute(conn, key).all()]
    documents = read_documents(conn, tenant, stored, session_rows(session_id))
    return rows + sum(len(entries) - 1 for entries in json_documents(documents))


def fork_rows(
    conn: Connection, tenant: str, session_id: str, new_session_id: str, keep_entries: int
) -> int:
    """Fork inside the caller's transaction; returns the entries the new session holds.
    Both sessions are ``tenant``'s: a fork never crosses tenants.

    Refusals (no origin, an existing new id, ``keep_entries`` past the origin's
    entries) raise ``UserError`` before anything is written.
    """
    locked = _ORIGIN_LOCKED if conn.dialect.name != "sqlite" else _ORIGIN
    origin = conn.execute(locked, {"tenant": tenant, "sid": session_id}).first()
    if origin is None:
        raise unknown_session(session_id)
    if conn.dialect.name != "sqlite":  # SQLite's writer holds the whole file already
        _ORIGIN_SHARING.execute(conn, {"tenant": tenant, "sid": session_id})
    total = count_entries(conn, tenant, session_id, int(origin.message_count))
    if keep_entries > total:
        raise UserError(
            f"keep_entries={keep_entries} is past the end of session {session_id!r} "
            f"({total} entries)"
        )
    now = utcnow()
    row = _new_row(origin, tenant, session_id, new_session_id, keep_entries, now)
    if not insert_ignore(conn, sessions, row):
        raise UserError(f"session {new_session_id!r} already exists")
    bound = None if keep_entries == total else _bound(conn, tenant, session_id, keep_entries)
    ids = {"tenant": tenant, "sid": session_id, "new": new_session_id, "bound": bound}
    bounded = bound is not None
    for statements in (_COPY_MESSAGES, _COPY_RUNS, _COPY_SNAPSHOTS):
        statements[bounded].execute(conn, ids)
    copied = referring_rows(conn, tenant, new_session_id)
    retain_references(conn, tenant, [text for _, text in copied])
    if bounded:
        rewind_rows(conn, tenant, new_session_id, keep_entries)
    rows = _renumber(conn, tenant, new_session_id)
    _FINISH.execute(conn, {"tenant": tenant, "new": new_session_id, "rows": rows})
    return count_entries(conn, tenant, new_session_id, rows)


def _new_row(
    origin: Any,
    tenant: str,
    session_id: str,
    new_session_id: str,
    keep_entries: int,
    now: datetime,
) -> dict[str, Any]:
    """The new session's row: the origin's display values and parent, its origin named;
    the counters are set once its rows are in."""
    return {
        "tenant": tenant,
        "session_id": new_session_id,
        "parent_session_id": origin.parent_session_id,
        "session_type": origin.session_type,
        "title": origin.title,
        "agent_name": origin.agent_name,
        "last_sequence": 0,
        "message_count": 0,
        "run_count": origin.run_count,
        "snapshot_version": 0,
        "created_at": now,
        "updated_at": now,
        "forked_from_session_id": session_id,
        "forked_at_entry": keep_entries,
    }


def _bound(conn: Connection, tenant: str, session_id: str, keep_entries: int) -> int:
    """The sequence of the first origin row holding an entry the cut removes (the row
    after the kept ones, or the one the cut lands inside): the copy goes up to it, so
    the rewind of the copy sees the cut as a rewind of the origin would."""
    key = {"tenant": tenant, "sid": session_id}
    if _MULTIPLE_DOCUMENTS.execute(conn, key).first() is None:  # one entry per row
        return int(_NTH_SEQUENCE.execute(conn, {**key, "n": keep_entries}).scalar_one())
    seen = 0
    rows = _ROW_SIZES.execute(conn, key).all()
    documents = read_documents(
        conn, tenant, [row[1] for row in rows], session_rows(session_id, rows)
    )
    for (sequence, _), document in zip(rows, documents, strict=True):
        seen += 1 if document is None else len(json_documents([document])[0])
        if seen > keep_entries:
            return int(sequence)
    raise AssertionError("keep_entries is below the session's entries")  # pragma: no cover


# Every row's sequence, and the document only of rows that hold several entries.
_ROW_SIZES = Prepared(
    select(m.sequence, case((m.entry_type == MULTIPLE_ENTRIES, m.entry_json)))
    .where(m.tenant == _TENANT, m.session_id == _SID)
    .order_by(m.sequence)
)


def _renumber(conn: Connection, tenant: str, session_id: str) -> int:
    """Number the new session's rows 1..n (a cut or the origin's own rewinds left gaps);
    runs' first sequences and snapshots' boundaries follow. Returns n."""
    key = {"tenant": tenant, "new": session_id}
    old = [int(seq) for (seq,) in _SEQUENCES.execute(conn, key).all()]
    if old == list(range(1, len(old) + 1)):
        return len(old)
    # Ascending, each row moves down into a slot already free.
    moves = [{"seq": seq, "to": i} for i, seq in enumerate(old, 1) if seq != i]
    for move in moves:
        _RENUMBER.execute(conn, {**key, **move})
    runs = _RUN_STARTS.execute(conn, key).all()
    for run_id, first in runs:
        to = bisect.bisect_left(old, first) + 1  # the first row at or after its start
        if to != first:
            _MOVE_RUN.execute(conn, {**key, "run_id": run_id, "to": to})
    for version, through in _SNAPSHOT_BOUNDS.execute(conn, key).all():
        to = bisect.bisect_right(old, through)  # the rows it covers
        if to != through:
            _MOVE_SNAPSHOT.execute(conn, {**key, "version": version, "to": to})
    return len(old)
