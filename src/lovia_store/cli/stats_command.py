"""``stats``: what a database holds and how big it is, as tables or one JSON document.

Read-only, like ``sessions``: an old database is reported (exit 1), never converted.
"""

from __future__ import annotations

import asyncio

import click
from rich import box
from rich.table import Table

from ..db.database import Database
from ..lifecycle.stats import ContentStats, DatabaseStats, database_stats
from .options import (
    URL_HELP,
    default_url,
    json_option,
    schema_option,
    selected_tenants,
    tenant_options,
    url_argument,
)
from .output import Output, printable

__all__ = ["stats_command"]

MAX_TOP = 10_000


def _bytes(size: int) -> str:
    """``size`` in the largest binary unit that keeps it at or above 1 (exact below 1 KiB)."""
    if size < 1024:
        return f"{size} B"
    value, unit = float(size), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):  # noqa: B007 - the unit is what the loop ends on
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"


def _shared(contents: ContentStats) -> str:
    """The values stored once: how many, their stored size, the references to them."""
    if not contents.values:
        return "0"
    references = contents.references
    return (
        f"{contents.values:,} ({_bytes(contents.stored_bytes)} stored, "
        f"{references:,} reference{'' if references == 1 else 's'})"
    )


def _table(*columns: tuple[str, str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    return table


def _print(output: Output, stats: DatabaseStats) -> None:
    every = stats.tenant is None
    scope = "every tenant" if every else (f"tenant {stats.tenant!r}" if stats.tenant else "")
    shown = f", {printable(scope)}" if scope else ""
    output.print(f"{printable(stats.database)} ({stats.backend}{shown})", style="bold")
    summary = _table(("", "left"), ("", "right"))
    summary.show_header = False
    detail = ", ".join(f"{name} {_bytes(size)}" for name, size in stats.size_detail.items())
    for name, value in (
        ("sessions", f"{stats.sessions:,}"),
        ("messages", f"{stats.messages:,}"),
        ("runs in flight", f"{stats.runs_in_flight:,}"),
        ("finished runs", f"{stats.finished_runs:,}"),
        ("shared values", _shared(stats.contents)),
        ("database size", f"{_bytes(stats.size_bytes)} ({detail})"),
    ):
        summary.add_row(name, value)
    output.table(summary)
    if every and stats.tenants:
        output.print("")
        output.print("per tenant", style="bold")
        tenants = _table(
            ("tenant", "left"),
            ("sessions", "right"),
            ("messages", "right"),
            ("runs in flight", "right"),
            ("finished runs", "right"),
            ("shared values", "right"),
        )
        for t in stats.tenants:
            tenants.add_row(
                printable(repr(t.tenant)),
                f"{t.sessions:,}",
                f"{t.messages:,}",
                f"{t.runs_in_flight:,}",
                f"{t.finished_runs:,}",
                _shared(t.contents),
            )
        output.table(tenants)
    if stats.largest_sessions:
        output.print("")
        output.print("largest sessions", style="bold")
        sessions = _table(
            *((("tenant", "left"),) if every else ()),
            ("session", "left"),
            ("title", "left"),
            ("messages", "right"),
            ("last activity (UTC)", "left"),
        )
        for s in stats.largest_sessions:
            sessions.add_row(
                *((printable(repr(s.tenant)),) if every else ()),
                printable(s.session_id),
                printable(s.title or ""),
                f"{s.messages:,}",
                f"{s.updated_at:%Y-%m-%d %H:%M:%S}",
            )
        output.table(sessions)
    if stats.largest_tool_outputs:
        output.print("")
        output.print("largest tool outputs", style="bold")
        outputs = _table(
            *((("tenant", "left"),) if every else ()),
            ("session", "left"),
            ("sequence", "right"),
            ("call id", "left"),
            ("size", "right"),
        )
        for o in stats.largest_tool_outputs:
            outputs.add_row(
                *((printable(repr(o.tenant)),) if every else ()),
                printable(o.session_id),
                str(o.sequence),
                printable(o.call_id or ""),
                _bytes(o.bytes),
            )
        output.table(outputs)


@click.command(
    "stats",
    short_help="Counts, size, the largest sessions and tool outputs.",
    epilog=URL_HELP,
)
@url_argument
@schema_option
@click.option(
    "--top",
    type=click.IntRange(0, MAX_TOP),
    default=10,
    show_default=True,
    help="How many of the largest sessions and tool outputs to list (0: none, and no "
    "scan of the tool outputs).",
)
@tenant_options("to measure (--all-tenants: counted per tenant)")
@json_option
@click.pass_obj
def stats_command(
    output: Output,
    url: str | None,
    schema: str | None,
    top: int,
    tenant: str | None,
    all_tenants: bool,
    as_json: bool,
) -> int:
    """Print what the database at URL holds: sessions, messages, runs in flight and
    finished, the long values stored once (how many, their stored size, the
    references to them), its size, and the largest sessions and tool outputs.

    Of one tenant (--tenant, else the default tenant), or of every tenant with
    --all-tenants, counted per tenant. The size is the whole database's."""
    output.json_mode = as_json
    tenant, all_tenants = selected_tenants(tenant, all_tenants)

    async def read() -> DatabaseStats:
        async with Database(url or default_url(), verify_only=True, schema=schema) as db:
            return await database_stats(db, top=top, tenant=tenant, all_tenants=all_tenants)

    stats = asyncio.run(read())
    if as_json:
        output.json(stats.model_dump(mode="json"))
    else:
        _print(output, stats)
    return 0
