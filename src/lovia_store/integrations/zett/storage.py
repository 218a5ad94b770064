"""zett-agent's ``SQLSessionStorage`` and ``SQLiteSessionStorage``, on lovia-store's schema.

The methods zett's persistence extensions call (``load``, ``append``,
``snapshot``) and the ones ``SQLSessionExtension`` forwards (sessions,
paging, counts), with zett's signatures, zett's types and zett's error
wording. Underneath is the core Raw Log storage's SQL: the same statements,
the same transactions, the same rows (``lovia_sessions``, ``lovia_messages``,
``lovia_snapshots``); only the conversion at the edge is zett's.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import (
    ContextSnapshot,
    RawMessageRecord,
    SessionSummary,
    SessionView,
)
from zett_agent.json_types import JsonValue
from zett_agent.messages import AnyMessage, AssistantMessage
from zett_agent.model import ModelUsage
from zett_agent.sync_runtime import SyncMethodsMixin

from ...db.store import SQLStore, StoreTarget
from ...entries import Usage
from ...errors import DefaultPathWarning, UserError
from ...sessions.raw_log import models as core
from ...sessions.raw_log import session_rows
from ...sessions.raw_log.appends import PendingMessage
from ...sessions.raw_log.reads import read_page, read_view
from ...sessions.raw_log.rules import check_durations, session_row_values
from ...sessions.raw_log.snapshots import write_snapshot
from ...sessions.raw_log.storage import default_path
from ...validation import check_id, check_integer, check_tenant
from . import codec, rules
from .records import records_from_rows, summary_from_row, view_from

__all__ = ["SQLSessionStorage", "SQLiteSessionStorage", "default_path"]


def zett_default_path() -> Path:
    """``~/.zett-agent/sessions.sqlite3``: where zett-agent's storage lives when given no path."""
    return Path.home() / ".zett-agent" / "sessions.sqlite3"


def default_target(opened: str, *, depth: int) -> Path:
    """Our default file, for ``opened`` (the class built with no path), warning first when
    zett's default file exists and ours holds no session.

    A user switching from zett-agent with no path would otherwise see an empty history
    and no word why. zett's file is never opened instead: the first use converts it in
    place, which only a caller who names it should cause. ``depth`` is how many frames
    lie between the caller and the user's line, which the warning points at.
    """
    ours, zetts = default_path(), zett_default_path()
    if _is_nonempty_file(zetts) and not _holds_a_session(ours):
        warnings.warn(
            f"{opened}() with no path opens lovia-store's default file {ours}, which holds "
            f"no session, but zett-agent's default file {zetts} exists: zett-agent's "
            f"history is there, not here. To use it, pass its path: {opened}({str(zetts)!r}) "
            "(its first use converts it to lovia-store's schema in place, keeping a copy "
            f"beside it; zett-agent then no longer opens it). To start afresh, pass {opened}"
            f"({str(ours)!r}).",
            DefaultPathWarning,
            stacklevel=2 + depth,
        )
    return ours


def _is_nonempty_file(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def _holds_a_session(path: Path) -> bool:
    """Whether our file has a session row; read-only, so nothing is created or migrated.
    A file that cannot be read counts as holding one: the store itself says what is wrong."""
    if not _is_nonempty_file(path):
        return False
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=1)
        ) as conn:
            return conn.execute("SELECT 1 FROM lovia_sessions LIMIT 1").fetchone() is not None
    except sqlite3.OperationalError as exc:
        return "no such table" not in str(exc)
    except sqlite3.Error:
        return True


class SQLSessionStorage(SQLStore, SyncMethodsMixin):
    """zett-agent's session storage on any database lovia-store runs on.

    ``target`` is a URL (``postgresql://…``, ``mysql+asyncmy://…``,
    ``sqlite+aiosqlite:///…``), a SQLite path, an ``AsyncEngine`` you own, or
    a ``lovia_store.Database`` that other stores share. None is the SQLite file
    ``~/.lovia-store/sessions.sqlite3`` (not zett's ``~/.zett-agent/…``: a
    zett file is converted in place when opened, so it is opened only when
    named; ``DefaultPathWarning`` says so when zett's file exists and ours holds
    no session). The schema is brought to the current revision on first use, and a
    file zett-agent wrote is adopted by that migration.

    ``database`` is the ``Database`` underneath; ``path``, ``engine``,
    ``dialect`` and ``url`` are what zett's storage exposes (``engine`` is the
    ``Database``'s engine: for a SQLite file lovia-store opens, the pysqlite
    engine its writer threads use, not an ``AsyncEngine``).

    ``tenant`` scopes every session id (and parent) the storage takes; None is
    the ``Database``'s tenant (the default tenant, which is how zett-agent's own
    rows are kept). See docs/tenants.md.
    """

    def __init__(self, target: StoreTarget | None = None, *, tenant: str | None = None) -> None:
        if target is None:
            target = default_target(type(self).__name__, depth=1)
        super().__init__(target, tenant=tenant)
        self.dialect = self.database.dialect
        self.url = self.database.url
        self.path: Path | None = self.database.sqlite_path

    @property
    def engine(self) -> Any:
        return self.database.engine

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
        """Create an empty session before its first Raw Log message is appended."""
        sid = rules.check_new_session_id(session_id)
        values = session_row_values(
            rules.check_parent(parent_session_id, sid),
            rules.check_display(title, "title"),
            rules.check_display(agent_name, "agent_name"),
            rules.check_session_type(session_type),
        )

        now = await session_rows.create(self.database, self.tenant, sid, values, _exists)
        return SessionSummary(
            session_id=sid, message_count=0, **values, created_at=now, updated_at=now
        )

    async def get_session(self, session_id: str) -> SessionSummary | None:
        """One session's storage metadata, without its messages; None if unknown."""
        check_id(session_id, "session_id")

        row = await session_rows.summary(self.database, self.tenant, session_id)
        return None if row is None else summary_from_row(row)

    async def update_session(
        self, session_id: str, *, title: str | None = None, agent_name: str | None = None
    ) -> SessionSummary | None:
        """Change the display values given (stripped); None if the session is unknown."""
        check_id(session_id, "session_id")
        if title is None and agent_name is None:
            raise UserError("At least one session field must be supplied")
        changes = {
            name: value
            for name, value in (
                ("title", rules.check_display(title, "title")),
                ("agent_name", rules.check_display(agent_name, "agent_name")),
            )
            if value is not None
        }

        row = await session_rows.update_display(self.database, self.tenant, session_id, changes)
        return None if row is None else summary_from_row(row)

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session, its raw messages and its snapshots; True when it existed."""
        check_id(session_id, "session_id")
        return await session_rows.delete(self.database, self.tenant, session_id)

    async def list_sessions(
        self, *, session_types: Sequence[int] | None = None, limit: int = 100, offset: int = 0
    ) -> list[SessionSummary]:
        """One page of sessions, latest activity first (ties: higher id first)."""
        limit, offset = rules.check_page(limit, offset)
        codes = rules.check_session_types(session_types)
        rows = await session_rows.page(self.database, self.tenant, codes, limit, offset)
        return [summary_from_row(row) for row in rows]

    async def count_messages(self, session_id: str) -> int:
        """How many raw messages the session holds (0 if unknown), from its session row."""
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
        """One chronological page of the immutable Raw Log, ignoring snapshots."""
        check_id(session_id, "session_id")
        after, through = rules.check_bounds(after_sequence, through_sequence)
        limit, offset = rules.check_page(limit, offset)

        rows = await read_page(
            self.database,
            self.tenant,
            session_id,
            after_sequence=after,
            through_sequence=through,
            limit=limit,
            offset=offset,
        )
        return records_from_rows(rows)

    async def load(self, session_id: str) -> SessionView:
        """The latest snapshot and the raw messages after its boundary; empty if unknown."""
        check_id(session_id, "session_id")
        return view_from(await read_view(self.database, self.tenant, session_id))

    async def append(
        self,
        session_id: str,
        request_id: str,
        message: AnyMessage,
        timing: MessageTiming | None = None,
        parent_session_id: str | None = None,
        title: str | None = None,
        agent_name: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        tags: Mapping[str, JsonValue] | None = None,
        usage: ModelUsage | None = None,
    ) -> int:
        """Append one original message; returns its sequence (1, 2, 3, … per session).

        The first append creates the session (with the parent, title and agent
        name given); a later one that names a title or agent name sets it, as
        zett's storage does. The parent never changes. One transaction whose
        cost does not grow with the session.
        """
        sid = check_id(session_id, "session_id")
        rid = check_id(request_id, "request_id")
        shown_title = rules.check_display(title, "title")
        shown_agent = rules.check_display(agent_name, "agent_name")
        if usage is not None and not isinstance(message, AssistantMessage):
            raise UserError("Model usage belongs only to assistant messages")
        metadata_json = rules.encode_context(metadata, "Message metadata", nonempty_keys=False)
        tags_json = rules.encode_context(tags, "Message tags", nonempty_keys=True)
        envelope = codec.encode_envelope(message)
        pending = PendingMessage.build(
            self.tenant,
            sid,
            rid,
            codec.project(envelope),
            timing=_timing(timing),
            parent=rules.check_parent(parent_session_id, sid),
            title=shown_title,
            agent_name=shown_agent,
            metadata_json=metadata_json,
            tags_json=tags_json,
            usage=_usage(usage),
            envelope_json=envelope,
            update_display=True,
            on_parent_mismatch=rules.parent_mismatch,
        )
        return await self.database.write(pending.write, tenant=self.tenant)

    async def snapshot(
        self,
        session_id: str,
        compacted_message: CompactedMessage,
        compacted_through_sequence: int,
        expected_version: int,
    ) -> ContextSnapshot:
        """Store a compaction checkpoint, checking the version optimistically.

        A stale ``expected_version`` raises ``SnapshotConflictError`` ("Snapshot
        conflict; reload the session"). Raw messages are never changed.
        """
        sid = check_id(session_id, "session_id")
        envelope = codec.encode_compacted(compacted_message)
        summary = core.CompactedMessage(content=codec.summary_text(compacted_message))
        boundary = check_integer(compacted_through_sequence, "compacted_through_sequence")
        expected = check_integer(expected_version, "expected_version")
        tenant = self.tenant

        def work(conn: Connection) -> core.ContextSnapshot:
            return write_snapshot(
                conn,
                tenant,
                sid,
                summary,
                boundary,
                expected,
                envelope_json=envelope,
                wording=rules.ZETT_SNAPSHOTS,
            )

        stored = await self.database.write(work, tenant=tenant)
        return ContextSnapshot(
            id=stored.id,
            session_id=sid,
            version=stored.version,
            compacted_message=compacted_message,
            compacted_through_sequence=boundary,
            created_at=stored.created_at,
            updated_at=stored.updated_at,
        )


class SQLiteSessionStorage(SQLSessionStorage):
    """The storage on one SQLite file (None: ``~/.lovia-store/sessions.sqlite3``, with a
    ``DefaultPathWarning`` when zett's default file exists and ours holds no session).

    Parent folders are created at construction, as zett's storage does. ``tenant``
    as for ``SQLSessionStorage``.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, tenant: str | None = None
    ) -> None:
        if tenant is not None:
            check_tenant(tenant)  # before a folder is made for a refused store
        if path is None:
            path = default_target(type(self).__name__, depth=1)
        file = Path(path).expanduser()
        try:  # zett's documented behaviour; the core store creates only the file's own folder
            file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise UserError(f"{file}: cannot create its folder: {exc}") from exc
        super().__init__(file, tenant=tenant)


def _exists(sid: str) -> Exception:
    return UserError(f"Session already exists: {sid}")


def _timing(timing: MessageTiming | None) -> core.MessageTiming:
    """zett's timing as ours; a naive time is UTC, which is how zett reads its own back."""
    if timing is None:
        return core.MessageTiming.instant()
    if not isinstance(timing, MessageTiming):
        raise UserError(f"timing must be a MessageTiming or None, not {type(timing).__name__}")
    values: dict[str, Any] = {}
    for name in core.TIMING_FIELDS:
        value = getattr(timing, name)
        values[name] = _aware(value) if isinstance(value, datetime) else value
    return check_durations(core.MessageTiming.model_construct(**values))


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _usage(usage: ModelUsage | None) -> Usage | None:
    if usage is None:
        return None
    if not isinstance(usage, ModelUsage):
        raise UserError(f"usage must be a ModelUsage or None, not {type(usage).__name__}")
    # Each counter fits a BIGINT column on every backend (SQLite overflowed at 2**63).
    return Usage(**{name: check_integer(getattr(usage, name), f"usage.{name}") for name in _USAGE})


_USAGE = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
