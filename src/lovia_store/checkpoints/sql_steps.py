"""A run's step stored: the head upsert that reserves the entries' positions, then the entries.

The position counter lives on the head row (``entry_count``), so an append is
two statements whatever the run's length, and nothing earlier is read or
rewritten. On PostgreSQL the two are one statement (data-modifying CTEs); the
portable path stands beside it, and ``capabilities`` picks between them.

A run is keyed by its tenant and its id: every statement here names both (the
``tenant`` bind parameter), so the same run id in two tenants is two runs.

Documents go through the Database's codec (``lovia_store.db.contents``): the
head is compressed or sealed like any document, the entries (which hold tool
outputs) also share their long values, counted after the rows are written, so
contents are always the last rows a step locks.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import cast

from sqlalchemy import ARRAY, BigInteger, Connection, String, Text, bindparam, func, select, true
from sqlalchemy.sql import Executable
from sqlalchemy.sql.dml import Insert

from .._json import Where
from ..db.contents import codec_of, encode_documents, read_documents, retain_shared
from ..db.dialect import capabilities, insert_ignore, prepare_insert_ignore, upsert
from ..db.documents import DocumentCodec
from ..db.prepared import Prepared, per_dialect
from ..db.tables import run_entries, run_heads
from ..db.types import UTCDateTime, utcnow

__all__ = ["ENTRY_COUNT", "append_step", "settle_step"]

h = run_heads.c


@cache
def _upsert(dialect: str, links_session: bool) -> Executable:
    """Replace the head and reserve ``count`` positions; returns the run's entry count.

    ``session_id`` links the run to the session it appends to when it finishes
    (retention keeps that session while the run can resume). A write that names
    none keeps the link an earlier write made by leaving the column out of its
    update: SQLite rewrites an indexed column's index entry whenever the column
    is assigned, even to its own value (measured on SQLite alone: 5-6 µs of a
    40 µs step).
    """
    now = bindparam("now", type_=UTCDateTime())
    session = bindparam("session_id", type_=String())
    values = {
        "tenant": bindparam("tenant"),
        "run_id": bindparam("run_id"),
        "status": bindparam("status"),
        "head_json": bindparam("head_json"),
        "entry_count": bindparam("count"),
        "created_at": now,
        "updated_at": now,
        "session_id": session,
    }
    changes = {
        "status": bindparam("status"),
        "head_json": bindparam("head_json"),
        "entry_count": h.entry_count + bindparam("count"),
        "updated_at": now,
    }
    if links_session:
        changes["session_id"] = session
    return upsert(dialect, run_heads, values, changes, [h.entry_count])


@cache
def _prepared_upsert(dialect: str, links_session: bool) -> Prepared:
    return Prepared(_upsert(dialect, links_session))


per_dialect(lambda name: (_prepared_upsert(name, False), _prepared_upsert(name, True)))


def _append_in_one_statement(links_session: bool) -> Executable:
    """PostgreSQL: a step as one statement (one round trip, not two).

    Data-modifying CTEs: the head upsert reserves the positions, then the
    entries (unnested from an array) are numbered up to the count it returns.
    """
    head = cast(Insert, _upsert("postgresql", links_session)).cte("head")
    documents = (
        func.unnest(bindparam("documents", type_=ARRAY(Text())))
        .table_valued("entry_json", with_ordinality="ordinality")
        .render_derived(name="given")
    )
    count = bindparam("count", type_=BigInteger())
    rows = run_entries.insert().from_select(
        ["tenant", "run_id", "position", "entry_json"],
        select(
            bindparam("tenant", type_=String()),
            bindparam("run_id", type_=String()),
            head.c.entry_count - count + documents.c.ordinality,
            documents.c.entry_json,
        ).select_from(head.join(documents, true())),
    )
    return select(head.c.entry_count).add_cte(rows.cte("entries"))


_APPEND_IN_ONE_STATEMENT = Prepared.only_on("postgresql", lambda: _append_in_one_statement(False))
_APPEND_LINKING_IN_ONE_STATEMENT = Prepared.only_on(
    "postgresql", lambda: _append_in_one_statement(True)
)
ENTRY_COUNT = Prepared(
    select(h.entry_count).where(h.tenant == bindparam("tenant"), h.run_id == bindparam("run_id"))
)
_ENTRY_COLUMNS = ("tenant", "run_id", "position", "entry_json")
_INSERT_ENTRIES = Prepared(run_entries.insert().values({c: bindparam(c) for c in _ENTRY_COLUMNS}))


def append_step(
    conn: Connection,
    tenant: str,
    run_id: str,
    status: str,
    head_json: str,
    documents: Sequence[str],
    session_id: str | None = None,
) -> None:
    """Replace the head and add the entries at the positions its upsert reserved.

    ``head_json`` and ``documents`` are the texts written; they are stored as the
    connection's codec says (the head holds no shared values: nothing to release
    when it is replaced)."""
    codec = codec_of(conn)
    entries = None
    if not _as_written(codec, head_json, documents):
        head_json = encode_documents(codec, tenant, [head_json]).stored[0]
        entries = encode_documents(codec, tenant, documents, shareable=True)
        documents = entries.stored
    params = {
        "tenant": tenant,
        "run_id": run_id,
        "status": status,
        "head_json": head_json,
        "count": len(documents),
        "now": utcnow(),
        "session_id": session_id,
    }
    links_session = session_id is not None
    if capabilities(conn).one_statement_writes:
        step = _APPEND_LINKING_IN_ONE_STATEMENT if links_session else _APPEND_IN_ONE_STATEMENT
        step.execute(conn, params | {"documents": list(documents)})
    else:
        result = _prepared_upsert(conn.dialect.name, links_session).execute(conn, params)
        if not capabilities(conn).returning:  # read the locked row back
            result = ENTRY_COUNT.execute(conn, {"tenant": tenant, "run_id": run_id})
        last = int(result.scalar_one())
        if documents:
            first = last - len(documents) + 1
            rows = [
                {"position": first + i, "entry_json": document}
                for i, document in enumerate(documents)
            ]
            _INSERT_ENTRIES.execute(conn, {"tenant": tenant, "run_id": run_id}, rows)
    if entries is not None:
        retain_shared(conn, tenant, entries)


def _as_written(codec: DocumentCodec, head_json: str, documents: Sequence[str]) -> bool:
    """Whether a step is stored as written: no keys, nothing long (most steps). One
    check instead of two encodings: a step costs tens of microseconds."""
    if codec.encrypts:
        return False
    if not codec.compression:
        return True
    threshold = codec.threshold
    return len(head_json) < threshold and all(len(text) < threshold for text in documents)


_LOCKED_HEAD = (
    select(h.head_json, h.entry_count)
    .where(h.tenant == bindparam("tenant"), h.run_id == bindparam("run_id"))
    .with_for_update()
)
_TAIL = (
    select(run_entries.c.entry_json)
    .where(
        run_entries.c.tenant == bindparam("tenant"),
        run_entries.c.run_id == bindparam("run_id"),
        run_entries.c.position > bindparam("after"),
    )
    .order_by(run_entries.c.position)
)
_EMPTY_HEAD = (
    *("tenant", "run_id", "status", "head_json"),
    *("entry_count", "created_at", "updated_at"),
)
prepare_insert_ignore(run_heads, _EMPTY_HEAD)


def _landed(
    conn: Connection, tenant: str, run_id: str, head_json: str, documents: Sequence[str]
) -> bool:
    """Whether the run ends with this step: its head, then its entries, last (compared
    as written: an encrypted document is sealed anew each time)."""
    key = {"tenant": tenant, "run_id": run_id}
    head = conn.execute(_LOCKED_HEAD, key).first()
    if head is None:
        return False
    after = head.entry_count - len(documents)
    if after < 0 or read_documents(conn, tenant, [head.head_json], _head_of(run_id)) != [head_json]:
        return False
    tail = conn.execute(_TAIL, key | {"after": after}).scalars().all()
    return read_documents(conn, tenant, tail, _tail_of(run_id, after)) == list(documents)


def _head_of(run_id: str) -> Where:
    return "lovia_run_heads", "head_json", lambda _: {"run_id": run_id}


def _tail_of(run_id: str, after: int) -> Where:
    return (
        "lovia_run_entries",
        "entry_json",
        lambda i: {"run_id": run_id, "position": after + 1 + i},
    )


def settle_step(
    conn: Connection,
    tenant: str,
    run_id: str,
    status: str,
    head_json: str,
    documents: Sequence[str],
    session_id: str | None = None,
) -> None:
    """``append_step`` after its COMMIT was lost: a no-op if the step is stored.

    The head row is locked before it is compared, so a first attempt whose
    COMMIT is still under way (its server alive) is waited for, not missed; a
    run with no head yet gets an empty one first for the same reason. A step is
    known by its head (which records ``updated_at``) and its entries.
    """
    if _landed(conn, tenant, run_id, head_json, documents):
        return
    now = utcnow()
    stored_head = encode_documents(codec_of(conn), tenant, [head_json]).stored[0]
    values = (tenant, run_id, status, stored_head, 0, now, now)
    empty = dict(zip(_EMPTY_HEAD, values, strict=True))
    if not insert_ignore(conn, run_heads, empty) and _landed(
        conn, tenant, run_id, head_json, documents
    ):
        return
    append_step(conn, tenant, run_id, status, head_json, documents, session_id)
