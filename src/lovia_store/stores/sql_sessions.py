"""``SQLSession``: lovia's session contract on the shared Raw Log schema.

A session's entries are rows of ``lovia_messages`` in sequence order; each
finished run also has a ``lovia_session_runs`` row (its position, the range it
covers, its meta) whose primary key makes ``append`` idempotent by run id.
Messages written one at a time through the Raw Log API belong to no run: in
the segment view, consecutive messages that share a ``request_id`` form one
segment whose run id is that request id and whose meta is None.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Connection,
    String,
    Text,
    bindparam,
    delete,
    func,
    literal_column,
    null,
    select,
    true,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.dml import Insert

from .._json import load_object
from ..db.dialect import bump_params, bump_session, bump_statement, insert_ignore
from ..db.errors import violated_constraint
from ..db.prepared import Prepared
from ..db.tables import messages, session_runs, sessions, snapshots
from ..db.text_sql import byte_length, utf8_bytes, utf8_bytes_every_row
from ..db.types import UTCDateTime, utcnow
from ..entries import (
    MULTIPLE_ENTRIES,
    ToolResultEntry,
    TranscriptEntry,
    call_id_of,
    entries_from_json_rows,
    entry_to_json,
    expand_documents,
)
from .checkpoint_models import Checkpointer
from .entry_rows import drop_dangling_in_rows, entry_cut, rewrite_row
from .segments import (
    Segment,
    check_append,
    check_call_ids,
    check_count,
    check_id,
    trim_entry,
)
from .sql_base import SQLStore, StoreTarget
from .sql_checkpoints import delete_runs

__all__ = ["EncodedRun", "SQLSession", "SQLiteSession", "encode_run"]

E = TypeVar("E")

m = messages.c
r = session_runs.c
# One row per entry; the first four values are shared by every row of a run.
_MESSAGE_COLUMNS = (
    *("session_id", "request_id", "run_id", "created_at"),
    *("sequence", "entry_type", "call_id", "entry_json"),
)
_INSERT_MESSAGES = Prepared(messages.insert().values({c: bindparam(c) for c in _MESSAGE_COLUMNS}))
_RUN_COLUMNS = (
    *("session_id", "run_id", "position", "first_sequence"),
    *("entry_count", "meta_json", "created_at"),
)


# Arrays are sent as text[], an array type asyncpg encodes without first asking
# the server about it (only text[] and oid[] are built in): any other costs each
# new connection a type introspection query (2-7 ms) on its first use.
_TEXTS = ARRAY(Text())


def _append_in_one_statement() -> Prepared:
    """PostgreSQL: a whole append as one statement, run without BEGIN/COMMIT.

    Data-modifying CTEs: the session counter bump (which takes the row lock
    that serializes appends to one session), the run row, then the entries,
    numbered from the run's first sequence. A run id already stored makes the
    run row's insert, and with it the whole statement, fail (unique
    violation): nothing of it stays, the bump included.
    """
    bump = cast(Insert, bump_statement("postgresql")).cte("bump")
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
        bindparam("entry_types", type_=_TEXTS),
        bindparam("call_ids", type_=_TEXTS),
        bindparam("documents", type_=_TEXTS),
    ).table_valued("entry_type", "call_id", "entry_json", with_ordinality="ordinality")
    entries = entries.render_derived(name="given")
    rows = messages.insert().from_select(
        list(_MESSAGE_COLUMNS),
        select(
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
    return Prepared(select(run.c.first_sequence).add_cte(rows.cte("entries")))


_APPEND_IN_ONE_STATEMENT = _append_in_one_statement()

# Reads built once with bound parameters (no construction or cache key per call).
# Entry documents are read as UTF-8 bytes on SQLite (see utf8_bytes), and by the
# reads of a whole session on asyncpg too.
_DOCUMENT = utf8_bytes(m.entry_json).label("entry_json")
_EVERY_DOCUMENT = utf8_bytes_every_row(m.entry_json).label("entry_json")
_LOAD = select(_EVERY_DOCUMENT).where(m.session_id == bindparam("sid")).order_by(m.sequence)
_BATCH = (
    select(m.sequence, _DOCUMENT)
    .where(m.session_id == bindparam("sid"), m.sequence > bindparam("after"))
    .order_by(m.sequence)
    .limit(bindparam("size", type_=BigInteger))
)
_SEGMENT_ROWS = (
    select(m.sequence, m.request_id, m.run_id, _EVERY_DOCUMENT)
    .where(m.session_id == bindparam("sid"))
    .order_by(m.sequence)
)
# Tool results a trim may shorten. Whether an output already ends with the
# marker is for trim_entry to say: the sentinel in a document may as well end a
# string of its raw value, its parts or its call id.
_NO_CUTOFF = 2**63 - 1
_TRIM_BATCH = 256
_SID = bindparam("sid", type_=String())
_TRIM_CANDIDATES = Prepared(
    select(m.sequence, _DOCUMENT).where(
        m.session_id == _SID,
        m.sequence < bindparam("cutoff", type_=BigInteger()),
        m.entry_type == "tool_result",
        byte_length(m.entry_json) > bindparam("keep", type_=BigInteger),  # bytes >= characters
    )
)
# An adopted zett envelope holds the untrimmed output: it goes too, or the
# space would not be reclaimed.
_TRIM = Prepared(
    update(messages)
    .where(m.session_id == bindparam("sid"), m.sequence == bindparam("seq"))
    .values(
        entry_json=bindparam("doc"),
        envelope_json=null(),
        updated_at=bindparam("now", type_=UTCDateTime()),
    )
)


def _trim_in_one_statement() -> Prepared:
    """PostgreSQL: every shortened output written by one ``UPDATE ... FROM unnest``."""
    given = (
        func.unnest(bindparam("seqs", type_=_TEXTS), bindparam("docs", type_=_TEXTS))
        .table_valued("seq", "doc")
        .render_derived(name="given")
    )
    return Prepared(
        update(messages)
        .where(m.session_id == bindparam("sid"), m.sequence == given.c.seq.cast(BigInteger))
        .values(
            entry_json=given.c.doc,
            envelope_json=null(),
            updated_at=bindparam("now", type_=UTCDateTime()),
        )
    )


_TRIM_IN_ONE_STATEMENT = _trim_in_one_statement()
_SEGMENT_RUNS = (
    select(r.run_id, r.first_sequence, r.entry_count, r.meta_json)
    .where(r.session_id == bindparam("sid"))
    .order_by(r.position)
)


_RUN_STORED = select(r.position).where(
    r.session_id == bindparam("sid"), r.run_id == bindparam("run_id")
)
_RUN_KEY = session_runs.primary_key.name


class _AlreadyStored(Exception):
    """Rolls back an append whose run id is already stored (the idempotent no-op)."""


class EncodedRun(NamedTuple):
    """A run's entries as stored: each one's type, call id and JSON document.

    What ``append`` writes, built once from any entry model (ours, or a
    framework's own at the integration boundary).
    """

    types: list[str]
    call_ids: list[str | None]
    documents: list[str]


def encode_run(entries: Sequence[TranscriptEntry]) -> EncodedRun:
    return EncodedRun(
        [entry.type for entry in entries],
        [call_id_of(entry) for entry in entries],
        [entry_to_json(entry) for entry in entries],
    )


def _store_run(
    conn: Connection, session_id: str, run_id: str, meta_json: str | None, run: EncodedRun
) -> bool:
    """Write one run and its entries; False (with the session already bumped: roll
    back) when the run id is stored. One statement on PostgreSQL (which leaves
    nothing behind when it finds the run id stored), three elsewhere."""
    now = utcnow()
    count = len(run.documents)
    bump = bump_params(session_id, messages=count, runs=1, now=now)
    if conn.dialect.name == "postgresql":
        params = {
            **bump,
            "run_id": run_id,
            "meta_json": meta_json,
            "entry_types": run.types,
            "call_ids": run.call_ids,
            "documents": run.documents,
        }
        try:
            _APPEND_IN_ONE_STATEMENT.execute(conn, params)
        except IntegrityError as exc:
            # A violation of the run key is the no-op, even when a clear() has
            # removed the run since. Where the driver names no constraint, or
            # another one, the run is looked up.
            if violated_constraint(exc) != _RUN_KEY:
                key = {"sid": session_id, "run_id": run_id}
                if conn.execute(_RUN_STORED, key).first() is None:
                    raise
            return False
        return True
    bumped = bump_session(conn, session_id, messages=count, runs=1, now=now)
    first = bumped.last_sequence - count + 1
    run_row = {
        "session_id": session_id,
        "run_id": run_id,
        "position": bumped.run_count,
        "first_sequence": first,
        "entry_count": count,
        "meta_json": meta_json,
        "created_at": now,
    }
    if not insert_ignore(conn, session_runs, run_row):
        return False
    if count:
        shared = {
            "session_id": session_id,
            "request_id": run_id,
            "run_id": run_id,
            "created_at": now,
        }
        rows = [
            {"sequence": first + i, "entry_type": kind, "call_id": call_id, "entry_json": document}
            for i, (kind, call_id, document) in enumerate(zip(*run, strict=True))
        ]
        _INSERT_MESSAGES.execute(conn, shared, rows)
    return True


class SQLSession(SQLStore):
    """Lovia sessions on any SQL backend; see ``Session`` for the contract."""

    def __init__(self, target: StoreTarget) -> None:
        super().__init__(target)

    # -- reading --------------------------------------------------------------

    async def load(self, session_id: str) -> list[TranscriptEntry]:
        """Every entry of the session, in order (the flat view of ``segments``)."""
        return entries_from_json_rows(await self.load_documents(session_id))

    async def load_documents(self, session_id: str) -> Sequence[str | bytes]:
        """``load`` as the stored JSON documents (for adapters with entry models of their own)."""
        check_id(session_id, "session_id")

        def work(conn: Connection) -> Sequence[str | bytes]:
            return conn.execute(_LOAD, {"sid": session_id}).scalars().all()

        # One document per entry: a row holding several (a zett message) is split.
        return expand_documents(await self.database.read(work, single_statement=True))

    def iter_entries(self, session_id: str, *, batch: int = 1000) -> AsyncIterator[TranscriptEntry]:
        """The entries of ``load``, in order, read ``batch`` at a time: for sessions too
        big to hold. Memory stays bounded by one batch whatever the session's length.

        Each batch is one read transaction, a key range on the sequence (an index
        seek, so the last batch costs what the first did). Entries appended while
        iterating may or may not be included at the end; an entry is never
        yielded twice or out of order. Arguments are checked here, not at the
        first iteration.
        """
        check_id(session_id, "session_id")
        check_count(batch, "batch", minimum=1)
        return self._batches(session_id, batch)

    async def _batches(self, session_id: str, size: int) -> AsyncIterator[TranscriptEntry]:
        after = 0
        while True:

            def work(conn: Connection, after: int = after) -> Sequence[Any]:
                params = {"sid": session_id, "after": after, "size": size}
                return conn.execute(_BATCH, params).all()

            rows = await self.database.read(work, single_statement=True)
            for entry in entries_from_json_rows([row.entry_json for row in rows]):
                yield entry
            if len(rows) < size:
                return
            after = rows[-1].sequence

    async def segments(self, session_id: str) -> list[Segment]:
        parts = await self.segment_parts(session_id, entries_from_json_rows)
        return [Segment(run_id, entries, meta) for run_id, entries, meta in parts]

    async def segment_parts(
        self, session_id: str, decode: Callable[[Sequence[str | bytes]], list[E]]
    ) -> list[tuple[str, list[E], dict[str, Any] | None]]:
        """``segments`` as (run id, entries, meta), the entries decoded from their stored
        documents by ``decode`` (for adapters with entry models of their own)."""
        check_id(session_id, "session_id")

        def work(conn: Connection) -> tuple[Sequence[Any], Sequence[Any]]:
            rows = conn.execute(_SEGMENT_ROWS, {"sid": session_id}).all()
            runs = conn.execute(_SEGMENT_RUNS, {"sid": session_id}).all()
            return rows, runs

        rows, runs = await self.database.read(work)
        return _build_segments(rows, runs, decode)

    # -- writing --------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        entries: Sequence[TranscriptEntry],
        *,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Store one finished run atomically; a stored ``run_id`` makes this a no-op."""
        run_id, stored, meta_json = check_append(session_id, entries, run_id, meta)
        await self.append_encoded(session_id, run_id, meta_json, encode_run(stored))
        return run_id

    async def append_encoded(
        self, session_id: str, run_id: str, meta_json: str | None, run: EncodedRun
    ) -> None:
        """``append`` of a run already checked and encoded (ids, meta JSON, documents)."""
        check_call_ids(run.call_ids)

        def work(conn: Connection) -> None:
            if not _store_run(conn, session_id, run_id, meta_json, run):
                raise _AlreadyStored

        # On PostgreSQL the append is one statement, atomic and idempotent by run id.
        with contextlib.suppress(_AlreadyStored):
            await self.database.write(work, single_statement=True)

    async def clear(self, session_id: str) -> None:
        """Delete the session: its entries, runs, snapshots and identity."""
        check_id(session_id, "session_id")

        def work(conn: Connection) -> None:
            delete_session_rows(conn, session_id)

        await self.database.write(work)

    async def trim_tool_results(
        self, session_id: str, *, keep_chars: int = 400, keep_runs: int = 1
    ) -> int:
        """Truncate stored tool outputs older than the last ``keep_runs`` runs.

        Order, count and call-id pairing are preserved and a trimmed output is
        recognised by its marker, so running it again is a no-op. Returns how
        many outputs were trimmed.
        """
        check_id(session_id, "session_id")
        check_count(keep_chars, "keep_chars", minimum=0)
        check_count(keep_runs, "keep_runs", minimum=0)

        def work(conn: Connection) -> int:
            cutoff = _first_kept_sequence(conn, session_id, keep_runs)
            params = {"sid": session_id, "cutoff": _NO_CUTOFF if cutoff is None else cutoff}
            candidates = _TRIM_CANDIDATES.execute(conn, {**params, "keep": keep_chars})
            changes: list[dict[str, Any]] = []
            # Decoded a batch at a time: one validation call per batch, memory
            # bounded by a batch of (possibly huge) outputs.
            while rows := candidates.fetchmany(_TRIM_BATCH):
                entries = entries_from_json_rows([document for _, document in rows])
                for (sequence, _), entry in zip(rows, entries, strict=True):
                    assert isinstance(entry, ToolResultEntry)
                    short = trim_entry(entry, keep_chars)
                    if short is not None:
                        doc = entry_to_json(short)
                        changes.append({"seq": sequence, "doc": doc})
            shared = {"sid": session_id, "now": utcnow()}
            if changes and conn.dialect.name == "postgresql":
                seqs = [str(change["seq"]) for change in changes]
                docs = [change["doc"] for change in changes]
                _TRIM_IN_ONE_STATEMENT.execute(conn, {**shared, "seqs": seqs, "docs": docs})
            elif changes:
                _TRIM.execute(conn, shared, changes)
            return len(changes)

        return await self.database.write(work)

    async def rewind(
        self, session_id: str, *, keep_entries: int, checkpointer: Checkpointer | None = None
    ) -> int:
        """Drop everything after the first ``keep_entries`` entries of ``load()``.

        Whole later runs go; the run the cut lands in is truncated, loses its
        dangling tool calls and its meta. Compaction snapshots that cover any
        removed entry go too. With ``checkpointer``, the checkpoints of every
        run the cut touched are deleted as well (in the same transaction when
        the checkpointer shares this database), so a later resume cannot
        replay the undone tail. Returns the number of entries removed.
        """
        check_id(session_id, "session_id")
        check_count(keep_entries, "keep_entries", minimum=0)
        same_database = getattr(checkpointer, "database", None) is self.database

        def work(conn: Connection) -> tuple[int, list[str]]:
            removed, touched = rewind_rows(conn, session_id, keep_entries)
            if same_database:
                delete_runs(conn, touched)
            return removed, touched

        removed, touched = await self.database.write(work)
        if checkpointer is not None and not same_database:
            for run_id in touched:
                await checkpointer.delete(run_id)
        return removed


class SQLiteSession(SQLSession):
    """``SQLSession`` on a SQLite file; ``wal=True`` for files shared by several writers."""

    def __init__(self, path: str | os.PathLike[str], *, wal: bool = False) -> None:
        SQLStore.__init__(self, path, wal=wal)


def _build_segments(
    rows: Sequence[Any],
    runs: Sequence[Any],
    decode: Callable[[Sequence[str | bytes]], list[E]],
) -> list[tuple[str, list[E], dict[str, Any] | None]]:
    # Rows unpack as tuples: (sequence, request_id, run_id, entry_json) and
    # (run_id, first_sequence, entry_count, meta_json), in the statements' order.
    # Decoded a segment at a time: a row may hold several entries (a zett message).
    documents = [document for _, _, _, document in rows]
    metas = {run_id: meta_json for run_id, _, _, meta_json in runs}
    # Runs with no entries have no rows to carry them; they sit before the
    # message that followed them, the first whose sequence is not below theirs
    # (by sequence, not by row: a rewind leaves the sequences it removed unused).
    empty = [(first, run_id) for run_id, first, count, _ in runs if count == 0]
    out: list[tuple[str, list[E], dict[str, Any] | None]] = []
    key: tuple[str | None, str] | None = None
    start = 0
    emitted = 0

    def flush(end: int) -> None:
        if key is not None and end > start:
            run_id, request_id = key
            meta = load_object(metas.get(run_id)) if run_id is not None else None
            entries = decode(expand_documents(documents[start:end]))
            out.append((run_id or request_id, entries, meta))

    for index, (sequence, request_id, run_id, _) in enumerate(rows):
        while emitted < len(empty) and empty[emitted][0] <= sequence:
            flush(index)
            start, key = index, None
            out.append((empty[emitted][1], [], load_object(metas[empty[emitted][1]])))
            emitted += 1
        row_key = (run_id, request_id)
        if row_key != key:
            flush(index)
            start, key = index, row_key
    flush(len(rows))
    for _, run_id in empty[emitted:]:
        out.append((run_id, [], load_object(metas[run_id])))
    return out


_ROWS_BELOW = Prepared(
    select(m.sequence, m.run_id, m.request_id, m.entry_type, m.call_id)
    .where(
        m.session_id == _SID,
        m.sequence < bindparam("below", type_=BigInteger()),
    )
    .order_by(m.sequence.desc())
    .limit(bindparam("size", type_=BigInteger()))
)


def _rows_below(conn: Connection, session_id: str, below: int) -> Iterator[Any]:
    """The session's rows before sequence ``below``, last first, as
    ``(sequence, run_id, request_id, entry_type, call_id)``.

    Read in growing keyset pages: callers stop after the last few segments,
    usually a few dozen rows, and a server driver would otherwise fetch the
    keys of the session's whole prefix.
    """
    size = 64
    while True:
        rows = _ROWS_BELOW.execute(conn, {"sid": session_id, "below": below, "size": size}).all()
        yield from rows
        if len(rows) < size:
            return
        below, size = rows[-1][0], min(size * 4, 4096)


_EMPTY_RUNS = Prepared(
    select(r.first_sequence)
    .where(r.session_id == _SID, r.entry_count == 0)
    .order_by(r.first_sequence.desc())
)


def _first_kept_sequence(conn: Connection, session_id: str, keep_runs: int) -> int | None:
    """The first sequence of the last ``keep_runs`` segments (None: keep nothing).

    Runs without entries are segments too (lovia counts them): one with first
    sequence ``f`` sits after every row below ``f`` and before the others.
    """
    if keep_runs == 0:
        return None
    empty = [first for (first,) in _EMPTY_RUNS.execute(conn, {"sid": session_id}).all()]
    seen = 0
    key: tuple[str | None, str] | None = None
    first: int | None = None
    for sequence, run_id, request_id, _, _ in _rows_below(conn, session_id, _NO_CUTOFF):
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


# Rewind's statements, prepared: a rewind is rare in a process,
# so SQLAlchemy's per-statement first-use work would cost more than SQLite's.
_CUT = bindparam("cut", type_=BigInteger())
_CUT_ROW = Prepared(
    select(m.sequence, m.run_id, m.request_id)
    .where(m.session_id == _SID)
    .order_by(m.sequence)
    .limit(1)
    .offset(bindparam("keep", type_=BigInteger))
)
_DELETE_TAIL = Prepared(delete(messages).where(m.session_id == _SID, m.sequence >= _CUT))
_DELETE_ONE = Prepared(
    delete(messages).where(m.session_id == _SID, m.sequence == bindparam("seq", type_=BigInteger))
)
# Runs after the cut. A run without entries at the cut (first sequence up to
# "empty_after", the cut unless it lands inside a row) stays, as in lovia.
_LATER_RUNS = (r.session_id == _SID) & (
    ((r.entry_count > 0) & (r.first_sequence >= _CUT))
    | ((r.entry_count == 0) & (r.first_sequence > bindparam("empty_after", type_=BigInteger())))
)
_SELECT_LATER_RUNS = Prepared(select(r.run_id).where(_LATER_RUNS))
_DELETE_LATER_RUNS = Prepared(delete(session_runs).where(_LATER_RUNS))
_CUT_RUN = (r.session_id == _SID) & (r.run_id == bindparam("cut_run_id", type_=String()))
_SHORTEN_CUT_RUN = Prepared(
    update(session_runs)
    .where(_CUT_RUN)
    .values(meta_json=null(), entry_count=bindparam("remaining", type_=BigInteger()))
)
_DELETE_CUT_RUN = Prepared(delete(session_runs).where(_CUT_RUN))
_DELETE_COVERING_SNAPSHOTS = Prepared(
    delete(snapshots).where(
        snapshots.c.session_id == _SID,
        snapshots.c.compacted_through_sequence >= bindparam("lowest", type_=BigInteger()),
    )
)
_REWOUND_SESSION = Prepared(
    update(sessions)
    .where(sessions.c.session_id == _SID)
    .values(
        message_count=sessions.c.message_count - bindparam("removed", type_=BigInteger()),
        updated_at=bindparam("now", type_=UTCDateTime()),
    )
)
# Once snapshots went, the session's version is that of the newest one left
# (while none goes it already is: every writer keeps it so).
_RESET_SNAPSHOT_VERSION = Prepared(
    update(sessions)
    .where(sessions.c.session_id == _SID)
    .values(
        snapshot_version=select(func.coalesce(func.max(snapshots.c.version), 0))
        .where(snapshots.c.session_id == _SID)
        .scalar_subquery()
    )
)


def rewind_rows(conn: Connection, session_id: str, keep_entries: int) -> tuple[int, list[str]]:
    """Rewind inside the caller's transaction; returns the entries removed and the
    ids of the runs the cut truncated or deleted.

    Rows are entries, except the rare row that holds several (a zett-agent
    message, ``entry_rows``): where a session has any, the cut is found by
    counting entries, a row it lands inside keeps its prefix, and dangling
    calls inside such rows go too.
    """
    plan = entry_cut(conn, session_id, keep_entries)
    keep_rows = keep_entries if plan is None else plan.keep_rows
    changed: list[int] = []  # sequences of multi-entry rows shortened
    cut_row = _CUT_ROW.execute(conn, {"sid": session_id, "keep": keep_rows}).first()
    if plan is not None and plan.split is not None:
        # The first entry removed is inside a row: that row's segment is the cut one.
        split_sequence, split_kept = plan.split
        split_row = _CUT_ROW.execute(conn, {"sid": session_id, "keep": keep_rows - 1}).one()
        rewrite_row(conn, session_id, split_sequence, split_kept)
        changed.append(split_sequence)
        cut = split_sequence + 1 if cut_row is None else cut_row[0]
        _, cut_run_id, cut_request_id = split_row
        below = split_sequence + 1
        empty_after = split_sequence  # the split row's removed entries come first
    elif cut_row is None:
        return 0, []
    else:
        cut, cut_run_id, cut_request_id = cut_row
        below = empty_after = cut
    at_cut = {"sid": session_id, "cut": cut}
    # The part of the cut segment that stays: contiguous rows before the cut
    # with the same run/request. Its tool calls without a result go too.
    kept_part: list[tuple[int, str, str | None]] = []  # (sequence, entry_type, call_id)
    for sequence, run_id, request_id, entry_type, call_id in _rows_below(conn, session_id, below):
        if (run_id, request_id) != (cut_run_id, cut_request_id):
            break
        kept_part.append((sequence, entry_type, call_id))
    answered = {
        call_id
        for _, entry_type, call_id in kept_part
        if entry_type == "tool_result" and call_id is not None
    }
    dangling = [
        sequence
        for sequence, entry_type, call_id in kept_part
        if entry_type == "tool_call" and call_id not in answered
    ]
    rows_removed = int(_DELETE_TAIL.execute(conn, at_cut).rowcount)
    removed = rows_removed if plan is None else plan.dropped
    if dangling:
        _DELETE_ONE.execute(conn, {"sid": session_id}, [{"seq": seq} for seq in dangling])
        removed += len(dangling)
        rows_removed += len(dangling)
    multiple = [seq for seq, entry_type, _ in kept_part if entry_type == MULTIPLE_ENTRIES]
    if multiple:
        dropped, emptied, shortened = drop_dangling_in_rows(conn, session_id, multiple, answered)
        removed += dropped
        rows_removed += emptied
        changed += shortened
    later = {**at_cut, "empty_after": empty_after}
    touched = [run_id for (run_id,) in _SELECT_LATER_RUNS.execute(conn, later).all()]
    if cut_run_id is not None and cut_run_id not in touched:
        touched.append(cut_run_id)
    _DELETE_LATER_RUNS.execute(conn, later)
    if cut_run_id is not None and kept_part:
        remaining = len(kept_part) - len(dangling)
        cut_run = {"sid": session_id, "cut_run_id": cut_run_id, "remaining": remaining}
        (_SHORTEN_CUT_RUN if remaining else _DELETE_CUT_RUN).execute(conn, cut_run)
    lowest_removed = min([cut, *dangling, *changed])
    covering = {"sid": session_id, "lowest": lowest_removed}
    if _DELETE_COVERING_SNAPSHOTS.execute(conn, covering).rowcount:
        _RESET_SNAPSHOT_VERSION.execute(conn, {"sid": session_id})
    rewound = {"sid": session_id, "removed": rows_removed, "now": utcnow()}
    _REWOUND_SESSION.execute(conn, rewound)
    return removed, touched


def delete_session_rows(conn: Connection, session_id: str) -> bool:
    """Delete a session and everything it owns; True when it existed."""
    for table in (messages, session_runs, snapshots):
        conn.execute(delete(table).where(table.c.session_id == session_id))
    result = conn.execute(delete(sessions).where(sessions.c.session_id == session_id))
    return bool(result.rowcount)
