"""``db/tables.py`` and the migrations describe the same schema (an ``alembic check``).

Alembic's autogenerate comparison of our metadata against a migrated
database must find nothing to do: on a fresh SQLite file, on SQLite files
adopted from lovia and zett-agent, and on PostgreSQL.
"""

from __future__ import annotations

import sqlite3
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


def sqlite_schema(path: Path) -> dict[str, Any]:
    """Everything SQLite knows of each table (columns, keys, indexes, foreign keys) and the
    versions recorded, in an order-free form."""
    conn = sqlite3.connect(path)
    try:
        names = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith("sqlite_")
        ]
        found: dict[str, Any] = {}
        for name in names:
            indexes = {
                (row[1], row[2], row[3], row[4]): tuple(
                    (c[2], c[3], c[4], c[5])
                    for c in conn.execute(f'PRAGMA index_xinfo("{row[1]}")')
                    if c[5]
                )
                for row in conn.execute(f'PRAGMA index_list("{name}")')
            }
            found[name] = {
                "columns": {r[1:] for r in conn.execute(f'PRAGMA table_xinfo("{name}")')},
                "indexes": {k if k[2] != "pk" else (None, *k[1:]): v for k, v in indexes.items()},
                "foreign keys": {r[2:] for r in conn.execute(f'PRAGMA foreign_key_list("{name}")')},
            }
        found["rows"] = {
            "lovia_schema": sorted(conn.execute("SELECT store, version FROM lovia_schema")),
            VERSION_TABLE: sorted(conn.execute(f"SELECT version_num FROM {VERSION_TABLE}")),
        }
        return found
    finally:
        conn.close()


async def test_a_new_file_made_in_one_step_equals_one_the_revisions_built(tmp_path: Path) -> None:
    """A new SQLite file gets the current schema in one step (``_create_current``); the
    revisions, run one by one, build exactly the same tables."""
    from alembic import command
    from sqlalchemy import create_engine

    from lovia_store.db.schema_state import alembic_config

    one_step = tmp_path / "one-step.sqlite3"
    await upgrade(one_step)
    by_revisions = tmp_path / "revisions.sqlite3"
    engine = create_engine(f"sqlite:///{by_revisions}")
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    finally:
        engine.dispose()
    assert sqlite_schema(one_step) == sqlite_schema(by_revisions)
