"""``trim_tool_results`` in SQL: shorten stored tool outputs older than the last runs.

Whether an output already ends with the marker is for ``trim_entry`` to say:
the sentinel in a document may as well end a string of its raw value, its
parts or its call id.

A trimmed entry is stored anew through the codec and the old one's shared values
are released, in the trim's transaction (which holds the session's row first, as
every edit that releases does: ``stored.lock_session``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, func, null, select, update
from sqlalchemy.sql import Executable

from ..db.contents import read_documents, release_documents, store_documents
from ..db.dialect import capabilities
from ..db.prepared import Prepared
from ..db.tables import messages, session_runs
from ..db.text_sql import byte_length
from ..db.types import TEXT_ARRAY, UTCDateTime, utcnow
from ..entries import ToolResultEntry, entries_from_json_rows, entry_to_json, session_rows
from .reads import DOCUMENT, SID, TENANT, rows_below
from .stored import condensed, lock_session, referring, stored_text
from .trimming import trim_entry

__all__ = ["NO_CUTOFF", "trim_rows"]

m = messages.c
r = session_runs.c
NO_CUTOFF = 2**63 - 1
_TRIM_BATCH = 256
_TRIM_CANDIDATES = Prepared(
    select(m.sequence, DOCUMENT).where(
        m.tenant == TENANT,
        m.session_id == SID,
        m.sequence < bindparam("cutoff", type_=BigInteger()),
        m.entry_type == "tool_result",
        # bytes >= characters, but for documents stored shorter than their text
        (byte_length(m.entry_json) > bindparam("keep", type_=BigInteger)) | condensed(m.entry_json),
    )
)
# The rows a trim may rewrite (before the cutoff is known: a superset), locked before
# anything is read. A rekey rewrites rows without the session's lock: this waits for
# it, so the trim reads (and later releases) the documents it replaces, not former
# ones, and on InnoDB its snapshot, taken at its first plain read, comes after.
_LOCK_CANDIDATES = Prepared(
    select(m.sequence)
    .where(
        m.tenant == TENANT,
        m.session_id == SID,
        m.entry_type == "tool_result",
        (byte_length(m.entry_json) > bindparam("keep", type_=BigInteger)) | condensed(m.entry_json),
    )
    .with_for_update()
)
# An adopted zett envelope holds the untrimmed output: it goes too, or the
# space would not be reclaimed.
_TRIM = Prepared(
    update(messages)
    .where(
        m.tenant == bindparam("tenant"),
        m.session_id == bindparam("sid"),
        m.sequence == bindparam("seq"),
    )
    .values(
        entry_json=bindparam("doc"),
        envelope_json=null(),
        updated_at=bindparam("now", type_=UTCDateTime()),
    )
)


def _trim_in_one_statement() -> Executable:
    """PostgreSQL: every shortened output written by one ``UPDATE ... FROM unnest``."""
    given = (
        func.unnest(bindparam("seqs", type_=TEXT_ARRAY), bindparam("docs", type_=TEXT_ARRAY))
        .table_valued("seq", "doc")
        .render_derived(name="given")
    )
    return (
        update(messages)
        .where(
            m.tenant == bindparam("tenant"),
            m.session_id == bindparam("sid"),
            m.sequence == given.c.seq.cast(BigInteger),
        )
        .values(
            entry_json=given.c.doc,
            envelope_json=null(),
            updated_at=bindparam("now", type_=UTCDateTime()),
        )
    )


_TRIM_IN_ONE_STATEMENT = Prepared.only_on("postgresql", _trim_in_one_statement)
_EMPTY_RUNS = Prepared(
    select(r.first_sequence)
    .where(r.tenant == TENANT, r.session_id == SID, r.entry_count == 0)
    .order_by(r.first_sequence.desc())
)


def first_kept_sequence(
    conn: Connection, tenant: str, session_id: str, keep_runs: int
) -> int | None:
    """The first sequence of the last ``keep_runs`` segments (None: keep nothing).

    Runs without entries are segments too (lovia counts them): one with first
    sequence ``f`` sits after every row below ``f`` and before the others.
    """
    if keep_runs == 0:
        return None
    ids = {"tenant": tenant, "sid": session_id}
    empty = [first for (first,) in _EMPTY_RUNS.execute(conn, ids).all()]
    seen = 0
    key: tuple[str | None, str] | None = None
    first: int | None = None
    for sequence, run_id, request_id, _, _ in rows_below(conn, tenant, session_id, NO_CUTOFF):
        while empty and empty[0] > sequence:  # a run without entries after this row
            if seen == keep_runs:
                return first
            seen, first, key = seen + 1, empty.pop(0), None
        if (run_id, request_id) != key:
            if seen == keep_runs:
                return first
            seen += 1
            key = (run_id, request_id)
        first = sequence
    for before_every_row in empty:
        if seen == keep_runs:
            return first
        seen, first = seen + 1, before_every_row
    return 0


def trim_rows(
    conn: Connection, tenant: str, session_id: str, keep_chars: int, keep_runs: int
) -> int:
    """Trim inside the caller's transaction; returns how many outputs were shortened."""
    lock_session(conn, tenant, session_id)
    if conn.dialect.name != "sqlite":  # SQLite's writer holds the whole file already
        _LOCK_CANDIDATES.execute(conn, {"tenant": tenant, "sid": session_id, "keep": keep_chars})
    cutoff = first_kept_sequence(conn, tenant, session_id, keep_runs)
    cut = NO_CUTOFF if cutoff is None else cutoff
    params = {"tenant": tenant, "sid": session_id, "cutoff": cut}
    candidates = _TRIM_CANDIDATES.execute(conn, {**params, "keep": keep_chars})
    changes: list[dict[str, Any]] = []
    replaced: list[str] = []  # the stored entries trimmed that name shared values
    # Decoded a batch at a time: one validation call per batch, memory
    # bounded by a batch of (possibly huge) outputs.
    while rows := candidates.fetchmany(_TRIM_BATCH):
        where = session_rows(session_id, rows)
        documents = read_documents(conn, tenant, [document for _, document in rows], where)
        entries = entries_from_json_rows(documents, where)
        for (sequence, stored), entry in zip(rows, entries, strict=True):
            assert isinstance(entry, ToolResultEntry)
            short = trim_entry(entry, keep_chars)
            if short is not None:
                changes.append({"seq": sequence, "doc": entry_to_json(short)})
                if referring(stored):
                    replaced.append(stored_text(stored))
    if not changes:
        return 0
    # The new documents' values counted before the old ones' are released: a value
    # both name is never deleted and stored again.
    texts = store_documents(conn, tenant, [change["doc"] for change in changes], shareable=True)
    for change, text in zip(changes, texts, strict=True):
        change["doc"] = text
    shared = {"tenant": tenant, "sid": session_id, "now": utcnow()}
    if capabilities(conn).one_statement_writes:
        seqs = [str(change["seq"]) for change in changes]
        docs = [change["doc"] for change in changes]
        _TRIM_IN_ONE_STATEMENT.execute(conn, {**shared, "seqs": seqs, "docs": docs})
    else:
        _TRIM.execute(conn, shared, changes)
    release_documents(conn, tenant, replaced)
    return len(changes)
