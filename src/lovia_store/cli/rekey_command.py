"""``rekey``: every stored document written again as the options say, over
``lovia_store.lifecycle.rekey``: keys rotated, encryption turned on or off,
compression turned on, or plain JSON text back (before a downgrade below 0010).
"""

from __future__ import annotations

import asyncio

import click

from ..db.database import Database
from ..lifecycle.rekeying import MAX_BATCH, RekeyReport, rekey
from .options import (
    URL_HELP,
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

__all__ = ["rekey_command"]


def _lines(report: RekeyReport) -> list[str]:
    scope = (
        ", every tenant"
        if report.tenant is None
        else (f", tenant {printable(repr(report.tenant))}" if report.tenant else "")
    )
    lines = [
        f"{printable(report.database)}{scope}: rewrote {report.rows:,} row(s) in "
        f"{report.batches:,} transaction(s), {report.seconds:.1f} s"
    ]
    lines += [
        f"  {name}: {count:,}" for name, count in report.as_dict()["rewritten"].items() if count
    ]
    if not report.rows:
        lines.append("every stored document was already as the options say")
    if report.vacuum:
        lines.append(f"file rewritten ({report.vacuum} vacuum)")
    return lines


@click.command(
    "rekey",
    short_help="Re-encode every stored document: rotate keys, encrypt, decrypt.",
    epilog=URL_HELP,
)
@url_argument
@schema_option
@key_options(compression=True, decryption=True)
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_BATCH),
    default=500,
    show_default=True,
    help="Rows rewritten per transaction.",
)
@click.option(
    "--vacuum",
    is_flag=True,
    help="SQLite: VACUUM afterwards, so nothing replaced (clear text) is left in free pages.",
)
@tenant_options("to rekey")
@json_option
@click.pass_obj
def rekey_command(
    output: Output,
    url: str | None,
    schema: str | None,
    encryption_key: tuple[str, ...],
    no_compression: bool,
    decryption_key: tuple[str, ...],
    batch_size: int,
    vacuum: bool,
    tenant: str | None,
    all_tenants: bool,
    as_json: bool,
) -> int:
    """Write every stored document at URL again as the options say.

    \b
    Rotate keys: --encryption-key NEW --encryption-key OLD (the first encrypts);
      afterwards OLD can go.
    Encrypt rows written in clear: --encryption-key KEY.
    Decrypt everything: --decryption-key OLD (no --encryption-key).
    Plain JSON text back (what a downgrade below revision 0010 needs):
      --no-compression, with no --encryption-key.

    Without --no-compression, long documents stored as plain text are compressed
    (and their long values stored once). In batches, one transaction each: killed,
    it is finished by running it again, which skips what is done. One tenant
    (--tenant, else the default tenant), or every tenant with --all-tenants. On
    SQLite, --vacuum leaves nothing of what was replaced in the file.
    """
    output.json_mode = as_json
    target = url or default_url()
    tenant, all_tenants = selected_tenants(tenant, all_tenants)
    options = stored(encryption_key, no_compression)

    async def run() -> RekeyReport:
        async with Database(target, verify_only=True, schema=schema, **options) as db:
            return await rekey(
                db,
                decryption_keys=list(decryption_key) or None,
                tenant=tenant,
                all_tenants=all_tenants,
                batch_size=batch_size,
                vacuum=vacuum,
            )

    with output.progress(f"rekeying {shown(target)}"):
        report = asyncio.run(run())
    if as_json:
        output.json({"status": "ok", **report.as_dict()})
    else:
        for line in _lines(report):
            output.print(line)
    return 0
