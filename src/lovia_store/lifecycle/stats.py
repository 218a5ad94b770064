"""``database_stats``: what a deployment's database holds and how big it has grown.

Counts come from the session rows (``message_count`` is kept beside every append)
and the run heads; sizes from the backend's own accounting (SQLite's pages plus its
write-ahead log, PostgreSQL's relation sizes, MariaDB's ``information_schema``). The
largest sessions are one ordered read of the session rows; the largest tool outputs
measure every stored tool result, a scan of the Raw Log's tool results (no index
knows a document's length), so on a big database that part takes a while.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import BigInteger, Connection, bindparam, case, cast, func, select, text
from sqlalchemy.types import LargeBinary

from ..db.database import Database
from ..db.tables import messages, metadata, run_heads, sessions
from ..validation import check_count
from .targets import Target, opened

__all__ = ["DatabaseStats", "SessionSize", "ToolOutputSize", "database_stats"]

RESUMABLE = ("running", "interrupted")
FINISHED = ("completed", "failed")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SessionSize(_Frozen):
    """One of the largest sessions: its id, title, Raw Log rows and last activity."""

    session_id: str
    title: str | None
    messages: int
    updated_at: datetime


class ToolOutputSize(_Frozen):
    """One of the largest stored tool outputs: where it is and its stored size in bytes
    (the whole entry as stored, UTF-8: output, ``raw`` and ``parts``)."""

    session_id: str
    sequence: int
    call_id: str | None
    bytes: int


class DatabaseStats(_Frozen):
    """What ``database_stats`` measured.

    ``messages`` counts Raw Log rows (a zett-agent message holding several entries
    is one). ``runs_in_flight`` are run heads that can still resume (running or
    interrupted), ``finished_runs`` those completed or failed. ``size_bytes`` is
    the backend's own figure for our tables (see docs/operations.md: MariaDB's is
    an estimate InnoDB refreshes now and then), ``size_detail`` how it was made.
    """

    database: str
    backend: str
    sessions: int
    messages: int
    runs_in_flight: int
    finished_runs: int
    size_bytes: int
    size_detail: dict[str, int]
    largest_sessions: list[SessionSize]
    largest_tool_outputs: list[ToolOutputSize]


s = sessions.c
m = messages.c
h = run_heads.c
_TABLES = sorted(metadata.tables)

_COUNTS = select(
    func.count(),
    func.coalesce(func.sum(s.message_count), 0),
).select_from(sessions)
_RUNS = select(
    func.coalesce(func.sum(case((h.status.in_(RESUMABLE), 1), else_=0)), 0),
    func.coalesce(func.sum(case((h.status.in_(FINISHED), 1), else_=0)), 0),
).select_from(run_heads)
_TOP = bindparam("top", type_=BigInteger())
_LARGEST_SESSIONS = (
    select(s.session_id, s.title, s.message_count, s.updated_at)
    .order_by(s.message_count.desc(), s.session_id)
    .limit(_TOP)
)


def _largest_outputs(dialect: str) -> Any:
    """The top tool results by stored bytes: ``octet_length`` where the backend has
    it, a BLOB's length on SQLite (whose ``length`` of text counts characters)."""
    if dialect == "sqlite":
        size = func.length(cast(m.entry_json, LargeBinary))
    else:
        size = func.octet_length(m.entry_json)
    return (
        select(m.session_id, m.sequence, m.call_id, size.label("bytes"))
        .where(m.entry_type == "tool_result")
        .order_by(size.desc(), m.session_id, m.sequence)
        .limit(_TOP)
    )


async def database_stats(target: Target, *, top: int = 10) -> DatabaseStats:
    """Counts, size and the ``top`` largest sessions and tool outputs of ``target``.

    Read-only, and never migrates: a database that needs ``lovia-store upgrade`` is
    refused with ``SchemaNotCurrentError``. ``top=0`` leaves both lists empty (and
    skips the tool-output scan).
    """
    top = check_count(top, "top", minimum=0)
    async with opened(target, verify_only=True) as db:

        def work(conn: Connection) -> DatabaseStats:
            return _measure(conn, db, top)

        return await db.read(work, stale=True)


def _measure(conn: Connection, db: Database, top: int) -> DatabaseStats:
    session_count, message_count = conn.execute(_COUNTS).one()
    in_flight, finished = conn.execute(_RUNS).one()
    detail = _size(conn, db.schema)
    largest: list[SessionSize] = []
    outputs: list[ToolOutputSize] = []
    if top:
        largest = [
            SessionSize(session_id=sid, title=title, messages=int(n), updated_at=at)
            for sid, title, n, at in conn.execute(_LARGEST_SESSIONS, {"top": top}).all()
        ]
        query = _largest_outputs(conn.dialect.name)
        outputs = [
            ToolOutputSize(session_id=sid, sequence=int(seq), call_id=call_id, bytes=int(size))
            for sid, seq, call_id, size in conn.execute(query, {"top": top}).all()
        ]
    return DatabaseStats(
        database=db.url,
        backend=conn.dialect.name,
        sessions=int(session_count),
        messages=int(message_count),
        runs_in_flight=int(in_flight),
        finished_runs=int(finished),
        size_bytes=sum(detail.values()),
        size_detail=detail,
        largest_sessions=largest,
        largest_tool_outputs=outputs,
    )


def _size(conn: Connection, schema: str | None) -> dict[str, int]:
    """The backend's own size figures for our tables, by what each one measures."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar_one())
        page_size = int(conn.exec_driver_sql("PRAGMA page_size").scalar_one())
        files = [row[2] for row in conn.exec_driver_sql("PRAGMA database_list") if row[1] == "main"]
        wal = f"{files[0]}-wal" if files and files[0] else None
        wal_bytes = os.path.getsize(wal) if wal is not None and os.path.exists(wal) else 0
        return {"pages": pages * page_size, "wal": wal_bytes}
    if dialect == "postgresql":
        total = conn.execute(
            text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'p') AND c.relname = ANY(:names) "
                "AND n.nspname = coalesce(:schema, current_schema())"
            ),
            {"names": _TABLES, "schema": schema},
        ).scalar_one()
        return {"tables_and_indexes": int(total)}
    rows = conn.execute(
        text(
            "SELECT coalesce(sum(data_length), 0), coalesce(sum(index_length), 0) "
            "FROM information_schema.TABLES "
            "WHERE table_schema = DATABASE() AND table_name IN :names"
        ).bindparams(bindparam("names", expanding=True)),
        {"names": _TABLES},
    ).one()
    return {"data": int(rows[0]), "indexes": int(rows[1])}
