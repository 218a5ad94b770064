"""``db/tables.py`` and the migrations describe the same schema (an ``alembic check``).

Alembic's autogenerate comparison of our metadata against a migrated
database must find nothing to do: on a fresh database of every SQL backend
(SQLite, PostgreSQL, MariaDB), on SQLite files adopted from lovia and
zett-agent, and on an 0008 database upgraded in place (tests/test_migration_0009.py,
PostgreSQL's online path included).
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


async def test_a_fresh_database_matches_the_tables(empty_database_url: str) -> None:
    assert await drift(empty_database_url) == []


@pytest.mark.parametrize("name", ["zett-0.2.1.sqlite3", "lovia-0.9.119.sqlite3"])
async def test_an_adopted_file_matches_the_tables(
    legacy_copy: Callable[[str], Path], name: str
) -> None:
    assert await drift(legacy_copy(name)) == []


async def test_postgres_revisions_one_by_one_match_the_tables(pg_url: str) -> None:
    """Each revision in its own run: 0009 then takes PostgreSQL's online path (its
    transaction holds no lock on our tables), which builds the keys CONCURRENTLY."""
    from lovia_store.db.schema import migrate

    async with Database(pg_url) as db:
        await migrate(db, "0008")
        await migrate(db)
        assert await db.read(differences) == []


async def test_postgres_online_path_in_a_schema_of_its_own(pg_url: str) -> None:
    """``Database(schema=...)``: the online path's second connection names every table
    with the migration's schema (it sets nothing on its session)."""
    from sqlalchemy import inspect

    from lovia_store.db.schema import migrate

    async with Database(pg_url, schema="tenants_here") as db:
        await migrate(db, "0008")
        await migrate(db)

        def keys(conn: Connection) -> dict[str, list[str]]:
            found = inspect(conn)
            return {
                name: found.get_pk_constraint(name, schema="tenants_here")["constrained_columns"]
                for name in ("lovia_sessions", "lovia_messages")
            }

        assert await db.read(keys) == {
            "lovia_sessions": ["tenant", "session_id"],
            "lovia_messages": ["tenant", "session_id", "sequence"],
        }


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


def compiled_sqlite_schema() -> str:
    """``sqlite_schema.sql`` as the tables compile now: each table's CREATE TABLE, then its
    indexes by name, tables in dependency order."""
    from sqlalchemy.dialects.sqlite import pysqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = pysqlite.dialect()
    statements = []
    for table in metadata.sorted_tables:
        statements.append(CreateTable(table))
        statements += [CreateIndex(i) for i in sorted(table.indexes, key=lambda i: str(i.name))]
    body = "".join(f"{str(s.compile(dialect=dialect)).strip()};\n\n" for s in statements)
    return SQLITE_HEADER + "".join(f"{line.rstrip()}\n" for line in body.splitlines())


SQLITE_HEADER = """\
-- lovia_store.db.tables' CREATE statements compiled for SQLite: what a new file gets in
-- one step (lovia_store.db.schema._create_current), compiled ahead. Do not edit: written
-- by `python tests/test_schema_drift.py --update`, which tests/test_schema_drift.py runs.

"""


def test_the_sqlite_schema_file_is_the_tables_compiled() -> None:
    from lovia_store.db.schema import SQLITE_SCHEMA, sqlite_statements

    assert SQLITE_SCHEMA.read_text(encoding="utf-8") == compiled_sqlite_schema(), (
        "the tables changed: python tests/test_schema_drift.py --update"
    )
    assert len(sqlite_statements()) == len(metadata.sorted_tables) + sum(
        len(t.indexes) for t in metadata.sorted_tables
    )


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


if __name__ == "__main__":
    import sys

    from lovia_store.db.schema import SQLITE_SCHEMA

    if sys.argv[1:] != ["--update"]:
        raise SystemExit("usage: python tests/test_schema_drift.py --update")
    SQLITE_SCHEMA.write_text(compiled_sqlite_schema(), encoding="utf-8")
    print(f"wrote {SQLITE_SCHEMA}")
