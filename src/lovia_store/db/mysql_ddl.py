"""Our primary keys render without a name on MySQL and MariaDB.

The naming convention (and Alembic's ``<version table>_pkc``) names every
primary key, which PostgreSQL and SQLite keep. MySQL's primary key is always
called ``PRIMARY``: it drops the name and raises a note for it, which asyncmy
prints, ten lines on a first migration. Only our tables (``lovia_…``) render
differently; a host's DDL is left as SQLAlchemy renders it. Imported by the
migrations' env, so every way of migrating uses it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import PrimaryKeyConstraint
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import DDLCompiler

__all__: list[str] = []

TABLE_PREFIX = "lovia_"


def _ours(constraint: PrimaryKeyConstraint) -> bool:
    try:
        return constraint.table.name.startswith(TABLE_PREFIX)
    except InvalidRequestError:  # not attached to a table
        return False


@compiles(PrimaryKeyConstraint, "mysql")
@compiles(PrimaryKeyConstraint, "mariadb")
def _unnamed_primary_key(element: PrimaryKeyConstraint, compiler: DDLCompiler, **kw: Any) -> str:
    rendered: str = compiler.visit_primary_key_constraint(element, **kw)
    if element.name is not None and _ours(element):
        preamble = f"CONSTRAINT {compiler.preparer.format_constraint(element)} "
        rendered = rendered.removeprefix(preamble)
    return rendered
