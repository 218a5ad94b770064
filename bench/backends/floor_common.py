"""What both raw floors share: schema shape, trim rule, head payload."""

from __future__ import annotations

import time
from typing import Any

import orjson

TRIM_KEEP_CHARS = 400
STREAM_BATCH = 1_000  # rows per keyset page of a streaming read
TRIM_SENTINEL = "archived to a result store]"


def trim_marker(call_id: str, dropped: int) -> str:
    """The same honest tail lovia appends to a truncated tool output."""
    return (
        f"\n[... {dropped:,} chars trimmed from stored history; "
        f'recall_tool_result("{call_id}") returns the full output '
        "only if it was archived to a result store]"
    )


def trimmed(raw: bytes | str) -> bytes | None:
    """The trimmed JSON of one stored tool_result, or ``None`` when it stays as is."""
    entry: dict[str, Any] = orjson.loads(raw)
    output = str(entry.get("output", ""))
    if output.endswith(TRIM_SENTINEL):
        return None
    dropped = len(output) - TRIM_KEEP_CHARS
    marker = trim_marker(str(entry["call_id"]), dropped)
    if dropped <= len(marker):
        return None
    entry["output"] = output[:TRIM_KEEP_CHARS] + marker
    entry["raw"] = None
    return orjson.dumps(entry)


def head_json(turn: int) -> bytes:
    """A run head of the size lovia's ``RunHead.to_json`` produces."""
    return orjson.dumps(
        {
            "agent_name": "bench",
            "turns": turn,
            "status": "running",
            "output": None,
            "error": None,
            "usage": {
                "input_tokens": turn,
                "output_tokens": turn,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "reasoning_tokens": 0,
            },
            "last_input_tokens": None,
            "context_state": {},
            "updated_at": time.time(),
            "pending_handoff": None,
            "started_at": None,
        }
    )


def dangling_calls(kept: list[tuple[int, str, bytes]]) -> list[int]:
    """Sequences of tool calls in ``kept`` (seq, kind, json) that have no result there."""
    answered = {orjson.loads(raw)["call_id"] for _, kind, raw in kept if kind == "tool_result"}
    return [
        seq
        for seq, kind, raw in kept
        if kind == "tool_call" and orjson.loads(raw)["call_id"] not in answered
    ]
