"""Revision 0009 puts a tenant at the front of every key, on every SQL backend: an 0008
database with rows in every table upgrades with every row kept (all of the default
tenant '') and read back the same, downgrades with every row kept, refuses the
downgrade while another tenant has rows, and finishes a run that stopped half way.

An upgrade goes on to the head (0010 creates ``lovia_contents``), so every downgrade
here steps down through 0010 first: its rows are plain JSON, so 0010 lets it go."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, MetaData, Table, insert, inspect, select, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from lovia_store import upgrade
from lovia_store.db.schema import alembic_config
from lovia_store.db.schema_state import HEAD_REVISION
from lovia_store.db.urls import to_url
from test_schema_drift import differences

TABLES = (
    "lovia_sessions",
    "lovia_run_heads",
    "lovia_messages",
    "lovia_session_runs",
    "lovia_snapshots",
    "lovia_run_entries",
    "lovia_tool_effects",
    "lovia_run_leases",
)
OLD_MESSAGES_FK = "fk_lovia_messages_session_id_lovia_sessions"


@pytest.fixture
def url(empty_database_url: str) -> str:
    return empty_database_url


def _alembic(url: str, name: str, revision: str) -> None:
    cfg = alembic_config()
    cfg.cmd_opts = argparse.Namespace(x=[f"url={url}"])
    getattr(command, name)(cfg, revision)


async def _on(url: str, work: Any, *, write: bool = False) -> Any:
    engine = create_async_engine(to_url(url), poolclass=NullPool)
    try:
        async with engine.begin() if write else engine.connect() as conn:
            return await conn.run_sync(work)
    finally:
        await engine.dispose()


def _rows(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of our tables, as values by column name (order-free)."""
    found = {}
    for name in TABLES:
        table = Table(name, MetaData(), autoload_with=conn)
        rows = conn.execute(select(table)).mappings()
        found[name] = sorted(tuple(sorted((k, repr(v)) for k, v in row.items())) for row in rows)
    return found


def _without_tenant(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    assert all(("tenant", "''") in row for table in rows.values() for row in table)
    return {
        name: sorted(tuple(kv for kv in row if kv[0] != "tenant") for row in table)
        for name, table in rows.items()
    }


def _rows_at_0008(conn: Connection) -> None:
    """Rows in every table, written with 0008's columns (two sessions whose ids differ by
    a trailing space, two runs, each with its children)."""
    aware = conn.dialect.name == "postgresql"
    at = datetime(2026, 12, 1, 12, 30, 15, 123456, tzinfo=UTC if aware else None)
    meta = MetaData()
    table = {n: Table(n, meta, autoload_with=conn) for n in TABLES}
    for sid in ("bob", "bob "):
        conn.execute(
            insert(table["lovia_sessions"]),
            {"session_id": sid, "title": "t", "created_at": at, "updated_at": at},
        )
        conn.execute(
            insert(table["lovia_messages"]),
            [
                {
                    "session_id": sid,
                    "sequence": i,
                    "request_id": "q",
                    "entry_type": "x",
                    "entry_json": f'{{"n": {i}}}',
                    "idempotency_key": f"k{i}" if i % 2 else None,
                    "created_at": at,
                }
                for i in range(1, 5)
            ],
        )
        conn.execute(
            insert(table["lovia_session_runs"]),
            {
                "session_id": sid,
                "run_id": "r1",
                "position": 0,
                "first_sequence": 1,
                "entry_count": 4,
                "meta_json": "{}",
                "created_at": at,
            },
        )
        conn.execute(
            insert(table["lovia_snapshots"]),
            {
                "session_id": sid,
                "version": 1,
                "snapshot_id": "s1",
                "compacted_through_sequence": 2,
                "summary_json": "{}",
                "created_at": at,
                "updated_at": at,
            },
        )
    for rid in ("run-1", "run-2"):
        conn.execute(
            insert(table["lovia_run_heads"]),
            {
                "run_id": rid,
                "status": "running",
                "head_json": "{}",
                "entry_count": 2,
                "created_at": at,
                "updated_at": at,
                "session_id": "bob",
            },
        )
        conn.execute(
            insert(table["lovia_run_entries"]),
            [{"run_id": rid, "position": p, "entry_json": "[]"} for p in (0, 1)],
        )
        conn.execute(
            insert(table["lovia_tool_effects"]),
            {"run_id": rid, "call_id": "c1", "tool_name": "t", "started_at": at},
        )
        conn.execute(
            insert(table["lovia_run_leases"]),
            {"run_id": rid, "token": 3, "lease_id": "l", "holder": "h", "expires_ms": 9},
        )


def _append_after(conn: Connection) -> None:
    """A message written at 0009 by a writer that names no tenant (an older writer's
    statement): it lands in the default tenant."""
    conn.execute(
        text(
            "INSERT INTO lovia_messages (session_id, sequence, request_id, entry_type, "
            "entry_json, created_at) VALUES ('bob', 5, 'q', 'x', '{}', :at)"
        ),
        {"at": datetime(2026, 12, 5, tzinfo=UTC if conn.dialect.name == "postgresql" else None)},
    )


async def _revision(url: str) -> str:
    return str(
        await _on(
            url,
            lambda c: c.execute(text("SELECT version_num FROM lovia_alembic_version")).scalar_one(),
        )
    )


async def _an_0008_database(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Made by the revisions up to 0008, rows written there with 0008's columns."""
    await asyncio.to_thread(_alembic, url, "upgrade", "0008")
    assert await _revision(url) == "0008"
    await _on(url, _rows_at_0008, write=True)
    rows: dict[str, list[tuple[Any, ...]]] = await _on(url, _rows)
    assert all(rows.values())
    return rows


async def test_up_from_0008_and_down_keeps_every_row(url: str) -> None:
    before = await _an_0008_database(url)

    await upgrade(url)
    assert await _revision(url) == HEAD_REVISION
    assert _without_tenant(await _on(url, _rows)) == before
    assert await _on(url, differences) == []
    await _on(url, _append_after, write=True)

    at_0009 = _without_tenant(await _on(url, _rows))
    await asyncio.to_thread(_alembic, url, "downgrade", "0008")  # through 0010 and 0009
    assert await _revision(url) == "0008"
    assert await _on(url, _rows) == at_0009
    assert "lovia_contents" not in await _on(url, lambda c: inspect(c).get_table_names())

    await upgrade(url)
    assert _without_tenant(await _on(url, _rows)) == at_0009


async def test_a_downgrade_with_another_tenant_is_refused_and_changes_nothing(url: str) -> None:
    """Down to 0009 first: on MariaDB, a downgrade through 0010 in the same command would
    have dropped 0010's table for good before 0009 refused (test_migration_0010.py)."""
    await _an_0008_database(url)
    await upgrade(url)
    await asyncio.to_thread(_alembic, url, "downgrade", "0009")
    await _on(
        url,
        lambda c: c.execute(
            text(
                "INSERT INTO lovia_run_leases (tenant, run_id, token, lease_id, holder, expires_ms)"
                " VALUES ('acme', 'run-1', 1, 'l', 'h', 1)"
            )
        ),
        write=True,
    )
    rows = await _on(url, _rows)
    with pytest.raises(RuntimeError, match=r"tenant 'acme'.*nothing was changed"):
        await asyncio.to_thread(_alembic, url, "downgrade", "0008")
    assert await _revision(url) == "0009"
    assert await _on(url, _rows) == rows
    await upgrade(url)
    assert await _on(url, differences) == []


def _half_done(conn: Connection) -> None:
    """What an upgrade that died after a few steps leaves (MariaDB commits each DDL
    statement; PostgreSQL's online path commits on its own connection)."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        return  # all or nothing there
    quote = conn.dialect.identifier_preparer.quote
    for table in ("lovia_sessions", "lovia_messages"):
        conn.execute(
            text(f"ALTER TABLE {quote(table)} ADD COLUMN tenant VARCHAR(64) NOT NULL DEFAULT ''")
        )
    if dialect == "postgresql":
        conn.execute(
            text(
                "CREATE UNIQUE INDEX pk_lovia_messages_0009 "
                "ON lovia_messages (tenant, session_id, sequence)"
            )
        )
        conn.execute(text(f"ALTER TABLE lovia_messages DROP CONSTRAINT {OLD_MESSAGES_FK}"))
    else:
        conn.execute(text(f"ALTER TABLE lovia_messages DROP FOREIGN KEY {OLD_MESSAGES_FK}"))
        conn.execute(
            text(
                "ALTER TABLE lovia_sessions DROP PRIMARY KEY, ADD PRIMARY KEY (tenant, session_id)"
            )
        )


async def test_a_half_done_0009_is_finished(url: str) -> None:
    before = await _an_0008_database(url)
    await _on(url, _half_done, write=True)
    await upgrade(url)
    assert await _revision(url) == HEAD_REVISION
    assert _without_tenant(await _on(url, _rows)) == before
    assert await _on(url, differences) == []


def _invalid_index(conn: Connection) -> None:
    conn.execute(
        text("ALTER TABLE lovia_run_heads ADD COLUMN tenant VARCHAR(64) NOT NULL DEFAULT ''")
    )
    # An index a failed CREATE INDEX CONCURRENTLY left: marked invalid.
    conn.execute(
        text("CREATE INDEX ix_lovia_run_heads_tenant_session_id ON lovia_run_heads (tenant)")
    )
    conn.execute(
        text(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
            "'ix_lovia_run_heads_tenant_session_id'::regclass"
        )
    )


@pytest.mark.parametrize(
    "empty_database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_postgres_builds_again_an_index_a_failed_run_left_invalid(url: str) -> None:
    before = await _an_0008_database(url)
    await _on(url, _invalid_index, write=True)
    await upgrade(url)
    assert _without_tenant(await _on(url, _rows)) == before
    assert await _on(url, differences) == []
    columns = await _on(
        url,
        lambda c: [
            ix["column_names"]
            for ix in inspect(c).get_indexes("lovia_run_heads")
            if ix["name"] == "ix_lovia_run_heads_tenant_session_id"
        ],
    )
    assert columns == [["tenant", "session_id"]]


async def test_down_past_0009_one_step_at_a_time_and_up_again(url: str) -> None:
    """0009's downgrade leaves exactly what 0008 made, so the older revisions' own
    downgrades run after it (down to 0005, whose own downgrade refuses our "bob "),
    and everything comes back up drift-free."""
    await _an_0008_database(url)
    await upgrade(url)
    for target in ("0009", "0008", "0007", "0006", "0005"):  # 0005 refuses "bob " and "bob"
        await asyncio.to_thread(_alembic, url, "downgrade", target)
        assert await _revision(url) == target
    await upgrade(url)
    assert await _revision(url) == HEAD_REVISION
    assert await _on(url, differences) == []


async def test_a_host_foreign_key_onto_our_keys_is_refused_and_changes_nothing(url: str) -> None:
    await _an_0008_database(url)

    def host_table(conn: Connection) -> None:
        exact = " COLLATE utf8mb4_nopad_bin" if conn.dialect.name in ("mysql", "mariadb") else ""
        conn.execute(
            text(
                f"CREATE TABLE host_tickets (id INTEGER PRIMARY KEY, session_id VARCHAR(255)"
                f"{exact}, CONSTRAINT fk_host_tickets_session FOREIGN KEY (session_id) "
                "REFERENCES lovia_sessions (session_id))"
            )
        )

    await _on(url, host_table, write=True)
    rows = await _on(url, _rows)
    with pytest.raises(RuntimeError, match=r"host_tickets.*nothing was changed"):
        await upgrade(url)
    assert await _revision(url) == "0008"
    assert await _on(url, _rows) == rows
    assert await _on(url, lambda c: inspect(c).get_foreign_keys("host_tickets"))
