"""Writing a compaction snapshot: the version is claimed first, then the boundary checked.

The version is claimed by a conditional update of the session row
(``snapshot_version = expected + 1 WHERE snapshot_version = expected``), so
of racing writers exactly one matches, in one process or many; the others
see a stale version and get ``SnapshotConflictError``. Any refusal raises,
which rolls the claim back with the rest of the transaction.

What a refusal says is a ``SnapshotWording``: ours by default; a framework
integration passes its framework's own sentences, which its callers match on.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select, update

from ...db.tables import messages, sessions, snapshots
from ...db.types import utcnow
from ...errors import SnapshotConflictError, UserError
from .ids import new_uuid7
from .models import CompactedMessage, ContextSnapshot
from .stored import store_snapshot

__all__ = ["SnapshotWording", "write_snapshot"]

m = messages.c
s = sessions.c
p = snapshots.c


@dataclass(frozen=True)
class SnapshotWording:
    """The errors a refused snapshot raises, one builder per reason."""

    def no_messages(self, sid: str, boundary: int) -> Exception:
        return UserError(f"session {sid!r} has no raw messages to compact")

    def not_stored(self, sid: str, boundary: int) -> Exception:
        return UserError(
            f"compacted_through_sequence {boundary} is not a stored sequence of session {sid!r}"
        )

    def not_advancing(self, sid: str, boundary: int, before: int) -> Exception:
        return UserError(
            f"compacted_through_sequence {boundary} must advance beyond the previous "
            f"snapshot's boundary {before}"
        )

    def conflict(self, sid: str, expected: int, actual: int) -> Exception:
        return SnapshotConflictError(session_id=sid, expected=expected, actual=actual)


OURS = SnapshotWording()

LAST_VERSION = 2**31 - 1
"""The largest snapshot version the column holds (an INTEGER on every backend)."""


def write_snapshot(
    conn: Connection,
    tenant: str,
    sid: str,
    summary: CompactedMessage,
    boundary: int,
    expected: int,
    *,
    envelope_json: str | None = None,
    wording: SnapshotWording = OURS,
) -> ContextSnapshot:
    """Store snapshot ``expected + 1`` of ``tenant``'s session ``sid`` covering sequences
    up to ``boundary``.

    ``envelope_json`` is a framework's own summary message, kept whole beside ours.
    """
    mine = (s.tenant == tenant, s.session_id == sid)
    claimed = None
    if expected < LAST_VERSION:  # a larger one is stale (or the last): never bound
        claimed = conn.execute(
            update(sessions)
            .where(*mine, s.snapshot_version == expected)
            .values(snapshot_version=s.snapshot_version + 1)
        )
    if claimed is None or claimed.rowcount != 1:
        query = select(s.snapshot_version).where(*mine)
        actual = (conn.execute(query)).scalar()
        if actual is None and expected == 0:
            raise wording.no_messages(sid, boundary)
        if actual == expected == LAST_VERSION:
            raise UserError(
                f"session {sid!r} holds snapshot version {actual}, the last one a "
                "database can number: it takes no further snapshot"
            )
        raise wording.conflict(sid, expected, actual or 0)
    _check_boundary(conn, tenant, sid, boundary, expected, wording)
    now = utcnow()
    snapshot = ContextSnapshot(
        id=new_uuid7(),
        session_id=sid,
        version=expected + 1,
        compacted_message=summary,
        compacted_through_sequence=boundary,
        created_at=now,
        updated_at=now,
    )
    summary_json, envelope_json = store_snapshot(
        conn, tenant, summary.model_dump_json(), envelope_json
    )
    conn.execute(
        snapshots.insert().values(
            tenant=tenant,
            session_id=sid,
            version=snapshot.version,
            snapshot_id=snapshot.id,
            compacted_through_sequence=boundary,
            summary_json=summary_json,
            envelope_json=envelope_json,
            created_at=now,
            updated_at=now,
        )
    )
    return snapshot


def _check_boundary(
    conn: Connection,
    tenant: str,
    sid: str,
    boundary: int,
    previous: int,
    wording: SnapshotWording,
) -> None:
    """The boundary names a stored message beyond the previous snapshot's boundary."""
    stored = conn.execute(
        select(m.sequence).where(m.tenant == tenant, m.session_id == sid, m.sequence == boundary)
    )
    if stored.first() is None:
        raise wording.not_stored(sid, boundary)
    if previous:
        query = select(p.compacted_through_sequence).where(
            p.tenant == tenant, p.session_id == sid, p.version == previous
        )
        before = (conn.execute(query)).scalar()
        if before is not None and boundary <= before:
            raise wording.not_advancing(sid, boundary, before)
