"""Retention: ``lovia_store.lifecycle.prune`` of many sessions, time, memory and lock hold.

A standalone benchmark (not one of W1-W9). It fills a fresh database with
``--sessions`` old sessions (one run of 4 entries each, the rows a lovia append
writes, bulk-inserted with their counters consistent), 1,000 newer ones that
stay, and one finished checkpoint (4 entries) per 100 old sessions, linked to
it, plus as many unlinked finished ones; one old session in 1,000 has an
interrupted run and must be spared. Then, each in a fresh child process so its
peak memory (``ru_maxrss``) is its own:

    dry-run    ``prune(url, older_than=cut, checkpoints_older_than=cut, dry_run=True)``
    prune      the same, deleting (batch_size 500)
    baseline   a child that imports lovia_store and does nothing: the memory floor

It reports seconds, sessions per second, the peak memory and the longest single
write transaction (one batch: what a concurrent writer may wait for), and checks
the outcome: every old session gone but the spared ones, every newer one left.

Usage: ``.venv/bin/python -m bench.prune [--scale tiny|default] [--sessions N]
[--pg URL] [--output FILE]`` (``--pg ''`` skips PostgreSQL); ``bench/run.sh --scale
tiny`` runs it at tiny scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
SCALES = {"tiny": 2_000, "default": 100_000}
KEPT = 1_000
CHUNK = 2_000
CUT = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(first: int, count: int, old: bool) -> dict[str, list[dict[str, Any]]]:
    """The rows of ``count`` sessions as a lovia append writes them."""
    from lovia_store import AssistantTextEntry, InputEntry, ToolCallEntry, ToolResultEntry
    from lovia_store.entries import entry_to_json

    entries = [
        InputEntry(role="user", content="where is my order?"),
        ToolCallEntry(call_id="c1", name="lookup", arguments='{"order": 1}'),
        ToolResultEntry(call_id="c1", output="shipped on Tuesday " * 10),
        AssistantTextEntry(content="It shipped on Tuesday."),
    ]
    documents = [entry_to_json(entry) for entry in entries]
    kinds = ["input", "tool_call", "tool_result", "assistant_text"]
    out: dict[str, list[dict[str, Any]]] = {"sessions": [], "messages": [], "segments": []}
    for n in range(first, first + count):
        sid = f"{'old' if old else 'new'}-{n:07}"
        at = CUT - timedelta(days=30, seconds=n) if old else CUT + timedelta(seconds=n)
        run_id = uuid.uuid4().hex
        out["sessions"].append(
            {
                "session_id": sid,
                "session_type": 0,
                "last_sequence": 4,
                "message_count": 4,
                "run_count": 1,
                "snapshot_version": 0,
                "created_at": at,
                "updated_at": at,
            }
        )
        for seq, (kind, document) in enumerate(zip(kinds, documents, strict=True), 1):
            out["messages"].append(
                {
                    "session_id": sid,
                    "sequence": seq,
                    "request_id": run_id,
                    "run_id": run_id,
                    "entry_type": kind,
                    "call_id": "c1" if kind.startswith("tool") else None,
                    "entry_json": document,
                    "created_at": at,
                }
            )
        out["segments"].append(
            {
                "session_id": sid,
                "run_id": run_id,
                "position": 1,
                "first_sequence": 1,
                "entry_count": 4,
                "meta_json": None,
                "created_at": at,
            }
        )
    return out


async def fill(url: str, sessions: int) -> None:
    from lovia_store import Database, RunHead
    from lovia_store.db.tables import (
        messages,
        run_entries,
        run_heads,
        session_runs,
    )
    from lovia_store.db.tables import sessions as session_table

    async with Database(url, synchronous="normal") as db:
        for first, count, old in [
            *((f, min(CHUNK, sessions - f), True) for f in range(0, sessions, CHUNK)),
            (0, KEPT, False),
        ]:
            rows = _rows(first, count, old)

            def insert(conn: Any, rows: dict[str, list[dict[str, Any]]] = rows) -> None:
                conn.execute(session_table.insert(), rows["sessions"])
                conn.execute(messages.insert(), rows["messages"])
                conn.execute(session_runs.insert(), rows["segments"])

            await db.write(insert)
        heads, entries = [], []
        for n in range(0, sessions, 100):
            for linked in (True, False):
                status = "interrupted" if linked and n % 1000 == 0 else "completed"
                run_id = f"run-{n:07}-{int(linked)}"
                head = RunHead(agent_name="a", status=status)  # type: ignore[arg-type]
                heads.append(
                    {
                        "run_id": run_id,
                        "status": status,
                        "head_json": head.model_dump_json(),
                        "entry_count": 4,
                        "created_at": CUT - timedelta(days=30),
                        "updated_at": CUT - timedelta(days=30),
                        "session_id": f"old-{n:07}" if linked else None,
                    }
                )
                entries += [
                    {"run_id": run_id, "position": p, "entry_json": '{"type":"input"}'}
                    for p in range(1, 5)
                ]

        def checkpoints(conn: Any) -> None:
            conn.execute(run_heads.insert(), heads)
            conn.execute(run_entries.insert(), entries)

        await db.write(checkpoints)


async def child(job: str, url: str) -> dict[str, Any]:
    from sqlalchemy import func, select

    from lovia_store import Database
    from lovia_store.db.tables import sessions
    from lovia_store.lifecycle import prune

    extra: dict[str, Any] = {}
    started = time.perf_counter()
    if job != "baseline":
        async with Database(url) as db:
            writes: list[float] = []
            original = db.write

            async def timed(work: Any) -> Any:
                begun = time.perf_counter()
                try:
                    return await original(work)
                finally:
                    writes.append(time.perf_counter() - begun)

            db.write = timed  # type: ignore[method-assign]
            report = await prune(
                db, older_than=CUT, checkpoints_older_than=CUT, dry_run=job == "dry-run"
            )
            left = await db.read(
                lambda conn: conn.execute(select(func.count()).select_from(sessions)).scalar()
            )
        extra = {
            "sessions": len(report.sessions),
            "runs": len(report.runs),
            "spared": len(report.spared_sessions),
            "left": left,
            "transactions": len(writes),
            "longest_write_ms": max(writes, default=0.0) * 1000,
        }
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_mib": peak_kib / 1024, **extra}


def run_child(job: str, url: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.prune", "--child", job, url],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
        timeout=3600,
    )
    if done.returncode:
        raise RuntimeError(f"{job} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def _pg_database(pg: str) -> tuple[str, str]:
    """A fresh database beside the one ``pg`` names: (its URL, its name)."""
    import asyncpg

    url = make_url(pg)
    name = f"lovia_bench_prune_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, database=url.database
    )
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return url.set(database=name).render_as_string(hide_password=False), name


async def _pg_drop(pg: str, name: str) -> None:
    import asyncpg

    url = make_url(pg)
    conn = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, database=url.database
    )
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def measure(backend: str, url: str, sessions: int) -> dict[str, Any]:
    started = time.perf_counter()
    asyncio.run(fill(url, sessions))
    results: dict[str, Any] = {"backend": backend, "fill_s": time.perf_counter() - started}
    for job in ("baseline", "dry-run", "prune"):
        print(f"bench.prune: {backend} {job}", file=sys.stderr)
        results[job] = run_child(job, url)
    spared = len(range(0, sessions, 1000))
    for job in ("dry-run", "prune"):
        got = results[job]
        if got["sessions"] != sessions - spared or got["spared"] != spared:
            raise RuntimeError(f"{backend} {job}: unexpected outcome {got}")
    if results["prune"]["left"] != KEPT + spared:
        raise RuntimeError(f"{backend}: {results['prune']['left']} sessions left")
    return results


def render(runs: list[dict[str, Any]], sessions: int, command: str) -> str:
    lines = [
        f"# Prune of {sessions:,} sessions",
        "",
        f"`{command}` on {os.uname().nodename} ({os.cpu_count()} cores), "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Each old session: one run of 4 entries;",
        f"{KEPT:,} newer sessions stay, one old session in 1,000 is spared by an",
        "interrupted run, and a finished checkpoint per 100 sessions goes with its",
        "session (as many unlinked ones go by age). batch_size 500.",
        "",
        "| backend | job | seconds | sessions/s | checkpoints | transactions "
        "| longest write (ms) | peak MiB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        base = run["baseline"]
        lines.append(
            f"| {run['backend']} | baseline (import lovia_store) | | | | | | "
            f"{base['peak_mib']:.0f} |"
        )
        for job in ("dry-run", "prune"):
            r = run[job]
            lines.append(
                f"| {run['backend']} | {job} | {r['seconds']:.2f} | "
                f"{r['sessions'] / r['seconds']:,.0f} | {r['runs']:,} | {r['transactions']} | "
                f"{r['longest_write_ms']:.0f} | {r['peak_mib']:.0f} |"
            )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prune", description=__doc__)
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument("--sessions", type=int, help="old sessions (default: the scale's)")
    parser.add_argument("--pg", default=os.environ.get("LOVIA_BENCH_PG", DEFAULT_PG))
    parser.add_argument("--output", type=Path)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(child(*args.child))))
        return 0
    sessions = args.sessions or SCALES[args.scale]
    runs = []
    with tempfile.TemporaryDirectory(prefix="lovia-bench-prune-") as tmp:
        runs.append(measure("sqlite", str(Path(tmp) / "prune.sqlite3"), sessions))
    if args.pg:
        try:
            url, name = asyncio.run(_pg_database(args.pg))
        except Exception as exc:  # an unreachable server: its rows are n/a
            print(f"bench.prune: PostgreSQL not reachable ({exc}): skipped", file=sys.stderr)
        else:
            try:
                runs.append(measure("postgresql", url, sessions))
            finally:
                asyncio.run(_pg_drop(args.pg, name))
    command = "python -m bench.prune " + " ".join(sys.argv[1:] if argv is None else argv)
    report = render(runs, sessions, command.strip())
    print(report)
    output = args.output
    if output is None and args.scale != "tiny":
        output = ROOT / "RESULTS-prune.md"
    if output is not None:
        output.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
