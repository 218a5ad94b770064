"""zett-agent's message envelopes projected onto transcript entries (pure data, stdlib only).

zett-agent stores each message as ``{"kind": K, "data": dataclasses.asdict(message)}``
(kinds: 1 system, 2 user, 3 assistant, 4 tool, 5 checkpoint, 6 agent; bytes
as ``{"__kcs_bytes__": base64}``). One zett message is one Raw Log row; the
entries lovia's view shows for it, in lovia's JSON shape:

- system -> ``input`` (role system); user and agent -> ``input`` (role user,
  which is how zett-agent sends an agent message to a model); text and image
  parts become ``text``/``image`` parts (bytes stay base64 in ``data``).
- tool -> ``tool_result`` (``is_error`` is ``not success``; list content also
  becomes ``parts``).
- assistant -> its reasoning, its text, then one ``tool_call`` per call, in
  that order (the order lovia records a model turn in), each present only when
  the message has it; a message with none of them is one empty text. The
  reasoning has no provider: it is zett's plain text, and the signed blocks a
  provider would need to accept it back stay in the envelope's
  ``replay_blocks``, so no lovia adapter replays it as its own.

So every tool result in lovia's view follows its call. What has no place in
an entry (``alt_text``, tool names, ``attributes``, ``replay_blocks``,
``stop``) stays in the envelope, which is always kept beside the entries,
verbatim. Migrations keep frozen copies of this module; changing it changes
only what later writes show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "AGENT",
    "ASSISTANT",
    "CHECKPOINT",
    "SYSTEM",
    "TOOL",
    "USER",
    "entries_from_envelope",
    "summary_from_envelope",
    "text_of",
]

SYSTEM, USER, ASSISTANT, TOOL, CHECKPOINT, AGENT = 1, 2, 3, 4, 5, 6

_BYTES = "__kcs_bytes__"


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _str(value: Any, default: str = "") -> str:
    if value is None:
        return default
    return value if isinstance(value, str) else _json_text(value)


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_text_part(part: Any) -> bool:
    return isinstance(part, Mapping) and "text" in part and "source" not in part


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_str(part["text"]) for part in content if _is_text_part(part))
    return _str(content)


def _part(part: Any) -> dict[str, Any]:
    if _is_text_part(part):
        return {"text": _str(part["text"]), "type": "text"}
    source = part.get("source") if isinstance(part, Mapping) else None
    if isinstance(source, Mapping):
        data = source.get("data")
        if isinstance(data, Mapping):
            data = data.get(_BYTES)
        return {
            "url": _optional_str(source.get("url")),
            "data": _optional_str(data),
            "mime_type": _optional_str(source.get("media_type")),
            "detail": _optional_str(part.get("detail")),
            "type": "image",
        }
    # A part this projection does not know stays readable as text.
    return {"text": _json_text(part), "type": "text"}


def _content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, list):
        return [_part(part) for part in content]
    return _str(content)


def _input(role: str, content: Any) -> dict[str, Any]:
    return {"role": role, "content": _content(content), "type": "input"}


def _assistant(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    text = _str(data.get("content"))
    calls = [c for c in data.get("tool_calls") or () if isinstance(c, Mapping)]
    reasoning = data.get("reasoning")
    entries: list[dict[str, Any]] = []
    if reasoning:
        entries.append(
            {
                "content": _str(reasoning),
                "id": None,
                "provider": None,
                "metadata": {},
                "type": "reasoning",
            }
        )
    if text or not (calls or entries):
        entries.append({"content": text, "id": None, "type": "assistant_text"})
    entries.extend(
        {
            "call_id": _str(call.get("id")),
            "name": _str(call.get("name")),
            "arguments": _json_text(call.get("arguments") or {}),
            "type": "tool_call",
        }
        for call in calls
    )
    return entries


def _tool(data: Mapping[str, Any]) -> dict[str, Any]:
    content = data.get("content")
    entry: dict[str, Any] = {
        "call_id": _str(data.get("tool_call_id")),
        "output": text_of(content),
        "raw": None,
        "is_error": data.get("success", True) is False,
        "type": "tool_result",
    }
    if isinstance(content, list):
        entry["parts"] = [_part(part) for part in content]
    return entry


def entries_from_envelope(envelope: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries (as lovia's JSON dicts) that stand for one zett-agent message, in order.

    Never fails and never empty: an unknown kind or shape becomes a user input
    entry with whatever text it has (its envelope, kept beside it, holds the rest).
    """
    kind = envelope.get("kind")
    data = envelope.get("data")
    if not isinstance(data, Mapping):
        return [_input("user", data)]
    if kind == SYSTEM:
        return [_input("system", text_of(data.get("content")))]
    if kind == ASSISTANT:
        return _assistant(data)
    if kind == TOOL:
        return [_tool(data)]
    return [_input("user", data.get("content"))]


def summary_from_envelope(envelope: Mapping[str, Any]) -> str:
    """The summary text of a zett-agent ``CompactedMessage`` (kind 5) envelope."""
    data = envelope.get("data")
    return text_of(data.get("content")) if isinstance(data, Mapping) else _str(data)
