"""A database's content summarised: per session its row counts and a content digest.

The digest is SHA-256 over the session's records exactly as an export writes
them (every column, timestamps to the microsecond), in their order; the
checkpoint side has one of its own. Two databases with equal summaries hold
the same rows, so every public read gives the same answers on both.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from ..db.database import Database
from .reading import checkpoint_records, read_sessions, session_records
from .records import encode_record

__all__ = ["Summary", "Tally", "summarize"]


@dataclass
class Tally:
    """Row counts per record type and the digest of those rows."""

    counts: Counter[str] = field(default_factory=Counter)
    digest: str = ""


@dataclass
class Summary:
    """Each session's tally by id, and the checkpoint side's."""

    sessions: dict[str, Tally] = field(default_factory=dict)
    checkpoints: Tally = field(default_factory=Tally)


async def summarize(db: Database) -> Summary:
    """Read every row of ``db`` (in pages, bounded memory) and tally it."""
    summary = Summary()
    async for session in read_sessions(db):
        tally = Tally()
        hasher = hashlib.sha256()
        async for record in session_records(db, session):
            tally.counts[record.kind] += 1
            hasher.update(encode_record(record) + b"\n")
        tally.digest = hasher.hexdigest()
        summary.sessions[session["session_id"]] = tally
    hasher = hashlib.sha256()
    async for record in checkpoint_records(db):
        summary.checkpoints.counts[record.kind] += 1
        hasher.update(encode_record(record) + b"\n")
    summary.checkpoints.digest = hasher.hexdigest()
    return summary
