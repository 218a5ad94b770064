"""Read back what a SQLite file / connection really uses, for the durability table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def file_journal_mode(path: Path) -> str:
    """The journal mode recorded in the file: ``wal`` sticks to it, others read ``delete``."""
    if not path.exists():
        return "?"
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def connection_settings(conn: sqlite3.Connection) -> dict[str, str]:
    """journal_mode, synchronous and busy_timeout of one live DB-API connection."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    busy = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    return {
        "journal_mode": str(journal),
        "synchronous": _SYNC_NAMES.get(sync, str(sync)),
        "busy_timeout_ms": str(busy),
    }


def sync_name(value: object) -> str:
    """PRAGMA synchronous number to its name."""
    try:
        return _SYNC_NAMES.get(int(str(value)), str(value))
    except ValueError:
        return str(value)
