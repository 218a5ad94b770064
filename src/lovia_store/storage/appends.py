"""Appending one raw message: the row is built (and checked) first, then written in one go.

The write never reads the history: ``bump_session`` reserves the next
sequence on the session row (creating it on first use, with its display
values) in the upsert that also takes the row lock, and returns the stored
parent, which must be the one the caller named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from ..db.dialect import bump_session
from ..db.tables import messages
from ..db.types import utcnow
from ..entries import call_id_of, entry_to_json
from ..errors import UserError
from ..stores.segments import check_id
from .ids import new_uuid7
from .models import USAGE_FIELDS
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

__all__ = ["PendingMessage"]


@dataclass(frozen=True)
class PendingMessage:
    """A checked message row, waiting for its sequence."""

    session_id: str
    parent: str | None
    create: dict[str, Any]
    row: dict[str, Any]

    @classmethod
    def check(
        cls,
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
    ) -> PendingMessage:
        """Every argument of ``append`` checked; a ``UserError`` names the first bad one."""
        sid = check_id(session_id, "session_id")
        rid = check_id(request_id, "request_id")
        entry = check_entry(message)
        measured = check_timing(timing)
        parent = check_parent(parent_session_id, sid)
        create = session_row_values(
            parent,
            check_display(title, "title", MAX_TITLE),
            check_display(agent_name, "agent_name", MAX_AGENT_NAME),
        )
        counters = check_usage(usage, entry)
        row: dict[str, Any] = {
            "session_id": sid,
            "request_id": rid,
            "run_id": None,
            "entry_type": entry.type,
            "call_id": call_id_of(entry),
            "entry_json": entry_to_json(entry),
            "metadata_json": encode_object(metadata, "metadata"),
            "tags_json": encode_object(tags, "tags", nonempty_keys=True),
            **measured.model_dump(),
            **(counters.model_dump() if counters else dict.fromkeys(USAGE_FIELDS)),
            "message_id": new_uuid7(),
        }
        return cls(sid, parent, create, row)

    def write(self, conn: Connection) -> int:
        """Reserve the next sequence and insert the row; returns the sequence."""
        now = utcnow()
        sid = self.session_id
        bumped = bump_session(conn, sid, messages=1, runs=0, now=now, create=self.create)
        if bumped.parent_session_id != self.parent:
            # Raising rolls the reservation back with everything else.
            raise UserError(
                f"session {sid!r} has parent {bumped.parent_session_id!r}; the parent "
                f"cannot change after creation (got {self.parent!r})"
            )
        conn.execute(
            messages.insert().values(**self.row, sequence=bumped.last_sequence, created_at=now)
        )
        return bumped.last_sequence
