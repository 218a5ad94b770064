"""Copy, export and import throughput and memory, SQLite -> PostgreSQL, against a raw floor.

A standalone benchmark (not one of W1-W9). It writes a SQLite source through
``SQLSession.append`` (``--entries`` Raw Log messages in sessions of
``--per-session``, runs of 10 entries), then, each in a fresh child process so
its peak memory (``ru_maxrss``) is its own:

    floor      the raw-driver floor: every row of the three tables a lovia
               session fills (sessions, messages, segments) read with sqlite3
               and written into a fresh lovia-store schema on PostgreSQL with
               asyncpg ``copy_records_to_table`` (timestamps parsed, nothing checked)
    copy       ``lovia_store.lifecycle.copy_database`` SQLite -> PostgreSQL, without
               its verification, then ``copy+verify`` with it
    export     ``export`` of the source to a JSON-lines file (plain, and .gz)
    import     ``import_file`` of that file into a fresh PostgreSQL database (its two
               passes: check, then write) and into a fresh SQLite file
    baseline   a child that imports lovia_store and does nothing: the memory floor

Throughput is Raw Log messages per second (every other row rides along).

Usage: ``.venv/bin/python -m bench.copy [--scale tiny|default] [--entries N]
[--pg URL] [--output FILE]``; ``bench/run.sh --scale tiny`` runs it at tiny scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
SCALES = {"tiny": 3_000, "default": 100_000}
TABLES = ("lovia_sessions", "lovia_messages", "lovia_session_runs")


# -- the source ------------------------------------------------------------------------------


async def make_source(path: Path, entries: int, per_session: int) -> None:
    from lovia_store import AssistantTextEntry, Database, InputEntry, SQLSession

    async with Database(path, synchronous="normal") as db:
        session = SQLSession(db)
        written = 0
        s = 0
        while written < entries:
            for r in range(max(1, per_session // 10)):
                run = [
                    InputEntry(role="user", content=f"question {s}.{r}")
                    if e == 0
                    else AssistantTextEntry(content=f"answer {s}.{r}.{e} " + "lorem ipsum " * 20)
                    for e in range(min(10, entries - written))
                ]
                await session.append(f"session-{s:06d}", run, run_id=f"run-{s}-{r}")
                written += len(run)
                if written >= entries:
                    break
            s += 1


# -- PostgreSQL databases ----------------------------------------------------------------------


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def fresh_pg(admin_url: str) -> str:
    """A new database holding lovia-store's (empty) schema: no child times the migration."""
    from lovia_store import upgrade

    name = f"lovia_bench_copy_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(_dsn(admin_url))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    await upgrade(url)
    return url


async def drop_pg(admin_url: str, url: str) -> None:
    conn = await asyncpg.connect(_dsn(admin_url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        await conn.close()


# -- what each child measures ---------------------------------------------------------------------


def _utc(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == " ":
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value


async def floor(source: str, destination: str) -> None:
    """sqlite3 reads, asyncpg COPY writes, into the same tables (made beforehand)."""
    reader = sqlite3.connect(source)
    conn = await asyncpg.connect(_dsn(destination))
    try:
        for table in TABLES:
            cursor = reader.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cursor.description]
            while rows := cursor.fetchmany(5000):
                records = [tuple(_utc(v) for v in row) for row in rows]
                await conn.copy_records_to_table(table, records=records, columns=columns)
    finally:
        await conn.close()
        reader.close()


async def child(job: str, args: list[str]) -> dict[str, Any]:
    from lovia_store.lifecycle import copy_database, export, import_file

    started = time.perf_counter()
    extra: dict[str, Any] = {}
    if job == "floor":
        await floor(args[0], args[1])
    elif job in ("copy", "copy+verify"):
        report = await copy_database(args[0], args[1], verify=job == "copy+verify")
        assert job == "copy" or report.ok, report.differing
        extra["inserted"] = sum(report.inserted.values())
    elif job == "export":
        report_e = await export(args[0], args[1])
        extra["records"] = report_e.records
        extra["bytes"] = Path(args[1]).stat().st_size  # noqa: ASYNC240 - once, after the export
    elif job == "import":
        report_i = await import_file(args[1], args[0])
        extra["inserted"] = sum(report_i.inserted.values())
    elif job != "baseline":
        raise SystemExit(f"unknown job {job}")
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_mib": peak_kib / 1024, **extra}


def run_child(job: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.copy", "--child", job, *args],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{job} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the run -----------------------------------------------------------------------------------


async def measure(
    entries: int, per_session: int, pg: str, folder: Path, jobs: tuple[str, ...]
) -> dict[str, Any]:
    from lovia_store import upgrade

    source = folder / f"source-{entries}.sqlite3"
    started = time.perf_counter()
    await make_source(source, entries, per_session)
    results: dict[str, Any] = {
        "entries": entries,
        "sessions": -(-entries // per_session),
        "source_mib": source.stat().st_size / 2**20,
        "make_source_s": time.perf_counter() - started,
        "baseline": run_child("baseline"),
    }
    for job in ("floor", "copy", "copy+verify"):
        if job not in jobs:
            continue
        destination = await fresh_pg(pg)
        try:
            results[job] = run_child(job, str(source), destination)
        finally:
            await drop_pg(pg, destination)
    if "export" not in jobs:
        return results
    for suffix in ("jsonl", "jsonl.gz"):
        path = folder / f"export-{entries}.{suffix}"
        results[f"export .{suffix}"] = run_child("export", str(source), str(path))
    path = folder / f"export-{entries}.jsonl.gz"
    destination = await fresh_pg(pg)
    try:
        results["import .jsonl.gz -> PostgreSQL"] = run_child("import", str(path), destination)
    finally:
        await drop_pg(pg, destination)
    target = folder / f"imported-{entries}.sqlite3"
    await upgrade(target)
    results["import .jsonl.gz -> SQLite"] = run_child("import", str(path), str(target))
    return results


JOBS = (
    "floor",
    "copy",
    "copy+verify",
    "export .jsonl",
    "export .jsonl.gz",
    "import .jsonl.gz -> PostgreSQL",
    "import .jsonl.gz -> SQLite",
    "baseline",
)


def render(runs: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# Copy, export and import: throughput and memory (bench/copy.py)",
        "",
        f"`{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"load average {os.getloadavg()[0]:.2f} at the end (a shared 2-core machine).",
        "",
    ]
    for run in runs:
        n = run["entries"]
        lines += [
            f"## {n:,} messages in {run['sessions']:,} sessions "
            f"(SQLite source {run['source_mib']:.1f} MiB, written in {run['make_source_s']:.0f} s)",
            "",
            "| operation | seconds | messages/s | vs floor | peak RSS (MiB) |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        floor_rate = n / run["floor"]["seconds"] if "floor" in run else float("nan")
        for job in JOBS:
            if job not in run:
                continue
            result = run[job]
            if job == "baseline":
                lines.append(f"| baseline (import lovia_store) | | | | {result['peak_mib']:.0f} |")
                continue
            rate = n / result["seconds"]
            lines.append(
                f"| {job} | {result['seconds']:.2f} | {rate:,.0f} | {rate / floor_rate:.2f}x | "
                f"{result['peak_mib']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.copy", description=__doc__)
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument(
        "--entries", type=int, nargs="*", help="message counts to measure (default: the scale's)"
    )
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument("--pg", default=os.environ.get("LOVIA_BENCH_PG", DEFAULT_PG))
    parser.add_argument("--output", type=Path)
    parser.add_argument(
        "--jobs",
        default="floor,copy,copy+verify,export",
        help="which to run, comma-separated (export includes the imports)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(child(args.child[0], args.child[1:]))))
        return 0
    counts = args.entries or [SCALES[args.scale]]
    with tempfile.TemporaryDirectory(prefix="lovia-bench-copy-") as tmp:
        runs = []
        for entries in counts:
            print(f"bench.copy: {entries:,} messages", file=sys.stderr)
            jobs = tuple(args.jobs.split(","))
            runs.append(asyncio.run(measure(entries, args.per_session, args.pg, Path(tmp), jobs)))
    command = "python -m bench.copy " + " ".join(sys.argv[1:] if argv is None else argv)
    report = render(runs, command.strip())
    print(report)
    output = args.output
    if output is None and args.scale != "tiny":
        output = ROOT / "RESULTS-copy.md"
    if output is not None:
        output.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
