"""``rewind`` and ``clear`` in SQL: cut a session after its first entries, or delete it.

Every statement is scoped by the ``tenant`` parameter as well as the session id:
a store of one tenant never reaches another's rows of the same session id.

Rows go with their references: the shared values of the entries a rewind or a
clear deletes are released in its transaction (``stored.release_rows``), under
the session's row lock.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Connection, String, bindparam, delete, func, null, select, update

from ..db.prepared import Prepared
from ..db.tables import messages, session_runs, sessions, snapshots
from ..db.types import UTCDateTime, utcnow
from ..entries import MULTIPLE_ENTRIES
from .entry_rows import drop_dangling_in_rows, entry_cut, rewrite_row
from .reads import SID, TENANT, rows_below
from .stored import lock_session, release_rows

__all__ = ["delete_session_rows", "rewind_rows"]

m = messages.c
r = session_runs.c

# Rewind's statements, prepared: a rewind is rare in a process,
# so SQLAlchemy's per-statement first-use work would cost more than SQLite's.
_CUT = bindparam("cut", type_=BigInteger())
_CUT_ROW = Prepared(
    select(m.sequence, m.run_id, m.request_id)
    .where(m.tenant == TENANT, m.session_id == SID)
    .order_by(m.sequence)
    .limit(1)
    .offset(bindparam("keep", type_=BigInteger))
)
_DELETE_TAIL = Prepared(
    delete(messages).where(m.tenant == TENANT, m.session_id == SID, m.sequence >= _CUT)
)
_DELETE_ONE = Prepared(
    delete(messages).where(
        m.tenant == TENANT,
        m.session_id == SID,
        m.sequence == bindparam("seq", type_=BigInteger),
    )
)
# Runs after the cut. A run without entries at the cut (first sequence up to
# "empty_after", the cut unless it lands inside a row) stays, as in lovia.
_LATER_RUNS = (
    (r.tenant == TENANT)
    & (r.session_id == SID)
    & (
        ((r.entry_count > 0) & (r.first_sequence >= _CUT))
        | ((r.entry_count == 0) & (r.first_sequence > bindparam("empty_after", type_=BigInteger())))
    )
)
_SELECT_LATER_RUNS = Prepared(select(r.run_id).where(_LATER_RUNS))
_DELETE_LATER_RUNS = Prepared(delete(session_runs).where(_LATER_RUNS))
_CUT_RUN = (
    (r.tenant == TENANT)
    & (r.session_id == SID)
    & (r.run_id == bindparam("cut_run_id", type_=String()))
)
_SHORTEN_CUT_RUN = Prepared(
    update(session_runs)
    .where(_CUT_RUN)
    .values(meta_json=null(), entry_count=bindparam("remaining", type_=BigInteger()))
)
_DELETE_CUT_RUN = Prepared(delete(session_runs).where(_CUT_RUN))
_DELETE_COVERING_SNAPSHOTS = Prepared(
    delete(snapshots).where(
        snapshots.c.tenant == TENANT,
        snapshots.c.session_id == SID,
        snapshots.c.compacted_through_sequence >= bindparam("lowest", type_=BigInteger()),
    )
)
_REWOUND_SESSION = Prepared(
    update(sessions)
    .where(sessions.c.tenant == TENANT, sessions.c.session_id == SID)
    .values(
        message_count=sessions.c.message_count - bindparam("removed", type_=BigInteger()),
        updated_at=bindparam("now", type_=UTCDateTime()),
    )
)
# Once snapshots went, the session's version is that of the newest one left
# (while none goes it already is: every writer keeps it so).
_RESET_SNAPSHOT_VERSION = Prepared(
    update(sessions)
    .where(sessions.c.tenant == TENANT, sessions.c.session_id == SID)
    .values(
        snapshot_version=select(func.coalesce(func.max(snapshots.c.version), 0))
        .where(snapshots.c.tenant == TENANT, snapshots.c.session_id == SID)
        .scalar_subquery()
    )
)


def rewind_rows(
    conn: Connection, tenant: str, session_id: str, keep_entries: int
) -> tuple[int, list[str]]:
    """Rewind inside the caller's transaction; returns the entries removed and the
    ids of the runs the cut truncated or deleted.

    Rows are entries, except the rare row that holds several (a zett-agent
    message, ``entry_rows``): where a session has any, the cut is found by
    counting entries, a row it lands inside keeps its prefix, and dangling
    calls inside such rows go too.
    """
    key = {"tenant": tenant, "sid": session_id}
    # The session's row first, as a fork and an append take it: one waits for the
    # other instead of each holding rows the other needs (a deadlock on InnoDB).
    lock_session(conn, tenant, session_id, rows=True)
    plan = entry_cut(conn, tenant, session_id, keep_entries)
    keep_rows = keep_entries if plan is None else plan.keep_rows
    changed: list[int] = []  # sequences of multi-entry rows shortened
    cut_row = _CUT_ROW.execute(conn, {**key, "keep": keep_rows}).first()
    if plan is not None and plan.split is not None:
        # The first entry removed is inside a row: that row's segment is the cut one.
        split_sequence, split_kept, split_stored = plan.split
        split_row = _CUT_ROW.execute(conn, {**key, "keep": keep_rows - 1}).one()
        rewrite_row(conn, tenant, session_id, split_sequence, split_kept, split_stored)
        changed.append(split_sequence)
        cut = split_sequence + 1 if cut_row is None else cut_row[0]
        _, cut_run_id, cut_request_id = split_row
        below = split_sequence + 1
        empty_after = split_sequence  # the split row's removed entries come first
    elif cut_row is None:
        return 0, []
    else:
        cut, cut_run_id, cut_request_id = cut_row
        below = empty_after = cut
    at_cut = {**key, "cut": cut}
    # The part of the cut segment that stays: contiguous rows before the cut
    # with the same run/request. Its tool calls without a result go too.
    kept_part: list[tuple[int, str, str | None]] = []  # (sequence, entry_type, call_id)
    for row in rows_below(conn, tenant, session_id, below):
        sequence, run_id, request_id, entry_type, call_id = row
        if (run_id, request_id) != (cut_run_id, cut_request_id):
            break
        kept_part.append((sequence, entry_type, call_id))
    answered = {
        call_id
        for _, entry_type, call_id in kept_part
        if entry_type == "tool_result" and call_id is not None
    }
    dangling = [
        sequence
        for sequence, entry_type, call_id in kept_part
        if entry_type == "tool_call" and call_id not in answered
    ]
    release_rows(conn, tenant, session_id, low=cut)
    rows_removed = int(_DELETE_TAIL.execute(conn, at_cut).rowcount)
    removed = rows_removed if plan is None else plan.dropped
    if dangling:
        release_rows(conn, tenant, session_id, min(dangling), max(dangling), set(dangling))
        _DELETE_ONE.execute(conn, key, [{"seq": seq} for seq in dangling])
        removed += len(dangling)
        rows_removed += len(dangling)
    multiple = [seq for seq, entry_type, _ in kept_part if entry_type == MULTIPLE_ENTRIES]
    if multiple:
        dropped, emptied, shortened = drop_dangling_in_rows(
            conn, tenant, session_id, multiple, answered
        )
        removed += dropped
        rows_removed += emptied
        changed += shortened
    later = {**at_cut, "empty_after": empty_after}
    touched = [run_id for (run_id,) in _SELECT_LATER_RUNS.execute(conn, later).all()]
    if cut_run_id is not None and cut_run_id not in touched:
        touched.append(cut_run_id)
    _DELETE_LATER_RUNS.execute(conn, later)
    if cut_run_id is not None and kept_part:
        remaining = len(kept_part) - len(dangling)
        cut_run = {**key, "cut_run_id": cut_run_id, "remaining": remaining}
        (_SHORTEN_CUT_RUN if remaining else _DELETE_CUT_RUN).execute(conn, cut_run)
    lowest_removed = min([cut, *dangling, *changed])
    covering = {**key, "lowest": lowest_removed}
    if _DELETE_COVERING_SNAPSHOTS.execute(conn, covering).rowcount:
        _RESET_SNAPSHOT_VERSION.execute(conn, key)
    rewound = {**key, "removed": rows_removed, "now": utcnow()}
    _REWOUND_SESSION.execute(conn, rewound)
    return removed, touched


def delete_session_rows(conn: Connection, tenant: str, session_id: str) -> bool:
    """Delete a session of ``tenant`` and everything it owns, releasing the shared
    values its entries name; True when it existed."""
    lock_session(conn, tenant, session_id, rows=True)
    release_rows(conn, tenant, session_id)
    for table in (messages, session_runs, snapshots):
        conn.execute(
            delete(table).where(table.c.tenant == tenant, table.c.session_id == session_id)
        )
    result = conn.execute(
        delete(sessions).where(sessions.c.tenant == tenant, sessions.c.session_id == session_id)
    )
    return bool(result.rowcount)
