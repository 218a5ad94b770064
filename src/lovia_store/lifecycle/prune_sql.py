"""``prune`` on a SQL database: one selection walk for the dry run and the real run.

Sessions are walked oldest activity first, keyset-paged on ``(updated_at,
session_id)`` (the index ``lovia_sessions`` has), ``batch_size`` at a time;
each page, in a real run, is deleted in its own transaction, which first reads
the page's sessions again under a row lock with every criterion re-applied: a
session appended to since it was selected has a newer ``updated_at`` and
stays, and so does one a resumable run started to name. Finished checkpoints
are walked the same way on ``(updated_at, run_id)``, one status after another.
The transaction that deletes rows releases the references their documents made
to shared values (``stored.referencing``): a value nothing refers to goes with them.

A prune works on one tenant: every statement says ``tenant = :tenant`` and every
subquery matches the tenant as well as the id (a run protects only its own
tenant's sessions; a run of one tenant naming no session blocks that tenant's
pruning only). A prune of every tenant is that, tenant after tenant, on the
tenants that have rows, each with its own ``keep_last`` and boundaries.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, exists, or_, select, true, union
from sqlalchemy.sql.elements import ColumnElement

from ..checkpoints.sql import delete_runs
from ..db.contents import release_documents
from ..db.database import Database
from ..db.dialect import db_clock_ms
from ..db.tables import (
    messages,
    run_heads,
    run_leases,
    session_runs,
    sessions,
    snapshots,
)
from ..errors import StoreBusyError, StoreUnavailableError
from .retention import PruneOptions, PruneReport
from .stored import referencing
from .targets import Scope

__all__ = ["prune_database", "reclaim_space"]

s = sessions.c
h = run_heads.c
le = run_leases.c
RESUMABLE = ("running", "interrupted")
FINISHED = ("completed", "failed")
VACUUM_WAIT = 30.0
"""Seconds a vacuum waits for other connections' locks on the file."""
REPORTED_BLOCKERS = 1000
"""At most this many blocking runs are named in a report (one is enough to block)."""


def _live_lease(tenant: Any, run_id: Any) -> ColumnElement[bool]:
    return exists().where(le.tenant == tenant, le.run_id == run_id, le.expires_ms > db_clock_ms())


def _holds(options: PruneOptions) -> ColumnElement[bool]:
    """A run head that protects what it names: resumable (unless told otherwise) or leased."""
    if options.include_resumable:
        return _live_lease(h.tenant, h.run_id)
    return or_(h.status.in_(RESUMABLE), _live_lease(h.tenant, h.run_id))


def _spared(options: PruneOptions) -> ColumnElement[bool]:
    """The session has a run (of its tenant) that will append to it."""
    return exists().where(h.tenant == s.tenant, h.session_id == s.session_id, _holds(options))


def _blockers(options: PruneOptions, tenant: str) -> Any:
    """The tenant's runs that can resume and name no session, and its live leases of
    runs with no head yet."""
    unlinked = select(h.run_id.label("run_id")).where(
        h.tenant == tenant, h.session_id.is_(None), _holds(options)
    )
    headless = select(le.run_id.label("run_id")).where(
        le.tenant == tenant,
        le.expires_ms > db_clock_ms(),
        ~exists().where(h.tenant == le.tenant, h.run_id == le.run_id),
    )
    return unlinked.union(headless)


def _after(columns: Sequence[Any], last: Sequence[Any] | None) -> ColumnElement[bool]:
    if last is None:
        return true()
    first, second = columns
    return or_(first > last[0], and_(first == last[0], second > last[1]))


def _boundary(conn: Connection, options: PruneOptions, tenant: str) -> tuple[datetime, str] | None:
    """The tenant's ``keep_last``-th most recently active session in scope (None: too few)."""
    assert options.keep_last
    query = select(s.updated_at, s.session_id).where(s.tenant == tenant)
    if options.session_types is not None:
        query = query.where(s.session_type.in_(options.session_types))
    query = query.order_by(s.updated_at.desc(), s.session_id.desc())
    row = conn.execute(query.offset(options.keep_last - 1).limit(1)).first()
    return None if row is None else (row.updated_at, row.session_id)


class _SessionCriteria:
    """The session criteria as SQL, fixed at the start of the walk."""

    def __init__(self, conn: Connection, options: PruneOptions, tenant: str) -> None:
        self.options = options
        self.tenant = tenant
        self.conditions: list[ColumnElement[bool]] = [s.tenant == tenant]
        self.empty = False
        if options.session_types is not None:
            self.conditions.append(s.session_type.in_(options.session_types))
        if options.session_cut is not None:
            self.conditions.append(s.updated_at < options.session_cut)
        if options.keep_last:
            boundary = _boundary(conn, options, tenant)
            if boundary is None:
                self.empty = True
            else:
                at, sid = boundary
                self.conditions.append(
                    or_(s.updated_at < at, and_(s.updated_at == at, s.session_id < sid))
                )


def _page(
    conn: Connection, criteria: _SessionCriteria, last: Sequence[Any] | None, size: int
) -> list[Any]:
    query = (
        select(s.session_id, s.updated_at, _spared(criteria.options).label("spared"))
        .where(*criteria.conditions, _after((s.updated_at, s.session_id), last))
        .order_by(s.updated_at, s.session_id)
        .limit(size)
    )
    return list(conn.execute(query).all())


def _linked_runs(
    conn: Connection, tenant: str, session_ids: Sequence[str], lock: bool = False
) -> list[str]:
    """The checkpoints a pruned session takes with it (any but a leased one)."""
    if not session_ids:
        return []
    query = (
        select(h.run_id)
        .where(h.tenant == tenant, h.session_id.in_(session_ids), ~_live_lease(h.tenant, h.run_id))
        .order_by(h.run_id)
    )
    return list(conn.execute(query.with_for_update() if lock else query).scalars())


def _delete_sessions(
    conn: Connection, criteria: _SessionCriteria, ids: Sequence[str], blocking: bool
) -> tuple[list[str], list[str]]:
    """Delete those of ``ids`` that still match, whole, with their runs' checkpoints."""
    tenant = criteria.tenant
    if blocking and conn.execute(_blockers(criteria.options, tenant).limit(1)).first() is not None:
        return [], []
    query = (
        select(s.session_id)
        .where(s.session_id.in_(ids), *criteria.conditions, ~_spared(criteria.options))
        .order_by(s.updated_at, s.session_id)
        .with_for_update()
    )
    still = list(conn.execute(query).scalars())
    if not still:
        return [], []
    runs = _linked_runs(conn, tenant, still, lock=True)
    released = referencing(conn, messages, tenant, [messages.c.session_id.in_(still)])
    for table in (messages, session_runs, snapshots, sessions):
        conn.execute(delete(table).where(table.c.tenant == tenant, table.c.session_id.in_(still)))
    _delete_runs(conn, tenant, runs, released)
    return still, runs


def _delete_runs(
    conn: Connection, tenant: str, run_ids: Sequence[str], released: list[str] | None = None
) -> None:
    """``delete_runs`` (which releases what the runs' entries and outcomes named), then
    the shared values ``released`` names, in the caller's transaction."""
    delete_runs(conn, tenant, run_ids)
    release_documents(conn, tenant, released or [])


def checkpoint_statuses(options: PruneOptions) -> tuple[str, ...]:
    """The statuses whose checkpoints age out, in the order they are walked."""
    return FINISHED + RESUMABLE if options.include_resumable else FINISHED


def _checkpoint_conditions(
    options: PruneOptions, tenant: str, statuses: Sequence[str]
) -> list[ColumnElement[bool]]:
    assert options.checkpoint_cut is not None
    return [
        h.tenant == tenant,
        h.status.in_(statuses),
        h.updated_at < options.checkpoint_cut,
        ~_live_lease(h.tenant, h.run_id),
    ]


def _checkpoint_page(
    conn: Connection, options: PruneOptions, tenant: str, status: str, last: Sequence[Any] | None
) -> list[Any]:
    """One status at a time: the ``(tenant, status, updated_at)`` index gives the order."""
    query = (
        select(h.run_id, h.updated_at)
        .where(
            *_checkpoint_conditions(options, tenant, [status]),
            _after((h.updated_at, h.run_id), last),
        )
        .order_by(h.updated_at, h.run_id)
        .limit(options.batch_size)
    )
    return list(conn.execute(query).all())


def _delete_checkpoints(
    conn: Connection, options: PruneOptions, tenant: str, ids: Sequence[str]
) -> list[str]:
    conditions = _checkpoint_conditions(options, tenant, checkpoint_statuses(options))
    query = (
        select(h.run_id)
        .where(h.run_id.in_(ids), *conditions)
        .order_by(h.updated_at, h.run_id)
        .with_for_update()
    )
    still = list(conn.execute(query).scalars())
    _delete_runs(conn, tenant, still)
    return still


async def _prune_sessions(
    db: Database, options: PruneOptions, tenant: str, report: PruneReport, dry_run: bool
) -> None:
    def start(conn: Connection) -> tuple[_SessionCriteria, list[str]]:
        blockers: list[str] = []
        if options.unlinked_runs == "block":
            query = _blockers(options, tenant).order_by("run_id").limit(REPORTED_BLOCKERS)
            blockers = list(conn.execute(query).scalars())
        return _SessionCriteria(conn, options, tenant), blockers

    criteria, report.blocking_runs = await db.read(start)
    if criteria.empty or report.blocking_runs:
        return
    blocking = options.unlinked_runs == "block"
    last: tuple[Any, Any] | None = None
    while True:

        def page(conn: Connection, after: Any = last) -> tuple[list[Any], list[str]]:
            rows = _page(conn, criteria, after, options.batch_size)
            doomed = [row.session_id for row in rows if not row.spared]
            return rows, (_linked_runs(conn, tenant, doomed) if dry_run else [])

        rows, runs = await db.read(page)
        if not rows:
            return
        report.spared_sessions += [row.session_id for row in rows if row.spared]
        doomed = [row.session_id for row in rows if not row.spared]
        if dry_run:
            report.sessions += doomed
            report.runs += runs
        elif doomed:

            def remove(conn: Connection, ids: list[str] = doomed) -> tuple[list[str], list[str]]:
                return _delete_sessions(conn, criteria, ids, blocking)

            gone, gone_runs = await db.write(remove)
            report.sessions += gone
            report.runs += gone_runs
        if len(rows) < options.batch_size:
            return
        last = (rows[-1].updated_at, rows[-1].session_id)


async def _prune_checkpoints(
    db: Database, options: PruneOptions, tenant: str, report: PruneReport, dry_run: bool
) -> None:
    listed = set(report.runs)  # a dry run's sessions' runs are still there
    for status in checkpoint_statuses(options):
        last: tuple[Any, Any] | None = None
        while True:

            def page(conn: Connection, after: Any = last, chosen: str = status) -> list[Any]:
                return _checkpoint_page(conn, options, tenant, chosen, after)

            rows = await db.read(page)
            ids = [row.run_id for row in rows if row.run_id not in listed]
            if dry_run:
                report.runs += ids
            elif ids:

                def remove(conn: Connection, chosen: list[str] = ids) -> list[str]:
                    return _delete_checkpoints(conn, options, tenant, chosen)

                report.runs += await db.write(remove)
            if len(rows) < options.batch_size:
                break
            last = (rows[-1].updated_at, rows[-1].run_id)


async def _prune_tenant(
    db: Database, options: PruneOptions, tenant: str, *, dry_run: bool
) -> PruneReport:
    report = PruneReport(dry_run=dry_run, tenant=tenant)
    if options.prunes_sessions:
        await _prune_sessions(db, options, tenant, report, dry_run)
    if options.checkpoint_cut is not None:
        await _prune_checkpoints(db, options, tenant, report, dry_run)
    return report


_TENANTS = union(select(s.tenant.label("tenant")), select(h.tenant), select(le.tenant)).order_by(
    "tenant"
)
"""Every tenant with a session, a run or a lease: what a prune of every tenant walks."""


async def prune_database(
    db: Database, options: PruneOptions, tenant: Scope, *, dry_run: bool
) -> PruneReport:
    """Prune ``tenant``, or (None) every tenant in turn, each reported on its own in
    ``PruneReport.tenants`` and summed in the lists (ids of several tenants)."""
    if tenant is not None:
        return await _prune_tenant(db, options, tenant, dry_run=dry_run)
    names: list[str] = await db.read(lambda conn: list(conn.execute(_TENANTS).scalars()))
    report = PruneReport(dry_run=dry_run, tenant=None)
    for name in names:
        mine = await _prune_tenant(db, options, name, dry_run=dry_run)
        report.tenants[name] = mine
        report.sessions += mine.sessions
        report.runs += mine.runs
        report.spared_sessions += mine.spared_sessions
        report.blocking_runs += mine.blocking_runs
    return report


def _reclaim(path: str, full: bool, timeout: float) -> str | None:
    try:
        return _vacuum(path, full, timeout)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreBusyError(
                f"the prune is done, but VACUUM found the file busy for {timeout:.0f} s ({exc}): "
                "run it again with vacuum=True when writers are quieter",
                retry_safe=True,
            ) from exc
        raise StoreUnavailableError(f"the prune is done, but VACUUM failed: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"the prune is done, but VACUUM failed: {exc}") from exc


def _vacuum(path: str, full: bool, timeout: float) -> str | None:
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        if full:
            conn.execute("VACUUM")
            return "full"
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:  # INCREMENTAL
            # executescript steps the pragma to its end: execute() frees one page only.
            conn.executescript("PRAGMA incremental_vacuum;")
            return "incremental"
        return None
    finally:
        conn.close()


async def reclaim_space(db: Database, *, full: bool) -> str | None:
    """Hand a SQLite file's freed pages back: incrementally where the file allows,
    whole (``VACUUM``) when asked. The servers reuse freed space themselves."""
    path = db.sqlite_path
    if path is None:
        return None
    return await asyncio.to_thread(_reclaim, str(path), full, VACUUM_WAIT)
