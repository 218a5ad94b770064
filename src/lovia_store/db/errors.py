"""Driver errors translated into the package's hierarchy, once, at the boundary."""

from __future__ import annotations

import re
import socket
import ssl

from sqlalchemy.exc import DBAPIError, IntegrityError, ProgrammingError

from ..errors import (
    ConflictError,
    LoviaStoreError,
    OutcomeUnknownError,
    StoreBusyError,
    StoredValueError,
    StoreUnavailableError,
    TransactionPoolerError,
    UserError,
)
from .urls import mask_secrets

__all__ = [
    "connect_failure",
    "hide_values",
    "lost_connection",
    "read_retry_safe",
    "translate",
    "violated_constraint",
    "worth_retrying",
]

# PostgreSQL SQLSTATEs that mean "lost a race, nothing applied":
# serialization_failure, deadlock_detected, lock_not_available.
_PG_BUSY = {"40001", "40P01", "55P03"}
_PG_LOCK_TIMEOUT = "55P03"
# MySQL/MariaDB: lock wait timeout, deadlock, and "table definition has changed"
# (a transaction whose snapshot predates a concurrent migration's DDL).
_MYSQL_BUSY = {1205, 1213, 1412}
_MYSQL_LOCK_WAIT_TIMEOUT = 1205
# Reported by the server with the transaction rolled back, COMMIT included: a
# serialization failure or deadlock (PostgreSQL: SERIALIZABLE's check runs at COMMIT),
# MySQL/MariaDB's deadlock (and Galera's certification failure, reported as one).
_PG_ROLLED_BACK = {"40001", "40P01"}
_MYSQL_ROLLED_BACK = {1213}
# A write refused by a server that takes none: PostgreSQL's read_only_sql_transaction (a
# hot standby), MySQL/MariaDB's --read-only and read-only transaction.
_PG_READ_ONLY = "25006"
_MYSQL_READ_ONLY = {1290, 1792, 1836}
# A statement that met a server connection a transaction pooler gave another client:
# invalid_sql_statement_name, duplicate_prepared_statement, and a protocol violation
# binding one statement's values to another's plan.
_PG_POOLER = {"26000", "42P05"}
_POOLER_HINT = (
    "a transaction pooler (PgBouncer in transaction mode, Supavisor, RDS Proxy) stands "
    "between lovia-store and PostgreSQL and gave this statement's server connection to "
    "another client; nothing ran. Add ?lovia_pooler=transaction to the URL (or "
    "Database(..., pooler='transaction'))"
)
# Refusals at connect that repeating within a second cannot change: PostgreSQL's
# invalid authorization (class 28), unknown database; MySQL's access denied and
# unknown database.
_PG_REFUSED_CLASS = ("28", "3D")
_MYSQL_REFUSED = {1044, 1045, 1049, 1698}
_TIMEOUTS = {"ConnectionTimeout"}
_ASYNCPG_ARGUMENT = re.compile(
    r"invalid input for query argument \$\d+(?: in element #\d+ of executemany\(\) sequence)?: "
)


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


_NOT_UTF8 = re.compile(r"Could not decode to UTF-8 column '(\w+)'")


def translate(
    exc: DBAPIError,
    database: str,
    *,
    committing: bool,
    connecting: bool = False,
    hide: bool = True,
) -> LoviaStoreError:
    """The typed error for a driver error raised while talking to ``database``.

    ``committing`` says whether the failure came from COMMIT itself, after
    which the outcome is unknown on a server database; SQLite guarantees that
    a busy COMMIT did not commit. ``connecting`` says it came while opening
    the connection, before anything was sent: repeating the call is safe.
    ``hide`` keeps bound values out of the text of ``exc`` and what it chains.
    """
    if hide:
        hide_values(exc)
    orig = exc.orig
    text = mask_secrets(str(orig) if orig is not None else str(exc))
    if isinstance(exc, IntegrityError):
        return ConflictError(f"{database}: {text}")
    lowered = text.lower()
    undecodable = _NOT_UTF8.search(text)
    if undecodable is not None:
        # sqlite3 cannot read a TEXT value that is not UTF-8 (another program wrote
        # it): a damaged row, not an unreachable database; its text is left out.
        return StoredValueError(
            f"{database}: a stored value is not UTF-8",
            table="?",
            column=undecodable.group(1),
            row={},
        )
    if "database is locked" in lowered or "database table is locked" in lowered:
        return StoreBusyError(f"{database}: {text}", retry_safe=True)
    sqlstate, mysql_code = _sqlstate(orig), _mysql_code(orig)
    if sqlstate in _PG_BUSY or mysql_code in _MYSQL_BUSY:
        rolled_back = sqlstate in _PG_ROLLED_BACK or mysql_code in _MYSQL_ROLLED_BACK
        return StoreBusyError(f"{database}: {text}", retry_safe=rolled_back or not committing)
    if sqlstate in _PG_POOLER or (sqlstate == "08P01" and "prepared statement" in lowered):
        return TransactionPoolerError(f"{database}: {text}: {_POOLER_HINT}")
    if sqlstate == _PG_READ_ONLY or mysql_code in _MYSQL_READ_ONLY:
        return StoreUnavailableError(
            f"{database}: the server is read-only (a standby, or read_only set): {text}; "
            "nothing was written",
            retry_safe=True,
        )
    if connecting and isinstance(exc, ProgrammingError) and _sqlstate(orig) is None:
        # Said by the client before any server spoke: psycopg's "invalid connection option".
        return UserError(f"{database}: the driver refused the URL's parameters: {text}")
    if connecting:
        return StoreUnavailableError(f"{database}: cannot connect: {text}", retry_safe=True)
    if exc.connection_invalidated:
        if committing:
            return OutcomeUnknownError(f"{database}: connection lost during COMMIT: {text}")
        return StoreUnavailableError(f"{database}: connection lost: {text}", retry_safe=True)
    return StoreUnavailableError(f"{database}: {text}", retry_safe=False)


def _chained(exc: BaseException) -> list[BaseException]:
    """``exc`` and everything a traceback of it shows: causes, contexts, ``orig``."""
    found: list[BaseException] = []
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if any(current is seen for seen in found):
            continue
        found.append(current)
        orig = getattr(current, "orig", None)
        for linked in (current.__cause__, current.__context__, orig):
            if isinstance(linked, BaseException):
                pending.append(linked)
    return found


def hide_values(exc: BaseException) -> None:
    """Keep bound values out of the text of ``exc`` and every error it chains.

    SQLAlchemy's own ``[parameters: ...]`` goes with ``hide_parameters``; asyncpg
    also quotes a value it refused client-side ("invalid input for query argument
    $1: 'the user's words...'"), in its error and in the adapter's copy of it:
    the value is cut out, the reason (the error asyncpg raised it from) kept.
    """
    chain = _chained(exc)
    reason = next(
        (
            str(error.__cause__)
            for error in chain
            if error.__cause__ is not None
            and _quotes_value(error)
            and not _quotes_value(error.__cause__)
        ),
        "",
    )
    for error in chain:
        if isinstance(error, DBAPIError):
            error.hide_parameters = True
        if _quotes_value(error):
            message = error.args[0]
            match = _ASYNCPG_ARGUMENT.search(message)
            assert match is not None
            hidden = message[: match.end()] + "(value hidden)" + (f" ({reason})" if reason else "")
            error.args = (hidden, *error.args[1:])


def _quotes_value(error: BaseException) -> bool:
    return bool(
        error.args and isinstance(error.args[0], str) and _ASYNCPG_ARGUMENT.search(error.args[0])
    )


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return mask_secrets(text if isinstance(exc, OSError) else f"{type(exc).__name__}: {text}")


def connect_failure(exc: Exception, database: str) -> LoviaStoreError:
    """The typed error for a connection that could not be opened and that the
    driver did not raise as a DBAPI error (asyncpg raises the socket's own
    ``OSError``, ``socket.gaierror`` or ``TimeoutError``, and ``TypeError`` for a
    URL parameter it does not take). Nothing was sent, so repeating is safe."""
    if isinstance(exc, TimeoutError):
        return StoreUnavailableError(
            f"{database}: cannot connect: timed out ({_reason(exc)})", retry_safe=True
        )
    if isinstance(exc, OSError):  # refused, unknown host, TLS refused or failed
        return StoreUnavailableError(f"{database}: cannot connect: {_reason(exc)}", retry_safe=True)
    return UserError(f"{database}: the driver refused the URL's parameters: {_reason(exc)}")


def lost_connection(exc: OSError, database: str, *, committing: bool) -> StoreUnavailableError:
    """A connection that failed mid-transaction with the socket's own error (asyncpg's
    ``TimeoutError`` for ``command_timeout``, a reset): rolled back unless committing."""
    what = "timed out" if isinstance(exc, TimeoutError) else f"connection lost: {_reason(exc)}"
    if committing:
        return OutcomeUnknownError(f"{database}: {what} during COMMIT")
    return StoreUnavailableError(f"{database}: {what}", retry_safe=True)


def read_retry_safe(error: LoviaStoreError) -> None:
    """Mark a read's lost connection (or busy refusal) retry-safe, COMMIT included (D15).

    ``translate`` cannot tell a read's COMMIT from a write's, whose outcome a lost
    connection leaves unknown. A read's COMMIT only ends its snapshot: it wrote
    nothing, so it can be repeated whatever the phase. Other failures (a refused
    statement) keep what they said.
    """
    if not isinstance(error, StoreUnavailableError | StoreBusyError) or error.retry_safe:
        return
    lost = isinstance(error, StoreBusyError) or any(
        (isinstance(cause, DBAPIError) and cause.connection_invalidated)
        or isinstance(cause, OSError)
        for cause in _chained(error)[1:]
    )
    if lost:
        error.retry_safe = True


def worth_retrying(error: LoviaStoreError) -> bool:
    """Whether ``Database`` should repeat a retry-safe call by itself.

    Not after a timeout (the wait was spent already: the driver's, PostgreSQL's
    ``lock_timeout``, MySQL's ``innodb_lock_wait_timeout``) nor after a refusal that
    stays a refusal a second later: a wrong password or database name, an
    unknown host, a TLS failure. Those reach the caller at once.
    """
    if isinstance(error, TransactionPoolerError):
        return False  # the URL must change: repeating would meet other clients' connections
    for cause in _chained(error)[1:]:
        # psycopg's own timeout class, by name: psycopg is an optional driver.
        if isinstance(cause, TimeoutError | ssl.SSLError) or type(cause).__name__ in _TIMEOUTS:
            return False
        if isinstance(cause, socket.gaierror) and cause.errno != socket.EAI_AGAIN:
            return False
        if "SSL" in str(cause):  # TLS refused or failed: drivers say so only in words
            return False
        code = _sqlstate(cause)
        if code is not None and code.startswith(_PG_REFUSED_CLASS):
            return False
        if _mysql_code(cause) in _MYSQL_REFUSED:
            return False
        if code == _PG_LOCK_TIMEOUT or _mysql_code(cause) == _MYSQL_LOCK_WAIT_TIMEOUT:
            return False  # the server's lock timeout is the call's whole wait
    return True
