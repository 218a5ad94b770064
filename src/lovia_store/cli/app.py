"""The ``lovia-store`` command line: schema upgrades and a readable look at sessions."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, select

from .db.database import Database
from .db.tables import session_runs, sessions
from .entries import (
    AssistantTextEntry,
    InputEntry,
    ReasoningEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)
from .errors import LoviaStoreError
from .stores.sql_sessions import SQLSession
from .upgrade import UpgradeReport, check, upgrade

__all__ = ["main"]

DEFAULT_FILE = "lovia-store.sqlite3"


def default_url() -> str:
    return (
        os.environ.get("LOVIA_STORE_URL") or f"sqlite+aiosqlite:///{os.path.abspath(DEFAULT_FILE)}"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lovia-store",
        description="Durable conversation history and run checkpoints for LLM agents.",
        epilog=(
            "URL is a SQLAlchemy URL (sqlite+aiosqlite:///file, postgresql+asyncpg://..., "
            "mysql+asyncmy://...) or a SQLite path. Without one, $LOVIA_STORE_URL is used, "
            f"else the SQLite file ./{DEFAULT_FILE} in the working directory."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    upgrading = commands.add_parser(
        "upgrade",
        help="bring the database to the current schema (creates it if needed)",
        description="Bring the database to the current schema (creates it if needed). A file "
        "that lovia 0.9 or zett-agent wrote is converted, and a copy of it is kept first.",
    )
    upgrading.add_argument("url", nargs="?", help="database URL or SQLite path")
    _schema_option(upgrading)
    backup = upgrading.add_mutually_exclusive_group()
    backup.add_argument(
        "--backup-dir",
        default=None,
        help="folder for the copy kept before converting a lovia 0.9 or zett-agent file "
        "(default: beside the file)",
    )
    backup.add_argument(
        "--no-backup",
        action="store_true",
        help="convert without keeping a copy (you keep backups of your own); needed to convert "
        "a server database, which cannot be copied from here",
    )
    for name, text in (
        ("check", "exit 1 unless the database is at the current schema; never writes"),
        ("sessions", "list sessions with their run and entry counts"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument("url", nargs="?", help="database URL or SQLite path")
        _schema_option(command)
    demo = commands.add_parser(
        "demo", help="watch a run crash mid-way and resume from its checkpoint (the main job)"
    )
    demo.add_argument(
        "url",
        nargs="?",
        help="a new SQLite file or a database URL to run it on (default: a temporary file, "
        "removed at the end)",
    )
    demo.add_argument(
        "--force",
        action="store_true",
        help="use a database that already exists: the demo adds a session and a run of its "
        "own and changes nothing else",
    )
    show = commands.add_parser("show", help="print one session's transcript, run by run")
    show.add_argument("session_id")
    show.add_argument("url", nargs="?", help="database URL or SQLite path")
    _schema_option(show)
    return parser


def _schema_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--schema",
        default=os.environ.get("LOVIA_STORE_SCHEMA") or None,
        help="PostgreSQL schema that holds lovia-store's tables (default: $LOVIA_STORE_SCHEMA, "
        "else the connection's default schema)",
    )


async def _list_sessions(db: Database) -> list[Any]:
    runs = (
        select(func.count())
        .where(session_runs.c.session_id == sessions.c.session_id)
        .scalar_subquery()
    )
    query = select(
        sessions.c.session_id, runs, sessions.c.message_count, sessions.c.updated_at
    ).order_by(sessions.c.updated_at.desc(), sessions.c.session_id)

    def work(conn: Connection) -> list[Any]:
        return list((conn.execute(query)).all())

    return await db.read(work)


def _print_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> None:
    cells = [list(map(str, headers)), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * width for width in widths))


def _clip(text: str, limit: int = 160) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(entry: TranscriptEntry) -> str:
    """One readable line for an entry."""
    if isinstance(entry, InputEntry):
        content = entry.content
        if not isinstance(content, str):
            content = " ".join(getattr(p, "text", None) or f"<{p.type}>" for p in content)
        return f"{entry.role:>9}: {_clip(content)}"
    if isinstance(entry, AssistantTextEntry):
        return f"assistant: {_clip(entry.content)}"
    if isinstance(entry, ReasoningEntry):
        return f"reasoning: {_clip(entry.content)}"
    if isinstance(entry, ToolCallEntry):
        return f"     tool> {entry.name}({_clip(entry.arguments, 120)})  [{entry.call_id}]"
    assert isinstance(entry, ToolResultEntry)
    flag = " (error)" if entry.is_error else ""
    return f"     tool< {_clip(entry.output)}{flag}  [{entry.call_id}]"


async def _show(db: Database, session_id: str) -> int:
    store = SQLSession(db)
    segments = await store.segments(session_id)
    if not segments:
        print(f"no session {session_id!r} in {db.url}")
        return 1
    for number, segment in enumerate(segments, start=1):
        timing = (segment.meta or {}).get("timing")
        took = ""
        if isinstance(timing, dict) and {"started_at", "finished_at"} <= timing.keys():
            took = f"  ({timing['finished_at'] - timing['started_at']:.2f}s)"
        print(f"── run {number}: {segment.run_id}{took}")
        for entry in segment.entries:
            print("  " + describe(entry))
    return 0


def _print_upgrade(report: UpgradeReport) -> None:
    if not report.changed:
        print(f"{report.database}: schema is current (revision {report.to_revision}), no change")
        return
    start = report.from_revision or "none (no lovia-store schema yet)"
    print(f"{report.database}: upgraded from revision {start} to {report.to_revision}")
    for owner, tables in report.converted.items():
        print(f"converted {owner}'s tables: {', '.join(tables)}")
    if report.backup is not None:
        print(f"the original file is kept at {report.backup}")


async def _run(args: argparse.Namespace) -> int:
    url = args.url or default_url()
    if args.command == "upgrade":
        legacy_backup = False if args.no_backup else (args.backup_dir or True)
        _print_upgrade(await upgrade(url, schema=args.schema, legacy_backup=legacy_backup))
        return 0
    if args.command == "check":
        await check(url, schema=args.schema)
        print("schema is current")
        return 0
    # Looking is not migrating: an old database is reported, not converted.
    async with Database(url, verify_only=True, schema=args.schema) as db:
        if args.command == "sessions":
            rows = await _list_sessions(db)
            if not rows:
                print(f"no sessions in {db.url}")
                return 0
            _print_table(
                [(r[0], r[1], r[2], f"{r[3]:%Y-%m-%d %H:%M:%S}") for r in rows],
                ("session", "runs", "entries", "last activity (UTC)"),
            )
            return 0
        return await _show(db, args.session_id)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import main as demo

            return demo([*([args.url] if args.url else []), *(["--force"] if args.force else [])])
        return asyncio.run(_run(args))
    except LoviaStoreError as exc:
        print(f"lovia-store: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
