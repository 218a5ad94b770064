"""What the stored-document tests share: rows of every table written through the codec,
and the whole database read back decoded.

The rows are written with Core, each document through ``store_documents`` (the
contents API every store uses), in one transaction, so these tests stand on the
codec and the lifecycle code alone. Their text is long and repetitive where a
transcript is (tool outputs read again and again: shared and compressed), and
every document carries ``SECRET``, so a search of the stored bytes tells whether
any document is stored in clear.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import Connection, select

from backends import migrated_server_database
from lovia_store import Database, upgrade
from lovia_store.cli.app import main
from lovia_store.db import tables
from lovia_store.db.contents import read_documents, store_documents
from lovia_store.db.documents import MARK, references
from lovia_store.db.encryption import generate_encryption_key
from lovia_store.entries import (
    AssistantTextEntry,
    InputEntry,
    ToolResultEntry,
    entry_to_dict,
)

SECRET = "SECRET-d0c5"
"""In every document: found in a stored text, that document is stored in clear."""
KEY1 = generate_encryption_key()
KEY2 = generate_encryption_key()
THRESHOLD = 64
FORMS: dict[str, dict[str, Any]] = {
    "plain": {"compression": False},
    "compressed": {"compression_threshold": THRESHOLD},
    "encrypted": {"compression_threshold": THRESHOLD, "encryption_keys": [KEY1]},
    "encrypted2": {"compression_threshold": THRESHOLD, "encryption_keys": [KEY2]},
}
"""How a Database stores documents, by name."""

DOCUMENTS = {
    "lovia_messages": ("entry_json", "envelope_json", "metadata_json", "tags_json"),
    "lovia_session_runs": ("meta_json",),
    "lovia_snapshots": ("summary_json", "envelope_json"),
    "lovia_run_heads": ("head_json",),
    "lovia_run_entries": ("entry_json",),
    "lovia_tool_effects": ("result_json",),
}
SHAREABLE = {
    "lovia_messages": "entry_json",
    "lovia_run_entries": "entry_json",
    "lovia_tool_effects": "result_json",
}
KINDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mysql),
]
"""The SQL engines every test runs on."""
NOW = datetime.now(UTC).replace(microsecond=0)
OLD = NOW - timedelta(days=30)


@contextlib.asynccontextmanager
async def database(kind: str, tmp_path: Path, name: str) -> AsyncIterator[str]:
    """A database of ``kind`` (sqlite, postgres, mariadb) for this test: a new SQLite
    file, or a migrated, empty server database (none of these tests is about first opens)."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / f'{name}.sqlite3'}"
        return
    async with migrated_server_database(kind) as url:
        yield url


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def output(n: int) -> str:
    """A tool output: long, one of three (so read again and again), with ``SECRET``."""
    lines = [f'{SECRET} line {i} of file {n % 3}: ünïcode ☃ "quoted" \\ back' for i in range(40)]
    return "\n".join(lines)


def world(
    tenant: str = "", sessions: int = 2, messages: int = 6
) -> dict[Any, list[dict[str, Any]]]:
    """Rows of every table for ``tenant``, their documents as text: ``sessions``
    sessions (the first idle for 30 days) of ``messages`` messages in one run, with a
    snapshot, and a completed run (entries, a tool effect, a lease) per session."""
    rows: dict[Any, list[dict[str, Any]]] = {t: [] for t in tables.metadata.sorted_tables}
    for s in range(sessions):
        sid = f"s-{s}"
        at = OLD if s == 0 else NOW
        rows[tables.sessions].append(
            {
                "tenant": tenant,
                "session_id": sid,
                "title": f"{tenant} {sid}",
                "last_sequence": messages,
                "message_count": messages,
                "run_count": 1,
                "snapshot_version": 1,
                "created_at": at,
                "updated_at": at,
            }
        )
        for seq in range(1, messages + 1):
            entry: Any = AssistantTextEntry(content=f"{SECRET} said {seq}")
            kind, call = "assistant_text", None
            if seq % 3 == 1:
                entry, kind = InputEntry(role="user", content=f"{SECRET} ask {seq}"), "input"
            elif seq % 3 == 2:
                call, kind = f"c{seq}", "tool_result"
                entry = ToolResultEntry(call_id=call, name="read", output=output(s + seq))
            rows[tables.messages].append(
                {
                    "tenant": tenant,
                    "session_id": sid,
                    "sequence": seq,
                    "request_id": f"q{seq}",
                    "run_id": "r1",
                    "entry_type": kind,
                    "call_id": call,
                    "entry_json": _json(entry_to_dict(entry)),
                    "envelope_json": _json({"kind": "envelope", "note": f"{SECRET} {seq}"}),
                    "metadata_json": _json({"m": f"{SECRET} {seq}"}),
                    "tags_json": _json({"t": SECRET}),
                    "created_at": at,
                }
            )
        rows[tables.session_runs].append(
            {
                "tenant": tenant,
                "session_id": sid,
                "run_id": "r1",
                "position": 1,
                "first_sequence": 1,
                "entry_count": messages,
                "meta_json": _json({"meta": SECRET * 8}),
                "created_at": at,
            }
        )
        rows[tables.snapshots].append(
            {
                "tenant": tenant,
                "session_id": sid,
                "version": 1,
                "snapshot_id": f"snap-{sid}",
                "compacted_through_sequence": 1,
                "summary_json": _json({"content": f"{SECRET} summary " * 10}),
                "envelope_json": _json({"e": SECRET}),
                "created_at": at,
                "updated_at": at,
            }
        )
        run = f"run-{s}"
        head = {"agent_name": "agent", "status": "completed", "output": f"{SECRET} {run}"}
        rows[tables.run_heads].append(
            {
                "tenant": tenant,
                "run_id": run,
                "status": "completed",
                "head_json": _json(head),
                "entry_count": 2,
                "created_at": at,
                "updated_at": at,
                "session_id": sid,
            }
        )
        for position in (1, 2):
            entry = (
                ToolResultEntry(call_id="e1", name="read", output=output(position))
                if position == 1
                else AssistantTextEntry(content=f"{SECRET} done")
            )
            rows[tables.run_entries].append(
                {
                    "tenant": tenant,
                    "run_id": run,
                    "position": position,
                    "entry_json": _json(entry_to_dict(entry)),
                }
            )
        effect = ToolResultEntry(call_id="e1", name="read", output=output(7))
        rows[tables.tool_effects].append(
            {
                "tenant": tenant,
                "run_id": run,
                "call_id": "e1",
                "tool_name": "read",
                "started_at": at,
                "result_json": _json(entry_to_dict(effect)),
            }
        )
        rows[tables.run_leases].append(
            {
                "tenant": tenant,
                "run_id": run,
                "token": 1,
                "lease_id": f"lease-{run}",
                "holder": "h",
                "expires_ms": 0,
            }
        )
    return rows


def insert_world(conn: Connection, rows: dict[Any, list[dict[str, Any]]]) -> None:
    """Insert ``rows``, each document stored as ``conn``'s Database stores them."""
    for table, found in rows.items():
        if not found:
            continue
        stored = [dict(row) for row in found]
        for column in DOCUMENTS.get(table.name, ()):
            for tenant in {row["tenant"] for row in stored}:
                mine = [row for row in stored if row["tenant"] == tenant and column in row]
                texts = store_documents(
                    conn,
                    tenant,
                    [row[column] for row in mine],
                    shareable=SHAREABLE.get(table.name) == column,
                )
                for row, text in zip(mine, texts, strict=True):
                    row[column] = text
        conn.execute(table.insert(), stored)


async def write_world(db: Database, *tenants: str, **sizes: int) -> None:
    """The database brought to the current schema, and ``world`` of each tenant in it."""
    await upgrade(db)
    for tenant in tenants or ("",):
        rows = world(tenant, **sizes)
        await db.write(lambda conn, rows=rows: insert_world(conn, rows))


def _key_order(table: Any) -> list[Any]:
    return list(table.primary_key.columns)


async def decoded_rows(db: Database) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table but the shared values, in key order, each document as
    its text (read through the contents API, in one transaction)."""

    def work(conn: Connection) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for table in tables.metadata.sorted_tables:
            if table in (tables.schema_versions, tables.contents):
                continue
            rows = [
                dict(r._mapping) for r in conn.execute(select(table).order_by(*_key_order(table)))
            ]
            for column in DOCUMENTS.get(table.name, ()):
                for tenant in {row["tenant"] for row in rows}:
                    mine = [row for row in rows if row["tenant"] == tenant]
                    texts = read_documents(conn, tenant, [row[column] for row in mine])
                    for row, text in zip(mine, texts, strict=True):
                        row[column] = text
            for row in rows:  # comparable across backends: aware UTC datetimes
                for name, value in row.items():
                    if isinstance(value, datetime):
                        row[name] = value.astimezone(UTC)
            found[table.name] = rows
        return found

    return await db.read(work)


def plain_world(*tenants: str, **sizes: int) -> dict[str, list[dict[str, Any]]]:
    """``world`` as ``decoded_rows`` reads it back (defaults filled in, key order)."""
    expected: dict[str, list[dict[str, Any]]] = {}
    for table in tables.metadata.sorted_tables:
        if table in (tables.schema_versions, tables.contents):
            continue
        rows = []
        for tenant in tenants or ("",):
            for row in world(tenant, **sizes)[table]:
                full = {c.name: row.get(c.name) for c in table.columns}
                for c in table.columns:
                    if c.name not in row and c.server_default is not None:
                        full[c.name] = _default(c)
                rows.append(full)
        rows.sort(key=lambda r: tuple(r[c.name] for c in _key_order(table)))
        expected[table.name] = rows
    return expected


def _default(column: Any) -> Any:
    value = column.server_default.arg
    return int(value) if column.type.python_type is int else value


async def stored_texts(db: Database) -> list[tuple[str, str, str]]:
    """Every stored document: (table, column, stored text), NULLs left out."""

    def work(conn: Connection) -> list[tuple[str, str, str]]:
        found = []
        for name, columns in DOCUMENTS.items():
            table = tables.metadata.tables[name]
            for column in columns:
                for (text,) in conn.execute(select(table.c[column])):
                    if text is not None:
                        found.append((name, column, text))
        return found

    return await db.read(work)


async def contents_of(db: Database) -> dict[tuple[str, str], int]:
    """The shared values' reference counts, by (tenant, digest)."""

    def work(conn: Connection) -> dict[tuple[str, str], int]:
        c = tables.contents.c
        return {(t, d): int(r) for t, d, r in conn.execute(select(c.tenant, c.digest, c.refs))}

    return await db.read(work)


async def shared_bytes(db: Database) -> list[bytes]:
    def work(conn: Connection) -> list[bytes]:
        return [bytes(d) for d in conn.execute(select(tables.contents.c.data)).scalars()]

    return await db.read(work)


async def counted_references(db: Database) -> dict[tuple[str, str], int]:
    """The references the shareable documents make, counted from their stored text."""

    def work(conn: Connection) -> dict[tuple[str, str], int]:
        counts: Counter[tuple[str, str]] = Counter()
        for name, column in SHAREABLE.items():
            table = tables.metadata.tables[name]
            for tenant, text in conn.execute(select(table.c.tenant, table.c[column])):
                if text is not None:
                    counts.update((tenant, digest) for digest in references(text))
        return dict(counts)

    return await db.read(work)


async def assert_counts_true(db: Database) -> None:
    """Every reference names a stored value, and every value counts its references."""
    assert await contents_of(db) == await counted_references(db)


def encoded(text: str) -> bool:
    return text.startswith(MARK)


async def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``lovia-store ARGS`` (in a thread: it runs its own event loop) with ``env`` set
    meanwhile: its exit code and what it printed."""
    out = io.StringIO()

    def run() -> int:
        saved = dict(os.environ)
        os.environ.update(env or {})
        try:
            return main(list(args))
        finally:
            os.environ.clear()
            os.environ.update(saved)

    with contextlib.redirect_stdout(out):
        code = await asyncio.to_thread(run)
    return code, out.getvalue()
