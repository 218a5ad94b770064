"""Reading the Raw Log: pages by sequence key (a deep page costs what the first one
does) and the restore view (latest snapshot plus the tail after it).

Sequences are reserved on the session row (``last_sequence``) and every
writer keeps ``message_count`` beside it. While nothing was ever deleted from
a session (``message_count == last_sequence``) its log is dense, sequence k
is the k-th message, and skipping ``offset`` messages after ``after_sequence``
is the key condition ``sequence > after_sequence + offset``: one index seek on
the ``(session_id, sequence)`` primary key. A session that ``rewind`` cut has
holes; there the page falls back to ``OFFSET`` over the same index range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, select

from ..db.tables import messages, sessions, snapshots
from .models import SessionView
from .records import RECORD_COLUMNS, SNAPSHOT_COLUMNS, records_from_rows, snapshot_from_row

__all__ = ["Found", "fetch_page", "fetch_view", "page_query", "view_from"]

m = messages.c
s = sessions.c
p = snapshots.c
_MAX_KEY = 2**63 - 1


def page_query(
    session_id: str, *, lower: int, through: int | None, limit: int, skip: int
) -> Select[Any]:
    """Rows with ``lower < sequence <= through`` in order, ``skip`` of them skipped."""
    query = select(*RECORD_COLUMNS).where(m.session_id == session_id, m.sequence > lower)
    if through is not None:
        query = query.where(m.sequence <= through)
    query = query.order_by(m.sequence).limit(limit)
    return query.offset(skip) if skip else query


def fetch_page(
    conn: Connection,
    session_id: str,
    *,
    after_sequence: int,
    through_sequence: int | None,
    limit: int,
    offset: int,
) -> Sequence[Any]:
    """One page, read in the caller's (read) transaction."""
    head = (
        conn.execute(select(s.last_sequence, s.message_count).where(s.session_id == session_id))
    ).first()
    if head is None:
        return []
    if head.message_count == head.last_sequence:
        lower, skip = min(after_sequence + offset, _MAX_KEY), 0
    else:
        lower, skip = after_sequence, offset
    if through_sequence is not None and lower >= through_sequence:
        return []
    query = page_query(session_id, lower=lower, through=through_sequence, limit=limit, skip=skip)
    rows: Sequence[Any] = (conn.execute(query)).all()
    return rows


Found = tuple[Any, Any, Sequence[Any]]
"""The session row, its latest snapshot row (or None) and the tail rows."""


def fetch_view(conn: Connection, session_id: str) -> Found | None:
    """The session row, its latest snapshot and the rows after its boundary (None: no session)."""
    head = (
        conn.execute(
            select(s.parent_session_id, s.session_type, s.title, s.agent_name).where(
                s.session_id == session_id
            )
        )
    ).first()
    if head is None:
        return None
    latest = (
        conn.execute(
            select(*SNAPSHOT_COLUMNS)
            .where(p.session_id == session_id)
            .order_by(p.version.desc())
            .limit(1)
        )
    ).first()
    boundary = 0 if latest is None else latest.compacted_through_sequence
    tail = conn.execute(
        select(*RECORD_COLUMNS)
        .where(m.session_id == session_id, m.sequence > boundary)
        .order_by(m.sequence)
    )
    return head, latest, tail.all()


def view_from(found: Found | None) -> SessionView:
    """The ``SessionView`` of what ``fetch_view`` read; an unknown session's is empty."""
    if found is None:
        return SessionView()
    head, latest, tail = found
    return SessionView(
        parent_session_id=head.parent_session_id,
        session_type=head.session_type,
        title=head.title,
        agent_name=head.agent_name,
        snapshot=None if latest is None else snapshot_from_row(latest),
        raw_tail=records_from_rows(tail),
    )
