"""Registry of the backends the harness knows, and how to build one."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from bench.backends.base import Backend, PgTarget, TrialContext, Unavailable, Unsupported

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendSpec",
    "PgTarget",
    "TrialContext",
    "Unavailable",
    "Unsupported",
    "create",
]


@dataclass(frozen=True)
class BackendSpec:
    """A named configuration of one adapter class.

    ``counterparts`` name the lovia-store backends this one is compared with,
    round by round: first the like-for-like one (same engine, journal mode and
    synchronous setting), then any other at the same durability worth a row.
    """

    name: str
    family: str
    module: str
    cls: str
    wal: bool
    pg: bool
    counterparts: tuple[str, ...]
    durability: str

    @property
    def engine(self) -> str:
        """``postgresql`` or ``sqlite``."""
        return "postgresql" if self.pg else "sqlite"


_SYNC_FULL = "synchronous=FULL (SQLite default)"
_BUSY = "busy_timeout=5000 (Python sqlite3's default timeout=5.0)"
BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            "store-sqlite",
            "lovia-store",
            "lovia_store",
            "LoviaStoreBackend",
            False,
            False,
            (),
            "SQLiteSession(path): lovia-store's default, journal_mode=DELETE, synchronous=FULL",
        ),
        BackendSpec(
            "store-sqlite-wal",
            "lovia-store",
            "lovia_store",
            "LoviaStoreBackend",
            True,
            False,
            (),
            "SQLiteSession(path, wal=True): journal_mode=WAL, synchronous=FULL "
            "(a commit survives power loss)",
        ),
        BackendSpec(
            "store-sqlite-wal-normal",
            "lovia-store",
            "lovia_store",
            "LoviaStoreNormalBackend",
            True,
            False,
            (),
            'Database(path, wal=True, synchronous="normal") passed to SQLSession, '
            "SQLCheckpointer and SQLSessionStorage: zett-agent's setting (a power loss can "
            "drop the last commits)",
        ),
        BackendSpec(
            "store-pg",
            "lovia-store",
            "lovia_store",
            "LoviaStoreBackend",
            False,
            True,
            (),
            "SQLSession(postgresql+asyncpg): server settings",
        ),
        BackendSpec(
            "lovia-sqlite",
            "lovia",
            "lovia",
            "LoviaBackend",
            False,
            False,
            # Same journal and sync; then lovia's default journal vs lovia-store in WAL,
            # both synchronous=FULL: the same durability.
            ("store-sqlite", "store-sqlite-wal"),
            f"journal_mode=DELETE, {_SYNC_FULL}, {_BUSY}; new connection per call",
        ),
        BackendSpec(
            "lovia-sqlite-wal",
            "lovia",
            "lovia",
            "LoviaBackend",
            True,
            False,
            ("store-sqlite-wal",),
            f"journal_mode=WAL, {_SYNC_FULL}, busy_timeout=5000; new connection per call",
        ),
        BackendSpec(
            "zett-sqlite",
            "zett-agent",
            "zett",
            "ZettBackend",
            True,
            False,
            # Like for like at NORMAL; then lovia-store at the stronger FULL.
            ("store-sqlite-wal-normal", "store-sqlite-wal"),
            "journal_mode=WAL, synchronous=NORMAL, busy_timeout=5000 (fixed by zett-agent): "
            "a power loss can drop the last commits",
        ),
        BackendSpec(
            "zett-pg",
            "zett-agent",
            "zett",
            "ZettBackend",
            False,
            True,
            ("store-pg",),
            "SQLSessionStorage(postgresql+psycopg): server settings; its documented driver",
        ),
        BackendSpec(
            "raw-sqlite",
            "raw floor",
            "raw_sqlite",
            "RawSQLiteBackend",
            False,
            False,
            ("store-sqlite",),
            "sqlite3 in one worker thread, one connection; "
            f"journal_mode=DELETE, {_SYNC_FULL}, {_BUSY}",
        ),
        BackendSpec(
            "raw-sqlite-wal",
            "raw floor",
            "raw_sqlite",
            "RawSQLiteBackend",
            True,
            False,
            ("store-sqlite-wal",),
            f"sqlite3 in one worker thread, one connection; journal_mode=WAL, {_SYNC_FULL}, "
            "busy_timeout=5000",
        ),
        BackendSpec(
            "raw-sqlite-wal-normal",
            "raw floor",
            "raw_sqlite",
            "RawSQLiteNormalBackend",
            True,
            False,
            ("store-sqlite-wal-normal",),
            "as raw-sqlite-wal but synchronous=NORMAL (no fsync per commit; zett-agent's setting)",
        ),
        BackendSpec(
            "raw-pg",
            "raw floor",
            "raw_pg",
            "RawPgBackend",
            False,
            True,
            ("store-pg",),
            "asyncpg pool, one transaction per run; server settings",
        ),
    )
}


def create(name: str, ctx: TrialContext) -> Backend:
    """Build backend ``name``; raise :class:`Unavailable` if its packages are missing."""
    spec = BACKENDS[name]
    try:
        module = importlib.import_module(f"bench.backends.{spec.module}")
    except Exception as exc:  # package missing, or a half-written library that fails to import
        raise Unavailable(f"cannot import: {type(exc).__name__}: {exc}") from exc
    backend: Backend = getattr(module, spec.cls)(ctx, wal=spec.wal, pg=spec.pg)
    return backend
