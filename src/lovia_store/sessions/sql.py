"""``SQLSession``: lovia's session contract on the shared Raw Log schema.

A session's entries are rows of ``lovia_messages`` in sequence order; each
finished run also has a ``lovia_session_runs`` row (its position, the range it
covers, its meta) whose primary key makes ``append`` idempotent by run id.
Messages written one at a time through the Raw Log API belong to no run: in
the segment view, consecutive messages that share a ``request_id`` form one
segment whose run id is that request id and whose meta is None.

Every statement and every call is scoped to the store's ``tenant``: the same session
id in two tenants is two sessions, and no method reaches another tenant's rows.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection

from .._lovia_guard import refuse_lovias_runner
from ..db.contents import read_documents
from ..db.dialect import capabilities
from ..db.store import SQLStore, StoreTarget
from ..entries import (
    TranscriptEntry,
    entries_from_json_rows,
    expand_documents,
    rows_of,
    session_rows,
)
from ..errors import ConflictError
from ..validation import check_call_ids, check_count, check_id
from .contract import ForkOrigin, Segment, check_checkpointer_tenant, checked_append
from .log import (
    RUN_STORED,
    EncodedRun,
    append_in_one_statement,
    encode_run,
    store_run,
    stored_run,
    violates_run_key,
)
from .reads import (
    BATCH,
    LOAD,
    SEGMENT_ROWS,
    SEGMENT_RUNS,
    build_segments,
    decoded_segment_rows,
)
from .stored import one_statement_documents

if TYPE_CHECKING:
    from ..checkpoints.contract import Checkpointer

__all__ = ["SQLSession", "SQLiteSession"]

# The edits (clear, trim, rewind, fork) import their modules where they run: a process
# that only appends and loads never imports them nor builds their statements.

E = TypeVar("E")


class _AlreadyStored(Exception):
    """Rolls back an append whose run id is already stored (the idempotent no-op)."""


class SQLSession(SQLStore):
    """Lovia sessions on any SQL backend; see ``Session`` for the contract.

    ``tenant`` scopes every session id (None: the Database's tenant).
    """

    def __init__(self, target: StoreTarget, *, tenant: str | None = None) -> None:
        super().__init__(target, tenant=tenant)

    # -- reading --------------------------------------------------------------

    async def load(self, session_id: str) -> list[TranscriptEntry]:
        """Every entry of the session, in order (the flat view of ``segments``)."""
        documents = await self.load_documents(session_id)
        # The index a damaged document is named by is its entry's in load().
        return entries_from_json_rows(
            documents, rows_of("lovia_messages", "session_id", session_id)
        )

    async def load_documents(self, session_id: str) -> Sequence[str | bytes]:
        """``load`` as the stored JSON documents (for adapters with entry models of their own)."""
        check_id(session_id, "session_id")

        tenant = self.tenant
        key = {"tenant": tenant, "sid": session_id}
        stored = await self.database.read_one(LOAD, key, first_column=True, tenant=tenant)
        where = rows_of("lovia_messages", "session_id", session_id)
        documents: Sequence[str | bytes] | None
        documents = await one_statement_documents(self.database, tenant, stored, where)
        if documents is None:  # a shared value went meanwhile: the rows and values at once

            def again(conn: Connection) -> list[str | bytes]:
                return read_documents(conn, tenant, conn.execute(LOAD, key).scalars().all(), where)

            documents = await self.database.read(again, tenant=tenant)
        # One document per entry: a row holding several (a zett message) is split.
        return expand_documents(documents, session_rows(session_id))

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
        tenant = self.tenant
        after = 0
        while True:
            params = {"tenant": tenant, "sid": session_id, "after": after, "size": size}
            rows = await self.database.read_one(BATCH, params, tenant=tenant)
            where = session_rows(session_id, rows)
            stored = [row.entry_json for row in rows]
            found = await one_statement_documents(self.database, tenant, stored, where)
            if found is None:  # a shared value went meanwhile: the rows and values at once
                again = functools.partial(self._batch, params=params)
                rows, documents = await self.database.read(again, tenant=tenant)
                where = session_rows(session_id, rows)
            else:
                documents = found
            for entry in entries_from_json_rows(documents, where):
                yield entry
            if len(rows) < size:
                return
            after = rows[-1].sequence

    def _batch(
        self, conn: Connection, params: dict[str, Any]
    ) -> tuple[Sequence[Any], list[str | bytes]]:
        rows = conn.execute(BATCH, params).all()
        where = session_rows(params["sid"], rows)
        return rows, read_documents(conn, self.tenant, [row.entry_json for row in rows], where)

    async def segments(self, session_id: str) -> list[Segment]:
        refuse_lovias_runner(self)  # lovia's Runner calls this first: fail before its model
        where = session_rows(session_id)
        parts = await self.segment_parts(
            session_id, lambda rows: entries_from_json_rows(rows, where)
        )
        return [Segment(run_id, entries, meta) for run_id, entries, meta in parts]

    async def segment_parts(
        self, session_id: str, decode: Callable[[Sequence[str | bytes]], list[E]]
    ) -> list[tuple[str, list[E], dict[str, Any] | None]]:
        """``segments`` as (run id, entries, meta), the entries decoded from their stored
        documents by ``decode`` (for adapters with entry models of their own)."""
        check_id(session_id, "session_id")

        tenant = self.tenant
        key = {"tenant": tenant, "sid": session_id}

        def work(conn: Connection) -> tuple[Sequence[Any], Sequence[Any]]:
            rows = conn.execute(SEGMENT_ROWS, key).all()
            runs = conn.execute(SEGMENT_RUNS, key).all()
            return decoded_segment_rows(conn, tenant, session_id, rows, runs)

        rows, runs = await self.database.read(work, tenant=self.tenant)
        return build_segments(session_id, rows, runs, decode)

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
        run_id, run, meta_json = checked_append(session_id, entries, run_id, meta, encode_run)
        await self.append_encoded(session_id, run_id, meta_json, run)
        return run_id

    async def append_encoded(
        self, session_id: str, run_id: str, meta_json: str | None, run: EncodedRun
    ) -> None:
        """``append`` of a run already checked and encoded (ids, meta JSON, documents)."""
        check_call_ids(run.call_ids)
        tenant = self.tenant
        # Encoded here, before the statement is chosen (and outside SQLite's writer).
        stored = stored_run(self.database.codec, tenant, meta_json, run)

        if capabilities(self.database.dialect).one_statement_writes:
            # One statement, atomic and idempotent by run id: the same append as below.
            codec = self.database.codec
            statement, params = append_in_one_statement(codec, tenant, session_id, run_id, stored)
            try:
                await self.database.write_one(statement, params, tenant=tenant)
            except ConflictError as exc:
                if not await self._run_stored(exc, session_id, run_id):
                    raise
            return

        def work(conn: Connection) -> None:
            if not store_run(conn, tenant, session_id, run_id, stored):
                raise _AlreadyStored

        with contextlib.suppress(_AlreadyStored):
            await self.database.write(work, resolve=work, tenant=tenant)

    async def _run_stored(self, conflict: ConflictError, session_id: str, run_id: str) -> bool:
        """Whether ``conflict`` is the idempotent no-op: the run is stored already.

        A violation of the run key is the no-op, even when a clear() has removed
        the run since. Where the driver names no constraint, or another one, the
        run is looked up.
        """
        if violates_run_key(conflict):
            return True
        key = {"tenant": self.tenant, "sid": session_id, "run_id": run_id}
        return bool(await self.database.read_one(RUN_STORED, key, tenant=self.tenant))

    async def clear(self, session_id: str) -> None:
        """Delete the session: its entries, runs, snapshots and identity."""
        check_id(session_id, "session_id")

        from .rewind import delete_session_rows

        tenant = self.tenant

        def work(conn: Connection) -> None:
            delete_session_rows(conn, tenant, session_id)

        await self.database.write(work, tenant=tenant)

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

        from .trim import trim_rows

        tenant = self.tenant

        def work(conn: Connection) -> int:
            return trim_rows(conn, tenant, session_id, keep_chars, keep_runs)

        return await self.database.write(work, tenant=tenant)

    async def rewind(
        self, session_id: str, *, keep_entries: int, checkpointer: Checkpointer | None = None
    ) -> int:
        """Drop everything after the first ``keep_entries`` entries of ``load()``.

        Whole later runs go; the run the cut lands in is truncated, loses its
        dangling tool calls and its meta. Compaction snapshots that cover any
        removed entry go too. With ``checkpointer``, the checkpoints of every
        run the cut touched are deleted as well (in the same transaction when
        the checkpointer shares this database), so a later resume cannot
        replay the undone tail. Returns the number of entries removed. A
        checkpointer of another tenant is refused (``UserError``): the runs are
        this tenant's.
        """
        check_id(session_id, "session_id")
        check_count(keep_entries, "keep_entries", minimum=0)
        tenant = self.tenant
        check_checkpointer_tenant(tenant, checkpointer)
        same_database = getattr(checkpointer, "database", None) is self.database
        from .rewind import rewind_rows

        def work(conn: Connection) -> tuple[int, list[str]]:
            removed, touched = rewind_rows(conn, tenant, session_id, keep_entries)
            if same_database:
                # Here, not at the top: a session-only process never loads the checkpoint
                # stores (a checkpointer on this database has loaded this module already).
                from ..checkpoints.sql import delete_runs

                delete_runs(conn, tenant, touched)
            return removed, touched

        removed, touched = await self.database.write(work, tenant=tenant)
        if checkpointer is not None and not same_database:
            for run_id in touched:
                await checkpointer.delete(run_id)
        return removed

    async def fork(self, session_id: str, new_session_id: str, *, keep_entries: int) -> int:
        """Copy the first ``keep_entries`` entries of ``load()`` into a new session.

        The non-destructive ``rewind``: the copy is cut as a rewind would cut it
        (the run cut inside keeps its id, loses its dangling tool calls and its
        meta), the origin is untouched, and the new session records its origin
        (``fork_origin``). One transaction. Returns the entries the new session
        holds. An unknown origin, an existing ``new_session_id`` or a count past
        the origin's entries raise ``UserError`` and change nothing. Both sessions
        are this store's tenant's: a fork never crosses tenants.
        """
        check_id(session_id, "session_id")
        check_id(new_session_id, "new_session_id")
        check_count(keep_entries, "keep_entries", minimum=0)

        from .fork import fork_rows

        tenant = self.tenant

        def work(conn: Connection) -> int:
            return fork_rows(conn, tenant, session_id, new_session_id, keep_entries)

        return await self.database.write(work, tenant=tenant)

    async def fork_origin(self, session_id: str) -> ForkOrigin | None:
        """The session and entry count ``session_id`` was forked from; None when it
        was not forked (or does not exist)."""
        check_id(session_id, "session_id")
        from .fork import FORK_ORIGIN

        key = {"tenant": self.tenant, "sid": session_id}
        rows = await self.database.read_one(FORK_ORIGIN, key, tenant=self.tenant)
        if not rows or rows[0][0] is None:
            return None
        return ForkOrigin(rows[0][0], int(rows[0][1]))


class SQLiteSession(SQLSession):
    """``SQLSession`` on a SQLite file; ``wal=True`` for files shared by several writers."""

    def __init__(
        self, path: str | os.PathLike[str], *, wal: bool = False, tenant: str | None = None
    ) -> None:
        SQLStore.__init__(self, path, wal=wal, tenant=tenant)
