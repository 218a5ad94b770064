"""The host app's Alembic environment: its own tables and its own ``alembic_version``.

lovia-store shares this database with its own lineage: tables named ``lovia_*``
and its version table ``lovia_alembic_version``. ``include_name`` hides them
from this app's autogenerate, so ``alembic revision --autogenerate`` and
``alembic check`` never propose dropping them.

Two ways in, as in the Alembic cookbook: from code (``host_app.migrate``) a
connection arrives in ``config.attributes["connection"]``; from the command
line the URL comes from ``-x url=...`` or ``$HOST_APP_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from host_app.models import Base
from sqlalchemy import Connection, pool
from sqlalchemy.ext.asyncio import create_async_engine

config = context.config
if config.config_file_name is not None and "connection" not in config.attributes:
    fileConfig(config.config_file_name)


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Leave lovia-store's tables (and its version table) to lovia-store."""
    if type_ == "table":
        return not (name or "").startswith("lovia_")
    return True


def database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get(
        "HOST_APP_DATABASE_URL"
    )
    if not url:
        raise SystemExit("no database URL: pass -x url=... or set HOST_APP_DATABASE_URL")
    return url


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        include_name=include_name,
        render_as_batch=True,  # ALTERs on SQLite
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_online() -> None:
    engine = create_async_engine(database_url(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_migrations)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=database_url(), target_metadata=Base.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif (shared := config.attributes.get("connection")) is not None:
    run_migrations(shared)
else:
    asyncio.run(run_online())
