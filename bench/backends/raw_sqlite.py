"""Raw floor: stdlib sqlite3 on one connection owned by one worker thread.

One row per entry, a per-session counter row (no ``MAX()+1``) and a run row
for ``run_id`` idempotency: about the least a correct store can do. It shows
what the driver and the disk cost, so the gap to a library is its overhead.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from bench.backends.base import Backend
from bench.backends.floor_common import STREAM_BATCH, dangling_calls, head_json, trimmed
from bench.backends.sqlite_probe import connection_settings
from bench.data import Entry, Run

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, next_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    session_id TEXT NOT NULL, run_id TEXT NOT NULL, first_seq INTEGER NOT NULL,
    meta TEXT, PRIMARY KEY (session_id, run_id));
CREATE INDEX IF NOT EXISTS runs_by_seq ON runs (session_id, first_seq);
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, entry BLOB NOT NULL,
    PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS cp_heads (
    run_id TEXT PRIMARY KEY, head BLOB NOT NULL, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS cp_entries (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, entry BLOB NOT NULL, PRIMARY KEY (run_id, seq));
"""


class RawSQLiteBackend(Backend):
    """sqlite3 floor; every operation is one function run on the single worker thread."""

    synchronous: str | None = None  # None keeps SQLite's default (FULL)

    async def open(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raw-sqlite")
        self.conn: sqlite3.Connection | None = None
        await self._call(self._connect)

    def _connect(self) -> None:
        conn = sqlite3.connect(self.ctx.sqlite_path(), isolation_level=None)
        if self.wal:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=5000")
        if self.synchronous is not None:
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.executescript(_SCHEMA)
        self.conn = conn

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> Callable[[], T]:
        def run() -> T:
            conn = self.conn
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        return run

    async def close(self) -> None:
        if self.conn is not None:
            await self._call(self.conn.close)
        self._pool.shutdown()

    async def durability(self) -> dict[str, str]:
        assert self.conn is not None
        conn = self.conn
        return await self._call(lambda: connection_settings(conn))

    def convert_run(self, run: Run) -> Any:
        return run

    async def append_run(self, session_id: str, run: Any, run_id: str) -> None:
        rows = [(str(e["type"]), orjson.dumps(e)) for e in run]
        await self._call(self._tx(lambda conn: _append(conn, session_id, run_id, rows)))

    async def prefill(self, session_id: str, runs: Iterable[Run], first_index: int) -> None:
        """All runs in one transaction: setup only."""
        batches = [
            (f"pre-{first_index + i}", [(str(e["type"]), orjson.dumps(e)) for e in run])
            for i, run in enumerate(runs)
        ]

        def fill(conn: sqlite3.Connection) -> None:
            for run_id, rows in batches:
                _append(conn, session_id, run_id, rows)

        await self._call(self._tx(fill))

    async def load(self, session_id: str) -> int:
        def read() -> list[Any]:
            assert self.conn is not None
            rows = self.conn.execute(
                "SELECT entry FROM entries WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
            return [orjson.loads(r[0]) for r in rows]

        return len(await self._call(read))

    async def stream(self, session_id: str) -> int:
        """Keyset pages on seq, one read per page, each page decoded and dropped."""
        count, after = 0, 0

        def read() -> list[Any]:
            assert self.conn is not None
            return self.conn.execute(
                "SELECT seq, entry FROM entries WHERE session_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (session_id, after, STREAM_BATCH),
            ).fetchall()

        while rows := await self._call(read):
            count += len([orjson.loads(r[1]) for r in rows])
            after = rows[-1][0]
        return count

    async def count(self, session_id: str) -> int:
        def read() -> int:
            assert self.conn is not None
            sql = "SELECT count(*) FROM entries WHERE session_id = ?"
            return int(self.conn.execute(sql, (session_id,)).fetchone()[0])

        return await self._call(read)

    async def open_checkpointer(self) -> None:
        """Tables already exist."""

    def convert_entry(self, entry: Entry) -> Any:
        return entry

    async def checkpoint_step(self, run_id: str, entry: Any, turn: int) -> None:
        payload, head = orjson.dumps(entry), head_json(turn)

        def step(conn: sqlite3.Connection) -> None:
            n = conn.execute(
                "INSERT INTO cp_heads (run_id, head, n) VALUES (?, ?, 1) ON CONFLICT (run_id) "
                "DO UPDATE SET head = excluded.head, n = n + 1 RETURNING n",
                (run_id, head),
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO cp_entries (run_id, seq, entry) VALUES (?, ?, ?)", (run_id, n, payload)
            )

        await self._call(self._tx(step))

    async def open_raw_log(self) -> None:
        """Entries are already one row per message."""

    async def page(self, session_id: str, *, offset: int, after_sequence: int, limit: int) -> int:
        def read() -> list[Any]:
            assert self.conn is not None
            rows = self.conn.execute(
                "SELECT seq, entry FROM entries WHERE session_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ? OFFSET ?",
                (session_id, after_sequence, limit, offset),
            ).fetchall()
            return [(r[0], orjson.loads(r[1])) for r in rows]

        return len(await self._call(read))

    async def trim(self, session_id: str) -> int:
        return await self._call(self._tx(lambda conn: _trim(conn, session_id)))

    async def rewind(self, session_id: str, keep_entries: int) -> int:
        return await self._call(self._tx(lambda conn: _rewind(conn, session_id, keep_entries)))


def _append(
    conn: sqlite3.Connection, session_id: str, run_id: str, rows: list[tuple[str, bytes]]
) -> None:
    conn.execute(
        "INSERT INTO sessions (session_id, next_seq) VALUES (?, 1) ON CONFLICT DO NOTHING",
        (session_id,),
    )
    first = conn.execute(
        "UPDATE sessions SET next_seq = next_seq + ? WHERE session_id = ? RETURNING next_seq - ?",
        (len(rows), session_id, len(rows)),
    ).fetchone()[0]
    inserted = conn.execute(
        "INSERT INTO runs (session_id, run_id, first_seq) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        (session_id, run_id, first),
    ).rowcount
    if not inserted:  # idempotent by run_id: undo the counter bump
        conn.execute(
            "UPDATE sessions SET next_seq = next_seq - ? WHERE session_id = ?",
            (len(rows), session_id),
        )
        return
    conn.executemany(
        "INSERT INTO entries (session_id, seq, kind, entry) VALUES (?, ?, ?, ?)",
        [(session_id, first + i, kind, payload) for i, (kind, payload) in enumerate(rows)],
    )


def _trim(conn: sqlite3.Connection, session_id: str) -> int:
    last = conn.execute(
        "SELECT max(first_seq) FROM runs WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    if last is None:
        return 0
    rows = conn.execute(
        "SELECT seq, entry FROM entries WHERE session_id = ? AND kind = 'tool_result' AND seq < ?",
        (session_id, last),
    ).fetchall()
    updates = [(new, session_id, seq) for seq, raw in rows if (new := trimmed(raw)) is not None]
    conn.executemany("UPDATE entries SET entry = ? WHERE session_id = ? AND seq = ?", updates)
    return len(updates)


def _rewind(conn: sqlite3.Connection, session_id: str, keep: int) -> int:
    total = conn.execute(
        "SELECT count(*) FROM entries WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    if keep >= total:
        return 0
    cut = (
        conn.execute(  # the sequence of the keep-th entry (sequences may have gaps after a rewind)
            "SELECT seq FROM entries WHERE session_id = ? ORDER BY seq LIMIT 1 OFFSET ?",
            (session_id, keep - 1),
        ).fetchone()[0]
        if keep
        else 0
    )
    boundary = conn.execute(
        "SELECT run_id, first_seq FROM runs WHERE session_id = ? AND first_seq <= ? "
        "ORDER BY first_seq DESC LIMIT 1",
        (session_id, cut),
    ).fetchone()
    if boundary is not None:
        kept = conn.execute(
            "SELECT seq, kind, entry FROM entries WHERE session_id = ? AND seq BETWEEN ? AND ?",
            (session_id, boundary[1], cut),
        ).fetchall()
        drop = dangling_calls(kept)
        conn.executemany(
            "DELETE FROM entries WHERE session_id = ? AND seq = ?", [(session_id, s) for s in drop]
        )
        conn.execute(
            "UPDATE runs SET meta = NULL WHERE session_id = ? AND run_id = ?",
            (session_id, boundary[0]),
        )
    conn.execute("DELETE FROM entries WHERE session_id = ? AND seq > ?", (session_id, cut))
    conn.execute("DELETE FROM runs WHERE session_id = ? AND first_seq > ?", (session_id, cut))
    remaining = conn.execute(
        "SELECT count(*) FROM entries WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    return int(total - remaining)


class RawSQLiteNormalBackend(RawSQLiteBackend):
    """The same floor at ``synchronous=NORMAL``: the durability zett-agent uses under WAL."""

    synchronous = "NORMAL"
