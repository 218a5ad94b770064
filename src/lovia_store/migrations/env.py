"""Alembic environment for lovia-store.

Two ways in. From code (``lovia_store.upgrade``, a store's first use) the
caller's connection arrives in ``config.attributes["connection"]``, already
inside the transaction that holds the migration lock, and migrations run on it
in the caller's event loop. From the ``alembic`` command line there is no
connection: the URL comes from ``-x url=...``, ``$LOVIA_STORE_URL`` or
``sqlalchemy.url``, and the same locked procedure runs in a fresh loop;
``-x schema=...`` (or ``$LOVIA_STORE_SCHEMA``) names the PostgreSQL schema our
tables live in, as ``Database(schema=...)`` does.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context

import lovia_store.db.mysql_ddl  # noqa: F401  (our primary keys unnamed on MySQL)
from lovia_store.db.schema import configure_context, run_command_line

config = context.config
connection = config.attributes.get("connection")

if connection is not None:
    configure_context(context, connection)
    with context.begin_transaction():
        context.run_migrations()
else:
    # The command line's own run: its ini's [loggers] say what to print (Alembic's
    # "Running upgrade" lines), if it has a logging configuration at all (an ini
    # may hold only [alembic]). Never from code: the application owns logging there.
    sections = ("loggers", "handlers", "formatters")
    if config.config_file_name is not None and all(
        config.file_config.has_section(name) for name in sections
    ):
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    x = context.get_x_argument(as_dictionary=True)
    url = (
        x.get("url")
        or os.environ.get("LOVIA_STORE_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise SystemExit("no database URL: pass -x url=... or set LOVIA_STORE_URL")
    schema = x.get("schema") or os.environ.get("LOVIA_STORE_SCHEMA") or None
    asyncio.run(run_command_line(context, url, schema))
