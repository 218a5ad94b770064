"""Column types mapped once for every dialect."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ARRAY, DateTime, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = [
    "MARIADB_ID_COLLATION",
    "MYSQL_ID_COLLATION",
    "TEXT_ARRAY",
    "Id",
    "JsonText",
    "UTCDateTime",
    "id_collation",
    "utcnow",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on the way out; naive datetimes are refused on the way in.

    SQLite and MySQL keep no offset, so values are normalised to UTC before they
    are stored and marked UTC when read back.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: lovia-store stores timezone-aware UTC only")
        value = value.astimezone(UTC)
        if dialect.name != "postgresql":
            value = value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else _as_utc(value)

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        """The driver's parsing and the UTC marking in one call per value.

        A Raw Log row has eight timestamp columns, mostly NULL; the stacked
        processors a TypeDecorator builds cost more than reading the row.
        """
        parse = self.load_dialect_impl(dialect).result_processor(dialect, coltype)

        def process(value: Any) -> datetime | None:
            if value is None:
                return None
            return _as_utc(value if parse is None else parse(value))

        return process


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# A JSON document kept as text: we encode it once (orjson) and the database
# never parses it. LONGTEXT on MySQL so megabyte tool outputs fit.
JsonText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")

MARIADB_ID_COLLATION = "utf8mb4_nopad_bin"
MYSQL_ID_COLLATION = "utf8mb4_0900_bin"
"""NO PAD binary collations: ``utf8mb4_bin`` is PAD SPACE on both servers, where
``'alice'`` and ``'alice '`` are one key. MySQL's needs 8.0.17 or later."""


def id_collation(dialect: Dialect) -> str | None:
    """The collation our text columns have on this server (None: SQLite and PostgreSQL,
    whose text comparison is exact already). Revision 0005 sets it."""
    if dialect.name not in ("mysql", "mariadb"):
        return None
    return MARIADB_ID_COLLATION if getattr(dialect, "is_mariadb", False) else MYSQL_ID_COLLATION


class _Id(TypeDecorator[str]):
    """Ids are caller-chosen strings, compared exactly (byte for byte) on every backend.

    255 characters keep composite keys inside MySQL's index limit under
    utf8mb4. On MySQL and MariaDB the column carries the server's NO PAD
    binary collation, which is only known once connected (``is_mariadb``),
    hence a decorator rather than ``String(collation=...)``. Values pass
    through untouched: no bind or result processing is added.
    """

    impl = String(255)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        collation = id_collation(dialect)
        if collation is None:
            return dialect.type_descriptor(String(255))
        return dialect.type_descriptor(mysql.VARCHAR(255, collation=collation))


Id = _Id()


TEXT_ARRAY = ARRAY(Text())
"""PostgreSQL arrays are sent as text[], a type asyncpg encodes without first asking
the server about it (only text[] and oid[] are built in): any other costs each new
connection a type introspection query (2-7 ms) on its first use."""
