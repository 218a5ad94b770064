"""``tenants rls enable|disable|status``: PostgreSQL's row-level security on our tables.

Its own module, imported only when ``tenants`` runs: the policies' SQL lives in
``lovia_store.db.row_security`` (docs/tenants.md).
"""

from __future__ import annotations

import asyncio

import click

from ..db.database import Database
from ..db.row_security import (
    POLICY,
    SETTING,
    RowSecurity,
    disable_row_level_security,
    enable_row_level_security,
    row_level_security_status,
)
from .options import URL_HELP, default_url, json_option, schema_option, url_argument
from .output import Output

__all__ = ["rls_group", "tenants_command"]


@click.group("tenants", short_help="Tenants: row-level security on PostgreSQL.")
def tenants_command() -> None:
    """What a database does for its tenants (docs/tenants.md)."""


@tenants_command.group("rls", short_help="Row-level security policies on PostgreSQL.")
def rls_group() -> None:
    """PostgreSQL's row-level security on lovia-store's tables: a role that owns none of
    them sees only the rows of the tenant its transaction set (lovia.tenant)."""


def _open(url: str | None, schema: str | None) -> Database:
    return Database(url or default_url(), schema=schema)


def _states(found: dict[str, RowSecurity]) -> list[dict[str, object]]:
    return [{"table": name, **state._asdict()} for name, state in found.items()]


@rls_group.command("enable", short_help="Hold every tenant table to its tenant.", epilog=URL_HELP)
@url_argument
@schema_option
@click.option(
    "--role",
    "roles",
    multiple=True,
    metavar="ROLE",
    help="A role the policy admits (repeatable; default: every role, PUBLIC).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Hold the tables' owner to the policy too (then its migrations and all-tenant "
    "maintenance see nothing either).",
)
@json_option
@click.pass_obj
def enable_command(
    output: Output,
    url: str | None,
    schema: str | None,
    roles: tuple[str, ...],
    force: bool,
    as_json: bool,
) -> int:
    """Turn on row-level security and the tenant policy on every tenant table of the
    PostgreSQL database at URL, as its owner; idempotent: run it after each upgrade."""
    output.json_mode = as_json

    async def run() -> tuple[str, list[str]]:
        async with _open(url, schema) as db:
            tables = await enable_row_level_security(db, roles=list(roles) or None, force=force)
            return db.url, tables

    database, tables = asyncio.run(run())
    if as_json:
        output.json(
            {
                "status": "ok",
                "database": database,
                "policy": POLICY,
                "setting": SETTING,
                "roles": list(roles) or ["PUBLIC"],
                "force": force,
                "tables": tables,
            }
        )
    else:
        output.print(f"row-level security on for {len(tables)} tables ({', '.join(tables)})")
    return 0


@rls_group.command("disable", short_help="Drop the tenant policy.", epilog=URL_HELP)
@url_argument
@schema_option
@json_option
@click.pass_obj
def disable_command(output: Output, url: str | None, schema: str | None, as_json: bool) -> int:
    """Drop the tenant policy and turn row-level security off on every tenant table."""
    output.json_mode = as_json

    async def run() -> tuple[str, list[str]]:
        async with _open(url, schema) as db:
            return db.url, await disable_row_level_security(db)

    database, tables = asyncio.run(run())
    if as_json:
        output.json({"status": "ok", "database": database, "tables": tables})
    else:
        output.print(f"row-level security off for {len(tables)} tables")
    return 0


@rls_group.command("status", short_help="Show each tenant table's state.", epilog=URL_HELP)
@url_argument
@schema_option
@json_option
@click.pass_obj
def status_command(output: Output, url: str | None, schema: str | None, as_json: bool) -> int:
    """Show, for each tenant table, whether row-level security is on, forced on its
    owner, and the tenant policy there."""
    output.json_mode = as_json

    async def run() -> tuple[str, dict[str, RowSecurity]]:
        async with _open(url, schema) as db:
            return db.url, await row_level_security_status(db)

    database, found = asyncio.run(run())
    if as_json:
        output.json({"status": "ok", "database": database, "tables": _states(found)})
    else:
        for name, state in found.items():
            words = "on" if state.enabled else "off"
            words += ", forced" if state.forced else ""
            words += ", policy" if state.policy else ", no policy"
            output.print(f"{name}: {words}")
    return 0
