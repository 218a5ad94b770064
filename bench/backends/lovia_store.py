"""lovia-store (this project), written against the names in shared/API.md.

The library is being written alongside this harness: whatever it does not
offer yet surfaces as :class:`Unavailable` / :class:`Unsupported`, and the
report shows n/a instead of failing.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import lovia_store
from bench.backends.base import Backend, Unsupported
from bench.backends.sqlite_probe import file_journal_mode, sync_name
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


async def _warm_up(call: Callable[[], Awaitable[Any]], target: str) -> None:
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


def _find_engine(store: Any) -> Any:
    """The AsyncEngine a store uses, searched one attribute level deep (best effort)."""
    from sqlalchemy.ext.asyncio import AsyncEngine

    def attributes(obj: Any) -> list[Any]:
        return list(getattr(obj, "__dict__", {}).values())

    for obj in [store, *attributes(store)]:
        if isinstance(obj, AsyncEngine):
            return obj
        for value in attributes(obj):
            if isinstance(value, AsyncEngine):
                return value
    return None


class LoviaStoreBackend(Backend):
    """lovia-store's SQLiteSession / SQLSession and their checkpointer and Raw Log reader."""

    async def open(self) -> None:
        self.stores: list[Any] = []
        target = self._url() if self.pg else str(self.ctx.sqlite_path())
        if self.pg:
            self.session = _api("SQLSession")(target)
        else:
            self.session = _api("SQLiteSession")(target, wal=self.wal)
        self.stores.append(self.session)
        self._entry_from_dict = _api("entry_from_dict")
        await _warm_up(lambda: self.session.load("warmup"), target)

    def _url(self) -> str:
        return self.ctx.require_pg().url("asyncpg")

    async def close(self) -> None:
        for store in reversed(self.stores):
            await _close(store)

    async def durability(self) -> dict[str, str]:
        if self.pg:
            return {}
        engine = _find_engine(self.session)
        if engine is None:  # the journal mode at least is readable from the file itself
            return {
                "journal_mode": file_journal_mode(self.ctx.sqlite_path()),
                "synchronous": "? (no engine found on the store to ask)",
            }
        async with engine.connect() as conn:
            journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
            busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
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

    async def open_checkpointer(self) -> None:
        target = self._url() if self.pg else str(self.ctx.sqlite_path("runs.db"))
        if self.pg:
            self.checkpointer = _api("SQLCheckpointer")(target)
        else:
            self.checkpointer = _api("SQLiteCheckpointer")(target, wal=self.wal)
        self.stores.append(self.checkpointer)
        self._run_head, self._usage = _api("RunHead"), _api("Usage")
        await _warm_up(lambda: self.checkpointer.load("warmup"), target)

    def convert_entry(self, entry: Entry) -> Any:
        return self._entry_from_dict(entry)

    async def checkpoint_step(self, run_id: str, entry: Any, turn: int) -> None:
        head = self._run_head(
            agent_name="bench", usage=self._usage(input_tokens=turn, output_tokens=turn), turns=turn
        )
        await self.checkpointer.append(run_id, [entry], head)

    async def open_raw_log(self) -> None:
        if self.pg:
            self.raw_log = _api("SQLSessionStorage")(self._url())
        elif self.wal:
            database = _api("Database")(str(self.ctx.sqlite_path()), wal=True)
            self.stores.append(database)
            self.raw_log = _api("SQLSessionStorage")(database)
        else:
            self.raw_log = _api("SQLiteSessionStorage")(str(self.ctx.sqlite_path()))
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
