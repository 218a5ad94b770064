"""Small builders for transcript entries used across the tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from lovia_store import (
    AssistantTextEntry,
    InputEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)


def user(text: str) -> InputEntry:
    return InputEntry(role="user", content=text)


def say(text: str) -> AssistantTextEntry:
    return AssistantTextEntry(content=text)


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> ToolCallEntry:
    return ToolCallEntry(call_id=call_id, name=name, arguments=arguments)


def result(call_id: str, output: str = "ok", *, raw: object = None) -> ToolResultEntry:
    return ToolResultEntry(call_id=call_id, output=output, raw=raw)  # type: ignore[arg-type]


def a_run(tag: str, *, output: str = "ok") -> list[TranscriptEntry]:
    """A four-entry run: question, one tool round trip, answer."""
    return [user(f"q {tag}"), call(f"c-{tag}"), result(f"c-{tag}", output), say(f"a {tag}")]


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 60.0) -> None:
    """Wait until ``check()`` holds, however slow the machine: ``within`` is a bound on a
    hang, never a timing the test relies on."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"still not true after {within} s"
        await asyncio.sleep(0.02)
