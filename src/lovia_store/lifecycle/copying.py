"""``copy_database``: a whole deployment from one database into another, verified.

The source's records (``reading``) are piped into the destination's loader
(``loading``), the next page read while the last is written, so memory stays
bounded whatever the size. The destination is brought to the current schema
first and must hold nothing the source does not: a row of its own, or one
that differs from the source's, is refused before anything is written. A copy
killed at any point is finished by running it again (the load is idempotent).
At the end both databases are read again, independently, and each session's
row counts and content digest compared (``verify``).

A copy moves one tenant (into the same tenant of the destination, which may hold
other tenants of its own) or every tenant, each into its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection

from ..db import progress as progress_
from ..db.database import Database
from ..upgrade import upgrade
from .loading import Loader, differing_columns, find_existing, key_of
from .reading import _rows, count_rows, read_records
from .records import KINDS, DestinationConflictError, Kind
from .targets import Scope, Target, opened, scope_of, tenant_filter
from .verify import Summary, Tally, summarize

__all__ = ["CopyReport", "SessionCheck", "copy_database"]

T = TypeVar("T")
_TOP_LEVEL = ("session", "run", "tool_effect", "run_lease")


@dataclass
class SessionCheck:
    """One session's tally on each side (None: missing there)."""

    session_id: str
    source: Tally | None
    destination: Tally | None
    tenant: str = ""

    @property
    def equal(self) -> bool:
        return (
            self.source is not None
            and self.destination is not None
            and self.source.counts == self.destination.counts
            and self.source.digest == self.destination.digest
        )


@dataclass
class CopyReport:
    """What a copy did and what its verification found."""

    source: str
    destination: str
    inserted: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)
    sessions: list[SessionCheck] = field(default_factory=list)
    checkpoints: tuple[Tally, Tally] | None = None
    seconds: float = 0.0
    tenant: str | None = ""
    """The tenant copied; None: every tenant."""

    @property
    def verified(self) -> bool:
        return self.checkpoints is not None

    @property
    def ok(self) -> bool:
        """Every session and the checkpoint side equal on both sides (False unverified)."""
        if self.checkpoints is None:
            return False
        source, destination = self.checkpoints
        same = source.counts == destination.counts and source.digest == destination.digest
        return same and all(check.equal for check in self.sessions)

    @property
    def differing(self) -> list[SessionCheck]:
        return [check for check in self.sessions if not check.equal]


async def copy_database(
    source: Target,
    destination: Target,
    *,
    progress: progress_.Reporter | None = None,
    verify: bool = True,
    tenant: str | None = None,
    all_tenants: bool = False,
) -> CopyReport:
    """Copy every session and run of ``source`` into ``destination`` and verify it.

    One tenant is copied, into the same tenant: ``tenant``, else the source
    Database's (the default tenant ``""`` unless it was opened with one);
    ``all_tenants=True`` copies every tenant, each into its own.

    ``source`` is never written (and never migrated: one that needs ``lovia-store
    upgrade`` is refused). ``destination`` is upgraded first; one holding a row of
    the tenants copied that the source lacks or holds differently is refused with
    ``DestinationConflictError`` (other tenants' rows are no concern of the copy).
    ``progress(task, done, total)`` hears the sessions and messages copied.
    """
    report_progress = progress or progress_.current()
    started = time.monotonic()
    async with (
        opened(source, verify_only=True) as src,
        opened(destination, verify_only=False) as dst,
    ):
        scope = scope_of(tenant, all_tenants, src.tenant)
        await src.ensure_schema()
        await upgrade(dst)
        report = CopyReport(source=src.url, destination=dst.url, tenant=scope)
        await _refuse_foreign(src, dst, scope)
        totals = await count_rows(src, ["session", "message"], scope)
        loader = Loader(dst)
        done: Counter[str] = Counter()
        async for record in _prefetched(read_records(src, scope)):
            await loader.add(record)
            if record.kind in totals and report_progress is not None:
                done[record.kind] += 1
                if record.kind == "session" or done[record.kind] % 500 == 0:
                    report_progress(f"{record.kind}s", done[record.kind], totals[record.kind])
        await loader.flush()
        if report_progress is not None:
            for kind, total in totals.items():
                report_progress(f"{kind}s", done[kind], max(total, done[kind]))
        report.inserted, report.unchanged = loader.counts.inserted, loader.counts.unchanged
        if verify:
            if report_progress is not None:
                report_progress("verifying", 0, None)
            mine, theirs = await asyncio.gather(
                summarize(src, tenant=scope, all_tenants=scope is None),
                summarize(dst, tenant=scope, all_tenants=scope is None),
            )
            _compare(report, mine, theirs)
    report.seconds = time.monotonic() - started
    return report


def _compare(report: CopyReport, source: Summary, destination: Summary) -> None:
    keys = sorted(set(source.tallies) | set(destination.tallies))
    report.sessions = [
        SessionCheck(sid, source.tallies.get((t, sid)), destination.tallies.get((t, sid)), t)
        for t, sid in keys
    ]
    report.checkpoints = (source.checkpoints, destination.checkpoints)


async def _refuse_foreign(src: Database, dst: Database, tenant: Scope) -> None:
    """Refuse a destination holding a top-level row of the tenants copied that the
    source lacks or holds otherwise."""
    for name in _TOP_LEVEL:
        kind = KINDS[name]
        page: list[dict[str, Any]] = []
        async for row in _rows(dst, name, tenant_filter(kind.table, tenant), size=500):
            page.append(row)
            if len(page) == 500:
                await _check_page(src, kind, page)
                page = []
        if page:
            await _check_page(src, kind, page)


async def _check_page(src: Database, kind: Kind, rows: list[dict[str, Any]]) -> None:
    def work(conn: Connection) -> dict[tuple[Any, ...], dict[str, Any]]:
        return find_existing(conn, kind, (key_of(kind, row) for row in rows))

    theirs = await src.read(work)
    for row in rows:
        key = key_of(kind, row)
        shown = dict(zip(kind.key, key, strict=True))
        stored = theirs.get(key)
        if stored is None:
            raise DestinationConflictError(
                kind=kind.name, key=shown, line=None, detail="the source has none: not a copy of it"
            )
        differ = differing_columns(stored, row)
        if differ:
            raise DestinationConflictError(
                kind=kind.name,
                key=shown,
                line=None,
                detail=f"{', '.join(differ)} differ from the source's (it changed since "
                "the last copy, or the destination is another deployment)",
            )


async def _prefetched(source: AsyncIterator[T], depth: int = 4000) -> AsyncIterator[T]:
    """``source``'s items, read ahead by up to ``depth`` in a task of their own, so the
    source is read while the destination is written."""
    queue: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue(maxsize=depth)

    async def produce() -> None:
        try:
            async for item in source:
                await queue.put((True, item))
            await queue.put((False, None))
        except Exception as exc:  # handed to the consumer, raised there
            await queue.put((False, exc))

    task = asyncio.create_task(produce())
    try:
        while True:
            more, item = await queue.get()
            if not more:
                if item is not None:
                    raise item
                break
            yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
