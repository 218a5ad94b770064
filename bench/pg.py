"""The scratch PostgreSQL database: reachability, reset per trial, server settings."""

from __future__ import annotations

import asyncpg

from bench.backends import PgTarget


def _admin_dsn(target: PgTarget) -> str:
    return f"postgresql://{target.user}@{target.host}:{target.port}/postgres"


async def reachable(target: PgTarget) -> str | None:
    """``None`` when the server answers, else why not."""
    try:
        conn = await asyncpg.connect(_admin_dsn(target), timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close()
    return None


async def reset_database(target: PgTarget) -> None:
    """Drop and recreate the scratch database, so every trial starts empty."""
    conn = await asyncpg.connect(_admin_dsn(target))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{target.database}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{target.database}"')
    finally:
        await conn.close()


async def server_info(target: PgTarget) -> dict[str, str]:
    """Version and the settings that decide durability and commit latency."""
    conn = await asyncpg.connect(_admin_dsn(target))
    try:
        info = {"version": str(await conn.fetchval("SHOW server_version"))}
        for name in (
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "full_page_writes",
            "shared_buffers",
        ):
            info[name] = str(await conn.fetchval(f"SHOW {name}"))
        return info
    finally:
        await conn.close()


async def drop_database(target: PgTarget) -> None:
    """Remove the scratch database after the last trial."""
    conn = await asyncpg.connect(_admin_dsn(target))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{target.database}" WITH (FORCE)')
    finally:
        await conn.close()
