"""The lovia ``Session`` contract and the rules every implementation shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from uuid import uuid4

from .._json import dump_object
from ..entries import ToolResultEntry, TranscriptEntry, check_entries, drop_dangling_tool_calls
from ..errors import UserError

__all__ = [
    "TRIM_SENTINEL",
    "Segment",
    "Session",
    "check_append",
    "check_call_ids",
    "check_count",
    "check_id",
    "check_integer",
    "rewind_split",
    "trim_entry",
    "trim_marker",
]


@dataclass(frozen=True)
class Segment:
    """One finished run in a session: its id, its entries, its opaque meta."""

    run_id: str
    entries: list[TranscriptEntry]
    meta: dict[str, Any] | None = field(default=None)


@runtime_checkable
class Session(Protocol):
    """Conversation history as append-only per-run segments.

    ``append`` is atomic and idempotent by ``run_id``: appending again under a
    stored run id changes nothing and returns that id. A stored run is never
    replaced. ``load`` is the flat concatenation of ``segments`` in run order.
    """

    async def segments(self, session_id: str) -> list[Segment]: ...

    async def load(self, session_id: str) -> list[TranscriptEntry]: ...

    async def append(
        self,
        session_id: str,
        entries: Sequence[TranscriptEntry],
        *,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str: ...

    async def clear(self, session_id: str) -> None: ...


def check_id(value: object, what: str) -> str:
    """Every id's one check (sessions, runs, requests, parents), before any SQL."""
    if not isinstance(value, str) or not value:
        raise UserError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > 255:
        raise UserError(f"{what} is {len(value)} characters long; the limit is 255")
    nul = value.find("\x00")
    if nul >= 0:  # PostgreSQL's text cannot hold it: refused on every backend alike
        raise UserError(f"{what} contains a NUL character at position {nul}")
    if not value.isascii():
        # A lone surrogate (what json.loads gives for "\ud800") has no UTF-8 form:
        # no backend can store or look it up, and a driver refusing it mid-call
        # is not a misuse error.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UserError(
                f"{what} is not valid Unicode: a lone surrogate at position {exc.start}"
            ) from None
    return value


def check_call_ids(call_ids: Sequence[object]) -> None:
    """A session row keeps its entry's tool call id in an id column: the id rules
    hold for it (an entry without one, or with an empty one, has nothing to check)."""
    for index, call_id in enumerate(call_ids):
        if call_id is not None and call_id != "":
            check_id(call_id, f"entries[{index}].call_id")


def check_append(
    session_id: object, entries: Sequence[object], run_id: object, meta: object
) -> tuple[str, list[TranscriptEntry], str | None]:
    """An append's arguments, checked: the run id (a new one when omitted), the
    entries, and the meta as exact JSON text (None when there is none)."""
    check_id(session_id, "session_id")
    chosen = uuid4().hex if run_id is None else check_id(run_id, "run_id")
    return chosen, check_entries(entries), None if meta is None else dump_object(meta, "meta")


_MAX_INT = 2**63 - 1  # a BIGINT: what every backend can bind


def check_integer(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{what} must be an integer, got {value!r}")
    if value > _MAX_INT:
        raise UserError(f"{what} must be at most 2**63-1, got {value}")
    return value


def check_count(value: object, what: str, *, minimum: int) -> int:
    """An integer ``>= minimum`` (``limit`` 1, ``offset`` 0, sequences 0 or 1)."""
    number = check_integer(value, what)
    if number < minimum:
        rule = "positive" if minimum == 1 else f">= {minimum}"
        raise UserError(f"{what} must be {rule}, got {number}")
    return number


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
