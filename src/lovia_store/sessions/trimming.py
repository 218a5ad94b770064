"""trim_tool_results and rewind as rules on entries: what every session store applies alike."""

from __future__ import annotations

from collections.abc import Sequence

from ..entries import ToolResultEntry, drop_dangling_tool_calls
from .contract import Segment

__all__ = ["TRIM_SENTINEL", "rewind_split", "trim_entry", "trim_marker"]


# The fixed tail of every trim marker (the same as lovia's): an output that
# ends with it is already trimmed, which makes a periodic trim idempotent.
TRIM_SENTINEL = "archived to a result store]"


def trim_marker(call_id: str, dropped: int) -> str:
    """lovia's own marker, to the letter: a trim here reads as a trim there."""
    return (
        f"\n[... {dropped:,} chars trimmed from stored history; "
        f'recall_tool_result("{call_id}") returns the full output '
        f"only if it was {TRIM_SENTINEL}"
    )


def trim_entry(entry: ToolResultEntry, keep_chars: int) -> ToolResultEntry | None:
    """The trimmed form of a tool result, or None when trimming would not shrink it.

    Structure is kept (call id, error flag, position); ``raw`` and ``parts``
    go with the output they mirror.
    """
    if entry.output.endswith(TRIM_SENTINEL):
        return None
    dropped = len(entry.output) - keep_chars
    marker = trim_marker(entry.call_id, dropped)
    if dropped <= len(marker):
        return None
    return ToolResultEntry(
        call_id=entry.call_id,
        output=entry.output[:keep_chars] + marker,
        is_error=entry.is_error,
    )


def rewind_split(
    segments: Sequence[Segment], keep_entries: int
) -> tuple[list[Segment], Segment | None, int]:
    """Cut ``segments`` after ``keep_entries`` flat entries.

    Returns the segments kept whole, the truncated segment the cut lands in
    (made tool-consistent and stripped of its meta, or None), and the number
    of entries removed; 0 means nothing changes.
    """
    total = sum(len(segment.entries) for segment in segments)
    if keep_entries >= total:
        return list(segments), None, 0
    kept: list[Segment] = []
    boundary: Segment | None = None
    remaining = keep_entries
    for segment in segments:
        # A run without entries that sits at the cut stays, as in lovia's stores.
        if remaining >= len(segment.entries):
            kept.append(segment)
            remaining -= len(segment.entries)
            continue
        if remaining > 0:
            entries = drop_dangling_tool_calls(segment.entries[:remaining])
            if entries:
                boundary = Segment(segment.run_id, entries, None)
        break
    kept_total = sum(len(s.entries) for s in kept) + (len(boundary.entries) if boundary else 0)
    return kept, boundary, total - kept_total
