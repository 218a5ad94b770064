"""``database_stats``: what a deployment's database holds and how big it has grown.

Counts come from the session rows (``message_count`` is kept beside every append),
the run heads and the long values stored once (``lovia_contents``: how many, their
stored bytes, the references to them); sizes from the backend's own accounting
(SQLite's pages plus its write-ahead log, PostgreSQL's relation sizes, MariaDB's
``information_schema``). The
largest sessions are one ordered read of the session rows; the largest tool outputs
measure every stored tool result, a scan of the Raw Log's tool results (no index
knows a document's length), so on a big database that part takes a while.

Counts and lists are of one tenant, or of every tenant counted per tenant; the
size is the whole database's (the backends account for tables, not tenants).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    BigInteger,
    BindParameter,
    Connection,
    bindparam,
    case,
    cast,
    func,
    select,
    text,
)
from sqlalchemy.types import LargeBinary

from ..db.database import Database
from ..db.tables import contents, messages, metadata, run_heads, sessions
from ..validation import check_count
from .targets import Scope, Target, opened, scope_of

__all__ = [
    "ContentStats",
    "DatabaseStats",
    "SessionSize",
    "TenantStats",
    "ToolOutputSize",
    "database_stats",
]

RESUMABLE = ("running", "interrupted")
FINISHED = ("completed", "failed")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ContentStats(_Frozen):
    """The long values stored once (``lovia_contents``): how many, their ``stored_bytes``
    (compressed, and encrypted where the Database encrypts), their length as text
    (``text_chars``, before compression) and the ``references`` documents make to them
    (a value referred to ten times is stored once)."""

    values: int = 0
    stored_bytes: int = 0
    text_chars: int = 0
    references: int = 0

    def __add__(self, other: ContentStats) -> ContentStats:
        return ContentStats(
            values=self.values + other.values,
            stored_bytes=self.stored_bytes + other.stored_bytes,
            text_chars=self.text_chars + other.text_chars,
            references=self.references + other.references,
        )


class TenantStats(_Frozen):
    """One tenant's counts (see ``DatabaseStats`` for what each counts)."""

    tenant: str
    sessions: int
    messages: int
    runs_in_flight: int
    finished_runs: int
    contents: ContentStats = ContentStats()


class SessionSize(_Frozen):
    """One of the largest sessions: its tenant, id, title, Raw Log rows and last activity."""

    tenant: str = ""
    session_id: str
    title: str | None
    messages: int
    updated_at: datetime


class ToolOutputSize(_Frozen):
    """One of the largest stored tool outputs: where it is and its stored size in bytes
    (the whole entry as its row stores it, UTF-8: output, ``raw`` and ``parts``,
    compressed or encrypted where they are, without the long values it shares, which
    ``contents`` counts)."""

    tenant: str = ""
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
    an estimate InnoDB refreshes now and then), ``size_detail`` how it was made:
    the whole database's, every tenant's. ``contents`` are the long values stored
    once, counted per tenant too (``TenantStats.contents``).

    ``tenant`` is the tenant measured (None: every tenant), ``tenants`` the counts
    of each tenant measured (those with any row, and the one asked for), by name;
    the counts above are their sums.
    """

    database: str
    backend: str
    tenant: str | None = ""
    tenants: list[TenantStats] = []
    sessions: int
    messages: int
    runs_in_flight: int
    finished_runs: int
    contents: ContentStats = ContentStats()
    size_bytes: int
    size_detail: dict[str, int]
    largest_sessions: list[SessionSize]
    largest_tool_outputs: list[ToolOutputSize]


s = sessions.c
m = messages.c
h = run_heads.c
v = contents.c
_TABLES = sorted(metadata.tables)
_TENANT: BindParameter[str] = bindparam("tenant")


def _scoped(query: Any, column: Any, tenant: Scope) -> Any:
    """``query`` kept to one tenant (bound as ``tenant``), or as it is for every tenant."""
    return query if tenant is None else query.where(column == _TENANT)


def _counts(tenant: Scope) -> Any:
    query = select(s.tenant, func.count(), func.coalesce(func.sum(s.message_count), 0))
    return _scoped(query.select_from(sessions), s.tenant, tenant).group_by(s.tenant)


def _runs(tenant: Scope) -> Any:
    query = select(
        h.tenant,
        func.coalesce(func.sum(case((h.status.in_(RESUMABLE), 1), else_=0)), 0),
        func.coalesce(func.sum(case((h.status.in_(FINISHED), 1), else_=0)), 0),
    ).select_from(run_heads)
    return _scoped(query, h.tenant, tenant).group_by(h.tenant)


def _contents(tenant: Scope) -> Any:
    query = select(
        v.tenant,
        func.count(),
        func.coalesce(func.sum(func.length(v.data)), 0),
        func.coalesce(func.sum(v.size), 0),
        func.coalesce(func.sum(v.refs), 0),
    ).select_from(contents)
    return _scoped(query, v.tenant, tenant).group_by(v.tenant)


_TOP = bindparam("top", type_=BigInteger())


def _largest_sessions(tenant: Scope) -> Any:
    query = select(s.tenant, s.session_id, s.title, s.message_count, s.updated_at)
    query = _scoped(query, s.tenant, tenant)
    return query.order_by(s.message_count.desc(), s.tenant, s.session_id).limit(_TOP)


def _largest_outputs(dialect: str, tenant: Scope) -> Any:
    """The top tool results by stored bytes: ``octet_length`` where the backend has
    it, a BLOB's length on SQLite (whose ``length`` of text counts characters)."""
    if dialect == "sqlite":
        size = func.length(cast(m.entry_json, LargeBinary))
    else:
        size = func.octet_length(m.entry_json)
    query = select(m.tenant, m.session_id, m.sequence, m.call_id, size.label("bytes"))
    query = _scoped(query.where(m.entry_type == "tool_result"), m.tenant, tenant)
    return query.order_by(size.desc(), m.tenant, m.session_id, m.sequence).limit(_TOP)


async def database_stats(
    target: Target, *, top: int = 10, tenant: str | None = None, all_tenants: bool = False
) -> DatabaseStats:
    """Counts, size and the ``top`` largest sessions and tool outputs of ``target``.

    Of one tenant: ``tenant``, else the Database's (the default tenant ``""`` unless
    it was opened with one); ``all_tenants=True`` measures every tenant, counted per
    tenant (``DatabaseStats.tenants``), the largest named with their tenant.

    Read-only, and never migrates: a database that needs ``lovia-store upgrade`` is
    refused with ``SchemaNotCurrentError``. ``top=0`` leaves both lists empty (and
    skips the tool-output scan).
    """
    top = check_count(top, "top", minimum=0)
    async with opened(target, verify_only=True) as db:
        scope = scope_of(tenant, all_tenants, db.tenant)

        def work(conn: Connection) -> DatabaseStats:
            return _measure(conn, db, top, scope)

        return await db.read(work, stale=True)


def _measure(conn: Connection, db: Database, top: int, tenant: Scope) -> DatabaseStats:
    bound = {"top": top, "tenant": tenant}
    counts: dict[str, list[int]] = {} if tenant is None else {tenant: [0] * 8}
    for name, session_count, message_count in conn.execute(_counts(tenant), bound):
        counts.setdefault(name, [0] * 8)[:2] = [int(session_count), int(message_count)]
    for name, in_flight, finished in conn.execute(_runs(tenant), bound):
        counts.setdefault(name, [0] * 8)[2:4] = [int(in_flight), int(finished)]
    for name, *shared in conn.execute(_contents(tenant), bound):
        counts.setdefault(name, [0] * 8)[4:] = [int(n) for n in shared]
    tenants = [
        TenantStats(
            tenant=name,
            sessions=n[0],
            messages=n[1],
            runs_in_flight=n[2],
            finished_runs=n[3],
            contents=ContentStats(values=n[4], stored_bytes=n[5], text_chars=n[6], references=n[7]),
        )
        for name, n in sorted(counts.items())
    ]
    detail = _size(conn, db.schema)
    largest: list[SessionSize] = []
    outputs: list[ToolOutputSize] = []
    if top:
        largest = [
            SessionSize(tenant=t, session_id=sid, title=title, messages=int(n), updated_at=at)
            for t, sid, title, n, at in conn.execute(_largest_sessions(tenant), bound).all()
        ]
        query = _largest_outputs(conn.dialect.name, tenant)
        outputs = [
            ToolOutputSize(
                tenant=t, session_id=sid, sequence=int(seq), call_id=call_id, bytes=int(size)
            )
            for t, sid, seq, call_id, size in conn.execute(query, bound).all()
        ]
    return DatabaseStats(
        database=db.url,
        backend=conn.dialect.name,
        tenant=tenant,
        tenants=tenants,
        sessions=sum(t.sessions for t in tenants),
        messages=sum(t.messages for t in tenants),
        runs_in_flight=sum(t.runs_in_flight for t in tenants),
        finished_runs=sum(t.finished_runs for t in tenants),
        contents=sum((t.contents for t in tenants), ContentStats()),
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
