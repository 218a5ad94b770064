"""``SQLSessionStorage``: zett-agent's session storage API on the shared Raw Log schema.

The same tables as ``SQLSession``: a session is a ``lovia_sessions`` row, a
raw message is a ``lovia_messages`` row (its transcript entry plus request id,
metadata, tags, timing and usage), a compaction checkpoint is a
``lovia_snapshots`` row. Every call is one transaction; races are settled by
the database (an upsert that reserves the sequence, a conditional update of
the snapshot version), never by reading first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue
from sqlalchemy import Connection, select

from ...db.store import SQLStore, StoreTarget
from ...db.tables import sessions
from ...entries import TranscriptEntry, Usage
from ...errors import ConflictError, UserError
from ...validation import check_id
from ..fork import fork_rows
from . import session_rows
from .appends import PendingMessage
from .models import (
    CompactedMessage,
    ContextSnapshot,
    MessageTiming,
    RawMessageRecord,
    SessionSummary,
    SessionView,
)
from .reads import read_page, read_view, view_from
from .records import SUMMARY_COLUMNS, records_from_rows, summary_from_row
from .rules import (
    MAX_AGENT_NAME,
    MAX_TITLE,
    check_compacted,
    check_count,
    check_display,
    check_new_session_id,
    check_parent,
    check_session_type,
    check_session_types,
    session_row_values,
)
from .snapshots import write_snapshot

if TYPE_CHECKING:
    from .sync_view import SyncRuntime, SyncSessionStorage

__all__ = ["SQLSessionStorage", "SQLiteSessionStorage", "default_path"]

s = sessions.c


def default_path() -> Path:
    """``~/.lovia-store/sessions.sqlite3``: where a storage built without a target lives."""
    return Path.home() / ".lovia-store" / "sessions.sqlite3"


def _prepare(target: StoreTarget | None) -> StoreTarget:
    """The target to open: None is the default file (``Database`` creates its folders)."""
    return default_path() if target is None else target


class SQLSessionStorage(SQLStore):
    """zett-agent's ``SessionStorage`` API on any SQL backend.

    ``target`` is a ``Database``, an ``AsyncEngine``, a URL or a SQLite path;
    None means the SQLite file ``~/.lovia-store/sessions.sqlite3`` (parent
    folders are created at construction). That default holds personal data:
    libraries and tests should always pass their own target.

    The Raw Log is immutable through this API: messages are only appended,
    and snapshots never touch them. The log is the same one ``SQLSession``
    reads and writes (see docs/storage.md).

    ``tenant`` scopes every session id (and parent, and idempotency key) the
    storage takes: the same id in another tenant is another session, never seen
    here (None: the ``Database``'s tenant; see docs/tenants.md).
    """

    def __init__(self, target: StoreTarget | None = None, *, tenant: str | None = None) -> None:
        super().__init__(_prepare(target), tenant=tenant)

    # -- sessions ------------------------------------------------------------

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        parent_session_id: str | None = None,
        title: str | None = None,
        agent_name: str | None = None,
        session_type: int = 0,
    ) -> SessionSummary:
        """Create an empty session (a new UUIDv7 id when none is given).

        Display values are stripped; a session that exists already is refused.
        """
        sid = check_new_session_id(session_id)
        values = session_row_values(
            check_parent(parent_session_id, sid),
            check_display(title, "title", MAX_TITLE),
            check_display(agent_name, "agent_name", MAX_AGENT_NAME),
            check_session_type(session_type),
        )

        now = await session_rows.create(self.database, self.tenant, sid, values, _exists)
        return SessionSummary(
            session_id=sid, message_count=0, **values, created_at=now, updated_at=now
        )

    async def fork(
        self, session_id: str, new_session_id: str, *, keep_entries: int
    ) -> SessionSummary:
        """Copy the session's first ``keep_entries`` entries (lovia's view, as
        ``SQLSession.fork``) into a new session ``new_session_id``; returns its summary.

        Raw messages are copied whole (entry, envelope, metadata, tags, timing,
        usage, request id), numbered 1..n; the origin is untouched. An unknown
        origin, an existing ``new_session_id`` or a count past the end raise
        ``UserError`` and change nothing.
        """
        check_id(session_id, "session_id")
        new_id = check_id(new_session_id, "new_session_id")
        keep = check_count(keep_entries, "keep_entries", minimum=0)
        tenant = self.tenant

        def work(conn: Connection) -> Any:
            fork_rows(conn, tenant, session_id, new_id, keep)
            query = select(*SUMMARY_COLUMNS).where(s.tenant == tenant, s.session_id == new_id)
            return conn.execute(query).one()

        return summary_from_row(await self.database.write(work, tenant=tenant))

    async def get_session(self, session_id: str) -> SessionSummary | None:
        """The session's summary without its messages, or None."""
        check_id(session_id, "session_id")
        row = await session_rows.summary(self.database, self.tenant, session_id)
        return None if row is None else summary_from_row(row)

    async def update_session(
        self, session_id: str, *, title: str | None = None, agent_name: str | None = None
    ) -> SessionSummary | None:
        """Change the display values given (None leaves one as it is); None if no such session.

        At least one must be given. Identity, parent and messages never change.
        """
        check_id(session_id, "session_id")
        if title is None and agent_name is None:
            raise UserError("update_session needs a title or an agent_name (or both)")
        changes: dict[str, Any] = {
            name: value
            for name, value in (
                ("title", check_display(title, "title", MAX_TITLE)),
                ("agent_name", check_display(agent_name, "agent_name", MAX_AGENT_NAME)),
            )
            if value is not None
        }

        row = await session_rows.update_display(self.database, self.tenant, session_id, changes)
        return None if row is None else summary_from_row(row)

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session, its raw messages and snapshots; True when it existed."""
        check_id(session_id, "session_id")
        return await session_rows.delete(self.database, self.tenant, session_id)

    async def list_sessions(
        self, *, session_types: Sequence[int] | None = None, limit: int = 100, offset: int = 0
    ) -> list[SessionSummary]:
        """One page of sessions, latest activity first (ties: higher id first).

        ``session_types`` keeps only those type codes (None or empty: all).
        Message counts come from the session rows; no payload is read.
        """
        codes = check_session_types(session_types)
        limit = check_count(limit, "limit", minimum=1)
        offset = check_count(offset, "offset", minimum=0)
        rows = await session_rows.page(self.database, self.tenant, codes, limit, offset, stale=True)
        return [summary_from_row(row) for row in rows]

    async def count_messages(self, session_id: str) -> int:
        """How many raw messages the session holds (0 for an unknown one); reads one row."""
        check_id(session_id, "session_id")
        return await session_rows.message_count(self.database, self.tenant, session_id)

    # -- the Raw Log ----------------------------------------------------------

    async def list_raw_messages(
        self,
        session_id: str,
        *,
        after_sequence: int = 0,
        through_sequence: int | None = None,
        limit: int = 10_000,
        offset: int = 0,
    ) -> list[RawMessageRecord]:
        """One page of the Raw Log in sequence order, ignoring snapshots.

        ``after_sequence`` is an exclusive lower bound (>= 0), ``through_sequence``
        an inclusive upper bound (>= 1, or None); ``offset`` (>= 0) and ``limit``
        (>= 1) page within that range. Deep pages cost what the first one does.
        """
        check_id(session_id, "session_id")
        after = check_count(after_sequence, "after_sequence", minimum=0)
        through = (
            None
            if through_sequence is None
            else check_count(through_sequence, "through_sequence", minimum=1)
        )
        limit = check_count(limit, "limit", minimum=1)
        offset = check_count(offset, "offset", minimum=0)

        rows = await read_page(
            self.database,
            self.tenant,
            session_id,
            after_sequence=after,
            through_sequence=through,
            limit=limit,
            offset=offset,
            stale=True,
        )
        return records_from_rows(rows)

    async def load(self, session_id: str) -> SessionView:
        """The latest snapshot and every raw message after its boundary, in order.

        An unknown session gives an empty view and creates nothing.
        """
        check_id(session_id, "session_id")
        return view_from(await read_view(self.database, self.tenant, session_id))

    async def append(
        self,
        session_id: str,
        request_id: str,
        message: TranscriptEntry,
        timing: MessageTiming | None = None,
        parent_session_id: str | None = None,
        title: str | None = None,
        agent_name: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        tags: Mapping[str, JsonValue] | None = None,
        usage: Usage | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """Append one message; returns its sequence (1, 2, 3, ... per session).

        The first append creates the session with ``parent_session_id``,
        ``title`` and ``agent_name`` (later appends do not change them). The
        parent is immutable: it must equal the stored one (None for a root
        session). ``request_id`` correlates, it never deduplicates. No
        ``timing`` records an instantaneous message; ``metadata`` and ``tags``
        are JSON objects (tag keys non-empty); ``usage`` only with an entry
        the assistant produced. Costs the same at any session length.

        ``idempotency_key`` makes the append safe to re-issue, after an
        ``OutcomeUnknownError`` say: a key the session already holds returns that
        message's sequence and writes nothing (whatever the rest of the call says).
        """
        tenant = self.tenant
        pending = PendingMessage.check(
            tenant,
            session_id,
            request_id,
            message,
            timing,
            parent_session_id,
            title,
            agent_name,
            metadata,
            tags,
            usage,
            idempotency_key,
        )
        keyed = pending.write if pending.key else None
        try:
            return await self.database.write(pending.write, resolve=keyed, tenant=tenant)
        except ConflictError:
            # Two re-issues (or a lost COMMIT's settling) raced past the lookup: the
            # unique key let one in.
            found = await self.database.read(pending.stored, tenant=tenant) if pending.key else None
            if found is None:
                raise
            return found

    async def snapshot(
        self,
        session_id: str,
        compacted_message: CompactedMessage,
        compacted_through_sequence: int,
        expected_version: int,
    ) -> ContextSnapshot:
        """Store a compaction checkpoint covering sequences up to ``compacted_through_sequence``.

        Optimistic: ``expected_version`` must be the latest snapshot version
        (0 before the first), else ``SnapshotConflictError``. The boundary must
        be a stored sequence beyond the previous snapshot's. Raw messages are
        never changed. Returns the new snapshot (version ``expected_version + 1``).
        """
        sid = check_id(session_id, "session_id")
        summary = check_compacted(compacted_message)
        boundary = check_count(compacted_through_sequence, "compacted_through_sequence", minimum=1)
        expected = check_count(expected_version, "expected_version", minimum=0)
        tenant = self.tenant

        def work(conn: Connection) -> ContextSnapshot:
            return write_snapshot(conn, tenant, sid, summary, boundary, expected)

        return await self.database.write(work, tenant=tenant)

    # -- blocking use ------------------------------------------------------------

    def sync(self, *, runtime: SyncRuntime | None = None) -> SyncSessionStorage:
        """A context-managed blocking view of this storage, for plain functions.

        Without ``runtime`` the view runs its own background event loop and
        stops it on exit; with one, it reuses that loop and leaves its shutdown
        to the caller.
        """
        from .sync_view import SyncSessionStorage

        return SyncSessionStorage(self, runtime=runtime)


def _exists(sid: str) -> Exception:
    return UserError(f"session {sid!r} already exists")


class SQLiteSessionStorage(SQLSessionStorage):
    """``SQLSessionStorage`` on a SQLite file (None: ``~/.lovia-store/sessions.sqlite3``).

    ``wal=True`` selects WAL journaling, for files several processes write;
    ``tenant`` as for ``SQLSessionStorage``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        wal: bool = False,
        tenant: str | None = None,
    ) -> None:
        SQLStore.__init__(self, _prepare(path), wal=wal, tenant=tenant)
