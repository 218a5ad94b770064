"""The adapter contract every backend implements, and the trial context it gets."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.data import Entry, Run


class Unavailable(Exception):
    """The backend cannot run at all here (package missing, server down): n/a."""


class Unsupported(Exception):
    """The backend has no such operation (e.g. zett-agent has no rewind): n/a."""


@dataclass(frozen=True)
class PgTarget:
    """Where the scratch PostgreSQL database lives."""

    host: str = "127.0.0.1"
    port: int = 5432
    user: str = "postgres"
    database: str = "lovia_bench"

    def url(self, driver: str) -> str:
        """A SQLAlchemy URL for ``driver`` (``asyncpg``, ``psycopg``) or a plain DSN."""
        scheme = "postgresql" if driver == "" else f"postgresql+{driver}"
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{self.database}"


@dataclass(frozen=True)
class TrialContext:
    """Per-trial resources: a private temp dir and (maybe) a fresh PG database."""

    tmpdir: Path
    pg: PgTarget | None

    def sqlite_path(self, name: str = "sessions.db") -> Path:
        """A SQLite file inside this trial's private directory."""
        return self.tmpdir / name

    def require_pg(self) -> PgTarget:
        """The PostgreSQL target, or :class:`Unavailable` when there is none."""
        if self.pg is None:
            raise Unavailable("PostgreSQL not reachable")
        return self.pg


class Backend(ABC):
    """One storage backend under test, driven through its own public API.

    Workloads convert synthetic runs with :meth:`convert_run` *before* timing,
    so the measured region holds only the store's own work (serialization
    included). Operations a backend lacks raise :class:`Unsupported`.
    """

    def __init__(self, ctx: TrialContext, *, wal: bool = False, pg: bool = False) -> None:
        self.ctx = ctx
        self.wal = wal
        self.pg = pg

    # -- lifecycle -------------------------------------------------------
    @abstractmethod
    async def open(self) -> None:
        """Create the store objects and make sure their schema exists."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections; data stays."""

    async def durability(self) -> dict[str, str]:
        """Settings actually in force (journal mode, synchronous...), best effort."""
        return {}

    # -- sessions --------------------------------------------------------
    def convert_run(self, run: Run) -> Any:
        """Turn dict entries into whatever :meth:`append_run` takes."""
        return run

    @abstractmethod
    async def append_run(self, session_id: str, run: Any, run_id: str) -> None:
        """Append one converted run to ``session_id`` as one durable unit."""

    @abstractmethod
    async def load(self, session_id: str) -> int:
        """Load the whole session; return how many entries came back."""

    async def stream(self, session_id: str) -> int:
        """Iterate the whole session in bounded batches, holding none of it; return the count."""
        raise Unsupported("no streaming read")

    async def count(self, session_id: str) -> int:
        """Entries stored in the session (W7's loss check)."""
        return await self.load(session_id)

    async def append_run_tolerant(self, session_id: str, run: Any, run_id: str) -> tuple[int, int]:
        """Append, counting instead of raising: (entries acknowledged, failed calls)."""
        try:
            await self.append_run(session_id, run, run_id)
        except Exception:  # W7 counts every kind of failure
            return 0, 1
        return len(run), 0

    async def prefill(self, session_id: str, runs: Iterable[Run], first_index: int) -> None:
        """Untimed setup: store ``runs``. Default is the public append, run by run."""
        for offset, run in enumerate(runs):
            await self.append_run(session_id, self.convert_run(run), f"pre-{first_index + offset}")

    # -- optional operations ---------------------------------------------
    async def open_checkpointer(self) -> None:
        """Prepare checkpoint storage (W4)."""
        raise Unsupported("no checkpointer")

    def convert_entry(self, entry: Entry) -> Any:
        """One dict entry in the checkpointer's own type."""
        raise Unsupported("no checkpointer")

    async def checkpoint_step(self, run_id: str, entry: Any, turn: int) -> None:
        """Append one entry plus the run head to a run checkpoint."""
        raise Unsupported("no checkpointer")

    async def open_lovia_stores(self) -> tuple[Any, Any]:
        """lovia's ``Session`` and ``Checkpointer`` on this backend, for lovia's Runner (W10)."""
        raise Unsupported("no lovia Session/Checkpointer")

    async def open_raw_log(self) -> None:
        """Prepare the paged raw-message reader (W5)."""
        raise Unsupported("no raw-message paging")

    async def page(self, session_id: str, *, offset: int, after_sequence: int, limit: int) -> int:
        """Read one page of raw messages; return its length."""
        raise Unsupported("no raw-message paging")

    async def trim(self, session_id: str) -> int:
        """``trim_tool_results(keep_chars=400, keep_runs=1)``; return results trimmed."""
        raise Unsupported("no trim_tool_results")

    async def rewind(self, session_id: str, keep_entries: int) -> int:
        """``rewind(keep_entries=...)``; return entries removed."""
        raise Unsupported("no rewind")
