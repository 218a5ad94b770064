"""A database's content summarised: per session its row counts and a content digest.

The digest is SHA-256 over the session's records exactly as an export writes
them (every column, timestamps to the microsecond, the tenant too), in their
order; the checkpoint side has one of its own. Two databases with equal
summaries hold the same rows, so every public read gives the same answers on both.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from ..db.database import Database
from .reading import read_records
from .records import encode_record
from .targets import scope_of

__all__ = ["Summary", "Tally", "summarize"]

_CHECKPOINT_SIDE = frozenset({"run", "run_entry", "tool_effect", "run_lease"})


@dataclass
class Tally:
    """Row counts per record type and the digest of those rows."""

    counts: Counter[str] = field(default_factory=Counter)
    digest: str = ""


@dataclass
class Summary:
    """Each session's tally by (tenant, session id), and the checkpoint side's."""

    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)
    checkpoints: Tally = field(default_factory=Tally)

    @property
    def sessions(self) -> dict[str, Tally]:
        """Each session's tally by id: for a summary of one tenant (the same id in two
        tenants is two sessions, so a summary of several has no such map)."""
        tenants = {tenant for tenant, _ in self.tallies}
        if len(tenants) > 1:
            raise ValueError(f"a summary of {len(tenants)} tenants: read its tallies")
        return {sid: tally for (_, sid), tally in self.tallies.items()}


async def summarize(
    db: Database, *, tenant: str | None = None, all_tenants: bool = False
) -> Summary:
    """Read every row of ``db``'s tenant (``tenant``, else the Database's; every tenant
    with ``all_tenants=True``), in pages, bounded memory, and tally it."""
    scope = scope_of(tenant, all_tenants, db.tenant)
    summary = Summary()
    tally, hasher = summary.checkpoints, hashlib.sha256()
    checkpoints = hashlib.sha256()
    async for record in read_records(db, scope):
        if record.kind == "session":
            if tally is not summary.checkpoints:
                tally.digest = hasher.hexdigest()
            tally, hasher = Tally(), hashlib.sha256()
            summary.tallies[(record.row["tenant"], record.row["session_id"])] = tally
        elif record.kind in _CHECKPOINT_SIDE and tally is not summary.checkpoints:
            tally.digest = hasher.hexdigest()
            tally, hasher = summary.checkpoints, checkpoints
        tally.counts[record.kind] += 1
        hasher.update(encode_record(record) + b"\n")
    if tally is not summary.checkpoints:
        tally.digest = hasher.hexdigest()
    summary.checkpoints.digest = checkpoints.hexdigest()
    return summary
