"""``export``, ``import`` and ``copy``: a deployment's data out of, into and between databases.

Each is a thin layer over ``lovia_store.lifecycle``. ``copy`` ends with its
verification and exits 5 when it found a difference (a source written to while
it was copied: copy again).
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from ..db.database import Database
from ..lifecycle import (
    CopyReport,
    ExportReport,
    ImportReport,
    copy_database,
    export,
    import_file,
)
from ..lifecycle.records import KINDS
from .options import (
    URL_HELP,
    copy_key_options,
    copy_schema_options,
    default_url,
    json_option,
    key_options,
    schema_option,
    selected_tenants,
    shown,
    stored,
    tenant_options,
    url_argument,
)
from .output import Output, printable

__all__ = ["copy_command", "export_command", "import_command"]

FAILED = 5


def _counts(counter: Any) -> dict[str, int]:
    return {name: int(counter[name]) for name in KINDS}


def _summary(counter: Any) -> str:
    parts = [f"{counter[name]} {name}" for name in KINDS if counter[name]]
    return ", ".join(parts) or "nothing"


def _of(tenant: str | None) -> str:
    """Which tenants a line speaks of: nothing for the default tenant (as before tenants)."""
    if tenant is None:
        return " (every tenant)"
    return f" (tenant {printable(repr(tenant))})" if tenant else ""


@click.command(
    "export", short_help="Write sessions and runs to a JSON-lines file.", epilog=URL_HELP
)
@url_argument
@schema_option
@click.option(
    "--session",
    "session_ids",
    multiple=True,
    metavar="ID",
    help="Export this session (and the runs that append to it) only; repeatable. "
    "Default: everything.",
)
@click.option(
    "-o",
    "--output",
    "path",
    required=True,
    type=click.Path(dir_okay=False, writable=True),
    help="The file to write (gzip-compressed when it ends in .gz).",
)
@tenant_options("to export")
@key_options()
@json_option
@click.pass_obj
def export_command(
    output: Output,
    url: str | None,
    schema: str | None,
    session_ids: tuple[str, ...],
    path: str,
    tenant: str | None,
    all_tenants: bool,
    encryption_key: tuple[str, ...],
    as_json: bool,
) -> int:
    """Write the database at URL (or the sessions named) to FILE, one record per line.

    One tenant is written (--tenant, else the default tenant), or every tenant
    with --all-tenants; each record names its tenant. The format is documented in
    docs/operations.md; `lovia-store import` reads it. The database is only read
    (one that needs `lovia-store upgrade` is refused). Documents are written as
    plain JSON, decoded (and decrypted: --encryption-key) from how they are stored.
    """
    output.json_mode = as_json
    target = url or default_url()
    tenant, all_tenants = selected_tenants(tenant, all_tenants)
    options = stored(encryption_key)

    async def run() -> ExportReport:
        async with Database(target, verify_only=True, schema=schema, **options) as db:
            return await export(
                db,
                path,
                session_ids=session_ids or None,
                tenant=tenant,
                all_tenants=all_tenants,
            )

    with output.progress(f"exporting {shown(target)}"):
        report = asyncio.run(run())
    if as_json:
        output.json(
            {
                "status": "ok",
                "source": report.source,
                "tenant": report.tenant,
                "file": path,
                "records": _counts(report.counts),
            }
        )
    else:
        output.print(f"{printable(path)}: {_summary(report.counts)}{_of(report.tenant)}")
    return 0


@click.command("import", short_help="Load an export file into a database.", epilog=URL_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@url_argument
@schema_option
@click.option(
    "--dry-run", is_flag=True, help="Check every record against the database; write nothing."
)
@tenant_options(
    "to import into (the file's one tenant is renamed to it)",
    default="the default tenant, which must be the file's",
)
@key_options(compression=True)
@json_option
@click.pass_obj
def import_command(
    output: Output,
    file: str,
    url: str | None,
    schema: str | None,
    dry_run: bool,
    tenant: str | None,
    all_tenants: bool,
    encryption_key: tuple[str, ...],
    no_compression: bool,
    as_json: bool,
) -> int:
    """Load FILE (written by `lovia-store export`) into the database at URL.

    With --all-tenants each row goes into the tenant its record names. Otherwise
    FILE must hold one tenant, whose rows go into --tenant (renamed, if the file's
    is another), else into the default tenant, which must then be the file's.

    Idempotent: rows already there are left alone, so importing twice changes
    nothing. A malformed line, or a record that conflicts with a row already
    there, is refused before anything is written, naming the line.

    Documents are stored as the options say: compressed (unless --no-compression)
    and encrypted with the first --encryption-key given.
    """
    output.json_mode = as_json
    target = url or default_url()
    tenant, all_tenants = selected_tenants(tenant, all_tenants)
    options = stored(encryption_key, no_compression)

    async def run() -> ImportReport:
        async with Database(target, schema=schema, **options) as db:
            return await import_file(
                db, file, dry_run=dry_run, tenant=tenant, all_tenants=all_tenants
            )

    with output.progress(f"importing into {shown(target)}"):
        report = asyncio.run(run())
    if as_json:
        output.json(_import_document(report))
    else:
        verb = "would insert" if dry_run else "inserted"
        output.print(f"{verb} {_summary(report.inserted)}{_of(report.tenant)}")
        output.print(f"already there: {_summary(report.unchanged)}")
    return 0


def _import_document(report: ImportReport) -> dict[str, object]:
    return {
        "status": "ok",
        "destination": report.destination,
        "tenant": report.tenant,
        "dry_run": report.dry_run,
        "inserted": _counts(report.inserted),
        "unchanged": _counts(report.unchanged),
    }


@click.command("copy", short_help="Copy a whole deployment into another database.", epilog=URL_HELP)
@click.argument("source_url")
@click.argument("destination_url")
@copy_schema_options
@copy_key_options
@tenant_options("to copy (into the same tenant)")
@json_option
@click.pass_obj
def copy_command(
    output: Output,
    source_url: str,
    destination_url: str,
    source_schema: str | None,
    destination_schema: str | None,
    source_encryption_key: tuple[str, ...],
    destination_encryption_key: tuple[str, ...],
    no_compression: bool,
    tenant: str | None,
    all_tenants: bool,
    as_json: bool,
) -> int:
    """Copy every session and run from SOURCE_URL into DESTINATION_URL, then verify.

    One tenant is copied (--tenant, else the default tenant), or every tenant with
    --all-tenants, each into its own tenant of the destination.

    The destination is upgraded to the current schema first, and refused if it
    holds data the source does not. Killed, the copy is finished by running it
    again. Prints each session's row counts and content digest as read back from
    both databases; exits 5 if any differ. On PostgreSQL, --source-schema and
    --destination-schema name the schema that holds each side's tables.

    Documents are read as the source stores them (--source-encryption-key opens
    them) and stored as the destination options say: compressed unless
    --no-compression, encrypted with the first --destination-encryption-key.
    """
    output.json_mode = as_json
    tenant, all_tenants = selected_tenants(tenant, all_tenants)
    reading = stored(source_encryption_key)
    writing = stored(destination_encryption_key, no_compression)

    async def run() -> CopyReport:
        async with (
            Database(source_url, verify_only=True, schema=source_schema, **reading) as src,
            Database(destination_url, schema=destination_schema, **writing) as dst,
        ):
            return await copy_database(src, dst, tenant=tenant, all_tenants=all_tenants)

    with output.progress(f"copying {shown(source_url)} to {shown(destination_url)}"):
        report = asyncio.run(run())
    if as_json:
        output.json(_copy_document(report))
    else:
        for line in _copy_lines(report):
            output.print(line)
    return 0 if report.ok else FAILED


def _copy_document(report: CopyReport) -> dict[str, object]:
    checkpoints = report.checkpoints
    return {
        "status": "ok" if report.ok else "differs",
        "source": report.source,
        "destination": report.destination,
        "tenant": report.tenant,
        "seconds": round(report.seconds, 3),
        "inserted": _counts(report.inserted),
        "unchanged": _counts(report.unchanged),
        "sessions": [
            {
                "tenant": check.tenant,
                "session_id": check.session_id,
                "equal": check.equal,
                "source": None if check.source is None else _tally(check.source),
                "destination": None if check.destination is None else _tally(check.destination),
            }
            for check in report.sessions
        ],
        "checkpoints": None
        if checkpoints is None
        else {"source": _tally(checkpoints[0]), "destination": _tally(checkpoints[1])},
    }


def _tally(tally: Any) -> dict[str, object]:
    return {"counts": dict(tally.counts), "digest": tally.digest}


def _copy_lines(report: CopyReport) -> list[str]:
    lines = [
        f"copied {printable(report.source)} to {printable(report.destination)}"
        f"{_of(report.tenant)} in {report.seconds:.1f} s",
        f"inserted {_summary(report.inserted)}",
        f"already there: {_summary(report.unchanged)}",
        "verification (read back from both databases):",
    ]
    for check in report.sessions:
        tally = check.source or check.destination
        assert tally is not None
        counts = " ".join(f"{tally.counts[k]} {k}" for k in ("message", "segment", "snapshot"))
        mark = "ok" if check.equal else "DIFFERS"
        name = printable(check.session_id)
        if report.tenant is None:  # every tenant: the same id may be in two
            name = f"{printable(check.tenant)}/{name}" if check.tenant else f"/{name}"
        lines.append(f"  {mark:7} {name}  {counts}  {tally.digest[:16]}")
    if report.checkpoints is not None:
        source, destination = report.checkpoints
        same = source.counts == destination.counts and source.digest == destination.digest
        counts = " ".join(
            f"{source.counts[k]} {k}" for k in ("run", "run_entry", "tool_effect", "run_lease")
        )
        lines.append(
            f"  {'ok' if same else 'DIFFERS':7} checkpoints  {counts}  {source.digest[:16]}"
        )
    differing = len(report.differing)
    lines.append(
        "every session equal on both sides"
        if report.ok
        else f"{differing} session(s) differ: the source changed during the copy; run it again"
    )
    return lines
