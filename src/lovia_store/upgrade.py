"""Schema upgrades from code: the same procedure as a store's first use."""

from __future__ import annotations

import os

from sqlalchemy.ext.asyncio import AsyncEngine

from .db.database import Database
from .db.schema import ensure_current, migrate

__all__ = ["check", "upgrade"]


async def upgrade(target: Database | AsyncEngine | str | os.PathLike[str]) -> None:
    """Bring the database at ``target`` to the current schema (idempotent).

    Refuses, with ``SchemaVersionError``, a database a newer version wrote.
    """
    db = target if isinstance(target, Database) else Database(target)
    try:
        await migrate(db)
    finally:
        if db is not target:
            await db.close()


async def check(target: Database | AsyncEngine | str | os.PathLike[str]) -> None:
    """Raise ``SchemaNotCurrentError`` or ``SchemaVersionError`` unless ``target`` is current.

    Never writes to the database (and never creates a missing SQLite file).
    """
    db = target if isinstance(target, Database) else Database(target, verify_only=True)
    try:
        await ensure_current(db, verify_only=True)
    finally:
        if db is not target:
            await db.close()
