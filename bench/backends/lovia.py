"""lovia 0.9.119: ``lovia.stores.SQLiteSession`` / ``SQLiteCheckpointer`` (stdlib sqlite3)."""

from __future__ import annotations

from typing import Any

from lovia.checkpointer import RunHead
from lovia.messages import Usage
from lovia.stores import SQLiteCheckpointer, SQLiteSession
from lovia.transcript import entry_from_dict

from bench.backends.base import Backend, Unsupported
from bench.backends.sqlite_probe import connection_settings
from bench.data import Entry, Run


class LoviaBackend(Backend):
    """lovia's SQLite stores; a fresh sqlite3 connection per call, one thread hop per call."""

    async def open(self) -> None:
        if self.pg:
            raise Unsupported("lovia ships no PostgreSQL store")
        self.path = self.ctx.sqlite_path()
        self.session = SQLiteSession(self.path, wal=self.wal)
        self.checkpointer: SQLiteCheckpointer | None = None
        await self.session.load("warmup")  # creates the schema

    async def close(self) -> None:
        """lovia's stores hold no open connection between calls."""

    async def durability(self) -> dict[str, str]:
        # The exact connection setup lovia uses per call, on the store the workload wrote
        # through (W10's checkpointer, else the session).
        store = getattr(self, "probed", self.session)
        conn = store._connect()
        try:
            return connection_settings(conn)
        finally:
            store._release(conn)

    def convert_run(self, run: Run) -> Any:
        return [entry_from_dict(e) for e in run]

    async def append_run(self, session_id: str, run: Any, run_id: str) -> None:
        await self.session.append(session_id, run, run_id=run_id)

    async def load(self, session_id: str) -> int:
        return len(await self.session.load(session_id))

    async def open_checkpointer(self) -> None:
        self.checkpointer = SQLiteCheckpointer(self.ctx.sqlite_path("runs.db"), wal=self.wal)
        await self.checkpointer.load("warmup")

    async def open_lovia_stores(self) -> tuple[Any, Any]:
        # Own files: the Runner's rows do not share pages with other workloads' data.
        session = SQLiteSession(self.ctx.sqlite_path("runner-sessions.db"), wal=self.wal)
        checkpointer = SQLiteCheckpointer(self.ctx.sqlite_path("runner-runs.db"), wal=self.wal)
        await session.load("warmup")  # the schema, before the clock
        await checkpointer.load("warmup")
        self.probed = checkpointer
        return session, checkpointer

    def convert_entry(self, entry: Entry) -> Any:
        return entry_from_dict(entry)

    async def checkpoint_step(self, run_id: str, entry: Any, turn: int) -> None:
        assert self.checkpointer is not None
        head = RunHead(
            agent_name="bench", usage=Usage(input_tokens=turn, output_tokens=turn), turns=turn
        )
        await self.checkpointer.append(run_id, [entry], head)

    async def trim(self, session_id: str) -> int:
        return int(await self.session.trim_tool_results(session_id, keep_chars=400, keep_runs=1))

    async def rewind(self, session_id: str, keep_entries: int) -> int:
        return int(await self.session.rewind(session_id, keep_entries=keep_entries))
