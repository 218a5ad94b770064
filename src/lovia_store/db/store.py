"""What every SQL store shares: a Database it either owns or borrows."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Self, TypeAlias

from ..validation import check_tenant
from .database import Database, as_database

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["SQLStore", "StoreTarget"]

# A string: a SQLite store never imports SQLAlchemy's asyncio extension (nor its ORM).
StoreTarget: TypeAlias = "Database | AsyncEngine | str | os.PathLike[str]"


class SQLStore:
    """Base of the SQL stores: ``target`` is a Database, an engine, a URL or a path.

    A store built on a ``Database`` borrows it; one built on anything else
    owns the Database it creates, and ``close()`` releases it (an engine the
    caller passed in is never disposed).

    ``tenant`` scopes every id the store takes and every row it reads or
    writes; stores of many tenants share one ``Database`` (one pool). None:
    the Database's tenant.
    """

    def __init__(
        self, target: StoreTarget, *, wal: bool = False, tenant: str | None = None
    ) -> None:
        if tenant is not None:
            check_tenant(tenant)  # before a Database is opened for a refused store
        self.database, self._owns_database = as_database(target, wal=wal)
        self.tenant: str = self.database.tenant if tenant is None else tenant

    async def close(self) -> None:
        if self._owns_database:
            await self.database.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        if self.tenant:
            return f"{type(self).__name__}({self.database.url!r}, tenant={self.tenant!r})"
        return f"{type(self).__name__}({self.database.url!r})"
