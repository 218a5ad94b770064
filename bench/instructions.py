"""CPU instructions per operation, counted by valgrind's callgrind: two commits compared.

Wall-clock pairs on a small shared machine swing 2x; an instruction count does
not. Each cell runs in a fresh child under ``valgrind --tool=callgrind
--instr-atstart=no``: the child sets its stores up and warms them uninstrumented,
then a two-line C helper (compiled here, from valgrind's ``callgrind.h``) starts
instrumentation, the timed loop runs, and the helper dumps the count. What is
counted is the client's work on every thread (Python, SQLAlchemy, the driver,
SQLite's own C code); a server's work is not. Instructions are not seconds
(cache misses and system calls are not in them), so this says whether the code
does more, not by how much a call is slower.

    append   W1's call: one 8-entry run appended (``SQLSession.append``)
    step     W4's call: one checkpoint step (``SQLCheckpointer.append``)
    load     W3's call: a 400-entry session loaded
    page     W5's call: a page of 50 raw messages (``list_raw_messages``)
    trim     W6's call: ``trim_tool_results`` of a 400-entry session
    stream   W8's second call: ``iter_entries`` of a 400-entry session
    raw      the Raw Log API's ``append`` of one message (``SQLSessionStorage``)
    lovia    W10's call: one run of lovia's own Runner (10 turns, 30 checkpoint
             steps) through ``lovia_store.integrations.lovia``

SQLite runs WAL with ``synchronous=normal``; PostgreSQL through asyncpg, each
side in a fresh database of its own.

Usage: ``bench/.venv/bin/python -m bench.instructions [--baseline REV] [--work
append,step] [--backends sqlite,pg] [--scale tiny|default] [--pg URL]
[--output FILE]``. ``--baseline`` takes any git revision: its ``src/`` is
extracted to a temporary folder and run by the same harness and interpreter;
the report gives both counts and their ratio (above 1: more work now).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
WORKS = ("append", "step", "load", "page", "trim", "stream", "raw", "lovia")
SCALES = {  # operations counted per cell
    "tiny": dict.fromkeys(WORKS, 1),
    "default": {
        "append": 50,
        "step": 50,
        "load": 10,
        "page": 30,
        "trim": 10,
        "stream": 10,
        "raw": 50,
        "lovia": 3,
    },
}
_HELPER = """
#include <valgrind/callgrind.h>
void counting_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void counting_stop(void) { CALLGRIND_DUMP_STATS_AT("counted"); CALLGRIND_STOP_INSTRUMENTATION; }
"""
_PREFILL_RUNS = 50  # 400 entries: the session load, page and trim read

Op = Callable[[], Awaitable[Any]]


# -- the child: one work, counted -----------------------------------------------


async def _ops(work: str, count: int, backend: str, url: str, folder: str) -> tuple[list[Op], Any]:
    """``count`` operations of ``work``, their stores set up and warmed, and the
    Database to close."""
    import lovia_store as ls
    from bench import data

    def database(name: str) -> Any:
        if backend == "pg":
            return ls.Database(url)
        return ls.Database(os.path.join(folder, name), wal=True, synchronous="normal")

    tag = uuid.uuid4().hex[:8]
    runs = [[ls.entry_from_dict(e) for e in run] for run in data.runs(0, count + _PREFILL_RUNS)]
    if work == "step":
        db = database("runs.db")
        checkpointer = ls.SQLCheckpointer(db)
        entries = [ls.entry_from_dict(data.checkpoint_entry(i)) for i in range(count + 20)]

        def step(turn: int) -> Awaitable[Any]:
            usage = ls.Usage(input_tokens=turn, output_tokens=turn)
            head = ls.RunHead(agent_name="bench", usage=usage, turns=turn)
            return checkpointer.append(f"step-{tag}", [entries[turn]], head)

        for turn in range(20):
            await step(turn)
        return [lambda t=t: step(t + 20) for t in range(count)], db
    if work == "lovia":
        from lovia import CheckpointOptions, Runner

        from bench.workloads.lovia_runner import FINAL_TEXT, _agent
        from lovia_store.integrations import lovia as integration

        db = database("lovia.db")
        session, checkpointer = integration.SQLSession(db), integration.SQLCheckpointer(db)

        async def run(index: int) -> None:
            prompt = f"[run {index}] Where is the append path? " + data.blob(index)[:300]
            run_id = f"run-{tag}-{index}"
            options = CheckpointOptions(checkpointer, run_id)
            result = await Runner.run(
                _agent(index), prompt, session=session, session_id=run_id, checkpoint=options
            )
            if result.output != FINAL_TEXT:
                raise RuntimeError(f"run {index}: {result.output!r}")

        for index in range(3):
            await run(-1 - index)
        return [lambda i=i: run(i) for i in range(count)], db
    db = database("sessions.db")
    session = ls.SQLSession(db)
    if work == "raw":
        raw_log = ls.SQLSessionStorage(db)
        messages = [entry for run in runs for entry in run]

        def append(index: int) -> Awaitable[int]:
            return raw_log.append(f"raw-{tag}", f"request-{index // 8}", messages[index])

        for index in range(20):
            await append(index)
        return [lambda i=i: append(i + 20) for i in range(count)], db
    if work == "append":
        for index in range(20):
            await session.append(f"w1-{tag}", runs[index], run_id=f"warm-{index}")
        return [
            lambda i=i: session.append(f"w1-{tag}", runs[i + 20], run_id=f"run-{i}")
            for i in range(count)
        ], db
    sid = f"prefilled-{tag}"
    for index in range(_PREFILL_RUNS):
        await session.append(sid, runs[index], run_id=f"run-{index}")
    ops: list[Op]
    if work == "load":
        ops = [lambda: session.load(sid)] * count
    elif work == "page":
        raw_log = ls.SQLSessionStorage(db)
        ops = [
            lambda i=i: raw_log.list_raw_messages(sid, after_sequence=(i * 7) % 300, limit=50)
            for i in range(count)
        ]
    elif work == "trim":
        ops = [lambda: session.trim_tool_results(sid, keep_chars=400, keep_runs=1)] * count
    elif work == "stream":

        async def stream() -> None:
            async for _entry in session.iter_entries(sid):
                pass

        ops = [stream] * count
    else:
        raise SystemExit(f"unknown work {work!r}")
    for op in ops[:3]:  # warm: statements built, caches filled, the first trim done
        await op()
    return ops, db


async def _child(work: str, count: int, backend: str, url: str) -> None:
    helper = ctypes.CDLL(os.environ["LOVIA_BENCH_CALLGRIND_HELPER"])
    with tempfile.TemporaryDirectory(prefix="lovia-bench-instr-") as folder:
        ops, db = await _ops(work, count, backend, url, folder)
        gc.collect()
        helper.counting_start()
        for op in ops:
            await op()
        helper.counting_stop()
        await db.close()


# -- the parent: cells, sides, the report ------------------------------------------


def _helper(folder: Path) -> Path:
    source, library = folder / "callgrind_helper.c", folder / "callgrind_helper.so"
    source.write_text(_HELPER)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def count(src: Path, work: str, ops: int, backend: str, url: str, helper: Path) -> int:
    """Instructions of ``ops`` operations, the lovia_store in ``src`` doing them."""
    with tempfile.TemporaryDirectory(prefix="lovia-bench-callgrind-") as out:
        env = os.environ | {
            "PYTHONPATH": f"{src}{os.pathsep}{ROOT}",
            "PYTHONHASHSEED": "0",
            "LOVIA_BENCH_CALLGRIND_HELPER": str(helper),
        }
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}/callgrind.out",
            sys.executable,
            "-m",
            "bench.instructions",
            "--child",
            work,
            str(ops),
            backend,
            url,
        ]
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{work} on {backend} failed:\n{done.stderr[-3000:]}")
        for dump in Path(out).iterdir():
            text = dump.read_text(errors="replace")
            if "Trigger: Client Request: counted" in text:
                for line in text.splitlines():
                    if line.startswith("summary:"):
                        return int(line.split()[1])
        raise RuntimeError(f"{work} on {backend}: callgrind wrote no counted dump")


def _extract(revision: str, folder: Path) -> Path:
    """``src/`` of ``revision``, written under ``folder``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


async def _pg_database(pg: str, create: bool, name: str) -> str:
    import asyncpg
    from sqlalchemy.engine import make_url

    url = make_url(pg)
    conn = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, database=url.database
    )
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return url.set(database=name).render_as_string(hide_password=False)


def render(rows: list[dict[str, Any]], baseline: str | None, command: str) -> str:
    if baseline:
        head = f"| work | backend | ops | {baseline} | working tree | ratio |"
    else:
        head = "| work | backend | ops | working tree |"
    lines = [
        "# Instructions per operation (callgrind)",
        "",
        f"`{command}` on {os.uname().nodename}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        head,
        "| --- | --- | ---: | ---: | ---: | ---: |" if baseline else "| --- | --- | ---: | ---: |",
    ]
    for row in rows:
        cells = [row["work"], row["backend"], str(row["ops"])]
        if baseline:
            ratio = row["current"] / row["baseline"]
            cells += [f"{row['baseline']:,}", f"{row['current']:,}", f"{ratio:.3f}"]
        else:
            cells.append(f"{row['current']:,}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--baseline", help="a git revision to compare the working tree with")
    parser.add_argument("--work", default=",".join(WORKS))
    parser.add_argument("--backends", default="sqlite,pg")
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument("--pg", default=os.environ.get("LOVIA_BENCH_PG", DEFAULT_PG))
    parser.add_argument("--output", type=Path)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        work, ops, backend, url = args.child
        asyncio.run(_child(work, int(ops), backend, url))
        return 0
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing or not Path("/usr/include/valgrind/callgrind.h").exists():
        parser.error(f"needs valgrind, its callgrind.h and a C compiler (missing: {missing})")
    works = [w for w in args.work.split(",") if w]
    backends = [b for b in args.backends.split(",") if b]
    unknown = [w for w in works if w not in WORKS]
    unknown += [b for b in backends if b not in ("sqlite", "pg")]
    if unknown:
        parser.error(f"unknown work or backend: {', '.join(unknown)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lovia-bench-instructions-") as tmp:
        folder = Path(tmp)
        helper = _helper(folder)
        sides = {"current": ROOT / "src"}
        if args.baseline:
            (folder / "baseline").mkdir()
            sides["baseline"] = _extract(args.baseline, folder / "baseline")
        urls = {}
        if "pg" in backends:
            for side in sides:
                name = f"lovia_bench_instr_{side}_{uuid.uuid4().hex[:6]}"
                urls[side] = asyncio.run(_pg_database(args.pg, True, name))
        try:
            for work in works:
                ops = SCALES[args.scale][work]
                for backend in backends:
                    row: dict[str, Any] = {"work": work, "backend": backend, "ops": ops}
                    for side, src in sides.items():
                        print(f"bench.instructions: {work} {backend} {side}", file=sys.stderr)
                        url = urls.get(side, "")
                        row[side] = count(src, work, ops, backend, url, helper) // ops
                    rows.append(row)
        finally:
            for url in urls.values():
                from sqlalchemy.engine import make_url

                asyncio.run(_pg_database(args.pg, False, str(make_url(url).database)))
    command = "python -m bench.instructions " + " ".join(sys.argv[1:] if argv is None else argv)
    report = render(rows, args.baseline, command.strip())
    print(report)
    if args.output is not None:
        args.output.write_text(report + "\n")
        args.output.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
