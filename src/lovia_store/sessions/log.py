"""Where a session's sequences come from: every path that adds rows to ``lovia_messages``.

The invariant, made here and nowhere else: a session's sequences are reserved
on its ``lovia_sessions`` row, by bumping ``last_sequence`` in the statement
that also takes the row's lock (an upsert, which creates the row on first use).
Concurrent appends to one session serialize on that row and never collide on
a sequence, and no writer reads MAX() over the history. Sequences are
allocated 1, 2, 3, ... without gaps; ``message_count`` is bumped beside
``last_sequence``, so the two are equal until rows are deleted (a rewind
lowers ``message_count`` only: a sequence is never reused). The Raw Log's
offset pages (``raw_log/reads.py``) rely on that equality.

The allocation paths, side by side:

- ``bump_session``: the portable reservation (MySQL has no RETURNING and reads
  the locked row back);
- ``store_run``: a lovia run of N entries: on PostgreSQL one statement (the
  bump as a CTE, ``_APPEND_IN_ONE_STATEMENT``), elsewhere the bump, the run
  row, then the entries. Its documents go through the Database's codec first
  (``stored_run``); a run whose entries share long values takes the
  transactional path everywhere, which counts their references;
- ``append_message``: one Raw Log message.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    BigInteger,
    Connection,
    String,
    Text,
    bindparam,
    func,
    literal_column,
    select,
    true,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Executable
from sqlalchemy.sql.dml import Insert

from ..db.contents import Encoding, encode_documents, retain_shared, shared_rows
from ..db.dialect import capabilities, insert_ignore, prepare_insert_ignore, upsert
from ..db.documents import DocumentCodec
from ..db.errors import violated_constraint
from ..db.prepared import Prepared, per_dialect
from ..db.tables import contents, messages, session_runs, sessions
from ..db.types import TEXT_ARRAY, UTCDateTime, utcnow
from ..entries import call_id_of, encode_entries
from ..errors import ConflictError

__all__ = [
    "RUN_STORED",
    "Bumped",
    "EncodedRun",
    "StoredRun",
    "append_in_one_statement",
    "append_message",
    "bump_session",
    "encode_run",
    "store_run",
    "stored_run",
    "violates_run_key",
]


class Bumped(NamedTuple):
    """What ``bump_session`` reserved, and the session row it reserved it on."""

    last_sequence: int
    run_count: int
    parent_session_id: str | None


c = sessions.c
r = session_runs.c
_DISPLAY = {"parent_session_id": None, "session_type": 0, "title": None, "agent_name": None}
_RETURNED = (c.last_sequence, c.run_count, c.parent_session_id)


@cache
def bump_statement(dialect: str) -> Executable:
    """The upsert behind ``bump_session``, with its bound parameters: ``tenant``,
    ``sid``, ``messages``, ``runs``, ``now`` and the display columns. On PostgreSQL and
    SQLite it returns ``last_sequence, run_count, parent_session_id``."""
    now = bindparam("now", type_=UTCDateTime())
    values = {
        "tenant": bindparam("tenant"),
        "session_id": bindparam("sid"),
        "last_sequence": bindparam("messages"),
        "message_count": bindparam("messages"),
        "run_count": bindparam("runs"),
        "created_at": now,
        "updated_at": now,
        **{name: bindparam(name) for name in _DISPLAY},
    }
    bumps = {
        "last_sequence": c.last_sequence + bindparam("messages"),
        "message_count": c.message_count + bindparam("messages"),
        "run_count": c.run_count + bindparam("runs"),
        "updated_at": now,
    }
    return upsert(dialect, sessions, values, bumps, _RETURNED)


@per_dialect
@cache
def _bump(dialect: str) -> Prepared:
    return Prepared(bump_statement(dialect))


_BUMPED = Prepared(
    select(*_RETURNED).where(c.tenant == bindparam("tenant"), c.session_id == bindparam("sid"))
)


def bump_params(
    tenant: str,
    session_id: str,
    *,
    messages: int,
    runs: int,
    now: datetime,
    create: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The parameters of ``bump_statement`` (see ``bump_session``)."""
    params = {"tenant": tenant, "sid": session_id, "messages": messages, "runs": runs, "now": now}
    params.update(_DISPLAY)
    params.update(create or {})
    return params


def bump_session(
    conn: Connection,
    tenant: str,
    session_id: str,
    *,
    messages: int,
    runs: int,
    now: datetime,
    create: dict[str, Any] | None = None,
) -> Bumped:
    """Create the session if needed and reserve ``messages`` sequences and ``runs`` positions.

    One statement that also takes the session's row lock, so concurrent
    appends to one session serialize here and never collide on a sequence.
    ``create`` holds display columns used only when this call creates the row.
    Returns the last reserved sequence and run position, and the row's parent
    (so a caller can refuse a parent that differs from the stored one).
    """
    params = bump_params(tenant, session_id, messages=messages, runs=runs, now=now, create=create)
    result = _bump(conn.dialect.name).execute(conn, params)
    if not capabilities(conn).returning:  # the row is locked: read it back
        result = _BUMPED.execute(conn, {"tenant": tenant, "sid": session_id})
    row = result.one()
    return Bumped(int(row[0]), int(row[1]), row[2])


# One row per entry; the first five values are shared by every row of a run.
_MESSAGE_COLUMNS = (
    *("tenant", "session_id", "request_id", "run_id", "created_at"),
    *("sequence", "entry_type", "call_id", "entry_json"),
)
_INSERT_MESSAGES = Prepared(messages.insert().values({c: bindparam(c) for c in _MESSAGE_COLUMNS}))
# One Raw Log message: every column but ``updated_at`` (set by later edits only).
_INSERT_MESSAGE = Prepared(
    messages.insert().values(
        {c.name: bindparam(c.name) for c in messages.columns if c.name != "updated_at"}
    )
)
_RUN_COLUMNS = (
    *("tenant", "session_id", "run_id", "position", "first_sequence"),
    *("entry_count", "meta_json", "created_at"),
)
prepare_insert_ignore(session_runs, _RUN_COLUMNS)  # store_run's run row


def _append_in_one_statement(sharing: bool) -> Executable:
    """PostgreSQL: a whole append as one statement, run without BEGIN/COMMIT.

    Data-modifying CTEs: the session counter bump (which takes the row lock
    that serializes appends to one session), the run row, then the entries,
    numbered from the run's first sequence, and (``sharing``) the references
    they make to shared values, counted. A run id already stored makes the
    run row's insert, and with it the whole statement, fail (unique
    violation): nothing of it stays, the bump and the counts included.

    The entries and the counts are referenced by nothing, so PostgreSQL runs
    them after the main query, in this order: the session's row is locked
    before any ``lovia_contents`` row, as every other writer does. Their values
    travel as ``text[]`` (counts as decimal, data as base64), a type asyncpg
    encodes without asking the server (``TEXT_ARRAY``).
    """
    bump = cast(Insert, bump_statement("postgresql")).cte("bump")
    tenant = bindparam("tenant", type_=String())
    sid = bindparam("sid", type_=String())
    run_id = bindparam("run_id", type_=String())
    count = bindparam("messages", type_=BigInteger())
    now = bindparam("now", type_=UTCDateTime())
    one = literal_column("1", BigInteger())
    run = (
        session_runs.insert()
        .from_select(
            list(_RUN_COLUMNS),
            select(
                tenant,
                sid,
                run_id,
                bump.c.run_count,
                bump.c.last_sequence - count + one,
                count,
                bindparam("meta_json", type_=Text()),
                now,
            ),
        )
        .returning(r.first_sequence)
        .cte("run")
    )
    entries = func.unnest(
        bindparam("entry_types", type_=TEXT_ARRAY),
        bindparam("call_ids", type_=TEXT_ARRAY),
        bindparam("documents", type_=TEXT_ARRAY),
    ).table_valued("entry_type", "call_id", "entry_json", with_ordinality="ordinality")
    entries = entries.render_derived(name="given")
    rows = messages.insert().from_select(
        list(_MESSAGE_COLUMNS),
        select(
            tenant,
            sid,
            run_id,
            run_id,
            now,
            run.c.first_sequence + entries.c.ordinality - one,
            entries.c.entry_type,
            entries.c.call_id,
            entries.c.entry_json,
        ).select_from(run.join(entries, true())),
    )
    appended = select(run.c.first_sequence).add_cte(rows.cte("entries"))
    if not sharing:
        return appended
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    given = func.unnest(
        bindparam("digests", type_=TEXT_ARRAY),
        bindparam("counts", type_=TEXT_ARRAY),
        bindparam("sizes", type_=TEXT_ARRAY),
        bindparam("values", type_=TEXT_ARRAY),
    ).table_valued("digest", "refs", "size", "data")
    given = given.render_derived(name="shared")
    counted = pg_insert(contents).from_select(
        ["tenant", "digest", "refs", "size", "data"],
        select(
            tenant,
            given.c.digest,
            sql_cast(given.c.refs, BigInteger()),
            sql_cast(given.c.size, BigInteger()),
            func.decode(given.c.data, literal_column("'base64'")),
        ),
    )
    counted = counted.on_conflict_do_update(
        index_elements=list(contents.primary_key.columns),
        set_={"refs": contents.c.refs + counted.excluded.refs},
    )
    return appended.add_cte(counted.cte("counted"))


_APPEND_IN_ONE_STATEMENT = Prepared.only_on("postgresql", lambda: _append_in_one_statement(False))
_APPEND_SHARING_IN_ONE_STATEMENT = Prepared.only_on(
    "postgresql", lambda: _append_in_one_statement(True)
)

RUN_STORED = select(r.position).where(
    r.tenant == bindparam("tenant"),
    r.session_id == bindparam("sid"),
    r.run_id == bindparam("run_id"),
)
_RUN_KEY = session_runs.primary_key.name


class EncodedRun(NamedTuple):
    """A run's entries as stored: each one's type, call id and JSON document.

    What ``append`` writes, built once from any entry model (ours, or a
    framework's own at the integration boundary).
    """

    types: list[str]
    call_ids: list[str | None]
    documents: list[str]


def encode_run(entries: Sequence[object]) -> EncodedRun:
    """The run as stored, its entries checked as ``check_entries`` checks them."""
    checked, documents = encode_entries(entries)
    return EncodedRun(
        [entry.type for entry in checked], [call_id_of(entry) for entry in checked], documents
    )


class StoredRun(NamedTuple):
    """A run as its rows hold it: entries and meta through the Database's codec
    (``stored_run``), and the long values the entries share, which the transaction
    that writes them must count (``retain_shared``)."""

    types: list[str]
    call_ids: list[str | None]
    entries: Encoding
    meta_json: str | None

    @property
    def shares(self) -> bool:
        """Whether writing it counts references to shared values."""
        return bool(self.entries.shared)


def stored_run(
    codec: DocumentCodec, tenant: str, meta_json: str | None, run: EncodedRun
) -> StoredRun:
    """``run`` and its meta encoded for ``tenant``, touching no database. Entries are
    shareable (they hold the tool outputs); the meta is compressed or sealed only."""
    entries = encode_documents(codec, tenant, run.documents, shareable=True)
    meta = encode_documents(codec, tenant, [meta_json]).stored[0]
    return StoredRun(run.types, run.call_ids, entries, meta)


def append_in_one_statement(
    codec: DocumentCodec, tenant: str, session_id: str, run_id: str, run: StoredRun
) -> tuple[Prepared, dict[str, Any]]:
    """``store_run`` as one statement and its parameters, for backends with
    ``one_statement_writes``: a stored run id makes it fail whole, the bump and
    the counts of the values it shares included (``violates_run_key`` tells
    that failure)."""
    documents = run.entries.stored
    bump = bump_params(tenant, session_id, messages=len(documents), runs=1, now=utcnow())
    params = {
        **bump,
        "run_id": run_id,
        "meta_json": run.meta_json,
        "entry_types": run.types,
        "call_ids": run.call_ids,
        "documents": documents,
    }
    if not run.shares:
        return _APPEND_IN_ONE_STATEMENT, params
    from pybase64 import b64encode

    rows = shared_rows(codec, tenant, run.entries)
    params["digests"] = [row["digest"] for row in rows]
    params["counts"] = [str(row["refs"]) for row in rows]
    params["sizes"] = [str(row["size"]) for row in rows]
    params["values"] = [b64encode(row["data"]).decode() for row in rows]
    return _APPEND_SHARING_IN_ONE_STATEMENT, params


def violates_run_key(conflict: ConflictError) -> bool:
    """Whether ``conflict`` broke the run key (where the driver names the constraint)."""
    cause = conflict.__cause__
    return isinstance(cause, IntegrityError) and violated_constraint(cause) == _RUN_KEY


def store_run(conn: Connection, tenant: str, session_id: str, run_id: str, run: StoredRun) -> bool:
    """Write one run and its entries in the caller's transaction: the bump, the run
    row, the references its entries make (``retain``), the entries. False
    (with the session already bumped: roll back) when the run id is stored."""
    now = utcnow()
    documents = run.entries.stored
    count = len(documents)
    bumped = bump_session(conn, tenant, session_id, messages=count, runs=1, now=now)
    first = bumped.last_sequence - count + 1
    run_row = {
        "tenant": tenant,
        "session_id": session_id,
        "run_id": run_id,
        "position": bumped.run_count,
        "first_sequence": first,
        "entry_count": count,
        "meta_json": run.meta_json,
        "created_at": now,
    }
    if not insert_ignore(conn, session_runs, run_row):
        return False
    if count:
        retain_shared(conn, tenant, run.entries)
        shared = {
            "tenant": tenant,
            "session_id": session_id,
            "request_id": run_id,
            "run_id": run_id,
            "created_at": now,
        }
        rows = [
            {"sequence": first + i, "entry_type": kind, "call_id": call_id, "entry_json": document}
            for i, (kind, call_id, document) in enumerate(
                zip(run.types, run.call_ids, documents, strict=True)
            )
        ]
        _INSERT_MESSAGES.execute(conn, shared, rows)
    return True


def append_message(
    conn: Connection, tenant: str, session_id: str, row: dict[str, Any], *, create: dict[str, Any]
) -> Bumped:
    """Reserve the next sequence for one message and insert ``row`` under it.

    ``create`` holds the display columns used only when this creates the
    session. The caller checks the returned parent and raises to roll back.
    """
    now = utcnow()
    bumped = bump_session(conn, tenant, session_id, messages=1, runs=0, now=now, create=create)
    message = {**row, "tenant": tenant, "sequence": bumped.last_sequence, "created_at": now}
    _INSERT_MESSAGE.execute(conn, message)
    return bumped
