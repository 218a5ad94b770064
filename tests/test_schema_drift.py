"""``db/tables.py`` and the migrations describe the same schema (an ``alembic check``).

Alembic's autogenerate comparison of our metadata against a migrated
database must find nothing to do: on a fresh SQLite file, on SQLite files
adopted from lovia and zett-agent, and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from lovia_store import Database, upgrade
from lovia_store.db.tables import VERSION_TABLE, metadata


def differences(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
    )
    return list(compare_metadata(context, metadata))


async def drift(target: str | Path) -> list[Any]:
    await upgrade(target)
    async with Database(target) as db:
        return await db.read(differences)


async def test_a_fresh_sqlite_file_matches_the_tables(tmp_path: Path) -> None:
    assert await drift(tmp_path / "fresh.sqlite3") == []


@pytest.mark.parametrize("name", ["zett-0.2.1.sqlite3", "lovia-0.9.119.sqlite3"])
async def test_an_adopted_file_matches_the_tables(
    legacy_copy: Callable[[str], Path], name: str
) -> None:
    assert await drift(legacy_copy(name)) == []


async def test_postgres_matches_the_tables(pg_url: str) -> None:
    assert await drift(pg_url) == []
