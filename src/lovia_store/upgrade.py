"""Schema upgrades from code: the same procedure as a store's first use."""

from __future__ import annotations

import os

from sqlalchemy.ext.asyncio import AsyncEngine

from .db.database import Database
from .db.schema import migrate

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

    Never writes to the database.
    """
    db = Database(target, verify_only=True) if not isinstance(target, Database) else target
    try:
        if db.verify_only:
            await db.ensure_schema()
        else:
            await Database(db.engine, verify_only=True).ensure_schema()
    finally:
        if db is not target:
            await db.close()
