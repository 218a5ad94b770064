"""``prune``: retention from the command line, over ``lovia_store.lifecycle.prune``.

It first walks the selection as a dry run and shows what would go; then, unless
``--dry-run``, asks before deleting (``--yes`` skips the question) and prints
what the real run deleted, which differs from the list only where writers
changed the database in between (a session appended to meanwhile stays).
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from ..db.database import Database
from ..lifecycle.retention import MAX_BATCH, PruneReport, prune
from .options import (
    MAX_COUNT,
    URL_HELP,
    default_url,
    json_option,
    schema_option,
    selected_tenants,
    tenant_options,
    url_argument,
)
from .output import Output, printable

__all__ = ["prune_command"]

# Only units that cannot be misread: "m" could be minutes or months, so it is refused.
_UNITS = {"s": "seconds", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_DURATION = re.compile(r"(\d+)(min|s|h|d|w)")


class Age(click.ParamType[timedelta | datetime]):
    """A duration back from now (``30d``, ``12h``, ``1w2d``) or an ISO 8601 time with offset."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta | datetime):
            return value
        text = str(value).strip()
        if text and _DURATION.sub("", text) == "":
            parts = dict.fromkeys(_UNITS.values(), 0.0)
            for amount, unit in _DURATION.findall(text):
                parts[_UNITS[unit]] += int(amount)
            try:
                return timedelta(**parts)
            except OverflowError:
                self.fail(f"{text!r} reaches back further than any date", param)
        if re.fullmatch(r"(\d+[a-z]+)+", text) and re.search(r"\d+(m|mo|month|months)(\d|$)", text):
            self.fail(
                f"{text!r}: 'm' could mean minutes or months; write minutes as 'min' "
                "(90min) and months as days (180d)",
                param,
            )
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{text!r} is neither a duration (30d, 12h, 90min) nor an ISO time", param)
        if moment.tzinfo is None:
            self.fail(f"{text!r} has no UTC offset (add Z or +00:00)", param)
        return moment.astimezone(UTC)


def _cutoffs(sessions: timedelta | datetime | None, runs: timedelta | datetime | None) -> str:
    """The moments the prompt's ages stand for, so a misread unit shows before anything goes."""
    now = datetime.now(UTC)
    said = [
        f"{what} last active before {cut:%Y-%m-%d %H:%M} UTC"
        for what, age in (("sessions", sessions), ("checkpoints", runs))
        if age is not None
        for cut in [age if isinstance(age, datetime) else now - age]
    ]
    return f" ({'; '.join(said)})" if said else ""


def _lines(report: PruneReport, database: str) -> list[str]:
    verb = "would delete" if report.dry_run else "deleted"
    if report.tenant is None:
        lines = [
            f"{printable(database)}, every tenant: {verb} {len(report.sessions)} session(s) "
            f"and {len(report.runs)} checkpoint(s)"
        ]
        for name, mine in report.tenants.items():
            lines += [f"  {printable(repr(name))}: {line}" for line in _tenant_lines(mine)]
        if report.vacuum:
            lines.append(f"space reclaimed ({report.vacuum} vacuum)")
        return lines
    where = f", tenant {printable(repr(report.tenant))}" if report.tenant else ""
    lines = [
        f"{printable(database)}{where}: {verb} {len(report.sessions)} session(s) and "
        f"{len(report.runs)} checkpoint(s)",
        *_tenant_lines(report)[1:],
    ]
    if report.vacuum:
        lines.append(f"space reclaimed ({report.vacuum} vacuum)")
    return lines


def _tenant_lines(report: PruneReport) -> list[str]:
    """What a prune did in one tenant: the counts, then what it spared and why."""
    verb = "would delete" if report.dry_run else "deleted"
    lines = [f"{verb} {len(report.sessions)} session(s) and {len(report.runs)} checkpoint(s)"]
    if report.spared_sessions:
        lines.append(
            f"kept {len(report.spared_sessions)} session(s) a resumable or leased run "
            "will append to"
        )
    if report.blocking_runs:
        lines.append(
            f"no session pruned: {len(report.blocking_runs)} resumable or leased run(s) name "
            "no session and could append to any (finish or delete them, or pass "
            "--ignore-unlinked-runs): " + ", ".join(printable(r) for r in report.blocking_runs[:5])
        )
    return lines


@click.command("prune", short_help="Delete old sessions and finished checkpoints.", epilog=URL_HELP)
@url_argument
@schema_option
@click.option("--older-than", type=Age(), help="Sessions last active before this (30d, 12h).")
@click.option(
    "--keep-last",
    type=click.IntRange(0, MAX_COUNT),
    help="Keep the N most recently active sessions (of the --session-type given).",
)
@click.option(
    "--session-type",
    "session_types",
    type=int,
    multiple=True,
    help="Only sessions of this type (repeatable); alone, every session of the type.",
)
@click.option(
    "--checkpoints-older-than",
    type=Age(),
    help="Completed and failed checkpoints last written before this.",
)
@click.option(
    "--include-resumable",
    is_flag=True,
    help="Running and interrupted runs protect nothing (a live lease still does).",
)
@click.option(
    "--ignore-unlinked-runs",
    is_flag=True,
    help="Prune sessions even while runs that name no session can resume.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_BATCH),
    default=500,
    show_default=True,
    help="Sessions (or checkpoints) deleted per transaction.",
)
@click.option("--vacuum", is_flag=True, help="SQLite: VACUUM afterwards (rewrites the file).")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@tenant_options("to prune (--all-tenants: each by the same criteria)")
@json_option
@click.pass_obj
def prune_command(
    output: Output,
    url: str | None,
    schema: str | None,
    older_than: timedelta | datetime | None,
    keep_last: int | None,
    session_types: tuple[int, ...],
    checkpoints_older_than: timedelta | datetime | None,
    include_resumable: bool,
    ignore_unlinked_runs: bool,
    batch_size: int,
    vacuum: bool,
    dry_run: bool,
    yes: bool,
    tenant: str | None,
    all_tenants: bool,
    as_json: bool,
) -> int:
    """Delete sessions and finished checkpoints the criteria select (all must hold).

    A run that is running or interrupted keeps its checkpoint and its session,
    a leased run always does. Asks before deleting unless --yes or --dry-run.
    See docs/operations.md#retention.
    """
    output.json_mode = as_json
    tenant, all_tenants = selected_tenants(tenant, all_tenants)
    options: dict[str, Any] = {
        "tenant": tenant,
        "all_tenants": all_tenants,
        "older_than": older_than,
        "keep_last": keep_last,
        "session_types": session_types or None,
        "checkpoints_older_than": checkpoints_older_than,
        "batch_size": batch_size,
        "include_resumable": include_resumable,
        "unlinked_runs": "ignore" if ignore_unlinked_runs else "block",
    }

    async def run(dry: bool) -> tuple[PruneReport, str]:
        async with Database(url or default_url(), verify_only=True, schema=schema) as db:
            return await prune(db, dry_run=dry, vacuum=vacuum and not dry, **options), db.url

    report, database = asyncio.run(run(True))
    # With --yes the command runs even when nothing is selected (its --vacuum too); without
    # it, only once asked, so nothing selected after the question is deleted unasked.
    if not dry_run and (yes or report.sessions or report.runs):
        if not yes:
            for line in _lines(report, database):
                output.note(line)
            if not click.confirm(
                f"delete them?{_cutoffs(older_than, checkpoints_older_than)}", err=True
            ):
                output.note("nothing deleted")
                return 0
        report, database = asyncio.run(run(False))
    if as_json:
        output.json({"status": "ok", "database": database, **report.as_dict()})
        return 0
    for line in _lines(report, database):
        output.print(line)
    if dry_run:
        chosen = report.tenants.items() if report.tenant is None else [("", report)]
        for name, mine in chosen:
            prefix = f"{printable(repr(name))} " if report.tenant is None else ""
            for session_id in mine.sessions:
                output.print(f"{prefix}session {printable(session_id)}")
            for run_id in mine.runs:
                output.print(f"{prefix}checkpoint {printable(run_id)}")
    return 0
