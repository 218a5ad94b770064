"""zett-agent's argument rules, in zett's words, checked before anything is written.

Callers of zett's storage match on its messages (``"Snapshot conflict"``,
``"limit must be positive"``), so the integration says what zett says. The
errors are ours, typed: ``UserError`` (a ``ValueError``, which zett raises)
and, for a stale snapshot version, ``SnapshotConflictError`` (a
``ValueError`` too). Ids are checked by our one id rule as well (non-empty
strings of up to 255 characters), which zett does not do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zett_agent.json_types import json_object

from ..._json import dump_document
from ...errors import LoviaStoreError, SnapshotConflictError, UserError
from ...sessions.raw_log.ids import new_uuid7
from ...sessions.raw_log.rules import MAX_SESSION_TYPE, check_display_text
from ...sessions.raw_log.snapshots import SnapshotWording
from ...validation import check_id, check_integer

__all__ = [
    "ZETT_SNAPSHOTS",
    "check_display",
    "check_new_session_id",
    "check_page",
    "check_parent",
    "check_session_type",
    "check_session_types",
    "encode_context",
    "parent_mismatch",
]

MAX_TITLE = 200
MAX_AGENT_NAME = 64


def check_display(value: object, what: str) -> str | None:
    """A title or agent name, stripped (zett strips them on create and update).

    ``what`` is ``"title"`` or ``"agent_name"``.
    """
    if value is None:
        return None
    if what == "title":
        label, limit = "Session title", MAX_TITLE
    else:
        label, limit = "Agent name", MAX_AGENT_NAME
    if not isinstance(value, str):
        raise UserError(f"{label} must be a string, not {type(value).__name__}")
    check_display_text(value, label)
    text = value.strip()
    if not text or len(text) > limit:
        raise UserError(f"{label} must contain between 1 and {limit} characters")
    return text


def check_new_session_id(value: object) -> str:
    """``create_session``'s id: a new UUIDv7 when None or empty, as in zett."""
    if value is None or value == "":
        return new_uuid7()
    sid = check_id(value, "session_id")
    if not sid.strip():
        raise UserError("session_id cannot be empty")
    return sid


def check_parent(value: object, session_id: str) -> str | None:
    if value is None:
        return None
    parent = check_id(value, "parent_session_id") if value != "" else ""
    if not parent.strip():
        raise UserError("parent_session_id cannot be empty")
    if parent == session_id:
        raise UserError("parent_session_id must differ from session_id")
    return parent


def check_session_type(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError("session_type must be an integer code")
    if value < 0:
        raise UserError("session_type cannot be negative")
    if value > MAX_SESSION_TYPE:  # an INTEGER column on every backend
        raise UserError(f"session_type must be at most 2**31-1, got {value}")
    return value


def check_session_types(values: Sequence[int] | None) -> tuple[int, ...] | None:
    """``list_sessions``' filter: None or empty means every type."""
    if not values:
        return None
    if isinstance(values, str | bytes):
        raise UserError("session_type must be an integer code")
    return tuple(check_session_type(value) for value in values)


def _bounded(value: object, what: str, minimum: int, rule: str) -> int:
    number = check_integer(value, what)
    if number < minimum:
        raise UserError(f"{what} {rule}")
    return number


def check_page(limit: object, offset: object) -> tuple[int, int]:
    return (
        _bounded(limit, "limit", 1, "must be positive"),
        _bounded(offset, "offset", 0, "cannot be negative"),
    )


def check_bounds(after: object, through: object) -> tuple[int, int | None]:
    lower = _bounded(after, "after_sequence", 0, "cannot be negative")
    if through is None:
        return lower, None
    return lower, _bounded(through, "through_sequence", 1, "must be positive")


def encode_context(value: Mapping[str, Any] | None, what: str, *, nonempty_keys: bool) -> str:
    """Request metadata or tags, validated by zett's own JSON rule and stored as zett does
    (sorted keys), so the column holds the text zett would have written."""
    if not value and (value is None or isinstance(value, Mapping)):
        return "{}"
    try:
        validated = json_object(value, field_name=what, nonempty_keys=nonempty_keys)
    except RecursionError:  # zett's rule recurses on each level
        raise UserError(f"{what} is nested too deep to store") from None
    except (ValueError, TypeError) as exc:
        raise UserError(str(exc)) from None
    # The shared codec refuses the lone surrogates and depth zett's rule lets through.
    return dump_document(validated, what, separators=(", ", ": "), sort_keys=True)


def parent_mismatch(sid: str, stored: str | None, given: str | None) -> Exception:
    return UserError("Session parent cannot change after creation")


class _ZettConflict(SnapshotConflictError):
    """zett's sentence, with our data (``session_id``, ``expected``, ``actual``)."""

    def __init__(self, *, session_id: str, expected: int, actual: int | None) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        LoviaStoreError.__init__(self, "Snapshot conflict; reload the session")


class _ZettSnapshotWording(SnapshotWording):
    def no_messages(self, sid: str, boundary: int) -> Exception:
        return self.not_stored(sid, boundary)

    def not_stored(self, sid: str, boundary: int) -> Exception:
        return UserError("Snapshot boundary must identify an existing Raw Log message")

    def not_advancing(self, sid: str, boundary: int, before: int) -> Exception:
        return UserError("Snapshot boundary must advance beyond the previous checkpoint")

    def conflict(self, sid: str, expected: int, actual: int) -> Exception:
        return _ZettConflict(session_id=sid, expected=expected, actual=actual)


ZETT_SNAPSHOTS = _ZettSnapshotWording()
