"""zett-agent's session storage on lovia-store: change one import.

``from lovia_store.integrations.zett import SQLiteSessionStorage`` instead of
``from zett_agent.storage import SQLiteSessionStorage`` (or ``SQLiteSessionExtension``
instead of ``zett_agent.extensions.sqlite``'s), and zett-agent's
``Agent`` with ``SQLSessionExtension`` or ``SessionPersistenceExtension``
keeps working on SQLite, PostgreSQL or MariaDB, with Alembic migrations and
zett's own objects in and out (its message dataclasses, ``MessageTiming``,
``ModelUsage``, ``RawMessageRecord``, ``SessionView``, ``ContextSnapshot``,
``SessionSummary``). Each message is stored whole, as zett encodes it, beside
the transcript entries lovia's view shows for it, so the same session reads
through ``lovia_store.SQLSession``, the Raw Log API and the command line.
docs/zett.md says what differs from zett-agent's own storage.
"""

from __future__ import annotations

from ...errors import MissingDriverError

try:
    import zett_agent.storage  # noqa: F401  (the codec, and the check that zett is there)
except ImportError as exc:  # pragma: no cover - exercised in a venv without zett-agent
    raise MissingDriverError(
        "lovia_store.integrations.zett needs zett-agent: pip install 'lovia-store[zett]'"
    ) from exc

from .extensions import SQLiteSessionExtension, SQLSessionExtension
from .storage import SQLiteSessionStorage, SQLSessionStorage, default_path

__all__ = [
    "SQLSessionExtension",
    "SQLSessionStorage",
    "SQLiteSessionExtension",
    "SQLiteSessionStorage",
    "default_path",
]
