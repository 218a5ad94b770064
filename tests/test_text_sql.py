"""How entry documents are read on each driver: as UTF-8 bytes where that is cheaper."""

from __future__ import annotations

import pytest
from sqlalchemy import column, create_engine, select, table
from sqlalchemy.dialects import postgresql

from lovia_store.db.text_sql import utf8_bytes, utf8_bytes_every_row

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


def test_paged_reads_never_convert_on_the_server() -> None:
    """An OFFSET page would convert every row it skips."""
    sql = _sql(utf8_bytes(_DOCS.c.entry_json), postgresql.asyncpg.dialect())
    assert "convert_to" not in sql
