"""How entry documents are read on each driver: as UTF-8 bytes where that is cheaper."""

from __future__ import annotations

import pytest
from sqlalchemy import column, create_engine, select, table
from sqlalchemy.dialects import postgresql

from lovia_store.db.text_sql import utf8_bytes_every_row
from lovia_store.sessions import reads as session_reads
from lovia_store.sessions import trim
from lovia_store.sessions.raw_log import reads

_DOCS = table("docs", column("entry_json"))


def _sql(element: object, dialect: object) -> str:
    return str(select(element).select_from(_DOCS).compile(dialect=dialect))  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("dialect", "every_row"),
    [
        (postgresql.asyncpg.dialect(), "convert_to(docs.entry_json, 'UTF8')"),
        (postgresql.psycopg.dialect(), "docs.entry_json"),  # psycopg reads bytea as hex text
        (create_engine("sqlite://").dialect, "CAST(docs.entry_json AS BLOB)"),
    ],
    ids=["asyncpg", "psycopg", "pysqlite"],
)
def test_whole_reads_take_bytes_where_the_driver_gains(dialect: object, every_row: str) -> None:
    assert _sql(utf8_bytes_every_row(_DOCS.c.entry_json), dialect).startswith(
        f"SELECT {every_row} AS "
    )


@pytest.mark.parametrize(
    ("statement", "whole"),
    [
        (session_reads.LOAD, True),
        (session_reads.SEGMENT_ROWS, True),
        (session_reads.BATCH, False),  # a LIMIT: a plan sorting first would convert every row
        (trim._TRIM_CANDIDATES.statement, False),
        (reads._PAGE, False),
        (reads._OFFSET_PAGE, False),  # an OFFSET converts every row it skips
        (reads._TAIL, False),
    ],
    ids=["load", "segments", "iter_entries", "trim", "page", "offset_page", "view_tail"],
)
def test_only_whole_session_reads_convert_on_the_server(statement: object, whole: bool) -> None:
    assert ("convert_to(" in _sql_of(statement, postgresql.asyncpg.dialect())) is whole


def _sql_of(statement: object, dialect: object) -> str:
    return str(statement.compile(dialect=dialect))  # type: ignore[attr-defined]
