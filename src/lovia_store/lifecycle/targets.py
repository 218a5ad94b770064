"""Opening the database an operation reads or writes (a Database, an engine, a URL, a
path), and which tenants it works on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, TypeAlias

from sqlalchemy import Table
from sqlalchemy.sql.elements import ColumnElement

from ..db.database import Database
from ..errors import UserError
from ..validation import check_tenant

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Scope", "Target", "opened", "scope_of", "tenant_filter", "tenant_label"]

# A string: opening a SQLite file never imports SQLAlchemy's asyncio extension.
Target: TypeAlias = "Database | AsyncEngine | str | os.PathLike[str]"

Scope: TypeAlias = "str | None"
"""The tenants an operation works on: one tenant by name, or None for every tenant
(only ever from an explicit ``all_tenants=True``)."""


def scope_of(tenant: object, all_tenants: object, default: str) -> Scope:
    """The tenants a lifecycle call selects: ``tenant`` (checked), every tenant when
    ``all_tenants`` is True, else ``default`` (the Database's or the store's tenant, the
    default tenant ``""`` unless it was built with one). Every tenant is never the
    default: a call that forgets to choose sees one tenant, not every customer."""
    if not isinstance(all_tenants, bool):
        raise UserError(f"all_tenants is True or False, not {all_tenants!r}")
    if all_tenants:
        if tenant is not None:
            raise UserError("give tenant= or all_tenants=True, not both")
        return None
    return default if tenant is None else check_tenant(tenant)


def tenant_filter(table: Table, scope: Scope) -> list[ColumnElement[bool]]:
    """The WHERE clause that keeps ``table``'s rows to ``scope`` (none for every tenant)."""
    return [] if scope is None else [table.c.tenant == scope]


def tenant_label(tenant: str) -> str:
    """A tenant as a message names it (the default one is ``""``, easy to miss)."""
    return "the default tenant ('')" if tenant == "" else f"tenant {tenant!r}"


def refuse_row_level_security(db: Database) -> None:
    """Lifecycle work sets no tenant on its transactions: held by the row-level security
    policies it would see nothing, and say so as if there were nothing. Refused instead."""
    if db.row_level_security:
        raise UserError(
            f"{db.url}: lifecycle operations (copy, export, import, stats, prune, check, "
            "rekey) run as the tables' owner, on a Database without row_level_security "
            "(docs/tenants.md)"
        )


@contextlib.asynccontextmanager
async def opened(target: Target, *, verify_only: bool) -> AsyncIterator[Database]:
    """``target`` itself when it is a Database (left open), else a Database opened on it
    and closed after. ``verify_only``: never migrate a database opened here (a source)."""
    if isinstance(target, Database):
        refuse_row_level_security(target)
        yield target
        return
    db = Database(target, verify_only=verify_only)
    try:
        yield db
    finally:
        await db.close()
