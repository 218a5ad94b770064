"""One rooted error hierarchy; driver errors are translated into it at the boundary."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

__all__ = [
    "ConflictError",
    "CounterMismatchError",
    "EncryptionKeyError",
    "ForeignRunnerError",
    "JoinedLineageError",
    "LegacyBackupError",
    "LegacyTableError",
    "LoviaStoreError",
    "MissingDriverError",
    "OutcomeUnknownError",
    "RunInProgressError",
    "RunOwnershipLost",
    "SchemaConflictError",
    "SchemaNotCurrentError",
    "SchemaVersionError",
    "SnapshotConflictError",
    "StoreBusyError",
    "StoreUnavailableError",
    "StoredValueError",
    "TransactionPoolerError",
    "UnknownEntryTypeError",
    "UserError",
]


class LoviaStoreError(Exception):
    """Root of every error this package raises."""


class ConversionWarning(UserWarning):
    """A database lovia 0.9 or zett-agent wrote was converted to lovia-store's schema
    on first use: one-way (they no longer open it); the message names the copy kept."""


class DefaultPathWarning(UserWarning):
    """A store opened with no path uses lovia-store's default file, which holds no session,
    while zett-agent's default file exists: the history a switching user expects is
    there, not here. The message names both files and how to open zett's."""


class UserError(LoviaStoreError, ValueError):
    """The call itself is wrong (bad argument, forbidden policy, missing run)."""


class ForeignRunnerError(UserError, TypeError):
    """lovia's own ``Runner`` was handed a native store; refused at its first call, before
    the model or any tool ran.

    lovia's Runner reads and writes lovia's entry objects, and a native store holds
    lovia-store's: it used to run the whole turn and fail only at the final append. The
    drop-ins in ``lovia_store.integrations.lovia`` speak lovia's types on the same rows.
    """

    def __init__(self, store: str, drop_in: str, agent: object) -> None:
        self.store = store
        self.drop_in = drop_in
        self.agent = agent
        super().__init__(
            f"{store} was called inside a run of lovia's own Runner (agent {agent!r}), "
            f"which reads and writes lovia's entry objects; {store} holds lovia-store's. "
            "It is refused at lovia's first call, before the model is called or any tool "
            f"runs. Use {drop_in}, the drop-in that speaks lovia's types on the same rows "
            "(in a lovia run's tools and hooks too)"
        )


class UnknownEntryTypeError(LoviaStoreError, ValueError):
    """A stored or supplied entry has a ``type`` this version does not know."""

    def __init__(self, entry_type: object) -> None:
        self.entry_type = entry_type
        super().__init__(f"unknown transcript entry type: {entry_type!r}")


class SchemaVersionError(LoviaStoreError):
    """The database was written by a newer version; nothing was written to it."""

    def __init__(self, *, store: str, found: object, known: object, database: str) -> None:
        self.store = store
        self.found = found
        self.known = known
        self.database = database
        super().__init__(
            f"{database}: store {store!r} is at schema version {found}, but this "
            f"lovia-store knows only up to version {known}; it was written by a newer "
            "version: upgrade lovia-store (upgrade lovia) to open it"
        )


class SchemaNotCurrentError(LoviaStoreError):
    """Verify-only mode found a database that still needs ``lovia-store upgrade``."""

    def __init__(
        self, *, database: str, found: str | None, expected: str, missing: bool = False
    ) -> None:
        self.database = database
        self.found = found
        self.expected = expected
        if missing:  # a typo in a path is likelier than a database never made
            message = (
                f"{database}: no such file (is the path right?); `lovia-store upgrade` "
                "creates a new database there"
            )
        else:
            message = (
                f"{database}: schema revision is {found or 'empty'}, expected {expected}; "
                "run `lovia-store upgrade` (or open it without verify_only) first"
            )
        super().__init__(message)


class JoinedLineageError(SchemaNotCurrentError):
    """Our revisions are recorded in a host's version table, behind this version's head.

    In a joined lineage the host's Alembic owns our revisions, so lovia-store
    never migrates them itself (it cannot write a version table that holds
    revisions it does not know).
    """

    def __init__(
        self, *, database: str, found: str | None, expected: str, version_table: str
    ) -> None:
        self.database = database
        self.found = found
        self.expected = expected
        self.version_table = version_table
        LoviaStoreError.__init__(
            self,
            f"{database}: lovia-store's tables have no lovia_alembic_version; our revisions "
            f"are recorded in {version_table} (a joined lineage) at {found or 'none we know'}, "
            f"and this version needs {expected}. lovia-store never migrates a joined lineage: "
            "run your application's `alembic upgrade heads` (or `alembic upgrade "
            "lovia_store@head`); none we know means a newer lovia-store wrote it (upgrade "
            "lovia), two means a host revision id collides with ours",
        )


class LegacyTableError(SchemaNotCurrentError):
    """A SQLite file holds tables shaped like lovia 0.9's but not proven to be lovia's;
    nothing was written to it.

    lovia wrote its first session files without its ``lovia_schema`` table; such a
    file is converted when its tables are exactly lovia's. One whose tables have
    lovia's columns and more (or lack lovia's key) may still be lovia's history:
    opening a store beside it would show that history empty, so it is refused
    until ``lovia-store upgrade --adopt-lovia`` (``upgrade(adopt_lovia=True)``)
    converts it, keeping a copy first. lovia still opens the file meanwhile.
    """

    def __init__(self, *, database: str, tables: list[str], expected: str) -> None:
        self.database = database
        self.found = None
        self.expected = expected
        self.tables = tables
        names = ", ".join(repr(t) for t in tables)
        LoviaStoreError.__init__(
            self,
            f"{database}: the table(s) {names} have lovia 0.9's columns but not exactly its "
            "layout, and the file has no lovia_schema table, so lovia-store cannot tell "
            "whether they hold lovia's history; nothing was written. If they do, convert "
            f"the file with `lovia-store upgrade --adopt-lovia {database}` (a copy is kept "
            "first); if they are your own tables, give lovia-store a file of its own",
        )


class SchemaConflictError(LoviaStoreError):
    """A table that is not lovia-store's has the name of one of ours; nothing was created.

    lovia-store's tables all start with ``lovia_``. When a database with no
    lovia-store schema yet already holds such a table with other columns (a
    host's own, or another program's), lovia-store refuses to migrate it rather
    than mistake it for its own.
    """

    def __init__(self, *, database: str, table: str) -> None:
        self.database = database
        self.table = table
        super().__init__(
            f"{database}: the table {table!r} is not lovia-store's (its columns differ), but "
            "lovia-store needs that name; nothing was created. Rename or drop that table, or "
            "give lovia-store a database (or a PostgreSQL schema=) of its own"
        )


class LegacyBackupError(LoviaStoreError):
    """The copy kept before converting another program's file could not be written;
    nothing was converted."""


class StoredValueError(LoviaStoreError, ValueError):
    """A stored value is not what its column holds (another program wrote the row,
    or the file was edited): it is refused, never coerced. Names the row.

    ``table`` and ``column`` say where; ``row`` is the row's key.
    """

    def __init__(self, message: str, *, table: str, column: str, row: dict[str, object]) -> None:
        self.table = table
        self.column = column
        self.row = row
        key = ", ".join(f"{name}={value!r}" for name, value in row.items())
        super().__init__(f"{message} ({table} row {key}, column {column})")


class EncryptionKeyError(StoredValueError):
    """A stored value is encrypted with a key this Database was not given
    (``key_id`` names it), or its key does not open it: wrong key, or the value was
    altered. Names the row; nothing is ever returned undecrypted."""

    def __init__(
        self, message: str, *, key_id: str, table: str, column: str, row: dict[str, object]
    ) -> None:
        self.key_id = key_id
        super().__init__(message, table=table, column=column, row=row)


class CounterMismatchError(LoviaStoreError):
    """Stored counters disagree with the rows they count (``lovia-store check`` found
    them): rows deleted or written by other means, or a copy or an import by an older
    lovia-store that was stopped between a session and its rows.

    ``mismatches`` lists them (``lovia_store.lifecycle.CounterMismatch``: the row, the
    counter, what it says and what the rows hold); the message names the first ten.
    """

    SHOWN = 10

    def __init__(self, *, database: str, mismatches: Sequence[Any]) -> None:
        self.database = database
        self.mismatches = list(mismatches)
        count = len(self.mismatches)
        named = "; ".join(str(m) for m in self.mismatches[: self.SHOWN])
        more = f"; and {count - self.SHOWN} more" if count > self.SHOWN else ""
        counters = (
            "1 counter disagrees with its rows"
            if count == 1
            else f"{count} counters disagree with their rows"
        )
        super().__init__(
            f"{counters}: {named}{more}. A copy or an import that was "
            "stopped is finished by running it again; other damage needs the rows restored "
            "from a backup"
        )


class ConflictError(LoviaStoreError):
    """A write lost a race or broke a uniqueness rule."""


class SnapshotConflictError(ConflictError, ValueError):
    """``expected_version`` is not the session's latest snapshot version."""

    def __init__(self, *, session_id: str, expected: int, actual: int | None) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id!r}: expected snapshot version {expected}, "
            f"but the latest is {actual if actual is not None else 'unknown'}"
        )


class RunInProgressError(ConflictError):
    """Another live worker holds this run's lease: running it here would fork it.

    ``holder`` names that worker (host and pid) and ``expires_at`` is when its
    lease lapses unless renewed; a crashed holder's run can be resumed then.
    """

    def __init__(self, *, run_id: str, holder: str, expires_at: datetime) -> None:
        self.run_id = run_id
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(
            f"run {run_id!r} is in progress on {holder} (its lease runs until "
            f"{expires_at.isoformat(timespec='seconds')} unless renewed); it was not "
            "started a second time"
        )


class RunOwnershipLost(ConflictError):
    """This worker's lease on the run was taken over; its write was refused.

    Raised when a worker stalled past its lease and another one resumed the
    run: the stalled worker must stop, so the run's transcript never forks.
    """

    def __init__(self, *, run_id: str, token: int) -> None:
        self.run_id = run_id
        self.token = token
        super().__init__(
            f"run {run_id!r}: lease {token} is no longer held by this worker (another "
            "worker took the run over after the lease expired); the write was refused"
        )


class StoreBusyError(LoviaStoreError):
    """The database was locked or busy.

    ``retry_safe`` is true when the failure happened before anything could have
    been committed, so repeating the same call cannot apply it twice.
    """

    def __init__(self, message: str, *, retry_safe: bool) -> None:
        self.retry_safe = retry_safe
        super().__init__(message)


class StoreUnavailableError(LoviaStoreError):
    """The database could not be reached or failed in a way we cannot classify.

    ``retry_safe`` is true when nothing ran: the connection could not be opened or was
    lost before COMMIT, or the server refused the write as read-only. A connection lost
    during COMMIT is an ``OutcomeUnknownError``.
    """

    def __init__(self, message: str, *, retry_safe: bool = False) -> None:
        self.retry_safe = retry_safe
        super().__init__(message)


class OutcomeUnknownError(StoreUnavailableError):
    """The connection was lost while a write's COMMIT was under way: the server may or
    may not have committed it.

    A write that can tell (a session append's run id, a checkpoint step, a lease, a
    keyed Raw Log append) is settled by lovia-store after reconnecting, for up to
    ``busy_timeout``: this is raised only for what cannot tell, or when no server
    answered in time. Re-issue what has a key, which is stored once; for a checkpoint
    step, re-issue the run (``Runner.run`` with its ``run_id`` resumes from what the
    checkpoint holds).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_safe=False)


class TransactionPoolerError(StoreUnavailableError):
    """A statement met a server connection that a transaction pooler (PgBouncer in
    transaction mode, Supavisor, RDS Proxy) gave another client; nothing ran.

    The URL lacks ``?lovia_pooler=transaction``, which keeps every statement inside
    one transaction and none prepared by name on the server.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_safe=True)


class MissingDriverError(LoviaStoreError, ImportError):
    """The async driver for the URL's dialect is not installed."""
