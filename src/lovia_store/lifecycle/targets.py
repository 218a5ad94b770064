"""Opening the database an operation reads or writes: a Database, an engine, a URL, a path."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, TypeAlias

from ..db.database import Database

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Target", "opened"]

# A string: opening a SQLite file never imports SQLAlchemy's asyncio extension.
Target: TypeAlias = "Database | AsyncEngine | str | os.PathLike[str]"


@contextlib.asynccontextmanager
async def opened(target: Target, *, verify_only: bool) -> AsyncIterator[Database]:
    """``target`` itself when it is a Database (left open), else a Database opened on it
    and closed after. ``verify_only``: never migrate a database opened here (a source)."""
    if isinstance(target, Database):
        yield target
        return
    db = Database(target, verify_only=verify_only)
    try:
        yield db
    finally:
        await db.close()
