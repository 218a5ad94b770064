"""Read replicas: where the reads that may be stale go, and when a replica is passed over.

A read that may be stale (listing and paging, stats, export, show) runs on the
first replica that answers and is at most ``max_lag`` seconds behind, measured
by the replica itself in the read's own transaction, so the figure and the rows
come from one snapshot. A replica that cannot be reached is passed over for a
few seconds; when none will do, the read goes to the primary. Reads an agent run
depends on never come here unless the caller asks (``Database.stale_reads``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TypeVar

from sqlalchemy import Connection, text

from ..errors import StoreBusyError, StoreUnavailableError
from .executors import Executor, Work
from .urls import display_url

__all__ = ["Replicas"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

# How far behind the primary a hot standby is, in seconds: nothing when it has replayed
# all it received (or is no standby); else the age of the last transaction it replayed.
_LAG = text(
    "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0::float8"
    " WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0::float8"
    " ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8,"
    " 'Infinity'::float8) END"
)
# How long a replica that could not be reached is left out before it is tried again.
_PASS_OVER = 5.0


class _Behind(Exception):
    def __init__(self, lag: float) -> None:
        self.lag = lag


class Replicas:
    """The replicas of one ``Database``, tried in turn for each read that may be stale."""

    def __init__(self, executors: Sequence[Executor], max_lag: float) -> None:
        self.executors = list(executors)
        self.max_lag = max_lag
        self._unreachable_until = [0.0] * len(self.executors)
        self._next = 0

    async def read(self, work: Work[T]) -> tuple[bool, T | None]:
        """(True, the result) from a replica, or (False, None) when none would do."""
        count = len(self.executors)
        start, self._next = self._next, (self._next + 1) % count  # spread the reads
        for index in [(start + i) % count for i in range(count)]:
            if self._unreachable_until[index] > time.monotonic():
                continue
            executor = self.executors[index]
            try:
                return True, await executor.run(self._checked(work), write=False)
            except _Behind as behind:
                logger.info(
                    "read replica %s is %.1f s behind (max_replica_lag %g s): passed over",
                    display_url(executor.url),
                    behind.lag,
                    self.max_lag,
                )
            except (StoreUnavailableError, StoreBusyError) as exc:
                # Unreachable, or a standby that cancelled the read to replay: the read
                # wrote nothing, so it goes elsewhere.
                logger.info("read replica passed over: %s", exc)
                if not isinstance(exc, StoreBusyError):
                    self._unreachable_until[index] = time.monotonic() + _PASS_OVER
        return False, None

    def _checked(self, work: Work[T]) -> Work[T]:
        def checked(conn: Connection) -> T:
            lag = float(conn.execute(_LAG).scalar_one())
            if lag > self.max_lag:
                raise _Behind(lag)
            return work(conn)

        return checked

    async def close_loop(self) -> None:
        for executor in self.executors:
            await executor.close_loop()

    async def close(self) -> None:
        for executor in self.executors:
            await executor.close()
