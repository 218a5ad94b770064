"""One readable, terminal-safe line per transcript entry (``show`` and the demo print them)."""

from __future__ import annotations

from ..entries import (
    AssistantTextEntry,
    InputEntry,
    ReasoningEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)
from .output import printable

__all__ = ["describe"]


def _clip(text: str, limit: int = 160) -> str:
    text = text.replace("\n", " ")
    clipped = text if len(text) <= limit else text[: limit - 1] + "…"
    return printable(clipped)


def describe(entry: TranscriptEntry) -> str:
    """One line for an entry, its stored text clipped and its control characters escaped."""
    if isinstance(entry, InputEntry):
        content = entry.content
        if not isinstance(content, str):
            content = " ".join(getattr(p, "text", None) or f"<{p.type}>" for p in content)
        return f"{entry.role:>9}: {_clip(content)}"
    if isinstance(entry, AssistantTextEntry):
        return f"assistant: {_clip(entry.content)}"
    if isinstance(entry, ReasoningEntry):
        return f"reasoning: {_clip(entry.content)}"
    if isinstance(entry, ToolCallEntry):
        call = printable(entry.call_id)
        return f"     tool> {printable(entry.name)}({_clip(entry.arguments, 120)})  [{call}]"
    assert isinstance(entry, ToolResultEntry)
    flag = " (error)" if entry.is_error else ""
    return f"     tool< {_clip(entry.output)}{flag}  [{printable(entry.call_id)}]"
