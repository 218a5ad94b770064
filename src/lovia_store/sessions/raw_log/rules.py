"""The Raw Log API's argument rules, checked before anything is written.

Every failure is a ``UserError`` (a ``ValueError``) whose message names the
argument and says what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._json import check_text, dump_object
from ...entries import (
    ENTRY_CLASSES,
    AssistantTextEntry,
    ReasoningEntry,
    ToolCallEntry,
    TranscriptEntry,
    Usage,
    check_entry_values,
)
from ...errors import UserError
from ...validation import check_count, check_id, check_integer
from .ids import new_uuid7
from .models import CompactedMessage, MessageTiming

__all__ = [
    "ASSISTANT_ENTRIES",
    "MAX_AGENT_NAME",
    "MAX_SESSION_TYPE",
    "MAX_TITLE",
    "check_compacted",
    "check_count",
    "check_display",
    "check_display_text",
    "check_durations",
    "check_entry",
    "check_new_session_id",
    "check_parent",
    "check_session_type",
    "check_session_types",
    "check_timing",
    "check_usage",
    "encode_object",
]

MAX_TITLE = 200
MAX_AGENT_NAME = 64

ASSISTANT_ENTRIES = (AssistantTextEntry, ReasoningEntry, ToolCallEntry)
"""The entries a model produced: the only ones that may carry token usage."""


MAX_SESSION_TYPE = 2**31 - 1
"""``session_type`` is an INTEGER column on every backend (PostgreSQL refused a larger
code mid-call, MariaDB stored 2147483647): one range, checked before any SQL."""


def check_session_type(value: object, what: str = "session_type") -> int:
    number = check_integer(value, what)
    if number < 0:
        raise UserError(f"{what} cannot be negative, got {number}")
    if number > MAX_SESSION_TYPE:
        raise UserError(f"{what} must be at most 2**31-1, got {number}")
    return number


def check_session_types(values: Sequence[int] | None) -> tuple[int, ...] | None:
    """The filter of ``list_sessions``; None or an empty sequence means every type."""
    if values is None:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
        raise UserError(f"session_types must be a sequence of integers, got {values!r}")
    codes = tuple(
        check_session_type(value, f"session_types[{i}]") for i, value in enumerate(values)
    )
    return codes or None


def check_new_session_id(value: object) -> str:
    """``create_session``'s id: a new UUIDv7 when None; never blank."""
    if value is None:
        return new_uuid7()
    session_id = check_id(value, "session_id")
    if not session_id.strip():
        raise UserError("session_id cannot be blank")
    return session_id


def check_parent(value: object, session_id: str) -> str | None:
    if value is None:
        return None
    parent = check_id(value, "parent_session_id")
    if not parent.strip():
        raise UserError("parent_session_id cannot be blank")
    if parent == session_id:
        raise UserError("parent_session_id must differ from session_id")
    return parent


def check_display(value: object, what: str, limit: int) -> str | None:
    """A display value normalised for storage: stripped, 1..``limit`` characters,
    with no NUL (PostgreSQL's text cannot hold one) and no lone surrogate."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise UserError(f"{what} must be a string, got {type(value).__name__}")
    check_display_text(value, what)
    text = value.strip()
    if not text or len(text) > limit:
        raise UserError(
            f"{what} must contain between 1 and {limit} characters after trimming "
            f"whitespace, got {len(text)}"
        )
    return text


def encode_object(value: object, what: str, *, nonempty_keys: bool = False) -> str:
    """A JSON object (any mapping; None is ``{}``) as stored text, refused when inexact."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise UserError(f"{what} must be a JSON object (a mapping), not {type(value).__name__}")
    data = dict(value)
    if nonempty_keys:
        for key in data:
            if isinstance(key, str) and not key.strip():
                raise UserError(f"{what} keys must be non-empty strings, got {key!r}")
    return dump_object(data, what)


def check_display_text(value: str, what: str) -> None:
    """Every backend stores the same display text: no NUL, no lone surrogate."""
    nul = value.find("\x00")
    if nul >= 0:
        raise UserError(f"{what} contains a NUL character at position {nul}")
    check_text(value, what)


def check_entry(value: object) -> TranscriptEntry:
    if not isinstance(value, ENTRY_CLASSES):
        raise UserError(
            f"message is {type(value).__name__}, not a transcript entry "
            "(InputEntry, AssistantTextEntry, ReasoningEntry, ToolCallEntry or ToolResultEntry)"
        )
    check_entry_values(value, "message")
    return value


def check_durations(value: MessageTiming) -> MessageTiming:
    """A timing's durations fit the BIGINT columns on every backend."""
    for name in ("duration_ns", "reasoning_duration_ns", "content_duration_ns"):
        duration = getattr(value, name)
        if duration is not None:
            check_integer(duration, f"timing.{name}")
    return value


def check_timing(value: object) -> MessageTiming:
    if value is None:
        return MessageTiming.instant()
    if not isinstance(value, MessageTiming):
        raise UserError(f"timing must be a MessageTiming or None, not {type(value).__name__}")
    return check_durations(value)


def check_usage(value: object, message: TranscriptEntry) -> Usage | None:
    if value is None:
        return None
    if not isinstance(value, Usage):
        raise UserError(f"usage must be a lovia_store.Usage or None, not {type(value).__name__}")
    if not isinstance(message, ASSISTANT_ENTRIES):
        raise UserError(
            f"usage belongs only to an entry the assistant produced (assistant_text, "
            f"reasoning, tool_call), not to a {message.type!r} entry"
        )
    for name, count in value.model_dump().items():
        if check_integer(count, f"usage.{name}") < 0:
            raise UserError(f"usage.{name} cannot be negative, got {count}")
    return value


def check_compacted(value: object) -> CompactedMessage:
    if not isinstance(value, CompactedMessage):
        raise UserError(f"compacted_message must be a CompactedMessage, not {type(value).__name__}")
    return value


def session_row_values(
    parent: str | None, title: str | None, agent_name: str | None, session_type: int = 0
) -> dict[str, Any]:
    """The display columns a new ``lovia_sessions`` row starts with."""
    return {
        "parent_session_id": parent,
        "title": title,
        "agent_name": agent_name,
        "session_type": session_type,
    }
