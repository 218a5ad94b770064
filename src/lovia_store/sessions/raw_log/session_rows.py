"""The Raw Log API's statements on ``lovia_sessions``, one implementation for both storages.

``SQLSessionStorage`` (here) and zett-agent's storage (``integrations/zett``)
check their arguments in their own words and build their own read models;
what lies between is this module's: which session rows are created, read,
changed, listed, counted and deleted, with which statements, in how many
transactions. Arguments come in checked; summary rows go out in
``SUMMARY_COLUMNS`` order. Every statement is scoped to the caller's ``tenant``:
the same session id in another tenant is another session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, select, update
from sqlalchemy import delete as delete_rows

from ...db.database import Database
from ...db.dialect import insert_ignore
from ...db.tables import messages, session_runs, sessions, snapshots
from ...db.types import utcnow
from ..stored import lock_rows
from .records import SUMMARY_COLUMNS
from .stored import release_session

__all__ = ["create", "delete", "message_count", "page", "summary", "update_display"]

s = sessions.c
_SCOPED = (s.tenant == bindparam("tenant"), s.session_id == bindparam("sid"))
_SUMMARY = select(*SUMMARY_COLUMNS).where(*_SCOPED)
_MESSAGE_COUNT = select(s.message_count).where(*_SCOPED)
_LOCKED = select(s.session_id).where(*_SCOPED).with_for_update()
# What a session owns, then its row (whose deletion says whether it existed).
_DELETE_MESSAGES = delete_rows(messages).where(
    messages.c.tenant == bindparam("tenant"), messages.c.session_id == bindparam("sid")
)
_DELETE_RUNS = delete_rows(session_runs).where(
    session_runs.c.tenant == bindparam("tenant"), session_runs.c.session_id == bindparam("sid")
)
_DELETE_SNAPSHOTS = delete_rows(snapshots).where(
    snapshots.c.tenant == bindparam("tenant"), snapshots.c.session_id == bindparam("sid")
)
_DELETE_SESSION = delete_rows(sessions).where(*_SCOPED)


async def create(
    database: Database,
    tenant: str,
    session_id: str,
    values: Mapping[str, Any],
    exists: Callable[[str], Exception],
) -> datetime:
    """Insert an empty session with the display ``values``; returns its creation time.

    A session that exists already raises ``exists(session_id)`` and is left as it was.
    """

    def work(conn: Connection) -> datetime:
        now = utcnow()
        row = {
            "tenant": tenant,
            "session_id": session_id,
            **values,
            "created_at": now,
            "updated_at": now,
        }
        if not insert_ignore(conn, sessions, row):
            raise exists(session_id)
        return now

    return await database.write(work, tenant=tenant)


async def summary(database: Database, tenant: str, session_id: str) -> Any | None:
    """The session's summary row, or None; one statement (a snapshot by itself)."""
    rows = await database.read_one(_SUMMARY, {"tenant": tenant, "sid": session_id}, tenant=tenant)
    return rows[0] if rows else None


async def update_display(
    database: Database, tenant: str, session_id: str, changes: Mapping[str, Any]
) -> Any | None:
    """Set the display columns in ``changes`` (and ``updated_at``); the new summary row,
    or None when there is no such session."""

    def work(conn: Connection) -> Any:
        changed = conn.execute(
            update(sessions)
            .where(s.tenant == tenant, s.session_id == session_id)
            .values(**changes, updated_at=utcnow())
        )
        if not changed.rowcount:
            return None
        return conn.execute(_SUMMARY, {"tenant": tenant, "sid": session_id}).one()

    return await database.write(work, tenant=tenant)


async def delete(database: Database, tenant: str, session_id: str) -> bool:
    """Delete the session, its raw messages and snapshots; True when it existed.

    The session's row is locked first (as an append takes it: no message joins the
    session meanwhile), then what its messages share is released, then its rows go,
    all in one transaction."""

    def work(conn: Connection) -> bool:
        key = {"tenant": tenant, "sid": session_id}
        if conn.dialect.name != "sqlite":  # SQLite's writer holds the whole file already
            conn.execute(_LOCKED, key)
            lock_rows(conn, tenant, session_id)  # and its rows: a rekey takes no session
        release_session(conn, tenant, session_id)
        for statement in (_DELETE_MESSAGES, _DELETE_RUNS, _DELETE_SNAPSHOTS):
            conn.execute(statement, key)
        return bool(conn.execute(_DELETE_SESSION, key).rowcount)

    return await database.write(work, tenant=tenant)


async def page(
    database: Database,
    tenant: str,
    codes: tuple[int, ...] | None,
    limit: int,
    offset: int,
    *,
    stale: bool = False,
) -> Sequence[Any]:
    """One page of summary rows, latest activity first (ties: higher id first);
    ``codes`` keeps only those session types (None: all); ``stale``: a read replica
    may answer."""

    def work(conn: Connection) -> Sequence[Any]:
        query = select(*SUMMARY_COLUMNS).where(s.tenant == bindparam("tenant", tenant))
        if codes is not None:
            query = query.where(s.session_type.in_(codes))
        query = query.order_by(s.updated_at.desc(), s.session_id.desc())
        # As BIGINT: PostgreSQL binds a plain limit as INTEGER, refusing 2**31 and up.
        query = query.limit(bindparam("limit", limit, type_=BigInteger)).offset(
            bindparam("offset", offset, type_=BigInteger)
        )
        return conn.execute(query).all()

    return await database.read(work, stale=stale, tenant=tenant)


async def message_count(database: Database, tenant: str, session_id: str) -> int:
    """How many raw messages the session holds (0 if unknown), from its session row."""
    key = {"tenant": tenant, "sid": session_id}
    rows = await database.read_one(_MESSAGE_COUNT, key, tenant=tenant)
    return int(rows[0][0]) if rows else 0
