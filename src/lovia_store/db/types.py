"""Column types mapped once for every dialect.

MySQL's own types are imported where a type is first used on MySQL or MariaDB
(``load_dialect_impl``): a process on another backend never loads that dialect.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import ARRAY, DateTime, LargeBinary, String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

if TYPE_CHECKING:
    from alembic.autogenerate.api import AutogenContext

__all__ = [
    "MARIADB_ID_COLLATION",
    "MYSQL_ID_COLLATION",
    "TEXT_ARRAY",
    "Bytes",
    "BytesType",
    "Id",
    "IdType",
    "JsonText",
    "JsonTextType",
    "Tenant",
    "TenantType",
    "UTCDateTime",
    "id_collation",
    "render_item",
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
            from sqlalchemy.dialects.mysql import DATETIME

            return dialect.type_descriptor(DATETIME(fsp=6))
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


class JsonTextType(TypeDecorator[str]):
    """A JSON document kept as text: we encode it once (orjson) and the database
    never parses it. LONGTEXT on MySQL and MariaDB, so megabyte tool outputs fit
    (their TEXT holds 64 KiB); TEXT elsewhere. Values pass through untouched."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import LONGTEXT

            return LONGTEXT()
        # Not type_descriptor(Text()): a driver's own string type (psycopg2's) renders VARCHAR.
        return Text()

    def __repr__(self) -> str:
        return "JsonTextType()"


JsonText = JsonTextType()


class BytesType(TypeDecorator[bytes]):
    """Bytes: LONGBLOB on MySQL and MariaDB (their BLOB holds 64 KiB), the dialect's
    binary type elsewhere (BLOB, BYTEA)."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import LONGBLOB

            return LONGBLOB()
        return dialect.type_descriptor(LargeBinary())

    def __repr__(self) -> str:
        return "BytesType()"


Bytes = BytesType()

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


class IdType(TypeDecorator[str]):
    """Ids are caller-chosen strings, compared exactly (byte for byte) on every backend.

    255 characters keep composite keys inside MySQL's index limit under
    utf8mb4. On MySQL and MariaDB the column carries the server's NO PAD
    binary collation, which is only known once connected (``is_mariadb``),
    hence a decorator rather than ``String(collation=...)``. Values pass
    through untouched: no bind or result processing is added.

    Public, with a ``repr`` that builds it: a host's autogenerated migrations
    name it ``lovia_store.db.types.IdType()`` (see ``render_item``), so it stays
    here under this name.
    """

    impl = String(255)
    cache_ok = True
    length = 255

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        collation = id_collation(dialect)
        if collation is None:
            return dialect.type_descriptor(String(self.length))
        from sqlalchemy.dialects.mysql import VARCHAR

        return dialect.type_descriptor(VARCHAR(self.length, collation=collation))

    def __repr__(self) -> str:
        # TypeDecorator's repr shows the impl's arguments (``length=255``), which
        # IdType does not take.
        return "IdType()"


Id = IdType()


class TenantType(IdType):
    """A tenant: compared exactly like an id, 64 characters at most, so that the
    keys it leads (three ids wide on ``lovia_tool_effects``) fit MySQL's index
    limit under utf8mb4."""

    impl = String(64)
    cache_ok = True
    length = 64

    def __repr__(self) -> str:
        return "TenantType()"


Tenant = TenantType()


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Alembic's ``render_item`` hook for a host's ``env.py``: our types, imported.

    Alembic names a type from outside SQLAlchemy by its module
    (``lovia_store.db.types.IdType()``) but adds an import only for
    SQLAlchemy's own, so without this hook the autogenerated migration fails
    with NameError. The host's ``user_module_prefix`` does not apply to our
    types, except to the base of a variant (``Id.with_variant(...)``), which
    Alembic renders itself. Anything else is left to Alembic (False).
    """
    if type_ != "type" or type(obj).__module__ != __name__:
        return False
    autogen_context.imports.add(f"import {__name__}")
    if obj._variant_mapping:  # Alembic renders the variants around our repr
        return False
    return f"{__name__}.{obj!r}"


TEXT_ARRAY = ARRAY(Text())
"""PostgreSQL arrays are sent as text[], a type asyncpg encodes without first asking
the server about it (only text[] and oid[] are built in): any other costs each new
connection a type introspection query (2-7 ms) on its first use."""
