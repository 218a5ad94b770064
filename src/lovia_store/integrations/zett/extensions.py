"""zett-agent's persistence extensions, on our storage: the names a zett user imports.

zett's ``SQLSessionExtension`` takes any storage with its API, ours included, so it is
zett's own class; ``SQLiteSessionExtension(path)`` is zett's signature, opening our
``SQLiteSessionStorage`` where zett's opens its own.
"""

from __future__ import annotations

import os

from zett_agent.extensions.sql import SQLSessionExtension

from .storage import SQLiteSessionStorage, default_target

__all__ = ["SQLSessionExtension", "SQLiteSessionExtension"]


class SQLiteSessionExtension(SQLSessionExtension):
    """Restore and save a zett ``Agent``'s sessions in a SQLite file lovia-store owns
    (None: ``~/.lovia-store/sessions.sqlite3``, with a ``DefaultPathWarning`` when
    zett's default file exists and ours holds no session). ``tenant``: the tenant its
    storage keeps the sessions of (None: the default tenant, as zett's own)."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, tenant: str | None = None
    ) -> None:
        if path is None:  # resolved here, so the warning points at the caller's line
            path = default_target(type(self).__name__, depth=1)
        # zett types its storage by its own class; ours has the same API, not that base.
        super().__init__(SQLiteSessionStorage(path, tenant=tenant))  # type: ignore[arg-type]
