"""``upgrade`` and ``check``: bring a database to the current schema, or only ask."""

from __future__ import annotations

import asyncio
import warnings

import click

from ..db.database import Database
from ..db.schema import head_revision
from ..errors import ConversionWarning, CounterMismatchError
from ..lifecycle.counters import counter_mismatches
from ..upgrade import UpgradeReport, check, upgrade
from .options import (
    URL_HELP,
    default_url,
    json_option,
    schema_option,
    shown,
    tenant_options,
    url_argument,
)
from .output import Output, printable

__all__ = ["check_command", "upgrade_command"]


def report_document(report: UpgradeReport) -> dict[str, object]:
    return {
        "status": "ok",
        "database": report.database,
        "changed": report.changed,
        "from_revision": report.from_revision,
        "to_revision": report.to_revision,
        "converted": report.converted,
        "backup": None if report.backup is None else str(report.backup),
    }


def report_lines(report: UpgradeReport) -> list[str]:
    """What the upgrade did: the revisions it went between, what it converted, the copy kept."""
    database = printable(report.database)
    if not report.changed:
        return [f"{database}: schema is current (revision {report.to_revision}), no change"]
    start = report.from_revision or "none (no lovia-store schema yet)"
    lines = [f"{database}: upgraded from revision {start} to {report.to_revision}"]
    lines += [
        f"converted {owner}'s tables: {', '.join(t)}" for owner, t in report.converted.items()
    ]
    if report.backup is not None:
        lines.append(f"the original file is kept at {printable(str(report.backup))}")
    return lines


@click.command("upgrade", short_help="Bring a database to the current schema.", epilog=URL_HELP)
@url_argument
@schema_option
@click.option(
    "--backup-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for the copy kept before converting a lovia 0.9 or zett-agent file "
    "(default: beside the file).",
)
@click.option(
    "--no-backup",
    is_flag=True,
    help="Convert without keeping a copy (you keep backups of your own); needed to "
    "convert a server database, which cannot be copied from here.",
)
@click.option(
    "--adopt-lovia",
    is_flag=True,
    help="Convert tables shaped like lovia 0.9's that the file does not prove are "
    "lovia's (what a LegacyTableError names), as lovia's history.",
)
@json_option
@click.pass_obj
def upgrade_command(
    output: Output,
    url: str | None,
    schema: str | None,
    backup_dir: str | None,
    no_backup: bool,
    adopt_lovia: bool,
    as_json: bool,
) -> int:
    """Bring the database at URL to the current schema, creating it if needed.

    A file that lovia 0.9 or zett-agent wrote is converted, and a copy of it is
    kept first. Prints what it did: the revisions it went between, what it
    converted, where the copy went.
    """
    output.json_mode = as_json
    if backup_dir is not None and no_backup:
        raise click.UsageError("--backup-dir and --no-backup exclude each other")
    target = url or default_url()
    legacy_backup: bool | str = False if no_backup else (backup_dir or True)
    with output.progress(f"upgrading {shown(target)}"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConversionWarning)  # the report below says it
        report = asyncio.run(
            upgrade(target, schema=schema, legacy_backup=legacy_backup, adopt_lovia=adopt_lovia)
        )
    if as_json:
        output.json(report_document(report))
    else:
        for line in report_lines(report):
            output.print(line)
    return 0


@click.command(
    "check",
    short_help="Exit 0 if a database is current and its counters true; never writes.",
    epilog=URL_HELP,
)
@url_argument
@schema_option
@tenant_options("whose counters to check", all_tenants=False, envvar=False, default="every tenant")
@json_option
@click.pass_obj
def check_command(
    output: Output, url: str | None, schema: str | None, tenant: str | None, as_json: bool
) -> int:
    """Exit 0 if the database at URL is at the current schema, else say why; never writes.

    For a readiness probe: 1 means it needs `lovia-store upgrade`, 3 that it cannot
    be reached (or is not a database), 4 that a newer lovia-store wrote it, 5 that
    a session's or run's stored counters disagree with its rows, or a shared value's
    reference count with the documents that name it (each is named, with its
    tenant). Every tenant's counters are checked, or --tenant's only.
    """
    output.json_mode = as_json

    async def verify() -> str:
        async with Database(url or default_url(), verify_only=True, schema=schema) as db:
            await check(db)
            mismatches = await counter_mismatches(db, tenant=tenant, all_tenants=tenant is None)
            if mismatches:
                raise CounterMismatchError(database=db.url, mismatches=mismatches)
            return db.url

    database = asyncio.run(verify())
    if as_json:
        output.json({"status": "current", "database": database, "revision": head_revision()})
    else:
        output.print("schema is current")
    return 0
