"""Reading the Raw Log: pages by sequence key (a deep page costs what the first one
does) and the restore view (latest snapshot plus the tail after it).

Sequences are reserved on the session row (``last_sequence``) and every
writer keeps ``message_count`` beside it. While nothing was ever deleted from
a session (``message_count == last_sequence``) its log is dense, sequence k
is the k-th message, and skipping ``offset`` messages after ``after_sequence``
is the key condition ``sequence > after_sequence + offset``: one index seek on
the ``(tenant, session_id, sequence)`` primary key. A session that ``rewind`` cut has
holes; there the page falls back to ``OFFSET`` over the same index range.
Where the dialect takes subqueries in LIMIT/OFFSET (SQLite, PostgreSQL), the
density check rides in the page's own statement. Every statement is scoped to the
caller's tenant (bound as ``tenant``): another tenant's session of the same id is
not this one. Rows come out with their documents decoded (``stored.py``), the
values they share read in the transaction that read them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import BigInteger, Connection, Executable, bindparam, case, func, select

from ...db.database import Database
from ...db.dialect import capabilities
from ...db.tables import messages, sessions, snapshots
from .models import SessionView
from .records import RECORD_COLUMNS, SNAPSHOT_COLUMNS, records_from_rows, snapshot_from_row
from .stored import decode_records, read_records, read_snapshot

__all__ = [
    "Found",
    "fetch_page",
    "fetch_view",
    "offset_page_query",
    "page_in_one_statement",
    "page_query",
    "read_page",
    "read_view",
    "view_fields",
    "view_from",
]

m = messages.c
s = sessions.c
p = snapshots.c
_MAX_KEY = 2**63 - 1

# Built once with bound parameters: a read pays neither statement construction
# nor cache-key generation. An absent upper bound is the largest key. LIMIT and
# OFFSET take every count the argument checks accept (up to 2**63-1): as
# INTEGER, PostgreSQL (and asyncpg, client-side) refused 2**31 and up.
_LIMIT = bindparam("limit", type_=BigInteger)
_OF_SESSION = (m.tenant == bindparam("tenant"), m.session_id == bindparam("sid"))
_SESSION_ROW = (s.tenant == bindparam("tenant"), s.session_id == bindparam("sid"))
_PAGE = (
    select(*RECORD_COLUMNS)
    .where(
        *_OF_SESSION,
        m.sequence > bindparam("lower"),
        m.sequence <= bindparam("through"),
    )
    .order_by(m.sequence)
    .limit(_LIMIT)
    .offset(bindparam("skip", type_=BigInteger))
)
_DENSITY = select(s.last_sequence, s.message_count).where(*_SESSION_ROW)


def _by_density(dense: Any, holed: Any) -> Any:
    """``dense`` for a session that never lost a message, else ``holed`` (NULL: no session)."""
    dense_log = s.message_count == s.last_sequence
    chosen = case((dense_log, dense), else_=holed)
    return select(chosen).where(*_SESSION_ROW).scalar_subquery()


_SKIP = bindparam("skip", type_=BigInteger)
_LOWER = bindparam("lower", type_=BigInteger)
_OFFSET_PAGE = (
    select(*RECORD_COLUMNS)
    .where(
        *_OF_SESSION,
        m.sequence > _by_density(_LOWER + _SKIP, _LOWER),
        m.sequence <= bindparam("through"),
    )
    .order_by(m.sequence)
    .limit(_LIMIT)
    # An unknown session has no row to say: no offset then (SQLite refuses OFFSET NULL).
    .offset(func.coalesce(_by_density(0, _SKIP), 0))
)
"""A page at an offset in one statement: the density check is a subquery."""
_HEAD = select(s.parent_session_id, s.session_type, s.title, s.agent_name).where(*_SESSION_ROW)
_LATEST_SNAPSHOT = (
    select(*SNAPSHOT_COLUMNS)
    .where(p.tenant == bindparam("tenant"), p.session_id == bindparam("sid"))
    .order_by(p.version.desc())
    .limit(1)
)
_TAIL = (
    select(*RECORD_COLUMNS)
    .where(*_OF_SESSION, m.sequence > bindparam("boundary"))
    .order_by(m.sequence)
)


def _page_params(
    tenant: str, session_id: str, lower: int, through: int | None, limit: int, skip: int
) -> dict[str, Any]:
    through = _MAX_KEY if through is None else through
    return {
        "tenant": tenant,
        "sid": session_id,
        "lower": lower,
        "through": through,
        "limit": limit,
        "skip": skip,
    }


def page_query(
    tenant: str, session_id: str, *, lower: int, through: int | None, limit: int, skip: int
) -> Executable:
    """Rows with ``lower < sequence <= through`` in order, ``skip`` of them skipped.

    The statement ``fetch_page`` runs, with these values bound (to explain it).
    """
    return _PAGE.params(_page_params(tenant, session_id, lower, through, limit, skip))


def page_in_one_statement(
    dialect: str,
    tenant: str,
    session_id: str,
    *,
    after_sequence: int,
    through_sequence: int | None,
    limit: int,
    offset: int,
) -> tuple[Executable, dict[str, Any]] | None:
    """``fetch_page`` as one statement and its parameters, for ``Database.read_one``:
    always without an offset, and with one where the dialect takes subqueries in
    LIMIT/OFFSET. None where the page takes ``fetch_page`` in a read transaction."""
    bounds = (after_sequence, through_sequence, limit)
    if not offset:
        return _PAGE, _page_params(tenant, session_id, *bounds, 0)
    if not capabilities(dialect).subquery_limits or after_sequence + offset >= _MAX_KEY:
        return None
    return _OFFSET_PAGE, _page_params(tenant, session_id, *bounds, offset)


def offset_page_query(
    tenant: str, session_id: str, *, after: int, through: int | None, limit: int, offset: int
) -> Executable:
    """The one statement ``fetch_page`` runs at an offset on SQLite and PostgreSQL."""
    return _OFFSET_PAGE.params(_page_params(tenant, session_id, after, through, limit, offset))


def fetch_page(
    conn: Connection,
    tenant: str,
    session_id: str,
    *,
    after_sequence: int,
    through_sequence: int | None,
    limit: int,
    offset: int,
) -> Sequence[Any]:
    """One page, read in the caller's (read) transaction.

    Without an offset the page is a key range whatever the log's shape: one
    statement. With one, the session row says whether the log is dense: in
    the same statement where the dialect allows, else in one before it.
    """
    lower, skip = after_sequence, offset
    if offset and after_sequence + offset >= _MAX_KEY:
        return []
    if offset and capabilities(conn).subquery_limits:
        params = _page_params(tenant, session_id, lower, through_sequence, limit, skip)
        return read_records(conn, tenant, conn.execute(_OFFSET_PAGE, params).all())
    if offset:
        density = conn.execute(_DENSITY, {"tenant": tenant, "sid": session_id}).first()
        if density is None:
            return []
        if density.message_count == density.last_sequence:
            lower, skip = after_sequence + offset, 0
    if through_sequence is not None and lower >= through_sequence:
        return []
    params = _page_params(tenant, session_id, lower, through_sequence, limit, skip)
    return read_records(conn, tenant, conn.execute(_PAGE, params).all())


async def read_page(
    database: Database,
    tenant: str,
    session_id: str,
    *,
    after_sequence: int,
    through_sequence: int | None,
    limit: int,
    offset: int,
    stale: bool = False,
) -> Sequence[Any]:
    """One page's rows, documents decoded: one statement where it takes one, else (or
    when a document shares values, read with its rows) a read transaction; ``stale``: a
    read replica may answer."""
    single = page_in_one_statement(
        database.dialect,
        tenant,
        session_id,
        after_sequence=after_sequence,
        through_sequence=through_sequence,
        limit=limit,
        offset=offset,
    )
    if single is not None:
        rows = await database.read_one(*single, stale=stale, tenant=tenant)
        decoded = decode_records(database.codec, tenant, rows)
        if decoded is not None:
            return decoded

    def work(conn: Connection) -> Sequence[Any]:
        return fetch_page(
            conn,
            tenant,
            session_id,
            after_sequence=after_sequence,
            through_sequence=through_sequence,
            limit=limit,
            offset=offset,
        )

    return await database.read(work, stale=stale, tenant=tenant)


Found = tuple[Any, Any, Sequence[Any]]
"""The session row, its latest snapshot row (or None) and the tail rows."""


def fetch_view(conn: Connection, tenant: str, session_id: str) -> Found | None:
    """The session row, its latest snapshot and the rows after its boundary, documents
    decoded (None: no session)."""
    key = {"tenant": tenant, "sid": session_id}
    head = conn.execute(_HEAD, key).first()
    if head is None:
        return None
    latest = conn.execute(_LATEST_SNAPSHOT, key).first()
    boundary = 0 if latest is None else latest.compacted_through_sequence
    tail = conn.execute(_TAIL, {**key, "boundary": boundary}).all()
    return head, read_snapshot(conn, tenant, latest), read_records(conn, tenant, tail)


async def read_view(database: Database, tenant: str, session_id: str) -> Found | None:
    """``fetch_view`` in one read transaction."""

    def work(conn: Connection) -> Found | None:
        return fetch_view(conn, tenant, session_id)

    return await database.read(work, tenant=tenant)


def view_fields(
    found: Found,
    snapshot: Callable[[Any], Any],
    records: Callable[[Sequence[Any]], list[Any]],
) -> dict[str, Any]:
    """The fields of a session view (ours or a framework's) from what ``fetch_view``
    read; ``snapshot`` and ``records`` build that view's snapshot and tail."""
    head, latest, tail = found
    return {
        "parent_session_id": head.parent_session_id,
        "session_type": head.session_type,
        "title": head.title,
        "agent_name": head.agent_name,
        "snapshot": None if latest is None else snapshot(latest),
        "raw_tail": records(tail),
    }


def view_from(found: Found | None) -> SessionView:
    """The ``SessionView`` of what ``fetch_view`` read; an unknown session's is empty."""
    if found is None:
        return SessionView()
    return SessionView(**view_fields(found, snapshot_from_row, records_from_rows))
