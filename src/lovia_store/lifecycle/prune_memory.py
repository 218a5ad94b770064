"""``prune`` on the in-memory stores: the SQL walk's rules over their dicts.

An ``InMemorySession`` keeps no session type: every session is of type 0, as
a lovia session stored in SQL is. Runs are known only through the
``InMemoryCheckpointer`` passed beside it; without one, no run protects
anything (there is none to know of).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..checkpoints.memory import InMemoryCheckpointer, RunState
from ..errors import UserError
from ..sessions.memory import InMemorySession
from .prune_sql import REPORTED_BLOCKERS, RESUMABLE, checkpoint_statuses
from .retention import PruneOptions, PruneReport

__all__ = ["prune_memory"]


def _holds(run: RunState, options: PruneOptions) -> bool:
    return run.leased or (not options.include_resumable and run.status in RESUMABLE)


def _candidates(activity: dict[str, datetime], options: PruneOptions) -> list[tuple[datetime, str]]:
    """The sessions the criteria select, oldest activity first."""
    scope = sorted((at, sid) for sid, at in activity.items())
    if options.session_types is not None and 0 not in options.session_types:
        return []
    if options.keep_last:
        if len(scope) < options.keep_last:
            return []
        scope = scope[: len(scope) - options.keep_last]
    cut = options.session_cut
    return [(at, sid) for at, sid in scope if cut is None or at < cut]


async def _states(checkpointer: InMemoryCheckpointer | None) -> list[RunState]:
    return [] if checkpointer is None else await checkpointer._run_states()


async def _prune_sessions(
    sessions: InMemorySession,
    checkpointer: InMemoryCheckpointer | None,
    options: PruneOptions,
    report: PruneReport,
    dry_run: bool,
) -> None:
    runs = await _states(checkpointer)
    if options.unlinked_runs == "block":
        blockers = sorted(r.run_id for r in runs if r.session_id is None and _holds(r, options))
        report.blocking_runs = blockers[:REPORTED_BLOCKERS]
        if blockers:
            return
    candidates = _candidates(await sessions._activity(), options)
    size = options.batch_size
    for start in range(0, len(candidates), size):
        batch = candidates[start : start + size]
        spared = {r.session_id for r in runs if r.session_id is not None and _holds(r, options)}
        report.spared_sessions += [sid for _, sid in batch if sid in spared]
        doomed = [(at, sid) for at, sid in batch if sid not in spared]
        if dry_run:
            chosen = {sid for _, sid in doomed}
            report.sessions += [sid for _, sid in doomed]
            report.runs += sorted(r.run_id for r in runs if r.session_id in chosen and not r.leased)
            continue
        gone = [sid for at, sid in doomed if await sessions._clear_unchanged(sid, at)]
        report.sessions += gone
        runs = await _states(checkpointer)
        linked = sorted(
            (r for r in runs if r.session_id in set(gone) and not r.leased and r.updated_at),
            key=lambda r: r.run_id,
        )
        for run in linked:
            assert checkpointer is not None and run.updated_at is not None and run.status
            if await checkpointer._delete_unchanged(run.run_id, run.updated_at, (run.status,)):
                report.runs.append(run.run_id)
        runs = await _states(checkpointer)


async def _prune_checkpoints(
    checkpointer: InMemoryCheckpointer | None,
    options: PruneOptions,
    report: PruneReport,
    dry_run: bool,
) -> None:
    if checkpointer is None:
        return
    cut = options.checkpoint_cut
    assert cut is not None
    statuses = checkpoint_statuses(options)
    listed = set(report.runs)
    chosen = sorted(
        (statuses.index(r.status), r.updated_at, r.run_id)
        for r in await _states(checkpointer)
        if r.status in statuses
        and r.updated_at is not None
        and r.updated_at < cut
        and not r.leased
        and r.run_id not in listed
    )
    for _, at, run_id in chosen:
        if dry_run or await checkpointer._delete_unchanged(run_id, at, statuses):
            report.runs.append(run_id)


async def prune_memory(
    sessions: InMemorySession, checkpointer: Any, options: PruneOptions, *, dry_run: bool
) -> PruneReport:
    if checkpointer is not None and not isinstance(checkpointer, InMemoryCheckpointer):
        raise UserError(
            "an InMemorySession is pruned with its InMemoryCheckpointer (or none), "
            f"not a {type(checkpointer).__name__}"
        )
    report = PruneReport(dry_run=dry_run)
    if options.prunes_sessions:
        await _prune_sessions(sessions, checkpointer, options, report, dry_run)
    if options.checkpoint_cut is not None:
        await _prune_checkpoints(checkpointer, options, report, dry_run)
    return report
