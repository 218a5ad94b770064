"""Column types mapped once for every dialect."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = ["Id", "JsonText", "UTCDateTime", "utcnow"]


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

# Ids are caller-chosen strings; 255 characters keep composite keys inside
# MySQL's index limit under utf8mb4.
Id = String(255)
