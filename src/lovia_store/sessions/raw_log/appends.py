"""Appending one raw message: the row is built (and checked) first, then written in one go.

The write never reads the history: ``append_message`` (``sessions/log.py``)
reserves the next sequence on the session row (creating it on first use, with its display
values) in the upsert that also takes the row lock, and returns the stored
parent, which must be the one the caller named. The row's documents go in as
stored (``stored.py``), and the long values its entry shares are counted after
that lock, in the same transaction.

A row is a ``Projection`` (the transcript entry, or entries, lovia's view
shows for the message) plus what is stored beside it. Our own API builds it
from one ``TranscriptEntry``; a framework integration builds it from its own
message, keeping that message's envelope whole beside the projection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from ...db.contents import retain_shared
from ...db.prepared import Prepared
from ...db.tables import messages, sessions
from ...entries import (
    MULTIPLE_ENTRIES,
    TranscriptEntry,
    Usage,
    call_id_of,
    entries_document,
    entry_to_json,
)
from ...errors import UserError
from ...validation import check_id
from ..log import append_message
from .ids import new_uuid7
from .models import TIMING_FIELDS, USAGE_FIELDS, MessageTiming
from .rules import (
    MAX_AGENT_NAME,
    MAX_TITLE,
    check_display,
    check_entry,
    check_parent,
    check_timing,
    check_usage,
    encode_object,
    session_row_values,
)
from .stored import encode_message

__all__ = ["ParentMismatch", "PendingMessage", "Projection", "projection_of"]

s = sessions.c
_KEYED = Prepared(
    select(messages.c.sequence).where(
        messages.c.tenant == bindparam("tenant"),
        messages.c.session_id == bindparam("sid"),
        messages.c.idempotency_key == bindparam("key"),
    )
)


@dataclass(frozen=True)
class Projection:
    """The stored projection of one message: its entry type, call id and entry JSON."""

    entry_type: str
    call_id: str | None
    entry_json: str


def projection_of(entries: Sequence[TranscriptEntry]) -> Projection:
    """The projection of a message standing for ``entries`` (one, or several in one row)."""
    if len(entries) == 1:
        entry = entries[0]
        return Projection(entry.type, call_id_of(entry), entry_to_json(entry))
    return Projection(MULTIPLE_ENTRIES, None, entries_document(entries))


ParentMismatch = Callable[[str, str | None, str | None], Exception]
"""Builds the error for a parent that differs from the stored one: (session, stored, given)."""


def _parent_mismatch(sid: str, stored: str | None, given: str | None) -> Exception:
    return UserError(
        f"session {sid!r} has parent {stored!r}; the parent cannot change after creation "
        f"(got {given!r})"
    )


@dataclass(frozen=True)
class PendingMessage:
    """A checked message row, waiting for its sequence.

    ``tenant`` scopes the session (and the idempotency key) the row goes to; the
    parent, too, names a session of that tenant. ``display`` holds title/agent name
    changes applied when the session exists already (empty for our own API, whose
    later appends never change them).
    """

    tenant: str
    session_id: str
    parent: str | None
    create: dict[str, Any]
    row: dict[str, Any]
    display: dict[str, Any]
    on_parent_mismatch: ParentMismatch = _parent_mismatch

    @classmethod
    def check(
        cls,
        tenant: str,
        session_id: object,
        request_id: object,
        message: object,
        timing: object,
        parent_session_id: object,
        title: object,
        agent_name: object,
        metadata: object,
        tags: object,
        usage: object,
        idempotency_key: object = None,
    ) -> PendingMessage:
        """Every argument of ``append`` checked; a ``UserError`` names the first bad one."""
        sid = check_id(session_id, "session_id")
        rid = check_id(request_id, "request_id")
        key = None if idempotency_key is None else check_id(idempotency_key, "idempotency_key")
        entry = check_entry(message)
        projection = projection_of([entry])
        if projection.call_id:  # kept in an id column, as a session append's are
            check_id(projection.call_id, "message call_id")
        measured = check_timing(timing)
        parent = check_parent(parent_session_id, sid)
        shown_title = check_display(title, "title", MAX_TITLE)
        shown_agent = check_display(agent_name, "agent_name", MAX_AGENT_NAME)
        counters = check_usage(usage, entry)
        return cls.build(
            tenant,
            sid,
            rid,
            projection,
            timing=measured,
            parent=parent,
            title=shown_title,
            agent_name=shown_agent,
            metadata_json=encode_object(metadata, "metadata"),
            tags_json=encode_object(tags, "tags", nonempty_keys=True),
            usage=counters,
            idempotency_key=key,
        )

    @classmethod
    def build(
        cls,
        tenant: str,
        session_id: str,
        request_id: str,
        projection: Projection,
        *,
        timing: MessageTiming,
        parent: str | None,
        title: str | None,
        agent_name: str | None,
        metadata_json: str,
        tags_json: str,
        usage: Usage | None,
        envelope_json: str | None = None,
        update_display: bool = False,
        on_parent_mismatch: ParentMismatch = _parent_mismatch,
        idempotency_key: str | None = None,
    ) -> PendingMessage:
        """A row from values already checked (by our rules or a framework's)."""
        row: dict[str, Any] = {
            "session_id": session_id,
            "request_id": request_id,
            "run_id": None,
            "entry_type": projection.entry_type,
            "call_id": projection.call_id,
            "entry_json": projection.entry_json,
            "envelope_json": envelope_json,
            "metadata_json": metadata_json,
            "tags_json": tags_json,
            **{name: getattr(timing, name) for name in TIMING_FIELDS},
            **(usage.model_dump() if usage else dict.fromkeys(USAGE_FIELDS)),
            "message_id": new_uuid7(),
            "idempotency_key": idempotency_key,
        }
        display = (
            {
                name: value
                for name, value in (("title", title), ("agent_name", agent_name))
                if value is not None
            }
            if update_display
            else {}
        )
        create = session_row_values(parent, title, agent_name)
        return cls(tenant, session_id, parent, create, row, display, on_parent_mismatch)

    @property
    def key(self) -> str | None:
        return self.row["idempotency_key"]  # type: ignore[no-any-return]

    def stored(self, conn: Connection) -> int | None:
        """The sequence of the message already stored under this append's key in its
        tenant's session, if any."""
        if self.key is None:
            return None
        key = {"tenant": self.tenant, "sid": self.session_id, "key": self.key}
        found = _KEYED.execute(conn, key).first()
        return None if found is None else int(found[0])

    def write(self, conn: Connection) -> int:
        """Reserve the next sequence and insert the row; returns the sequence (a keyed
        append whose key is stored returns that message's, writing nothing)."""
        sid, tenant = self.session_id, self.tenant
        already = self.stored(conn)
        if already is not None:
            return already
        row, shared = encode_message(conn, tenant, self.row)
        bumped = append_message(conn, tenant, sid, row, create=self.create)
        retain_shared(conn, tenant, shared)  # the session's row first, then its values
        if bumped.parent_session_id != self.parent:
            # Raising rolls the reservation back with everything else.
            raise self.on_parent_mismatch(sid, bumped.parent_session_id, self.parent)
        if self.display:
            # Set whether or not this append created the session (a new row holds
            # these values already): one statement, only when values were given.
            mine = (s.tenant == tenant, s.session_id == sid)
            conn.execute(update(sessions).where(*mine).values(**self.display))
        return bumped.last_sequence
