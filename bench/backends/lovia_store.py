"""lovia-store (this project), driven through its public API.

The library is written alongside this harness: whatever it does not offer
yet surfaces as :class:`Unavailable` / :class:`Unsupported`, and the report
shows n/a instead of failing.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import lovia_store
from bench.backends.base import Backend, Unsupported
from bench.backends.sqlite_probe import sync_name
from bench.data import Entry, Run


def _api(name: str) -> Any:
    """A public name of lovia_store, or :class:`Unsupported` naming what is missing."""
    try:
        return getattr(lovia_store, name)
    except AttributeError:
        raise Unsupported(f"lovia_store has no {name} yet") from None


async def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        await close()


async def _warm_up(call: Callable[[], Awaitable[Any]], target: Any) -> None:
    """Make the first (untimed) call; if it fails, ``lovia_store.upgrade(target)`` and retry.

    Stores may migrate on first use, or may want an explicit upgrade first (on
    PostgreSQL, say): both work. A synchronous upgrade runs in a thread, since it
    may start its own event loop.
    """
    try:
        await call()
        return
    except Exception:
        upgrade = getattr(lovia_store, "upgrade", None)
        if upgrade is None:
            raise
    if inspect.iscoroutinefunction(upgrade):
        await upgrade(target)
    else:
        result = await asyncio.to_thread(upgrade, target)
        if inspect.isawaitable(result):
            await result
    await call()


def _pragmas(conn: Any) -> tuple[Any, ...]:
    """A work function: journal_mode, synchronous and busy_timeout of the store's connection."""
    return tuple(
        conn.exec_driver_sql(f"PRAGMA {name}").scalar()
        for name in ("journal_mode", "synchronous", "busy_timeout")
    )


class LoviaStoreBackend(Backend):
    """lovia-store's SQLiteSession / SQLSession, its checkpointer and its Raw Log reader.

    On SQLite the session store opens the file as a user would
    (``SQLiteSession(path, wal=...)``); the Raw Log reader borrows the same
    ``Database``. A subclass that sets ``synchronous`` opens a ``Database`` itself
    with that setting and passes it to every store.
    """

    synchronous: str | None = None  # None: the library's default (FULL)

    async def open(self) -> None:
        self.stores: list[Any] = []  # closed in reverse order
        self._entry_from_dict = _api("entry_from_dict")
        path = self.ctx.sqlite_path()
        if self.pg:
            self.session = _api("SQLSession")(self._url())
        elif self.synchronous is None:
            self.session = _api("SQLiteSession")(str(path), wal=self.wal)
        else:
            self.session = _api("SQLSession")(self._database(path))
        self.stores.append(self.session)
        await _warm_up(lambda: self.session.load("warmup"), self._target(path))

    def _url(self) -> str:
        return self.ctx.require_pg().url("asyncpg")

    def _target(self, path: Path) -> Any:
        return self._url() if self.pg else str(path)

    def _database(self, path: Path) -> Any:
        """A Database at this backend's journal mode and ``synchronous``, closed with the trial."""
        database = _api("Database")(str(path), wal=self.wal, synchronous=self.synchronous)
        self.stores.append(database)
        return database

    async def close(self) -> None:
        for store in reversed(self.stores):
            await _close(store)

    async def durability(self) -> dict[str, str]:
        if self.pg:
            return {}
        # The store the workload wrote through: W10's checkpointer, else the session.
        database = getattr(self, "probed", self.session).database
        journal, sync, busy = await database.read(_pragmas)
        return {
            "journal_mode": str(journal),
            "synchronous": sync_name(sync),
            "busy_timeout_ms": str(busy),
        }

    def convert_run(self, run: Run) -> Any:
        return [self._entry_from_dict(e) for e in run]

    async def append_run(self, session_id: str, run: Any, run_id: str) -> None:
        await self.session.append(session_id, run, run_id=run_id)

    async def load(self, session_id: str) -> int:
        return len(await self.session.load(session_id))

    async def stream(self, session_id: str) -> int:
        iterate = getattr(self.session, "iter_entries", None)
        if iterate is None:
            raise Unsupported("lovia_store has no SQLSession.iter_entries yet")
        count = 0
        async for _entry in iterate(session_id):
            count += 1
        return count

    async def open_checkpointer(self) -> None:
        path = self.ctx.sqlite_path("runs.db")
        if self.pg:
            self.checkpointer = _api("SQLCheckpointer")(self._url())
        elif self.synchronous is None:
            self.checkpointer = _api("SQLiteCheckpointer")(str(path), wal=self.wal)
        else:
            self.checkpointer = _api("SQLCheckpointer")(self._database(path))
        self.stores.append(self.checkpointer)
        self._run_head, self._usage = _api("RunHead"), _api("Usage")
        await _warm_up(lambda: self.checkpointer.load("warmup"), self._target(path))

    def convert_entry(self, entry: Entry) -> Any:
        return self._entry_from_dict(entry)

    async def open_lovia_stores(self) -> tuple[Any, Any]:
        """``lovia_store.integrations.lovia``'s stores, opened as a lovia user would."""
        try:
            from lovia_store.integrations import lovia as integration
        except Exception as exc:  # lovia missing, or the integration not there yet
            raise Unsupported(f"no lovia_store.integrations.lovia: {exc}") from exc
        sessions, runs = (self.ctx.sqlite_path(f"runner-{n}.db") for n in ("sessions", "runs"))
        if self.pg:
            session = integration.SQLSession(self._url())
            checkpointer = integration.SQLCheckpointer(self._url())
        elif self.synchronous is None:
            session = integration.SQLiteSession(sessions, wal=self.wal)
            checkpointer = integration.SQLiteCheckpointer(runs, wal=self.wal)
        else:
            session = integration.SQLSession(self._database(sessions))
            checkpointer = integration.SQLCheckpointer(self._database(runs))
        self.stores += [session, checkpointer]
        await _warm_up(lambda: session.load("warmup"), self._target(sessions))
        await _warm_up(lambda: checkpointer.load("warmup"), self._target(runs))
        self.probed = checkpointer
        return session, checkpointer

    async def checkpoint_step(self, run_id: str, entry: Any, turn: int) -> None:
        head = self._run_head(
            agent_name="bench", usage=self._usage(input_tokens=turn, output_tokens=turn), turns=turn
        )
        await self.checkpointer.append(run_id, [entry], head)

    async def open_raw_log(self) -> None:
        # The Raw Log API on the session's own Database: the same rows, the same connections.
        self.raw_log = _api("SQLSessionStorage")(self.session.database)
        self.stores.append(self.raw_log)

    async def page(self, session_id: str, *, offset: int, after_sequence: int, limit: int) -> int:
        records = await self.raw_log.list_raw_messages(
            session_id, after_sequence=after_sequence, limit=limit, offset=offset
        )
        return len(records)

    async def trim(self, session_id: str) -> int:
        return int(await self.session.trim_tool_results(session_id, keep_chars=400, keep_runs=1))

    async def rewind(self, session_id: str, keep_entries: int) -> int:
        return int(await self.session.rewind(session_id, keep_entries=keep_entries))


class LoviaStoreNormalBackend(LoviaStoreBackend):
    """The stores on ``Database(path, wal=True, synchronous="normal")``: zett-agent's setting."""

    synchronous = "normal"
