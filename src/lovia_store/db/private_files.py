"""Owner-only SQLite files and folders: what they hold is personal conversations.

A SQLite file lovia-store opens is created by lovia-store, empty and 0600,
just before SQLite would create it (SQLite creates a file it opens with the
process umask, typically 0644). SQLite's unix VFS gives the ``-wal``, ``-shm``
and ``-journal`` files it makes beside a database the main file's permission
bits, so they are 0600 too. A folder lovia-store creates for a file is 0700.
Whatever exists already (the caller's own file or folder) keeps its mode:
nothing here changes the mode of anything it did not just create.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL

__all__ = [
    "FILE_MODE",
    "FOLDER_MODE",
    "create_private_file",
    "create_private_folder",
    "keep_sqlite_files_private",
]

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def create_private_file(path: Path) -> bool:
    """Create ``path`` empty and owner-only, unless it exists; True if this call made it.

    ``O_EXCL``: a file another process created meanwhile is theirs and is left
    alone. The mode is set again after creation, since a umask may take owner
    bits away too.
    """
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True


def create_private_folder(folder: Path) -> bool:
    """Create ``folder`` (its parent exists) owner-only, unless it exists; True if made here."""
    try:
        folder.mkdir(mode=FOLDER_MODE)
    except FileExistsError:  # another process made it meanwhile: theirs, left alone
        if not folder.is_dir():
            raise
        return False
    os.chmod(folder, FOLDER_MODE)  # mkdir's mode goes through the umask
    return True


def _may_create(url: URL) -> bool:
    """Whether SQLite itself would create the file: not for a ``file:`` URI opened
    ``mode=ro`` or ``mode=rw`` (then a missing file is SQLite's error to report)."""
    database = url.database or ""
    is_uri = str(url.query.get("uri", "")).lower() in ("true", "1")
    if not (is_uri and database.startswith("file:")):
        return True
    modes: list[str] = []
    if "?" in database:
        modes += parse_qs(database.split("?", 1)[1]).get("mode", [])
    given = url.query.get("mode")
    if given is not None:
        modes += [given] if isinstance(given, str) else list(given)
    return all(mode == "rwc" for mode in modes)


def keep_sqlite_files_private(engine: Engine, url: URL, path: Path) -> None:
    """Before each connection ``engine`` opens to ``path``, create the file owner-only
    if it is missing (first use, or deleted since), so SQLite never creates it.

    A file that cannot be created here (a missing folder, no permission) is left
    to SQLite, whose error the caller gets as before.
    """
    if not _may_create(url):
        return

    @event.listens_for(engine, "do_connect")
    def _create_first(_dialect: Any, _record: Any, _args: Any, _params: Any) -> None:
        with contextlib.suppress(OSError):
            create_private_file(path)
