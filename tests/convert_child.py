"""A process that converts a legacy file and is killed (SIGKILL) at a chosen point.

``python convert_child.py PATH count`` converts and prints how many statements
the conversion ran (PATH may also be a server's URL: a first migration).
``PATH statement N`` kills the process just before its Nth statement,
``PATH commit`` just before the COMMIT that follows the conversion's DROP TABLEs,
``PATH copied`` once the copy is written but not yet under its final name, and
``PATH published`` once it is.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import event

from lovia_store import Database
from lovia_store.db import legacy_copy


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def convert(path: Path | str, mode: str, at: int) -> int:
    statements = 0
    dropped = False
    async with Database(path) as db:
        engine = getattr(db.engine, "sync_engine", db.engine)  # a server's AsyncEngine

        @event.listens_for(engine, "before_cursor_execute")
        def _counted(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            nonlocal statements, dropped
            statements += 1
            if mode == "commit" and dropped and statement.strip().upper() == "COMMIT":
                die()  # the SQLite executor sends COMMIT as a statement (its bracket)
            dropped = dropped or statement.lstrip().upper().startswith("DROP TABLE")
            if mode == "statement" and statements == at:
                die()

        @event.listens_for(engine, "commit")
        def _committing(*_args: Any) -> None:
            if mode == "commit" and dropped:
                die()

        await db.ensure_schema()
    return statements


def main() -> None:
    # A SQLite path, or a server's URL (tests/test_host_tables.py kills first migrations).
    path = sys.argv[1] if "://" in sys.argv[1] else Path(sys.argv[1])
    mode = sys.argv[2]
    at = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    publish = legacy_copy._publish
    if mode == "copied":
        legacy_copy._publish = lambda partial, final: die()  # type: ignore[assignment]
    elif mode == "published":

        def published(partial: Path, final: Path) -> None:
            publish(partial, final)
            die()

        legacy_copy._publish = published  # type: ignore[assignment]
    print(asyncio.run(convert(path, mode, at)))


if __name__ == "__main__":
    main()
