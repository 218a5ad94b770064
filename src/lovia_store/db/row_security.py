"""Row-level security on PostgreSQL: the database itself holds a role to one tenant.

Optional defence in depth beneath the stores' own scoping (docs/tenants.md). On
each of our tables with a ``tenant`` column, ``enable_row_level_security``
turns row-level security on and creates one policy: a row is seen, changed,
and written only when its tenant equals the transaction's ``lovia.tenant``
setting. ``Database(row_level_security=True)`` sets it first in every
transaction it runs for a tenant, with ``set_config(..., true)``: local to that
transaction, so a transaction pooler (PgBouncer in transaction mode) that hands
the server connection to another client at COMMIT hands it on without it. A
host's own query (``lovia_store.models`` with SQLAlchemy's ORM) runs
``SELECT set_config('lovia.tenant', 'acme', true)`` in its transaction first.

The setting must be non-empty: PostgreSQL reads a setting no statement made in
this transaction back as ``''`` once any earlier transaction on the connection
set it, so ``''`` cannot mean the default tenant here without also meaning
"forgot to set it". Under the policies the default tenant's rows are the
owner's alone.

Table owners, superusers and ``BYPASSRLS`` roles pass the policies by
PostgreSQL's own rules: the application must log in as another role, or the
owner's tables must be created with ``force=True`` (``FORCE ROW LEVEL
SECURITY``; then migrations and all-tenant maintenance see nothing either).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from sqlalchemy import Connection, String, Table, bindparam, text

from ..errors import UserError
from ..validation import DEFAULT_TENANT
from .database import Database, as_database
from .executors import Work
from .prepared import Prepared
from .tables import metadata

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "POLICY",
    "SETTING",
    "RowSecurity",
    "disable_row_level_security",
    "enable_row_level_security",
    "row_level_security_status",
    "tenant_tables",
]

POLICY = "lovia_tenant_isolation"
"""The one policy's name on each table (ours to drop and create again)."""

SETTING = "lovia.tenant"
"""The setting the policies read: the tenant of the transaction that set it."""

# NULLIF: an unset setting reads as NULL or '' (see above); neither equals any tenant.
_CONDITION = f"(tenant = NULLIF(current_setting('{SETTING}', true), ''))"

Target = Database | str | os.PathLike[str]
T = TypeVar("T")


# For this transaction only (is_local): a transaction pooler hands the server
# connection on at COMMIT, the setting gone with it.
_SET_TENANT = Prepared.only_on(
    "postgresql",
    lambda: text(f"SELECT set_config('{SETTING}', :tenant, true)").bindparams(
        bindparam("tenant", type_=String())
    ),
)


def as_tenant(work: Work[T], tenant: str, database: str) -> Work[T]:
    """``work`` in a transaction whose first statement sets its tenant (one statement
    more, no more transactions), for a ``Database(row_level_security=True)``.

    The default tenant is refused: under the policies it is the owner's (see above)."""
    if tenant == DEFAULT_TENANT:
        raise UserError(
            f"{database}: row_level_security=True holds every store to a named tenant; "
            "the default tenant ('') is the tables' owner's (docs/tenants.md)"
        )
    return functools.partial(_set_then, work, {"tenant": tenant})


def _set_then(work: Work[T], params: Mapping[str, str], conn: Connection) -> T:
    _SET_TENANT.execute(conn, params)
    return work(conn)


class RowSecurity(NamedTuple):
    """One table's state: row-level security on, forced on its owner, our policy there."""

    enabled: bool
    forced: bool
    policy: bool


def tenant_tables() -> list[Table]:
    """Our tables with a ``tenant`` column (every one but the version table's)."""
    return [table for table in metadata.sorted_tables if "tenant" in table.c]


async def enable_row_level_security(
    target: Target | AsyncEngine,
    *,
    roles: str | Sequence[str] | None = None,
    force: bool = False,
) -> list[str]:
    """Turn on row-level security and our tenant policy on every tenant table, in
    one transaction; run it again after each upgrade (it is idempotent).

    ``roles``: the roles the policy admits, one tenant at a time (default:
    ``PUBLIC``, every role); any other role but the owner sees no row at all.
    ``force``: the owner is held to the policy too. Run as the tables' owner (or a
    superuser); it takes each table's exclusive lock for a moment, as a migration
    does. Returns the tables' names. PostgreSQL only (a ``UserError`` elsewhere).
    """
    if not isinstance(force, bool):
        raise UserError(f"force is True or False, not {force!r}")
    granted = _roles(roles)

    def work(conn: Connection) -> list[str]:
        quote = conn.dialect.identifier_preparer.quote
        to = ", ".join("PUBLIC" if role is None else quote(role) for role in granted)
        names = []
        for table, name in _placed(conn):
            names.append(table.name)
            conn.exec_driver_sql(f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY")
            conn.exec_driver_sql(
                f"ALTER TABLE {name} {'' if force else 'NO '}FORCE ROW LEVEL SECURITY"
            )
            # Dropped and created again: an earlier policy (other roles) is replaced whole.
            conn.exec_driver_sql(f"DROP POLICY IF EXISTS {quote(POLICY)} ON {name}")
            conn.exec_driver_sql(
                f"CREATE POLICY {quote(POLICY)} ON {name} AS PERMISSIVE FOR ALL TO {to} "
                f"USING {_CONDITION} WITH CHECK {_CONDITION}"
            )
        return names

    return await _on_postgresql(target, work, "enable")


async def disable_row_level_security(target: Target | AsyncEngine) -> list[str]:
    """Undo ``enable_row_level_security``: drop our policy, turn row-level security
    off on every tenant table (idempotent). Returns the tables' names."""

    def work(conn: Connection) -> list[str]:
        quote = conn.dialect.identifier_preparer.quote
        names = []
        for table, name in _placed(conn):
            names.append(table.name)
            conn.exec_driver_sql(f"DROP POLICY IF EXISTS {quote(POLICY)} ON {name}")
            conn.exec_driver_sql(f"ALTER TABLE {name} NO FORCE ROW LEVEL SECURITY")
            conn.exec_driver_sql(f"ALTER TABLE {name} DISABLE ROW LEVEL SECURITY")
        return names

    return await _on_postgresql(target, work, "disable")


async def row_level_security_status(target: Target | AsyncEngine) -> dict[str, RowSecurity]:
    """Each tenant table's state, by name (for ``lovia-store tenants rls status``)."""
    query = text(
        "SELECT c.relrowsecurity, c.relforcerowsecurity, EXISTS (SELECT 1 FROM pg_policy p "
        "WHERE p.polrelid = c.oid AND p.polname = :policy) FROM pg_class c "
        "WHERE c.oid = to_regclass(:name)"
    )

    def work(conn: Connection) -> dict[str, RowSecurity]:
        found = {}
        for table, name in _placed(conn):
            row = conn.execute(query, {"policy": POLICY, "name": name}).one()
            found[table.name] = RowSecurity(*map(bool, row))
        return found

    return await _on_postgresql(target, work, "read")


def _roles(roles: str | Sequence[str] | None) -> list[str | None]:
    """The roles to name in the policy (None: ``PUBLIC``), refused when not names."""
    if roles is None:
        return [None]
    listed = [roles] if isinstance(roles, str) else roles
    if not isinstance(listed, Sequence) or not listed:
        raise UserError(f"roles is a role name or a non-empty list of them, not {roles!r}")
    for role in listed:
        if not isinstance(role, str) or not role or "\x00" in role:
            raise UserError(f"a role is a non-empty name, not {role!r}")
    return list(listed)


def _placed(conn: Connection) -> list[tuple[Table, str]]:
    """Each tenant table with its quoted name, in the Database's schema if it has one."""
    preparer = conn.dialect.identifier_preparer
    schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    prefix = f"{preparer.quote_schema(schema)}." if schema else ""
    return [(table, prefix + preparer.quote(table.name)) for table in tenant_tables()]


async def _on_postgresql(
    target: Target | AsyncEngine, work: Callable[[Connection], T], what: str
) -> T:
    """Run ``work`` as one transaction of the tables' owner, on PostgreSQL only."""
    db, owned = as_database(target)
    try:
        if db.dialect != "postgresql":
            raise UserError(
                f"{db.url}: row-level security is PostgreSQL's; {db.dialect} has none "
                f"(cannot {what} it)"
            )
        await db.ensure_schema()
        return await db.write_unchecked(work)
    finally:
        if owned:
            await db.close()
