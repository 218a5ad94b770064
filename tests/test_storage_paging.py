"""Deep pages of the Raw Log are index seeks, not scans: the query plans say so.

A long session is written in bulk (the append path is covered elsewhere), then
the storage's own page query is explained on SQLite and PostgreSQL, and the
statements it sends are watched: a dense log pages by key, never by OFFSET.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, event, text

from backends import Backend
from helpers import user
from lovia_store import SQLSession, SQLSessionStorage
from lovia_store.db.tables import messages, sessions
from lovia_store.db.types import utcnow
from lovia_store.entries import entry_to_json
from lovia_store.sessions.raw_log.reads import offset_page_query, page_query

LONG = 20_000


async def write_long_session(store: SQLSessionStorage, session_id: str, count: int) -> None:
    def work(conn: Connection) -> None:
        now = utcnow()
        conn.execute(
            sessions.insert().values(
                session_id=session_id,
                last_sequence=count,
                message_count=count,
                created_at=now,
                updated_at=now,
            )
        )
        document = entry_to_json(user("x" * 40))
        rows = [
            {
                "session_id": session_id,
                "sequence": q,
                "request_id": f"r{q // 10}",
                "entry_type": "input",
                "entry_json": document,
                "created_at": now,
            }
            for q in range(1, count + 1)
        ]
        for start in range(0, count, 5000):
            conn.execute(messages.insert(), rows[start : start + 5000])

    await store.database.write(work)


@pytest.fixture
async def long_store(sql_backend: Backend) -> AsyncIterator[SQLSessionStorage]:
    async with sql_backend.storage() as store:
        await write_long_session(store, "long", LONG)
        await write_long_session(store, "other", 50)

        def analyze(conn: Connection) -> None:
            if conn.dialect.name in ("mysql", "mariadb"):
                conn.execute(text("ANALYZE TABLE lovia_messages, lovia_sessions"))
            else:
                conn.execute(text("ANALYZE"))

        await store.database.write(analyze)
        yield store


async def plan(store: SQLSessionStorage, *, lower: int, skip: int = 0) -> str:
    return await explain(
        store, page_query("", "long", lower=lower, through=None, limit=50, skip=skip)
    )


async def explain(store: SQLSessionStorage, query: Any) -> str:
    def work(conn: Connection) -> str:
        compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
        prefix = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
        rows = conn.execute(text(prefix + str(compiled)))
        if conn.dialect.name in ("mysql", "mariadb"):  # one row per table: type, key, ...
            return "\n".join(f"type={row.type} key={row.key} rows={row.rows}" for row in rows)
        return "\n".join(str(row[-1]) for row in rows)

    return await store.database.read(work)


@contextmanager
def statements(store: SQLSessionStorage) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        # Positional (asyncpg, asyncmy, sqlite3) or named, in the SQL's order (psycopg).
        values = parameters.values() if isinstance(parameters, dict) else parameters
        seen.append((statement, list(values)))

    engine = getattr(store.database.engine, "sync_engine", store.database.engine)
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def test_a_deep_page_is_an_index_seek(long_store: SQLSessionStorage) -> None:
    explained = await plan(long_store, lower=LONG - 2000)
    if long_store.database.dialect == "sqlite":
        assert "SEARCH lovia_messages USING INDEX" in explained, explained
        assert "sequence>?" in explained, explained
        assert "SCAN" not in explained, explained
    elif long_store.database.dialect in ("mysql", "mariadb"):
        assert "type=range key=PRIMARY" in explained, explained
    else:
        assert "Index Scan using pk_lovia_messages" in explained, explained
        assert "Seq Scan" not in explained, explained
    if long_store.database.dialect in ("sqlite", "postgresql"):
        # At an offset the density check is a subquery of the page's one statement.
        one = offset_page_query("", "long", after=0, through=None, limit=50, offset=LONG - 2000)
        explained = await explain(long_store, one)
        if long_store.database.dialect == "sqlite":
            assert "SEARCH lovia_messages USING INDEX" in explained, explained
            assert "sequence>?" in explained, explained
            assert "SCAN lovia_messages" not in explained, explained
        else:  # the session row may be scanned: a table of two rows here
            assert "Index Scan using pk_lovia_messages" in explained, explained
            assert "Seq Scan on lovia_messages" not in explained, explained


async def test_a_dense_log_pages_by_key_and_reads_the_right_rows(
    long_store: SQLSessionStorage,
) -> None:
    with statements(long_store) as seen:
        page = await long_store.list_raw_messages("long", offset=LONG - 1000, limit=50)
    assert [r.sequence for r in page] == list(range(LONG - 999, LONG - 949))
    if long_store.database.dialect in ("sqlite", "postgresql"):
        # One statement: the session row's density picks the key bound inside it.
        (page_statement,) = [s for s, _ in seen if "lovia_messages" in s]
        assert "lovia_sessions" in page_statement, seen
        assert not [s for s, _ in seen if s.startswith("SELECT lovia_sessions")], seen
    else:
        (params,) = [list(p) for s, p in seen if "FROM lovia_messages" in s]
        # The skip became the key bound (after the tenant, the default one here).
        assert params[:3] == ["", "long", LONG - 1000], params
    page = await long_store.list_raw_messages("long", after_sequence=LONG - 60, offset=5)
    assert [r.sequence for r in page] == list(range(LONG - 54, LONG + 1))
    page = await long_store.list_raw_messages(
        "long", after_sequence=100, through_sequence=130, offset=25, limit=50
    )
    assert [r.sequence for r in page] == list(range(126, 131))
    assert await long_store.list_raw_messages("long", offset=LONG) == []


async def test_a_log_with_holes_falls_back_to_offset(long_store: SQLSessionStorage) -> None:
    await SQLSession(long_store.database).rewind("long", keep_entries=LONG - 100)
    with statements(long_store) as seen:
        page = await long_store.list_raw_messages("long", offset=LONG - 150, limit=100)
    assert [r.sequence for r in page] == list(range(LONG - 149, LONG - 99))
    (params,) = [list(p) for s, p in seen if "FROM lovia_messages" in s]
    # The skip went to OFFSET (MySQL renders LIMIT offset, count; the others LIMIT .. OFFSET).
    assert params[:3] == ["", "long", 0] and LONG - 150 in params[3:], params
    explained = await plan(long_store, lower=0, skip=LONG - 150)
    assert "SCAN lovia_messages" not in explained and "Seq Scan" not in explained, explained
