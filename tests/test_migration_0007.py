"""Revision 0007 adds three nullable columns (a fork's origin, a run's session) on
every SQL backend, keeps every row through a downgrade and back, and finishes a
run that stopped half way (MySQL and MariaDB commit each DDL statement alone)."""

from __future__ import annotations

import argparse
import asyncio

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from helpers import say, user
from lovia_store import SQLSession, upgrade
from lovia_store.db.schema import alembic_config
from lovia_store.db.urls import to_url

NEW = {
    "lovia_sessions": {"forked_from_session_id", "forked_at_entry"},
    "lovia_run_heads": {"session_id"},
}


@pytest.fixture
def url(empty_database_url: str) -> str:
    return empty_database_url


def _alembic(url: str, name: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.cmd_opts = argparse.Namespace(x=[f"url={url}"])
    getattr(command, name)(cfg, revision)


async def _columns(url: str) -> dict[str, set[str]]:
    engine = create_async_engine(to_url(url), poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: {
                    table: {c["name"] for c in inspect(sync).get_columns(table)} for table in NEW
                }
            )
    finally:
        await engine.dispose()


async def _execute(url: str, sql: str) -> None:
    engine = create_async_engine(to_url(url), poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


async def test_down_to_0006_and_back_keeps_every_row(url: str) -> None:
    history = [user("hi"), say("hello")]
    async with SQLSession(url) as session:
        await session.append("alice", history, run_id="r1")
    assert all(NEW[t] <= cols for t, cols in (await _columns(url)).items())

    await asyncio.to_thread(_alembic, url, "downgrade", "0006")
    assert all(not NEW[t] & cols for t, cols in (await _columns(url)).items())

    await upgrade(url)
    assert all(NEW[t] <= cols for t, cols in (await _columns(url)).items())
    async with SQLSession(url) as session:
        assert await session.load("alice") == history


async def test_a_half_done_0007_is_finished(url: str) -> None:
    await upgrade(url)
    await asyncio.to_thread(_alembic, url, "downgrade", "0006")
    # What a MariaDB upgrade that died after its first statement leaves behind.
    await _execute(url, "ALTER TABLE lovia_sessions ADD COLUMN forked_from_session_id VARCHAR(255)")
    await upgrade(url)
    assert all(NEW[t] <= cols for t, cols in (await _columns(url)).items())
    async with SQLSession(url) as session:
        await session.append("bob", [user("hi")], run_id="r1")
        assert await session.load("bob") == [user("hi")]
