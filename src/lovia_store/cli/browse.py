"""``sessions`` and ``show``: a read-only look at what a database holds.

Looking is not migrating: both open the database ``verify_only``, so an old
database is reported (exit 1), never converted.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import click
from rich import box
from rich.table import Table
from sqlalchemy import Connection, func, select

from ..db.database import Database
from ..db.tables import session_runs, sessions
from ..entries import entry_to_dict
from ..sessions.contract import Segment
from ..sessions.sql import SQLSession
from .options import (
    URL_HELP,
    default_url,
    json_option,
    key_options,
    paging_options,
    schema_option,
    selected_tenants,
    stored,
    tenant_options,
    url_argument,
)
from .output import Output, printable
from .transcript import describe

__all__ = ["sessions_command", "show_command"]


async def _session_page(
    db: Database, tenant: str | None, limit: int, offset: int
) -> tuple[int, list[Any]]:
    """(how many sessions ``tenant`` has, one page of them: newest activity first);
    ``tenant`` None: of every tenant."""
    runs = (
        select(func.count())
        .where(
            session_runs.c.tenant == sessions.c.tenant,
            session_runs.c.session_id == sessions.c.session_id,
        )
        .scalar_subquery()
    )
    mine = [] if tenant is None else [sessions.c.tenant == tenant]
    query = (
        select(
            sessions.c.tenant,
            sessions.c.session_id,
            runs,
            sessions.c.message_count,
            sessions.c.updated_at,
        )
        .where(*mine)
        .order_by(sessions.c.updated_at.desc(), sessions.c.tenant, sessions.c.session_id)
    )
    query = query.offset(offset) if limit == 0 else query.limit(limit).offset(offset)
    total = select(func.count()).select_from(sessions).where(*mine)

    def work(conn: Connection) -> tuple[int, list[Any]]:
        return int(conn.execute(total).scalar_one()), list(conn.execute(query).all())

    return await db.read(work, stale=True)


def _page_note(what: str, offset: int, shown: int, total: int) -> str | None:
    """Where a page sits in the whole listing, when it is not the whole listing."""
    if shown == total:
        return None
    if shown == 0:
        return f"no {what} at offset {offset} (there are {total})"
    note = f"{what} {offset + 1}-{offset + shown} of {total}"
    if offset + shown < total:
        note += f"; the next page: --offset {offset + shown} (--limit 0 prints all)"
    return note


def _sessions_table(rows: list[Any], every: bool) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    if every:
        table.add_column("tenant", overflow="fold")
    table.add_column("session", overflow="fold")
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("entries", justify="right", no_wrap=True)
    table.add_column("last activity (UTC)", no_wrap=True)
    for tenant, session_id, runs, entries, updated_at in rows:
        table.add_row(
            *((printable(repr(tenant)),) if every else ()),
            printable(session_id),
            str(runs),
            str(entries),
            f"{updated_at:%Y-%m-%d %H:%M:%S}",
        )
    return table


@click.command(
    "sessions", short_help="List sessions with their run and entry counts.", epilog=URL_HELP
)
@url_argument
@schema_option
@paging_options("sessions", default_limit=100)
@tenant_options("whose sessions to list")
@json_option
@click.pass_obj
def sessions_command(
    output: Output,
    url: str | None,
    schema: str | None,
    limit: int,
    offset: int,
    tenant: str | None,
    all_tenants: bool,
    as_json: bool,
) -> int:
    """List the sessions at URL with their run and entry counts, newest activity first.

    Those of one tenant (--tenant, else the default tenant), or of every tenant,
    each named with its tenant, with --all-tenants."""
    output.json_mode = as_json
    tenant, all_tenants = selected_tenants(tenant, all_tenants)
    scope = None if all_tenants else (tenant or "")

    async def read() -> tuple[str, int, list[Any]]:
        async with Database(url or default_url(), verify_only=True, schema=schema) as db:
            return (db.url, *await _session_page(db, scope, limit, offset))

    database, total, rows = asyncio.run(read())
    if as_json:
        listed = [
            {"tenant": t, "session_id": s, "runs": r, "entries": e, "updated_at": _utc(u)}
            for t, s, r, e, u in rows
        ]
        output.json(
            {
                "database": database,
                "tenant": scope,
                "total": total,
                "offset": offset,
                "sessions": listed,
            }
        )
        return 0
    if total == 0:
        where = "" if scope == "" else f" ({'every tenant' if scope is None else repr(scope)})"
        output.print(f"no sessions in {printable(database)}{printable(where)}")
        return 0
    if rows:
        output.table(_sessions_table(rows, every=scope is None))
    note = _page_note("sessions", offset, len(rows), total)
    if note is not None:
        output.note(note)
    return 0


def _utc(moment: datetime) -> str:
    return moment.isoformat()


def _took(segment: Segment) -> str:
    timing = (segment.meta or {}).get("timing")
    if not isinstance(timing, dict):
        return ""
    started, finished = timing.get("started_at"), timing.get("finished_at")
    if isinstance(started, int | float) and isinstance(finished, int | float):
        return f"  ({finished - started:.2f}s)"
    return ""


@click.command("show", short_help="Print one session's transcript, run by run.", epilog=URL_HELP)
@click.argument("session_id")
@url_argument
@schema_option
@paging_options("runs", default_limit=0)
@tenant_options("whose session to show", all_tenants=False)
@key_options()
@json_option
@click.pass_obj
def show_command(
    output: Output,
    session_id: str,
    url: str | None,
    schema: str | None,
    limit: int,
    offset: int,
    tenant: str | None,
    encryption_key: tuple[str, ...],
    as_json: bool,
) -> int:
    """Print the transcript of SESSION_ID at URL, run by run, oldest first.

    SESSION_ID is a session of one tenant (--tenant, else the default tenant).
    Exits 1 if there is no such session. Stored documents are decoded (decompressed,
    and decrypted with --encryption-key: without the key they were encrypted with,
    the command fails naming the row, exit 5).
    """
    output.json_mode = as_json
    tenant = tenant or ""
    options = stored(encryption_key)

    async def read() -> tuple[str, list[Segment]]:
        async with Database(url or default_url(), verify_only=True, schema=schema, **options) as db:
            return db.url, await SQLSession(db, tenant=tenant).segments(session_id)

    database, segments = asyncio.run(read())
    page = segments[offset : offset + limit] if limit else segments[offset:]
    if as_json:
        runs = [
            {
                "number": offset + number,
                "run_id": s.run_id,
                "meta": s.meta,
                "entries": [entry_to_dict(e) for e in s.entries],
            }
            for number, s in enumerate(page, start=1)
        ]
        output.json(
            {
                "database": database,
                "tenant": tenant,
                "session_id": session_id,
                "total_runs": len(segments),
                "offset": offset,
                "runs": runs,
            }
        )
        return 0 if segments else 1
    if not segments:
        where = f" (tenant {tenant!r})" if tenant else ""
        output.print(
            f"no session {printable(repr(session_id))} in {printable(database)}{printable(where)}"
        )
        return 1
    for number, segment in enumerate(page, start=offset + 1):
        header = f"── run {number}: {printable(segment.run_id)}{_took(segment)}"
        output.print(header, style="bold")
        for entry in segment.entries:
            output.print("  " + describe(entry))
    note = _page_note("runs", offset, len(page), len(segments))
    if note is not None:
        output.note(note)
    return 0
