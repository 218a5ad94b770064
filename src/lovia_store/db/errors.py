"""Driver errors translated into the package's hierarchy, once, at the boundary."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, IntegrityError

from ..errors import ConflictError, LoviaStoreError, StoreBusyError, StoreUnavailableError

__all__ = ["translate", "violated_constraint"]

# PostgreSQL SQLSTATEs that mean "lost a race, nothing applied":
# serialization_failure, deadlock_detected, lock_not_available.
_PG_BUSY = {"40001", "40P01", "55P03"}
# MySQL/MariaDB: lock wait timeout, deadlock, and "table definition has changed"
# (a transaction whose snapshot predates a concurrent migration's DDL).
_MYSQL_BUSY = {1205, 1213, 1412}


def _sqlstate(orig: BaseException | None) -> str | None:
    for candidate in (orig, getattr(orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(code, str):
            return code
    return None


def violated_constraint(exc: IntegrityError) -> str | None:
    """The constraint a PostgreSQL integrity error names, where the driver tells it
    (asyncpg on the error it chained, psycopg in its diagnostics); None otherwise."""
    orig = exc.orig
    for candidate in (orig, getattr(orig, "__cause__", None)):
        name = getattr(candidate, "constraint_name", None) or getattr(
            getattr(candidate, "diag", None), "constraint_name", None
        )
        if isinstance(name, str):
            return name
    return None


def _mysql_code(orig: BaseException | None) -> int | None:
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def translate(exc: DBAPIError, database: str, *, committing: bool) -> LoviaStoreError:
    """The typed error for a driver error raised while talking to ``database``.

    ``committing`` says whether the failure came from COMMIT itself, after
    which the outcome is unknown on a server database; SQLite guarantees that
    a busy COMMIT did not commit.
    """
    orig = exc.orig
    text = str(orig) if orig is not None else str(exc)
    if isinstance(exc, IntegrityError):
        return ConflictError(f"{database}: {text}")
    lowered = text.lower()
    if "database is locked" in lowered or "database table is locked" in lowered:
        return StoreBusyError(f"{database}: {text}", retry_safe=True)
    if _sqlstate(orig) in _PG_BUSY or _mysql_code(orig) in _MYSQL_BUSY:
        return StoreBusyError(f"{database}: {text}", retry_safe=not committing)
    if exc.connection_invalidated:
        return StoreUnavailableError(
            f"{database}: connection lost: {text}", retry_safe=not committing
        )
    return StoreUnavailableError(f"{database}: {text}", retry_safe=False)
