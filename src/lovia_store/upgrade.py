"""Schema upgrades from code: the same procedure as a store's first use.

``lovia_store`` imports this module eagerly (its ``upgrade`` function must
hide the submodule of the same name), so the database and Alembic are
imported on the first call, not here: ``import lovia_store`` stays cheap.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeAlias

from .errors import UserError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .db.database import Database
    from .db.schema import UpgradeReport

__all__ = ["UpgradeReport", "check", "upgrade"]

Target: TypeAlias = "Database | AsyncEngine | str | os.PathLike[str]"
Backup: TypeAlias = "bool | str | os.PathLike[str]"


def __getattr__(name: str) -> Any:
    """``UpgradeReport``, imported (with the schema code) when first named."""
    if name == "UpgradeReport":
        from .db.schema import UpgradeReport

        return UpgradeReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _database(
    target: Target, schema: str | None, *, verify_only: bool, legacy_backup: Backup = True
) -> Database:
    """``target`` itself, or a Database opened on it (the caller closes what it opened)."""
    from .db.database import Database

    if not isinstance(target, Database):
        return Database(target, schema=schema, verify_only=verify_only, legacy_backup=legacy_backup)
    if schema is not None and schema != target.schema:
        raise UserError(
            f"schema={schema!r} differs from the Database's own ({target.schema!r}); "
            "give schema= to the Database"
        )
    return target


async def upgrade(
    target: Target,
    *,
    schema: str | None = None,
    legacy_backup: Backup = True,
    adopt_lovia: bool = False,
) -> UpgradeReport:
    """Bring the database at ``target`` to the current schema (idempotent); say what it did.

    ``schema`` places our tables in that PostgreSQL schema, created if needed
    (as ``Database(schema=...)``). Refuses, with ``SchemaVersionError``, a
    database a newer version wrote. Converting a file that lovia 0.9 or
    zett-agent wrote first keeps a copy of it, as ``Database(legacy_backup=...)``
    says (a ``Database`` passed in keeps its own setting). ``adopt_lovia``
    converts the tables a ``LegacyTableError`` named as lovia's.
    """
    from .db.schema import migrate

    db = _database(target, schema, verify_only=False, legacy_backup=legacy_backup)
    try:
        return await migrate(db, adopt_lovia=adopt_lovia)
    finally:
        if db is not target:
            await db.close()


async def check(target: Target, *, schema: str | None = None) -> None:
    """Raise ``SchemaNotCurrentError`` or ``SchemaVersionError`` unless ``target`` is current.

    Never writes to the database (and never creates a missing SQLite file or schema).
    """
    from .db.schema import ensure_current

    db = _database(target, schema, verify_only=True)
    try:
        await ensure_current(db, verify_only=True)
    finally:
        if db is not target:
            await db.close()
