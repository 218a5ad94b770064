"""MariaDB's notes stay off stderr: named primary keys (16.5) and INSERT IGNORE's
duplicates, which hold ids (D18).

asyncmy logs every note of a statement at WARNING through the ``asyncmy``
logger; with no logging configured Python prints those to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Connection, Integer, MetaData, PrimaryKeyConstraint, Table, text
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.schema import CreateTable

from backends import HERE, fresh_server_database
from lovia_store import Database, upgrade
from lovia_store.db import async_executor as executors
from lovia_store.db.mysql_ddl import TABLE_PREFIX  # registers the rule, as env.py does
from lovia_store.db.tables import metadata

pytestmark = pytest.mark.mysql

_CHILD = """
import asyncio, sys
sys.path.insert(0, sys.argv[2])
from helpers import a_run
from lovia_store import SQLSession, upgrade
from lovia_store.db import async_executor as executors

async def main() -> None:
    if sys.argv[3] == "migration, unfiltered":  # the primary keys' own fix, alone
        executors._quiet_driver_notes = lambda: None
        await upgrade(sys.argv[1])
        return
    async with SQLSession(sys.argv[1]) as store:  # the first migration
        await store.append("alice", a_run("1"), run_id="r1")
        await store.append("alice", a_run("1"), run_id="r1")  # INSERT IGNORE finds it

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["migration and repeated appends", "migration, unfiltered"])
async def test_nothing_is_printed(mode: str) -> None:
    async with fresh_server_database("mariadb") as url:
        child = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", _CHILD, url, str(HERE), mode],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert child.returncode == 0, child.stderr
    assert child.stderr == ""


def test_our_primary_keys_render_unnamed_on_mysql_and_a_hosts_keep_their_name() -> None:
    for table in metadata.tables.values():
        assert table.name.startswith(TABLE_PREFIX)
        ddl = str(CreateTable(table).compile(dialect=mysql.dialect()))
        assert "PRIMARY KEY" in ddl and "CONSTRAINT pk_" not in ddl, table.name
    host = Table(
        "orders", MetaData(), Column("id", Integer), PrimaryKeyConstraint("id", name="pk_x")
    )
    assert "CONSTRAINT pk_x PRIMARY KEY" in str(CreateTable(host).compile(dialect=mysql.dialect()))


@pytest.fixture
def notes_shown(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """asyncmy's notes as they are without our filter (to see what the server says)."""
    driver_logger = logging.getLogger("asyncmy")
    driver_logger.removeFilter(executors._DRIVER_NOTES)
    monkeypatch.setattr(executors, "_quiet_driver_notes", lambda: None)
    try:
        yield
    finally:
        driver_logger.addFilter(executors._DRIVER_NOTES)


async def test_mariadb_itself_has_no_primary_key_name_to_ignore(
    notes_shown: None, caplog: pytest.LogCaptureFixture
) -> None:
    """The root fix: the server raises no note at all, filter or not."""
    caplog.set_level(logging.WARNING, logger="asyncmy")
    async with fresh_server_database("mariadb") as url:
        await upgrade(url)
    assert not [r for r in caplog.records if "PRIMARY" in r.getMessage()]


async def test_a_hosts_own_statements_keep_their_notes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="asyncmy")

    def divide(conn: Connection) -> object:
        return conn.execute(text("SELECT 1/0")).scalar()  # a note: Division by 0

    async with fresh_server_database("mariadb") as url:
        engine = create_async_engine(url)
        try:
            async with Database(engine) as db:
                await db.read_unchecked(divide)  # ours: quiet
                assert not [r for r in caplog.records if r.name == "asyncmy"]
                async with engine.connect() as conn:  # the host's: as asyncmy says it
                    await conn.run_sync(divide)
            assert [r for r in caplog.records if "Division by 0" in r.getMessage()]
        finally:
            await engine.dispose()
