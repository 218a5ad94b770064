"""zett-agent 0.2.1: ``SQLiteSessionStorage`` / ``SQLSessionStorage`` (SQLAlchemy asyncio).

Its Raw Log stores one row per message, so a run is 8 ``append`` calls (8
transactions). PostgreSQL goes through psycopg, the driver of its ``postgres``
extra: with asyncpg its naive ``TIMESTAMP`` columns reject the timezone-aware
datetimes it writes ("can't subtract offset-naive and offset-aware datetimes").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from zett_agent._sql_storage import AgentSessionModel, RawLogMessageModel
from zett_agent.extensions.events import MessageTiming
from zett_agent.ids import new_uuid7
from zett_agent.messages import AnyMessage, AssistantMessage, ToolCall, ToolMessage, UserMessage
from zett_agent.storage import (
    MESSAGE_TYPES,
    SQLiteSessionStorage,
    SQLSessionStorage,
    encode_messages,
)

from bench.backends.base import Backend
from bench.backends.sqlite_probe import sync_name
from bench.data import Entry, Run

_UTC = UTC
_PREFILL_BATCH = 2_000


def to_message(entry: Entry) -> AnyMessage:
    """lovia entry dict to the closest zett-agent message (one message per entry)."""
    kind = entry["type"]
    if kind == "input":
        return UserMessage(content=str(entry["content"]))
    if kind == "tool_call":
        call = ToolCall(
            id=str(entry["call_id"]),
            name=str(entry["name"]),
            arguments=json.loads(str(entry["arguments"])),
        )
        return AssistantMessage(tool_calls=(call,))
    if kind == "tool_result":
        return ToolMessage(
            tool_call_id=str(entry["call_id"]),
            name="tool",
            content=str(entry["output"]),
            success=not entry["is_error"],
        )
    if kind == "assistant_text":
        return AssistantMessage(content=str(entry["content"]))
    raise ValueError(f"unmapped entry type {kind!r}")


class ZettBackend(Backend):
    """zett-agent's SQL session storage (no checkpointer, trim or rewind)."""

    async def open(self) -> None:
        if self.pg:
            self.storage: SQLSessionStorage = SQLSessionStorage(
                self.ctx.require_pg().url("psycopg")
            )
        else:
            self.storage = SQLiteSessionStorage(self.ctx.sqlite_path())
        await self.storage.load("warmup")  # creates the schema

    async def close(self) -> None:
        await self.storage.close()

    async def durability(self) -> dict[str, str]:
        if self.pg:
            return {}
        async with self.storage.engine.connect() as conn:
            journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
            busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
        return {
            "journal_mode": str(journal),
            "synchronous": sync_name(sync),
            "busy_timeout_ms": str(busy),
        }

    def convert_run(self, run: Run) -> Any:
        return [to_message(e) for e in run]

    async def append_run(self, session_id: str, run: Any, run_id: str) -> None:
        for message in run:
            await self.storage.append(session_id, run_id, message)

    async def append_run_tolerant(self, session_id: str, run: Any, run_id: str) -> tuple[int, int]:
        """One zett ``append`` per message; a failed message does not stop the rest."""
        stored = failed = 0
        for message in run:
            try:
                await self.storage.append(session_id, run_id, message)
            except Exception:  # W7 counts every kind of failure
                failed += 1
            else:
                stored += 1
        return stored, failed

    async def load(self, session_id: str) -> int:
        return len((await self.storage.load(session_id)).raw_tail)

    async def count(self, session_id: str) -> int:
        return await self.storage.count_messages(session_id)

    async def prefill(self, session_id: str, runs: Iterable[Run], first_index: int) -> None:
        """Bulk rows through zett-agent's own ORM models, same columns its append writes.

        Its public append costs one transaction per message (~8 per run), which
        would make a 100,000-message setup take many minutes.
        """
        batch: list[tuple[str, AnyMessage]] = []
        for offset, run in enumerate(runs):
            batch.extend((f"pre-{first_index + offset}", to_message(e)) for e in run)
            if len(batch) >= _PREFILL_BATCH:
                await self._insert(session_id, batch)
                batch = []
        if batch:
            await self._insert(session_id, batch)

    async def _insert(self, session_id: str, batch: list[tuple[str, AnyMessage]]) -> None:
        storage = self.storage
        async with storage._session_scope() as session:
            sequence = await storage._sequence(session, session_id)
            now = datetime.now(_UTC)
            if await session.get(AgentSessionModel, session_id) is None:
                session.add(AgentSessionModel(id=session_id, created_at=now, updated_at=now))
            timing = MessageTiming.instant()
            rows = []
            for request_id, message in batch:
                sequence += 1
                kind = next(k for k, cls in MESSAGE_TYPES.items() if type(message) is cls)
                rows.append(
                    RawLogMessageModel(
                        id=new_uuid7(),
                        session_id=session_id,
                        request_id=request_id[:36],
                        sequence=sequence,
                        role=int(kind),
                        content=message.text
                        if isinstance(message, (UserMessage, ToolMessage))
                        else message.content,
                        tool_name=message.name if isinstance(message, ToolMessage) else None,
                        message_json=encode_messages([message]),
                        metadata_json="{}",
                        tags_json="{}",
                        started_at=timing.started_at,
                        completed_at=timing.completed_at,
                        duration_ns=timing.duration_ns,
                        created_at=now,
                        updated_at=now,
                    )
                )
            session.add_all(rows)

    async def open_raw_log(self) -> None:
        """The storage itself pages its Raw Log."""

    async def page(self, session_id: str, *, offset: int, after_sequence: int, limit: int) -> int:
        records = await self.storage.list_raw_messages(
            session_id, after_sequence=after_sequence, limit=limit, offset=offset
        )
        return len(records)
