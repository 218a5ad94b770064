"""The few statements whose SQL differs by dialect: upserts and insert-if-absent."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from .tables import sessions

__all__ = ["bump_session", "insert_ignore"]


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


async def bump_session(
    conn: AsyncConnection,
    session_id: str,
    *,
    messages: int,
    runs: int,
    now: datetime,
    create: dict[str, Any] | None = None,
) -> tuple[int, int]:
    """Create the session if needed and reserve ``messages`` sequences and ``runs`` positions.

    One statement that also takes the session's row lock, so concurrent
    appends to one session serialize here and never collide on a sequence.
    Returns the last reserved sequence and run position.
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
    if _is_mysql(conn):
        stmt: Any = mysql.insert(sessions).values(values).on_duplicate_key_update(**bumps)
        await conn.execute(stmt)
        row = (
            await conn.execute(
                select(c.last_sequence, c.run_count).where(c.session_id == session_id)
            )
        ).one()
        return int(row[0]), int(row[1])
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = (
        dialect.insert(sessions)
        .values(values)
        .on_conflict_do_update(index_elements=[c.session_id], set_=bumps)
        .returning(c.last_sequence, c.run_count)
    )
    row = (await conn.execute(stmt)).one()
    return int(row[0]), int(row[1])
