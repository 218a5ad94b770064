"""One deploy step for both lineages, from code: the host's migrations, then lovia-store's.

    python -m host_app.migrate sqlite+aiosqlite:///app.sqlite3

Each lineage keeps its own version table (``alembic_version`` for the host,
``lovia_alembic_version`` for lovia-store), so the order does not matter and
either can be upgraded or downgraded without touching the other.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import lovia_store

ALEMBIC_INI = Path(__file__).resolve().parents[1] / "alembic.ini"


def upgrade_host(connection: Connection) -> None:
    config = Config(str(ALEMBIC_INI))
    config.attributes["connection"] = connection  # env.py runs on it, in our event loop
    command.upgrade(config, "head")


async def migrate(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(upgrade_host)
    # lovia-store uses the engine it is given and never disposes it.
    await lovia_store.upgrade(engine)


async def main(url: str) -> None:
    engine = create_async_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
