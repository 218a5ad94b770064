"""What SQL tracing costs an append: no listener, a listener, OpenTelemetry's spans.

A standalone benchmark (not one of W1-W9). Each trial opens a fresh database,
warms it up, then times ``SQLSession.append`` of one 8-entry run (a user
question, three tool calls and their results, the answer) under a new run id,
``--appends`` times, in one of four modes:

    none       nothing listens (SQLite: the hot statements run on the driver's cursor)
    removed    a cursor listener was attached and removed again: must cost what none does
    listener   a no-op ``before_cursor_execute``/``after_cursor_execute`` pair on
               ``Database.sync_engine`` (every statement goes through SQLAlchemy)
    otel       OpenTelemetry's SQLAlchemy instrumentation on that engine, a span per
               statement into an in-memory exporter (cleared after each append)

on three backends: ``sqlite`` (rollback journal), ``sqlite-wal`` (both at our default
synchronous=FULL) and ``pg`` (PostgreSQL through asyncpg). Modes run interleaved in
rounds; the report gives the median per append and, per round, each mode's time over
``none``'s (the median of those ratios).

Usage: ``.venv/bin/python -m bench.tracing [--rounds 5] [--appends 300] [--pg URL]
[--output FILE]`` (the ``[test]`` extra has the OpenTelemetry packages; ``--pg ''``
skips PostgreSQL).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

from lovia_store import (
    AssistantTextEntry,
    Database,
    InputEntry,
    SQLSession,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)

MODES = ("none", "removed", "listener", "otel")
RUN: list[TranscriptEntry] = [
    InputEntry(role="user", content="Where is my order 1234? " * 4),
    *[
        entry
        for n in range(3)
        for entry in (
            ToolCallEntry(call_id=f"c{n}", name="lookup", arguments='{"order": 1234}'),
            ToolResultEntry(call_id=f"c{n}", output="shipped on Tuesday " * 8),
        )
    ],
    AssistantTextEntry(content="It shipped on Tuesday."),
]


def _noop(*_: Any) -> None:
    return None


def trace(engine: Engine, mode: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """Set ``mode`` up on ``engine``; returns (after each append, at the end)."""
    if mode in ("removed", "listener"):
        event.listen(engine, "before_cursor_execute", _noop)
        event.listen(engine, "after_cursor_execute", _noop)

        def stop() -> None:
            event.remove(engine, "before_cursor_execute", _noop)
            event.remove(engine, "after_cursor_execute", _noop)

        if mode == "removed":
            stop()
            return _noop, _noop
        return _noop, stop
    if mode == "otel":
        from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentor = SQLAlchemyInstrumentor()
        # It declares sqlalchemy < 2.1; its listeners work on 2.1 (tests/test_tracing.py).
        instrumentor.instrument(engine=engine, tracer_provider=provider, skip_dep_check=True)
        return exporter.clear, instrumentor.uninstrument
    return _noop, _noop


async def reset_pg(url: str) -> None:
    parsed = make_url(url)
    admin = parsed.set(drivername="postgresql", database="postgres")
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{parsed.database}"')
    finally:
        await conn.close()


async def trial(backend: str, mode: str, folder: Path, pg: str, appends: int) -> dict[str, float]:
    if backend == "pg":
        await reset_pg(pg)
        db = Database(pg)
    else:
        path = folder / f"{backend}-{mode}.sqlite3"
        db = Database(path, wal=backend == "sqlite-wal")
    session = SQLSession(db)
    await session.append("warm-up", RUN, run_id="w")
    # getattr: the same script times a lovia-store from before Database.sync_engine (A/B)
    after, stop = trace(getattr(db, "sync_engine", db.engine), mode)
    gc.collect()
    times = []
    cpu = time.process_time()
    for n in range(appends):
        start = time.perf_counter()
        await session.append(f"s{n % 10}", RUN, run_id=f"r{n}")
        times.append(time.perf_counter() - start)
        after()
    cpu = (time.process_time() - cpu) / appends
    stop()
    await db.close()
    return {"append_us": statistics.median(times) * 1e6, "append_cpu_us": cpu * 1e6}


def report(rounds: list[dict[tuple[str, str], dict[str, float]]]) -> str:
    keys = list(rounds[0])
    metrics = ("append_us", "append_cpu_us")
    lines = [
        "| backend | mode | append_us | append_cpu_us | wall / none | cpu / none |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for backend, mode in keys:
        cells = [f"{statistics.median(r[backend, mode][m] for r in rounds):.1f}" for m in metrics]
        for metric in metrics:
            ratio = statistics.median(
                r[backend, mode][metric] / r[backend, "none"][metric] for r in rounds
            )
            cells.append(f"{ratio:.2f}x")
        lines.append(f"| {backend} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument(
        "--pg",
        default="postgresql+asyncpg://postgres@127.0.0.1:5432/lovia_bench_tracing",
        help="a scratch database (dropped and recreated), or '' for none",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="a comma-separated subset")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    backends = ["sqlite", "sqlite-wal"] + (["pg"] if args.pg else [])
    chosen = tuple(mode for mode in MODES if mode in args.modes.split(","))
    rounds = []
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.rounds):
            folder = Path(scratch) / f"round-{number}"
            folder.mkdir()
            results = {}
            for backend in backends:
                # Rotated per round: no mode always runs first (or last) on a warm machine.
                modes = chosen[number % len(chosen) :] + chosen[: number % len(chosen)]
                for mode in modes:
                    results[backend, mode] = await trial(
                        backend, mode, folder, args.pg, args.appends
                    )
            rounds.append({key: results[key] for key in sorted(results, key=_order)})
            print(f"round {number + 1}/{args.rounds} done", flush=True)
    if args.pg:
        parsed = make_url(args.pg)
        admin = parsed.set(drivername="postgresql", database="postgres")
        conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
        await conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
        await conn.close()
    text = f"{args.rounds} rounds of {args.appends} appends, load at start: {load}\n\n"
    text += report(rounds)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


def _order(key: tuple[str, str]) -> tuple[int, int]:
    backend, mode = key
    return (["sqlite", "sqlite-wal", "pg"].index(backend), MODES.index(mode))


if __name__ == "__main__":
    asyncio.run(main())
