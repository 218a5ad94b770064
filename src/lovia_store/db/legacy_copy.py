"""A way back from converting another program's SQLite file.

Opening a file that lovia 0.9 or zett-agent wrote converts it to our schema and
drops their tables, after which they cannot open it. So before the conversion
the whole file is copied beside it (or into a folder the caller names) with
SQLite's backup API, while the migration's write transaction holds the file's
write lock: the copy is exactly what is about to be converted. The copy is
written under a ``.partial`` name, flushed to disk and only then renamed, so a
copy under its final name is always whole.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Connection, inspect

from ..errors import LegacyBackupError

__all__ = [
    "ADOPTED_BY",
    "LEGACY_COLUMNS",
    "LEGACY_TABLES",
    "adoptable",
    "keep_copy",
    "legacy_tables",
]

logger = logging.getLogger(__name__)

LEGACY_TABLES: dict[str, tuple[str, ...]] = {
    "lovia 0.9": ("session_runs", "snapshot_heads", "snapshot_turns"),
    "zett-agent": ("agent_sessions", "raw_messages", "session_snapshots"),
}
"""The tables our first migrations convert and drop, by the program that owns them."""

ADOPTED_BY = {"lovia 0.9": "0001", "zett-agent": "0002"}
"""The revision that converts each program's tables."""

LEGACY_COLUMNS: dict[str, frozenset[str]] = {
    # lovia 0.9.119's SQLite stores (lovia/stores/session.py, checkpointer.py).
    "session_runs": frozenset(
        {"id", "session_id", "run_id", "entries_json", "meta_json", "created_at"}
    ),
    "snapshot_heads": frozenset({"run_id", "head_json", "updated_at"}),
    "snapshot_turns": frozenset({"run_id", "seq", "entries_json"}),
    # zett-agent 0.2's SQLSessionStorage (every column the conversion reads).
    "agent_sessions": frozenset(
        {"id", "parent_session_id", "title", "agent_name", "created_at", "updated_at"}
    ),
    "raw_messages": frozenset(
        {
            "id",
            "session_id",
            "request_id",
            "sequence",
            "message_json",
            "metadata_json",
            "tags_json",
            "started_at",
            "completed_at",
            "reasoning_started_at",
            "reasoning_completed_at",
            "content_started_at",
            "content_completed_at",
            "duration_ns",
            "reasoning_duration_ns",
            "content_duration_ns",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "created_at",
            "updated_at",
        }
    ),
    "session_snapshots": frozenset(
        {
            "id",
            "session_id",
            "version",
            "compacted_through_sequence",
            "message_json",
            "created_at",
            "updated_at",
        }
    ),
}
"""The columns each program's table has (at least): a host's table that merely shares
one of these generic names lacks them, and is the host's, never converted."""

_LOVIA_MARK = "lovia_schema"
"""lovia 0.9's stores create this table beside their own; a host's tables come without it."""


def adoptable(conn: Connection, schema: str | None = None) -> dict[str, list[str]]:
    """The other programs' tables in the database that really are theirs, by program.

    A name alone is not enough (D7): ``session_runs`` or ``raw_messages`` may be a
    host application's own table in a shared database. lovia 0.9's tables count
    only beside its ``lovia_schema`` table; zett-agent's only all three together;
    and every table only with the columns its program gives it. Anything else is
    left as it is. ``snapshot_turns`` is converted only with ``snapshot_heads``.
    """
    inspector = inspect(conn)
    names = set(inspector.get_table_names(schema=schema))
    named = legacy_tables(names)
    if not named:
        return {}

    def theirs(table: str) -> bool:
        columns = {c["name"] for c in inspector.get_columns(table, schema=schema)}
        return LEGACY_COLUMNS[table] <= columns

    found: dict[str, list[str]] = {}
    lovia = named.get("lovia 0.9", [])
    if lovia and _LOVIA_MARK in names:
        tables = [t for t in lovia if t != "snapshot_turns" and theirs(t)]
        if "snapshot_heads" in tables and "snapshot_turns" in lovia and theirs("snapshot_turns"):
            tables.append("snapshot_turns")
        if tables:
            found["lovia 0.9"] = [t for t in LEGACY_TABLES["lovia 0.9"] if t in tables]
    zett = named.get("zett-agent", [])
    if len(zett) == len(LEGACY_TABLES["zett-agent"]) and all(theirs(t) for t in zett):
        found["zett-agent"] = zett
    return found


def legacy_tables(names: Iterable[str]) -> dict[str, list[str]]:
    """The other programs' tables among ``names``, by program."""
    present = set(names)
    found = {owner: [t for t in tables if t in present] for owner, tables in LEGACY_TABLES.items()}
    return {owner: tables for owner, tables in found.items() if tables}


def backup_name(path: Path, folder: Path) -> Path:
    """``chat.db`` -> ``chat.before-lovia-store-20261201T201844123456Z.db``, never a file
    that exists."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    candidate = folder / f"{path.stem}.before-lovia-store-{stamp}{path.suffix}"
    number = 1
    while candidate.exists():
        number += 1
        candidate = folder / f"{path.stem}.before-lovia-store-{stamp}-{number}{path.suffix}"
    return candidate


def keep_copy(path: Path, folder: Path | None = None) -> Path:
    """Copy the SQLite file at ``path`` into ``folder`` (default: beside it); return the copy.

    Call it while holding the file's write lock on another connection: readers
    are not blocked by it, writers are, so the copy is consistent.
    """
    where = path.parent if folder is None else folder
    if not where.is_dir():
        raise LegacyBackupError(
            f"cannot keep a copy of {path} before converting it: {where} is not a folder"
        )
    final = backup_name(path, where)
    partial = final.with_name(final.name + ".partial")
    try:
        _copy_pages(path, partial)
        _publish(partial, final)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise LegacyBackupError(
            f"cannot keep a copy of {path} before converting it ({exc}); nothing was converted. "
            "Free space, name another folder (legacy_backup=FOLDER), or pass "
            "legacy_backup=False if you keep backups of your own"
        ) from exc
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise LegacyBackupError(
            f"cannot keep a copy of {path} before converting it ({exc}); nothing was converted"
        ) from exc
    return final


def _copy_pages(path: Path, partial: Path) -> None:
    source = sqlite3.connect(path)
    try:
        target = sqlite3.connect(partial)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()
    shutil.copymode(path, partial)  # the same owner-only bits a private file had
    with partial.open("rb+") as written:
        os.fsync(written.fileno())


def _publish(partial: Path, final: Path) -> None:
    os.replace(partial, final)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
