"""Converting another program's database: which of its tables the pending revisions
convert and drop, and the copy of its file kept before they do.

lovia 0.9's and zett-agent's tables are recognised by the rules the revisions
that convert them hold (``recognition``, with ``ADOPTED_BY``: which revision
converts whose); the copy itself is ``db/legacy_copy``'s, a SQLite file copied
whole. Both decisions are made before the first revision runs, inside the
migration's write transaction.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from ..db.legacy_copy import keep_copy
from ..db.schema_state import placed_schema
from ..errors import LegacyBackupError
from .recognition import ADOPTED_BY, adoptable

if TYPE_CHECKING:
    from ..db.database import Database

__all__ = ["keep_legacy_copy", "to_convert"]

logger = logging.getLogger(__name__)


def to_convert(conn: Connection, pending: set[str]) -> dict[str, list[str]]:
    """Other programs' tables that the ``pending`` revisions will convert and drop."""
    found = adoptable(conn, placed_schema(conn))
    return {owner: tables for owner, tables in found.items() if ADOPTED_BY[owner] in pending}


def keep_legacy_copy(db: Database, converted: dict[str, list[str]]) -> Path | None:
    """Copy a file before a conversion drops another program's tables (see ``legacy_copy``).

    Runs inside the migration's write transaction, so no writer can change the
    file between the copy and the conversion. A server database cannot be
    copied from here: converting one needs ``legacy_backup=False``, the
    caller's word that a dump exists.
    """
    if not converted or db.legacy_backup is False:
        return None
    owners = " and ".join(converted)
    path = db.sqlite_path
    if path is None:
        if db.is_sqlite:
            return None  # an in-memory database: nothing outlives the process anyway
        tables = ", ".join(t for found in converted.values() for t in found)
        raise LegacyBackupError(
            f"{db.url} holds {owners} tables ({tables}), "
            "which converting to lovia-store's schema drops, and lovia-store cannot copy a "
            "server database aside: dump it first (pg_dump, mariadb-dump), then convert "
            "with legacy_backup=False (lovia-store upgrade --no-backup)"
        )
    folder = None if db.legacy_backup is True else Path(db.legacy_backup).expanduser().resolve()
    copy = keep_copy(path, folder)
    logger.warning(
        "converting %s from %s to lovia-store's schema; the original is kept at %s",
        path,
        owners,
        copy,
    )
    return copy
