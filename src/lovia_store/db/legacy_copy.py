"""A way back from converting another program's SQLite file.

Opening a file that lovia 0.9 or zett-agent wrote converts it to our schema and
drops their tables, after which they cannot open it. So before the conversion
the whole file is copied beside it (or into a folder the caller names) with
SQLite's backup API, while the migration's write transaction holds the file's
write lock: the copy is exactly what is about to be converted. The copy is
written under a ``.partial`` name, flushed to disk and only then renamed, so a
copy under its final name is always whole. It is owner-only (0600), whatever the
original's mode: it holds the same conversations.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from ..errors import LegacyBackupError
from .private_files import create_private_file

__all__ = ["keep_copy"]

logger = logging.getLogger(__name__)


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
    create_private_file(partial)  # the copy is the user's conversations: owner-only
    source = sqlite3.connect(path)
    try:
        target = sqlite3.connect(partial)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()
    with partial.open("rb+") as written:
        os.fsync(written.fileno())


def _publish(partial: Path, final: Path) -> None:
    os.replace(partial, final)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
