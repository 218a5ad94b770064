"""The few statements whose SQL differs by dialect: upserts and insert-if-absent."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Table, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from .tables import sessions

__all__ = ["Bumped", "bump_session", "insert_ignore"]


def _is_mysql(conn: AsyncConnection) -> bool:
    return conn.dialect.name in ("mysql", "mariadb")


async def insert_ignore(conn: AsyncConnection, table: Table, values: dict[str, Any]) -> bool:
    """Insert one row unless its key exists; True when the row was inserted.

    The uniqueness check happens inside the insert (never read-then-write),
    so racing writers settle on the constraint.
    """
    if _is_mysql(conn):
        stmt: Any = table.insert().prefix_with("IGNORE").values(values)
    elif conn.dialect.name == "postgresql":
        stmt = postgresql.insert(table).values(values).on_conflict_do_nothing()
    else:
        stmt = sqlite.insert(table).values(values).on_conflict_do_nothing()
    result = await conn.execute(stmt)
    return bool(result.rowcount == 1)


class Bumped(NamedTuple):
    """What ``bump_session`` reserved, and the session row it reserved it on."""

    last_sequence: int
    run_count: int
    parent_session_id: str | None


async def bump_session(
    conn: AsyncConnection,
    session_id: str,
    *,
    messages: int,
    runs: int,
    now: datetime,
    create: dict[str, Any] | None = None,
) -> Bumped:
    """Create the session if needed and reserve ``messages`` sequences and ``runs`` positions.

    One statement that also takes the session's row lock, so concurrent
    appends to one session serialize here and never collide on a sequence.
    ``create`` holds display columns used only when this call creates the row.
    Returns the last reserved sequence and run position, and the row's parent
    (so a caller can refuse a parent that differs from the stored one).
    """
    values = {
        "session_id": session_id,
        "last_sequence": messages,
        "message_count": messages,
        "run_count": runs,
        "created_at": now,
        "updated_at": now,
        **(create or {}),
    }
    c = sessions.c
    bumps = {
        "last_sequence": c.last_sequence + messages,
        "message_count": c.message_count + messages,
        "run_count": c.run_count + runs,
        "updated_at": now,
    }
    returned = (c.last_sequence, c.run_count, c.parent_session_id)
    if _is_mysql(conn):
        stmt: Any = mysql.insert(sessions).values(values).on_duplicate_key_update(**bumps)
        await conn.execute(stmt)
        row = (await conn.execute(select(*returned).where(c.session_id == session_id))).one()
    else:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        stmt = (
            dialect.insert(sessions)
            .values(values)
            .on_conflict_do_update(index_elements=[c.session_id], set_=bumps)
            .returning(*returned)
        )
        row = (await conn.execute(stmt)).one()
    return Bumped(int(row[0]), int(row[1]), row[2])
