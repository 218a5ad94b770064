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
from .reading import read_records
from .records import encode_record

__all__ = ["Summary", "Tally", "summarize"]

_CHECKPOINT_SIDE = frozenset({"run", "run_entry", "tool_effect", "run_lease"})


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
    tally, hasher = summary.checkpoints, hashlib.sha256()
    checkpoints = hashlib.sha256()
    async for record in read_records(db):
        if record.kind == "session":
            if tally is not summary.checkpoints:
                tally.digest = hasher.hexdigest()
            tally, hasher = Tally(), hashlib.sha256()
            summary.sessions[record.row["session_id"]] = tally
        elif record.kind in _CHECKPOINT_SIDE and tally is not summary.checkpoints:
            tally.digest = hasher.hexdigest()
            tally, hasher = summary.checkpoints, checkpoints
        tally.counts[record.kind] += 1
        hasher.update(encode_record(record) + b"\n")
    if tally is not summary.checkpoints:
        tally.digest = hasher.hexdigest()
    summary.checkpoints.digest = checkpoints.hexdigest()
    return summary
