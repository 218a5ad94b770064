"""Raw floor: asyncpg with a small pool, one transaction per operation.

Same shape as the sqlite3 floor: one row per entry, a counter row per session,
a run row for ``run_id`` idempotency; the entries go in with one ``unnest``
insert.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncpg
import orjson

from bench.backends.base import Backend
from bench.backends.floor_common import STREAM_BATCH, dangling_calls, head_json, trimmed
from bench.data import Entry, Run

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (session_id text PRIMARY KEY, next_seq bigint NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    session_id text NOT NULL, run_id text NOT NULL, first_seq bigint NOT NULL, meta jsonb,
    PRIMARY KEY (session_id, run_id));
CREATE INDEX IF NOT EXISTS runs_by_seq ON runs (session_id, first_seq);
CREATE TABLE IF NOT EXISTS entries (
    session_id text NOT NULL, seq bigint NOT NULL, kind text NOT NULL, entry bytea NOT NULL,
    PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS cp_heads (
    run_id text PRIMARY KEY, head bytea NOT NULL, n bigint NOT NULL);
CREATE TABLE IF NOT EXISTS cp_entries (
    run_id text NOT NULL, seq bigint NOT NULL, entry bytea NOT NULL, PRIMARY KEY (run_id, seq));
"""
_POOL_SIZE = 10


class RawPgBackend(Backend):
    """asyncpg floor."""

    async def open(self) -> None:
        dsn = self.ctx.require_pg().url("")
        self.db: asyncpg.Pool = await asyncpg.create_pool(dsn, min_size=1, max_size=_POOL_SIZE)
        async with self.db.acquire() as conn:
            await conn.execute(_SCHEMA)

    async def close(self) -> None:
        await self.db.close()

    async def append_run(self, session_id: str, run: Any, run_id: str) -> None:
        rows = [(str(e["type"]), orjson.dumps(e)) for e in run]
        async with self.db.acquire() as conn, conn.transaction():
            await _append(conn, session_id, run_id, rows)

    async def prefill(self, session_id: str, runs: Iterable[Run], first_index: int) -> None:
        async with self.db.acquire() as conn, conn.transaction():
            for i, run in enumerate(runs):
                rows = [(str(e["type"]), orjson.dumps(e)) for e in run]
                await _append(conn, session_id, f"pre-{first_index + i}", rows)

    async def load(self, session_id: str) -> int:
        rows = await self.db.fetch(
            "SELECT entry FROM entries WHERE session_id = $1 ORDER BY seq", session_id
        )
        return len([orjson.loads(r[0]) for r in rows])

    async def stream(self, session_id: str) -> int:
        """Keyset pages on seq, one read per page, each page decoded and dropped."""
        count, after = 0, 0
        while rows := await self.db.fetch(
            "SELECT seq, entry FROM entries WHERE session_id = $1 AND seq > $2 "
            "ORDER BY seq LIMIT $3",
            session_id,
            after,
            STREAM_BATCH,
        ):
            count += len([orjson.loads(r[1]) for r in rows])
            after = rows[-1][0]
        return count

    async def count(self, session_id: str) -> int:
        return int(
            await self.db.fetchval("SELECT count(*) FROM entries WHERE session_id = $1", session_id)
        )

    async def open_checkpointer(self) -> None:
        """Tables already exist."""

    def convert_entry(self, entry: Entry) -> Any:
        return entry

    async def checkpoint_step(self, run_id: str, entry: Any, turn: int) -> None:
        payload, head = orjson.dumps(entry), head_json(turn)
        async with self.db.acquire() as conn, conn.transaction():
            n = await conn.fetchval(
                "INSERT INTO cp_heads (run_id, head, n) VALUES ($1, $2, 1) ON CONFLICT (run_id) "
                "DO UPDATE SET head = excluded.head, n = cp_heads.n + 1 RETURNING n",
                run_id,
                head,
            )
            await conn.execute(
                "INSERT INTO cp_entries (run_id, seq, entry) VALUES ($1, $2, $3)",
                run_id,
                n,
                payload,
            )

    async def open_raw_log(self) -> None:
        """Entries are already one row per message."""

    async def page(self, session_id: str, *, offset: int, after_sequence: int, limit: int) -> int:
        rows = await self.db.fetch(
            "SELECT seq, entry FROM entries WHERE session_id = $1 AND seq > $2 "
            "ORDER BY seq LIMIT $3 OFFSET $4",
            session_id,
            after_sequence,
            limit,
            offset,
        )
        return len([(r[0], orjson.loads(r[1])) for r in rows])

    async def trim(self, session_id: str) -> int:
        async with self.db.acquire() as conn, conn.transaction():
            last = await conn.fetchval(
                "SELECT max(first_seq) FROM runs WHERE session_id = $1", session_id
            )
            if last is None:
                return 0
            rows = await conn.fetch(
                "SELECT seq, entry FROM entries "
                "WHERE session_id = $1 AND kind = 'tool_result' AND seq < $2",
                session_id,
                last,
            )
            updates = [(new, session_id, r[0]) for r in rows if (new := trimmed(r[1])) is not None]
            await conn.executemany(
                "UPDATE entries SET entry = $1 WHERE session_id = $2 AND seq = $3", updates
            )
            return len(updates)

    async def rewind(self, session_id: str, keep_entries: int) -> int:
        async with self.db.acquire() as conn, conn.transaction():
            return await _rewind(conn, session_id, keep_entries)


async def _append(
    conn: asyncpg.Connection, session_id: str, run_id: str, rows: list[tuple[str, bytes]]
) -> None:
    n = len(rows)
    first = await conn.fetchval(
        "INSERT INTO sessions (session_id, next_seq) VALUES ($1, $2 + 1) ON CONFLICT (session_id) "
        "DO UPDATE SET next_seq = sessions.next_seq + $2 RETURNING next_seq - $2",
        session_id,
        n,
    )
    inserted = await conn.fetchval(
        "INSERT INTO runs (session_id, run_id, first_seq) VALUES ($1, $2, $3) "
        "ON CONFLICT DO NOTHING "
        "RETURNING 1",
        session_id,
        run_id,
        first,
    )
    if inserted is None:  # idempotent by run_id: undo the counter bump
        await conn.execute(
            "UPDATE sessions SET next_seq = next_seq - $2 WHERE session_id = $1", session_id, n
        )
        return
    await conn.execute(
        "INSERT INTO entries (session_id, seq, kind, entry) "
        "SELECT $1, $2 + i - 1, k, e "
        "FROM unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS t(k, e, i)",
        session_id,
        first,
        [k for k, _ in rows],
        [p for _, p in rows],
    )


async def _rewind(conn: asyncpg.Connection, session_id: str, keep: int) -> int:
    total = await conn.fetchval("SELECT count(*) FROM entries WHERE session_id = $1", session_id)
    if keep >= total:
        return 0
    cut = (
        await conn.fetchval(
            "SELECT seq FROM entries WHERE session_id = $1 ORDER BY seq LIMIT 1 OFFSET $2",
            session_id,
            keep - 1,
        )
        if keep
        else 0
    )
    boundary = await conn.fetchrow(
        "SELECT run_id, first_seq FROM runs WHERE session_id = $1 AND first_seq <= $2 "
        "ORDER BY first_seq DESC LIMIT 1",
        session_id,
        cut,
    )
    if boundary is not None:
        kept = await conn.fetch(
            "SELECT seq, kind, entry FROM entries WHERE session_id = $1 AND seq BETWEEN $2 AND $3",
            session_id,
            boundary[1],
            cut,
        )
        drop = dangling_calls([(r[0], r[1], r[2]) for r in kept])
        await conn.execute(
            "DELETE FROM entries WHERE session_id = $1 AND seq = ANY($2::bigint[])",
            session_id,
            drop,
        )
        await conn.execute(
            "UPDATE runs SET meta = NULL WHERE session_id = $1 AND run_id = $2",
            session_id,
            boundary[0],
        )
    await conn.execute("DELETE FROM entries WHERE session_id = $1 AND seq > $2", session_id, cut)
    await conn.execute("DELETE FROM runs WHERE session_id = $1 AND first_seq > $2", session_id, cut)
    remaining = await conn.fetchval(
        "SELECT count(*) FROM entries WHERE session_id = $1", session_id
    )
    return int(total - remaining)
