"""Read models of the Raw Log API: the shapes zett-agent's session storage returns.

Inputs (``MessageTiming``, ``CompactedMessage``) validate strictly; the read
models are built from stored rows the store has already checked, so they
carry no length rules that an adopted file might not meet.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, model_validator

from ...entries import InputEntry, TranscriptEntry, Usage

__all__ = [
    "CompactedMessage",
    "ContextSnapshot",
    "MessageTiming",
    "RawMessageRecord",
    "SessionSummary",
    "SessionView",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class MessageTiming(BaseModel):
    """When the work behind one message happened (UTC) and how long it took (monotonic ns).

    ``started_at``/``completed_at``/``duration_ns`` are required; the reasoning
    and content spans are optional, each all-or-nothing. Timestamps must be
    timezone-aware and durations non-negative. ``MessageTiming.instant()`` is
    what ``append`` records when it is given no timing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    started_at: AwareDatetime
    completed_at: AwareDatetime
    duration_ns: int = Field(ge=0)
    reasoning_started_at: AwareDatetime | None = None
    reasoning_completed_at: AwareDatetime | None = None
    reasoning_duration_ns: int | None = Field(default=None, ge=0)
    content_started_at: AwareDatetime | None = None
    content_completed_at: AwareDatetime | None = None
    content_duration_ns: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _spans_are_whole(self) -> Self:
        for name in ("reasoning", "content"):
            values = [getattr(self, f"{name}_{part}") for part in _SPAN]
            if any(v is None for v in values) and any(v is not None for v in values):
                raise ValueError(
                    f"{name} timing fields ({', '.join(f'{name}_{p}' for p in _SPAN)}) "
                    "must be supplied together"
                )
        return self

    @classmethod
    def instant(cls) -> MessageTiming:
        """A message that took no measurable time: started and completed now."""
        now = datetime.now(UTC)
        return cls.model_construct(started_at=now, completed_at=now, duration_ns=0)


_SPAN = ("started_at", "completed_at", "duration_ns")
TIMING_FIELDS = tuple(MessageTiming.model_fields)
USAGE_FIELDS = tuple(Usage.model_fields)


class CompactedMessage(BaseModel):
    """The summary a snapshot stands in for the compacted prefix of the Raw Log with."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    content: str

    def as_entry(self) -> InputEntry:
        """The summary as a user input entry, the way zett-agent sends it to a model."""
        return InputEntry(role="user", content=self.content)


class SessionSummary(_Frozen):
    """A session's identity, display fields and message count, without its messages;
    a fork names its origin (session and entry count) so a UI can show the branch."""

    session_id: str
    parent_session_id: str | None = None
    session_type: int = 0
    title: str | None = None
    agent_name: str | None = None
    message_count: int
    created_at: datetime
    updated_at: datetime
    forked_from_session_id: str | None = None
    """The session this one was forked from (``fork``), None otherwise."""
    forked_at_entry: int | None = None
    """How many of that session's entries the fork took."""


class RawMessageRecord(_Frozen):
    """One stored message of the Raw Log, with everything stored beside it.

    ``message`` is the transcript entry both APIs show; a zett-agent message
    that stands for several entries (an assistant's reasoning, text and tool
    calls) shows its text (else its first call) here and all of them, in
    order, in ``entries``, which lovia's view shows. ``run_id`` is set on
    entries a lovia-style run appended (``SQLSession.append``) and None on
    messages appended one by one. ``envelope`` is zett-agent's original
    ``{"kind", "data"}`` message, verbatim, on records adopted from a
    zett-agent file (None otherwise). Rows written by ``SQLSession.append``
    carry no timing: they read as instantaneous at their ``created_at``.
    ``updated_at`` differs from ``created_at`` only after
    ``trim_tool_results`` shortened the message.
    """

    id: str
    session_id: str
    request_id: str
    sequence: int
    message: TranscriptEntry
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    tags: dict[str, JsonValue] = Field(default_factory=dict)
    started_at: datetime
    completed_at: datetime
    duration_ns: int
    reasoning_started_at: datetime | None = None
    reasoning_completed_at: datetime | None = None
    reasoning_duration_ns: int | None = None
    content_started_at: datetime | None = None
    content_completed_at: datetime | None = None
    content_duration_ns: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    created_at: datetime
    updated_at: datetime
    run_id: str | None = None
    envelope: dict[str, JsonValue] | None = None
    multiple: list[TranscriptEntry] | None = None
    """Every entry of a message that stands for several (None for one that is one)."""

    @property
    def entries(self) -> list[TranscriptEntry]:
        """The entries lovia's view shows for this message, in order."""
        return [self.message] if self.multiple is None else self.multiple

    @property
    def timing(self) -> MessageTiming:
        values = {name: getattr(self, name) for name in TIMING_FIELDS}
        return MessageTiming.model_construct(**values)

    @property
    def usage(self) -> Usage | None:
        """The token counters as ``Usage``, or None when none were recorded."""
        if self.input_tokens is None:
            return None
        return Usage(**{name: getattr(self, name) or 0 for name in USAGE_FIELDS})

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens

    @property
    def cache_hit_rate(self) -> float | None:
        """Cached input over all input (0..1), or None without input usage."""
        if not self.input_tokens or self.cache_read_tokens is None:
            return None
        return self.cache_read_tokens / self.input_tokens

    @property
    def include_in_messages(self) -> bool:
        """False only for an adopted zett-agent message marked to stay out of model context."""
        data: Any = (self.envelope or {}).get("data")
        return not (isinstance(data, dict) and data.get("include_in_messages") is False)


class ContextSnapshot(_Frozen):
    """One immutable compaction checkpoint: a summary standing in for sequences 1..boundary.

    ``envelope`` is zett-agent's original kind-5 message on adopted snapshots.
    """

    id: str
    session_id: str
    version: int
    compacted_message: CompactedMessage
    compacted_through_sequence: int
    created_at: datetime
    updated_at: datetime
    envelope: dict[str, JsonValue] | None = None


class SessionView(_Frozen):
    """The context to restore: the latest snapshot and the raw messages after its boundary.

    An unknown session gives an empty view (type 0, no snapshot, no tail).
    """

    parent_session_id: str | None = None
    session_type: int = 0
    title: str | None = None
    agent_name: str | None = None
    snapshot: ContextSnapshot | None = None
    raw_tail: list[RawMessageRecord] = Field(default_factory=list)

    @property
    def messages(self) -> list[CompactedMessage | TranscriptEntry]:
        """The snapshot's summary, then the tail's entries, in sequence order.

        A zett-agent message stored with ``include_in_messages=False`` (zett's
        system messages by default) is left out, as zett-agent does; one that
        stands for several entries gives all of them.
        """
        head: list[CompactedMessage | TranscriptEntry] = (
            [self.snapshot.compacted_message] if self.snapshot is not None else []
        )
        return head + [e for r in self.raw_tail if r.include_in_messages for e in r.entries]

    @property
    def entries(self) -> list[TranscriptEntry]:
        """``messages`` as transcript entries: the summary becomes a user input entry."""
        return [m.as_entry() if isinstance(m, CompactedMessage) else m for m in self.messages]
