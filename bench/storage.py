"""What a realistic history costs to store, compressed, shared and encrypted (issue 33).

One run, so that every ratio compares like with like: the same agent history
(``bench.agent_data``) is written, interleaved session by session, to

    (a) lovia      lovia 0.9's own ``SQLiteSession`` file (its default journal)
    (b) plain      lovia-store, ``Database(compression=False)``: today's format
    (c) compressed lovia-store's default: long documents compressed, long strings
                   (tool outputs) stored once in ``lovia_contents``
    (d) encrypted  the default plus ``encryption_keys=[key]``

(b)-(d) on SQLite (``Database(path, wal=True, synchronous="normal")``: the
codec's CPU is not hidden behind fsyncs), and on PostgreSQL and MariaDB (a scratch
database per configuration on the servers of ``LOVIA_TEST_POSTGRES_URL`` /
``LOVIA_TEST_MYSQL_URL``, dropped after). Every session is loaded back and
compared with what was written (a difference fails the run).

**Size.** SQLite: ``page_count * page_size`` after ``wal_checkpoint(TRUNCATE)``,
and of a ``VACUUM INTO`` copy. PostgreSQL: ``pg_total_relation_size`` summed over
the database's tables (TOAST and indexes included), as written and after
``VACUUM FULL``. MariaDB: ``data_length + index_length`` after ``ANALYZE TABLE``,
and after ``OPTIMIZE TABLE``. Ratios against lovia's file and against (b). Beside
them, how many of 24 plaintext needles (lines of tool outputs, and of user and
assistant text) the SQLite file's bytes, or ``pg_dump`` / ``mariadb-dump``'s
output, still contain.

**Speed**, (b) against (c) and (d) on each backend, every call made by the three
configurations back to back (their order rotating), wall and CPU time
(``process_time``: the client's work on every thread, not the server's):

    append  every run of a new session (held-out session ``10000 + round``: its
            outputs partly new, partly stored already, as in real use), one
            ``SQLSession.append`` each
    load    ``SQLSession.load`` of the dataset's largest session, repeated
    page    ``SQLSessionStorage.list_raw_messages(limit=50)`` (the Raw Log's page)
            at offsets across that session

Cells: the median call of each round, then the median over rounds and its range.
Ratios: per round the median of a call's time over (b)'s same call, then the median
over rounds and its range; and the CPU time of all calls summed, over (b)'s (a large
run weighs what it costs). A store that raises or returns other data than was
written is reported (and the exit status is 1); the rest of the run goes on.

``--instructions [sqlite,pg]`` also counts each operation's CPU instructions under
callgrind (``bench.instructions``' cells ``agent-append``, ``agent-load`` and
``agent-page``), per configuration: repeatable to about 0.1% where seconds are not,
on a shared machine (about 15 s a cell at ``tiny``, 9 cells per backend).

**The dataset** (``bench.agent_data``; default scale, 40 sessions): 27 coding and 13
research sessions, 375 runs, 6,351 entries, 34.0 MB of entry JSON; 2,186 tool
results holding 19.6 MB of output, 938 distinct outputs (7.4 MB): 5.8 MB of output
repeats one of the same session, 6.4 MB one of another session. Files read (832
reads, 11.0 MB), greps (248, 2.6 MB), fetched pages (291, 3.8 MB), query results
(118, 1.0 MB), test runs and diffs (251, 0.5 MB), listings, searches, edits. A tool
result of up to 16,000 characters keeps its value as ``raw`` too, as lovia's Runner
does. ``--scale tiny``: 6 sessions, 60 runs, 1,031 entries, 4.9 MB.

Usage (from the repository root; ``source /tmp/env.sh`` or set the two URLs for the
servers, else they are skipped)::

    .venv/bin/python -m bench.storage [--scale tiny|default|large] [--sessions N]
        [--rounds N] [--backends sqlite,postgres,mariadb] [--speed sqlite,postgres,mariadb]
        [--threshold N] [--instructions [sqlite,pg]] [--output FILE] [--json FILE]

``--scale tiny`` is a smoke run (6 sessions, 2 rounds, under a minute); ``default``
(40 sessions, 5 rounds) a few minutes; ``--speed ''`` measures sizes only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import hashlib
import json
import os
import re
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench import agent_data
from bench.backends.base import TrialContext
from bench.backends.lovia import LoviaBackend
from bench.backends.lovia_store import LoviaStoreBackend
from bench.machine import source_revision
from bench.migrate_tenants import SERVERS, _server_admin

ROOT = Path(__file__).resolve().parent.parent
KEY = base64.urlsafe_b64encode(hashlib.sha256(b"lovia-bench-storage").digest()).decode()
"""A fixed key: what is measured does not depend on which key seals it."""
CODECS: dict[str, dict[str, Any]] = {
    "plain": {"compression": False},
    "compressed": {},
    "encrypted": {"encryption_keys": [KEY]},
}
"""lovia-store's configurations (``Database`` options); ``bench.instructions`` uses them."""
LABELS = {
    "lovia": "(a) lovia 0.9 SQLiteSession",
    "plain": "(b) plain (compression=False)",
    "compressed": "(c) compressed + shared (default)",
    "encrypted": "(d) encrypted",
}
BACKENDS = ("sqlite", "postgres", "mariadb")
HELD_OUT = 10_000
"""The first held-out session: round r appends session ``HELD_OUT + r``."""
PAGE = 50


@dataclass(frozen=True)
class Scale:
    sessions: int
    rounds: int
    loads: int  # loads per configuration per round
    pages: int  # page offsets per round


SCALES = {
    "tiny": Scale(sessions=6, rounds=2, loads=3, pages=4),
    "default": Scale(sessions=40, rounds=5, loads=7, pages=8),
    "large": Scale(sessions=150, rounds=7, loads=9, pages=10),
}


def codec_options(name: str, threshold: int | None = None) -> dict[str, Any]:
    """``Database`` options of configuration ``name`` (None threshold: the default)."""
    options = dict(CODECS[name])
    if threshold is not None and name != "plain":
        options["compression_threshold"] = threshold
    return options


# -- stores ------------------------------------------------------------------------


class CodecStore(LoviaStoreBackend):
    """lovia-store's ``SQLSession`` and Raw Log reader on one ``Database`` with a
    configuration's codec options (the bench adapter's conversions, appends, loads
    and pages, on any backend)."""

    def __init__(self, target: str, options: dict[str, Any], folder: Path) -> None:
        super().__init__(TrialContext(folder, None), wal=True)
        self.target, self.options = target, options

    async def open(self) -> None:
        import lovia_store as ls

        self.stores = []
        self._entry_from_dict = ls.entry_from_dict
        sqlite = "://" not in self.target
        settings: dict[str, Any] = SQLITE_SETTINGS if sqlite else {}
        database = ls.Database(self.target, **settings, **self.options)
        self.stores.append(database)
        await ls.upgrade(database)
        self.session = ls.SQLSession(database)
        self.stores.append(self.session)
        await self.open_raw_log()
        await self.session.load("warmup")


SQLITE_SETTINGS: dict[str, Any] = {"wal": True, "synchronous": "normal"}
"""lovia-store's SQLite settings here (``--sqlite-durability``): WAL with synchronous=NORMAL
by default, so no fsync hides the codec's CPU; ``full`` is lovia-store's own default
(rollback journal, synchronous=FULL), lovia's durability."""


@dataclass
class Target:
    """One configuration on one backend: where it is, its store, what it cost."""

    backend: str
    config: str
    location: str  # a SQLite path or a server URL
    folder: Path
    threshold: int | None = None
    store: Any = None
    spent: dict[str, float] = field(default_factory=dict)
    size: dict[str, Any] = field(default_factory=dict)
    failed: str = ""  # what went wrong (wrong data, or an error): left out from then on

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.config}"

    async def open(self) -> None:
        if self.config == "lovia":
            self.store = LoviaBackend(TrialContext(self.folder, None))
        else:
            options = codec_options(self.config, self.threshold)
            self.store = CodecStore(self.location, options, self.folder)
        await self.store.open()

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
            self.store = None

    def add(self, key: str, value: float) -> None:
        self.spent[key] = self.spent.get(key, 0.0) + value


def rotate(items: Sequence[Any], by: int) -> list[Any]:
    by %= len(items)
    return [*items[by:], *items[:by]]


class Clock:
    """Wall and CPU seconds of a block."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


# -- scratch databases ---------------------------------------------------------------


async def create_database(backend: str, config: str) -> str:
    name = f"lovia_bench_storage_{config}_{uuid.uuid4().hex[:8]}"
    if backend == "postgres":
        await _server_admin(backend, f'CREATE DATABASE "{name}"')
    else:
        await _server_admin(
            backend, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        )
    base = make_url(os.environ[SERVERS[backend]])
    return base.set(database=name).render_as_string(hide_password=False)


async def drop_database(backend: str, url: str) -> None:
    name = make_url(url).database
    if backend == "postgres":
        await _server_admin(backend, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    else:
        await _server_admin(backend, f"DROP DATABASE IF EXISTS `{name}`")


# -- writing and checking the dataset --------------------------------------------------


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


async def write_all(targets: list[Target], sessions: list[agent_data.Session]) -> None:
    """Every session into every target, targets interleaved session by session. A target
    that fails is named in ``errors`` and left out from then on."""
    for index, session in enumerate(sessions):
        for target in rotate([t for t in targets if not t.failed], index):
            runs = [target.store.convert_run(run) for run in session.runs]
            try:
                with Clock() as clock:
                    for number, run in enumerate(runs):
                        await target.store.append_run(session.id, run, f"{session.id}-{number}")
            except Exception as exc:
                target.failed = f"writing {session.id}: {_failure(exc)}"
                continue
            target.add("write_s", clock.wall)
            target.add("write_cpu_s", clock.cpu)


async def check_all(targets: list[Target], sessions: list[agent_data.Session]) -> None:
    """Every session loaded back from every target and compared with what was written."""
    for index, session in enumerate(sessions):
        flat = [entry for run in session.runs for entry in run]
        for target in rotate([t for t in targets if not t.failed], index):
            expected = target.store.convert_run(flat)
            try:
                with Clock() as clock:
                    loaded = await target.store.session.load(session.id)
            except Exception as exc:
                target.failed = f"loading {session.id}: {_failure(exc)}"
                continue
            target.add("read_s", clock.wall)
            target.add("read_cpu_s", clock.cpu)
            if loaded != expected:
                bad = next(
                    (n for n, (a, b) in enumerate(zip(loaded, expected, strict=False)) if a != b),
                    min(len(loaded), len(expected)),
                )
                target.failed = (
                    f"{session.id} loaded {len(loaded)} entries of {len(expected)}, "
                    f"the first difference at entry {bad}"
                )


# -- sizes -------------------------------------------------------------------------------

_NEEDLE = re.compile(r"[A-Za-z0-9 _.,:;()=+*/<>#-]{40,}")


def needles(sessions: list[agent_data.Session], count: int = 12) -> dict[str, list[str]]:
    """Plaintext to look for: 40-character pieces of tool outputs, and of user and
    assistant text, made of characters no JSON, COPY or dump escapes."""
    found: dict[str, list[str]] = {"outputs": [], "messages": []}
    for session in sessions:
        for run in session.runs:
            for entry in run:
                kind = {"tool_result": "outputs", "input": "messages"}.get(entry["type"])
                if entry["type"] == "assistant_text":
                    kind = "messages"
                if kind is None or len(found[kind]) >= count * 4:
                    continue
                body = entry["output"] if kind == "outputs" else entry["content"]
                match = _NEEDLE.search(body)
                if match and match.group()[:40] not in found[kind]:
                    found[kind].append(match.group()[:40])
    # Spread over the dataset, not its first sessions alone.
    return {kind: pieces[:: max(1, len(pieces) // count)][:count] for kind, pieces in found.items()}


def search(data: bytes, wanted: dict[str, list[str]]) -> dict[str, int]:
    return {kind: sum(p.encode() in data for p in pieces) for kind, pieces in wanted.items()}


def sqlite_size(path: Path, wanted: dict[str, list[str]]) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        tables = dict(conn.execute(_SQLITE_TABLES).fetchall())
        copy = path.with_name(path.name + ".vacuumed")
        conn.execute("VACUUM INTO ?", (str(copy),))
    finally:
        conn.close()
    data = path.read_bytes()
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        data += wal.read_bytes()
    size = {
        "bytes": pages * page_size,
        "free_pages": free,
        "file_bytes": path.stat().st_size,
        "vacuumed_bytes": copy.stat().st_size,
        "contents_bytes": tables.get("lovia_contents"),
        "tables": tables,
        "plaintext": search(data, wanted),
    }
    copy.unlink()
    return size


_SQLITE_TABLES = """
SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize)
FROM dbstat AS d LEFT JOIN sqlite_master AS m ON m.name = d.name GROUP BY 1
"""
_PG_TABLES = """
SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
"""
_MARIADB_TABLES = """
SELECT table_name, data_length + index_length FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'
"""


async def server_size(backend: str, url: str, wanted: dict[str, list[str]]) -> dict[str, Any]:
    """Our tables' total size as written and compacted, and what a dump shows."""
    from lovia_store.db.urls import to_url

    dump = _dump(backend, url)
    engine = create_async_engine(to_url(url), poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:

            async def tables() -> dict[str, int]:
                query = _PG_TABLES if backend == "postgres" else _MARIADB_TABLES
                return {name: int(size) for name, size in (await conn.execute(text(query))).all()}

            async def each(statement: str) -> None:
                for name in await tables():
                    (await conn.execute(text(f"{statement} `{name}`"))).all()

            if backend == "postgres":
                written = await tables()
                await conn.execute(text("VACUUM FULL"))
            else:
                await each("ANALYZE TABLE")
                written = await tables()
                await each("OPTIMIZE TABLE")
                await each("ANALYZE TABLE")
            compacted = await tables()
    finally:
        await engine.dispose()
    return {
        "bytes": sum(written.values()),
        "vacuumed_bytes": sum(compacted.values()),
        "contents_bytes": written.get("lovia_contents"),
        "tables": written,
        "plaintext": search(dump, wanted) if dump is not None else None,
    }


def _dump(backend: str, url: str) -> bytes | None:
    """The database's data as ``pg_dump`` / ``mariadb-dump`` writes it (None: no tool)."""
    parsed = make_url(url)
    env = dict(os.environ)
    if backend == "postgres":
        tool = shutil.which("pg_dump")
        command = [
            "--data-only",
            "-h",
            parsed.host or "127.0.0.1",
            "-p",
            str(parsed.port or 5432),
            "-U",
            parsed.username or "postgres",
            str(parsed.database),
        ]
        if parsed.password:
            env["PGPASSWORD"] = parsed.password
    else:
        tool = shutil.which("mariadb-dump") or shutil.which("mysqldump")
        command = [
            "--no-create-info",
            "-h",
            parsed.host or "127.0.0.1",
            "-P",
            str(parsed.port or 3306),
            "-u",
            parsed.username or "root",
            str(parsed.database),
        ]
        if parsed.password:
            env["MYSQL_PWD"] = parsed.password
    if tool is None:
        return None
    done = subprocess.run([tool, *command], capture_output=True, env=env, check=False)
    return done.stdout if done.returncode == 0 else None


# -- speed -------------------------------------------------------------------------------


Timings = dict[str, dict[str, list[tuple[float, float]]]]
"""One round on one backend: operation -> configuration -> (wall, CPU) seconds of each
call, in the same order for every configuration (the same run, repeat or offset)."""
OPS = ("append", "load", "page")


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    with Clock() as clock:
        await call()
    return clock.wall, clock.cpu


async def speed_round(
    targets: list[Target],
    round_: int,
    load_sid: str,
    entries: int,
    scale: Scale,
    broken: dict[str, str],
) -> Timings:
    """One round on one backend: append, load and page, each call made by every
    configuration back to back (their order rotating). An operation that fails is
    named in ``broken`` and left out from then on."""
    held_out = agent_data.session(HELD_OUT + round_)
    runs = [targets[0].store.convert_run(run) for run in held_out.runs]  # one model, every store
    sid = f"speed-{round_}"
    offsets = [entries * k // (scale.pages + 1) for k in range(scale.pages)]

    def append(target: Target, number: int) -> Awaitable[Any]:
        return target.store.append_run(sid, runs[number], f"{sid}-{number}")

    def load(target: Target, _: int) -> Awaitable[Any]:
        return target.store.session.load(load_sid)

    def page(target: Target, number: int) -> Awaitable[Any]:
        offset = offsets[number]
        return target.store.page(load_sid, offset=offset, after_sequence=0, limit=PAGE)

    calls = {
        "append": (append, len(runs)),
        "load": (load, scale.loads),
        "page": (page, len(offsets)),
    }
    out: Timings = {}
    gc.collect()
    for op, (call, count) in calls.items():
        if op in broken:
            continue
        times: dict[str, list[tuple[float, float]]] = {t.config: [] for t in targets}
        try:
            for number in range(count):
                for target in rotate(targets, round_ + number):
                    times[target.config].append(
                        await _timed(lambda c=call, t=target, n=number: c(t, n))
                    )
        except Exception as exc:
            broken[op] = f"{target.name} {op}: {_failure(exc)}"
            continue
        out[op] = times
    return out


def cell(rounds: list[Timings], op: str, config: str, which: int = 0) -> list[float]:
    """Per round, the median call's ms."""
    return [
        statistics.median(t[which] for t in r[op][config]) * 1e3 for r in rounds if config in r[op]
    ]


def total_ratio(rounds: list[Timings], op: str, config: str, which: int = 1) -> float | None:
    """``config``'s time over (b)'s, every call of every round summed (a large run
    weighs what it costs); by default CPU, which other processes do not inflate."""
    mine = [t[which] for r in rounds if config in r.get(op, {}) for t in r[op][config]]
    base = [t[which] for r in rounds if config in r.get(op, {}) for t in r[op]["plain"]]
    return sum(mine) / sum(base) if mine and sum(base) else None


def ratios(rounds: list[Timings], op: str, config: str, which: int = 0) -> list[float]:
    """Per round, the median of ``config``'s calls over (b)'s same calls."""
    return [
        statistics.median(
            c[which] / b[which] for c, b in zip(r[op][config], r[op]["plain"], strict=True)
        )
        for r in rounds
        if config in r[op]
    ]


# -- instructions ---------------------------------------------------------------------


def instruction_counts(
    backends: list[str], scale_name: str, threshold: int | None
) -> list[dict[str, Any]]:
    """``bench.instructions``' agent cells, per configuration (the working tree's src)."""
    from bench import instructions

    pg = os.environ.get("LOVIA_BENCH_PG", instructions.DEFAULT_PG)
    rows = []
    scale = "tiny" if scale_name == "tiny" else "default"
    with tempfile.TemporaryDirectory(prefix="lovia-bench-storage-instr-") as tmp:
        folder = Path(tmp)
        helper = instructions._helper(folder)
        data = instructions.agent_data_file(folder)
        urls: dict[str, str] = {}
        try:
            for work in ("agent-append", "agent-load", "agent-page"):
                ops = instructions.SCALES[scale][work]
                for backend in backends:
                    row: dict[str, Any] = {"work": work, "backend": backend, "ops": ops}
                    for config in CODECS:
                        url = ""
                        if backend == "pg":
                            url = urls.get(config) or asyncio.run(
                                instructions._pg_database(
                                    pg,
                                    True,
                                    f"lovia_bench_storage_instr_{config}_{uuid.uuid4().hex[:6]}",
                                )
                            )
                            urls[config] = url
                        print(
                            f"bench.storage: callgrind {work} {backend} {config}", file=sys.stderr
                        )
                        row[config] = (
                            instructions.count(
                                ROOT / "src",
                                work,
                                ops,
                                backend,
                                url,
                                helper,
                                codec=config,
                                threshold=threshold,
                                data=data,
                            )
                            // ops
                        )
                    rows.append(row)
        finally:
            for url in urls.values():
                asyncio.run(instructions._pg_database(pg, False, str(make_url(url).database)))
    return rows


# -- the report --------------------------------------------------------------------------


def _mib(value: float) -> str:
    return f"{value / 2**20:,.2f}"


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "n/a"


def _spread(values: list[float], digits: int = 2) -> str:
    """Median [min-max]."""
    if not values:
        return "n/a"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def render(result: dict[str, Any]) -> str:
    d = result["dataset"]
    lines = [
        "# Stored documents: size and speed on a realistic agent history (issue 33)",
        "",
        f"`{result['command']}` at {result['revision']}, {result['started']} UTC, "
        f"{result['elapsed_s']:.0f} s; load average {result['load_before']} before, "
        f"{result['load_after']} after ({os.cpu_count()} cores, shared).",
        "",
        "## The dataset",
        "",
        f"{d['sessions']} sessions ({d['coding']} coding, {d['sessions'] - d['coding']} research), "
        f"{d['runs']:,} runs, {d['entries']:,} entries, {d['entry_bytes'] / 1e6:.1f} MB of entry "
        f"JSON. {d['tool_results']:,} tool results hold {d['output_bytes'] / 1e6:.1f} MB of "
        "output, "
        f"{d['distinct_outputs']:,} distinct outputs ({d['distinct_output_bytes'] / 1e6:.1f} MB); "
        f"{d['repeated_in_session_bytes'] / 1e6:.1f} MB repeat an output of the same session, "
        f"{d['repeated_across_sessions_bytes'] / 1e6:.1f} MB one of another session. "
        f"Corpus {d['corpus']}, data {d['digest']} (`bench.agent_data`: the same digest, "
        "the same data).",
        "",
        "| tool | results | MB |",
        "| --- | ---: | ---: |",
    ]
    for name, (count, size) in d["by_tool"].items():
        lines.append(f"| {name} | {count:,} | {size / 1e6:.2f} |")
    lines += ["", "## Size", ""]
    sizes = result["sizes"]
    lovia = sizes.get("sqlite/lovia", {}).get("bytes", 0)
    lovia_vac = sizes.get("sqlite/lovia", {}).get("vacuumed_bytes", 0)
    for backend in BACKENDS:
        rows = {k.split("/")[1]: v for k, v in sizes.items() if k.startswith(backend + "/") and v}
        if not rows:
            continue
        plain = rows.get("plain", {})
        compacted = {"sqlite": "VACUUM INTO", "postgres": "VACUUM FULL", "mariadb": "OPTIMIZE"}
        measured = {
            "sqlite": "page_count * page_size after wal_checkpoint(TRUNCATE)",
            "postgres": "sum of pg_total_relation_size",
            "mariadb": "data_length + index_length after ANALYZE TABLE",
        }
        where = "file bytes" if backend == "sqlite" else "dump"
        lines += [
            f"### {backend}",
            "",
            f"Size: {measured[backend]}; then after {compacted[backend]}. Plaintext: needles "
            f"found in the {where} (tool outputs / messages, of "
            f"{len(result['needles']['outputs'])} / {len(result['needles']['messages'])}).",
            "",
            "| configuration | MiB | after compaction (MiB) | vs lovia's file | "
            "vs (b) | compacted vs lovia's | compacted vs (b) | lovia_contents (MiB) | plaintext |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for config in ("lovia", *CODECS):
            row = rows.get(config)
            if row is None:
                continue
            found = row.get("plaintext")
            shown = "n/a" if found is None else f"{found['outputs']} / {found['messages']}"
            contents = row.get("contents_bytes")
            lines.append(
                f"| {LABELS[config]} | {_mib(row['bytes'])} | {_mib(row['vacuumed_bytes'])} | "
                f"{_ratio(row['bytes'], lovia)} | {_ratio(row['bytes'], plain.get('bytes', 0))} | "
                f"{_ratio(row['vacuumed_bytes'], lovia_vac)} | "
                f"{_ratio(row['vacuumed_bytes'], plain.get('vacuumed_bytes', 0))} | "
                f"{'' if contents is None else _mib(contents)} | {shown} |"
            )
        lines.append("")
    lines += [
        "## Writing and reading the whole dataset",
        "",
        "One pass each, stores interleaved session by session (single measurements: noisy). "
        "Read = every session loaded back and compared with what was written. lovia writes "
        "in its default journal (DELETE, synchronous=FULL), lovia-store's SQLite files "
        + (
            "in WAL with synchronous=NORMAL."
            if SQLITE_SETTINGS.get("wal")
            else "in theirs too (lovia-store's default: DELETE, synchronous=FULL)."
        ),
        "",
        "| store | write s | write CPU s | MB/s | read s | read CPU s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, spent in result["spent"].items():
        if result["failed"].get(name):
            lines.append(f"| {name} | failed: see Errors | | | | |")
            continue
        mbs = d["entry_bytes"] / 1e6 / spent["write_s"] if spent.get("write_s") else 0
        lines.append(
            f"| {name} | {spent.get('write_s', 0):.2f} | {spent.get('write_cpu_s', 0):.2f} | "
            f"{mbs:.1f} | {spent.get('read_s', 0):.2f} | {spent.get('read_cpu_s', 0):.2f} |"
        )
    lines.append("")
    speed = result["speed"]
    if speed:
        info = result["speed_info"]
        lines += [
            "## Speed",
            "",
            f"{info['rounds']} rounds, configurations interleaved, order rotating. append: ms per "
            f"run of held-out sessions {HELD_OUT}+round (mean {info['append_entries']:.1f} "
            f"entries, {info['append_kb']:.0f} KB of JSON per run); load: `{info['load_sid']}` "
            f"({info['load_entries']} entries, {info['load_mb']:.2f} MB), median of "
            f"{info['loads']}; page: {PAGE} messages at {info['pages']} offsets, median. Cells: "
            "the median call of each round, then their median over rounds [min-max]. Ratios: per "
            "round, the median over the round's calls of a call's time over (b)'s same call "
            "(made back to back), then their median over rounds [min-max]; 'all calls': the CPU "
            "time of every call of every round summed, over (b)'s.",
            "",
        ]
        for backend, rounds in speed.items():
            lines += [
                f"### {backend}",
                "",
                "| operation | (b) plain ms | (c) compressed ms | (d) encrypted ms | "
                "(c)/(b) | (d)/(b) | CPU (c)/(b) | CPU (d)/(b) | CPU (c)/(b), all calls | "
                "CPU (d)/(b), all calls |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            ]
            for op in OPS:
                if op not in rounds[0]:
                    lines.append(f"| {op} | failed: see Errors |" + " |" * 8)
                    continue
                cells = [op]
                for config in CODECS:
                    cells.append(_spread(cell(rounds, op, config)))
                for which in (0, 1):
                    for config in ("compressed", "encrypted"):
                        cells.append(_spread(ratios(rounds, op, config, which)))
                for config in ("compressed", "encrypted"):
                    total = total_ratio(rounds, op, config)
                    cells.append("n/a" if total is None else f"{total:.2f}")
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    if result.get("instructions"):
        lines += [
            "## Instructions per operation (callgrind)",
            "",
            "| work | backend | ops | (b) plain | (c) compressed | (d) encrypted "
            "| (c)/(b) | (d)/(b) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in result["instructions"]:
            lines.append(
                f"| {row['work']} | {row['backend']} | {row['ops']} | {row['plain']:,} | "
                f"{row['compressed']:,} | {row['encrypted']:,} | "
                f"{row['compressed'] / row['plain']:.3f} | {row['encrypted'] / row['plain']:.3f} |"
            )
        lines.append("")
    lines += _goals(result)
    if result["notes"]:
        lines += ["## Notes", "", *[f"- {note}" for note in result["notes"]], ""]
    if result["errors"]:
        lines += [
            "## Errors (a store failed, or returned other data than written)",
            "",
            *[f"- {e}" for e in result["errors"]],
            "",
        ]
    return "\n".join(lines)


def _goals(result: dict[str, Any]) -> list[str]:
    """Issue 33's "Done when", checked against this run."""
    sizes, speed = result["sizes"], result["speed"]
    lovia = sizes.get("sqlite/lovia", {}).get("bytes")
    lines = ["## Issue 33's goals in this run", ""]
    if lovia:
        for backend in BACKENDS:
            row = sizes.get(f"{backend}/compressed")
            if row:
                ratio = row["bytes"] / lovia
                verdict = "met" if ratio <= 0.5 else "not met"
                lines.append(
                    f"- {backend}: (c) is {ratio:.2f}x lovia's file (at most 0.5x): {verdict}"
                )
    for backend, rounds in speed.items():
        for config, bound in (("compressed", 1.1), ("encrypted", 1.3)):
            for op in ("append", "load"):
                if op not in rounds[0] or config not in rounds[0][op]:
                    lines.append(f"- {backend} {op}: ({config}) not measured")
                    continue
                wall, cpu = (statistics.median(ratios(rounds, op, config, i)) for i in (0, 1))
                verdict = "met" if wall <= bound else "not met"
                lines.append(
                    f"- {backend} {op}: ({'c' if config == 'compressed' else 'd'}) {wall:.2f}x "
                    f"(b)'s wall time (at most {bound}x): {verdict}; CPU {cpu:.2f}x, "
                    f"CPU of all calls {total_ratio(rounds, op, config) or 0:.2f}x"
                )
    for name, row in sizes.items():
        if name.endswith("/encrypted") and row.get("plaintext") is not None:
            found = sum(row["plaintext"].values())
            verdict = "met" if found == 0 else "not met"
            lines.append(f"- {name}: {found} plaintext needles found (none): {verdict}")
    lines.append("")
    return lines


# -- the run -------------------------------------------------------------------------------


def _load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def run(args: argparse.Namespace, scale: Scale) -> dict[str, Any]:
    backends = [b for b in args.backends.split(",") if b]
    speed_backends = [b for b in args.speed.split(",") if b]
    errors: list[str] = []
    notes: list[str] = []
    for backend in [*backends]:
        if backend != "sqlite" and not os.environ.get(SERVERS[backend]):
            notes.append(f"{backend}: {SERVERS[backend]} is not set; skipped")
            backends.remove(backend)
    sessions = agent_data.sessions(scale.sessions)
    dataset = agent_data.describe(sessions)
    wanted = needles(sessions)
    targets: list[Target] = []
    with tempfile.TemporaryDirectory(prefix="lovia-bench-storage-") as tmp:
        folder = Path(tmp)
        try:
            for backend in backends:
                for config in ("lovia", *CODECS) if backend == "sqlite" else CODECS:
                    where = folder / backend / config
                    where.mkdir(parents=True)
                    if backend == "sqlite":
                        location = str(where / "sessions.db")
                    else:
                        location = await create_database(backend, config)
                    targets.append(Target(backend, config, location, where, args.threshold))
            for target in targets:
                try:
                    await target.open()
                except Exception as exc:
                    target.failed = f"opening: {_failure(exc)}"
            print(
                f"bench.storage: writing {dataset['entry_bytes'] / 1e6:.1f} MB to "
                f"{len(targets)} stores",
                file=sys.stderr,
            )
            await write_all(targets, sessions)
            print("bench.storage: reading it back", file=sys.stderr)
            await check_all(targets, sessions)
            for target in targets:
                await target.close()
            print("bench.storage: sizes", file=sys.stderr)
            for target in targets:
                if target.failed:
                    continue
                if target.backend == "sqlite":
                    target.size = sqlite_size(Path(target.location), wanted)
                else:
                    target.size = await server_size(target.backend, target.location, wanted)
            largest = max(sessions, key=lambda s: sum(len(json.dumps(r)) for r in s.runs))
            flat = [e for r in largest.runs for e in r]
            speed: dict[str, list[Timings]] = {}
            appended = agent_data.describe(
                agent_data.session(HELD_OUT + r) for r in range(scale.rounds)
            )
            for backend in speed_backends:
                chosen = [
                    t
                    for t in targets
                    if t.backend == backend and t.config in CODECS and not t.failed
                ]
                if not any(t.config == "plain" for t in chosen):
                    notes.append(f"{backend}: no speed measured ((b) did not run)")
                    continue
                print(f"bench.storage: speed on {backend}", file=sys.stderr)
                for target in chosen:
                    await target.open()
                broken: dict[str, str] = {}
                try:
                    rounds = [
                        await speed_round(chosen, r, largest.id, len(flat), scale, broken)
                        for r in range(scale.rounds)
                    ]
                finally:
                    for target in chosen:
                        await target.close()
                # An operation that failed in a round is left out of every round.
                speed[backend] = [{op: r[op] for op in r if op not in broken} for r in rounds]
                errors += [f"{backend} speed: {error}" for error in broken.values()]
        finally:
            for target in targets:
                await target.close()
                if target.backend != "sqlite":
                    await drop_database(target.backend, target.location)
    return {
        "dataset": dataset,
        "needles": wanted,
        "sizes": {t.name: t.size for t in targets},
        "spent": {t.name: t.spent for t in targets},
        "speed": speed,
        "speed_info": {
            "rounds": scale.rounds,
            "loads": scale.loads,
            "pages": scale.pages,
            "load_sid": largest.id,
            "load_entries": len(flat),
            "load_mb": sum(len(json.dumps(e, ensure_ascii=False).encode()) for e in flat) / 1e6,
            "append_entries": appended["entries"] / appended["runs"],
            "append_kb": appended["entry_bytes"] / appended["runs"] / 1e3,
        },
        "errors": [f"{t.name}: {t.failed}" for t in targets if t.failed] + errors,
        "failed": {t.name: t.failed for t in targets if t.failed},
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.storage",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--scale", choices=list(SCALES), default="default")
    parser.add_argument("--sessions", type=int, help="sessions of the dataset (else the scale's)")
    parser.add_argument("--rounds", type=int, help="speed rounds (else the scale's)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="where sizes are measured")
    parser.add_argument(
        "--speed", default=",".join(BACKENDS), help="where speed is measured ('' for nowhere)"
    )
    parser.add_argument(
        "--threshold", type=int, help="compression_threshold of (c) and (d) (the default: 2048)"
    )
    parser.add_argument(
        "--instructions",
        nargs="?",
        const="sqlite",
        default="",
        help="also count instructions under valgrind on these backends (sqlite,pg; bare: "
        "sqlite): 9 cells per backend, 15 s to a minute each",
    )
    parser.add_argument(
        "--sqlite-durability",
        choices=("normal", "full"),
        default="normal",
        help="lovia-store's SQLite files: WAL with synchronous=NORMAL (the codec's CPU shows), "
        "or full: lovia-store's default, rollback journal with synchronous=FULL (lovia's)",
    )
    parser.add_argument("--output", type=Path, help="also write the Markdown report here")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args(argv)
    if args.sqlite_durability == "full":
        SQLITE_SETTINGS.clear()
    base = SCALES[args.scale]
    scale = Scale(
        sessions=args.sessions or base.sessions,
        rounds=args.rounds or base.rounds,
        loads=base.loads,
        pages=base.pages,
    )
    for name, known in (
        ("backends", BACKENDS),
        ("speed", BACKENDS),
        ("instructions", ("sqlite", "pg")),
    ):
        unknown = set(getattr(args, name).split(",")) - {*known, ""}
        if unknown:
            parser.error(f"--{name}: unknown {', '.join(sorted(unknown))}")
    started, load_before = datetime.now(UTC), _load_average()
    clock = time.perf_counter()
    result = asyncio.run(run(args, scale))
    if args.instructions:
        counted = [b for b in args.instructions.split(",") if b]
        result["instructions"] = instruction_counts(counted, args.scale, args.threshold)
    result |= {
        "command": ".venv/bin/python -m bench.storage "
        + shlex.join(sys.argv[1:] if argv is None else argv),
        "revision": source_revision(ROOT),
        "started": f"{started:%Y-%m-%d %H:%M}",
        "elapsed_s": time.perf_counter() - clock,
        "load_before": load_before,
        "load_after": _load_average(),
    }
    result["command"] = result["command"].strip()
    report = render(result)
    print(report)
    if args.output is not None:
        args.output.write_text(report + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
