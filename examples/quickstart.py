"""Two runs of one conversation, stored, reopened and rewound: sessions in a minute."""

from __future__ import annotations

import asyncio
import sys

from lovia_store import (
    AssistantTextEntry,
    InputEntry,
    SQLiteSession,
    ToolCallEntry,
    ToolResultEntry,
)


async def main(path: str) -> None:
    async with SQLiteSession(path, wal=True) as session:
        await session.clear("demo-user")
        first = [
            InputEntry(role="user", content="My project is called Atlas."),
            AssistantTextEntry(content="Noted: your project is Atlas."),
        ]
        await session.append("demo-user", first, run_id="run-1", meta={"topic": "intro"})
        second = [
            InputEntry(role="user", content="What's the weather in Zürich?"),
            ToolCallEntry(call_id="call-1", name="weather", arguments='{"city": "Zürich"}'),
            ToolResultEntry(call_id="call-1", output="7 °C, rain"),
            AssistantTextEntry(content="7 °C and rain in Zürich: take an umbrella."),
        ]
        await session.append("demo-user", second, run_id="run-2")
        # Re-issuing a stored run is a no-op: run ids are idempotency keys.
        await session.append("demo-user", second, run_id="run-2")

    async with SQLiteSession(path) as session:  # reopened: everything is still there
        for segment in await session.segments("demo-user"):
            print(f"{segment.run_id}: {len(segment.entries)} entries, meta={segment.meta}")
        removed = await session.rewind("demo-user", keep_entries=4)
        print(f"rewound: {removed} entries removed, the dangling tool call with them")
        print(f"{len(await session.load('demo-user'))} entries remain")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "lovia-store.sqlite3"))
