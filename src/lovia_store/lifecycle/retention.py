"""Retention: ``prune`` deletes old sessions and finished checkpoints, and never a
run that can still resume, nor the session it will append to.

What goes is chosen by criteria that all must hold (see ``prune``); what is
protected is decided by the run heads: a run that is ``running`` or
``interrupted``, or whose lease is live, keeps its checkpoint and the session
its head names (``lovia_run_heads.session_id``, written by lovia-store's
Runner). A run whose head names no session (lovia's own Runner writes none)
could append to any session, so while one can resume, no session is pruned
(``unlinked_runs="ignore"`` lifts that). A dry run walks the same selection
and deletes nothing, so its list is what a real run deletes given no
concurrent change; a real run deletes in batches, one short transaction each,
re-checking every criterion inside it.

A prune works on one tenant (a run protects its own tenant's sessions only), or on
every tenant in turn, each with its own criteria's boundaries (``keep_last`` keeps
that many of each tenant).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ..db.database import Database, as_database
from ..errors import UserError
from ..validation import DEFAULT_TENANT
from .targets import refuse_row_level_security, scope_of

__all__ = ["PruneOptions", "PruneReport", "prune"]

UnlinkedRuns = Literal["block", "ignore"]
MAX_BATCH = 5000
"""Ids per statement stay far below every backend's parameter limit."""
_INT32 = 2**31


@dataclass(frozen=True)
class PruneOptions:
    """A prune's criteria, checked: the cuts are aware UTC datetimes."""

    session_cut: datetime | None
    keep_last: int | None
    session_types: tuple[int, ...] | None
    checkpoint_cut: datetime | None
    batch_size: int
    include_resumable: bool
    unlinked_runs: UnlinkedRuns

    @property
    def prunes_sessions(self) -> bool:
        return (
            self.session_cut is not None
            or self.keep_last is not None
            or self.session_types is not None
        )


@dataclass
class PruneReport:
    """What a prune deleted (or, as a dry run, would delete), and what it spared and why.

    ``sessions`` are the ids deleted, oldest activity first, ``runs`` the checkpoints
    (a pruned session's first, then by status and age);
    ``spared_sessions`` matched the criteria but a run that can resume (or is
    leased) appends to them; ``blocking_runs`` are runs that can resume and name
    no session: while there are any, no session is pruned (``unlinked_runs``).
    ``vacuum`` says how space was handed back: ``"incremental"``, ``"full"`` or None.

    ``tenant`` is the tenant pruned; None for every tenant, when ``tenants`` holds
    each tenant's own report by name and the lists above hold the ids of them all
    (the same id may then stand for sessions of two tenants: read ``tenants``).
    """

    dry_run: bool
    sessions: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    spared_sessions: list[str] = field(default_factory=list)
    blocking_runs: list[str] = field(default_factory=list)
    vacuum: str | None = None
    tenant: str | None = DEFAULT_TENANT
    tenants: dict[str, PruneReport] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "dry_run": self.dry_run,
            "tenant": self.tenant,
            "sessions": list(self.sessions),
            "runs": list(self.runs),
            "spared_sessions": list(self.spared_sessions),
            "blocking_runs": list(self.blocking_runs),
            "vacuum": self.vacuum,
        }
        if self.tenant is None:
            document["tenants"] = {
                name: {key: value for key, value in report.as_dict().items() if key != "vacuum"}
                for name, report in self.tenants.items()
            }
        return document


_MOST_ROWS = 2**63 - 1  # a BIGINT: more rows than any table holds


def _cut(value: timedelta | datetime | None, name: str, now: datetime) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise UserError(f"{name} is a timedelta of zero or more, not {value!r}")
        if value > now - datetime.min.replace(tzinfo=UTC):
            raise UserError(f"{name} {value!r} reaches back further than any date")
        return now - value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise UserError(f"{name} must be an aware datetime (UTC), not a naive one")
        return value.astimezone(UTC)
    raise UserError(f"{name} is a timedelta or an aware datetime, not {type(value).__name__}")


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{name} is True or False, not {value!r}")
    return value


def _types(value: Iterable[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, int | str | bytes):
        raise UserError("session_types is a collection of integers, e.g. [3] or {1, 2}")
    chosen = tuple(value)
    if not chosen:
        raise UserError("session_types is empty: name at least one type, or pass None")
    for kind in chosen:
        if isinstance(kind, bool) or not isinstance(kind, int) or not -_INT32 <= kind < _INT32:
            raise UserError(f"a session type is a 32-bit integer, not {kind!r}")
    return tuple(sorted(set(chosen)))


def check_options(
    *,
    older_than: timedelta | datetime | None,
    keep_last: int | None,
    session_types: Iterable[int] | None,
    checkpoints_older_than: timedelta | datetime | None,
    batch_size: int,
    include_resumable: bool,
    unlinked_runs: str,
) -> PruneOptions:
    """Every option checked before anything is read: a refused prune changes nothing."""
    now = datetime.now(UTC)
    if keep_last is not None and (
        isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0
    ):
        raise UserError(f"keep_last is an integer of 0 or more, not {keep_last!r}")
    if keep_last is not None:
        keep_last = min(keep_last, _MOST_ROWS)  # keeping more than can exist keeps all
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise UserError(f"batch_size is an integer, not {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH:
        raise UserError(f"batch_size is between 1 and {MAX_BATCH}, not {batch_size}")
    if unlinked_runs not in ("block", "ignore"):
        raise UserError(f"unlinked_runs is 'block' or 'ignore', not {unlinked_runs!r}")
    options = PruneOptions(
        session_cut=_cut(older_than, "older_than", now),
        keep_last=keep_last,
        session_types=_types(session_types),
        checkpoint_cut=_cut(checkpoints_older_than, "checkpoints_older_than", now),
        batch_size=batch_size,
        include_resumable=_flag(include_resumable, "include_resumable"),
        unlinked_runs="block" if unlinked_runs == "block" else "ignore",
    )
    if not options.prunes_sessions and options.checkpoint_cut is None:
        raise UserError(
            "prune needs a criterion: older_than, keep_last, session_types or "
            "checkpoints_older_than"
        )
    return options


async def prune(
    target: Any,
    *,
    checkpointer: Any = None,
    older_than: timedelta | datetime | None = None,
    keep_last: int | None = None,
    session_types: Iterable[int] | None = None,
    checkpoints_older_than: timedelta | datetime | None = None,
    dry_run: bool = False,
    batch_size: int = 500,
    include_resumable: bool = False,
    unlinked_runs: UnlinkedRuns = "block",
    vacuum: bool = False,
    tenant: str | None = None,
    all_tenants: bool = False,
) -> PruneReport:
    """Delete old sessions and finished checkpoints; see docs/operations.md#retention.

    ``target`` is a database (URL, SQLite path, ``Database``, engine) or a store
    on one (its database is borrowed), or an ``InMemorySession`` with its
    ``InMemoryCheckpointer`` (of the same tenant) as ``checkpointer``.

    One tenant is pruned: ``tenant``, else the store's (or the Database's: the
    default tenant ``""`` unless one was given); ``all_tenants=True`` prunes every
    tenant, one after another, each by the same criteria (``keep_last`` keeps that
    many sessions of each).

    A session goes when every session criterion given holds: of a type in
    ``session_types``, last active (``updated_at``) before ``older_than`` (a
    timedelta back from now, or an aware datetime), and not among the
    ``keep_last`` most recently active of those types; its Raw Log, segments,
    snapshots and the checkpoints of its runs go with it. A checkpoint goes when
    its run is completed or failed and last written before
    ``checkpoints_older_than``, with its entries, tool effects and an expired
    lease. A run that is running or interrupted keeps its checkpoint and its
    session unless ``include_resumable``; a run whose lease is live is never
    touched, whatever the options (its worker is executing it now).

    ``dry_run`` deletes nothing and reports what would go. At most
    ``batch_size`` sessions (or runs) are deleted per transaction. ``vacuum``
    rewrites a SQLite file to hand the freed pages back (``VACUUM``: it takes
    the whole file for its duration); a file created with
    ``auto_vacuum=INCREMENTAL`` is trimmed after every prune anyway.
    """
    options = check_options(
        older_than=older_than,
        keep_last=keep_last,
        session_types=session_types,
        checkpoints_older_than=checkpoints_older_than,
        batch_size=batch_size,
        include_resumable=include_resumable,
        unlinked_runs=unlinked_runs,
    )
    dry = _flag(dry_run, "dry_run")
    full_vacuum = _flag(vacuum, "vacuum")
    from ..sessions.memory import InMemorySession

    if isinstance(target, InMemorySession):
        from .prune_memory import prune_memory

        own = getattr(target, "tenant", DEFAULT_TENANT)
        scope = scope_of(tenant, all_tenants, own)
        if scope is not None and scope != own:
            raise UserError(
                f"this InMemorySession holds tenant {own!r} only, not {scope!r}: prune "
                "the in-memory stores of that tenant"
            )
        theirs = getattr(checkpointer, "tenant", own)
        if theirs != own:  # its runs would be judged (and deleted) by this tenant's ids
            raise UserError(
                f"the checkpointer holds tenant {theirs!r}, this InMemorySession tenant "
                f"{own!r}: prune each tenant's in-memory stores together"
            )
        report = await prune_memory(target, checkpointer, options, dry_run=dry)
        report.tenant = own
        return report
    if checkpointer is not None:
        raise UserError(
            "checkpointer= is for an InMemorySession; on a database, sessions and "
            "checkpoints share it"
        )
    database, owned = _database_of(target)
    refuse_row_level_security(database)
    try:
        from .prune_sql import prune_database, reclaim_space

        own = getattr(target, "tenant", None)
        scope = scope_of(tenant, all_tenants, own if isinstance(own, str) else database.tenant)
        report = await prune_database(database, options, scope, dry_run=dry)
        if not dry:
            report.vacuum = await reclaim_space(database, full=full_vacuum)
        return report
    finally:
        if owned:
            await database.close()


def _database_of(target: Any) -> tuple[Database, bool]:
    database = getattr(target, "database", None)
    if isinstance(database, Database):
        return database, False
    if isinstance(target, Database):
        return target, False
    return as_database(target)
