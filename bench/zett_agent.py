"""zett-agent's own ``Agent`` on zett's storage and on ours (``lovia_store.integrations.zett``).

A standalone benchmark (not one of W1-W9: those drive each library's storage
directly; this one drives zett's whole runtime). Each request of the session
is what zett's ``SQLSessionExtension`` does for a tool turn: restore the
session (``load``), then append the system prompt, the user message, an
assistant message with two tool calls, the two results and the answer; nine
requests make a 54-message session. The model is scripted, so the time is the
runtime's and the storage's. Then pages of ``list_raw_messages`` (10 at
offsets 0-40) are read, and ``append`` alone is timed on a fresh session, for
zett's storage, ours, and our own Raw Log API (``lovia_store.SQLSessionStorage``)
on the same database settings.

Backends run in rounds, interleaved, each on a fresh file or database:

    zett-sqlite        zett's SQLiteSessionStorage (WAL, synchronous=NORMAL)
    ours-sqlite        ours on Database(path, wal=True, synchronous="normal"): the same
    ours-sqlite-full   ours on Database(path, wal=True) (synchronous=FULL, our default)
    zett-pg            zett's SQLSessionStorage on PostgreSQL (psycopg, its extra)
    ours-pg            ours on PostgreSQL (asyncpg)

Usage: ``.venv/bin/python -m bench.zett_agent [--rounds 5] [--pg URL] [--output FILE]``.
Ratios are taken within each round (zett's time over ours), then their median.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url
from zett_agent.agent import Agent, AgentRunConfig
from zett_agent.extensions.sql import SQLSessionExtension
from zett_agent.messages import AssistantMessage, ToolCall, UserMessage
from zett_agent.model import ModelEvent, ModelRequest, ModelResponse, ModelUsage, RetryOptions
from zett_agent.storage import SQLiteSessionStorage as ZettSQLite
from zett_agent.storage import SQLSessionStorage as ZettSQL
from zett_agent.tools.base import tool

from lovia_store import AssistantTextEntry, Database, InputEntry, Usage
from lovia_store import SQLSessionStorage as CoreStorage
from lovia_store.integrations.zett import SQLSessionStorage as OurStorage

REQUESTS = 9
APPENDS = 200
PAGE = 10
USAGE = ModelUsage(input_tokens=900, output_tokens=60, cache_read_tokens=400)


class ScriptedTurns:
    """Every request: two tool calls, then an answer."""

    retry = RetryOptions(max_retries=0)

    def __init__(self) -> None:
        self.step = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.step += 1
        if self.step % 2:
            calls = (
                ToolCall(f"c{self.step}a", "lookup", {"q": "rain", "n": self.step}),
                ToolCall(f"c{self.step}b", "lookup", {"q": "wind", "n": self.step}),
            )
            reply = AssistantMessage(content="Looking both up.", tool_calls=calls)
        else:
            reply = AssistantMessage(content="Rain and wind today. " * 8)
        yield ModelEvent.completed(ModelResponse(reply, usage=USAGE))


@tool
def lookup(q: str, n: int) -> str:
    """Look a fact up.

    Args:
        q: What to look up.
        n: Which request asks.

    Guidelines:
        - One fact per call.
    """
    return f"{q}: " + "observed values " * 20


async def reset_pg(url: str) -> None:
    parsed = make_url(url)
    admin = await asyncpg.connect(
        host=parsed.host, port=parsed.port or 5432, user=parsed.username, database="postgres"
    )
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{parsed.database}"')
    finally:
        await admin.close()


Opener = Callable[[], Any]


def openers(folder: Path, pg: str | None) -> dict[str, tuple[Opener, Opener]]:
    """Per backend: (the zett-shaped storage, our own Raw Log API on the same settings)."""

    def sqlite(name: str, **settings: Any) -> tuple[Opener, Opener]:
        path = folder / f"{name}.sqlite3"
        return (
            lambda: OurStorage(Database(path, wal=True, **settings)),
            lambda: CoreStorage(Database(path, wal=True, **settings)),
        )

    found = {
        "zett-sqlite": (lambda: ZettSQLite(folder / "zett.sqlite3"), lambda: None),
        "ours-sqlite": sqlite("ours", synchronous="normal"),
        "ours-sqlite-full": sqlite("ours-full"),
    }
    if pg:
        psycopg = make_url(pg).set(drivername="postgresql+psycopg").render_as_string(False)
        found["zett-pg"] = (lambda: ZettSQL(psycopg), lambda: None)
        found["ours-pg"] = (lambda: OurStorage(pg), lambda: CoreStorage(pg))
    return found


async def close(storage: Any) -> None:
    await storage.close()
    if isinstance(storage, OurStorage | CoreStorage) and not storage._owns_database:
        await storage.database.close()


async def session_with_tools(open_storage: Opener) -> tuple[list[float], list[float]]:
    """Nine tool turns through zett's Agent, then pages; seconds per request and per page."""
    persistence = SQLSessionExtension(open_storage())
    agent = await Agent.create(
        ScriptedTurns(),
        config=AgentRunConfig(session_id="s"),
        tools=[lookup],
        extensions=[persistence],
    )
    requests = []
    for n in range(REQUESTS):
        start = time.perf_counter()
        await agent.run(f"Question {n}: rain and wind?", metadata={"n": n}, tags={"t": "w"})
        requests.append(time.perf_counter() - start)
    assert await persistence.storage.count_messages("s") == 6 * REQUESTS
    pages = []
    for _ in range(20):
        for offset in range(0, 50, PAGE):
            start = time.perf_counter()
            page = await persistence.list_raw_messages("s", limit=PAGE, offset=offset)
            pages.append(time.perf_counter() - start)
            assert len(page) == PAGE
    await close(persistence.storage)
    return requests, pages


async def appends(storage: Any, core: bool) -> tuple[list[float], float]:
    """Seconds per append (a user message, then an assistant one with usage, in turn),
    and the process's CPU seconds per append (steadier than wall time on a busy machine)."""
    if core:
        messages = [
            InputEntry(role="user", content="a question " * 10),
            AssistantTextEntry(content="an answer " * 30),
        ]
        usage: Any = Usage(input_tokens=900, output_tokens=60)
    else:
        messages = [
            UserMessage(content="a question " * 10),
            AssistantMessage(content="an answer " * 30),
        ]
        usage = USAGE
    session = "core" if core else "zett"
    await storage.append("warm", "r", messages[0])
    times = []
    cpu = time.process_time()
    for n in range(APPENDS):
        message = messages[n % 2]
        start = time.perf_counter()
        await storage.append(session, "r", message, usage=usage if n % 2 else None)
        times.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu) / APPENDS
    await close(storage)
    return times, cpu


async def trial(name: str, zett_shaped: Opener, core: Opener, pg: str | None) -> dict[str, float]:
    if pg and name.endswith("-pg"):
        await reset_pg(pg)
    gc.collect()
    requests, pages = await session_with_tools(zett_shaped)
    out = {
        "request_ms": statistics.median(requests) * 1e3,
        "page_ms": statistics.median(pages) * 1e3,
    }
    if pg and name.endswith("-pg"):
        await reset_pg(pg)
    times, cpu = await appends(zett_shaped(), core=False)
    out["append_us"], out["append_cpu_us"] = statistics.median(times) * 1e6, cpu * 1e6
    native = core()
    if native is not None:
        times, cpu = await appends(native, core=True)
        out["core_append_us"] = statistics.median(times) * 1e6
        out["core_append_cpu_us"] = cpu * 1e6
    return out


def report(rounds: list[dict[str, dict[str, float]]]) -> str:
    names = list(rounds[0])
    metrics = (
        "request_ms",
        "page_ms",
        "append_us",
        "append_cpu_us",
        "core_append_us",
        "core_append_cpu_us",
    )
    lines = ["| backend | " + " | ".join(metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    for name in names:
        cells = []
        for metric in metrics:
            values = [r[name][metric] for r in rounds if metric in r[name]]
            cells.append(f"{statistics.median(values):.3f}" if values else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Per-round ratios, median (zett's time over ours; >1: ours is faster):", ""]
    pairs = [
        ("zett-sqlite", "ours-sqlite"),
        ("zett-sqlite", "ours-sqlite-full"),
        ("zett-pg", "ours-pg"),
    ]
    for theirs, ours in pairs:
        if theirs not in names or ours not in names:
            continue
        for metric in ("request_ms", "page_ms", "append_us", "append_cpu_us"):
            ratio = statistics.median(r[theirs][metric] / r[ours][metric] for r in rounds)
            lines.append(f"- {metric}: {theirs} / {ours} = {ratio:.2f}x")
    for name in names:
        for unit in ("", "_cpu"):
            ours, core = f"append{unit}_us", f"core_append{unit}_us"
            if core in rounds[0][name]:
                ratio = statistics.median(r[name][ours] / r[name][core] for r in rounds)
                lines.append(f"- {ours}, the zett integration / our own API, {name}: {ratio:.2f}x")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--pg",
        default="postgresql://postgres@127.0.0.1:5432/lovia_bench_zett",
        help="a scratch database (dropped and recreated), or '' for none",
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.rounds):
            folder = Path(scratch) / f"round-{number}"
            folder.mkdir()
            results = {}
            for name, (zett_shaped, core) in openers(folder, args.pg or None).items():
                results[name] = await trial(name, zett_shaped, core, args.pg or None)
            rounds.append(results)
            print(f"round {number + 1}/{args.rounds} done", flush=True)
    text = report(rounds)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    asyncio.run(main())
