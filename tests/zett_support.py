"""What the zett-agent tests share: a scripted model, an offline token counter, a tool,
and the storages to run zett's Agent on (zett-agent's own and ours).

zett-agent's model boundary is any object with ``retry`` and an async
``stream(request)`` that ends in one ``ModelEvent.completed`` (its own docs
build an ``EchoModel`` that way); ``ScriptedModel`` replays a list of replies
and remembers every request it was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from zett_agent.messages import AnyMessage, AssistantMessage
from zett_agent.model import ModelEvent, ModelRequest, ModelResponse, ModelUsage, RetryOptions
from zett_agent.storage import SQLiteSessionStorage as ZettSQLiteStorage
from zett_agent.tools.base import tool

from backends import migrated_server_database
from lovia_store.integrations.zett import SQLiteSessionStorage, SQLSessionStorage

KINDS = ("sqlite", "postgres", "mariadb")


class ScriptedModel:
    """Replies with the next scripted message; streams its text first, as a provider does."""

    retry = RetryOptions(max_retries=0)

    def __init__(self, *replies: AssistantMessage, usage: ModelUsage | None = None) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []
        self.usage = usage or ModelUsage(input_tokens=120, output_tokens=30, cache_read_tokens=40)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"the script has no reply left for {request.messages[-1]!r}")
        reply = self.replies.pop(0)
        if reply.reasoning:
            yield ModelEvent.reasoning(reply.reasoning)
        if reply.content:
            yield ModelEvent.text(reply.content)
        yield ModelEvent.completed(ModelResponse(reply, usage=self.usage))


def count_tokens(messages: Sequence[AnyMessage]) -> int:
    """An offline stand-in for tiktoken's o200k_base (which must be downloaded): a token
    per four characters of each message's fields, for zett's storage and ours alike."""
    return sum(
        len(json.dumps(dataclasses.asdict(message), default=repr, ensure_ascii=False)) // 4
        for message in messages
    )


@tool
def weather(city: str) -> str:
    """Current weather for one city.

    Args:
        city: The city's name.

    Guidelines:
        - Ask for one city per call.
    """
    return f"7 °C and rain in {city}"


class Gate:
    """A tool that blocks until cancelled, and says when it has started."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

        @tool(name="slow_report")
        async def slow_report(topic: str) -> str:
            """Compile a long report.

            Args:
                topic: What the report is about.

            Guidelines:
                - Use it for long reports only.
            """
            self.started.set()
            await asyncio.Event().wait()
            return "never"

        self.tool = slow_report


@contextlib.asynccontextmanager
async def our_target(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """Where our storage lives for one test: a SQLite file, or a migrated, empty server
    database of its own."""
    if kind == "sqlite":
        yield str(tmp_path / "ours.sqlite3")
        return
    async with migrated_server_database("mariadb" if kind == "mariadb" else "postgres") as url:
        yield url


def open_ours(target: str) -> SQLSessionStorage:
    return SQLiteSessionStorage(target) if "://" not in target else SQLSessionStorage(target)


def open_zett(tmp_path: Path) -> Any:
    return ZettSQLiteStorage(tmp_path / "zett.sqlite3")


def record_view(record: Any) -> dict[str, Any]:
    """A raw record's fields, ids and times aside (they are each store's own)."""
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    for name in ("id", "created_at", "updated_at"):
        values.pop(name)
    for name in list(values):
        if name.endswith("_at"):
            values.pop(name)
    values.pop("duration_ns")
    values.pop("reasoning_duration_ns")
    values.pop("content_duration_ns")
    return values
